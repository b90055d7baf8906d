"""`labelattn evaluate-explanations` on any text classifier: a plain BERT classifier, text pairs, one option parser,
the rationale column's forms and checks, the explained output passed through.
(The faithfulness measures and the command on labelattn models: test_faithfulness.py.)"""

import csv
import json
import re
from dataclasses import fields
from pathlib import Path

import pytest
import torch
from conftest import save_model, tiny_encoder_config
from transformers import BertForSequenceClassification

from explainers import Explanation
from labelattn import cli
from labelattn.evaluate_explanations import _method_options

LABELS = ("contradiction", "entailment")


@pytest.fixture(scope="module")
def bert_dir(tokenizer, tmp_path_factory) -> Path:
    """A plain transformers BERT classifier (no label attention), saved as any fine-tuned classifier is."""
    torch.manual_seed(0)
    config = tiny_encoder_config(id2label=dict(enumerate(LABELS)), label2id={v: k for k, v in enumerate(LABELS)})
    return save_model(BertForSequenceClassification(config).eval(), tokenizer, tmp_path_factory.mktemp("bert"))


def write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def evaluate(model: Path, data: Path, output: Path, *extra: str) -> dict:
    argv = ["evaluate-explanations", str(model), str(data), "--split", "all", "--output-dir", str(output), *extra]
    assert cli.main(argv) == 0
    return json.loads((output / "results.json").read_text())


def test_a_plain_bert_classifier_gets_a_table_of_the_methods_it_supports(bert_dir, tmp_path):
    rows = [{"text": f"who wrote book number {i} ?", "label": LABELS[i % 2]} for i in range(6)]
    results = evaluate(
        bert_dir, write_csv(tmp_path / "data.csv", rows), tmp_path / "out", "--option", "shap.n_samples=2"
    )
    run = [row["method"] for row in results["rows"]]
    assert run[-1] == "random" and {"integrated_gradients", "attention_rollout", "shap"} <= set(run)
    assert "label_attention" in results["skipped"] and "label_attention" not in run
    assert "label-attention" in results["skipped"]["label_attention"]  # the reason, from supported_methods
    assert results["method_options"] == {"shap": {"n_samples": 2}}
    assert all(row["texts"] == 6 for row in results["rows"])


def test_pairs_are_explained_as_pairs(bert_dir, tmp_path):
    rows = [
        {"premise": f"a man plays guitar number {i}", "hypothesis": "nobody plays", "label": LABELS[i % 2]}
        for i in range(4)
    ]
    data = write_csv(tmp_path / "pairs.csv", rows)
    argv = ("--text-column", "premise", "--text-pair-column", "hypothesis", "--methods", "saliency")
    results = evaluate(bert_dir, data, tmp_path / "out", *argv)
    assert [row["method"] for row in results["rows"]] == ["saliency", "random"]
    assert [r["text"] for r in results["per_text"]["saliency"]] == [row["premise"] for row in rows]
    measured = results["per_text"]["saliency"]
    assert all(r["num_words"] > len(row["premise"].split()) for r, row in zip(measured, rows, strict=True))


def test_one_option_parser_for_method_options():
    methods = ["integrated_gradients", "shap", "random"]
    given = ["integrated_gradients.tolerance=null", "integrated_gradients.n_steps=16", "shap.baseline=mask"]
    assert _method_options(given, methods) == {
        "integrated_gradients": {"tolerance": None, "n_steps": 16},
        "shap": {"baseline": "mask"},
    }
    with pytest.raises(ValueError, match=r"METHOD\.NAME=VALUE"):
        _method_options(["n_steps=16"], methods)
    with pytest.raises(ValueError, match="not among the methods run"):
        _method_options(["saliency.x=1"], methods)


# ------------------------------------------------------------------------------------------- rationale column


def book_rows(n: int, rationale) -> list[dict]:
    """Texts `who wrote book<i> number <i> ?` (6 words; the third differs per row), with `rationale(i)` each."""
    return [
        {"text": f"who wrote book{i} number {i} ?", "label": LABELS[i % 2], "rationale": rationale(i)} for i in range(n)
    ]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def with_json_rationales(rows: list[dict]) -> list[dict]:
    """The rows as a CSV holds them: the rationale as JSON text."""
    return [{**row, "rationale": json.dumps(row["rationale"])} for row in rows]


def plausibility_of(results: dict) -> list[tuple]:
    return [(r["text"], r["rationale_words"], r["token_f1"], r["auprc"]) for r in results["per_text"]["saliency"]]


