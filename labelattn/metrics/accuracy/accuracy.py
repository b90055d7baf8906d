"""Accuracy as an `evaluate` metric shipped with labelattn, so that it loads offline by path:
`evaluate.load("labelattn/metrics/accuracy")` (the Hub's `evaluate.load("accuracy")` fetches a script)."""

import datasets
import evaluate
from sklearn.metrics import accuracy_score

_DESCRIPTION = """Fraction of the predictions equal to the references. For multi-label data (config "multilabel"),
a prediction counts only if its whole set of labels is right (subset accuracy)."""

_INPUTS = """
Args:
    predictions: class indices `(n,)`, or 0/1 indicators `(n, num_labels)` with config "multilabel".
    references: the same shape as `predictions`.
    sample_weight: optional weights `(n,)`.
Returns:
    {"accuracy": float in [0, 1]}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _INPUTS)
class Accuracy(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        value = (
            datasets.Sequence(datasets.Value("int32")) if self.config_name == "multilabel" else datasets.Value("int32")
        )
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_INPUTS,
            features=datasets.Features({"predictions": value, "references": value}),
        )

    def _compute(self, predictions, references, sample_weight=None) -> dict[str, float]:
        return {"accuracy": float(accuracy_score(references, predictions, sample_weight=sample_weight))}
