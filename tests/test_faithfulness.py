"""Faithfulness metrics: the planted word's removal is the full drop, IG beats random, the documented edge rules
hold (one-word texts, k% rounding to zero words), and the command's table is the same on one or two processes."""

import csv
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import PLANTED_WORD, make_model, planted_texts, save_model

from explainers import Explanation, explain
from explainers.evaluation.faithfulness import (
    FaithfulnessError,
    evaluate_faithfulness,
    perturb,
    plausibility,
    rank_agreement,
    rank_correlation,
    top_words,
    words_for_percentage,
)
from explainers.evaluation.rationales import RationaleError, default_top_k, rationale_mask
from explainers.words import tokenize
from labelattn import cli

ROOT = Path(__file__).resolve().parents[1]


def numbers(record) -> list[float]:
    """Every float of a per-text record, to check none is NaN."""
    values = [record.probability, record.comprehensiveness, record.sufficiency, *record.loo_drops]
    values += record.removed_probabilities + record.kept_probabilities
    return values + ([record.tau_loo] if record.tau_loo is not None else [])


@pytest.mark.parametrize(
    ("num_words", "percentage", "expected"),
    [(10, 10, 1), (4, 10, 1), (1, 10, 1), (1, 100, 1), (5, 10, 1), (15, 10, 2), (25, 10, 3), (7, 50, 4), (3, 100, 3)],
)
def test_k_percent_rounds_half_up_with_at_least_one_word(num_words, percentage, expected):
    assert words_for_percentage(num_words, percentage) == expected


def test_top_words_prefer_high_signed_scores_and_earlier_ties():
    assert top_words([0.1, -5.0, 0.7, 0.7, 0.2], 3) == [2, 3, 4]


def test_removal_acts_on_token_ids_of_whole_words(tokenizer):
    (item,) = tokenize(tokenizer, ["tokenization of zebras"], 64)
    assert item.words == ["tokenization", "of", "zebras"]
    replaced = perturb(item, {0, 2}, "replace", tokenizer.pad_token_id)
    deleted = perturb(item, {0, 2}, "delete", tokenizer.pad_token_id)
    # Both sub-tokens of each removed word go; [CLS], "of" and [SEP] keep their ids.
    assert len(replaced.input_ids) == len(item.input_ids) == 7
    assert replaced.input_ids == [item.input_ids[0], 0, 0, item.input_ids[3], 0, 0, item.input_ids[6]]
    assert deleted.input_ids == [item.input_ids[0], item.input_ids[3], item.input_ids[6]]
    assert item.input_ids[1] != 0  # the original is left untouched


