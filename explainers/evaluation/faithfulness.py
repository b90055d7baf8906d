"""Faithfulness of word scores, measured on the model: does removing the words a method calls important change
the prediction?

- **comprehensiveness** (ERASER, DeYoung et al. 2020): `p(y|x) - p(y|x without its top-k% words)`, averaged over
  the percentages k (AOPC). Higher is better: the top words carried the prediction.
- **sufficiency**: `p(y|x) - p(y|only its top-k% words)`, averaged the same way. Lower is better: the top words
  alone keep the prediction.
- **τ-LOO**: Kendall τ between the word scores and the leave-one-word-out drops `p(y|x) - p(y|x without word i)`.
- **rank agreement** between two methods: Spearman ρ and Kendall τ between their word scores of the same text.

`p` is the probability of the explained class: softmax, or the sigmoid of that class for a multi-label model.
Words are removed on token ids: every sub-token of a word together, either replaced by the baseline token
(`explainers.models.baseline_token_id`: the padding token, else the unknown or end-of-text token of a model
without one, as the default baseline of Integrated Gradients) or deleted; special tokens always stay. Text is
never decoded and tokenized again. Any sequence classifier and text pairs work the same way (the words of both
segments are ranked together).

Rules that keep every number defined (never NaN):
- k% of n words is `floor(n * k / 100 + 0.5)` words (round half up), at least 1 and at most n. A one-word text
  thus loses its word at every k (comprehensiveness = its full drop) and keeps it (sufficiency = 0).
- The top words are the highest *signed* scores (the words that speak for the class); ties go to the earlier word.
- A correlation over fewer than 2 words is undefined: it is None and left out of the averages (their count is
  reported). When either ranking is constant (e.g. the model ignores every single word) it is 0: no agreement.
  Leave-one-out drops within 1e-6 of each other are ties (`LOO_TIE`), so that τ-LOO does not depend on how the
  inputs were batched.
- A deletion that would leave no token at all (a tokenizer without special tokens) leaves one baseline token.

Plausibility: do the top words agree with the words a person marked as the reason, a human rationale of one 0/1
per word (`explainers.evaluation.rationales`: the forms it may take, how a soft mask is made hard, its checks)?
Measured as ERASER (DeYoung et al. 2020; `rationale_benchmark/metrics.py` of jayded/eraserbenchmark) and ferret
(Attanasio et al. 2023; `ferret/evaluators/plausibility_measures.py` of g8a9/ferret) measure it, per text, then
averaged over the texts (ERASER's instance macro average):
- **token F1** of the top-k words P against the rationale R: `2·|P∩R| / (|P| + |R|)`, the F1 of the precision
  |P∩R|/|P| and the recall |P∩R|/|R| (0 when no top word is a rationale word, as ERASER's `_f1`).
- **token IOU**: `|P∩R| / |P∪R|` (ferret's token IOU; ERASER's "IOU F1" goes on to count a predicted *span* as
  found when its IOU with a human span is at least 0.5, which needs spans, not word scores).
- **AUPRC**: scikit-learn's `average_precision_score` of the signed scores against the rationale (ERASER's
  `average_precision`; ferret integrates `precision_recall_curve` by trapezoids instead, after clipping negative
  scores to 0).
- **k** is `rationale_top_k`, by default ERASER's: the mean number of rationale words of the texts that have any,
  rounded half up (`explainers.evaluation.rationales.default_top_k`; ferret's benchmark sets its `top_k_rationale` so,
  "as in DeYoung et al. 2020"); a text of fewer words takes all of them. The top words follow the rule above: highest
  signed scores, ties to the earlier word (ferret's `only_pos` keeps positive scores only; here a word scored
  against the class is among the top k only when fewer than k words speak for it).
- Never NaN: a text with no rationale word has nothing to find (ERASER's and ferret's recall would divide by
  zero): its three measures are None and left out of the means, and `rationale_texts` counts the others. AUPRC is
  also None when every word is in the rationale (any scores find them all; ERASER discards such texts), and
  `auprc_texts` counts the texts that have it. Constant scores score chance: AUPRC is then the share of rationale
  words, and the top k are the first k words (the tie rule).

Every perturbed input of every text and every method goes into one pool, duplicates removed (a short text's
percentages often select the same words, and all methods share the original and its leave-one-out inputs), and
the pool goes through the model in length-sorted batches.
"""

