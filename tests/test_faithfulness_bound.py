"""`bench/faithfulness_bound.py`: the ceiling of comprehensiveness is at least every method's on the same texts (it
takes the best word subset at each k, which no ranking can beat), above random's, and its beam search finds the
exhaustive search's subsets when the beam holds every subset of a size."""

import json
from pathlib import Path

import pytest
from conftest import bench_script, planted_texts, save_model
from test_evaluate_explanations import write_csv

from labelattn import cli

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bound():
    return bench_script("faithfulness_bound")


@pytest.fixture(scope="module")
def measured(planted_embedding_model, tokenizer, tmp_path_factory) -> dict:
    """`labelattn evaluate-explanations` on eight planted texts of at most 8 words, read from a CSV file."""
    folder = tmp_path_factory.mktemp("bound")
    model = save_model(planted_embedding_model, tokenizer, folder / "model")
    texts, labels = planted_texts(40, seed=5)
    rows = [{"text": t, "label": ("other", "planted")[y]} for t, y in zip(texts, labels, strict=True)]
    rows = [row for row in rows if len(row["text"].split()) <= 8][:8]
    methods = "label_attention,integrated_gradients,saliency"
    argv = ["evaluate-explanations", str(model), str(write_csv(folder / "data.csv", rows)), "--split", "all"]
    assert cli.main([*argv, "--methods", methods, "--output-dir", str(folder / "out")]) == 0
    results = json.loads((folder / "out" / "results.json").read_text())
    assert max(row["num_words"] for row in results["per_text"]["random"]) <= 8  # what the beam test's 70 assumes
    return results


def test_no_method_beats_the_ceiling_and_random_stays_below_it(bound, measured, planted_embedding_model, tokenizer):
    results = measured
    ceiling, methods, exact = bound.ceiling(results, planted_embedding_model, tokenizer, exact_words=12)
    assert exact == len(results["per_text"]["random"]) == 8
    assert set(methods) == {"label_attention", "integrated_gradients", "saliency", "random"}
    # Probabilities move by about 1e-7 with the batch an input lands in (faithfulness.LOO_TIE): far below this.
    assert all(value <= ceiling + 1e-5 for value in methods.values()), (ceiling, methods)
    assert methods["random"] < ceiling - 0.05


def test_a_beam_wide_enough_finds_the_exhaustive_ceiling(bound, measured, planted_embedding_model, tokenizer):
    results = measured
    exhaustive, _, _ = bound.ceiling(results, planted_embedding_model, tokenizer, exact_words=12)
    # 8 words hold at most C(8, 4) = 70 subsets of one size: a beam of 70 keeps them all.
    searched, _, exact = bound.ceiling(results, planted_embedding_model, tokenizer, exact_words=0, beam=70)
    assert exact == 0
    assert searched == pytest.approx(exhaustive, abs=1e-5)
