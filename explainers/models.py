"""What the explainers need to know about a model, decided in one place for every architecture.

Any `transformers` sequence classifier is explained; what a method needs is a *capability* of the model:
- **input embeddings** (`get_input_embeddings()` returns a layer): the gradient methods (Integrated Gradients,
  saliency, gradient × input, gradient-weighted attention) hook it.
- **returned attentions** (`output_attentions=True` gives one weight tensor per layer): attention rollout, flow
  and the encoder part of gradient-weighted attention. Models running `sdpa` or flash attention are switched to
  eager attention for those passes only (`returned_attentions`), and switched back.
- **label attention** (a labelattn model pooling with `label_attention`): the label-attention method and the
  label part of gradient-weighted attention.

The token the classifier head reads (`readout`), which rollout and flow follow through the layers:

- `"first"`, the first token ([CLS] / `<s>`): BERT, RoBERTa, XLM-R, DistilBERT, DeBERTa-v2, ELECTRA, ALBERT,
  ModernBERT with `classifier_pooling="cls"`, and any other encoder.
- `"mean"`, the mean of the real tokens: ModernBERT with `classifier_pooling="mean"`, labelattn mean pooling.
- `"last"`, the last real token: decoder classifiers (GPT-2, Llama, Qwen2, Mistral, ...: any model whose
  self-attention is causal, so that only its last token has seen the whole text).
- `"label_attention"`: the target class's label-attention row (labelattn with label attention).

Padding and the baseline token:
- Encoders are padded on the right. Decoder classifiers are padded on the **left** whatever the tokenizer's
  `padding_side`, with position ids counted from each text's first real token, so that the token they pool is
  the last column of every row. transformers finds that token as the rightmost one whose id is not
  `config.pad_token_id`; while the explainers run (`pooling_ready`) that id is set to -1, which no token has, so
  that the last column is pooled whatever token a baseline or a removed word puts there (and a model without a
  padding token can run batches at all). The config gets its own value back afterwards.
- `baseline_token_id`: the token that pads, stands for an absent word in SHAP and the faithfulness removals, and
  is Integrated Gradients' default baseline: the padding token, else the unknown token, else the end-of-text
  token (GPT-2's `<|endoftext|>`, Llama-3's `<|end_of_text|>`), else id 0.
"""

import math
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .errors import ExplainerInputError, MethodError, NonFiniteLogitsError

# What a tokenizer without a `model_max_length` says (transformers' VERY_LARGE_INTEGER): no limit.
NO_LIMIT = int(1e30)
# Eager attention is the implementation that returns its weights.
EAGER = "eager"
_RETURNS_ATTENTIONS: "weakref.WeakKeyDictionary[nn.Module, bool]" = weakref.WeakKeyDictionary()
_LOCKS: "weakref.WeakKeyDictionary[Any, threading.RLock]" = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


@contextmanager
def exclusive(thing: Any) -> Iterator[None]:
    """Within the block no other thread uses `thing` (a model or a tokenizer) through the explainers.

    Explaining changes a model for the length of a call, in ways another call would see: eval mode, a decoder's
    `pad_token_id`, an attention implementation, Captum's hooks on the embedding layer; and a fast tokenizer cannot
    be used by two threads at once ("Already borrowed"). So every call that runs a model (`explain`, `predict`,
    the faithfulness measures) holds its lock, and calls on one model from many threads run one at a time, each
    exactly as it would alone. Re-entrant: a call may make others within it.
    """
    with _LOCKS_GUARD:
        lock = _LOCKS.setdefault(thing, threading.RLock())
    with lock:
        yield


def is_pipeline(model: Any) -> bool:
    """`model` is a transformers pipeline (it holds a model and its tokenizer), not a model."""
    return not isinstance(model, nn.Module) and hasattr(model, "model") and hasattr(model, "tokenizer")


def unwrap(model: Any, tokenizer: Any) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """`(model, tokenizer)` from the pair itself or from a `pipeline("text-classification")` passed as `model`,
    after checking that the model is a torch model and the tokenizer a tokenizer."""
    if is_pipeline(model):
        if tokenizer is not None and tokenizer is not model.tokenizer:
            raise ExplainerInputError("Pass a pipeline alone (tokenizer=None): it brings its own tokenizer.")
        model, tokenizer = model.model, model.tokenizer
    if not isinstance(model, nn.Module) or getattr(model, "config", None) is None:
        raise MethodError(
            f"The model is a {type(model).__name__}: pass a transformers sequence-classification model first, then "
            "its tokenizer (explain(model, tokenizer, texts)), or a pipeline('text-classification') alone."
        )
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise ExplainerInputError(
            f"The tokenizer is a {type(tokenizer).__name__}: pass the model's tokenizer, "
            "AutoTokenizer.from_pretrained(model_folder)."
        )
    return model, tokenizer


def is_labelattn(model: PreTrainedModel) -> bool:
    return getattr(model.config, "model_type", None) == "labelattn"


def has_label_attention(model: PreTrainedModel) -> bool:
    """The model pools with label attention (a labelattn model) and returns its weights."""
    return is_labelattn(model) and model.config.pooling == "label_attention"


def has_input_embeddings(model: PreTrainedModel) -> bool:
    """`get_input_embeddings()` returns a layer that the gradient methods can hook."""
    try:
        return isinstance(model.get_input_embeddings(), nn.Module)
    except (AttributeError, NotImplementedError):
        return False


