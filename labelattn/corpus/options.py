"""The command-line options the two corpus commands share (`labelattn predict` and `labelattn explain --data`),
declared once; `labelattn.corpus.command` runs what they say."""

import argparse
from pathlib import Path

from labelattn.arguments import add_overwrite_argument, add_text_column_argument

# The output formats, by the file's extension (`labelattn.corpus.files.save` writes each).
FORMATS = (".parquet", ".jsonl", ".csv")

DATA_HELP = (
    "a built-in data set (trec, trec-fine, bbc-news, icd10-cm: every row, or --split), a .csv, .jsonl or .parquet "
    "file, or a folder saved by datasets (save_to_disk)"
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
    add_text_column_argument(parser)
    parser.add_argument(
        "--text-pair-column", metavar="NAME", help="column of the second texts of pairs (NLI, question-passage)"
    )
    parser.add_argument(
        "--id-column",
        metavar="NAME",
        help="a column that names each row: put right after `row` in the output, and named in error messages",
    )
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
        "--long-text",
        choices=["truncate", "windows"],
        default="truncate",
        help="a text longer than --max-length: truncate (read its start) or windows (read it all, in overlapping "
        "windows whose logits are averaged; every word explained once) (default: truncate)",
    )
    parser.add_argument(
        "--shard-size",
        type=int,
        default=1000,
        help="rows per shard: the unit of work, of resuming and of the split across processes (default 1000)",
    )
    parser.add_argument(
        "--max-chars",
        type=int,
        metavar="N",
        help="the longest text a row may hold, in characters: a longer one becomes an error row saying so, and the "
        "other rows are computed (default: 10,000,000, about 1.6 million words)",
    )
    add_overwrite_argument(
        parser,
        "the results of a run with other settings at --output (deletes only that run's own files, never the input)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
