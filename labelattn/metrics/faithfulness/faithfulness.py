"""Faithfulness of word scores as an `evaluate` metric shipped with labelattn, loaded offline by path:
`evaluate.load("labelattn/metrics/faithfulness")`. The measuring is `explainers.evaluation.faithfulness`; this module
only gives it evaluate's interface (inputs collected with `add_batch`, one `compute`)."""

import datasets
import evaluate

from explainers import token_limit
from explainers.evaluation.faithfulness import DEFAULT_PERCENTAGES, evaluate_faithfulness
from explainers.explanation import Explanation
from explainers.words import tokenize

_DESCRIPTION = """ERASER's comprehensiveness (p(y|x) − p(y|x without its top-k% words), higher is better) and
sufficiency (p(y|x) − p(y|only its top-k% words), lower is better), averaged over k (AOPC), and τ-LOO (Kendall τ
between the scores and the leave-one-word-out probability drops), measured on the model: words are removed on token
ids, every sub-token together. See docs/faithfulness.md for the rules (k% rounding, one-word texts)."""

_INPUTS = """
Args:
    texts: the texts `(n,)`.
    scores: one score per word of each text, in the order of the fast tokenizer's words `(n, words)` (as in
        `Explanation.scores`).
    targets: the class each text's scores explain `(n,)`.
    model: any transformers text classifier; tokenizer: its fast tokenizer.
    percentages: the k of top-k% words (default 10, 20, ..., 100).
    removal: "replace" (baseline token, default) or "delete".
    batch_size: perturbed inputs per forward pass.
Returns:
    {"comprehensiveness": float, "sufficiency": float, "tau_loo": float or None, "texts": int, "tau_texts": int}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _INPUTS)
class Faithfulness(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="DeYoung et al. 2020. ERASER: A Benchmark to Evaluate Rationalized NLP Models. ACL 2020.",
            inputs_description=_INPUTS,
            features=datasets.Features(
                {
                    "texts": datasets.Value("string"),
                    "scores": datasets.Sequence(datasets.Value("float64")),
                    "targets": datasets.Value("int64"),
                }
            ),
        )

    def _compute(
        self,
        texts,
        scores,
        targets,
        model=None,
        tokenizer=None,
        percentages=DEFAULT_PERCENTAGES,
        removal="replace",
        batch_size=64,
    ) -> dict:
        if model is None or tokenizer is None:
            raise ValueError("Faithfulness is measured on a model: pass model=... and tokenizer=... to compute().")
        limit = token_limit(model, tokenizer)
        labels = {int(k): v for k, v in model.config.id2label.items()}
        explanations = [
            Explanation(
                text=item.text,
                words=item.words,
                spans=item.spans,
                scores=list(text_scores),
                target=int(target),
                target_label=labels.get(int(target), str(target)),
                probability=float("nan"),  # not read: the metric computes every probability itself
                method="given",
            )
            for item, text_scores, target in zip(tokenize(tokenizer, list(texts), limit), scores, targets, strict=True)
        ]
        report = evaluate_faithfulness(
            model, tokenizer, explanations, percentages=percentages, removal=removal, batch_size=batch_size
        )
        return report.summary()
