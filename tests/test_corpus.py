"""Corpus runs (`labelattn.corpus.jobs`, `labelattn predict`, `labelattn explain --data`, `labelattn summarize`):
rows in order with their columns, error rows, truncation, the three formats, resuming after SIGKILL, refusing another
run's folder, never deleting the input, and two processes giving the rows of one."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
import torch
from conftest import PLANTED_WORD, make_model, planted_texts, save_model

from explainers import ExplainerError, explain, predict
from labelattn.cli import main
from labelattn.corpus.files import save
from labelattn.corpus.jobs import CorpusError, explain_dataset, predict_dataset
from labelattn.corpus.shards import ShardFolder
from labelattn.corpus.summarize import corpus_statistics, write_summary

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return make_model("embedding", num_labels=3)


@pytest.fixture(scope="module")
def saved_model(model, tokenizer, tmp_path_factory):
    return save_model(model, tokenizer, tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def slow_model(tokenizer, tmp_path_factory):
    """An encoder model: Integrated Gradients on it is slow enough to kill a run between its shards."""
    return save_model(make_model("encoder", num_labels=3), tokenizer, tmp_path_factory.mktemp("encoder"))


def corpus(n: int = 23) -> datasets.Dataset:
    texts, labels = planted_texts(n, seed=5)
    return datasets.Dataset.from_dict({"ticket": [f"t{i}" for i in range(n)], "text": texts, "gold": labels})


def write_csv(path: Path, n: int = 23) -> Path:
    corpus(n).to_csv(path, index=False)
    return path


def cli(*args) -> int:
    return main([str(a) for a in args])


# --- the Python API -----------------------------------------------------------------------------------------


def test_predictions_keep_order_columns_and_match_the_model(model, tokenizer, tmp_path):
    data = corpus().to_dict()
    out = predict_dataset(model, tokenizer, corpus(), output_dir=tmp_path / "p", shard_size=5, progress=False)
    out = out.to_dict()
    assert out["row"] == list(range(len(data["text"])))
    assert out["ticket"] == data["ticket"] and out["text"] == data["text"] and out["gold"] == data["gold"]
    probabilities = [list(p) for p in zip(*(out[f"prob_class_{c}"] for c in range(3)), strict=True)]
    assert all(sum(p) == pytest.approx(1, abs=1e-5) for p in probabilities)
    assert out["predicted_label"] == [f"class_{max(range(3), key=p.__getitem__)}" for p in probabilities]
    # The same as one batched call on all the texts at once.
    direct = explain(model, tokenizer, data["text"], method="label_attention")
    assert out["probability"] == pytest.approx([e.probability for e in direct], abs=1e-5)
    assert set(out["error"]) == {None} and set(out["truncated"]) == {False}


def test_a_multi_label_model_predicts_every_label_over_the_threshold(tokenizer):
    model = make_model("embedding", multi_label=True, num_labels=3)
    out = predict_dataset(model, tokenizer, corpus(6), threshold=0.4, progress=False).to_dict()
    for i, labels in enumerate(out["predicted_labels"]):
        probabilities = [out[f"prob_class_{c}"][i] for c in range(3)]
        assert labels == [f"class_{c}" for c in range(3) if probabilities[c] >= 0.4]
    assert any(len(labels) != 1 for labels in out["predicted_labels"])  # sigmoid: not one label per text
    with pytest.raises(CorpusError, match="--threshold applies to multi-label models"):
        predict_dataset(make_model("embedding"), tokenizer, corpus(2), threshold=0.4, progress=False)


def test_top_k_writes_the_most_probable_classes_in_place_of_a_column_each(saved_model, tmp_path, capsys):
    """Through the CLI reading a CSV: `--top-k 2` gives each row the two classes with the highest of the
    probabilities that the plain run writes one column each, in order, and no `prob_` column; a K above the number
    of classes is refused before any output exists."""
    data = write_csv(tmp_path / "data.csv", 9)
    assert cli("predict", saved_model, data, "--output", tmp_path / "all.jsonl", "--no-progress") == 0
    assert cli("predict", saved_model, data, "--top-k", 2, "--output", tmp_path / "top.jsonl", "--no-progress") == 0
    every = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text().splitlines()]
    top = [json.loads(line) for line in (tmp_path / "top.jsonl").read_text().splitlines()]
    assert not any(name.startswith("prob_") for name in top[0])
    for full, best in zip(every, top, strict=True):
        ranked = sorted((name for name in full if name.startswith("prob_")), key=full.get, reverse=True)
        assert best["top_labels"] == [name.removeprefix("prob_") for name in ranked[:2]]
        assert best["top_probabilities"] == pytest.approx([full[name] for name in ranked[:2]], abs=1e-6)
        assert best["predicted_label"] == best["top_labels"][0] == full["predicted_label"]
    assert cli("predict", saved_model, data, "--top-k", 4, "--output", tmp_path / "four.jsonl") == 2
    assert "top_k=4: the model has 3 classes" in capsys.readouterr().err
    assert not (tmp_path / "four.jsonl").exists() and not (tmp_path / "four.jsonl.shards").exists()


HIERARCHY = {"levels": ["top", "mid", "class"], "ancestors": {f"class_{c}": ["T0", f"M{c % 2}"] for c in range(3)}}


def test_a_hierarchical_model_predicts_every_level_consistently(tokenizer, tmp_path):
    model = make_model("embedding", num_labels=3, label_hierarchy=HIERARCHY)
    folder = save_model(model, tokenizer, tmp_path / "model")  # the hierarchy travels in config.json
    reloaded = type(model).from_pretrained(folder)
    out = predict_dataset(reloaded, tokenizer, corpus(8), progress=False).to_dict()
    parents = HIERARCHY["ancestors"]
    assert out["predicted_label_top"] == ["T0"] * 8
    assert out["predicted_label_mid"] == [parents[label][1] for label in out["predicted_label"]]
    assert {"M0", "M1"} & set(out["predicted_label_mid"])
    multi = make_model("embedding", multi_label=True, num_labels=3, label_hierarchy=HIERARCHY)
    out = predict_dataset(multi, tokenizer, corpus(6), threshold=0.3, progress=False).to_dict()
    for labels, mids in zip(out["predicted_labels"], out["predicted_labels_mid"], strict=True):
        assert sorted(mids) == sorted({parents[label][1] for label in labels})


def test_fallback_codes_each_row_at_the_finest_level_that_reaches_its_threshold(tokenizer, tmp_path):
    """Thresholds set between the rows' own probabilities, so that every outcome occurs: coded at the class, at
    its mid group (the sum of the group's classes), or by a person (the top level, one group, codes nothing)."""
    model = make_model("embedding", num_labels=3, label_hierarchy=HIERARCHY)
    plain = predict_dataset(model, tokenizer, corpus(40), progress=False).to_dict()
    rows = [dict(zip(plain, values, strict=True)) for values in zip(*plain.values(), strict=True)]

    def mids(row: dict) -> dict[str, float]:
        sums = {}
        for label, (_, mid) in HIERARCHY["ancestors"].items():
            sums[mid] = sums.get(mid, 0.0) + row[f"prob_{label}"]
        return sums

    def between(values: list[float]) -> float:  # halfway between the two middle values: no row sits on it
        ranked = sorted(values)
        return (ranked[len(ranked) // 2 - 1] + ranked[len(ranked) // 2]) / 2

    class_threshold = between([row["probability"] for row in rows])
    unsure = [row for row in rows if row["probability"] < class_threshold]
    mid_threshold = between([max(mids(row).values()) for row in unsure])
    fallback = [("class", class_threshold), ("mid", mid_threshold), ("top", None)]
    out = predict_dataset(model, tokenizer, corpus(40), fallback=fallback, progress=False).to_dict()
    for i, row in enumerate(rows):
        best_mid = max(mids(row), key=mids(row).get)
        if row["probability"] >= class_threshold:
            expected = ("class", row["predicted_label"], row["probability"])
        elif mids(row)[best_mid] >= mid_threshold:
            expected = ("mid", best_mid, mids(row)[best_mid])
        else:
            expected = (None, None, None)
        coded = (out["coded_level"][i], out["coded_label"][i], out["coded_probability"][i])
        assert coded[:2] == expected[:2] and out["manual"][i] == (expected[0] is None)
        assert coded[2] == (None if expected[2] is None else pytest.approx(expected[2], rel=1e-6))
    assert {"class", "mid", None} == set(out["coded_level"])

    refused = {
        "do not fit this model: its levels, the classes' first, are ['class', 'mid', 'top']": (model, fallback[::-1]),
        "do not fit this model: it has no coarser level": (make_model("embedding", num_labels=3), fallback),
        "strictly between 0 and 1": (model, [("class", 1.5), *fallback[1:]]),
    }
    for message, (classifier, levels) in refused.items():
        with pytest.raises(ValueError, match=re.escape(message)):
            predict_dataset(classifier, tokenizer, corpus(4), fallback=levels, output_dir=tmp_path / "out")
    with pytest.raises(CorpusError, match="give it without manual_below"):
        predict_dataset(model, tokenizer, corpus(4), fallback=fallback, manual_below=0.5, output_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "hierarchy, expected",
    [
        ({"levels": ["only"], "ancestors": {}}, "two or more level names"),
        ({"levels": ["a", "b"], "ancestors": {"class_0": ["A"]}}, "2 label\\(s\\) have no ancestors"),
        ({"levels": ["a", "b"], "ancestors": {f"class_{c}": ["A", "B"] for c in range(3)}}, "one group per upper"),
        # Issue 29.3: once an AttributeError ('str' object has no attribute 'get') from a tampered config.json.
        ("oops", "label_hierarchy must be \\{'levels'.*got 'oops'"),
        ({"levels": ["a", "b"], "ancestors": {f"class_{c}": 7 for c in range(3)}}, "one group per upper"),
    ],
)
def test_a_bad_label_hierarchy_is_refused_by_the_config(hierarchy, expected):
    from configuration_labelattn import LabelAttnConfigError

    with pytest.raises(LabelAttnConfigError, match=expected):
        make_model("embedding", num_labels=3, label_hierarchy=hierarchy)


def test_bad_rows_get_an_error_and_long_rows_are_marked_truncated(model, tokenizer, tmp_path):
    texts = ["a fine text", "", "   ", None, " ".join(["word"] * 40), "another fine one"]
    data = datasets.Dataset.from_dict({"text": texts})
    out = predict_dataset(
        model, tokenizer, data, output_dir=tmp_path / "p", shard_size=4, max_length=16, progress=False
    ).to_dict()
    empty = "the text is empty or only whitespace"
    assert out["error"] == [None, f"row 1: {empty}", f"row 2: {empty}", "row 3: the text is missing", None, None]
    assert out["truncated"] == [False, None, None, None, True, False]
    assert out["predicted_label"][1] is None and out["predicted_label"][4] is not None
    explained = explain_dataset(
        model, tokenizer, data, method="saliency", output_dir=tmp_path / "e", max_length=16, progress=False
    ).to_dict()
    assert explained["error"][1:4] == out["error"][1:4] and explained["truncated"][4] is True
    assert len(explained["words"][4]) < 40 and explained["words"][1] is None


def test_long_texts_are_read_whole_in_windows(model, tokenizer, tmp_path):
    long = " ".join(f"word{i % 7}" for i in range(60))
    data = datasets.Dataset.from_dict({"text": [long, "a short one"]})
    out = predict_dataset(model, tokenizer, data, max_length=16, long_text="windows", progress=False).to_dict()
    direct = predict(model, tokenizer, [long, "a short one"], max_length=16, long_text="windows")
    assert out["truncated"] == [False, False]
    assert out["probability"] == pytest.approx(direct.probabilities.max(-1).values.tolist(), abs=1e-6)
    explained = explain_dataset(
        model, tokenizer, data, method="saliency", max_length=16, long_text="windows", progress=False
    ).to_dict()
    assert explained["words"][0] == long.split() and len(json.loads(explained["extras"][0])["windows"]) > 2
    # The corpus reads `long_text` through the explainers' one check (`explainers.windows.check_long_text`).
    with pytest.raises(ExplainerError, match="long_text='pages'"):
        predict_dataset(model, tokenizer, data, long_text="pages", progress=False)


def test_an_iterable_of_texts_is_streamed_and_explained_per_class(model, tokenizer, tmp_path):
    texts = (text for text in ["first text here", "second one", 12345, "third"])  # a generator, read once
    out = explain_dataset(
        model, tokenizer, texts, method="label_attention", all_targets=True, output_dir=tmp_path / "e", progress=False
    ).to_dict()
    # Every class of each text, in class order, with its rank by probability; the number row gets one error row.
    assert out["row"] == [0, 0, 0, 1, 1, 1, 2, 3, 3, 3]
    assert out["target"] == [0, 1, 2, 0, 1, 2, None, 0, 1, 2]
    assert out["error"][6] == "row 2: the text is an int, not a str"
    for row in (0, 1, 3):
        probs = [p for r, p in zip(out["row"], out["probability"], strict=True) if r == row]
        ranks = [k for r, k in zip(out["row"], out["rank"], strict=True) if r == row]
        assert sorted(ranks) == [1, 2, 3] and probs[ranks.index(1)] == max(probs)
    words = out["words"][0]
    assert [out["text"][0][s:e] for s, e in out["spans"][0]] == words
    direct = explain(model, tokenizer, ["first text here"], method="label_attention", targets="all")[0]
    for row_scores, exp in zip(out["scores"][:3], direct, strict=True):
        assert row_scores == pytest.approx(exp.scores, abs=1e-6)


def test_every_item_of_an_iterable_is_its_own_row_in_its_own_words(model, tokenizer, tmp_path):
    """Items Arrow cannot store (a lone surrogate) or that are not texts are their rows' errors, named as a file's
    are, and a single text among pairs is read alone, as `predict` reads it; the other rows are computed."""
    items = [
        "first text here",
        "abc\ud800",
        ("a man plays", "someone makes music"),
        ["a", "list"],
        ("a", "b", "c"),
        "alone",
    ]
    out = predict_dataset(model, tokenizer, iter(items), output_dir=tmp_path / "p", progress=False)
    assert out.column_names[:3] == ["row", "text", "text_pair"] and "item_problem" not in out.column_names
    assert out["error"] == [
        None,
        "row 1: the text holds a lone surrogate (U+D800 at character 3), which is not Unicode text: remove it, or "
        "decode the source with errors='replace'",
        None,
        "row 3: the text is a list, not a str",
        "row 4: the pair is a tuple of 3: a text pair is (text, text_pair)",
        None,
    ]
    good = [items[0], items[2], items[5]]
    direct = predict(model, tokenizer, good).probabilities.max(-1).values.tolist()
    assert [out["probability"][i] for i in (0, 2, 5)] == pytest.approx(direct, abs=1e-6)


def test_pairs_are_explained_over_both_segments(model, tokenizer):
    data = datasets.Dataset.from_dict({"text": ["a man plays", "hello"], "hypothesis": ["someone makes music", ""]})
    out = explain_dataset(model, tokenizer, data, method="saliency", text_pair_column="hypothesis", progress=False)
    out = out.to_dict()
    segments, spans = out["word_segments"][0], out["spans"][0]
    assert segments == [0, 0, 0, 1, 1, 1]
    pair = (out["text"][0], out["hypothesis"][0])
    assert [pair[g][s:e] for g, (s, e) in zip(segments, spans, strict=True)] == out["words"][0]
    assert out["error"] == [None, "row 1: the pair has a second text that is empty or only whitespace"]


def test_integrated_gradients_rows_carry_their_diagnostics_and_output(model, tokenizer, tmp_path):
    out = explain_dataset(model, tokenizer, corpus(6), method="integrated_gradients", progress=False)
    explained = explain(model, tokenizer, list(out["text"]), method="integrated_gradients")
    for row, exp in zip(out, explained, strict=True):
        assert abs(sum(row["scores"]) - (row["score"] - row["baseline_score"])) <= abs(row["delta"]) + 1e-5
        assert json.loads(row["extras"])["n_steps"] >= 9  # the adaptive rule starts from 9 nodes
        assert row["output"] == exp.output is not None  # what the scores explain, as the explanation says


def test_wrong_requests_are_refused_before_any_work(model, tokenizer, tmp_path):
    data = corpus(4)
    with pytest.raises(CorpusError, match="no text column 'body'"):
        predict_dataset(model, tokenizer, data, output_dir=tmp_path / "a", text_column="body", progress=False)
    with pytest.raises(CorpusError, match="no id column 'key'"):
        predict_dataset(model, tokenizer, data, output_dir=tmp_path / "b", id_column="key", progress=False)
    with pytest.raises(CorpusError, match=r"column\(s\) \['words'\] would be overwritten"):
        explain_dataset(model, tokenizer, data.add_column("words", ["x"] * 4), method="saliency", progress=False)
    with pytest.raises(ValueError, match="Unknown target label"):
        explain_dataset(model, tokenizer, data, method="saliency", target="nope", progress=False)
    with pytest.raises(ValueError, match="takes no option"):
        explain_dataset(model, tokenizer, data, method="saliency", options={"n_steps": 3}, progress=False)
    with pytest.raises(CorpusError, match=r"max_length=100000: give a number of tokens from 3"):
        predict_dataset(model, tokenizer, data, output_dir=tmp_path / "a", max_length=100_000, progress=False)
    with pytest.raises(CorpusError, match=r"datasets.Dataset"):
        predict_dataset(model, tokenizer, "just one string", progress=False)
    # Long enough for a text, too short for a pair (special tokens and a word of each segment).
    pairs = datasets.Dataset.from_dict({"text": ["a man plays"], "hypothesis": ["someone makes music"]})
    with pytest.raises(CorpusError, match=r"max_length=4: give a number of tokens from 5"):
        predict_dataset(model, tokenizer, pairs, output_dir=tmp_path / "a", text_pair_column="hypothesis", max_length=4)
    assert not any((tmp_path / name).exists() for name in "ab")


def test_a_folder_of_another_run_is_refused_and_overwrite_deletes_only_its_own_files(model, tokenizer, tmp_path):
    data, folder = corpus(8), tmp_path / "run"
    predict_dataset(model, tokenizer, data, output_dir=folder, shard_size=3, progress=False)
    with pytest.raises(CorpusError, match=r"holds the results of another run.*task"):
        explain_dataset(model, tokenizer, data, method="saliency", output_dir=folder, progress=False)
    with pytest.raises(CorpusError, match=r"another run.*fingerprint"):
        predict_dataset(model, tokenizer, corpus(9), output_dir=folder, shard_size=3, progress=False)
    other = make_model("embedding", num_labels=3, seed=7)
    with pytest.raises(CorpusError, match=r"another run.*model"):
        predict_dataset(other, tokenizer, data, output_dir=folder, shard_size=3, progress=False)
    # The id column orders the output's columns and names the rows of error messages: shards of two would mix.
    with pytest.raises(CorpusError, match=r"another run.*id_column: None there, 'ticket' now"):
        predict_dataset(model, tokenizer, data, output_dir=folder, shard_size=3, id_column="ticket", progress=False)
    out = explain_dataset(model, tokenizer, data, method="saliency", output_dir=folder, overwrite=True, progress=False)
    assert out["words"][0] and sorted(p.name for p in folder.iterdir()) == ["00000.arrow", "run.json"]
    # A file no run wrote: the folder is refused, even with overwrite, and the file stays.
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(CorpusError, match=r"not a corpus run's.*notes.txt"):
        predict_dataset(model, tokenizer, data, output_dir=folder, overwrite=True, progress=False)
    assert (folder / "notes.txt").read_text() == "mine"


# --- files and the command line -----------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".csv"])
def test_the_three_formats_hold_the_same_rows(model, tokenizer, tmp_path, suffix):
    explained = explain_dataset(model, tokenizer, corpus(5), method="saliency", progress=False)
    out = explained.to_dict()
    path = save(explained, tmp_path / f"x{suffix}", batch_rows=2)
    if suffix == ".parquet":
        rows = pq.read_table(path).to_pylist()
    elif suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    else:
        rows = datasets.load_dataset("csv", data_files=str(path), split="train").to_list()
        for row in rows:  # lists are JSON strings in a CSV
            row["words"], row["scores"] = json.loads(row["words"]), json.loads(row["scores"])
    assert [r["words"] for r in rows] == out["words"]
    for row, scores in zip(rows, out["scores"], strict=True):
        assert row["scores"] == pytest.approx(scores, rel=1e-12)
    assert [r["ticket"] for r in rows] == out["ticket"]


def test_cli_predict_in_bf16_gives_the_float32_probabilities_within_bf16_rounding(
    model, saved_model, tokenizer, tmp_path
):
    data = write_csv(tmp_path / "data.csv", 12)
    rows = {}
    for precision in ("no", "bf16"):
        output = tmp_path / f"{precision}.jsonl"
        assert (
            cli("predict", saved_model, data, "--output", output, "--mixed-precision", precision, "--no-progress") == 0
        )
        rows[precision] = [json.loads(line) for line in output.read_text().splitlines()]
    columns = [f"prob_class_{c}" for c in range(3)]
    exact, rounded = ([[row[c] for c in columns] for row in rows[p]] for p in ("no", "bf16"))
    # A probability moves by at most half the largest change of a logit (softmax's rows of derivatives sum to at most
    # 1/2); bf16 keeps 8 bits, and the embedding backbone rounds a logit's inputs in a handful of products.
    with torch.no_grad():
        logits = model(**tokenizer(corpus(12)["text"][:], padding=True, return_tensors="pt")).logits
    bound = 0.5 * 8 * 2**-8 * float(logits.abs().max())
    assert max(abs(a - b) for x, y in zip(exact, rounded, strict=True) for a, b in zip(x, y, strict=True)) <= bound
    assert exact != rounded  # the products did run in bf16
    assert all(sum(p) == pytest.approx(1, abs=1e-5) for p in rounded)


def test_an_unknown_mixed_precision_is_refused(model, tokenizer):
    with pytest.raises(CorpusError, match=r"mixed_precision='fp8': give one of \['no', 'fp16', 'bf16'\]"):
        predict_dataset(model, tokenizer, ["a text"], mixed_precision="fp8", progress=False)


def test_cli_predict_and_explain_with_id_column_and_summary(saved_model, tmp_path):
    data = write_csv(tmp_path / "data.csv", 12)
    assert (
        cli(
            "predict",
            saved_model,
            data,
            "--output",
            tmp_path / "p.jsonl",
            "--id-column",
            "ticket",
            "--shard-size",
            "5",
            "--no-progress",
        )
        == 0
    )
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [r["ticket"] for r in rows] == [f"t{i}" for i in range(12)] and list(rows[0])[:2] == ["row", "ticket"]
    output = tmp_path / "e.parquet"
    assert (
        cli(
            "explain",
            saved_model,
            "--data",
            data,
            "--method",
            "label_attention",
            "--output",
            output,
            "--summary",
            "--no-progress",
        )
        == 0
    )
    assert pq.read_table(output).num_rows == 12
    summary = output.with_name("e.parquet.summary")
    assert "| word | push |" in (summary / "summary.md").read_text()
    assert (summary / "summary.png").stat().st_size > 5000
    # A missing file, a missing column, and the input given as the output: refused with a message.
    assert cli("predict", saved_model, tmp_path / "none.csv", "--no-progress") == 2
    assert cli("predict", saved_model, data, "--text-column", "body", "--output", tmp_path / "b.csv") == 2
    assert cli("predict", saved_model, data, "--output", data, "--overwrite") == 2
    (tmp_path / "link.csv").symlink_to(data)
    assert cli("predict", saved_model, data, "--output", tmp_path / "link.csv", "--overwrite") == 2
    assert cli("predict", saved_model, data, "--output", data / "out.csv") == 2  # a folder that is a file
    assert data.stat().st_size > 0


def test_an_interrupted_command_or_a_system_error_is_one_line(monkeypatch, capsys, saved_model, tmp_path):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("labelattn.predict.run", interrupted)
    assert cli("predict", saved_model, "data.csv") == 130
    assert capsys.readouterr().err == "labelattn predict: interrupted; what was finished is kept\n"

    def disk_full(args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("labelattn.predict.run", disk_full)
    assert cli("predict", saved_model, "data.csv") == 2
    assert capsys.readouterr().err == "labelattn predict: error: [Errno 28] No space left on device\n"


def test_overwrite_never_deletes_the_input(saved_model, tmp_path):
    # The input file inside the shard folder: refused before anything is deleted.
    folder = tmp_path / "out.csv.shards"
    folder.mkdir()
    data = write_csv(folder / "data.csv", 4)
    assert cli("predict", saved_model, data, "--output", tmp_path / "out.csv", "--overwrite", "--no-progress") == 2
    assert data.exists()


def test_summary_finds_the_planted_word(tmp_path):
    rows = []
    for i in range(40):
        words = ["the", PLANTED_WORD, "cat", "?"] if i % 2 else ["the", "dog", "cat", "?"]
        scores = [0.05, 0.9, 0.1, 0.5] if i % 2 else [0.05, -0.2, 0.1, 0.5]
        rows.append({"target_label": "planted" if i % 2 else "other", "words": words, "scores": scores, "error": None})
    rows.append({"target_label": None, "words": None, "scores": None, "error": "the text is empty"})
    stats, texts = corpus_statistics(datasets.Dataset.from_list(rows))
    assert texts == {"other": 20, "planted": 20}
    top = stats["planted"][0]
    assert (top.word, top.count, top.texts, top.share) == (PLANTED_WORD, 20, 20, 1.0)
    assert top.push == pytest.approx(0.9) and top.mean == pytest.approx(0.9)
    assert "?" not in {s.word for s in stats["planted"]}  # punctuation alone is left out
    assert stats["other"][-1].word == "dog" and stats["other"][-1].push < 0
    folder = write_summary(datasets.Dataset.from_list(rows), tmp_path / "s", top=3)
    table = (folder / "summary.md").read_text()
    assert f"| {PLANTED_WORD} | +0.9000 | +0.9000 | 20 | 100.0% |" in table
    assert "| class | word |" not in table and (folder / "summary.csv").read_text().startswith("class,word,push")
    assert (folder / "summary.png").stat().st_size > 5000


# --- resuming and several processes -------------------------------------------------------------------------


def labelattn(*args, launcher=None, **popen) -> list[str]:
    return [*(launcher or [sys.executable, "-m"]), "labelattn", *map(str, args)]


# MKL_CBWR: MKL's reproducible mode. Without it a matrix product may round differently in the last bit from one
# launch to another (with the memory alignment of its operands), whatever the rows or the number of processes.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_CBWR": "COMPATIBLE", "PYTHONPATH": str(ROOT), "LABELATTN_DEBUG": ""}


def shard_stamps(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.glob("*.arrow")}


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_to_the_same_output(slow_model, tmp_path):
    data = write_csv(tmp_path / "data.csv", 60)
    args = [
        "explain",
        slow_model,
        "--data",
        data,
        "--method",
        "integrated_gradients",
        "--option",
        "n_steps=128",
        "--option",
        "tolerance=null",
        "--shard-size",
        "4",
        "--no-progress",
    ]
    whole = tmp_path / "whole.parquet"
    subprocess.run(labelattn(*args, "--output", whole), env=ENV, cwd=ROOT, check=True, capture_output=True)

    output = tmp_path / "killed.parquet"
    shards = output.with_name("killed.parquet.shards")
    process = subprocess.Popen(labelattn(*args, "--output", output), env=ENV, cwd=ROOT, stderr=subprocess.DEVNULL)
    while len(list(shards.glob("*.arrow"))) < 3 and process.poll() is None:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = shard_stamps(shards)
    assert 3 <= len(before) < 15, f"the kill came after {len(before)} of 15 shards"
    assert not output.exists()

    again = subprocess.run(labelattn(*args, "--output", output), env=ENV, cwd=ROOT, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"{15 - len(before)} shard(s) computed, {len(before)} already done" in again.stderr
    after = shard_stamps(shards)
    assert {name: after[name] for name in before} == before  # the finished shards were not written again
    assert not list(shards.glob("*.tmp-*"))
    assert pq.read_table(output).equals(pq.read_table(whole))


@pytest.mark.slow
def test_two_processes_give_the_rows_of_one(saved_model, tmp_path):
    data = write_csv(tmp_path / "data.csv", 21)
    args = [
        "explain",
        saved_model,
        "--data",
        data,
        "--method",
        "integrated_gradients",
        "--shard-size",
        "4",
        "--no-progress",
    ]
    launcher = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
    ]
    env = {**ENV, "ACCELERATE_USE_CPU": "true"}
    for name, prefix in (("one", None), ("two", launcher)):
        done = subprocess.run(
            labelattn(*args, "--output", tmp_path / f"{name}.parquet", launcher=prefix),
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    assert "2 process(es)" in done.stderr
    assert pq.read_table(tmp_path / "two.parquet").equals(pq.read_table(tmp_path / "one.parquet"))


# --- hostile input: issue 20 ----------------------------------------------------------------------------------


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# A zero-width space, the replacement character and control characters: texts, but none gives a token.
NO_TOKEN = ["\u200b", "\ufffd", "\x01\x02"]


def test_a_text_without_a_known_token_is_an_error_row_that_names_its_row(saved_model, tmp_path):
    rows = corpus(12).to_dict()
    for i, text in zip((4, 9, 10), NO_TOKEN, strict=True):
        rows["text"][i] = text
    data = tmp_path / "data.csv"
    datasets.Dataset.from_dict(rows).to_csv(data, index=False)
    clean = tmp_path / "clean.csv"
    datasets.Dataset.from_dict(rows).select([i for i in range(12) if i not in (4, 9, 10)]).to_csv(clean, index=False)
    for task in ("predict", "explain"):
        outputs = {}
        for name, source in (("all", data), ("clean", clean)):
            output = tmp_path / f"{task}-{name}.jsonl"
            args = (
                [saved_model, source] if task == "predict" else [saved_model, "--data", source, "--method", "saliency"]
            )
            assert (
                cli(task, *args, "--id-column", "ticket", "--shard-size", "5", "--output", output, "--no-progress") == 0
            )
            outputs[name] = read_rows(output)
        got = outputs["all"]
        assert [r["row"] for r in got] == list(range(12))
        for i in (4, 9, 10):
            assert got[i]["error"].startswith(f"row {i} (ticket 't{i}'): the text (")
            assert got[i]["error"].endswith("gives no token the model knows.")
        # Every other row is computed, as without the bad rows (in other batches: float32 rounding apart).
        good = [r for r in got if r["error"] is None]
        assert len(good) == 9
        for row, alone in zip(good, outputs["clean"], strict=True):
            for key, value in alone.items():
                if key == "row":
                    continue
                if isinstance(value, float) or key == "scores":
                    assert row[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
                else:
                    assert row[key] == value, key


def test_a_label_map_that_would_mislabel_classes_is_refused_before_any_output(saved_model, tokenizer, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(saved_model, folder)
    config = json.loads((folder / "config.json").read_text())
    config["id2label"], config["label2id"] = {"0": "A", "1": "A", "2": "B"}, {"A": 1, "B": 2}
    (folder / "config.json").write_text(json.dumps(config))
    data = write_csv(tmp_path / "data.csv", 4)
    assert cli("predict", folder, data, "--output", tmp_path / "p.csv", "--no-progress") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv", "model"]
    # A model built in Python, not loaded: the same rule.
    model = make_model("embedding", num_labels=3, id2label={0: "A", 1: "A", 2: "B"})
    with pytest.raises(ValueError, match=r"several classes one name \('A' for classes 0, 1\)"):
        predict_dataset(model, tokenizer, corpus(3), output_dir=tmp_path / "never", progress=False)
    assert not (tmp_path / "never").exists()


REFUSED = [
    (["--top-k", "10"], "top_k=10: give a number of classes from 1 to 3"),
    (["--top-k", "0"], "top_k=0"),
    (["--target", "class_1", "--contrast", "class_1"], "names class 'class_1' twice"),
    (["--target", "nope"], "Unknown target label 'nope'"),
    (["--max-length", "2"], "max_length=2: give a number of tokens from 3"),
    (["--batch-size", "0"], "batch_size=0"),
    (["--shard-size", "0"], "shard_size=0"),
    (["--option", "n_steps=many"], "n_steps='many' has the wrong type"),
]


def test_a_refused_request_leaves_the_output_untouched_and_the_corrected_one_runs(saved_model, tmp_path, capsys):
    data, output = write_csv(tmp_path / "data.csv", 6), tmp_path / "out.jsonl"
    base = ["explain", saved_model, "--data", data, "--output", output, "--no-progress"]
    for wrong, message in REFUSED:
        method = [] if "--method" in wrong else ["--method", "integrated_gradients"]
        assert cli(*base, *method, *wrong) == 2, wrong
        assert message in capsys.readouterr().err, wrong
        assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"], wrong  # no run.json, no shards
    assert cli(*base, "--method", "integrated_gradients", "--top-k", "2") == 0
    assert len(read_rows(output)) == 12


def test_a_shard_folder_of_a_run_killed_early_says_what_overwrite_deletes(model, tokenizer, tmp_path):
    folder = tmp_path / "run"
    predict_dataset(model, tokenizer, corpus(6), output_dir=folder, shard_size=3, progress=False)
    for shard in folder.glob("*.arrow"):
        shard.unlink()
    with pytest.raises(
        CorpusError, match=r"another run \(.*task: 'predict' there, 'explain' now; 0 shard\(s\) finished\)"
    ):
        explain_dataset(model, tokenizer, corpus(6), method="saliency", output_dir=folder, shard_size=3, progress=False)


def test_of_two_runs_started_together_into_one_folder_the_second_is_refused(tmp_path):
    # Both checked the new folder before either recorded its settings: the second to record them is refused.
    first, second = ShardFolder(tmp_path / "run"), ShardFolder(tmp_path / "run")
    for folder in (first, second):
        folder.check_settings({"task": "predict"}, overwrite=False)
    first.prepare({"task": "predict"}, overwrite=False)
    with pytest.raises(CorpusError, match=r"another run \(task: 'predict' there, 'explain' now"):
        second.prepare({"task": "explain"}, overwrite=False)
    second.prepare({"task": "predict"}, overwrite=False)  # the same run's settings: resumed
    assert json.loads(first.settings_file.read_text()) == {"task": "predict"}


def test_a_damaged_shard_is_named_and_recomputed_once_deleted(saved_model, tmp_path, capsys):
    data, output = write_csv(tmp_path / "data.csv", 10), tmp_path / "out.parquet"
    command = ["predict", saved_model, data, "--output", output, "--shard-size", "4", "--no-progress"]
    assert cli(*command) == 0
    whole = pq.read_table(output)
    shard = output.with_name("out.parquet.shards") / "00001.arrow"
    shard.write_bytes(shard.read_bytes()[:100])  # cut short, as a full disk or a copy gone wrong leaves it
    assert cli(*command) == 2
    assert f"The shard {shard} is damaged" in capsys.readouterr().err
    shard.unlink()
    assert cli(*command) == 0
    assert "1 shard(s) computed, 2 already done" in capsys.readouterr().err
    assert pq.read_table(output).equals(whole)


def bound_by_permissions(command: list[str]) -> list[str]:
    """`command` as run by a user whom a folder's permission bits stop: root, who writes anywhere, without its
    power to override them (`setpriv`)."""
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: nothing here can make a folder that root cannot write")
    return [shutil.which("setpriv"), "--bounding-set", "-dac_override,-dac_read_search", "--", *command]


@pytest.mark.slow
def test_a_read_only_output_folder_is_refused_in_one_line_before_any_work(saved_model, tmp_path):
    data, locked = write_csv(tmp_path / "data.csv", 6), tmp_path / "locked"
    # The shard folder of an earlier run, still writable, in a folder that is not: the output file could not be
    # written at the end.
    (locked / "out.parquet.shards").mkdir(parents=True)
    locked.chmod(0o555)
    try:
        for output in (locked / "new" / "out.parquet", locked / "out.parquet"):
            command = bound_by_permissions(labelattn("predict", saved_model, data, "--output", output, "--no-progress"))
            done = subprocess.run(command, env=ENV, cwd=ROOT, capture_output=True, text=True)
            assert done.returncode == 2, done.stderr[-2000:]
            assert f"Cannot write in {locked} (Permission denied)" in done.stderr and "Traceback" not in done.stderr
        # The summary of an explanations file, into the same folder.
        explanations = tmp_path / "e.jsonl"
        explanations.write_text(json.dumps({"target_label": "a", "words": ["x"], "scores": [1.0], "error": None}))
        command = bound_by_permissions(labelattn("summarize", explanations, "--output-dir", locked / "summary"))
        done = subprocess.run(command, env=ENV, cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 2 and f"Cannot write in {locked} (Permission denied)" in done.stderr
        assert [p.name for p in locked.iterdir()] == ["out.parquet.shards"]
        assert not any((locked / "out.parquet.shards").iterdir())
    finally:
        locked.chmod(0o755)


def test_an_output_that_cannot_be_written_is_refused_before_torch_loads(saved_model, tmp_path):
    """Both corpus commands check their output first: a refusal takes a second, not the 5 s of importing torch."""
    data, a_file = write_csv(tmp_path / "data.csv", 2), tmp_path / "a-file"
    a_file.write_text("not a folder")
    commands = [["predict", saved_model, data], ["explain", saved_model, "--data", data]]
    script = (
        "import sys; from labelattn.cli import main; code = main(sys.argv[1:]); print(code, 'torch' in sys.modules)"
    )
    for command in commands:
        argv = [sys.executable, "-c", script, *map(str, command), "--output", str(a_file / "out.parquet")]
        done = subprocess.run(argv, env=ENV, cwd=ROOT, capture_output=True, text=True)
        assert done.stdout.split() == ["2", "False"], done.stderr[-2000:]
        assert f"{a_file} is a file, not a folder" in done.stderr


NOT_EXPLANATIONS = [
    ("x.jsonl", "", "x.jsonl is empty"),
    (
        "x.jsonl",
        '{"target_label": "a", "words": ["x", "y"], "scores": [1.0], "error": null}\n',
        "has 2 words and 1 scores",
    ),
    ("x.csv", "target_label,words,scores,error\na,x y,1.0,\n", "has words that are not a JSON list ('x y')"),
    ("x.jsonl", '{"target_label": "a", "words": ["x"], "scores": 1.0, "error": null}\n', "has scores that are a float"),
    ("x.jsonl", '{"target_label": null, "words": ["x"], "scores": [1.0], "error": null}\n', "neither an error nor"),
    ("x.jsonl", '{"target_label": "a", "words": [1], "scores": ["high"], "error": null}\n', "not all strings"),
    ("x.jsonl", '{"target_label": "a", "words": ["x"]}\n{oops\n', "cannot be read as JSON"),
    (
        "x.jsonl",
        '{"predicted_label": "a", "prob_a": 1.0, "error": null}\n',
        "has no column(s) ['scores', 'target_label', 'words']",
    ),
    (
        "x.jsonl",
        '{"target_label": "a", "words": ["x"], "scores": [NaN], "error": null}\n'
        '{"target_label": null, "words": null, "scores": null, "error": "row 1: the text is missing"}\n',
        "of 2 row(s), 1 have an error and 1 no finite score (NaN or infinite)",
    ),
]


@pytest.mark.parametrize(("name", "content", "message"), NOT_EXPLANATIONS)
def test_summarize_says_what_is_wrong_with_a_file_it_did_not_write(tmp_path, capsys, name, content, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    assert cli("summarize", path) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.splitlines()[-1].startswith("labelattn summarize: error:")  # one line, after datasets' progress
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no summary folder


def test_a_column_of_mixed_types_is_read_as_given(model, tokenizer, tmp_path):
    # What `datasets` makes of a JSONL column holding a number among texts: a `Json` column, stored as JSON texts.
    rows = [
        {"text": text, "n": n} for text, n in zip(corpus(6)["text"], [{"a": 1}, 2, "x", [3], None, 4.5], strict=True)
    ]
    rows[3]["text"] = 1984
    data = datasets.Dataset.from_list(rows, on_mixed_types="use_json")
    assert isinstance(data.features["text"], datasets.Json)
    out = predict_dataset(model, tokenizer, data, output_dir=tmp_path / "p", progress=False)
    assert out["error"][3] == "row 3: the text is an int, not a str" and out["predicted_label"][3] is None
    # Every other text is classified as it is, not with its JSON quotes.
    texts = [rows[i]["text"] for i in (0, 1, 2, 4, 5)]
    direct = explain(model, tokenizer, texts, method="label_attention")
    assert [out["probability"][i] for i in (0, 1, 2, 4, 5)] == pytest.approx([e.probability for e in direct], abs=1e-6)
    explained = explain_dataset(model, tokenizer, data, method="saliency", progress=False)
    assert [explained["words"][i] for i in (0, 1, 2, 4, 5)] == [e.words for e in direct]
    # The files hold every value as it was given.
    for suffix in (".jsonl", ".csv"):
        path = save(out, tmp_path / f"out{suffix}")
        if suffix == ".jsonl":
            written = [(r["text"], r["n"]) for r in read_rows(path)]
            assert written == [(r["text"], r["n"]) for r in rows]
        else:
            written = [(r["text"], r["n"]) for r in datasets.load_dataset("csv", data_files=str(path), split="train")]
            # A CSV cell is a string; lists and dicts are JSON.
            assert written[:3] == [(rows[0]["text"], '{"a": 1}'), (rows[1]["text"], "2"), (rows[2]["text"], "x")]


def test_a_summary_of_many_classes_stays_readable_and_names_each_class_by_its_word(tmp_path):
    # 1,918 classes, as ICD-10-CM's categories; class i has 1 to 7 texts, each pushed towards it by its own word.
    classes = 1918
    rows = [
        {"target_label": f"C{i:04d}", "words": ["the", f"kw{i}", "of"], "scores": [0.01, 1.0, -0.02], "error": None}
        for i in range(classes)
        for _ in range(1 + i % 7)
    ]
    folder = write_summary(datasets.Dataset.from_list(rows), tmp_path / "s", tables=20, plot_classes=12)
    table = (folder / "summary.md").read_text()
    assert table.count("\n## C") == 20 and "## The other 1,898 classes" in table
    # The 20 tables are the classes with the most texts (7 each); every class is named once, by its own word first.
    assert all(f"## C{i:04d} (7 texts)" in table for i in range(6, 7 * 20, 7))
    inline = [line for line in table.splitlines() if line.startswith("| C")]
    assert len(inline) == classes - 20
    for line in inline:
        label, _, words = (cell.strip() for cell in line.strip("|").split("|"))
        assert words.startswith(f"kw{int(label[1:])} (+1.000)")
    assert len((folder / "summary.csv").read_text().splitlines()) == 1 + 3 * classes  # every word of every class
    # The plot shows the 12 classes with the most texts, at the size of 12 panels whatever the number of classes.
    import matplotlib.image

    height = matplotlib.image.imread(folder / "summary.png").shape[0]
    few = write_summary(datasets.Dataset.from_list(rows[:60]), tmp_path / "few", plot_classes=12)
    assert height <= matplotlib.image.imread(few / "summary.png").shape[0] * 1.2 < 3000


def test_many_classes_are_explained_in_chunks_that_give_the_rows_of_one_call(model, tokenizer, monkeypatch):
    import labelattn.corpus.jobs

    whole = explain_dataset(model, tokenizer, corpus(9), method="label_attention", top_k=2, progress=False)
    calls = []

    def counted(*args, **kwargs):
        calls.append(len(args[2]))
        return explain(*args, **kwargs)

    # 3 classes, 2 per text: 6 (text, class) pairs allowed per call, so calls of batch_size (2) texts.
    monkeypatch.setattr(labelattn.corpus.jobs, "CLASS_ROWS_PER_CALL", 6)
    monkeypatch.setattr(labelattn.corpus.jobs, "explain", counted)
    chunked = explain_dataset(
        model, tokenizer, corpus(9), method="label_attention", top_k=2, batch_size=2, progress=False
    )
    assert calls == [2, 2, 2, 2, 1]
    assert chunked["words"] == whole["words"] and chunked["target"] == whole["target"]
    for a, b in zip(chunked["scores"], whole["scores"], strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
