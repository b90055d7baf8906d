"""Class hierarchies and descriptions: the `Hierarchy` type, labels written with their groups, label files, and
every way such data can be wrong."""

import pytest
from test_data import write, write_jsonl

from labelattn.data.reading import load_data
from labelattn.data.records import DataError, Hierarchy

LEVELS = ["chapter", "block", "category"]
TREE = {  # category: (chapter, block)
    "c1": ("I", "I.a"),
    "c2": ("I", "I.a"),
    "c3": ("I", "I.b"),
    "c4": ("II", "II.a"),
    "c10": ("II", "II.a"),
}


def test_a_hierarchy_maps_classes_to_every_level():
    hierarchy = Hierarchy(LEVELS, TREE)
    assert hierarchy.names("chapter") == ["I", "II"] and hierarchy.names("category") == ["c1", "c2", "c3", "c4", "c10"]
    names = ["c10", "c3", "c1"]
    assert hierarchy.level_indices(names, "block") == [2, 1, 0]  # II.a, I.b, I.a
    assert hierarchy.level_indices(names, "chapter") == [1, 0, 0]
    assert hierarchy.level_indices(names, "category") == [4, 2, 0]
    assert hierarchy.path("c3") == ("I", "I.b", "c3")


@pytest.mark.parametrize(
    ("levels", "ancestors", "expected"),
    [
        (LEVELS, {**TREE, "c5": ("II", "I.b")}, "The group 'I.b' (level 'block') lies under both 'I' and 'II'"),
        (LEVELS, {**TREE, "c5": ("II",)}, "Class 'c5' has 1 ancestors ['II']"),
        (["x", "x"], {"a": ("g",)}, "two or more distinct level names"),
    ],
)
def test_a_hierarchy_that_is_not_a_tree_is_refused(levels, ancestors, expected):
    with pytest.raises(DataError) as error:
        Hierarchy(levels, ancestors)
    assert expected in str(error.value)


def path_rows(n: int = 60) -> str:
    names = list(TREE)
    return "".join(f"text {i},{' > '.join(TREE[names[i % 5]])} > {names[i % 5]}\n" for i in range(n))


def test_labels_written_with_their_groups(tmp_path):
    data = load_data(
        write(tmp_path / "paths.csv", "text,label\n" + path_rows()), hierarchy_separator=">", hierarchy_levels=LEVELS
    )
    assert data.label_names == ["c1", "c2", "c3", "c4", "c10"]
    assert data.hierarchy.levels == LEVELS and data.hierarchy.ancestors == TREE
    assert data.descriptions is None
    # The held-out rows are labelled with the class alone, and its groups follow from it.
    chapter = data.hierarchy.level_indices(data.label_names, "chapter")
    for row in data.splits["test"]:
        number = int(row["text"].split()[1])
        assert data.label_names[row["label"]] == list(TREE)[number % 5]
        assert data.hierarchy.names("chapter")[chapter[row["label"]]] == TREE[list(TREE)[number % 5]][0]
    default = load_data(write(tmp_path / "again.csv", "text,label\n" + path_rows()), hierarchy_separator=">")
    assert default.hierarchy.levels == ["level 1", "level 2", "level 3"]


def test_multi_label_paths(tmp_path):
    rows = [{"text": f"t{i}", "label": ["A > a", "B > b"][: 1 + i % 2]} for i in range(30)]
    data = load_data(write_jsonl(tmp_path / "multi.jsonl", rows), hierarchy_separator=">")
    assert data.multi_label and data.label_names == ["a", "b"]
    assert data.hierarchy.ancestors == {"a": ("A",), "b": ("B",)}


@pytest.mark.parametrize(
    ("extra", "kwargs", "expected"),
    [
        (
            "odd,II > II.a > c1\n",
            {},
            "row 61 (line 62, counting the header): class 'c1' is under II > II.a here but under I > I.a in",
        ),
        ("odd,c1\n", {}, "class 'c1' is under no group here"),
        ("odd,I >  > c9\n", {}, "row 61 (line 62, counting the header): the label 'I >  > c9' has an empty part"),
        (
            "odd,I > c9\nodd,I > c9\nodd,I > c9\n",
            {},
            "sit at different depths (1 with 1 group(s) above: 'c9'; 5 with 2",
        ),
        ("", {"hierarchy_levels": ["block", "category"]}, "The hierarchy levels ['block', 'category'] name 2"),
        ("", {"label_separator": ">"}, "The label separator and the hierarchy separator are both '>'"),
    ],
)
def test_bad_label_paths_are_named(tmp_path, extra, kwargs, expected):
    path = write(tmp_path / "paths.csv", "text,label\n" + path_rows() + extra)
    with pytest.raises(DataError) as error:
        load_data(path, **{"hierarchy_separator": ">", **kwargs})
    assert expected in str(error.value)


def test_levels_without_a_hierarchy_are_refused(tmp_path):
    with pytest.raises(DataError, match="Hierarchy levels are named, but the data has no hierarchy"):
        load_data(write(tmp_path / "flat.csv", "text,label\n" + path_rows()), hierarchy_levels=LEVELS)


def flat_rows(n: int = 60) -> str:
    return "text,label\n" + "".join(f"text {i},{list(TREE)[i % 5]}\n" for i in range(n))


