"""Labelled texts for training: CSV, JSONL or a local `datasets` folder, or a built-in data set by name.

Everything ends as one `LabelledData`: a `datasets.DatasetDict` with the splits `train`, `validation` and `test`,
each with the columns `id` (int), `text` (str) and `label` (a class index, or for multi-label a list of them),
the class names, and what the model card needs to say about the data. `load_data` reads a built-in data set or a
user's files (`tables`), checks every row and label (here, before any model is built, naming the file and the row),
places the classes under their groups (`hierarchy`) and holds out the published splits (`splits`).
"""

from collections.abc import Callable
from pathlib import Path

import datasets

from labelattn.data.hierarchy import described_class_names, hierarchy_of, label_paths, read_label_file
from labelattn.data.records import (
    SPLIT_SEED,
    SPLITS,
    DataError,
    DataSource,
    LabelledData,
    RawSplit,
    label_kind,
    natural_key,
    row_labels,
    some_names,
)
from labelattn.data.splits import build_splits
from labelattn.data.tables import load_table, require_column


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
    require_column(table, origin, "text", text_column)
    require_column(table, origin, "label", label_column)
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


def _is_multi_label(raw: dict[str, RawSplit]) -> bool:
    """Decide from every row of every split whether the labels are lists (multi-label) or single labels, and refuse
    a label of another type or a mixture of kinds, naming the rows that differ from the most common kind."""
    rows_of_kind: dict[str, list[str]] = {}
    for part in raw.values():
        for i, label in enumerate(part.labels):
            kind = label_kind(label)
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


def _check(raw: dict[str, RawSplit], multi_label: bool, described: list[str] = ()) -> tuple[list[str], list[str]]:
    """Every row has a text and a label, the training data has 2+ classes and, with the `described` classes
    (which may have no training row), covers every label: the class names, and those without training rows."""
    for part in raw.values():
        for i, (text, label) in enumerate(zip(part.texts, part.labels, strict=True)):
            if not isinstance(text, str) or not text.strip():
                _check_text(part.where(i), text)
            if not row_labels(label) and not multi_label:
                raise DataError(f"{part.where(i)}: the label is missing ({label!r}); every row needs one.")
    train = raw["train"]
    names = sorted({n for label in train.labels for n in row_labels(label)}, key=natural_key)
    if len(names) < 2:
        raise DataError(
            f"{train.origin}: the training data has a single class {names}; a classifier needs at least two."
        )
    untrained = sorted(set(described) - set(names), key=natural_key)
    known = set(names) | set(untrained)
    for part in raw.values():
        for i, label in enumerate(part.labels):
            unseen = [n for n in row_labels(label) if n not in known]
            if unseen:
                raise DataError(
                    f"{part.where(i)}: label {unseen[0]!r} never occurs in the training data (its classes: "
                    f"{some_names(names)}); the model cannot learn it: fix the label, add training rows with it, or "
                    "describe it in a --label-file and train with --label-descriptions."
                )
    return sorted(known, key=natural_key), untrained


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
    from labelattn.data.builtin import builtin_named  # here: the data sets' readers load when one is named

    builtin = builtin_named(data)
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
    paths = label_paths(raw, hierarchy_separator) if hierarchy_separator else None
    parents, descriptions = read_label_file(label_file) if label_file else (None, None)
    described = described_class_names(parents, descriptions) if described_classes else []
    names, untrained = _check(raw, multi_label, described)
    if untrained and paths is not None:
        raise DataError(
            f"The described classes {some_names(untrained)} have no training rows, so their groups are written "
            f"nowhere: give every class's group in a parent column of {label_file} instead of a hierarchy separator."
        )
    origin = f"the labels of {data}"
    hierarchy = hierarchy_of(names, paths, origin, parents, label_file, hierarchy_levels, descriptions)
    description = f"Labelled texts from {', '.join(sorted({str(v) for v in given.values() if v}))}."
    source = DataSource(name=Path(data).stem, description=description, license="unknown")
    splits = build_splits(raw, names, source, multi_label, seed, hierarchy, descriptions)
    if untrained:
        splits.split_record["untrained_classes"] = untrained
    return splits


def load_texts(data: str = "trec", text_column: str = "text") -> list[str]:
    """Every text of `data` (a built-in name, or a CSV / JSONL file / `datasets` folder) in its own order, without
    labels and without splitting: what measuring explanations on a whole file needs."""
    from labelattn.data.builtin import builtin_named  # here: the data sets' readers load when one is named

    builtin = builtin_named(data)
    if builtin is not None:
        return list(builtin.read().texts)
    table, row_name = load_table(Path(data))
    whole = not isinstance(table, datasets.DatasetDict)
    parts = [(data, table)] if whole else [(f"{data} [{s}]", table[s]) for s in SPLITS if s in table]
    texts = []
    for origin, part in parts:
        require_column(part, origin, "text", text_column)
        for i, text in enumerate(part[text_column][:]):
            _check_text(f"{origin}, {row_name(i)}", text)
            texts.append(text)
    if not texts:
        raise DataError(f"{data} holds no rows.")
    return texts
