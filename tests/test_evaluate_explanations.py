"""`labelattn evaluate-explanations` on any text classifier: a plain BERT classifier, text pairs, one option parser.
(The faithfulness measures and the command on labelattn models: test_faithfulness.py.)"""

import csv
import json
from pathlib import Path

import pytest
import torch
from conftest import save_model, tiny_encoder_config
from transformers import BertForSequenceClassification

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