import math
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from scipy import stats
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..base import predict_logits, probabilities
from ..checks import check_count
from ..errors import ExplainerError
from ..explanation import Explanation
from ..models import baseline_token_id, check_finite_logits, token_limit, unwrap
from ..words import TokenizedText, tokenize
from .rationales import RATIONALE_THRESHOLD, default_top_k, rationale_mask

DEFAULT_PERCENTAGES: tuple[int, ...] = (10, 20, 30, 40, 50, 60, 70, 80, 90, 100)
REMOVALS = ("replace", "delete")
# A probability moves by about 1e-7 with the batch an input lands in (its padding changes the float sums):
# leave-one-out drops closer than this are ties for τ-LOO, so that such noise neither breaks a tie nor orders words.
LOO_TIE = 1e-6


class FaithfulnessError(ExplainerError):
    """Arguments the faithfulness metrics cannot use (bad percentages, removal mode, mismatched explanations)."""


def words_for_percentage(num_words: int, percentage: float) -> int:
    """How many words k% of a text's `num_words` is: round half up, at least 1, at most all of them."""
    return min(num_words, max(1, math.floor(num_words * percentage / 100 + 0.5)))


def top_words(scores: Sequence[float], count: int) -> list[int]:
    """Indices of the `count` highest signed scores; a tie goes to the earlier word (stable sort)."""
    return sorted(range(len(scores)), key=lambda i: -scores[i])[:count]


def rank_correlation(first: Sequence[float], second: Sequence[float], kind: str = "kendall") -> float | None:
    """Kendall τ (`kind="kendall"`) or Spearman ρ (`"spearman"`) of two score lists of the same words.

    None for fewer than 2 words (undefined); 0.0 when either list is constant (no order to agree with).
    """
    if len(first) != len(second):
        raise FaithfulnessError(f"Rank correlation of lists of {len(first)} and {len(second)} words.")
    if len(first) < 2:
        return None
    if len(set(first)) < 2 or len(set(second)) < 2:
        return 0.0
    statistic = stats.kendalltau(first, second) if kind == "kendall" else stats.spearmanr(first, second)
    return float(statistic.statistic)


def merge_ties(values: Sequence[float], tolerance: float) -> list[float]:
    """`values` with each run of sorted values that lie within `tolerance` of the run's smallest set to it."""
    merged, anchor = list(values), None
    for i in sorted(range(len(values)), key=values.__getitem__):
        if anchor is None or values[i] - anchor > tolerance:
            anchor = values[i]
        merged[i] = anchor
    return merged


def mean_defined(values: Sequence[float | None]) -> float | None:
    """Mean of the values that are not None; None when there are none."""
    defined = [v for v in values if v is not None]
    return sum(defined) / len(defined) if defined else None


def plausibility(scores: Sequence[float], rationale: Sequence[bool], top_k: int) -> dict[str, float | int | None]:
    """Token F1 and token IOU of the `top_k` highest-scored words, and AUPRC of the scores, against a rationale
    (one bool per word), with `rationale_words`, its size. The rules are the module docstring's: None for a text
    with no rationale word; AUPRC also None when every word is in the rationale."""
    marked = {i for i, in_rationale in enumerate(rationale) if in_rationale}
    measures = {"rationale_words": len(marked), "token_f1": None, "token_iou": None, "auprc": None}
    if not marked:
        return measures
    predicted = set(top_words(scores, min(top_k, len(scores))))
    found = len(predicted & marked)
    measures["token_f1"] = 2 * found / (len(predicted) + len(marked))
    measures["token_iou"] = found / len(predicted | marked)
    if len(marked) < len(rationale):
        # Imported here: scikit-learn (labelattn[train]) is needed only by those who measure plausibility.
        from sklearn.metrics import average_precision_score

        measures["auprc"] = float(average_precision_score(list(rationale), list(scores)))
    return measures


@dataclass
class TextFaithfulness:
    """The faithfulness of one explanation of one text, and its plausibility when a rationale was given.

    Attributes:
        probability: `p(target|x)` of the whole text.
        words_per_percentage: how many top words each percentage selected.
        removed_probabilities, kept_probabilities: `p(target|...)` without / with only those words, one per
            percentage.
        loo_drops: `p(target|x) - p(target|x without word i)` for each word i.
        tau_loo: Kendall τ between the scores and `loo_drops` (None for a one-word text).
        output: what the method explained (`Explanation.output`: logit, probability, ...), None if it does not say.
        rationale_words: how many words the human rationale marks (None without rationales).
        token_f1, token_iou, auprc: the plausibility measures (None without a rationale word, see the module).
    """

    text: str
    method: str
    target: int
    target_label: str
    num_words: int
    probability: float
    words_per_percentage: list[int]
    removed_probabilities: list[float]
    kept_probabilities: list[float]
    loo_drops: list[float] | None
    comprehensiveness: float
    sufficiency: float
    tau_loo: float | None
    text_pair: str | None = None
    output: str | None = None
    rationale_words: int | None = None
    token_f1: float | None = None
    token_iou: float | None = None
    auprc: float | None = None


