"""Precision@k and recall@k as an `evaluate` metric shipped with labelattn, so that it loads offline by path:
`evaluate.load("labelattn/metrics/precision_at_k")`, or `evaluate.load(..., "multilabel")` for 0/1 label rows."""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = """The measures of classification into many classes, where a model ranks hundreds or thousands of
classes and a reader looks at the first few: precision@k is the share of a text's k highest-scored classes that are
its labels, recall@k the share of its labels found among them (for single-label data, the top-k accuracy). Both are
averaged over texts; recall over the texts that have at least one label. Ties in the scores go to the lower class
index."""

_INPUTS = """
Args:
    predictions: the scores of every class `(n, num_labels)` (logits or probabilities: only their order counts).
    references: class indices `(n,)`, or 0/1 indicators `(n, num_labels)` with config "multilabel".
    k: one cut-off or a list of them (default 5).
Returns:
    {"precision_at_K": float, "recall_at_K": float} for each cut-off K
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _INPUTS)
class PrecisionAtK(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        multilabel = self.config_name == "multilabel"
        references = datasets.Sequence(datasets.Value("int32")) if multilabel else datasets.Value("int32")
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {"predictions": datasets.Sequence(datasets.Value("float32")), "references": references}
            ),
        )

    def _compute(self, predictions, references, k=5) -> dict:
        scores = np.asarray(predictions, dtype=np.float32)  # (n, num_labels)
        if self.config_name == "multilabel":
            relevant = np.asarray(references, dtype=bool)
        else:
            relevant = np.zeros(scores.shape, dtype=bool)
            relevant[np.arange(len(scores)), np.asarray(references)] = True
        cutoffs = [k] if isinstance(k, int) else list(k)
        if not cutoffs or min(cutoffs) < 1 or max(cutoffs) > scores.shape[1]:
            raise ValueError(f"k must be between 1 and the number of classes ({scores.shape[1]}), got {k}.")
        ranked = np.argsort(-scores, axis=1, kind="stable")[:, : max(cutoffs)]
        hits = np.take_along_axis(relevant, ranked, axis=1).cumsum(axis=1)  # labels among the first j+1 classes
        labelled = relevant.sum(axis=1)
        results = {}
        for cutoff in cutoffs:
            found = hits[:, cutoff - 1]
            results[f"precision_at_{cutoff}"] = float((found / cutoff).mean())
            has_labels = labelled > 0
            recall = found[has_labels] / labelled[has_labels]
            results[f"recall_at_{cutoff}"] = float(recall.mean()) if recall.size else 0.0
        return results
