"""What a training run reports of its probabilities: the calibration error before and after the temperature, and
the automatic coding rate at target accuracies (`labelattn.coding`), per level of a class hierarchy and with the
fallback to coarser levels; written as `coding.json` (the thresholds `labelattn predict` uses), a reliability
diagram and a coverage–accuracy curve beside the model card, and printed. `score_and_calibrate` is the end of a
training run and of an average: the scores, the temperature and this report."""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from labelattn import coding
from labelattn.coding import COVERAGE_PNG, RELIABILITY_PNG
from labelattn.training.scores import METRICS_DIR, predict_split, split_scores

if TYPE_CHECKING:
    from labelattn.data.records import Hierarchy, LabelledData

BINS = 15
CONFIDENCE = {False: "top probability", True: "least sure yes/no decision, min_c max(p_c, 1 - p_c)"}


def probabilities(logits: torch.Tensor, temperature: float, multi_label: bool) -> np.ndarray:
    """Class probabilities of `logits / temperature`: sigmoid for a multi-label model, softmax otherwise; in float32,
    as the model's forward gives them (float64 cost 4 s of a run at 8,322 × 1,918 logits, float32 1 s)."""
    scaled = logits.float() / temperature
    return (scaled.sigmoid() if multi_label else scaled.softmax(-1)).numpy()


def calibration_error(confidence: np.ndarray, correct: np.ndarray) -> float:
    """The expected calibration error (`BINS` equal-width bins), by the metric shipped in labelattn/metrics."""
    import evaluate

    metric = evaluate.load(str(METRICS_DIR / "calibration"), keep_in_memory=True)
    result = metric.compute(predictions=confidence.tolist(), references=correct.astype(int).tolist(), bins=BINS)
    return result["expected_calibration_error"]


