"""The run the two corpus commands share (`labelattn predict` and `labelattn explain --data`), from their parsed
options (declared in `labelattn.corpus.options`) to the output file: checking the output (`checked_output`) and
reading DATA (`open_corpus_run`) before any work, then running a job to the file (`run_to_file`, see
`labelattn.corpus.jobs`)."""

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from labelattn.corpus.options import FORMATS

if TYPE_CHECKING:  # datasets and torch load when a command runs, so that --help stays fast
    import datasets
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from labelattn.corpus.jobs import CorpusReport, Job


def load_corpus(data: str, split: str | None) -> "datasets.Dataset":
    """DATA as one `datasets.Dataset`, every column kept: a built-in data set (all rows with `id`, `text`,
    `label`, or its published split), a file, or a `datasets` folder."""
    import datasets

    from labelattn.data.builtin import builtin_named
    from labelattn.data.reading import load_data
    from labelattn.data.records import DataError
    from labelattn.data.tables import load_table

    builtin = builtin_named(data)
    if builtin is not None:
        if split is None:
            raw = builtin.read()
            return datasets.Dataset.from_dict({"id": raw.ids, "text": raw.texts, "label": raw.labels})
        splits = load_data(data).splits
        if split not in splits:
            raise DataError(f"--split {split!r}: the built-in {data} has the splits {list(splits)}.")
        return splits[split]
    path = Path(data)
    table, _ = load_table(path)
    if isinstance(table, datasets.DatasetDict):
        if split is None or split not in table:
            raise DataError(f"{path} holds the splits {list(table)}: choose one with --split NAME.")
        return table[split]
    if split is not None:
        raise DataError(f"{path} has no splits: drop --split.")
    return table


def output_path(args: argparse.Namespace, kind: str, name: str) -> Path:
    """--output, checked, or the default `outputs/<kind>/<data name>.parquet`."""
    if args.output is None:
        stem = Path(args.data.rstrip("/")).stem + (f"-{args.split}" if args.split else "")
        return Path("outputs") / kind / f"{stem}{name}.parquet"
    if args.output.suffix.lower() not in FORMATS:
        raise ValueError(f"--output {args.output}: end the file name with one of {list(FORMATS)} to pick the format.")
    return args.output


def shard_folder(output: Path) -> Path:
    return output.with_name(output.name + ".shards")


def check_output(output: Path, data: str, overwrite: bool) -> None:
    """Before any work: the output must not be the input, its folder must be one this process can write in, and
    an existing output file that no run of ours made (no shard folder beside it) is replaced only with
    --overwrite."""
    from labelattn.corpus.shards import check_writable

    source = Path(data)
    if source.exists() and output.resolve() == source.resolve():
        raise FileExistsError(f"--output {output} is the input file: choose another output.")
    if output.is_dir():
        raise FileExistsError(f"--output {output} is a folder: give a file name ending in one of {list(FORMATS)}.")
    check_writable(output.parent)
    if output.exists() and not shard_folder(output).exists() and not overwrite:
        raise FileExistsError(f"{output} exists and is not the output of a run here: pass --overwrite to replace it.")


def model_and_tokenizer(args: argparse.Namespace) -> "tuple[PreTrainedModel, PreTrainedTokenizerBase]":
    """The classifier and its tokenizer, on this process's device under `accelerate launch`."""
    from labelattn.arguments import classifier_from_arguments
    from labelattn.corpus.process_state import process_state

    return classifier_from_arguments(args, device=process_state().device)


def checked_output(args: argparse.Namespace, kind: str, name: str) -> Path:
    """The output path (`output_path(args, kind, name)`), refused first, before torch loads, where it cannot be
    written: a refusal here takes no time."""
    output = output_path(args, kind, name)
    check_output(output, args.data, args.overwrite)
    return output


def open_corpus_run(
    args: argparse.Namespace, output: Path
) -> "tuple[datasets.Dataset, PreTrainedModel, PreTrainedTokenizerBase]":
    """What `labelattn predict` and `explain --data` check and load, once `checked_output` has passed, in this order,
    before any work: the corpus, its columns and whether the output's format holds their values, then the model.
    Returns `(dataset, model, tokenizer)`."""
    from labelattn.corpus.files import check_values_fit
    from labelattn.corpus.jobs import check_columns

    dataset = load_corpus(args.data, args.split)
    check_columns(dataset, args.text_column, args.text_pair_column, args.id_column)
    check_values_fit(dataset, output)
    return (dataset, *model_and_tokenizer(args))


def run_to_file(job: "Job", dataset: "datasets.Dataset", output: Path, args: argparse.Namespace) -> "CorpusReport":
    """Run `job` over `dataset` in shards beside `output`, as the command's corpus arguments say; then the main
    process writes `output` from the shards and the report line."""
    from labelattn.corpus.files import save
    from labelattn.corpus.jobs import CorpusOptions, run_job
    from labelattn.corpus.process_state import process_state

    options = CorpusOptions(
        output_dir=shard_folder(output),
        text_column=args.text_column,
        text_pair_column=args.text_pair_column,
        id_column=args.id_column,
        shard_size=args.shard_size,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        protected=(Path(args.data),) if Path(args.data).exists() else (),
        **({"max_chars": args.max_chars} if args.max_chars is not None else {}),
    )
    report = run_job(job, dataset, options)
    state = process_state()
    if state.is_main_process:
        save(report.dataset, output)
        print(f"labelattn: {report.summary()}; wrote {output}", file=sys.stderr)
        errors, first = report.errors()
        if errors:
            print(
                f"labelattn: {errors} row(s) kept with the reason in their error column; the first: {first}",
                file=sys.stderr,
            )
    state.wait_for_everyone()
    return report
