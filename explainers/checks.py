"""The argument rules that several entry points share (`explain`, `predict`, the corpus commands, faithfulness,
training, the Space), each written once, with the message that names the fix.

Whether a text is a text lives beside the tokenizer, in `explainers.words.text_problem`.
"""

from typing import TYPE_CHECKING, Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .errors import ExplainerError, ExplainerInputError
from .models import token_limit, unwrap
from .registry import METHODS
from .words import tokenize

if TYPE_CHECKING:
    from .explanation import Explanation


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


def check_explanation(
    exp: "Explanation",
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None = None,
    max_length: int | None = None,
) -> None:
    """Raise `ExplainerInputError` unless `exp` can be one of `model`'s (say, a dict sent back by a client, read by
    `Explanation.from_dict`): its target and contrast are classes of the model under the model's own label names,
    its method can explain the model, and its words are those the tokenizer gives for its text (cut to
    `max_length` tokens as `explain` cut it). `model` may be a pipeline (then `tokenizer=None`)."""
    model, tokenizer = unwrap(model, tokenizer)
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    classes = {"target": (exp.target, exp.target_label)}
    if exp.contrast is not None or exp.contrast_label is not None:
        classes["contrast"] = (exp.contrast, exp.contrast_label)
    for role, (index, label) in classes.items():
        if not (isinstance(index, int) and 0 <= index < len(labels) and label == labels[index]):
            raise ExplainerInputError(
                f"The explanation's {role} and {role}_label are not a class of this model (its labels are "
                f"{labels[:10]}{' …' if len(labels) > 10 else ''}): check it against the model that made it."
            )
    if exp.method not in METHODS or METHODS[exp.method].unsupported(model) is not None:
        raise ExplainerInputError(f"The explanation's method {exp.method!r:.40} cannot explain this model.")
    given = exp.text if exp.text_pair is None else (exp.text, exp.text_pair)
    limit = check_max_length(max_length, model, tokenizer, pairs=exp.text_pair is not None)
    if tokenize(tokenizer, [given], limit)[0].words != list(exp.words):
        raise ExplainerInputError(
            "The explanation's words are not the words this tokenizer gives for its text: check it against the "
            "model, tokenizer and max_length that made it."
        )
