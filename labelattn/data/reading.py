"""Labelled texts for training: CSV, JSONL or a local `datasets` folder, or a built-in data set by name.

Everything ends as one `LabelledData`: a `datasets.DatasetDict` with the splits `train`, `validation` and `test`,
each with the columns `id` (int), `text` (str) and `label` (a class index, or for multi-label a list of them),
the class names, and what the model card needs to say about the data. Every check a user's file can fail
happens here, before any model is built, and names the file and the row.
"""

import csv
import hashlib
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import datasets
import numpy as np
from datasets.utils.stratify import stratified_shuffle_split_generate_indices

from labelattn.data.records import (
    HELD_OUT,
    SPLIT_SEED,
    SPLITS,
    DataError,
    DataSource,
    Hierarchy,
    LabelledData,
    RawSplit,
    natural_key,
)


def _some(names: list, shown: int = 5) -> str:
    """A few names and how many there are: a message stays readable with 1,918 classes."""
    listed = ", ".join(repr(name) for name in names[:shown])
    return listed if len(names) <= shown else f"{listed} and {len(names) - shown:,} more ({len(names):,} in all)"


def _builtin(data: str):
    """The built-in data set named `data` (a `labelattn.data.builtin.Builtin`), or None: a file of that name wins."""
    from labelattn.data.builtin import BUILTIN  # here: the data sets' readers load when one is named

    return None if Path(data).exists() else BUILTIN.get(data)


def _check_jsonl(path: Path) -> None:
    """`datasets` reports a broken JSON line without its number, and an empty file obscurely: find them first."""
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
    if not rows:
        raise DataError(f'{path} holds no rows: write one JSON object per line, like {{"text": ..., "label": ...}}.')


def load_table(path: Path) -> tuple[datasets.Dataset | datasets.DatasetDict, Callable[[int], str]]:
    """Load one file (.csv, .jsonl, .parquet) or `datasets` folder with `datasets`, and how to name its rows in
    messages.

    Text files may start with a UTF-8 byte order mark (Excel writes one). Every CSV cell is read as the string it
    is. A JSONL column is read as given: one whose values differ in type (a number among strings, a dict among
    numbers) comes in `datasets`' `Json` type, each value as it was written, so that a row with the number 1984 as
    its text is that row's problem alone (its stored arrow values are JSON texts: decode them, as `datasets` does).
    """
    if not path.exists():
        from labelattn.data.builtin import BUILTIN

        raise FileNotFoundError(
            f"{path} does not exist: pass a .csv, .jsonl or .parquet file, a datasets folder or one of "
            f"{sorted(BUILTIN)}."
        )
    try:
        if path.is_dir():
            return datasets.load_from_disk(str(path)), lambda i: f"row {i + 1}"
        suffix = path.suffix.lower()
        if suffix == ".csv":
            table = datasets.load_dataset(
                "csv", data_files=str(path), split="train", encoding="utf-8-sig", **_csv_as_strings(path)
            )
            return table, lambda i: f"row {i + 1} (line {i + 2}, counting the header)"
        if suffix in (".jsonl", ".json"):
            _check_jsonl(path)
            table = datasets.load_dataset("json", data_files=str(path), split="train", encoding="utf-8-sig")
            return table, lambda i: f"line {i + 1}"
        if suffix == ".parquet":
            return datasets.load_dataset("parquet", data_files=str(path), split="train"), lambda i: f"row {i + 1}"
    except DataError:
        raise
    except (ValueError, OSError, datasets.exceptions.DatasetGenerationError) as error:
        cause = error.__cause__ or error
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


def _require_column(table: datasets.Dataset, origin: str, role: str, column: str) -> None:
    if column not in table.column_names:
        raise DataError(
            f"{origin} has no {role} column {column!r}; its columns are {table.column_names}: "
            f"pass --{role}-column NAME."
        )


def _check_text(where: str, text) -> None:
    if text is not None and not isinstance(text, str):
        raise DataError(
            f"{where}: the text is not a string ({text!r}, of type {type(text).__name__}); write it as a string "
            "(in quotes, in JSON)."
        )
    if text is None or not text.strip():
        raise DataError(f"{where}: the text is empty ({text!r}); remove the row or fill it in.")


