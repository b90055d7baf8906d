"""The automatic coding rate: the share of texts a model codes alone while keeping a target accuracy on them.

A text is coded by the model when its confidence reaches a threshold, and by a person otherwise. The confidence is
the top class probability of a single-label model; of a multi-label model, the least sure of its yes/no decisions,
`min_c max(p_c, 1 - p_c)` (a text is right when its whole set of labels is). The threshold for a target accuracy is
chosen on the validation split, as the lowest confidence whose texts, all those at or above it, are still right at
least that often (the largest share of texts with that accuracy); the rate and accuracy it gives are then measured
on the test split. For a class hierarchy, a text the model is unsure of at the class level may be coded at a coarser
level (the group's probability is the sum of its classes'), each level with its own threshold, chosen in turn on the
validation texts the finer levels left to people.

`labelattn train` stores the thresholds in the model folder's `coding.json` (`CODING_FILE`), which
`labelattn predict --target-accuracy [--fallback]` and the Space read (`read_coding`, `stored_threshold`,
`stored_fallback`).
"""

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

CODING_FILE = "coding.json"
# The figures of the coding report beside it (`labelattn.training.coding_report`).
RELIABILITY_PNG = "reliability.png"
COVERAGE_PNG = "coverage-accuracy.png"
# The target accuracies whose thresholds a training run stores, and those it reports.
TARGETS = (0.8, 0.85, 0.9, 0.95, 0.97, 0.98, 0.99)
REPORTED = (0.95, 0.97)
# The target whose threshold the Space uses to say that a person should code a text.
SPACE_TARGET = 0.95


class CodingError(ValueError):
    """A threshold or target accuracy that cannot be used (the message says why and what to give instead)."""


