"""The public entry points: `explain()` over every method, `predict()`, what a model supports, what a method
costs, and one parser of `KEY=VALUE` options for every command line and the Space."""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .base import get_explainer, predict_logits, probabilities
from .checks import check_count, check_max_length
from .errors import ExplainerError
from .explanation import Explanation
from .loading import label_names
from .models import baseline_token_id, check_finite_logits, is_pipeline, unwrap
from .options import cost_option
from .registry import METHODS, method_class
from .targets import Target
from .windows import check_long_text, mean_by_text, tokenize_windows
from .words import TextInput, check_texts, tokenize
from .zero_shot import explain_zero_shot, wants_zero_shot


def explain(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None,
    texts: TextInput | Sequence[TextInput],
    method: str = "integrated_gradients",
    target: Target | list[Target] = None,
    targets: str | None = None,
    top_k: int | None = None,
    **options,
) -> Explanation | list[Explanation] | list[list[Explanation]]:
    """Word scores of `texts` by `method`: one `Explanation` for a str or a pair `(text, text_pair)`, a list
    (same order) for a list of them; with `targets="all"` or `top_k` each text's result is a list.

    `model` is any transformers sequence classifier, or a `pipeline("text-classification")` (then
    `tokenizer=None`), or a `pipeline("zero-shot-classification")` with `candidate_labels=[...]` (and optionally
    `hypothesis_template`, `multi_label`; see `explainers.zero_shot`). See `Explainer.explain` for `target`,
    `targets`, `top_k`, `batch_size`, `max_length`; other keyword arguments are the method's own options.
    """
    if wants_zero_shot(model, options):
        return explain_zero_shot(
            model, tokenizer, texts, method=method, target=target, targets=targets, top_k=top_k, **options
        )
    explainer = get_explainer(model, tokenizer, method)
    return explainer.explain(texts, target=target, targets=targets, top_k=top_k, **options)


@dataclass
class Predictions:
    """The model's view of some texts.

    Attributes:
        probabilities: `(texts, num_labels)` float32 on the CPU: softmax, or sigmoid for a multi-label model.
        truncated: per text, whether it was longer than the model reads (only its start was read).
        labels: the label names by class index.
    """

    probabilities: torch.Tensor
    truncated: list[bool]
    labels: list[str]


def predict(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None,
    texts: TextInput | Sequence[TextInput],
    batch_size: int = 32,
    max_length: int | None = None,
    long_text: str = "truncate",
) -> Predictions:
    """Class probabilities of `texts` (str, pairs, or a list of them), tokenized and padded as the explainers
    do it, in length-sorted batches; a text longer than the model reads is cut to its start, or with
    `long_text="windows"` read whole in windows whose logits are averaged (`explainers.windows`). Raises
    `ExplainerError` for logits that are not finite."""
    model, tokenizer = unwrap(model, tokenizer)
    texts, _ = check_texts(texts)
    check_count(batch_size, "batch_size", "texts")
    long_text = check_long_text(long_text, texts)
    pairs = any(isinstance(text, tuple) for text in texts)
    limit = check_max_length(max_length, model, tokenizer, pairs)
    if long_text == "windows":
        items, owners = tokenize_windows(tokenizer, texts, limit)
    else:
        items, owners = tokenize(tokenizer, texts, limit), None
    logits = predict_logits(model, items, baseline_token_id(tokenizer), batch_size)
    check_finite_logits(logits)
    if owners is not None:
        logits = mean_by_text(logits, owners, len(texts))
    return Predictions(
        probabilities=probabilities(model, logits).float().cpu(),
        truncated=[item.truncated for item in items] if owners is None else [False] * len(texts),
        labels=label_names(model.config),
    )


def supported_methods(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None = None
) -> dict[str, str | None]:
    """Every method name -> None when `model` can use it, else the reason it cannot (by capability: input
    embeddings, returned attentions, label attention). `model` may be a pipeline. With a tokenizer (or a
    pipeline's), a slow tokenizer is a reason for every method: word scores need a fast one."""
    if is_pipeline(model):
        model, tokenizer = model.model, model.tokenizer
    if tokenizer is not None and not getattr(tokenizer, "is_fast", False):
        reason = f"{type(tokenizer).__name__} is a slow tokenizer: load a fast one (use_fast=True)."
        return dict.fromkeys(sorted(METHODS), reason)
    return {name: cls.unsupported(model) for name, cls in sorted(METHODS.items())}


def cost_hints(method: str) -> dict[str, Any]:
    """What sets the cost of `method`: `{"option": the option that scales it (None when only the text's length
    does), "default": that option's default, "caps": {option: cap} for interactive use}`."""
    declared = method_class(method).all_options()
    option = cost_option(declared)
    return {
        "option": option.name if option is not None else None,
        "default": option.default if option is not None else None,
        "caps": {o.name: o.cap for o in declared if o.cap is not None},
    }


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    """`["n_steps=50", "baseline=zero", "tolerance=null"]` -> `{"n_steps": 50, "baseline": "zero",
    "tolerance": None}`: each VALUE read as JSON (null, true, false, numbers, lists, quoted strings), anything
    else kept as the string it is. Raises `ExplainerError` for an item that is not KEY=VALUE."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = str(pair).partition("=")
        key = key.strip()
        if not sep or not key.replace(".", "_").isidentifier():
            raise ExplainerError(f"Option {pair!r} is not KEY=VALUE: write e.g. n_steps=50 or baseline=zero.")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options