def _raw_split(
    table: datasets.Dataset, origin: str, row_name: Callable[[int], str], text_column: str, label_column: str, sep: str
) -> RawSplit:
    _require_column(table, origin, "text", text_column)
    _require_column(table, origin, "label", label_column)
    labels = table[label_column][:]
    # Class indices stored with their names (a ClassLabel, or a list of them for multi-label): use the names.
    feature = table.features[label_column]
    names = getattr(feature, "feature", feature)
    if isinstance(names, datasets.ClassLabel):
        labels = [names.int2str(value) if feature is names else [names.int2str(v) for v in value] for value in labels]
    if sep:
        labels = [value.split(sep) if isinstance(value, str) else value for value in labels]
    raw = RawSplit(origin, list(range(len(table))), table[text_column][:], labels, row_name)
    if not raw.texts:
        raise DataError(f"{origin} holds no rows.")
    return raw


def _read_files(paths: dict[str, str], text_column: str, label_column: str, sep: str) -> dict[str, RawSplit]:
    """One `RawSplit` per given split; the training folder, a DatasetDict, may give several at once (the split
    files given beside it win)."""
    raw = {}
    for split, given in paths.items():
        table, row_name = load_table(Path(given))
        if isinstance(table, datasets.DatasetDict) and split != "train":
            # --validation-data / --test-data: that split of the folder, never its other splits.
            if split not in table:
                raise DataError(f"{given} holds the splits {list(table)}, not {split!r}: pass one that has it.")
            raw[split] = _raw_split(table[split], f"{given} [{split}]", row_name, text_column, label_column, sep)
        elif isinstance(table, datasets.DatasetDict):
            unknown = set(table) - set(SPLITS)
            if unknown or "train" not in table:
                raise DataError(
                    f"{given} holds the splits {list(table)}; expected 'train' and optionally {SPLITS[1:]}."
                )
            for name, part in table.items():
                raw[name] = _raw_split(part, f"{given} [{name}]", row_name, text_column, label_column, sep)
        else:
            raw[split] = _raw_split(table, given, row_name, text_column, label_column, sep)
    return raw


# --------------------------------------------------------------------------------------------------- classes


def _label_paths(raw: dict[str, RawSplit], separator: str) -> dict[str, tuple[str, ...]]:
    """Labels written with their groups, top-down (`A00-B99 > A00-A09 > A00` with the separator `>`): each label
    becomes its last part, and each class gets its groups, which must be the same on every row."""
    ancestors: dict[str, tuple[str, ...]] = {}
    first_row: dict[str, str] = {}
    for part in raw.values():
        for i, label in enumerate(part.labels):
            values = label if isinstance(label, list | tuple) else [label]
            leaves = []
            for value in values:
                if value is None or (isinstance(value, str) and not value.strip()):
                    leaves.append(value)  # a missing label: `_check` names the row
                    continue
                if not isinstance(value, str):
                    raise DataError(
                        f"{part.where(i)}: the label {value!r} is a {type(value).__name__}; with a hierarchy "
                        f"separator {separator!r}, write each label as a string such as 'GROUP{separator}CLASS'."
                    )
                *groups, leaf = (piece.strip() for piece in value.split(separator))
                if not leaf or not all(groups):
                    raise DataError(f"{part.where(i)}: the label {value!r} has an empty part between separators.")
                known = ancestors.setdefault(leaf, tuple(groups))
                first_row.setdefault(leaf, part.where(i))
                if known != tuple(groups):
                    raise DataError(
                        f"{part.where(i)}: class {leaf!r} is under {' > '.join(groups) or 'no group'} here but under "
                        f"{' > '.join(known) or 'no group'} in {first_row[leaf]}: give a class the same groups on "
                        "every row."
                    )
                leaves.append(leaf)
            part.labels[i] = leaves if isinstance(label, list | tuple) else leaves[0]
    return ancestors