def label_file_rows() -> str:
    rows = [f"{name},{block},the {name} class" for name, (_, block) in TREE.items()]
    rows += [f"{block},{chapter}," for chapter, block in dict.fromkeys(TREE.values())]
    rows += ["I,,chapter one", "II,,", "unused,I,a class the data does not have"]
    return "label,parent,description\n" + "\n".join(rows) + "\n"


def test_a_label_file_gives_parents_and_descriptions(tmp_path):
    data = load_data(
        write(tmp_path / "data.csv", flat_rows()),
        label_file=write(tmp_path / "labels.csv", label_file_rows()),
        hierarchy_levels=LEVELS,
    )
    assert data.hierarchy.ancestors == TREE
    assert data.descriptions == {name: f"the {name} class" for name in TREE}
    assert data.hierarchy.group_descriptions == {"chapter": {"I": "chapter one"}}


def test_a_label_file_with_descriptions_only(tmp_path):
    labels = write(tmp_path / "labels.jsonl", '{"label": "c1", "description": "first"}\n{"label": "c3"}\n')
    data = load_data(write(tmp_path / "data.csv", flat_rows()), label_file=labels)
    assert data.hierarchy is None and data.descriptions == {"c1": "first"}


def test_a_parent_without_a_row_is_a_group_at_the_top(tmp_path):
    labels = write(tmp_path / "labels.csv", "label,parent\n" + "".join(f"{n},{b}\n" for n, (_, b) in TREE.items()))
    data = load_data(write(tmp_path / "data.csv", flat_rows()), label_file=labels)
    assert data.hierarchy.levels == ["level 1", "level 2"] and data.hierarchy.ancestors["c3"] == ("I.b",)
    assert data.descriptions is None  # the file has no description column


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("label,parent\nc1,g\nc2,g\n", "has no row for the class(es) 'c3', 'c4', 'c10' of the training data"),
        ("label,parent\n" + "".join(f"{n},g\n" for n in TREE) + "g,h\nh,g\n", "go round in a circle (c1 > g > h)"),
        ("label,parent\nc1,g\nc1,h\n", "row 2 (line 3, counting the header): 'c1' has a row already"),
        ("label,parent\nc1,c1\n", "'c1' is its own parent"),
        ("label,group\nc1,g\n", "a label file has the column `label` and a `parent` column"),
        ("label,parent\n,g\n", "row 1 (line 2, counting the header): the label None is not a class or group name"),
    ],
)
def test_bad_label_files_are_named(tmp_path, content, expected):
    with pytest.raises(DataError) as error:
        load_data(write(tmp_path / "data.csv", flat_rows()), label_file=write(tmp_path / "labels.csv", content))
    assert expected in str(error.value)


def test_groups_given_twice_are_refused(tmp_path):
    with pytest.raises(DataError, match="The groups come twice"):
        load_data(
            write(tmp_path / "paths.csv", "text,label\n" + path_rows()),
            hierarchy_separator=">",
            label_file=write(tmp_path / "labels.csv", label_file_rows()),
        )


def test_a_missing_class_among_many_is_named_briefly(tmp_path):
    rows = "text,label\n" + "".join(f"t{i},k{i % 400}\n" for i in range(1600))
    labels = write(tmp_path / "labels.csv", "label,parent\nk0,g\n")
    with pytest.raises(DataError) as error:
        load_data(write(tmp_path / "data.csv", rows), label_file=labels)
    assert "'k1', 'k2', 'k3', 'k4', 'k5' and 394 more (399 in all)" in str(error.value)


def test_a_described_class_without_training_rows_is_a_class_when_asked(tmp_path):
    data_file = write(tmp_path / "data.csv", flat_rows())
    test_file = write(tmp_path / "test.csv", "text,label\nabout c7,c7\ntext 1,c1\n")
    labels = write(tmp_path / "labels.csv", label_file_rows().replace("unused,I,", "c7,I.b,"))
    options = dict(test=test_file, label_file=labels, hierarchy_levels=LEVELS)
    data = load_data(data_file, described_classes=True, **options)
    assert data.label_names == ["c1", "c2", "c3", "c4", "c7", "c10"]
    assert data.split_record["untrained_classes"] == ["c7"]
    assert data.hierarchy.ancestors["c7"] == ("I", "I.b")
    assert data.descriptions["c7"] == "a class the data does not have"
    assert sorted(data.label_names[i] for i in data.splits["test"]["label"]) == ["c1", "c7"]
    assert "c7" not in {data.label_names[i] for i in data.splits["train"]["label"]}
    with pytest.raises(DataError, match="describe it in a --label-file and train with --label-descriptions"):
        load_data(data_file, **options)  # not asked: the test row's class is unknown


def test_a_described_class_cannot_take_its_groups_from_labels_it_has_none_of(tmp_path):
    labels = write(tmp_path / "labels.csv", "label,description\nc9,a class with no rows\n")
    with pytest.raises(DataError, match="give every class's group in a parent column of"):
        load_data(
            write(tmp_path / "paths.csv", "text,label\n" + path_rows()),
            hierarchy_separator=">",
            label_file=labels,
            described_classes=True,
        )
