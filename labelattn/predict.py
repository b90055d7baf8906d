"""`labelattn predict MODEL DATA`: the predicted label and every class probability of every row of a corpus.

labelattn predict models/trec-embedding trec --output out/trec.parquet
labelattn predict models/trec-embedding tickets.csv --text-column body --id-column ticket_id --output out/t.jsonl
labelattn predict models/trec-embedding tickets.csv --target-accuracy 0.95 --output out/t.csv   # + a manual column
labelattn predict models/icd10-cm-embedding notes.csv --target-accuracy 0.95 --fallback --top-k 5   # + coded_level
labelattn predict models/icd10-cm-embedding notes.jsonl --top-k 5 --output out/n.parquet  # 5 best of 1,918 codes
labelattn predict models/icd10-cm-embedding notes.jsonl --top-k 5 --mixed-precision bf16  # 1.35-1.6x here
accelerate launch --num_processes 8 -m labelattn predict MODEL tickets.parquet --output out/t.parquet

`--target-accuracy A` (with a threshold that `labelattn train` chose on the validation split, stored in the model's
coding.json) or `--manual-below P` adds a `manual` column: true for the rows a person should code, those whose
probability is below the threshold (for a multi-label model, the least sure yes/no decision); the command prints
how many. With `--fallback`, a model trained on grouped labels (ICD-10-CM's chapters, blocks and categories) codes
a row it is unsure of at a coarser level instead, where that level's probability (the sum of its classes') reaches
the threshold `labelattn train` chose for it on the validation rows the finer levels left: the columns
`coded_level`, `coded_label` and `coded_probability` say where, and `manual` marks the rows no level codes.

The rows are computed in shards written to `<output>.shards/` as they are made; the same command run again after
an interruption skips the finished shards.
"""

import argparse
import sys
from typing import TYPE_CHECKING

from labelattn.arguments import MIXED_PRECISION, add_model_arguments
from labelattn.corpus.options import DATA_HELP, add_corpus_arguments

if TYPE_CHECKING:  # datasets loads when the command runs, so that --help stays fast
    import datasets


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
    parser.add_argument(
        "--top-k",
        type=int,
        metavar="K",
        help="write the K most probable classes of each text (`top_labels`, `top_probabilities`, most probable "
        "first) in place of one `prob_<label>` column per class: for models of many classes, whose columns cost "
        "more to write than to compute (ICD-10-CM: 1,918)",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default 32)")
    parser.add_argument(
        "--mixed-precision",
        choices=MIXED_PRECISION,
        default="no",
        help="compute the forward passes under torch.autocast in bf16 or fp16, the weights as saved: faster where "
        "the hardware multiplies in that precision (a GPU; a CPU with AVX-512 BF16 or AMX: 1.35-1.6x at 1,918 "
        "classes), the probabilities within its rounding of float32's (default: no)",
    )
    manual = parser.add_mutually_exclusive_group()
    manual.add_argument(
        "--target-accuracy",
        type=float,
        metavar="A",
        help="add a `manual` column: true where the probability is below the threshold that `labelattn train` chose "
        "on the validation split for accuracy A on the rest (0.8, 0.85, 0.9, 0.95, 0.97, 0.98 or 0.99)",
    )
    manual.add_argument(
        "--manual-below",
        type=float,
        metavar="P",
        help="add a `manual` column: true where the probability is below P, strictly between 0 and 1",
    )
    parser.add_argument(
        "--fallback",
        action="store_true",
        help="with --target-accuracy 0.95 or 0.97, for a model trained on grouped labels: code a row below the "
        "classes' threshold at the finest coarser level whose probability reaches that level's threshold (columns "
        "coded_level, coded_label, coded_probability); `manual` then marks the rows no level codes",
    )
    add_model_arguments(parser)


def manual_threshold(args: argparse.Namespace) -> tuple[float, str] | None:
    """The probability below which a row goes to a person, and what it is, from --manual-below or
    --target-accuracy (read from the model's coding.json); None when neither is given."""
    from labelattn import coding

    if args.manual_below is not None:
        return coding.check_probability(args.manual_below, "--manual-below"), "--manual-below"
    if args.target_accuracy is None:
        return None
    threshold = coding.stored_threshold(coding.read_coding(args.model, args.revision), args.target_accuracy, args.model)
    return threshold, f"the threshold for {args.target_accuracy:.0%} accuracy chosen on validation"


def fallback_thresholds(args: argparse.Namespace) -> list[tuple[str, float | None]] | None:
    """With --fallback, the levels (the classes' first) and the thresholds `labelattn train` chose for them for
    --target-accuracy, read from the model's coding.json; None without --fallback."""
    from labelattn import coding

    if not args.fallback:
        return None
    if args.target_accuracy is None:
        raise coding.CodingError(
            "--fallback uses the thresholds `labelattn train` chose for a target accuracy: give --target-accuracy "
            "0.95 or 0.97 with it."
        )
    return coding.stored_fallback(coding.read_coding(args.model, args.revision), args.target_accuracy, args.model)


def print_fallback_rows(dataset: "datasets.Dataset", fallback: list[tuple[str, float | None]], target: float) -> None:
    """How many rows each level codes and how many are left to a person (error rows are counted apart)."""
    import pyarrow.compute as pc

    coded = {
        count["values"]: count["counts"] for count in pc.value_counts(dataset.data.column("coded_level")).to_pylist()
    }
    manual = dataset.data.column("manual")
    shares = ", ".join(f"{coded.get(level, 0)} at {level}" for level, _ in fallback)
    print(
        f"labelattn: of {len(dataset) - manual.null_count} row(s), {shares}; {pc.sum(manual).as_py() or 0} to code "
        f"by hand (`manual` column): each level's threshold for {target:.0%} accuracy chosen on validation",
        file=sys.stderr,
    )


def print_manual_rows(dataset: "datasets.Dataset", threshold: float, source: str) -> None:
    """How many rows the `manual` column sends to a person (error rows, with no probability, are counted apart)."""
    import pyarrow.compute as pc

    from labelattn.coding import shown

    manual = dataset.data.column("manual")
    count, rows = pc.sum(manual).as_py() or 0, len(dataset) - manual.null_count
    share = f" ({count / rows:.1%})" if rows else ""
    print(
        f"labelattn: {count} of {rows} row(s){share} to code by hand (`manual` column): probability below "
        f"{shown(threshold)}, {source}",
        file=sys.stderr,
    )


def run(args: argparse.Namespace) -> int:
    from labelattn.corpus.command import checked_output, open_corpus_run, run_to_file

    # A bad threshold or target, or a fallback the model has no thresholds for, is refused before anything is read
    # or written.
    fallback = fallback_thresholds(args)
    manual = None if fallback else manual_threshold(args)
    output = checked_output(args, "predictions", "")
    dataset, model, tokenizer = open_corpus_run(args, output)
    from labelattn.corpus.jobs import predict_job  # after the output's check: it loads torch
    from labelattn.corpus.process_state import process_state

    job = predict_job(
        model,
        tokenizer,
        batch_size=args.batch_size,
        max_length=args.max_length,
        threshold=args.threshold,
        long_text=args.long_text,
        manual_below=manual[0] if manual else None,
        top_k=args.top_k,
        fallback=fallback,
        mixed_precision=args.mixed_precision,
    )
    report = run_to_file(job, dataset, output, args)
    if manual and process_state().is_main_process:
        print_manual_rows(report.dataset, *manual)
    if fallback and process_state().is_main_process:
        print_fallback_rows(report.dataset, fallback, args.target_accuracy)
    return 0