def confidence_and_correct(
    probabilities: np.ndarray, references: np.ndarray, multi_label: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Each text's confidence `(n,)` and whether the model's prediction of it is right `(n,)`, from the class
    probabilities `(n, classes)` and the references (class indices, or 0/1 rows for a multi-label model)."""
    probabilities, references = np.asarray(probabilities), np.asarray(references)
    if multi_label:
        confidence = np.maximum(probabilities, 1 - probabilities).min(axis=1)
        right = ((probabilities >= 0.5) == references.astype(bool)).all(axis=1)
        return confidence.astype(np.float64), right
    return probabilities.max(axis=1).astype(np.float64), probabilities.argmax(axis=1) == references


def row_confidence(probabilities: list[float], multi_label: bool) -> float:
    """One text's confidence, from its class probabilities (as `confidence_and_correct` computes it)."""
    return min(max(p, 1 - p) for p in probabilities) if multi_label else max(probabilities)


def group_probabilities(probabilities: np.ndarray, groups: list[int]) -> np.ndarray:
    """The probability of every group `(n, groups)`: the sum of its classes', `groups[c]` the group of class c."""
    probabilities = np.asarray(probabilities)  # float32 from a model stays so: summed by group, not widened first
    membership = np.zeros((len(groups), max(groups) + 1), dtype=probabilities.dtype)  # (classes, groups)
    membership[np.arange(len(groups)), groups] = 1.0
    return probabilities @ membership


def choose_threshold(confidence: np.ndarray, correct: np.ndarray, target: float) -> float | None:
    """The lowest confidence such that the texts at or above it are right at least `target` of the time (the largest
    such share of texts); None when no such set of texts exists."""
    order = np.argsort(-confidence, kind="stable")
    ranked, right = confidence[order], correct[order].astype(np.float64)
    accuracy = np.cumsum(right) / np.arange(1, len(right) + 1)  # of the i+1 most confident texts
    ends_a_tie = np.append(ranked[1:] < ranked[:-1], True)  # texts of equal confidence are coded together
    reaching = np.flatnonzero((accuracy >= target) & ends_a_tie)
    return float(ranked[reaching[-1]]) if reaching.size else None


def rate_and_accuracy(confidence: np.ndarray, correct: np.ndarray, threshold: float | None) -> dict[str, Any]:
    """The share of texts coded at `threshold` (confidence at or above it) and their accuracy (None if none)."""
    coded = np.zeros(len(confidence), bool) if threshold is None else confidence >= threshold
    return {"rate": float(coded.mean()), "accuracy": float(correct[coded].mean()) if coded.any() else None}


def fallback_thresholds(levels: list[tuple[np.ndarray, np.ndarray]], target: float) -> list[float | None]:
    """For `levels` of `(confidence, correct)` from the finest up, each level's threshold chosen in turn on the texts
    the finer levels did not code."""
    left = np.ones(len(levels[0][0]), bool)
    thresholds = []
    for confidence, correct in levels:
        threshold = choose_threshold(confidence[left], correct[left], target) if left.any() else None
        thresholds.append(threshold)
        if threshold is not None:
            left &= confidence < threshold
    return thresholds


def fallback_coding(levels: list[tuple[np.ndarray, np.ndarray]], thresholds: list[float | None]) -> dict[str, Any]:
    """Where each text is coded with `fallback_thresholds`: the share coded at each level (finest first), the
    share coded at some level, and the accuracy of the coded texts, each judged at the level it was coded at."""
    left = np.ones(len(levels[0][0]), bool)
    rates, right = [], 0
    for (confidence, correct), threshold in zip(levels, thresholds, strict=True):
        coded = left & (confidence >= threshold) if threshold is not None else np.zeros_like(left)
        rates.append(float(coded.mean()))
        right += int(correct[coded].sum())
        left &= ~coded
    coded_share = 1 - float(left.mean())
    accuracy = right / (coded_share * len(left)) if coded_share else None
    return {"rates": rates, "rate": coded_share, "accuracy": accuracy}


def fallback_codes(
    probabilities: np.ndarray, levels: list[tuple[list[int] | None, float | None]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each text is coded with stored `fallback_thresholds`: for `levels` of `(groups, threshold)` from the
    classes up (`groups[c]` the group of class c; None at the classes' own level), the index of the finest level
    whose most probable group reaches its threshold (-1 where none does: a person codes the text), that group's index
    and its probability (NaN where none), each `(n,)`. Grouped in the probabilities' own dtype, as the training
    report groups them when it fits the thresholds, so a text is coded at the same level by both."""
    probabilities = np.asarray(probabilities)
    level = np.full(len(probabilities), -1)
    group, probability = np.zeros(len(probabilities), dtype=np.int64), np.full(len(probabilities), np.nan)
    for index, (groups, threshold) in enumerate(levels):
        grouped = probabilities if groups is None else group_probabilities(probabilities, groups)
        best, top = grouped.argmax(axis=1), grouped.max(axis=1).astype(np.float64)  # as confidence_and_correct
        coded = (level < 0) & (top >= threshold) if threshold is not None else np.zeros(len(level), bool)
        level[coded], group[coded], probability[coded] = index, best[coded], top[coded]
    return level, group, probability


def coverage_accuracy(confidence: np.ndarray, correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The curve of the share of texts coded (most confident first) against their accuracy."""
    right = correct[np.argsort(-confidence, kind="stable")].astype(np.float64)
    count = np.arange(1, len(right) + 1)
    return count / len(right), np.cumsum(right) / count


def shown(threshold: float) -> str:
    """A threshold as printed: 4 decimals, or as many as show how far from 1 it is (0.9999999248, not 1.0000)."""
    if threshold >= 1:
        return "1"
    return f"{threshold:.{max(4, 2 - math.floor(math.log10(1 - threshold)))}f}"


# --------------------------------------------------------------------------------------------- stored thresholds


def check_probability(value: float, option: str) -> float:
    """`value` if it is a number strictly between 0 and 1; otherwise a `CodingError` naming `option`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise CodingError(f"{option} {value!r}: give a number strictly between 0 and 1, e.g. 0.95.")
    return float(value)


def write_coding(folder: str | Path, coding: dict[str, Any]) -> Path:
    path = Path(folder) / CODING_FILE
    path.write_text(json.dumps(coding, indent=2) + "\n")
    return path


def read_coding(model: str, revision: str | None = None) -> dict[str, Any] | None:
    """The `coding.json` of a model folder, or of a Hub id in the cache; None if the model has none."""
    from transformers.utils import cached_file

    path = Path(model) / CODING_FILE if Path(model).is_dir() else None
    if path is None:
        found = cached_file(
            model,
            CODING_FILE,
            revision=revision,
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
        )
        path = Path(found) if found else None
    return json.loads(path.read_text()) if path is not None and path.is_file() else None


def stored_threshold(coding: dict[str, Any] | None, target: float, model: str) -> float:
    """The threshold that `labelattn train` chose on the validation split for `target` accuracy at the class level;
    a `CodingError` when the model has none for it (no coding.json, another target, or a target never reached)."""
    target = check_probability(target, "--target-accuracy")
    if coding is None:
        raise CodingError(
            f"--target-accuracy: {model} has no {CODING_FILE} (it was not trained by this version of `labelattn "
            "train`), so no threshold was chosen for it: give one with --manual-below P."
        )
    thresholds = coding["thresholds"]
    if f"{target:g}" not in thresholds:
        raise CodingError(
            f"--target-accuracy {target:g}: {model}'s {CODING_FILE} has thresholds for {', '.join(thresholds)}; "
            "pick one of them, or give a threshold with --manual-below P."
        )
    threshold = thresholds[f"{target:g}"]
    if threshold is None:
        raise CodingError(
            f"--target-accuracy {target:g}: on its validation split, {model} reached {target:.0%} accuracy at no "
            "threshold, so none was stored; pick a lower target, or give a threshold with --manual-below P."
        )
    return threshold


def stored_fallback(coding: dict[str, Any] | None, target: float, model: str) -> list[tuple[str, float | None]]:
    """The levels of a class hierarchy, the classes' first, each with the threshold that `labelattn train` chose on
    the validation texts the finer levels left (`fallback_thresholds`) for `target` accuracy; a `CodingError` when
    the model has none (no coding.json, labels without groups, or a target it was not chosen for)."""
    target = check_probability(target, "--target-accuracy")
    if coding is None:
        raise CodingError(
            f"--fallback: {model} has no {CODING_FILE} (it was not trained by this version of `labelattn train`), so "
            "no level's threshold was chosen for it: drop --fallback and give a threshold with --manual-below P."
        )
    fallback = coding.get("fallback")
    if fallback is None:
        raise CodingError(
            f"--fallback: {model}'s {CODING_FILE} holds no coarser level's threshold (its labels have no groups, or "
            "it predicts several labels per text): drop --fallback, or train a one-label-per-text model on grouped "
            "labels (--hierarchy-separator, or --label-file with parents)."
        )
    if f"{target:g}" not in fallback:
        stored = ", ".join(key for key in fallback if key != "levels")
        raise CodingError(
            f"--fallback --target-accuracy {target:g}: {model}'s {CODING_FILE} has the levels' thresholds for "
            f"{stored}; pick one of them."
        )
    return list(zip(fallback["levels"], fallback[f"{target:g}"]["thresholds"], strict=True))
