"""Tables from users' files: CSV, JSONL, Parquet or a `datasets` folder, read as written (every CSV cell the
string it is, a JSONL column of mixed types kept as written), and every problem `datasets` would report without a
line (a broken line, an integer beyond 64 bits, a lone surrogate) named with its file and line first."""

import csv
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import datasets

from labelattn.data.records import (
    DataError,
)

# How `_scan_jsonl` names the JSON types that `datasets` keeps apart.
JSON_KINDS = {bool: "true/false", int: "an integer", float: "a number with a fraction", str: "a string"}
JSON_KINDS |= {list: "a list", dict: "an object"}


# A lone surrogate can reach a UTF-8 file only as a JSON escape (\\ud800): only a line holding one is searched.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def _scan_jsonl(path: Path) -> dict[str, dict[str, int]]:
    """Every line read once, before `datasets` reads the file, for what it would report without a line number, or
    read differently past its first block: a broken line, a line that is not an object, no rows at all, an integer
    beyond 64 bits, a lone surrogate. Returns, for each column of more than one JSON type (nested ones too: `meta.a`,
    `tags[]`), the first line of each type."""
    from explainers.words import surrogate_problem

    kinds: dict[str, dict[str, int]] = {}

    def walk(value, column: str, number: int, strings: bool) -> None:
        kind = JSON_KINDS.get(type(value))
        if kind is None:  # null
            return
        found = kinds.setdefault(column, {})
        if kind not in found:
            found[kind] = number
        if kind == "an integer" and not -(2**63) <= value < 2**63:
            # Arrow's JSON reader would make the whole column float64 for it, rounding every id above 2**53.
            raise DataError(
                f"{path}, line {number}, {column!r}: the integer {str(value)[:30]} is beyond a signed 64-bit "
                'integer, which would turn the whole column into rounded floats: write it as a string ("...").'
            )
        if strings and kind == "a string" and (problem := surrogate_problem(value)) is not None:
            raise DataError(f"{path}, line {number}, {column!r}: the string {problem}.")
        if kind == "an object":
            for key, item in value.items():
                walk(item, f"{column}.{key}", number, strings)
        elif kind == "a list":
            for item in value:
                walk(item, f"{column}[]", number, strings)

    rows = 0
    with path.open(encoding="utf-8-sig") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            rows += 1
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise DataError(
                    f"{path}, line {number}: not valid JSON ({error.msg}); write one JSON object per line."
                ) from None
            if not isinstance(row, dict):
                raise DataError(f'{path}, line {number}: expected a JSON object like {{"text": ..., "label": ...}}.')
            strings = SURROGATE_ESCAPE.search(line) is not None
            for column, value in row.items():
                walk(value, column, number, strings)
    if not rows:
        raise DataError(f'{path} holds no rows: write one JSON object per line, like {{"text": ..., "label": ...}}.')
    return {column: found for column, found in kinds.items() if len(found) > 1}


def _mixed_types(mixed: dict[str, dict[str, int]]) -> str:
    """The columns of several types, each type with its first line: "'text' holds a string (line 1) and a list
    (line 3)"."""
    return "; ".join(
        f"{column!r} holds " + " and ".join(f"{kind} (line {line})" for kind, line in found.items())
        for column, found in list(mixed.items())[:3]
    )


def load_table(path: Path) -> tuple[datasets.Dataset | datasets.DatasetDict, Callable[[int], str]]:
    """Load one file (.csv, .jsonl, .parquet) or `datasets` folder with `datasets`, and how to name its rows in
    messages.

    Text files may start with a UTF-8 byte order mark (Excel writes one). Every CSV cell is read as the string it
    is. A JSONL column is read as given: one whose values differ in type (a number among strings, a dict among
    numbers) comes in `datasets`' `Json` type, each value as it was written, so that a row with the number 1984 as
    its text is that row's problem alone (its stored arrow values are JSON texts: decode them, as `datasets` does),
    wherever in the file it stands. What `datasets` would report without a line (a broken line, an integer beyond 64
    bits, a lone surrogate) is found first, with its line.
    """
    if not path.exists():
        from labelattn.data.builtin import BUILTIN  # here: the data sets' readers load when one is named

        raise FileNotFoundError(
            f"{path} does not exist: pass a .csv, .jsonl or .parquet file, a datasets folder or one of "
            f"{sorted(BUILTIN)}."
        )
    suffix, mixed = path.suffix.lower(), {}
    try:
        if path.is_dir():
            return datasets.load_from_disk(str(path)), lambda i: f"row {i + 1}"
        if suffix == ".csv":
            table = datasets.load_dataset(
                "csv", data_files=str(path), split="train", encoding="utf-8-sig", **_csv_as_strings(path)
            )
            return table, lambda i: f"row {i + 1} (line {i + 2}, counting the header)"
        if suffix in (".jsonl", ".json"):
            mixed = _scan_jsonl(path)
            # `datasets` gives a column of several types its `Json` type (each value as written) only when it sees
            # them in one block: past its first, it would read 5 among texts as the text "5". One block, then.
            whole = {"chunksize": path.stat().st_size + 1} if mixed else {}
            table = datasets.load_dataset("json", data_files=str(path), split="train", encoding="utf-8-sig", **whole)
            return table, lambda i: f"line {i + 1}"
        if suffix == ".parquet":
            return datasets.load_dataset("parquet", data_files=str(path), split="train"), lambda i: f"row {i + 1}"
    except DataError:
        raise
    except (ValueError, OSError, datasets.exceptions.DatasetGenerationError) as error:
        cause = error.__cause__ or error
        if mixed:
            raise DataError(
                f"{path} could not be read: {_mixed_types(mixed)}, and `datasets` could not read these types "
                f"in one column ({type(cause).__name__}: {str(cause)[:200]}); give each column one type."
            ) from None
        raise DataError(f"{path} could not be read ({type(cause).__name__}: {cause}); fix the file's format.") from None
    raise DataError(f"{path}: unknown file type {path.suffix!r}; use .csv, .jsonl, .parquet or a datasets folder.")


def _csv_as_strings(path: Path) -> dict:
    """Options that read every cell of a CSV file as the string it is: pandas would otherwise read a text "10000"
    as a number and a label "None" or "NA" as missing. Only an empty cell is missing."""
    # A cell may be a whole document: the csv module's default limit (131,072 characters) is not the file's.
    csv.field_size_limit(sys.maxsize)
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        header, first_row = next(reader, None), next(reader, None)
    if not header:
        raise DataError(f"{path} is empty: write a header row (e.g. text,label), then one row per text.")
    if first_row is None:
        raise DataError(f"{path} has a header ({','.join(header)}) but no rows: add one row per text below it.")
    features = datasets.Features({name: datasets.Value("string") for name in header})
    return {"features": features, "keep_default_na": False, "na_values": [""]}


def require_column(table: datasets.Dataset, origin: str, role: str, column: str) -> None:
    if column not in table.column_names:
        raise DataError(
            f"{origin} has no {role} column {column!r}; its columns are {table.column_names}: "
            f"pass --{role}-column NAME."
        )
