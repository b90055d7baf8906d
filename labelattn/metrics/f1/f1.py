"""F1 as an `evaluate` metric shipped with labelattn, so that it loads offline by path:
`evaluate.load("labelattn/metrics/f1")`, or `evaluate.load("labelattn/metrics/f1", "multilabel")`."""

import datasets
import evaluate
from sklearn.metrics import f1_score

_DESCRIPTION = """F1, the harmonic mean of precision and recall, per class and then averaged: "macro" (the mean over
classes, each class counting the same), "micro" (from the pooled counts), "weighted", or None (one score per class).
Config "multilabel" takes 0/1 indicator rows."""

_INPUTS = """
Args:
    predictions: class indices `(n,)`, or 0/1 indicators `(n, num_labels)` with config "multilabel".
    references: the same shape as `predictions`.
    average: "macro" (default), "micro", "weighted", "binary" or None.
    labels: the classes to score (default: those present in predictions or references).
    sample_weight: optional weights `(n,)`.
Returns:
    {"f1": float, or a list of floats per class when average is None}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _INPUTS)
class F1(evaluate.Metric):
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

    def _compute(self, predictions, references, average="macro", labels=None, sample_weight=None) -> dict:
        # zero_division=0: a class never predicted scores 0 rather than raising a warning per call.
        score = f1_score(
            references, predictions, average=average, labels=labels, sample_weight=sample_weight, zero_division=0
        )
        return {"f1": score.tolist() if average is None else float(score)}