def explained_output(rows: Sequence[TextFaithfulness]) -> dict[str, str | list[str]]:
    """`{"output": name}`: what the explanations of `rows` explained (a list of the names if they differ), or `{}`
    when none says (`Explanation.output` is None or absent)."""
    outputs = list(dict.fromkeys(row.output for row in rows if row.output is not None))
    if not outputs:
        return {}
    return {"output": outputs[0] if len(outputs) == 1 else outputs}


@dataclass
class FaithfulnessReport:
    """The faithfulness of one method's explanations of many texts, and how it was measured.

    `options` records the percentages, the removal mode (`"replace"` or `"delete"`) and the baseline token id;
    `output`, what the method explained, when its explanations say; with rationales, `rationale_top_k` (the k of
    the plausibility measures, None when no text has a rationale word) and `rationale_threshold`.
    """

    method: str
    per_text: list[TextFaithfulness]
    options: dict[str, Any] = field(default_factory=dict)

    def summary(self, per_text: Sequence[TextFaithfulness] | None = None) -> dict[str, float | int | None]:
        """Means over the texts: comprehensiveness ↑, sufficiency ↓, τ-LOO ↑ (over texts where it is defined),
        and the counts `texts` and `tau_texts`; with rationales also token F1 ↑, token IOU ↑ and AUPRC ↑ and the
        counts `rationale_texts` and `auprc_texts`. Values are None when no text has them."""
        rows = self.per_text if per_text is None else per_text
        taus = [row.tau_loo for row in rows if row.tau_loo is not None]
        summary = {
            "comprehensiveness": mean_defined([row.comprehensiveness for row in rows]),
            "sufficiency": mean_defined([row.sufficiency for row in rows]),
            "tau_loo": mean_defined(taus),
            "texts": len(rows),
            "tau_texts": len(taus),
        }
        if "rationale_top_k" in self.options:
            summary.update(
                token_f1=mean_defined([row.token_f1 for row in rows]),
                token_iou=mean_defined([row.token_iou for row in rows]),
                auprc=mean_defined([row.auprc for row in rows]),
                rationale_texts=sum(row.token_f1 is not None for row in rows),
                auprc_texts=sum(row.auprc is not None for row in rows),
            )
        return summary

    def by_class(self, labels: Sequence[str]) -> dict[str, dict[str, float | int | None]]:
        """`summary()` of the texts explained for each class; a class never explained gets `texts: 0` and Nones."""
        return {label: self.summary([row for row in self.per_text if row.target_label == label]) for label in labels}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values."""
        return {
            "method": self.method,
            "options": dict(self.options),
            "summary": self.summary(),
            "per_text": [asdict(row) for row in self.per_text],
        }


def perturb(item: TokenizedText, removed: set[int], removal: str, baseline_token_id: int) -> TokenizedText:
    """`item` without the words in `removed` (word indices): each of their tokens replaced by the baseline token
    (`removal="replace"`, same length) or dropped (`"delete"`). Special tokens stay."""
    gone = [w in removed for w in item.word_index]
    types = item.token_type_ids or [0] * len(item.input_ids)
    if removal == "replace":
        ids = [baseline_token_id if g else t for t, g in zip(item.input_ids, gone, strict=True)]
        kept_types, word_index = types, [-1 if g else w for w, g in zip(item.word_index, gone, strict=True)]
    else:
        keep = [i for i, g in enumerate(gone) if not g]
        ids, kept_types = [item.input_ids[i] for i in keep], [types[i] for i in keep]
        word_index = [item.word_index[i] for i in keep]
        if not ids:  # nothing left at all: one baseline token, so that the model has an input
            ids, kept_types, word_index = [baseline_token_id], [0], [-1]
    return replace(
        item,
        input_ids=ids,
        token_type_ids=kept_types if item.token_type_ids is not None else None,
        word_index=word_index,
    )


class ProbabilityPool:
    """Perturbed inputs collected from many texts, each distinct one computed once, in length-sorted batches."""

    def __init__(self, model: PreTrainedModel, removal: str, baseline_token_id: int, batch_size: int):
        self.model, self.removal, self.batch_size = model, removal, batch_size
        self.baseline_token_id = baseline_token_id  # also the padding: a removed token and padding are alike
        self.index: dict[tuple, int] = {}
        self.items: list[TokenizedText] = []

    def add(self, item: TokenizedText, removed: AbstractSet[int] = frozenset()) -> int:
        """The row that `item` without the words `removed` will have in `run()`'s probabilities."""
        if removed:
            item = perturb(item, removed, self.removal, self.baseline_token_id)
        key = (tuple(item.input_ids), tuple(item.token_type_ids or ()))
        if key not in self.index:
            self.index[key] = len(self.items)
            self.items.append(item)
        return self.index[key]

    def run(self) -> torch.Tensor:
        """`(inputs, num_labels)` probabilities of every input added."""
        logits = predict_logits(self.model, self.items, self.baseline_token_id, self.batch_size)
        check_finite_logits(logits)
        return probabilities(self.model, logits).cpu()


