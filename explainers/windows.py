"""Texts longer than the model reads, read whole: overlapping windows (`long_text="windows"`).

The tokenizer cuts a text into windows of the model's length itself (`return_overflowing_tokens` with a `stride`):
consecutive windows share a quarter of a window's tokens, and each keeps the model's special tokens. The text's
logits are the mean of its windows' logits, which gives its prediction and the target every window is explained
for. Each word of the whole text takes its score from one window: of those holding all of the word, the one where it
stands farthest from an edge (the most context on both sides), so a word of an overlap is counted once. Completeness
holds window by window, and is reported there: `extras["windows"]` lists each window's words (`[first, end)` in the
text's words), its `score`, `baseline_score`, `delta` and the sum of all its own word scores.

Written here because transformers cuts texts into windows but no library merges explanations of windows.
"""

import bisect
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from .errors import ExplainerError, ExplainerInputError
from .explanation import Explanation
from .models import exclusive
from .words import TextInput, TokenizedText, check_tokenizer, grapheme_bounds, tokenized_text

LONG_TEXT = ("truncate", "windows")
OVERLAP = 0.25  # the share of a window's text tokens that the next window reads again


def check_long_text(long_text: Any, texts: Sequence[TextInput]) -> str:
    """`long_text` checked: "truncate" (read the start) or "windows" (read it all, single texts only)."""
    if long_text not in LONG_TEXT:
        raise ExplainerError(f"long_text={long_text!r}: choose 'truncate' (read the start) or 'windows' (read all).")
    if long_text == "windows" and any(isinstance(text, tuple) for text in texts):
        raise ExplainerInputError(
            "long_text='windows' reads single texts: a pair's two segments cannot be cut apart; use "
            "long_text='truncate' for pairs."
        )
    return long_text


def tokenize_windows(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int
) -> tuple[list[TokenizedText], list[int]]:
    """The windows of every text, each a `TokenizedText` whose spans point into the whole text, and the index of
    the text each window belongs to (a text the model reads whole is one window, its tokens as `tokenize` gives)."""
    check_tokenizer(tokenizer)
    specials = tokenizer.num_special_tokens_to_add()
    overlap = max(1, int(OVERLAP * (max_length - specials)))
    if max_length - specials <= overlap:
        raise ExplainerError(f"max_length={max_length} leaves no room for windows: give at least {specials + 2}.")
    with exclusive(tokenizer):
        encoding = tokenizer(
            list(texts),
            truncation=True,
            max_length=max_length,
            stride=overlap,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
    owners = list(encoding["overflow_to_sample_mapping"])
    # Once per text, not per window: every window's spans index the same whole text.
    bounds = [grapheme_bounds(text) for text in texts]
    windows = [
        replace(tokenized_text(texts[owner], encoding, row, owner, [bounds[owner]]), truncated=False)
        for row, owner in enumerate(owners)
    ]
    return windows, owners


def windows_by_text(owners: list[int], num_texts: int) -> list[list[int]]:
    """The windows of each text, in order: `owners[w]` is the text of window `w`."""
    grouped: list[list[int]] = [[] for _ in range(num_texts)]
    for window, owner in enumerate(owners):
        grouped[owner].append(window)
    return grouped


def mean_by_text(window_logits: torch.Tensor, owners: list[int], num_texts: int) -> torch.Tensor:
    """`(windows, labels)` -> `(texts, labels)`: the mean of each text's windows' logits."""
    index = torch.tensor(owners, device=window_logits.device)
    sums = torch.zeros(num_texts, window_logits.shape[-1], device=window_logits.device).index_add_(
        0, index, window_logits
    )
    counts = torch.bincount(index, minlength=num_texts).clamp(min=1)
    return sums / counts[:, None].to(sums.dtype)


def merge_windows(pieces: list[Explanation], probability: float) -> Explanation:
    """One `Explanation` of a whole text from its windows' explanations (in window order): every word once, its
    score (and its per-word diagnostics, such as SHAP's standard errors or label attention's class scores) from the
    window where it is most central; the windows' own completeness in `extras["windows"]`."""
    if len(pieces) == 1:
        return replace(pieces[0], probability=probability)
    # Where each span stands in each window that holds it, in window order (ties go to the first window).
    holders: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for w, piece in enumerate(pieces):
        for i, span in enumerate(piece.spans):
            holders.setdefault(span, []).append((w, i))
    # A word cut at a window's edge has a shorter span there: keep the spans no other span holds. By start, the
    # longest first, a span is held by another exactly when an earlier span reaches as far.
    whole, reach = [], -1
    for span in sorted(holders, key=lambda s: (s[0], -s[1])):
        if span[1] > reach:
            whole.append(span)
            reach = span[1]
    sizes = [len(piece.words) for piece in pieces]
    sources = [  # (window, index there) of each word: the window where it is farthest from an edge
        found[0] if len(found) == 1 else max(found, key=lambda h: min(h[1], sizes[h[0]] - 1 - h[1]))
        for found in (holders[span] for span in whole)
    ]
    first = pieces[0]
    per_word = [k for k, v in first.extras.items() if _per_word(v, first)]
    extras = {"windows": [], **{k: [pieces[w].extras[k][i] for w, i in sources] for k in per_word}}
    if "class_scores" in first.extras:
        extras["class_scores"] = [
            [pieces[w].extras["class_scores"][c][i] for w, i in sources]
            for c in range(len(first.extras["class_scores"]))
        ]
        extras["labels"] = first.extras["labels"]
    starts, ends = [s for s, _ in whole], [e for _, e in whole]
    for piece in pieces:
        scalars = {
            k: v for k, v in piece.extras.items() if not _per_word(v, piece) and k not in ("class_scores", "labels")
        }
        extras["windows"].append(
            {
                # The words of the text it holds, all or (cut at its edges) a part: the first that ends after its
                # start, up to the first that starts at or after its end (the whole spans are in order both ways).
                "words": [bisect.bisect_right(ends, piece.spans[0][0]), bisect.bisect_left(starts, piece.spans[-1][1])],
                "score": piece.score,
                "baseline_score": piece.baseline_score,
                "delta": piece.delta,
                "sum_of_scores": sum(piece.scores),
                **scalars,
            }
        )
    return replace(
        first,
        words=[pieces[w].words[i] for w, i in sources],
        spans=whole,
        scores=[pieces[w].scores[i] for w, i in sources],
        probability=probability,
        truncated=False,
        score=None,
        baseline_score=None,
        delta=None,
        extras=extras,
    )


def _per_word(value: Any, piece: Explanation) -> bool:
    return isinstance(value, list) and len(value) == len(piece.words) and not isinstance(value[0], list)
