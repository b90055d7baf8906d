"""Human rationales: which words of a text a person marked as the reason for its label, as one 0/1 per word.

The plausibility measures (`explainers.evaluation.faithfulness`: token F1, token IOU, AUPRC, as in ERASER and ferret)
compare an explanation's word scores with such a mask. A rationale is given, for each explained text, in one of two
forms:

- **a mask**: one number in [0, 1] per word of the text, in the order of the explanation's words (the words of both
  segments of a pair, first then second). 0/1 (or False/True) is a hard rationale; a soft one (e.g. the share of
  annotators who marked the word, as HateXplain gives it) is made hard by `RATIONALE_THRESHOLD`: a word is in the
  rationale when its value is at least 0.5, i.e. when at least half of the annotators marked it.
- **the rationale's words**: a list of strings, each a word of the text exactly as the tokenizer splits it (case and
  punctuation included); every occurrence of such a word is in the rationale.

An empty list is a text with no rationale word (nothing to find: its plausibility is undefined). A mask whose
length is not the text's word count, a word that is not one of the text's, a value outside [0, 1] or a mixture of
numbers and words is refused, naming the row. The words are those the model reads: for a text longer than the
model's limit (`Explanation.truncated`), the mask covers its first words only.

`default_top_k` is ERASER's k for the top-k words compared with a rationale (DeYoung et al. 2020; ferret's
`top_k_rationale`): the mean size of the human rationales.
"""

import math
from collections.abc import Sequence
from numbers import Real
from typing import Any

from ..errors import ExplainerError

RATIONALE_THRESHOLD = 0.5


class RationaleError(ExplainerError):
    """A human rationale that does not fit its text (wrong length, unknown word, value outside [0, 1])."""


def rationale_mask(rationale: Any, words: Sequence[str], where: str, truncated: bool = False) -> list[bool]:
    """`rationale` (a mask or the rationale's words, see the module's docstring) as one bool per word of `words`.

    Args:
        rationale: a list of numbers in [0, 1], one per word, or a list of words of the text.
        words: the text's words as the explanation has them.
        where: how messages name the text, e.g. "data.csv, row 3".
        truncated: the text is longer than the model reads (`words` are its first words): messages say so.
    """
    if hasattr(rationale, "tolist"):  # a numpy array or a tensor
        rationale = rationale.tolist()
    if rationale is None:
        raise RationaleError(f"{where}: the rationale is missing (None); give [] for a text without rationale words.")
    if not isinstance(rationale, list | tuple):
        raise RationaleError(
            f"{where}: the rationale is a {type(rationale).__name__}, not a list: give one 0/1 (or soft value in "
            '[0, 1]) per word, e.g. [0, 1, 0], or the rationale\'s words, e.g. ["zebra"]; [] for none.'
        )
    if all(isinstance(value, str) for value in rationale):
        unknown = [value for value in rationale if value not in words]
        if unknown:
            cut = " (the text is truncated to the words the model reads)" if truncated else ""
            raise RationaleError(
                f"{where}: the rationale word(s) {unknown} are not words of the text {list(words)}{cut}: write them as "
                "the tokenizer splits the text (case and punctuation included), or give a 0/1 mask per word."
            )
        return [word in rationale for word in words]
    if any(isinstance(value, str) for value in rationale):
        raise RationaleError(
            f"{where}: the rationale {list(rationale)} mixes words and numbers: give either one value per word or the "
            "rationale's words."
        )
    # False/True are the values 0/1; NaN fails `0 <= v <= 1`.
    if any(not isinstance(v, bool) and (not isinstance(v, Real) or not 0 <= v <= 1) for v in rationale):
        raise RationaleError(
            f"{where}: the rationale {list(rationale)} has values that are not numbers in [0, 1]: give one 0/1 (or "
            "soft value in [0, 1], the share of annotators who marked the word) per word."
        )
    if len(rationale) != len(words):
        cut = f" (the model reads only the first {len(words)} words of this long text)" if truncated else ""
        raise RationaleError(
            f"{where}: the rationale has {len(rationale)} values for the {len(words)} words of the text{cut}: "
            f"give one value per word of {list(words)}."
        )
    return [value >= RATIONALE_THRESHOLD for value in rationale]


def default_top_k(masks: Sequence[Sequence[bool]]) -> int | None:
    """ERASER's k: the mean number of rationale words over the texts that have any, rounded half up (at least 1);
    None when no text has a rationale word."""
    sizes = [sum(mask) for mask in masks if any(mask)]
    return max(1, math.floor(sum(sizes) / len(sizes) + 0.5)) if sizes else None
