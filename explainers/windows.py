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

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from .errors import ExplainerError, ExplainerInputError
from .explanation import Explanation
from .models import exclusive
from .words import TextInput, TokenizedText, check_tokenizer, tokenized_text

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
    windows = [
        replace(tokenized_text(texts[owner], encoding, row, owner), truncated=False) for row, owner in enumerate(owners)
    ]
    return windows, owners


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
    spans = sorted({span for piece in pieces for span in piece.spans})
    # A word cut at a window's edge has a shorter span there: keep the spans no other span holds.
    whole = [s for s in spans if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in spans)]
    sources = []
    for span in whole:
        holders = [(w, piece.spans.index(span)) for w, piece in enumerate(pieces) if span in piece.spans]
        sources.append(max(holders, key=lambda h: min(h[1], len(pieces[h[0]].words) - 1 - h[1])))
    first = pieces[0]
    extras = {"windows": [], **{k: [] for k, v in first.extras.items() if _per_word(v, first)}}
    if "class_scores" in first.extras:
        extras["class_scores"] = [[] for _ in first.extras["class_scores"]]
        extras["labels"] = first.extras["labels"]
    for w, i in sources:
        for name in extras:
            if name == "class_scores":
                for row, scores in zip(extras[name], pieces[w].extras[name], strict=True):
                    row.append(scores[i])
            elif name not in ("windows", "labels"):
                extras[name].append(pieces[w].extras[name][i])
    for piece in pieces:
        scalars = {
            k: v for k, v in piece.extras.items() if not _per_word(v, piece) and k not in ("class_scores", "labels")
        }
        extras["windows"].append(
            {
                "words": [_first_word(whole, piece), _end_word(whole, piece)],
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


def _first_word(whole: list[tuple[int, int]], piece: Explanation) -> int:
    """The first word of the text that a window holds (all of it or, cut at the window's start, a part)."""
    start = piece.spans[0][0]
    return next(i for i, (s, e) in enumerate(whole) if e > start)


def _end_word(whole: list[tuple[int, int]], piece: Explanation) -> int:
    """One past the last word of the text that a window holds (all of it or a part)."""
    end = piece.spans[-1][1]
    return next((i for i, (s, _) in enumerate(whole) if s >= end), len(whole))