@dataclass
class _Plan:
    """One explanation's inputs, as rows of the pool's probabilities: the whole text, the text without (`removed`)
    and with only (`kept`) its top words at each percentage, and without each word (`left_out`, for τ-LOO)."""

    explanation: Explanation
    words_per_percentage: list[int]
    whole: int
    removed: list[int]
    kept: list[int]
    left_out: list[int] | None
    rationale: list[bool] | None

    @classmethod
    def of(
        cls,
        exp: Explanation,
        item: TokenizedText,
        pool: ProbabilityPool,
        percentages: Sequence[float],
        tau_loo: bool,
        rationale: list[bool] | None,
    ) -> "_Plan":
        everything = set(range(len(item.words)))
        counts = [words_for_percentage(len(everything), k) for k in percentages]
        tops = [set(top_words(exp.scores, count)) for count in counts]
        return cls(
            explanation=exp,
            words_per_percentage=counts,
            whole=pool.add(item),
            removed=[pool.add(item, top) for top in tops],
            kept=[pool.add(item, everything - top) for top in tops],
            left_out=[pool.add(item, {w}) for w in everything] if tau_loo else None,
            rationale=rationale,
        )

    def measured(self, probs: torch.Tensor, top_k: int | None) -> TextFaithfulness:
        """The measures of this explanation, read from the pool's probabilities."""
        exp = self.explanation
        p = float(probs[self.whole, exp.target])
        p_removed = [float(probs[r, exp.target]) for r in self.removed]
        p_kept = [float(probs[r, exp.target]) for r in self.kept]
        drops = [p - float(probs[r, exp.target]) for r in self.left_out] if self.left_out is not None else None
        plausible = plausibility(exp.scores, self.rationale, top_k) if self.rationale is not None else {}
        return TextFaithfulness(
            text=exp.text,
            method=exp.method,
            target=exp.target,
            target_label=exp.target_label,
            num_words=len(exp.words),
            probability=p,
            words_per_percentage=self.words_per_percentage,
            removed_probabilities=p_removed,
            kept_probabilities=p_kept,
            loo_drops=drops,
            comprehensiveness=sum(p - q for q in p_removed) / len(p_removed),
            sufficiency=sum(p - q for q in p_kept) / len(p_kept),
            tau_loo=rank_correlation(exp.scores, merge_ties(drops, LOO_TIE)) if drops is not None else None,
            text_pair=exp.text_pair,
            output=getattr(exp, "output", None),
            **plausible,
        )


def check_settings(percentages: Sequence[float], removal: str, batch_size: int) -> tuple[float, ...]:
    """The percentages as a tuple, after checking them, the removal mode and the batch size."""
    percentages = tuple(percentages)
    if not percentages:
        raise FaithfulnessError("No percentage given: pass at least one k in (0, 100], e.g. [10, 20, 50].")
    bad = [k for k in percentages if isinstance(k, bool) or not isinstance(k, int | float) or not 0 < k <= 100]
    if bad:
        raise FaithfulnessError(f"Percentages must be numbers in (0, 100]; got {bad}.")
    if removal not in REMOVALS:
        raise FaithfulnessError(f"removal={removal!r}: use 'replace' (baseline token) or 'delete'.")
    check_count(batch_size, "batch_size", "perturbed inputs per forward pass", error=FaithfulnessError)
    return percentages


