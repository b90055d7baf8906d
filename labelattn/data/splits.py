"""The published splits: validation and test held out of the training rows by stratified (and, for grouped data,
grouped) sampling with a fixed seed, classes too small to split kept in training, and the hash of each split's ids
that the docs and tests pin."""

import hashlib
from collections import Counter

import datasets
import numpy as np
from datasets.utils.stratify import stratified_shuffle_split_generate_indices

from labelattn.data.records import (
    HELD_OUT,
    SPLITS,
    DataError,
    DataSource,
    Hierarchy,
    LabelledData,
    RawSplit,
    natural_key,
    row_labels,
    some_names,
)

# A class with fewer rows than this (or groups of rows, for grouped data) is kept in the training split only: a
# stratified split needs two to hold one out, and a third keeps one for training after both held-out splits.
MIN_SPLIT_UNITS = 3


def _encode(part: RawSplit, names: list[str], multi_label: bool) -> datasets.Dataset:
    index = {name: i for i, name in enumerate(names)}
    if multi_label:
        labels = [sorted(index[n] for n in row_labels(label)) for label in part.labels]
        label_feature = datasets.List(datasets.ClassLabel(names=names))
    else:
        labels = [index[row_labels(label)[0]] for label in part.labels]
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
            f"({some_names(sorted(missing))}), {len(extra)} not in the training data ({some_names(sorted(extra))})."
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