def is_causal(model: PreTrainedModel) -> bool:
    """The model's self-attention is causal (a decoder): only its last token has seen the whole text."""
    return any(getattr(module, "is_causal", False) is True for module in model.modules())


def readout(model: PreTrainedModel) -> str:
    """Which token(s) the classifier head reads: "first", "last", "mean" or "label_attention" (see the module
    docstring)."""
    config = model.config
    if is_labelattn(model):
        return "label_attention" if config.pooling == "label_attention" else "mean"
    if is_causal(model):
        return "last"
    if getattr(config, "classifier_pooling", "cls") == "mean":  # ModernBERT
        return "mean"
    return "first"


def pads_left(model: PreTrainedModel) -> bool:
    """Decoder classifiers are padded on the left (see the module docstring)."""
    return readout(model) == "last"


def baseline_token_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The id that pads and stands for an absent word: padding, else unknown, else end-of-text token, else 0."""
    for token_id in (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    return 0


@contextmanager
def pooling_ready(model: PreTrainedModel) -> Iterator[None]:
    """Within the block a decoder classifier pools the last column of any left-padded batch (its
    `pad_token_id` is -1, an id no token has); other models are left as they are. The change is to the model's
    config, and is undone on exit: hold `exclusive(model)` around it."""
    if readout(model) != "last":
        yield
        return
    config = model.config.get_text_config()
    saved = config.pad_token_id
    config.pad_token_id = -1
    try:
        yield
    finally:
        config.pad_token_id = saved


@contextmanager
def returned_attentions(model: PreTrainedModel) -> Iterator[None]:
    """Within the block the model runs eager attention, the implementation that returns its weights; on exit it
    gets its own implementation back. labelattn models switch their encoder themselves."""
    saved = getattr(model.config, "_attn_implementation", None)
    if is_labelattn(model) or saved in (None, EAGER):
        yield
        return
    model.set_attn_implementation(EAGER)
    try:
        yield
    finally:
        model.set_attn_implementation(saved)


@torch.no_grad()
def returns_attentions(model: PreTrainedModel) -> bool:
    """The model gives one attention tensor per layer with `output_attentions=True` (tried once on two tokens,
    in eager attention; remembered per model)."""
    if is_labelattn(model):
        return model.config.backbone == "encoder"
    if model not in _RETURNS_ATTENTIONS:
        device = next(model.parameters()).device
        try:
            with exclusive(model), returned_attentions(model), pooling_ready(model):
                outputs = model(input_ids=torch.zeros(1, 2, dtype=torch.long, device=device), output_attentions=True)
            attentions = getattr(outputs, "attentions", None)
            _RETURNS_ATTENTIONS[model] = bool(attentions) and all(isinstance(a, torch.Tensor) for a in attentions)
        except (TypeError, ValueError, NotImplementedError):
            _RETURNS_ATTENTIONS[model] = False
    return _RETURNS_ATTENTIONS[model]


def token_limit(model: Any, tokenizer: PreTrainedTokenizerBase) -> int:
    """The most tokens the model and its tokenizer read: the least of the labelattn `max_seq_length`, the
    position embeddings the model has (less RoBERTa's offset of `padding_idx + 1`) and the tokenizer's
    `model_max_length`."""
    model, tokenizer = unwrap(model, tokenizer)
    config = model.config
    limits = [getattr(tokenizer, "model_max_length", None)]
    if is_labelattn(model):
        limits.append(config.max_seq_length)
    else:
        positions = getattr(config.get_text_config(), "max_position_embeddings", None)
        embeddings = getattr(model.base_model, "embeddings", None)
        offset = getattr(embeddings, "padding_idx", None)
        if positions is not None and offset is not None and hasattr(embeddings, "position_embeddings"):
            positions -= offset + 1  # RoBERTa and XLM-R count positions from padding_idx + 1
        limits.append(positions)
    known = [limit for limit in limits if isinstance(limit, int | float) and math.isfinite(limit) and limit > 0]
    return int(min(known, default=NO_LIMIT))


def check_finite_logits(logits: torch.Tensor) -> None:
    """Refuse logits that are not finite numbers (a diverged model): no explanation of them means anything."""
    # A row's least and greatest logits are finite exactly when all of its logits are (NaN propagates to both): one
    # pass without a mask the size of the logits, which `torch.isfinite` takes up to 0.5 s to fill at 8,322 × 1,918.
    least, greatest = torch.aminmax(logits, dim=-1)
    bad = ~(torch.isfinite(least) & torch.isfinite(greatest))
    if bad.any():
        which = f"every text ({len(bad)})" if bad.all() else f"text(s) {bad.nonzero().squeeze(1).tolist()[:10]}"
        raise NonFiniteLogitsError(
            f"The model gives logits that are not finite numbers for {which}: its weights are broken (a diverged "
            "training run? retrain it or load a good checkpoint), or the texts overflow the precision it computes "
            "in (float16? use bfloat16 or float32).",
            every_text=bool(bad.all()),
        )


def is_multi_label(model: Any) -> bool:
    """The model scores each class on its own (sigmoid per class, `problem_type="multi_label_classification"`),
    rather than one class among all (softmax): the one test every layer uses."""
    return getattr(model.config, "problem_type", None) == "multi_label_classification"