def _runs(
    explanations: Sequence[Explanation] | Mapping[str, Sequence[Explanation]],
) -> dict[str, list[Explanation]]:
    """`{name: explanations}` (the name "" for a single list), after checking that each is a flat list of them."""
    single = not isinstance(explanations, Mapping)
    runs = {"": list(explanations)} if single else {name: list(exps) for name, exps in explanations.items()}
    if not any(runs.values()):
        raise FaithfulnessError("No explanation to measure: pass the list that explain() returned for your texts.")
    for name, exps in runs.items():
        if not all(isinstance(exp, Explanation) for exp in exps):
            raise FaithfulnessError(
                f"{'The explanations' if single else repr(name)} must be a flat list of Explanation; for "
                "explain(..., targets='all'), which gives a list per text, flatten it: [e for per_text in ... for e in "
                "per_text]."
            )
    return runs


def _tokenized(
    tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel, runs: Mapping[str, Sequence[Explanation]], limit: int
) -> dict[str, list[TokenizedText]]:
    """The texts (and pairs) of each run's explanations, tokenized as the explainers tokenized them (each distinct
    text once), checked word for word."""

    def given(exp: Explanation) -> str | tuple[str, str]:
        return exp.text if exp.text_pair is None else (exp.text, exp.text_pair)

    unique = list(dict.fromkeys(given(exp) for exps in runs.values() for exp in exps))
    items = dict(zip(unique, tokenize(tokenizer, unique, limit), strict=True))
    num_labels = model.config.num_labels
    for method, exps in runs.items():
        for i, exp in enumerate(exps):
            if items[given(exp)].words != list(exp.words):
                raise FaithfulnessError(
                    f"Explanation {i} of {method!r} has other words than this tokenizer gives for its text: "
                    "measure explanations with the model, tokenizer and max_length that made them."
                )
            if len(exp.scores) != len(exp.words):
                raise FaithfulnessError(
                    f"Explanation {i} of {method!r} has {len(exp.scores)} scores for {len(exp.words)} words: "
                    "give one score per word."
                )
            if not all(math.isfinite(score) for score in exp.scores):
                raise FaithfulnessError(f"Explanation {i} of {method!r} has scores that are not finite numbers.")
            if not 0 <= exp.target < num_labels:
                raise FaithfulnessError(
                    f"Explanation {i} of {method!r} explains class {exp.target}, not one of "
                    f"this model's {num_labels} classes: was it made with another model?"
                )
    return {name: [items[given(exp)] for exp in exps] for name, exps in runs.items()}


def _rationale_masks(rationales: Sequence[Any], runs: Mapping[str, Sequence[Explanation]]) -> list[list[bool]]:
    """One rationale mask per explanation (the same for every method: they must explain the same texts in the same
    order), after checking each against its explanation's words."""
    rationales = list(rationales)
    first = next(iter(runs.values()))
    for name, exps in runs.items():
        if len(exps) != len(rationales):
            raise FaithfulnessError(
                f"{len(rationales)} rationales for the {len(exps)} explanations{f' of {name!r}' if name else ''}: "
                "give one per explanation, in the same order."
            )
        for i, (exp, other) in enumerate(zip(exps, first, strict=True)):
            if (exp.text, exp.text_pair) != (other.text, other.text_pair):
                raise FaithfulnessError(
                    f"Explanation {i} of {name!r} is of another text than the other methods': with rationales, give "
                    "every method's explanations of the same texts, in the same order."
                )
    return [
        rationale_mask(rationale, exp.words, f"Rationale {i} (of {exp.text!r})", exp.truncated)
        for i, (rationale, exp) in enumerate(zip(rationales, first, strict=True))
    ]


def _rationale_settings(
    rationales: Sequence[Any] | None, top_k: int | None, runs: Mapping[str, Sequence[Explanation]]
) -> tuple[list[list[bool]] | None, dict[str, Any]]:
    """The rationale masks (None without rationales) and the options they add to the reports: the k of the top-k
    words (given, or the mean rationale size) and the soft masks' threshold."""
    if rationales is None:
        if top_k is not None:
            raise FaithfulnessError("rationale_top_k is the k of the plausibility measures: pass rationales with it.")
        return None, {}
    masks = _rationale_masks(rationales, runs)
    if top_k is None:
        top_k = default_top_k(masks)
    else:
        check_count(top_k, "rationale_top_k", "top words compared with a rationale", error=FaithfulnessError)
    return masks, {"rationale_top_k": top_k, "rationale_threshold": RATIONALE_THRESHOLD}


