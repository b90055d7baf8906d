"""The expected calibration error as an `evaluate` metric shipped with labelattn, so that it loads offline by path:
`evaluate.load("labelattn/metrics/calibration")`."""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = """Whether a model's probabilities mean what they say: of the texts a model gives a probability of
about 0.9, about 90% should be right. The confidences are cut into `bins` equal-width bins on [0, 1]; the expected
calibration error (ECE) is the mean over the bins, weighted by their share of the texts, of |accuracy - mean
confidence| in the bin (Guo et al., 2017, "On Calibration of Modern Neural Networks"). The maximum calibration error
is the largest of those gaps over the non-empty bins. 0 is perfect calibration."""

_INPUTS = """
Args:
    predictions: the confidence of each prediction `(n,)` in [0, 1] (the top probability, for a single-label model).
    references: 1 where that prediction was right, 0 where it was wrong `(n,)`.
    bins: the number of equal-width bins (default 15).
Returns:
    {"expected_calibration_error": float, "maximum_calibration_error": float}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _INPUTS)
class Calibration(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="Guo, Pleiss, Sun and Weinberger, On Calibration of Modern Neural Networks, ICML 2017.",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {"predictions": datasets.Value("float64"), "references": datasets.Value("int32")}
            ),
        )

    def _compute(self, predictions, references, bins=15) -> dict:
        confidence = np.asarray(predictions, dtype=np.float64)
        right = np.asarray(references, dtype=np.float64)
        if not isinstance(bins, int) or bins < 1:
            raise ValueError(f"bins must be a positive integer, got {bins!r}.")
        if confidence.size and (confidence.min() < 0 or confidence.max() > 1):
            raise ValueError("predictions are confidences: every one must be in [0, 1].")
        # Bin b holds (b/bins, (b+1)/bins]; a confidence of 0 goes to the first bin.
        index = np.clip(np.ceil(confidence * bins).astype(int) - 1, 0, bins - 1)
        count = np.bincount(index, minlength=bins)
        gap = np.abs(np.bincount(index, right, bins) - np.bincount(index, confidence, bins))  # per-bin sums
        filled = count > 0
        return {
            "expected_calibration_error": float(gap.sum() / max(confidence.size, 1)),
            "maximum_calibration_error": float((gap[filled] / count[filled]).max()) if filled.any() else 0.0,
        }
