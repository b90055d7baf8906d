"""Classes under coarser groups, and their descriptions: from labels written with their groups
(`A00-B99 > A00-A09 > A00`) or from a label file (`parent` and `description` columns), checked and built into a
`Hierarchy`; and the described classes that have no training rows."""

from pathlib import Path

import datasets

from labelattn.data.records import (
    DataError,
    Hierarchy,
    RawSplit,
    label_kind,
    row_labels,
    some_names,
)
from labelattn.data.tables import load_table


def label_paths(raw: dict[str, RawSplit], separator: str) -> dict[str, tuple[str, ...]]:
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


def read_label_file(path: str) -> tuple[dict[str, str | None] | None, dict[str, str] | None]:
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
        names = [row_labels(value) for value in (label, parent)]
        if label_kind(label) not in ("string", "integer") or not names[0]:
            raise DataError(f"{where}: the label {label!r} is not a class or group name; write one per row.")
        if parent is not None and (label_kind(parent) not in ("string", "integer")):
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
            f"{origin} has no row for the class(es) {some_names(missing)} of the training data: add a row "
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
        counts = "; ".join(
            f"{len(v):,} with {d} group(s) above: {some_names(v, 3)}" for d, v in sorted(by_depth.items())
        )
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


def described_class_names(parents: dict[str, str | None] | None, descriptions: dict[str, str] | None) -> list[str]:
    """The classes a label file describes: every described name that is no other name's group."""
    groups = {parent for parent in (parents or {}).values() if parent is not None}
    return [name for name in descriptions or {} if name not in groups]


def hierarchy_of(
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