def test_the_rationale_column_takes_masks_soft_masks_or_words_from_csv_jsonl_and_datasets(bert_dir, tmp_path):
    import datasets

    words = book_rows(6, lambda i: [f"book{i}"])
    mask = book_rows(6, lambda i: [0, 0, 1, 0, 0, 0])
    soft = book_rows(6, lambda i: [0.0, 0.3, 0.7, 0.49, 0.0, 0.1])  # ≥ 0.5 counts: the same rationale
    folder = tmp_path / "folder"
    datasets.Dataset.from_list(mask).save_to_disk(str(folder))
    sources = {
        "csv words": write_csv(tmp_path / "words.csv", with_json_rationales(words)),
        "csv mask": write_csv(tmp_path / "mask.csv", with_json_rationales(mask)),
        "jsonl soft": write_jsonl(tmp_path / "soft.jsonl", soft),
        "datasets mask": folder,
    }
    measured = {}
    for name, data in sources.items():
        out = tmp_path / name.replace(" ", "-")
        results = evaluate(bert_dir, data, out, "--methods", "saliency", "--rationale-column", "rationale")
        assert results["options"]["rationale_top_k"] == 1, name
        measured[name] = plausibility_of(results)
    assert all(value == measured["csv words"] for value in measured.values()), measured
    assert [marked for _, marked, _, _ in measured["csv words"]] == [1] * 6


def test_a_split_reads_the_rationales_of_its_own_rows(bert_dir, tmp_path):
    import datasets

    # Each rationale is a word of its own row only: a rationale read from another row would be refused.
    rows = book_rows(20, lambda i: [f"book{i}"])
    held_out = write_csv(tmp_path / "data.csv", with_json_rationales(rows))
    folder = tmp_path / "folder"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows[:16]), "test": datasets.Dataset.from_list(rows[16:])}
    ).save_to_disk(str(folder))
    for data, split, count in ((held_out, "test", 2), (folder, "test", 4), (folder, "validation", 2)):
        argv = ["--split", split, "--methods", "saliency", "--rationale-column", "rationale", "--overwrite"]
        results = evaluate_split(bert_dir, data, tmp_path / "out", *argv)
        measured = plausibility_of(results)
        assert len(measured) == count and all(marked == 1 for _, marked, _, _ in measured), (data, split)
    assert {text for text, *_ in measured} <= {row["text"] for row in rows[:16]}  # validation: held out of train


def evaluate_split(model: Path, data: Path, output: Path, *extra: str) -> dict:
    argv = ["evaluate-explanations", str(model), str(data), "--output-dir", str(output), *extra]
    assert cli.main(argv) == 0
    return json.loads((output / "results.json").read_text())


def test_a_bad_rationale_is_refused_naming_the_row_before_anything_is_written(bert_dir, tmp_path, capsys):
    good = with_json_rationales(book_rows(4, lambda i: [f"book{i}"]))
    cases = {
        "length": (1, json.dumps([0, 1, 0]), r"data.csv, row 2 \(line 3, counting the header\): the rationale has 3 "),
        "missing": (2, "", r"row 3 .*: the rationale is missing; write \[\]"),
        "not json": (0, "book0", r"row 1 .*: the rationale 'book0' is not a JSON list"),
        "unknown word": (3, json.dumps(["Book3"]), r"row 4 .*: the rationale word\(s\) \['Book3'\] are not words"),
    }
    for name, (row, value, message) in cases.items():
        rows = [dict(r) for r in good]
        rows[row]["rationale"] = value
        data = write_csv(tmp_path / "data.csv", rows)
        out = tmp_path / name.replace(" ", "-")
        argv = ["evaluate-explanations", str(bert_dir), str(data), "--split", "all", "--output-dir", str(out)]
        assert cli.main([*argv, "--methods", "saliency", "--rationale-column", "rationale"]) == 2, name
        assert re.search(message, capsys.readouterr().err), name
        assert not out.exists(), name
    data = write_csv(tmp_path / "data.csv", good)
    argv = ["evaluate-explanations", str(bert_dir), str(data), "--split", "all", "--methods", "saliency"]
    assert cli.main([*argv, "--rationale-column", "why"]) == 2
    assert "has no rationale column 'why'" in capsys.readouterr().err
    assert cli.main([*argv, "--rationale-top-k", "2"]) == 2
    assert "give a --rationale-column too" in capsys.readouterr().err
    assert cli.main([*argv, "--rationale-column", "rationale", "--rationale-top-k", "0"]) == 2
    assert "--rationale-top-k=0" in capsys.readouterr().err


def test_the_explained_output_passes_through_and_is_recorded(bert_dir, tmp_path):
    methods = ["integrated_gradients", "random"]
    assert _method_options(["integrated_gradients.output=probability"], methods) == {
        "integrated_gradients": {"output": "probability"}
    }
    if "output" not in {f.name for f in fields(Explanation)}:
        pytest.skip("explanations do not record their output yet (Explanation.output, issue 17.1)")
    rows = [{"text": f"who wrote book number {i} ?", "label": LABELS[i % 2]} for i in range(3)]
    argv = ["--methods", "integrated_gradients", "--option", "integrated_gradients.output=probability"]
    results = evaluate(bert_dir, write_csv(tmp_path / "data.csv", rows), tmp_path / "out", *argv)
    ig = next(row for row in results["rows"] if row["method"] == "integrated_gradients")
    assert ig["output"] == "probability"
    assert {r["output"] for r in results["per_text"]["integrated_gradients"]} == {"probability"}
    assert "| integrated_gradients | probability |" in (tmp_path / "out" / "results.md").read_text()