def evaluate_faithfulness(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None,
    explanations: Sequence[Explanation] | Mapping[str, Sequence[Explanation]],
    percentages: Sequence[float] = DEFAULT_PERCENTAGES,
    removal: str = "replace",
    tau_loo: bool = True,
    batch_size: int = 64,
    max_length: int | None = None,
    rationales: Sequence[Any] | None = None,
    rationale_top_k: int | None = None,
) -> FaithfulnessReport | dict[str, FaithfulnessReport]:
    """Comprehensiveness, sufficiency and τ-LOO of explanations, per text, and their plausibility against human
    rationales if given (see the module's docstring).

    Args:
        model, tokenizer: any sequence classifier and its tokenizer, or a `pipeline("text-classification")` and
            None.
        explanations: one method's explanations (a list), or `{name: list}` for several methods: their perturbed
            inputs then share the model's passes.
        percentages: the k of "top k% words", each in (0, 100]; the metrics average over them (AOPC).
        removal: `"replace"` each token of a removed word by the baseline token (the padding token, as Integrated
            Gradients' default baseline), or `"delete"` it.
        tau_loo: also measure the leave-one-word-out drops and their Kendall τ with the scores.
        batch_size: perturbed inputs per forward pass.
        max_length: the `max_length` the explanations were made with, if any.
        rationales: one human rationale per explanation (for several methods, the same list serves each: they must
            explain the same texts in the same order), each a 0/1 or soft mask per word or the rationale's words
            (`explainers.evaluation.rationales`); adds token F1, token IOU and AUPRC.
        rationale_top_k: the k of the top-k words compared with the rationales; default: the mean rationale size.

    Returns:
        A `FaithfulnessReport` for a list, a dict of them (same keys) for a mapping.
    """
    model, tokenizer = unwrap(model, tokenizer)
    percentages = check_settings(percentages, removal, batch_size)
    runs = _runs(explanations)
    items = _tokenized(tokenizer, model, runs, max_length or token_limit(model, tokenizer))
    options = {"percentages": list(percentages), "removal": removal, "baseline_token_id": baseline_token_id(tokenizer)}
    masks, plausibility_options = _rationale_settings(rationales, rationale_top_k, runs)
    options.update(plausibility_options)

    # Register every input of every explanation first, read the probabilities after one pass over the pool.
    pool = ProbabilityPool(model, removal, options["baseline_token_id"], batch_size)
    plans = {
        name: [
            _Plan.of(exp, item, pool, percentages, tau_loo, masks[i] if masks is not None else None)
            for i, (exp, item) in enumerate(zip(exps, items[name], strict=True))
        ]
        for name, exps in runs.items()
    }
    probs = pool.run()

    reports = {}
    for name, planned in plans.items():
        rows = [plan.measured(probs, options.get("rationale_top_k")) for plan in planned]
        method = name or (rows[0].method if rows else "")
        reports[name] = FaithfulnessReport(method, rows, {**options, **explained_output(rows)})
    return reports[""] if not isinstance(explanations, Mapping) else reports


def rank_agreement(first: Sequence[Explanation], second: Sequence[Explanation]) -> dict[str, Any]:
    """Spearman ρ and Kendall τ between two methods' word scores of the same texts.

    Returns:
        `{"spearman": mean, "kendall": mean, "texts": n, "per_text": [{"spearman": ..., "kendall": ...}, ...]}`;
        a text of one word has None values and is left out of the means.
    """
    if len(first) != len(second):
        raise FaithfulnessError(f"Rank agreement of {len(first)} and {len(second)} explanations: give the same texts.")
    per_text = []
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        if (a.text, a.text_pair) != (b.text, b.text_pair) or list(a.words) != list(b.words):
            raise FaithfulnessError(f"Explanations {i} are of different texts or words: give both in the same order.")
        per_text.append({kind: rank_correlation(a.scores, b.scores, kind) for kind in ("spearman", "kendall")})
    return {
        "spearman": mean_defined([row["spearman"] for row in per_text]),
        "kendall": mean_defined([row["kendall"] for row in per_text]),
        "texts": len(per_text),
        "per_text": per_text,
    }
