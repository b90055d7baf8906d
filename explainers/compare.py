"""Several methods on the same texts and target, side by side (`views.to_html` shows the result as a table, the
Space's Compare tab as panels)."""

from collections.abc import Mapping, Sequence
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .api import explain
from .errors import MethodError
from .explanation import Explanation
from .registry import METHODS
from .targets import Target
from .words import TextInput


def target_for(method: str, target: Target | list[Target]) -> Target | list[Target]:
    """The target `method` can take: a pair `(a, b)` ("why a rather than b") for a method that explains a
    contrast, else `a` alone; any other target (and an unknown method's, which `explain` refuses) as it is."""
    if isinstance(target, list):
        return [target_for(method, item) for item in target]
    cls = METHODS.get(method)
    if isinstance(target, tuple) and cls is not None and not cls.allows_contrast:
        return target[0]
    return target


def compare(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None,
    texts: TextInput | Sequence[TextInput],
    methods: Sequence[str],
    target: Target | list[Target] = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    **common: Any,
) -> dict[str, Explanation | list[Explanation]]:
    """`explain` of `texts` by each of `methods`, for one target: method → what `explain` returns.

    Args:
        target: as for `explain`; a pair `(a, b)` is kept for the methods that explain a contrast and becomes `a`
            for the others (their explanations say so: `contrast` is None).
        options: each method's own options, method → {option: value}.
        common: what every method takes alike (`batch_size`, `max_length`).
    """
    options = dict(options or {})
    if isinstance(methods, str) or not methods:
        raise MethodError(f"methods={methods!r}: give a list of method names, e.g. ['saliency', 'shap'].")
    stray = sorted(set(options) - set(methods))
    if stray:
        raise MethodError(f"options are given for {stray}, which are not among the methods {list(methods)}.")
    results = {}
    for method in methods:
        own = {**common, **options.get(method, {})}
        results[method] = explain(model, tokenizer, texts, method=method, target=target_for(method, target), **own)
    return results
