"""The output file of a corpus run: every value written as it was read, or its column refused before any work.

A column of mixed types (a number among texts, `n` = 1 and "two", a nested `meta.a` of both) comes from `datasets`
in its `Json` type, each value as it was written. JSONL holds each such value as itself, and CSV as its text (lists
and dicts as JSON), but a Parquet column holds one type: written there, its values would become JSON texts (the
text `Who?` read back as `"Who?"`, with its quotes). Such a column is refused for a Parquet output, naming it, its
types and a row of each, before the run computes anything (`check_values_fit`), and again by `save` itself.
"""

import csv
import json
import os
from pathlib import Path
from typing import Any

import datasets

from labelattn.corpus.shards import CorpusError


def mixed_columns(features: datasets.Features) -> list[str]:
    """The paths of the columns of mixed types (`Json`), nested ones too: `meta.a`, `tags[]`."""

    def paths(feature: Any, path: str) -> list[str]:
        if isinstance(feature, datasets.Json):
            return [path]
        if isinstance(feature, dict):
            return [found for name, inner in feature.items() for found in paths(inner, f"{path}.{name}")]
        if isinstance(feature, datasets.List | datasets.LargeList | datasets.Sequence):
            return paths(feature.feature, f"{path}[]")
        return []

    return [found for name, feature in features.items() for found in paths(feature, name)]


def first_rows_by_type(dataset: datasets.Dataset, path: str) -> dict[str, int]:
    """The types of the values at `path` (as `mixed_columns` names it), each with the first row that holds one."""
    top, *parts = path.replace("[]", ".[]").split(".")

    def leaves(value: Any, rest: list[str]) -> list[Any]:
        if value is None or not rest:
            return [value]
        if rest[0] == "[]":
            return [leaf for item in value for leaf in leaves(item, rest[1:])]
        return leaves(value.get(rest[0]), rest[1:])

    first: dict[str, int] = {}
    for row, value in enumerate(dataset.with_format(None)[top]):
        for leaf in leaves(value, parts):
            if leaf is not None:
                first.setdefault(type(leaf).__name__, row)
    return first


def check_values_fit(dataset: datasets.Dataset, path: Path) -> None:
    """Refuse an output file that could not hold every value of `dataset` as it was read: a Parquet file for a
    column of mixed types. Names the column, its types with a row of each, and the formats that hold them."""
    if Path(path).suffix.lower() != ".parquet":
        return
    for column in mixed_columns(dataset.features):
        kinds = ", ".join(f"{kind} (row {row})" for kind, row in first_rows_by_type(dataset, column).items())
        raise CorpusError(
            f"--output {path}: the column {column!r} holds values of several types ({kinds}), and a Parquet column "
            "holds one type, so they cannot be written as they were read: write the output as .jsonl (every value as "
            "it was read) or .csv, or give the column one type in the input."
        )


def save(dataset: datasets.Dataset, path: str | Path, batch_rows: int = 1000) -> Path:
    """Write `dataset` to `path` in the format of its extension, `batch_rows` rows at a time: `.parquet` (nested
    lists as lists), `.jsonl` (one JSON object per line), `.csv` (lists and dicts as JSON strings). The file is
    written under a temporary name and renamed, so that it is never seen half-written. Refuses, before writing, a
    format that cannot hold every value as it was read (`check_values_fit`)."""
    import pyarrow.parquet as pq

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".jsonl", ".csv"):
        raise CorpusError(f"{path}: end the file name with .parquet, .jsonl or .csv to pick the format.")
    check_values_fit(dataset, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name of this process's own: a second run writing the same output cannot interleave with this one.
    temporary = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    if suffix == ".parquet":
        table = dataset.with_format("arrow")
        with pq.ParquetWriter(temporary, dataset.features.arrow_schema) as writer:
            for start in range(0, len(dataset), batch_rows):
                writer.write_table(table[start : start + batch_rows].cast(dataset.features.arrow_schema))
    else:
        with temporary.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=dataset.column_names) if suffix == ".csv" else None
            if writer is not None:
                writer.writeheader()
            # Decoded by `datasets`: a column of mixed types (`Json`) is written as its values, not as JSON texts.
            for batch in dataset.with_format(None).iter(batch_size=batch_rows):
                for row in (dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True)):
                    if writer is None:
                        handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                    else:
                        writer.writerow({k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in row.items()})
    os.replace(temporary, path)
    return path