def _read_label_file(path: str) -> tuple[dict[str, str | None] | None, dict[str, str] | None]:
    """A label file: one row per class or group, with the column `label` and a `parent` column (empty for a group
    at the top), a `description` column or both. The parent of each name and the descriptions (each None without
    its column)."""
    table, row_name = load_table(Path(path))
    if isinstance(table, datasets.DatasetDict):
        raise DataError(f"{path} holds the splits {list(table)}: a label file is one table.")
    columns = set(table.column_names)
    if "label" not in columns or not columns & {"parent", "description"}:
        raise DataError(
            f"{path} has the columns {table.column_names}; a label file has the column `label` and a `parent` "
            "column (each class's group, each group's own group), a `description` column, or both."
        )
    empty = [None] * len(table)
    parents: dict[str, str | None] = {}
    descriptions: dict[str, str] = {}
    row_of: dict[str, str] = {}
    for i, (label, parent, description) in enumerate(
        zip(
            table["label"][:],
            table["parent"][:] if "parent" in columns else empty,
            table["description"][:] if "description" in columns else empty,
            strict=True,
        )
    ):
        where = f"{path}, {row_name(i)}"
        names = [_label_names(value) for value in (label, parent)]
        if _label_kind(label) not in ("string", "integer") or not names[0]:
            raise DataError(f"{where}: the label {label!r} is not a class or group name; write one per row.")
        if parent is not None and (_label_kind(parent) not in ("string", "integer")):
            raise DataError(f"{where}: the parent {parent!r} is not a group name; write one, or leave it empty.")
        name = names[0][0]
        if name in row_of:
            raise DataError(f"{where}: {name!r} has a row already ({row_of[name]}); give each name one row.")
        row_of[name] = where
        parents[name] = names[1][0] if names[1] else None
        if parents[name] == name:
            raise DataError(f"{where}: {name!r} is its own parent; name each group apart from its classes.")
        if description is not None and not isinstance(description, str):
            raise DataError(f"{where}: the description {description!r} is not a string.")
        if description is not None and description.strip():
            descriptions[name] = description.strip()
    return (parents if "parent" in columns else None), (descriptions if "description" in columns else None)


def _ancestors_from_parents(parents: dict[str, str | None], names: list[str], origin: str) -> dict[str, tuple]:
    missing = [name for name in names if name not in parents]
    if missing:
        raise DataError(
            f"{origin} has no row for the class(es) {_some(missing)} of the training data: add a row "
            "`label,parent` for each."
        )
    ancestors = {}
    for name in names:
        chain, node = [name], name
        while parents.get(node) is not None:
            node = parents[node]
            if node in chain:
                raise DataError(f"{origin}: the parents of {name!r} go round in a circle ({' > '.join(chain)}).")
            chain.append(node)
        ancestors[name] = tuple(reversed(chain[1:]))
    return ancestors


def _hierarchy(
    ancestors: dict[str, tuple[str, ...]], levels: list[str] | None, descriptions: dict[str, str], origin: str
) -> Hierarchy:
    """The `Hierarchy` of classes with these groups (top-down), checked to be a tree of one depth."""
    by_depth: dict[int, list[str]] = {}
    for name, groups in ancestors.items():
        by_depth.setdefault(len(groups), []).append(name)
    if set(by_depth) == {0}:
        raise DataError(f"{origin}: no class has a group above it; give each class its groups, or drop the option.")
    if len(by_depth) > 1:
        counts = "; ".join(f"{len(v):,} with {d} group(s) above: {_some(v, 3)}" for d, v in sorted(by_depth.items()))
        raise DataError(
            f"{origin}: the classes sit at different depths ({counts}); give every class a group at every level."
        )
    depth = next(iter(by_depth)) + 1
    levels = list(levels) if levels else [f"level {k}" for k in range(1, depth + 1)]
    if len(levels) != depth:
        raise DataError(
            f"The hierarchy levels {levels} name {len(levels)} level(s); the classes of {origin} and their groups "
            f"make {depth}: name them from the top down, the classes' own level last."
        )
    group_descriptions: dict[str, dict[str, str]] = {}
    for groups in ancestors.values():
        for level, group in zip(levels, groups, strict=False):
            if group in descriptions:
                group_descriptions.setdefault(level, {})[group] = descriptions[group]
    return Hierarchy(levels, ancestors, group_descriptions)


