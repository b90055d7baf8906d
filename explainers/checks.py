"""The argument rules that several entry points share (`explain`, `predict`, the corpus commands, faithfulness,
training, the Space), each written once, with the message that names the fix.

Whether a text is a text lives beside the tokenizer, in `explainers.words.text_problem`.
"""

from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .errors import ExplainerError
from .models import token_limit


def is_whole_number(value: Any) -> bool:
    """`value` is an int and not a bool (`True` is an int to Python, never a count to a user)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_count(value: Any, name: str, what: str, minimum: int = 1, error: type[ValueError] = ExplainerError) -> int:
    """`value` as a whole number of at least `minimum`, e.g. `check_count(batch_size, "batch_size", "rows")`."""
    if not is_whole_number(value) or value < minimum:
        raise error(f"{name}={value!r}: give a number of {what}, at least {minimum}.")
    return value


def check_max_length(
    requested: Any,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    pairs: bool = False,
    error: type[ValueError] = ExplainerError,
) -> int:
    """The most tokens of a text: `requested`, checked, or by default all that the model and tokenizer read.

    A text keeps at least the special tokens and one word (of each segment of a pair), and never more than the
    model reads (`explainers.models.token_limit`).
    """
    limit = token_limit(model, tokenizer)
    if requested is None:
        return limit
    shortest = tokenizer.num_special_tokens_to_add(pair=pairs) + 1 + pairs
    if not is_whole_number(requested) or not shortest <= requested <= limit:
        raise error(
            f"max_length={requested!r}: give a number of tokens from {shortest} (the special tokens and one "
            f"word{' of each segment' if pairs else ''}) to {limit} (the most this model reads), or None for "
            f"{limit}."
        )
    return requested


def check_target_choice(
    target: Any, targets: str | None, top_k: Any, num_labels: int, error: type[ValueError] = ExplainerError
) -> None:
    """At most one way of choosing the explained classes: `target`, `targets="all"` or `top_k` (1 to the number
    of classes)."""
    if targets not in (None, "all"):
        raise error(f"targets={targets!r}: the only value is 'all' (every class).")
    if sum(x is not None for x in (target, targets, top_k)) > 1:
        raise error("Pass only one of target, targets='all' and top_k.")
    if top_k is not None and (not is_whole_number(top_k) or not 1 <= top_k <= num_labels):
        raise error(f"top_k={top_k!r}: give a number of classes from 1 to {num_labels} (this model's).")
