"""Precision@k and recall@k as an `evaluate` metric shipped with labelattn, so that it loads offline by path:
`evaluate.load("labelattn/metrics/precision_at_k")`, or `evaluate.load(..., "multilabel")` for 0/1 label rows.

It takes each text's highest-scored classes, not every class's score: at ICD-10-CM's size (8,322 texts × 1,918
classes) `evaluate` passed the 16 million scores through Arrow and back as Python lists, 4.5 s a split, where the
5 best classes (`torch.topk`, `np.argsort(-scores)[:, :k]`, or a fastText model's `predict(k=5)`) cost nothing."""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = """The measures of classification into many classes, where a model ranks hundreds or thousands of
classes and a reader looks at the first few: precision@k is the share of a text's k highest-scored classes that are
its labels, recall@k the share of its labels found among them (for single-label data, the top-k accuracy). Both are
averaged over texts; recall over the texts that have at least one label."""

_INPUTS = """
Args:
    predictions: each text's highest-scored class indices, best first `(n, at least max(k))`, as
        `logits.topk(5).indices` gives them.
    references: class indices `(n,)`, or 0/1 indicators `(n, num_labels)` with config "multilabel".
    k: one cut-off or a list of them (default 5), each at most the number of ranked classes.
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
                {"predictions": datasets.Sequence(datasets.Value("int32")), "references": references}
            ),
        )

    def _compute(self, predictions, references, k=5) -> dict:
        ranked = np.asarray(predictions, dtype=np.int64)  # (n, ranked classes)
        cutoffs = [k] if isinstance(k, int) else list(k)
        if not cutoffs or min(cutoffs) < 1 or max(cutoffs) > ranked.shape[1]:
            raise ValueError(
                f"k must be between 1 and the number of ranked classes given for each text ({ranked.shape[1]}), "
                f"got {k}: pass each text's top max(k) classes, e.g. logits.topk(max(k)).indices."
            )
        if self.config_name == "multilabel":
            relevant = np.asarray(references, dtype=bool)  # (n, num_labels)
            hits = np.take_along_axis(relevant, ranked, axis=1)
            labelled = relevant.sum(axis=1)
        else:
            hits = ranked == np.asarray(references)[:, None]
            labelled = np.ones(len(ranked), dtype=np.int64)
        found_by = hits[:, : max(cutoffs)].cumsum(axis=1)  # labels among the first j+1 classes
        results = {}
        for cutoff in cutoffs:
            found = found_by[:, cutoff - 1]
            results[f"precision_at_{cutoff}"] = float((found / cutoff).mean())
            has_labels = labelled > 0
            recall = found[has_labels] / labelled[has_labels]
            results[f"recall_at_{cutoff}"] = float(recall.mean()) if recall.size else 0.0
        return results