# --------------------------------------------------------------------------------------------------- checks


def _label_kind(value) -> str | None:
    """ "list" (multi-label), "string" or "integer"; None for a missing label; "other" for anything else."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return "list" if all(_label_kind(v) in ("string", "integer") for v in value) else "other"
    if isinstance(value, str):
        return "string"
    return "integer" if isinstance(value, int) and not isinstance(value, bool) else "other"


def _is_multi_label(raw: dict[str, RawSplit]) -> bool:
    """Decide from every row of every split whether the labels are lists (multi-label) or single labels, and refuse
    a label of another type or a mixture of kinds, naming the rows that differ from the most common kind."""
    rows_of_kind: dict[str, list[str]] = {}
    for part in raw.values():
        for i, label in enumerate(part.labels):
            kind = _label_kind(label)
            if kind == "other":
                raise DataError(
                    f"{part.where(i)}: the label {label!r} is of type {type(label).__name__}; a label is a string "
                    "or an integer, or for multi-label data a list of them."
                )
            if kind is not None:
                rows_of_kind.setdefault(kind, []).append(f"{part.where(i)} ({label!r})")
    if len(rows_of_kind) > 1:
        usual = max(rows_of_kind, key=lambda kind: len(rows_of_kind[kind]))
        stray = [row for kind, rows in rows_of_kind.items() if kind != usual for row in rows]
        listed = "; ".join(stray[:5]) + (f"; and {len(stray) - 5} more" if len(stray) > 5 else "")
        raise DataError(
            f"The labels mix kinds ({', '.join(f'{len(rows)} {kind}' for kind, rows in rows_of_kind.items())}); "
            f"these rows differ from the usual {usual} labels: {listed}. Write every label the same way: one "
            "string per row, or a list of labels per row for multi-label data."
        )
    return "list" in rows_of_kind


def _label_names(value) -> list[str]:
    values = value if isinstance(value, list | tuple) else [value]
    return [str(v).strip() for v in values if v is not None and str(v).strip()]


def _check(raw: dict[str, RawSplit], multi_label: bool, described: list[str] = ()) -> tuple[list[str], list[str]]:
    """Every row has a text and a label, the training data has 2+ classes and, with the `described` classes
    (which may have no training row), covers every label: the class names, and those without training rows."""
    for part in raw.values():
        for i, (text, label) in enumerate(zip(part.texts, part.labels, strict=True)):
            if not isinstance(text, str) or not text.strip():
                _check_text(part.where(i), text)
            if not _label_names(label) and not multi_label:
                raise DataError(f"{part.where(i)}: the label is missing ({label!r}); every row needs one.")
    train = raw["train"]
    names = sorted({n for label in train.labels for n in _label_names(label)}, key=natural_key)
    if len(names) < 2:
        raise DataError(
            f"{train.origin}: the training data has a single class {names}; a classifier needs at least two."
        )
    untrained = sorted(set(described) - set(names), key=natural_key)
    known = set(names) | set(untrained)
    for part in raw.values():
        for i, label in enumerate(part.labels):
            unseen = [n for n in _label_names(label) if n not in known]
            if unseen:
                raise DataError(
                    f"{part.where(i)}: label {unseen[0]!r} never occurs in the training data (its classes: "
                    f"{_some(names)}); the model cannot learn it: fix the label, add training rows with it, or "
                    "describe it in a --label-file and train with --label-descriptions."
                )
    return sorted(known, key=natural_key), untrained


# --------------------------------------------------------------------------------------------------- splitting

# A class with fewer rows than this (or groups of rows, for grouped data) is kept in the training split only: a
# stratified split needs two to hold one out, and a third keeps one for training after both held-out splits.
MIN_SPLIT_UNITS = 3


def _encode(part: RawSplit, names: list[str], multi_label: bool) -> datasets.Dataset:
    index = {name: i for i, name in enumerate(names)}
    if multi_label:
        labels = [sorted(index[n] for n in _label_names(label)) for label in part.labels]
        label_feature = datasets.List(datasets.ClassLabel(names=names))
    else:
        labels = [index[_label_names(label)[0]] for label in part.labels]
        label_feature = datasets.ClassLabel(names=names)
    features = datasets.Features(
        {"id": datasets.Value("int64"), "text": datasets.Value("string"), "label": label_feature}
    )
    return datasets.Dataset.from_dict({"id": part.ids, "text": part.texts, "label": labels}, features=features)


def _units(part: RawSplit) -> list[list[int]]:
    """The rows that go to a split together: each row alone, or the rows of each group, in order of appearance."""
    if part.groups is None:
        return [[i] for i in range(len(part.ids))]
    rows: dict = {}
    for i, group in enumerate(part.groups):
        rows.setdefault(group, []).append(i)
    return list(rows.values())


def _hold_out(pool: np.ndarray, strata: np.ndarray | None, split: str, size: int, seed: int, unit: str):
    """Split `size` units off `pool` (unit numbers), stratified by `strata` (their stratum indices) unless None:
    what `datasets.Dataset.train_test_split(test_size=size, seed=seed, stratify_by_column=...)` does, through the
    function it calls, given the strata as an array (the method reads its column row by row: 70 s for ICD-10-CM's
    75,000 codes). The rest of the pool, then the units taken, in the order the method gives them."""
    rng = np.random.default_rng(seed)
    try:
        if size < 1:
            raise ValueError(f"too few {unit}s: 10% of them rounds to {size}")
        if size >= len(pool):
            raise ValueError(f"only {len(pool):,} {unit}s belong to classes with {MIN_SPLIT_UNITS} or more")
        if strata is None:
            permutation = rng.permutation(len(pool))
            rest, held = permutation[size:], permutation[:size]
        else:
            rest, held = next(stratified_shuffle_split_generate_indices(strata, len(pool) - size, size, rng=rng))
    except ValueError as error:
        raise DataError(
            f"Cannot hold out a {'stratified ' if strata is not None else ''}{split} split of {size:,} {unit}s "
            f"({error}); give the classes more rows (a class with fewer than {MIN_SPLIT_UNITS} stays in training) "
            f"or pass a --{split}-data file."
        ) from None
    return rest, held


def _split_off(
    part: RawSplit, table: datasets.Dataset, held_out: list[str], names: list[str], multi_label: bool, seed: int
) -> tuple[dict[str, datasets.Dataset], dict]:
    """Hold the splits `held_out` out of the training rows: 10% of the units (rows, or groups) each, the test split
    first, stratified by class (or `part.strata`) when single-label. Classes with fewer than `MIN_SPLIT_UNITS`
    units stay in training; a random (multi-label) split that leaves a class no training row gets one of its
    held-out units back. The splits, and what the split record says about them."""
    units = _units(part)
    labels = table["label"][:]
    classes = [set().union(*(set(labels[i]) if multi_label else {labels[i]} for i in rows)) for rows in units]
    count = Counter(c for unit_classes in classes for c in unit_classes)
    scarce = {c for c, n in count.items() if n < MIN_SPLIT_UNITS}
    eligible = [u for u, unit_classes in enumerate(classes) if not unit_classes & scarce]
    strata = None
    if not multi_label:
        # A group's stratum is that of its first row; a stratum with too few groups (a class whose texts are
        # shared with another class's codes) keeps them in training too.
        named = part.strata or [names[label] for label in labels]
        stratum_of = {u: named[units[u][0]] for u in eligible}
        enough = {s for s, n in Counter(stratum_of.values()).items() if n >= MIN_SPLIT_UNITS}
        eligible = [u for u in eligible if stratum_of[u] in enough]
        index = {name: i for i, name in enumerate(sorted(enough, key=natural_key))}
        strata = np.array([index[stratum_of[u]] for u in eligible], dtype=np.int64)
    pool = np.array(eligible, dtype=np.int64)
    unit = "row" if part.groups is None else "group"
    taken: dict[str, list[int]] = {}
    for split in held_out:  # the test split first, so that it does not depend on the validation fraction
        rest, held = _hold_out(pool, strata, split, round(HELD_OUT[split] * len(units)), seed, unit)
        taken[split] = pool[held].tolist()
        pool, strata = pool[rest], None if strata is None else strata[rest]
    in_pool = set(eligible)
    taken["train"] = pool.tolist() + [u for u in range(len(units)) if u not in in_pool]
    trained = set().union(*(classes[u] for u in taken["train"]))
    returned: set[int] = set()
    for split in held_out:
        staying = []
        for u in taken[split]:
            if classes[u] <= trained:
                staying.append(u)
            else:
                returned |= classes[u] - trained
                trained |= classes[u]
                taken["train"].append(u)
        taken[split] = staying
    splits = {split: table.select([i for u in taken[split] for i in units[u]]) for split in taken}
    record = {
        "stratified_by": None if multi_label else (part.stratum_name or "class"),
        "grouped_by": part.group_name or None,
        "train_only_classes": sorted((names[c] for c in scarce), key=natural_key),
        "returned_to_train": sorted((names[c] for c in returned), key=natural_key),
    }
    return splits, record


def _ids_digest(ids: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, sorted(ids))).encode()).hexdigest()[:16]


def build_splits(
    raw: dict[str, RawSplit],
    names: list[str],
    source: DataSource,
    multi_label: bool,
    seed: int,
    hierarchy: Hierarchy | None = None,
    descriptions: dict[str, str] | None = None,
) -> LabelledData:
    """The `LabelledData` of checked rows (`names`: their classes, from `_check`), the missing splits held out."""
    if hierarchy is not None and set(hierarchy.ancestors) != set(names):
        extra, missing = set(hierarchy.ancestors) - set(names), set(names) - set(hierarchy.ancestors)
        raise DataError(
            f"The hierarchy's classes differ from the data's: {len(missing)} without groups "
            f"({_some(sorted(missing))}), {len(extra)} not in the training data ({_some(sorted(extra))})."
        )
    encoded = {split: _encode(part, names, multi_label) for split, part in raw.items()}
    held_out = [s for s in ("test", "validation") if s not in encoded]
    record: dict = {"seed": seed, "held_out": held_out, "stratified": not multi_label}
    if held_out:
        parts, how = _split_off(raw["train"], encoded["train"], held_out, names, multi_label, seed)
        encoded.update(parts)
        record.update(how)
    splits = datasets.DatasetDict({split: encoded[split] for split in SPLITS})
    record["sizes"] = {split: len(splits[split]) for split in SPLITS}
    record["ids_sha256"] = {split: _ids_digest(splits[split]["id"][:]) for split in SPLITS}
    if descriptions is not None:
        descriptions = {name: descriptions[name] for name in names if name in descriptions}
    return LabelledData(splits, names, multi_label, source, record, hierarchy, descriptions)


def load_data(
    data: str = "trec",
    validation: str | None = None,
    test: str | None = None,
    text_column: str = "text",
    label_column: str = "label",
    label_separator: str = "",
    seed: int = SPLIT_SEED,
    hierarchy_separator: str = "",
    label_file: str | None = None,
    hierarchy_levels: list[str] | None = None,
    described_classes: bool = False,
) -> LabelledData:
    """The data set `data` (a built-in name such as `"trec"`, or a CSV / JSONL file / `datasets` folder),
    split into train/validation/test.

    Splits not given (as files, or inside a `datasets` folder) are held out of the training data, stratified by
    class with `seed`: 10% of the rows for validation and 10% for test; a class with fewer than 3 rows stays in
    training (`split_record["train_only_classes"]`). A label column holding lists (JSONL, `datasets`), or strings
    split by `label_separator` (CSV), makes the data multi-label.

    Classes in a hierarchy, from the top down: labels written with their groups, split by `hierarchy_separator`
    (`"Neoplasms > Breast > C50"` with `">"`), or a `label_file` (.csv, .jsonl, ...) with the columns `label` and
    `parent` (a class's group, a group's own group; empty at the top). `hierarchy_levels` names the levels, top
    first (default `level 1`, `level 2`, ...). A `description` column of the label file gives class descriptions
    (and group descriptions). With `described_classes`, every class the label file describes is a class of the
    model even without training rows (`split_record["untrained_classes"]`): its validation and test rows are
    then scored, not refused (`labelattn train --label-descriptions` gives such a class its query from its
    description).
    """
    builtin = _builtin(data)
    if builtin is not None:
        options = {
            "--validation-data/--test-data": validation or test,
            "--hierarchy-separator": hierarchy_separator,
            "--label-file": label_file,
            "--hierarchy-levels": hierarchy_levels,
        }
        if any(options.values()):
            raise DataError(
                f"The built-in data set {data!r} has its own fixed split and classes; drop "
                f"{', '.join(option for option, value in options.items() if value)}."
            )
        raw = {"train": builtin.read()}
        return build_splits(raw, _check(raw, False)[0], builtin.source, False, seed, *builtin.classes())
    if hierarchy_separator and hierarchy_separator == label_separator:
        raise DataError(f"The label separator and the hierarchy separator are both {label_separator!r}: pick two.")
    given = {"train": data, "validation": validation, "test": test}
    raw = _read_files({k: v for k, v in given.items() if v}, text_column, label_column, label_separator)
    multi_label = _is_multi_label(raw)
    paths = _label_paths(raw, hierarchy_separator) if hierarchy_separator else None
    parents, descriptions = _read_label_file(label_file) if label_file else (None, None)
    names, untrained = _check(raw, multi_label, _described_classes(parents, descriptions) if described_classes else [])
    if untrained and paths is not None:
        raise DataError(
            f"The described classes {_some(untrained)} have no training rows, so their groups are written nowhere: "
            f"give every class's group in a parent column of {label_file} instead of a hierarchy separator."
        )
    origin = f"the labels of {data}"
    hierarchy = _hierarchy_of(names, paths, origin, parents, label_file, hierarchy_levels, descriptions)
    description = f"Labelled texts from {', '.join(sorted({str(v) for v in given.values() if v}))}."
    source = DataSource(name=Path(data).stem, description=description, license="unknown")
    splits = build_splits(raw, names, source, multi_label, seed, hierarchy, descriptions)
    if untrained:
        splits.split_record["untrained_classes"] = untrained
    return splits


def _described_classes(parents: dict[str, str | None] | None, descriptions: dict[str, str] | None) -> list[str]:
    """The classes a label file describes: every described name that is no other name's group."""
    groups = {parent for parent in (parents or {}).values() if parent is not None}
    return [name for name in descriptions or {} if name not in groups]


