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

Every perturbed input of every text and every method goes into one pool, duplicates removed (a short text's
percentages often select the same words, and all methods share the original and its leave-one-out inputs), and
the pool goes through the model in length-sorted batches.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from scipy import stats
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .base import predict_logits, probabilities
from .errors import ExplainerError
from .explanation import Explanation
from .models import baseline_token_id, check_finite_logits, token_limit, unwrap
from .words import TokenizedText, tokenize

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


@dataclass
class TextFaithfulness:
    """The faithfulness of one explanation of one text.

    Attributes:
        probability: `p(target|x)` of the whole text.
        words_per_percentage: how many top words each percentage selected.
        removed_probabilities, kept_probabilities: `p(target|...)` without / with only those words, one per
            percentage.
        loo_drops: `p(target|x) - p(target|x without word i)` for each word i.
        tau_loo: Kendall τ between the scores and `loo_drops` (None for a one-word text).
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


@dataclass
class FaithfulnessReport:
    """The faithfulness of one method's explanations of many texts, and how it was measured.

    `options` records the percentages, the removal mode (`"replace"` or `"delete"`) and the baseline token id.
    """

    method: str
    per_text: list[TextFaithfulness]
    options: dict[str, Any] = field(default_factory=dict)

    def summary(self, per_text: Sequence[TextFaithfulness] | None = None) -> dict[str, float | int | None]:
        """Means over the texts: comprehensiveness ↑, sufficiency ↓, τ-LOO ↑ (over texts where it is defined),
        and the counts `texts` and `tau_texts`. Values are None when no text has them."""
        rows = self.per_text if per_text is None else per_text
        taus = [row.tau_loo for row in rows if row.tau_loo is not None]
        return {
            "comprehensiveness": mean_defined([row.comprehensiveness for row in rows]),
            "sufficiency": mean_defined([row.sufficiency for row in rows]),
            "tau_loo": mean_defined(taus),
            "texts": len(rows),
            "tau_texts": len(taus),
        }

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


class _ProbabilityPool:
    """Perturbed inputs collected from many texts, each distinct one computed once, in length-sorted batches."""

    def __init__(self, model: PreTrainedModel, pad_token_id: int, batch_size: int):
        self.model, self.pad_token_id, self.batch_size = model, pad_token_id, batch_size
        self.index: dict[tuple, int] = {}
        self.items: list[TokenizedText] = []

    def add(self, item: TokenizedText) -> int:
        key = (tuple(item.input_ids), tuple(item.token_type_ids or ()))
        if key not in self.index:
            self.index[key] = len(self.items)
            self.items.append(item)
        return self.index[key]

    def run(self) -> torch.Tensor:
        """`(inputs, num_labels)` probabilities of every input added."""
        logits = predict_logits(self.model, self.items, self.pad_token_id, self.batch_size)
        check_finite_logits(logits)
        return probabilities(self.model, logits).cpu()


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
    if batch_size < 1:
        raise FaithfulnessError(f"batch_size must be at least 1, got {batch_size}.")
    return percentages


def _tokenized(
    tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel, runs: Mapping[str, Sequence[Explanation]], limit: int
) -> list[TokenizedText]:
    """The texts (and pairs) of the explanations, tokenized as the explainers tokenized them, checked word for
    word."""

    def given(exp: Explanation) -> str | tuple[str, str]:
        return exp.text if exp.text_pair is None else (exp.text, exp.text_pair)

    texts = [given(exp) for exps in runs.values() for exp in exps]
    unique = list(dict.fromkeys(texts))
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
    return [items[text] for text in texts]


def evaluate_faithfulness(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None,
    explanations: Sequence[Explanation] | Mapping[str, Sequence[Explanation]],
    percentages: Sequence[float] = DEFAULT_PERCENTAGES,
    removal: str = "replace",
    tau_loo: bool = True,
    batch_size: int = 64,
    max_length: int | None = None,
) -> FaithfulnessReport | dict[str, FaithfulnessReport]:
    """Comprehensiveness, sufficiency and τ-LOO of explanations, per text (see the module's docstring).

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

    Returns:
        A `FaithfulnessReport` for a list, a dict of them (same keys) for a mapping.
    """
    model, tokenizer = unwrap(model, tokenizer)
    percentages = check_settings(percentages, removal, batch_size)
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
    items = _tokenized(tokenizer, model, runs, max_length or token_limit(model, tokenizer))
    baseline_id = baseline_token_id(tokenizer)
    pool = _ProbabilityPool(model, baseline_id, batch_size)

    # Register every input first, read the probabilities after one pass over the pool.
    plans = []
    for exp, item in zip((exp for exps in runs.values() for exp in exps), items, strict=True):
        n = len(item.words)
        counts = [words_for_percentage(n, k) for k in percentages]
        tops = [set(top_words(exp.scores, count)) for count in counts]
        everything = set(range(n))
        plans.append(
            (
                exp,
                counts,
                pool.add(item),
                [pool.add(perturb(item, top, removal, baseline_id)) for top in tops],
                [pool.add(perturb(item, everything - top, removal, baseline_id)) for top in tops],
                [pool.add(perturb(item, {w}, removal, baseline_id)) for w in range(n)] if tau_loo else None,
            )
        )
    probs = pool.run()

    per_text = []
    for exp, counts, full, removed, kept, loo in plans:
        p = float(probs[full, exp.target])
        p_removed = [float(probs[r, exp.target]) for r in removed]
        p_kept = [float(probs[r, exp.target]) for r in kept]
        drops = [p - float(probs[r, exp.target]) for r in loo] if loo is not None else None
        per_text.append(
            TextFaithfulness(
                text=exp.text,
                method=exp.method,
                target=exp.target,
                target_label=exp.target_label,
                num_words=len(exp.words),
                probability=p,
                words_per_percentage=counts,
                removed_probabilities=p_removed,
                kept_probabilities=p_kept,
                loo_drops=drops,
                comprehensiveness=sum(p - q for q in p_removed) / len(p_removed),
                sufficiency=sum(p - q for q in p_kept) / len(p_kept),
                tau_loo=rank_correlation(exp.scores, merge_ties(drops, LOO_TIE)) if drops is not None else None,
                text_pair=exp.text_pair,
            )
        )

    options = {"percentages": list(percentages), "removal": removal, "baseline_token_id": baseline_id}
    reports, start = {}, 0
    for name, exps in runs.items():
        method = name or (exps[0].method if exps else "")
        reports[name] = FaithfulnessReport(method, per_text[start : start + len(exps)], dict(options))
        start += len(exps)
    return reports[""] if single else reports


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
