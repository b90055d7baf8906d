"""The output file of a corpus run: every value written as it was read, or its column refused before any work.

A column of mixed types (a number among texts, `n` = 1 and "two", a nested `meta.a` of both) comes from `datasets`
in its `Json` type, each value as it was written. JSONL holds each such value as itself, and CSV as its text (lists
and dicts as JSON), but a Parquet column holds one type: written there, its values would become JSON texts (the
text `Who?` read back as `"Who?"`, with its quotes). Such a column is refused for a Parquet output, naming it, its
types and a row of each, before the run computes anything (`check_values_fit`), and again by `save` itself.

JSON has no type for dates, times, durations and decimals, and CSV only text: JSONL and CSV write them as their ISO
8601 text (`2024-05-01T09:30:00`) and their exact decimal text (`1.10`), which read back to the same value. Bytes
have no text at all (Python's `b'\x00'` would be a different value): a column of bytes is refused for them, like a
mixed column for Parquet.
"""

import csv
import datetime
import decimal
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets

from labelattn.corpus.options import FORMATS
from labelattn.corpus.shards import CorpusError


def columns_where(features: datasets.Features, kind: Callable[[Any], bool]) -> list[str]:
    """The paths of the columns whose feature is of `kind`, nested ones too: `meta.a`, `tags[]`."""

    def paths(feature: Any, path: str) -> list[str]:
        if kind(feature):
            return [path]
        if isinstance(feature, dict):
            return [found for name, inner in feature.items() for found in paths(inner, f"{path}.{name}")]
        if isinstance(feature, datasets.List | datasets.LargeList | datasets.Sequence):
            return paths(feature.feature, f"{path}[]")
        return []

    return [found for name, feature in features.items() for found in paths(feature, name)]


def is_mixed(feature: Any) -> bool:
    """A column of mixed types, which `datasets` reads as `Json`."""
    return isinstance(feature, datasets.Json)


def is_bytes(feature: Any) -> bool:
    return isinstance(feature, datasets.Value) and feature.dtype in ("binary", "large_binary")


def first_rows_by_type(dataset: datasets.Dataset, path: str) -> dict[str, int]:
    """The types of the values at `path` (as `columns_where` names it), each with the first row that holds one."""
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
    column of mixed types, a JSONL or CSV file for a column of bytes. Names the column and the formats that hold
    it."""
    if Path(path).suffix.lower() != ".parquet":
        for column in columns_where(dataset.features, is_bytes):
            raise CorpusError(
                f"--output {path}: the column {column!r} holds bytes, which have no text that JSONL or CSV could "
                "hold: write the output as .parquet, or drop the column from the input."
            )
        return
    for column in columns_where(dataset.features, is_mixed):
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
    if suffix not in FORMATS:
        raise CorpusError(f"{path}: end the file name with one of {list(FORMATS)} to pick the format.")
    check_values_fit(dataset, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name of this process's own: a second run writing the same output cannot interleave with this one.
    temporary = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        if suffix == ".parquet":
            table = dataset.with_format("arrow")
            with pq.ParquetWriter(temporary, dataset.features.arrow_schema) as writer:
                for start in range(0, len(dataset), batch_rows):
                    writer.write_table(table[start : start + batch_rows].cast(dataset.features.arrow_schema))
        else:
            write_text_rows(dataset, temporary, suffix, batch_rows)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


# The values that JSON and CSV hold as text: dates and times (datetimes too) as ISO 8601, the others as `str`.
AS_TEXT = (datetime.date, datetime.time, datetime.timedelta, decimal.Decimal)


def as_text(value: Any) -> str:
    """A date, time, duration or decimal as the text that reads back to it (`json.dumps`'s `default`)."""
    if not isinstance(value, AS_TEXT):
        raise TypeError(f"a {type(value).__name__} has no JSON form")
    return value.isoformat() if isinstance(value, datetime.date | datetime.time) else str(value)


def write_text_rows(dataset: datasets.Dataset, path: Path, suffix: str, batch_rows: int) -> None:
    """`dataset` as JSONL (one object a line) or CSV (lists and dicts as JSON, dates as ISO 8601)."""
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=dataset.column_names) if suffix == ".csv" else None
        if writer is not None:
            writer.writeheader()
        # Decoded by `datasets`: a column of mixed types (`Json`) is written as its values, not as JSON texts.
        for batch in dataset.with_format(None).iter(batch_size=batch_rows):
            for row in (dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True)):
                if writer is None:
                    handle.write(json.dumps(row, ensure_ascii=False, default=as_text) + "\n")
                    continue
                writer.writerow({name: csv_cell(value) for name, value in row.items()})


def csv_cell(value: Any) -> Any:
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False, default=as_text)
    return as_text(value) if isinstance(value, AS_TEXT) else value