def _hierarchy_of(
    names: list[str],
    paths: dict[str, tuple[str, ...]] | None,
    paths_origin: str,
    parents: dict[str, str | None] | None,
    label_file: str | None,
    levels: list[str] | None,
    descriptions: dict[str, str] | None,
) -> Hierarchy | None:
    """The hierarchy of a user's classes (or None): from the groups written in the labels (`paths`) or the label
    file's parents, with the label file's group descriptions."""
    if parents is not None and paths is not None:
        raise DataError(
            f"The groups come twice: from the labels (a hierarchy separator) and from the parent column of "
            f"{label_file}: give them one way."
        )
    if parents is not None:
        ancestors, origin = _ancestors_from_parents(parents, names, label_file), label_file
    elif paths is not None:
        ancestors, origin = {name: paths[name] for name in names}, paths_origin
    elif levels:
        raise DataError(
            "Hierarchy levels are named, but the data has no hierarchy: pass a hierarchy separator or a label file "
            "with a parent column."
        )
    else:
        return None
    return _hierarchy(ancestors, levels, descriptions or {}, origin)


def load_texts(data: str = "trec", text_column: str = "text") -> list[str]:
    """Every text of `data` (a built-in name, or a CSV / JSONL file / `datasets` folder) in its own order, without
    labels and without splitting: what measuring explanations on a whole file needs."""
    builtin = _builtin(data)
    if builtin is not None:
        return list(builtin.read().texts)
    table, row_name = load_table(Path(data))
    whole = not isinstance(table, datasets.DatasetDict)
    parts = [(data, table)] if whole else [(f"{data} [{s}]", table[s]) for s in SPLITS if s in table]
    texts = []
    for origin, part in parts:
        _require_column(part, origin, "text", text_column)
        for i, text in enumerate(part[text_column][:]):
            _check_text(f"{origin}, {row_name(i)}", text)
            texts.append(text)
    if not texts:
        raise DataError(f"{data} holds no rows.")
    return texts