def level_outputs(
    probs: np.ndarray, references: np.ndarray, label_names: list[str], hierarchy: "Hierarchy | None"
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """`(confidence, correct)` at every level of a single-label hierarchy, the classes' level first."""
    confidence, correct = coding.confidence_and_correct(probs, references, multi_label=False)
    levels = {hierarchy.levels[-1] if hierarchy else "class": (confidence, correct)}
    for level in hierarchy.levels[-2::-1] if hierarchy else []:
        groups = hierarchy.level_indices(label_names, level)
        grouped = coding.group_probabilities(probs, groups)
        levels[level] = (grouped.max(axis=1), grouped.argmax(axis=1) == np.asarray(groups)[references])
    return levels


def coding_rates(validation: tuple, test: tuple, targets: tuple[float, ...]) -> dict[str, Any]:
    """For each target: the threshold chosen on `validation` `(confidence, correct)`, and the rate and accuracy it
    gives on both splits."""
    rates = {}
    for target in targets:
        threshold = coding.choose_threshold(*validation, target)
        rates[f"{target:g}"] = {
            "threshold": threshold,
            "validation": coding.rate_and_accuracy(*validation, threshold),
            "test": coding.rate_and_accuracy(*test, threshold),
        }
    return rates


@dataclass
class CodingReport:
    """`summary`: what `coding.json` holds (and the card and the printout say); `curves`: the test split's
    `(confidence, correct)` before and after the temperature, for the figures."""

    summary: dict[str, Any]
    curves: dict[str, tuple[np.ndarray, np.ndarray]]


def coding_report(
    validation: tuple[torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    temperature: float,
    multi_label: bool,
    label_names: list[str],
    hierarchy: "Hierarchy | None" = None,
) -> CodingReport:
    """The calibration error and the coding rates, from the `(logits, references)` of the validation and test
    splits (logits before the temperature) and the temperature fitted on validation."""
    summary: dict[str, Any] = {"temperature": temperature, "confidence": CONFIDENCE[multi_label], "bins": BINS}
    outputs, before, errors = {}, {}, {}
    for split, (logits, references) in (("validation", validation), ("test", test)):
        references = references.numpy()
        probs = probabilities(logits, temperature, multi_label)
        if multi_label:  # a hierarchy's levels are scored for single-label data only
            outputs[split] = {"class": coding.confidence_and_correct(probs, references, multi_label)}
        else:
            outputs[split] = level_outputs(probs, references, label_names, hierarchy)
        raw = probabilities(logits, 1.0, multi_label)
        before[split] = coding.confidence_and_correct(raw, references, multi_label)
        after = next(iter(outputs[split].values()))
        errors[split] = {"before": calibration_error(*before[split]), "after": calibration_error(*after)}
    summary["expected_calibration_error"] = errors
    levels = list(outputs["test"])
    rates = {
        level: coding_rates(outputs["validation"][level], outputs["test"][level], coding.TARGETS) for level in levels
    }
    summary["thresholds"] = {target: rate["threshold"] for target, rate in rates[levels[0]].items()}
    summary["coding_rate"] = {f"{t:g}": rates[levels[0]][f"{t:g}"] for t in coding.REPORTED}
    if len(levels) > 1:
        summary["levels"] = {level: {f"{t:g}": rates[level][f"{t:g}"] for t in coding.REPORTED} for level in levels[1:]}
        summary["fallback"] = {"levels": levels}
        for target in coding.REPORTED:
            chain = [outputs["validation"][level] for level in levels]
            thresholds = coding.fallback_thresholds(chain, target)
            summary["fallback"][f"{target:g}"] = {
                "thresholds": thresholds,
                "validation": coding.fallback_coding(chain, thresholds),
                "test": coding.fallback_coding([outputs["test"][level] for level in levels], thresholds),
            }
    return CodingReport(summary, {"before": before["test"], "after": outputs["test"][levels[0]]})


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def rate_line(target: str, rate: dict[str, Any]) -> str:
    if rate["threshold"] is None:
        return f"at {float(target):.0%} accuracy: no threshold reached it on validation (every text to a person)"
    test, validation = rate["test"], rate["validation"]
    return (
        f"at {float(target):.0%} accuracy: {percent(test['rate'])} of test texts coded, accuracy "
        f"{percent(test['accuracy'])} (threshold {coding.shown(rate['threshold'])} chosen on validation: "
        f"{percent(validation['rate'])} coded, accuracy {percent(validation['accuracy'])})"
    )


def format_report(summary: dict[str, Any]) -> str:
    """The lines `labelattn train` prints, from `CodingReport.summary`."""
    errors = summary["expected_calibration_error"]["test"]
    lines = [
        f"calibration: temperature {summary['temperature']:.4f} (fitted on validation); test expected calibration "
        f"error {errors['before']:.4f} before, {errors['after']:.4f} after",
    ]
    lines += [f"automatic coding rate {rate_line(t, r)}" for t, r in summary["coding_rate"].items()]
    for level, rates in summary.get("levels", {}).items():
        lines += [f"  {level} level alone: coding rate {rate_line(t, r)}" for t, r in rates.items()]
    fallback = summary.get("fallback")
    for target in coding.REPORTED if fallback else []:
        test = fallback[f"{target:g}"]["test"]
        shares = ", ".join(f"{level} {percent(r)}" for level, r in zip(fallback["levels"], test["rates"], strict=True))
        lines.append(
            f"  falling back to coarser levels at {target:.0%}: {percent(test['rate'])} of test texts coded at some "
            f"level ({shares}), accuracy {percent(test['accuracy'])} (each at its level)"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------ figures


def reliability_figure(report: CodingReport):
    """Accuracy against confidence on the test split, before and after the temperature (scikit-learn's bins)."""
    from matplotlib.figure import Figure
    from sklearn.calibration import calibration_curve

    summary = report.summary
    figure = Figure(figsize=(4.8, 4.4), layout="constrained")
    axes = figure.subplots()
    axes.plot([0, 1], [0, 1], color="0.6", linestyle="--", label="perfect calibration")
    errors = summary["expected_calibration_error"]["test"]
    for name, colour in (("before", "tab:red"), ("after", "tab:blue")):
        confidence, correct = report.curves[name]
        accuracy, mean_confidence = calibration_curve(correct.astype(int), confidence, n_bins=BINS)
        label = f"{name} the temperature (ECE {errors[name]:.3f})"
        axes.plot(mean_confidence, accuracy, marker="o", markersize=3, color=colour, label=label)
    confidence_name = summary["confidence"].split(",")[0]
    axes.set(xlim=(0, 1), ylim=(0, 1), xlabel=f"confidence ({confidence_name})", ylabel="accuracy")
    axes.set_title(f"Reliability on the test split (T = {summary['temperature']:.3f})", fontsize=10)
    axes.legend(loc="upper left", fontsize=8)
    return figure


def coverage_figure(report: CodingReport):
    """The share of test texts coded (most confident first) against their accuracy, with the thresholds chosen on
    validation marked where they land on test."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(4.8, 4.4), layout="constrained")
    axes = figure.subplots()
    coverage, accuracy = coding.coverage_accuracy(*report.curves["after"])
    axes.plot(coverage, accuracy, color="tab:blue", label="test, most confident first")
    for target, rate in report.summary["coding_rate"].items():
        axes.axhline(float(target), color="0.6", linestyle=":", linewidth=1)
        test = rate["test"]
        if rate["threshold"] is not None and test["accuracy"] is not None:
            axes.plot(test["rate"], test["accuracy"], "o", label=f"threshold for {float(target):.0%} (validation)")
    axes.set(xlim=(0, 1), xlabel="share of texts coded by the model", ylabel="accuracy of those texts")
    axes.set_ylim(max(0.0, float(accuracy.min()) - 0.02), 1.005)
    axes.set_title("Automatic coding rate against accuracy", fontsize=10)
    axes.legend(loc="lower left", fontsize=8)
    return figure


def write_report(folder: Path, report: CodingReport) -> None:
    """`coding.json` and the two figures, into the model folder."""
    reliability_figure(report).savefig(Path(folder) / RELIABILITY_PNG, dpi=110)
    coverage_figure(report).savefig(Path(folder) / COVERAGE_PNG, dpi=110)
    coding.write_coding(folder, report.summary)


def score_and_calibrate(
    model, loaders: dict, accelerator, data: "LabelledData", metrics: dict, validation=None
) -> tuple[dict[str, dict], CodingReport]:
    """The scores of the validation and test splits (`validation`: the validation's `predict_split` tensors, when
    they are at hand), and the calibration: the temperature fitted on the validation logits
    (`labelattn.training.calibration`), set in the model's config so that its forward divides the logits by it, and
    what it gives (`labelattn.training.coding_report`). The model must predict without a temperature. The same on
    every process, as the logits are. What `labelattn train` and `labelattn average` do at their end."""
    from labelattn.training.calibration import fit_temperature

    if validation is None:
        validation = predict_split(model, loaders["validation"], accelerator, data.multi_label)
    predicted = {"validation": validation, "test": predict_split(model, loaders["test"], accelerator, data.multi_label)}
    scores = {
        split: split_scores(metrics, *predicted[split], data.multi_label, data.label_names, data.hierarchy)
        for split in predicted
    }
    splits = {split: (logits, references) for split, (_, references, logits) in predicted.items()}
    temperature = fit_temperature(*splits["validation"], data.multi_label)
    accelerator.unwrap_model(model).config.temperature = temperature
    report = coding_report(
        splits["validation"], splits["test"], temperature, data.multi_label, data.label_names, data.hierarchy
    )
    return scores, report
