"""`labelattn predict MODEL DATA`: the predicted label and every class probability of every row of a corpus.

labelattn predict models/trec-embedding trec --output out/trec.parquet
labelattn predict models/trec-embedding tickets.csv --text-column body --id-column ticket_id --output out/t.jsonl
accelerate launch --num_processes 8 -m labelattn predict MODEL tickets.parquet --output out/t.parquet

The rows are computed in shards written to `<output>.shards/` as they are made; the same command run again after
an interruption skips the finished shards.
"""

# This module also holds what `labelattn explain --data` shares with it: reading DATA, the options of a corpus
# run, and writing the output file.

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # datasets and torch load in `run` only, so that --help stays fast
    import datasets

    from .corpus import CorpusReport, Job

FORMATS = (".parquet", ".jsonl", ".csv")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    parser.add_argument("model", help="a text classifier: a local folder or a Hub id in the cache (any architecture)")
    parser.add_argument("data", help=f"the rows to predict: {DATA_HELP}")
    add_corpus_arguments(parser, default_output="outputs/predictions/<data>.parquet")
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="multi-label models: the probability from which a label is predicted (default 0.5)",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default 32)")


DATA_HELP = (
    "a built-in data set (trec, bbc-news: every row, or --split), a .csv, .jsonl or .parquet file, or a folder "
    "saved by datasets (save_to_disk)"
)


def add_corpus_arguments(parser: argparse.ArgumentParser, default_output: str) -> None:
    """The options every corpus command shares (predict, explain --data)."""
    parser.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help=f"the output file; its extension picks the format: .parquet (nested lists), .jsonl, or .csv (lists as "
        f"JSON strings). Shards and the run's settings go to FILE.shards/ (default: {default_output})",
    )
    parser.add_argument("--text-column", default="text", help="column of the texts (default: text)")
    parser.add_argument(
        "--text-pair-column", metavar="NAME", help="column of the second texts of pairs (NLI, question-passage)"
    )
    parser.add_argument("--id-column", metavar="NAME", help="a column that names each row, put first in the output")
    parser.add_argument(
        "--split", help="for a built-in data set or a datasets folder with splits: read this split only"
    )
    parser.add_argument(
        "--max-length",
        type=int,
        metavar="TOKENS",
        help="longest input (default: all the model reads); longer texts are cut and marked in the `truncated` column",
    )
    parser.add_argument(
        "--shard-size",
        type=int,
        default=1000,
        help="rows per shard: the unit of work, of resuming and of the split across processes (default 1000)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the results of a run with other settings at --output "
        "(deletes only that run's own files, never the input)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


# --------------------------------------------------------------------------------------------------- data


def load_corpus(data: str, split: str | None) -> "datasets.Dataset":
    """DATA as one `datasets.Dataset`, every column kept: a built-in data set (all rows with `id`, `text`,
    `label`, or its published split), a file, or a `datasets` folder."""
    import datasets

    from .data import BUILTIN, DataError, load_data, load_table

    if data in BUILTIN and not Path(data).exists():
        if split is None:
            raw = BUILTIN[data][0]()
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
    """Before any work: the output must not be the input, and an existing output file that no run of ours made
    (no shard folder beside it) is replaced only with --overwrite."""
    source = Path(data)
    if source.exists() and output.resolve() == source.resolve():
        raise FileExistsError(f"--output {output} is the input file: choose another output.")
    if output.exists() and not shard_folder(output).exists() and not overwrite:
        raise FileExistsError(f"{output} exists and is not the output of a run here: pass --overwrite to replace it.")


def model_and_tokenizer(name: str):
    """The classifier and its tokenizer, on this process's device under `accelerate launch`."""
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    from explainers import load_classifier

    device = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU")).device
    return load_classifier(name, device=device)


def run_to_file(
    job: "Job", model, dataset: "datasets.Dataset", output: Path, args: argparse.Namespace
) -> "CorpusReport":
    """Run `job` over `dataset` in shards beside `output`, as the command's corpus arguments say; then the main
    process writes `output` from the shards and the report line."""
    from accelerate import PartialState

    from .corpus import run_job, save

    report = run_job(
        job,
        model,
        dataset,
        shard_folder(output),
        args.text_column,
        args.text_pair_column,
        args.id_column,
        args.shard_size,
        args.overwrite,
        progress=not args.no_progress,
        protected=[Path(args.data)] if Path(args.data).exists() else [],
    )
    if PartialState().is_main_process:
        save(report.dataset, output)
        print(f"labelattn: {report.summary()}; wrote {output}", file=sys.stderr)
    PartialState().wait_for_everyone()
    return report


# --------------------------------------------------------------------------------------------------- the command


def run(args: argparse.Namespace) -> int:
    from .corpus import check_columns, predict_job

    output = output_path(args, "predictions", "")
    check_output(output, args.data, args.overwrite)
    dataset = load_corpus(args.data, args.split)
    check_columns(dataset, args.text_column, args.text_pair_column, args.id_column)
    model, tokenizer = model_and_tokenizer(args.model)
    job = predict_job(model, tokenizer, args.batch_size, args.max_length, args.threshold)
    run_to_file(job, model, dataset, output, args)
    return 0