def test_rank_correlation_rules():
    assert rank_correlation([0.3], [0.9]) is None
    assert rank_correlation([1.0, 1.0, 1.0], [0.1, 0.5, 0.2]) == 0.0
    assert rank_correlation([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert rank_correlation([1, 2, 3, 4], [4, 3, 2, 1], "spearman") == pytest.approx(-1.0)


@pytest.fixture(scope="module")
def planted_case(planted_embedding_model, tokenizer):
    texts, labels = planted_texts(16, seed=11)
    ig = explain(planted_embedding_model, tokenizer, texts, method="integrated_gradients")
    rand = explain(planted_embedding_model, tokenizer, texts, method="random")
    return texts, labels, ig, rand


def test_removing_the_planted_word_is_the_full_probability_drop(planted_embedding_model, tokenizer, planted_case):
    model = planted_embedding_model
    texts, labels, ig, _ = planted_case
    report = evaluate_faithfulness(model, tokenizer, ig, removal="delete")
    checked = 0
    for text, label, exp, row in zip(texts, labels, ig, report.per_text, strict=True):
        if not label:
            continue
        assert exp.top_words(1)[0][0] == PLANTED_WORD
        # The drop measured independently: the text written without the planted word, through the model.
        without = " ".join(word for word in text.split() if word != PLANTED_WORD)
        with torch.no_grad():
            p_without = torch.softmax(model(**tokenizer(without, return_tensors="pt")).logits, -1)[0, 1].item()
        assert row.probability > 0.9
        assert row.comprehensiveness == pytest.approx(row.probability - p_without, abs=0.02)
        assert row.sufficiency < 0.05  # the planted word alone keeps the prediction
        checked += 1
    assert checked == 8


def test_random_scores_lower_than_integrated_gradients(planted_embedding_model, tokenizer, planted_case):
    _, _, ig, rand = planted_case
    reports = evaluate_faithfulness(planted_embedding_model, tokenizer, {"ig": ig, "random": rand})
    ig_row, random_row = reports["ig"].summary(), reports["random"].summary()
    assert ig_row["comprehensiveness"] > random_row["comprehensiveness"] + 0.1
    assert ig_row["sufficiency"] < random_row["sufficiency"]
    assert ig_row["tau_loo"] > random_row["tau_loo"]
    explained = {"output": ig[0].output} if getattr(ig[0], "output", None) else {}  # once explanations say
    assert reports["ig"].options == {
        "percentages": list(range(10, 101, 10)),
        "removal": "replace",
        "baseline_token_id": 0,
        **explained,
    }


@pytest.mark.parametrize("removal", ["replace", "delete"])
def test_one_word_texts_and_k_rounding_to_zero_follow_the_rule(planted_embedding_model, tokenizer, removal):
    texts = [PLANTED_WORD, "the", "the water was on the side"]
    exps = explain(planted_embedding_model, tokenizer, texts, method="integrated_gradients")
    report = evaluate_faithfulness(planted_embedding_model, tokenizer, exps, percentages=[1, 5], removal=removal)
    for row in report.per_text:
        assert all(math.isfinite(v) for v in numbers(row))
        assert row.words_per_percentage == [1, 1]  # 1% and 5% of ≤ 6 words round to 0: one word instead
    zebra, the, long = report.per_text
    for one_word in (zebra, the):
        assert one_word.tau_loo is None
        assert one_word.sufficiency == 0.0  # keeping its only word keeps the text
        assert one_word.comprehensiveness == pytest.approx(one_word.loo_drops[0])
    assert zebra.comprehensiveness > 0.9
    assert long.tau_loo is not None
    summary = report.summary()
    assert summary["texts"] == 3 and summary["tau_texts"] == 1
    assert summary["tau_loo"] == pytest.approx(long.tau_loo)


def test_multi_label_uses_the_sigmoid_of_the_target(tokenizer):
    model = make_model(multi_label=True, num_labels=3, seed=4)
    texts = ["the water was on the side", "people know"]
    exps = explain(model, tokenizer, texts, method="integrated_gradients", target=2)
    report = evaluate_faithfulness(model, tokenizer, exps)
    with torch.no_grad():
        logits = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits
    for row, logit in zip(report.per_text, logits[:, 2], strict=True):
        assert row.target == 2
        assert row.probability == pytest.approx(torch.sigmoid(logit).item(), abs=1e-5)
        assert row.kept_probabilities[-1] == pytest.approx(row.probability)  # k = 100% keeps every word


def test_rank_agreement_of_a_method_with_itself_and_its_reverse(planted_case):
    _, _, ig, _ = planted_case
    assert rank_agreement(ig, ig)["spearman"] == pytest.approx(1.0)
    reversed_ig = [type(e)(**{**e.__dict__, "scores": [-s for s in e.scores]}) for e in ig]
    agreement = rank_agreement(ig, reversed_ig)
    assert agreement["kendall"] == pytest.approx(-1.0)
    assert agreement["texts"] == len(ig)


def test_bad_arguments_are_refused(planted_embedding_model, tokenizer, planted_case):
    _, _, ig, rand = planted_case
    with pytest.raises(FaithfulnessError, match=r"\(0, 100\]"):
        evaluate_faithfulness(planted_embedding_model, tokenizer, ig, percentages=[0, 50])
    with pytest.raises(FaithfulnessError, match="replace"):
        evaluate_faithfulness(planted_embedding_model, tokenizer, ig, removal="mask")
    with pytest.raises(FaithfulnessError, match="No explanation"):
        evaluate_faithfulness(planted_embedding_model, tokenizer, [])
    wrong = [type(e)(**{**e.__dict__, "words": [*e.words, "extra"]}) for e in ig[:1]]
    with pytest.raises(FaithfulnessError, match="other words"):
        evaluate_faithfulness(planted_embedding_model, tokenizer, wrong)
    with pytest.raises(FaithfulnessError, match="same texts"):
        rank_agreement(ig, rand[:-1])
    per_text = explain(planted_embedding_model, tokenizer, ["the water"], method="saliency", targets="all")
    with pytest.raises(FaithfulnessError, match="flatten it"):
        evaluate_faithfulness(planted_embedding_model, tokenizer, per_text)


def test_tau_loo_does_not_depend_on_the_batching(embedding_model, tokenizer):
    # Every leave-one-out input of a repeated word is the same text: the drops tie, so τ is 0 (a constant ranking),
    # although the float sums of each input differ by ~1e-7 with the batch and padding it gets.
    texts, _ = planted_texts(40, seed=5)
    runs = {
        "repeated": explain(embedding_model, tokenizer, ["the " * 8], method="random"),
        "others": explain(embedding_model, tokenizer, texts, method="random"),
    }
    taus = []
    for batch_size in (1, 7, 64):
        reports = evaluate_faithfulness(embedding_model, tokenizer, runs, batch_size=batch_size)
        assert reports["repeated"].per_text[0].tau_loo == 0.0
        taus.append([row.tau_loo for row in reports["others"].per_text])
    assert taus[0] == taus[1] == taus[2]


def test_measuring_leaves_a_training_model_in_training(planted_embedding_model, tokenizer, planted_case):
    _, _, ig, _ = planted_case
    planted_embedding_model.train()
    try:
        evaluate_faithfulness(planted_embedding_model, tokenizer, ig[:2])
        assert planted_embedding_model.training
    finally:
        planted_embedding_model.eval()


def test_evaluate_metric_loads_offline_by_path_and_agrees(planted_embedding_model, tokenizer, planted_case):
    import evaluate

    _, _, ig, _ = planted_case
    metric = evaluate.load(str(ROOT / "labelattn" / "metrics" / "faithfulness"))
    for exp in ig:
        metric.add(texts=exp.text, scores=exp.scores, targets=exp.target)
    result = metric.compute(model=planted_embedding_model, tokenizer=tokenizer, removal="delete")
    expected = evaluate_faithfulness(planted_embedding_model, tokenizer, ig, removal="delete").summary()
    assert result == pytest.approx(expected)


# ------------------------------------------------------------------------------------------------ plausibility


def planted_rationales(texts: list[str]) -> list[list[str]]:
    """The planted word is the rationale of the texts that have it; the others have none."""
    return [[PLANTED_WORD] if PLANTED_WORD in text.split() else [] for text in texts]


def test_a_rationale_is_a_mask_or_the_words_and_anything_else_is_refused_naming_the_row():
    words = ["a", "zebra", "ran", "zebra"]
    assert rationale_mask([0, 1, 0, 1], words, "row 1") == [False, True, False, True]
    assert rationale_mask([0.0, 0.5, 0.49, True], words, "row 1") == [False, True, False, True]  # soft: ≥ 0.5 counts
    assert rationale_mask(["zebra"], words, "row 1") == [False, True, False, True]  # every occurrence
    assert rationale_mask([], words, "row 1") == [False] * 4
    refused = [
        ([0, 1], r"row 7: the rationale has 2 values for the 4 words"),
        (["Zebra"], r"row 7: the rationale word\(s\) \['Zebra'\] are not words of the text"),
        ([0, 1, 2, 0], r"row 7: .* not numbers in \[0, 1\]"),
        ([0, float("nan"), 0, 0], r"row 7: .* not numbers in \[0, 1\]"),
        (["a", 1, 0, 0], "row 7: .* mixes words and numbers"),
        ("zebra", "row 7: the rationale is a str, not a list"),
        (None, r"row 7: the rationale is missing \(None\); give \[\]"),
    ]
    for rationale, message in refused:
        with pytest.raises(RationaleError, match=message):
            rationale_mask(rationale, words, "row 7")
    with pytest.raises(RationaleError, match="reads only the first 4 words"):
        rationale_mask([0] * 9, words, "row 7", truncated=True)


def test_default_k_is_the_mean_rationale_size_of_the_texts_that_have_one():
    assert default_top_k([[True, False], [True, True], [False, False]]) == 2  # 1.5 rounds half up; [] is left out
    assert default_top_k([[True], [False, True, False]]) == 1
    assert default_top_k([[False, False], []]) is None


def test_plausibility_of_one_text_follows_the_documented_rules():
    found = plausibility([0.1, 3.0, -1.0, 0.5], [False, True, False, False], top_k=1)
    assert found == {"rationale_words": 1, "token_f1": 1.0, "token_iou": 1.0, "auprc": 1.0}
    # k = 2 takes "3.0" and "0.5"; the rationale {0, 1}: one of two found, P = R = 1/2, IOU = 1/3.
    half = plausibility([0.1, 3.0, -1.0, 0.5], [True, True, False, False], top_k=2)
    assert half["token_f1"] == pytest.approx(0.5) and half["token_iou"] == pytest.approx(1 / 3)
    assert half["auprc"] == pytest.approx((1 / 1 + 2 / 3) / 2)  # the rationale words ranked 1st and 3rd
    assert plausibility([1.0, 2.0], [False, False], top_k=1) == {
        "rationale_words": 0,
        "token_f1": None,
        "token_iou": None,
        "auprc": None,
    }
    everything = plausibility([1.0, 2.0, 3.0], [True, True, True], top_k=1)  # any ranking finds them all
    assert everything["auprc"] is None and everything["token_f1"] == pytest.approx(2 * 1 / (1 + 3))
    one_word = plausibility([-0.3], [True], top_k=4)  # k is cut to the text's one word
    assert (one_word["token_f1"], one_word["token_iou"], one_word["auprc"]) == (1.0, 1.0, None)
    constant = plausibility([0.2] * 5, [False, False, True, False, True], top_k=2)
    assert constant["auprc"] == pytest.approx(2 / 5)  # chance: the share of rationale words
    assert constant["token_f1"] == 0.0  # the tie rule takes the first two words


def test_a_method_that_finds_the_planted_word_is_fully_plausible(planted_embedding_model, tokenizer, planted_case):
    texts, labels, ig, rand = planted_case
    runs = {"ig": ig, "random": rand}
    reports = evaluate_faithfulness(planted_embedding_model, tokenizer, runs, rationales=planted_rationales(texts))
    masks = [[word == PLANTED_WORD for word in exp.words] for exp in ig]
    as_masks = evaluate_faithfulness(planted_embedding_model, tokenizer, runs, rationales=masks)
    for name in runs:
        assert [row.__dict__ for row in reports[name].per_text] == [row.__dict__ for row in as_masks[name].per_text]
    assert reports["ig"].options["rationale_top_k"] == 1 and reports["ig"].options["rationale_threshold"] == 0.5
    for label, row in zip(labels, reports["ig"].per_text, strict=True):
        if label:
            assert (row.rationale_words, row.token_f1, row.token_iou, row.auprc) == (1, 1.0, 1.0, 1.0)
        else:
            assert (row.rationale_words, row.token_f1, row.token_iou, row.auprc) == (0, None, None, None)
    ig_summary, random_summary = reports["ig"].summary(), reports["random"].summary()
    assert ig_summary["token_f1"] == ig_summary["token_iou"] == ig_summary["auprc"] == 1.0
    assert ig_summary["rationale_texts"] == ig_summary["auprc_texts"] == sum(labels) == 8
    assert random_summary["auprc"] < 0.7 and random_summary["token_f1"] < 0.7
    by_class = reports["ig"].by_class(["other", "planted"])
    assert by_class["other"]["token_f1"] is None and by_class["other"]["rationale_texts"] == 0  # never NaN
    assert by_class["planted"]["token_f1"] == 1.0
    # A given k is used: the planted word and k - 1 others, F1 = 2 / (k + 1), IOU = 1 / k.
    k3 = evaluate_faithfulness(
        planted_embedding_model, tokenizer, ig, rationales=planted_rationales(texts), rationale_top_k=3, tau_loo=False
    )
    assert k3.options["rationale_top_k"] == 3
    assert k3.summary()["token_f1"] == pytest.approx(0.5) and k3.summary()["token_iou"] == pytest.approx(1 / 3)


def test_random_scores_are_as_plausible_as_chance(planted_embedding_model, tokenizer):
    # One rationale word among n, k = 1: random scores put it first with probability 1/n (F1 = IOU = 1, else 0),
    # and at a uniform rank r, so that AUPRC = 1/r has mean H(n)/n and second moment (Σ 1/r²)/n.
    texts, labels = planted_texts(400, seed=12)
    rand = explain(planted_embedding_model, tokenizer, texts, method="random")
    report = evaluate_faithfulness(
        planted_embedding_model, tokenizer, rand, percentages=[50], tau_loo=False, rationales=planted_rationales(texts)
    )
    sizes = [row.num_words for row, label in zip(report.per_text, labels, strict=True) if label]
    hit = [1 / n for n in sizes]
    first = [sum(1 / r for r in range(1, n + 1)) / n for n in sizes]
    second = [sum(1 / r**2 for r in range(1, n + 1)) / n for n in sizes]
    hit_sd = math.sqrt(sum(p * (1 - p) for p in hit)) / len(sizes)  # the standard error of each mean
    auprc_sd = math.sqrt(sum(m2 - m**2 for m, m2 in zip(first, second, strict=True))) / len(sizes)
    summary = report.summary()
    assert summary["rationale_texts"] == len(sizes) == 200
    assert summary["token_f1"] == summary["token_iou"]
    assert abs(summary["token_f1"] - sum(hit) / len(sizes)) < 4 * hit_sd
    assert abs(summary["auprc"] - sum(first) / len(sizes)) < 4 * auprc_sd


def test_bad_rationales_are_refused_before_the_model_runs(planted_embedding_model, tokenizer, planted_case):
    texts, _, ig, rand = planted_case
    model, rationales = planted_embedding_model, planted_rationales(texts)
    with pytest.raises(FaithfulnessError, match="15 rationales for the 16 explanations"):
        evaluate_faithfulness(model, tokenizer, ig, rationales=rationales[:-1])
    bad = [*rationales[:3], [0, 1], *rationales[4:]]
    with pytest.raises(RationaleError, match=rf"Rationale 3 \(of '{texts[3]}'\): the rationale has 2 values for the"):
        evaluate_faithfulness(model, tokenizer, ig, rationales=bad)
    with pytest.raises(FaithfulnessError, match="same texts, in the same order"):
        evaluate_faithfulness(model, tokenizer, {"ig": ig, "random": rand[::-1]}, rationales=rationales)
    with pytest.raises(FaithfulnessError, match="pass rationales with it"):
        evaluate_faithfulness(model, tokenizer, ig, rationale_top_k=2)
    with pytest.raises(FaithfulnessError, match="rationale_top_k=0"):
        evaluate_faithfulness(model, tokenizer, ig, rationales=rationales, rationale_top_k=0)


def test_the_report_records_what_each_method_explained(planted_embedding_model, tokenizer, planted_case):
    @dataclass
    class Explained(Explanation):  # what explain() gives once methods record their output
        output: str | None = None

    _, _, ig, _ = planted_case
    as_probability = [Explained(**{**exp.__dict__, "output": "probability"}) for exp in ig[:3]]
    mixed = [*as_probability[:2], Explained(**{**ig[2].__dict__, "output": "logit"})]
    reports = evaluate_faithfulness(
        planted_embedding_model, tokenizer, {"p": as_probability, "mixed": mixed, "plain": ig[:3]}, tau_loo=False
    )
    assert reports["p"].options["output"] == "probability"
    assert [row.output for row in reports["p"].per_text] == ["probability"] * 3
    assert reports["mixed"].options["output"] == ["probability", "logit"]
    if not hasattr(ig[0], "output"):  # explanations that do not say what they explain
        assert "output" not in reports["plain"].options
    # The measures stay on the probability of the class, whatever the scores explain (ERASER).
    assert [row.probability for row in reports["p"].per_text] == [row.probability for row in reports["plain"].per_text]


# --------------------------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def saved_planted(planted_embedding_model, tokenizer, tmp_path_factory):
    return save_model(planted_embedding_model, tokenizer, tmp_path_factory.mktemp("planted-model"))


def write_csv(path: Path, texts: list[str], labels: list[str], rationales: list | None = None) -> Path:
    """A CSV of texts and labels, and if given a `rationale` column of JSON lists."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        if rationales is None:
            writer.writerow(["text", "label"])
            writer.writerows(zip(texts, labels, strict=True))
        else:
            writer.writerow(["text", "label", "rationale"])
            writer.writerows(zip(texts, labels, map(json.dumps, rationales), strict=True))
    return path


def command(model: Path, data: Path, output: Path, n_texts: int) -> list[str]:
    return [
        "evaluate-explanations",
        str(model),
        str(data),
        "--split",
        "all",
        "--n-texts",
        str(n_texts),
        "--methods",
        "label_attention,integrated_gradients",
        "--output-dir",
        str(output),
    ]


def test_a_class_never_predicted_still_gives_a_table(saved_planted, tmp_path):
    texts, _ = planted_texts(24, seed=7)
    texts = [" ".join(w for w in text.split() if w != PLANTED_WORD) for text in texts]  # "planted" never predicted
    data = write_csv(tmp_path / "data.csv", texts, ["other", "planted"] * 12)
    assert cli.main(command(saved_planted, data, tmp_path / "out", 24)) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [row["method"] for row in results["rows"]] == ["label_attention", "integrated_gradients", "random"]
    for method in results["methods"]:
        assert results["by_class"][method]["planted"] == {
            "comprehensiveness": None,
            "sufficiency": None,
            "tau_loo": None,
            "texts": 0,
            "tau_texts": 0,
        }
        assert results["by_class"][method]["other"]["texts"] == 24
    table = (tmp_path / "out" / "results.md").read_text()
    assert "| random (baseline) |" in table and "— (0)" in table
    assert "nan" not in table.lower() and "NaN" not in (tmp_path / "out" / "results.json").read_text()
    assert (tmp_path / "out" / "results.png").stat().st_size > 1000
    # A second run into the same folder must be asked for.
    assert cli.main(command(saved_planted, data, tmp_path / "out", 24)) == 2


def test_the_command_measures_plausibility_against_a_rationale_column(saved_planted, tmp_path):
    texts, labels = planted_texts(12, seed=9)
    names = [("other", "planted")[label] for label in labels]
    data = write_csv(tmp_path / "data.csv", texts, names, planted_rationales(texts))
    assert cli.main([*command(saved_planted, data, tmp_path / "out", 12), "--rationale-column", "rationale"]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["options"]["rationale_top_k"] == 1 and results["rationale_column"] == "rationale"
    rows = {row["method"]: row for row in results["rows"]}
    for method in ("label_attention", "integrated_gradients"):
        assert rows[method]["token_f1"] == rows[method]["token_iou"] == rows[method]["auprc"] == 1.0, method
        assert rows[method]["rationale_texts"] == rows[method]["auprc_texts"] == 6
        marked = [r["rationale_words"] for r in results["per_text"][method]]
        assert marked == [len(r) for r in planted_rationales(texts)]
    assert rows["random"]["auprc"] < 1.0
    table = (tmp_path / "out" / "results.md").read_text()
    assert "## Plausibility against the human rationales of `rationale`" in table and "The top k = 1 words" in table
    assert "| random (baseline) | " in table.split("## Plausibility")[1]
    # Without the column, the same command gives no plausibility at all.
    assert cli.main(command(saved_planted, data, tmp_path / "plain", 12)) == 0
    plain = json.loads((tmp_path / "plain" / "results.json").read_text())
    assert "token_f1" not in plain["rows"][0] and "rationale_top_k" not in plain["options"]


@pytest.mark.slow
def test_two_processes_give_the_same_table_as_one(saved_planted, tmp_path):
    texts, labels = planted_texts(21, seed=8)  # odd: the processes get 11 and 10 texts
    rationales = planted_rationales(texts)
    # Text 0 (7 words) all marked, ten texts of one rationale word: k = round(17 / 11) = 2 over all the texts, while
    # the second process's texts alone (five of one word) would give k = 1.
    rationales[0] = [1] * len(texts[0].split())
    data = write_csv(tmp_path / "data.csv", texts, [("other", "planted")[label] for label in labels], rationales)
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "labelattn.cli"]
    outputs = {}
    for processes, prefix in ((1, [sys.executable, "-m", "labelattn.cli"]), (2, launch)):
        output = tmp_path / f"out{processes}"
        done = subprocess.run(
            [*prefix, *command(saved_planted, data, output, 21), "--rationale-column", "rationale"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        outputs[processes] = json.loads((output / "results.json").read_text())
    one, two = outputs[1], outputs[2]
    assert (one["processes"], two["processes"]) == (1, 2)
    assert [row["method"] for row in one["rows"]] == [row["method"] for row in two["rows"]]
    for row_one, row_two in zip(one["rows"], two["rows"], strict=True):
        assert row_one["texts"] == row_two["texts"] == 21
        for key in ("comprehensiveness", "sufficiency", "tau_loo"):
            assert row_one[key] == pytest.approx(row_two[key], abs=1e-5), (row_one["method"], key)
        for key in ("token_f1", "token_iou", "auprc", "rationale_texts"):  # k from all the texts, not each shard's
            assert row_one[key] == row_two[key], (row_one["method"], key)
    assert one["options"]["rationale_top_k"] == two["options"]["rationale_top_k"] == 2
    for method in one["methods"]:
        assert [r["text"] for r in one["per_text"][method]] == [r["text"] for r in two["per_text"][method]]
