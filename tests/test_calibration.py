"""Calibrated probabilities and the automatic coding rate: the temperature fitted on validation, thresholds that hold
on held-out rows, and the user's path end to end: `labelattn train` stores the temperature and the thresholds,
`labelattn predict --target-accuracy / --manual-below` flags the rows for people (and refuses bad values before
writing anything), `--fallback` codes the rows a grouped model is unsure of at a coarser level, and the Space says
when a prediction falls below the threshold."""

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import evaluate
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import FILLER
from test_train import KEYS, planted_rows
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

from labelattn import cli, coding
from labelattn.training.calibration import MIN_TEMPERATURE, fit_temperature, nll
from labelattn.training.coding_report import coding_report
from labelattn.training.scores import METRICS_DIR

ROOT = Path(__file__).resolve().parents[1]
SIGNAL = 1.5  # the true class's logit is N(SIGNAL, 1), the others' N(0, 1): the posterior's logits are SIGNAL * z


def gaussian_logits(n: int, seed: int, classes: int = 5, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded toy model: logits `scale * SIGNAL * z`, calibrated at scale 1 and overconfident above it."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=generator)
    z = torch.randn(n, classes, generator=generator, dtype=torch.float64)
    z[torch.arange(n), labels] += SIGNAL
    return scale * SIGNAL * z, labels


def ece(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0) -> float:
    probabilities = (logits / temperature).softmax(-1).numpy()
    confidence, correct = coding.confidence_and_correct(probabilities, labels.numpy(), multi_label=False)
    metric = evaluate.load(str(METRICS_DIR / "calibration"), keep_in_memory=True)
    result = metric.compute(predictions=confidence.tolist(), references=correct.astype(int).tolist())
    return result["expected_calibration_error"]


# --------------------------------------------------------------------------------------------- the pieces


def test_the_temperature_undoes_overconfidence_and_lowers_the_calibration_error():
    validation, test = gaussian_logits(6000, seed=0, scale=3.0), gaussian_logits(6000, seed=1, scale=3.0)
    temperature = fit_temperature(*validation, multi_label=False)
    assert temperature == pytest.approx(3.0, rel=0.08)  # the scale the toy model was made overconfident by
    before, after = ece(*test), ece(*test, temperature)
    assert after <= before
    assert after < 0.02 < before  # 15 bins of 6,000 rows: sampling noise of about 0.01


def test_a_multi_label_model_shares_one_temperature_fitted_on_its_sigmoids():
    generator = torch.Generator().manual_seed(0)
    labels = (torch.rand(4000, 6, generator=generator) < 0.3).double()
    logits = 4.0 * (torch.randn(4000, 6, generator=generator, dtype=torch.float64) + 2 * labels - 1)
    temperature = fit_temperature(logits[:2000], labels[:2000], multi_label=True)
    assert temperature > 1  # overconfident: the fit softens it
    assert nll(logits[2000:] / temperature, labels[2000:], True) < nll(logits[2000:], labels[2000:], True)


def test_a_validation_split_never_wrong_keeps_the_temperature_bounded():
    logits = torch.tensor([[5.0, 0.0], [0.0, 5.0]] * 20)
    labels = torch.tensor([0, 1] * 20)
    temperature = fit_temperature(logits, labels, multi_label=False)
    assert MIN_TEMPERATURE <= temperature < 1  # sharper, as it should, but not towards 0


def test_the_calibration_error_of_known_cases():
    metric = evaluate.load(str(METRICS_DIR / "calibration"), keep_in_memory=True)
    right = [1] * 8 + [0] * 2
    assert metric.compute(predictions=[0.8] * 10, references=right)["expected_calibration_error"] == pytest.approx(0)
    assert metric.compute(predictions=[1.0] * 10, references=[0] * 10)["expected_calibration_error"] == 1.0


@pytest.mark.parametrize("target", [0.95, 0.97])
def test_a_threshold_chosen_on_validation_holds_its_accuracy_on_held_out_rows(target):
    validation, test = gaussian_logits(20000, seed=2), gaussian_logits(20000, seed=3)
    confidence = {}
    for split, (logits, labels) in (("validation", validation), ("test", test)):
        probabilities = logits.softmax(-1).numpy()
        confidence[split] = coding.confidence_and_correct(probabilities, labels.numpy(), multi_label=False)
    threshold = coding.choose_threshold(*confidence["validation"], target)
    on_validation = coding.rate_and_accuracy(*confidence["validation"], threshold)
    on_test = coding.rate_and_accuracy(*confidence["test"], threshold)
    assert on_validation["accuracy"] >= target
    # The largest share of validation rows at that accuracy: coding any more rows falls below it.
    coverage, accuracy = coding.coverage_accuracy(*confidence["validation"])
    assert (accuracy[coverage > on_validation["rate"] + 1e-12] < target).all()
    assert on_test["accuracy"] >= target - 0.01
    assert abs(on_test["rate"] - on_validation["rate"]) < 0.02


def test_an_accuracy_no_set_of_rows_reaches_has_no_threshold():
    confidence, correct = np.array([0.9, 0.8, 0.7]), np.array([False, True, False])
    assert coding.choose_threshold(confidence, correct, 0.95) is None
    assert coding.choose_threshold(confidence, correct, 0.5) == 0.8  # the two most confident: one right of two


def test_rows_of_equal_confidence_are_coded_together():
    confidence, correct = np.array([0.9, 0.9, 0.9, 0.6]), np.array([True, True, False, True])
    assert coding.choose_threshold(confidence, correct, 0.9) is None  # never the first two of the three alone


def test_falling_back_to_the_group_codes_more_rows_at_the_target_accuracy():
    """Ten classes in five pairs: the class is often unsure between the two of a pair, the pair seldom."""
    groups = [c // 2 for c in range(10)]
    hierarchy = type("Hierarchy", (), {"levels": ["pair", "class"], "level_indices": lambda self, names, level: groups})
    splits = {}
    for split, seed in (("validation", 4), ("test", 5)):
        logits, labels = gaussian_logits(8000, seed, classes=10)
        logits[torch.arange(8000), labels ^ 1] += 2.0  # the sibling scores high too
        splits[split] = (logits.float(), labels)
    summary = coding_report(splits["validation"], splits["test"], 1.0, False, list("abcdefghij"), hierarchy()).summary
    fallback = summary["fallback"]["0.95"]
    class_alone = summary["coding_rate"]["0.95"]["test"]["rate"]
    assert fallback["test"]["rates"][0] == pytest.approx(class_alone)  # the class level is tried first
    assert fallback["test"]["rate"] > class_alone + 0.1
    assert fallback["validation"]["accuracy"] >= 0.95 and fallback["test"]["accuracy"] >= 0.94
    assert summary["levels"]["pair"]["0.95"]["test"]["rate"] > class_alone


# --------------------------------------------------------------------------------------------- the user's path


def labelattn(*args: str) -> subprocess.CompletedProcess:
    """`labelattn ARGS` in a fresh process, as users run it (one thread: the cores are shared)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LABELATTN_DEBUG": ""}
    command = [sys.executable, "-m", "labelattn", *map(str, args)]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def predict(*args, capsys) -> tuple[int, str]:
    """`labelattn predict ARGS` through the command line's own entry point, in this process (quicker)."""
    capsys.readouterr()
    code = cli.main(["predict", *map(str, args), "--no-progress"])
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, str]:
    """A model trained by `labelattn train` on rows a model can be sure of and rows it cannot, the rows' file, and
    what the command printed. Three rows in four hold their class's planted word; the fourth holds filler words alone
    and a label drawn at random. So the top probability tells the two apart, and a threshold on it reaches every
    target accuracy on the validation split, as a coder's data would (with random labels on rows that keep their
    planted word, no threshold could, and whether one seemed to hung on a row or two)."""
    folder = tmp_path_factory.mktemp("calibration")
    rng = random.Random(0)
    unsure = [{"text": " ".join(rng.sample(FILLER, 7)), "label": rng.choice(list(KEYS))} for _ in range(150)]
    rows = planted_rows(450) + unsure
    rng.shuffle(rows)
    data = folder / "rows.csv"
    data.write_text("text,label\n" + "".join(f"{r['text']},{r['label']}\n" for r in rows))
    options = ["--hidden-size", "32", "--batch-size", "8", "--epochs", "4", "--seed", "1", "--learning-rate", "2e-2"]
    result = labelattn("train", "--data", data, *options, "--output-dir", folder / "model")
    assert result.returncode == 0, result.stderr
    return folder / "model", data, result.stdout


def test_train_stores_the_temperature_and_reports_calibration_and_coding_rates(trained):
    model_dir, _, printed = trained
    stored = json.loads((model_dir / coding.CODING_FILE).read_text())
    config = json.loads((model_dir / "config.json").read_text())
    assert config["temperature"] == stored["temperature"] > 0
    errors = stored["expected_calibration_error"]["test"]
    assert f"error {errors['before']:.4f} before, {errors['after']:.4f} after" in printed
    assert "automatic coding rate at 95% accuracy" in printed and "at 97% accuracy" in printed
    card = (model_dir / "README.md").read_text()
    assert f"**{errors['before']:.4f} before, {errors['after']:.4f} after**" in card
    for figure in ("reliability.png", "coverage-accuracy.png"):
        assert (model_dir / figure).read_bytes().startswith(b"\x89PNG") and f"]({figure})" in card
    assert set(stored["thresholds"]) == {f"{t:g}" for t in coding.TARGETS}

    # The temperature reloads from config.json, and the forward divides the logits by it.
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    inputs = tokenizer(["the zebra of it", "granite or fern"], padding=True, return_tensors="pt")
    calibrated = AutoModelForSequenceClassification.from_pretrained(model_dir, trust_remote_code=True).eval()
    assert calibrated.config.temperature == stored["temperature"]
    raw = AutoModelForSequenceClassification.from_pretrained(model_dir, trust_remote_code=True, temperature=None)
    with torch.no_grad():
        expected = raw.eval()(**inputs).logits / stored["temperature"]
        torch.testing.assert_close(calibrated(**inputs).logits, expected)
    # The pipeline's scores are the calibrated probabilities.
    scores = pipeline("text-classification", model=calibrated, tokenizer=tokenizer)(["the zebra of it"])[0]["score"]
    assert scores == pytest.approx(expected[0].softmax(-1).max().item(), rel=1e-5)


def test_predict_flags_the_rows_below_the_stored_threshold_and_counts_them(trained, tmp_path, capsys):
    model_dir, data, _ = trained
    thresholds = json.loads((model_dir / coding.CODING_FILE).read_text())["thresholds"]
    target = next(t for t in ("0.95", "0.9", "0.85", "0.8") if thresholds[t] is not None)
    output = tmp_path / "rows.csv"
    code, printed = predict(model_dir, data, "--target-accuracy", target, "--output", output, capsys=capsys)
    assert code == 0, printed
    rows = pd.read_csv(output)
    flagged = rows[rows["manual"]]
    assert (flagged["probability"] < thresholds[target]).all()
    assert (rows[~rows["manual"]]["probability"] >= thresholds[target]).all()
    assert f"labelattn: {len(flagged)} of {len(rows)} row(s)" in printed

    output = tmp_path / "all.jsonl"
    code, printed = predict(model_dir, data, "--manual-below", "0.999", "--output", output, capsys=capsys)
    assert code == 0, printed
    rows = pd.read_json(output, lines=True)
    assert rows["manual"].equals(rows["probability"] < 0.999)


@pytest.mark.parametrize("value", ["0", "1", "1.5", "-0.2", "nan"])
def test_a_threshold_outside_zero_and_one_is_refused_before_anything_is_written(trained, tmp_path, value, capsys):
    model_dir, data, _ = trained
    for option in ("--manual-below", "--target-accuracy"):
        code, printed = predict(model_dir, data, option, value, "--output", tmp_path / "out.csv", capsys=capsys)
        assert code == 2
        assert printed.strip().splitlines() == [
            f"labelattn predict: error: {option} {float(value)!r}: give a number strictly between 0 and 1, e.g. 0.95."
        ]
        assert list(tmp_path.iterdir()) == []


def test_a_target_accuracy_without_a_stored_threshold_is_refused_with_the_way_out(trained, tmp_path, capsys):
    model_dir, data, _ = trained
    copy = shutil.copytree(model_dir, tmp_path / "model", ignore=shutil.ignore_patterns("checkpoints"))
    stored = json.loads((copy / coding.CODING_FILE).read_text())
    stored["thresholds"]["0.99"] = None  # as when the validation split reaches 99% at no threshold
    (copy / coding.CODING_FILE).write_text(json.dumps(stored))
    output = tmp_path / "out.csv"
    cases = {
        "0.99": "reached 99% accuracy at no threshold",
        "0.93": "has thresholds for 0.8, 0.85, 0.9, 0.95, 0.97, 0.98, 0.99",
    }
    for target, message in cases.items():
        code, printed = predict(copy, data, "--target-accuracy", target, "--output", output, capsys=capsys)
        assert code == 2 and message in printed and "--manual-below P" in printed
    (copy / coding.CODING_FILE).unlink()
    code, printed = predict(copy, data, "--target-accuracy", "0.95", "--output", output, capsys=capsys)
    assert code == 2 and "has no coding.json" in printed
    assert not output.exists() and not output.with_name("out.csv.shards").exists()


# (group, class, the class's word); each group's own word.
CLASSES = [("living", "animal", "zebra"), ("living", "plant", "fern"), ("mineral", "stone", "granite"),
           ("mineral", "metal", "copper")]  # fmt: skip
GROUP_WORDS = {"living": "organic", "mineral": "geology"}
# The CSV's probabilities are float32 written as text, the thresholds float64: a row this close to one is either side.
ROUNDING = 1e-6


@pytest.fixture(scope="module")
def grouped(tmp_path_factory) -> tuple[Path, Path]:
    """A model of four classes in two groups, trained by `labelattn train` on rows that always hold their group's
    word and, half of the time, their class's: without it the class is a guess between the group's classes, the
    group is not. Its rows' file beside it."""
    folder, rng = tmp_path_factory.mktemp("grouped"), random.Random(0)
    lines = []
    for i in range(800):
        group, name, word = CLASSES[i % len(CLASSES)]
        words = [*rng.sample(FILLER, 5), GROUP_WORDS[group], *([word] if rng.random() < 0.5 else [])]
        rng.shuffle(words)
        lines.append(f"{' '.join(words)},{group}>{name}\n")
    data = folder / "rows.csv"
    data.write_text("text,label\n" + "".join(lines))
    options = ["--hidden-size", "32", "--batch-size", "8", "--epochs", "3", "--seed", "1", "--learning-rate", "2e-2"]
    result = labelattn("train", "--data", data, "--hierarchy-separator", ">", "--hierarchy-levels", "group,class",
                       *options, "--output-dir", folder / "model")  # fmt: skip
    assert result.returncode == 0, result.stderr
    return folder / "model", data


def test_predict_falls_back_to_the_group_where_the_class_is_unsure(grouped, tmp_path, capsys):
    model_dir, data = grouped
    fallback = json.loads((model_dir / coding.CODING_FILE).read_text())["fallback"]
    assert fallback["levels"] == ["class", "group"]
    class_threshold, group_threshold = fallback["0.95"]["thresholds"]
    code, printed = predict(model_dir, data, "--target-accuracy", "0.95", "--fallback", "--output",
                            tmp_path / "rows.csv", capsys=capsys)  # fmt: skip
    assert code == 0, printed
    rows = pd.read_csv(tmp_path / "rows.csv")
    config = json.loads((model_dir / "config.json").read_text())
    group_of = {label: ancestors[0] for label, ancestors in config["label_hierarchy"]["ancestors"].items()}
    for row in rows.itertuples():
        groups = {}
        for label, group in group_of.items():
            groups[group] = groups.get(group, 0.0) + getattr(row, f"prob_{label}")
        best_group = max(groups, key=groups.get)
        if row.coded_level == "class":
            assert row.probability >= class_threshold - ROUNDING and row.coded_label == row.predicted_label
            assert row.coded_probability == pytest.approx(row.probability, rel=1e-6)
        elif row.coded_level == "group":
            assert row.probability < class_threshold + ROUNDING and row.coded_label == best_group
            assert row.coded_probability == pytest.approx(groups[best_group], rel=1e-5)
            assert row.coded_probability >= group_threshold - ROUNDING
        else:
            assert row.manual and pd.isna(row.coded_label)
            assert row.probability < class_threshold + ROUNDING and groups[best_group] < group_threshold + ROUNDING
        assert row.manual == (row.coded_level not in ("class", "group"))
    counts = rows["coded_level"].value_counts()
    assert counts.get("class", 0) > 0 and counts.get("group", 0) > 0  # half the rows name their class
    assert f"of {len(rows)} row(s), {counts.get('class', 0)} at class, {counts.get('group', 0)} at group;" in printed
    # The class level alone sends every row coded at the group to a person.
    code, printed = predict(model_dir, data, "--target-accuracy", "0.95", "--output", tmp_path / "plain.csv",
                            capsys=capsys)  # fmt: skip
    assert code == 0, printed
    assert pd.read_csv(tmp_path / "plain.csv")["manual"].sum() == rows["manual"].sum() + counts.get("group", 0)


def test_a_fallback_the_model_has_no_thresholds_for_is_refused_before_anything_is_written(
    grouped, trained, tmp_path, capsys
):
    cases = [
        (grouped[0], ["--fallback"], "--fallback uses the thresholds `labelattn train` chose for a target accuracy"),
        (grouped[0], ["--fallback", "--target-accuracy", "0.9"], "has the levels' thresholds for 0.95, 0.97"),
        (trained[0], ["--fallback", "--target-accuracy", "0.95"], "holds no coarser level's threshold"),
    ]
    for model_dir, options, message in cases:
        code, printed = predict(model_dir, grouped[1], *options, "--output", tmp_path / "out.csv", capsys=capsys)
        assert code == 2 and message in printed, printed
        assert list(tmp_path.iterdir()) == []


def test_the_space_says_when_a_prediction_is_below_the_threshold(trained, tmp_path):
    from labelattn.space import app

    model_dir, _, _ = trained
    backend = app.Backend(str(model_dir))
    threshold = json.loads((model_dir / coding.CODING_FILE).read_text())["thresholds"]["0.95"]
    assert backend.manual_below == threshold
    backend.manual_below = 0.999  # a text the model is unsure of: no planted word
    unsure = backend.predict("the one of it was here")
    assert max(unsure.values()) < 0.999
    assert "A person should code this text" in app.manual_note(unsure, backend)
    backend.manual_below = 0.01
    assert app.manual_note(unsure, backend) == ""


def test_explanations_of_a_calibrated_model_are_scaled_by_its_temperature(trained):
    from explainers import explain

    model_dir, _, _ = trained
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    calibrated = AutoModelForSequenceClassification.from_pretrained(model_dir, trust_remote_code=True).eval()
    raw = AutoModelForSequenceClassification.from_pretrained(model_dir, trust_remote_code=True, temperature=None)
    temperature, text = calibrated.config.temperature, "a zebra near the fern"
    scaled, unscaled = (explain(m, tokenizer, text, method="label_attention") for m in (calibrated, raw.eval()))
    assert scaled.target == unscaled.target
    np.testing.assert_allclose(scaled.scores, np.array(unscaled.scores) / temperature, rtol=1e-4, atol=1e-6)
    with torch.no_grad():
        logits = raw(**tokenizer([text], return_tensors="pt")).logits[0]
    probability = explain(calibrated, tokenizer, text, method="saliency", output="probability").probability
    assert probability == pytest.approx((logits / temperature).softmax(-1).max().item(), rel=1e-5)
