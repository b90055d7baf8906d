"""The records every reader of labelled data fills and every user of it reads: `LabelledData` (the splits, the
class names, the hierarchy and descriptions, the provenance), `RawSplit` (rows as read), `Hierarchy`,
`DataSource`, `DataError`, and the names of the splits. No reading here: `reading` reads users' files, `builtin`
the built-in data sets, and both build on these types alone."""

import re
from collections.abc import Callable
from dataclasses import dataclass, field

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
            return sorted(self.ancestors, key=natural_key)
        return sorted({groups[depth] for groups in self.ancestors.values()}, key=natural_key)

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
    """Rows as read: texts and label names (a list per row for multi-label), with the file for error messages.

    `groups` (or None) names each row's group: the rows of a group go to the same split (ICD-10-CM: the texts of
    one billable code), `group_name` says what a group is. `strata` (or None: the label) is what a held-out split
    is stratified by, `stratum_name` what it is."""

    origin: str
    ids: list[int]
    texts: list
    labels: list
    row_name: Callable[[int], str] = lambda i: f"row {i + 1}"
    groups: list | None = None
    group_name: str = ""
    strata: list[str] | None = None
    stratum_name: str = ""

    def where(self, index: int) -> str:
        return f"{self.origin}, {self.row_name(index)}"


def natural_key(name: str) -> tuple:
    """Sort class names 2 before 10, as people do."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name))


def some_names(names: list, shown: int = 5) -> str:
    """A few names and how many there are: a message stays readable with 1,918 classes."""
    listed = ", ".join(repr(name) for name in names[:shown])
    return listed if len(names) <= shown else f"{listed} and {len(names) - shown:,} more ({len(names):,} in all)"


def label_kind(value) -> str | None:
    """ "list" (multi-label), "string" or "integer"; None for a missing label; "other" for anything else."""
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return "list" if all(label_kind(v) in ("string", "integer") for v in value) else "other"
    if isinstance(value, str):
        return "string"
    return "integer" if isinstance(value, int) and not isinstance(value, bool) else "other"


def row_labels(value) -> list[str]:
    values = value if isinstance(value, list | tuple) else [value]
    return [str(v).strip() for v in values if v is not None and str(v).strip()]
