"""`explain()`: the one entry point over every method."""

from collections.abc import Sequence

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .base import METHODS, Explainer
from .errors import MethodError
from .explanation import Explanation
from .targets import Target


def get_explainer(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, method: str) -> Explainer:
    """The explainer of `method` for this model (raises `MethodError` if unknown or unfit for the model)."""
    if method not in METHODS:
        raise MethodError(f"Unknown method {method!r}: choose one of {sorted(METHODS)}.")
    return METHODS[method](model, tokenizer)


def explain(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: str | Sequence[str],
    method: str = "integrated_gradients",
    target: Target | list[Target] = None,
    **options,
) -> Explanation | list[Explanation] | list[list[Explanation]]:
    """Word scores of `texts` by `method`: one `Explanation` for a str, a list (same order) for a list of str.

    See `Explainer.explain` for `target`, `targets="all"`, `batch_size`, `max_length`; other keyword arguments
    are the method's own options.
    """
    return get_explainer(model, tokenizer, method).explain(texts, target=target, **options)
