"""Texts to token batches that know their words, and token scores back to word scores.

The only place where sub-word tokens meet words: every explainer and the faithfulness metrics use it.

A word is what the tokenizer's pre-tokenizer calls one (`word_ids()`), with the character span of all its
sub-tokens, for the three kinds of fast tokenizers alike:
- WordPiece (BERT): `##` continuations join their word; offsets are exact.
- byte-level BPE (RoBERTa, GPT-2): a word's first token carries the space before it (`Ġ`), and GPT-2's offsets
  include that space: spans are cut to the word, without surrounding whitespace; a token of whitespace only
  is no word (it stays in the input like a special token).
- SentencePiece / Unigram (XLM-R, DeBERTa-v2, ALBERT): the `▁` marker is handled the same way.
A span always covers whole grapheme clusters (`regex`'s `\\X`): a combining accent, a vowel sign or a variation
selector that the tokenizer normalised away stays with its word (`café`, `नमस्ते`). Words of a text pair carry
their segment (0 or 1) and a span into their own segment's text.
"""

import dataclasses
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import regex
import torch
from transformers import PreTrainedTokenizerBase

from .errors import ExplainerInputError
from .models import exclusive

# One text to explain: a str, or a pair (text, text_pair) for the models that read two segments.
TextInput = str | tuple[str, str]
# A single text longer than this many characters per token it may keep is first read through a prefix of as many.
PREFIX_CHARS_PER_TOKEN = 16


@dataclass
class TokenizedText:
    """One text (or text pair), tokenized once, with the map from tokens to words.

    `word_index[t]` is the word of token `t`, or -1 for a special token. `spans[w]` covers every sub-token of
    word `w`, so that `words[w] == segment[start:end]`, where the segment is `text`, or for a pair
    `(text, text_pair)[word_segments[w]]`.
    """

    text: str
    input_ids: list[int]
    token_type_ids: list[int] | None
    word_index: list[int]
    words: list[str]
    spans: list[tuple[int, int]]
    truncated: bool
    text_pair: str | None = None
    word_segments: list[int] | None = None


# A code point of U+D800 to U+DFFF: half of a UTF-16 pair, never a character of its own (no tokenizer, file or
# Arrow column takes one). Python's str holds one after `json.loads('"\\ud800"')` or `errors="surrogateescape"`.
SURROGATE = regex.compile(r"[\ud800-\udfff]")


def surrogate_problem(text: str) -> str | None:
    """Where `text` holds a lone surrogate, as the end of a sentence that names it, or None."""
    found = SURROGATE.search(text)
    if found is None:
        return None
    return (
        f"holds a lone surrogate (U+{ord(found.group()):04X} at character {found.start()}), which is not Unicode "
        "text: remove it, or decode the source with errors='replace'"
    )


def text_problem(value: object) -> str | None:
    """What makes `value` no text to classify, as the end of a sentence that names it ("is empty or only
    whitespace"), or None for a text. The one rule of every entry point: explain, predict, the corpus commands,
    the data loader and the Space."""
    if value is None:
        return "is missing"
    if isinstance(value, bytes | bytearray):
        return "is bytes, not str: decode it first (data.decode('utf-8'))"
    if not isinstance(value, str):
        kind = type(value).__name__
        return f"is {'an' if kind[0] in 'aeiou' else 'a'} {kind}, not a str"
    if not value.strip():
        return "is empty or only whitespace"
    return surrogate_problem(value)


SEGMENT_NAMES = ("text", "second text")


def input_problem(value: object) -> str | None:
    """`text_problem` of a text or of each segment of a pair `(text, text_pair)`, naming the segment ("the second
    text is empty or only whitespace"); None when every segment is a text."""
    if isinstance(value, tuple) and len(value) != 2:
        return f"is a tuple of {len(value)}: a text pair is (text, text_pair)"
    segments = value if isinstance(value, tuple) else (value,)
    for name, segment in zip(SEGMENT_NAMES, segments, strict=False):
        problem = text_problem(segment)
        if problem is not None:
            return problem if len(segments) == 1 else f"has a {name} that {problem}"
    return None


def check_texts(texts: object) -> tuple[list[TextInput], bool]:
    """`texts` as a list of str or `(str, str)` pairs, and whether one text (not a list) was given."""
    if isinstance(texts, str | tuple):
        texts, single = [texts], True
    elif isinstance(texts, list):
        single = False
    elif isinstance(texts, bytes | bytearray):
        raise ExplainerInputError("texts is bytes, not str: decode it first (data.decode('utf-8')).")
    else:
        raise ExplainerInputError(
            f"texts is a {type(texts).__name__}: pass a str, a pair (text, text_pair) or a list of them."
        )
    if not texts:
        raise ExplainerInputError("No text to explain: pass a str, a pair or a non-empty list of them.")
    for i, text in enumerate(texts):
        problem = input_problem(text)
        if problem is not None:
            # A problem that names its own fix ("...: decode it first") is given as it is.
            fix = "" if ": " in problem else ": pass a str, a pair (text, text_pair) or a list of them"
            raise ExplainerInputError(f"Text {i} {problem}{fix}.")
    return texts, single


# Characters that may share a grapheme cluster with a neighbour: all but ASCII, and CR and LF (CR LF is one). Between
# two other ASCII characters there is always a cluster boundary (Unicode's rules GB3-GB999).
JOINING = regex.compile(r"[^\x00-\x09\x0b\x0c\x0e-\x7f]+")


def grapheme_bounds(text: str) -> tuple[list[int], list[int]]:
    """For each character position, the start and the end of the grapheme cluster it belongs to.

    Only the stretches around joining characters (with one other character either side, where a cluster boundary
    is sure) are segmented by `regex`'s `\\X`: a text of ASCII words costs two `range`s, not a match per character.
    """
    starts, ends = list(range(len(text))), list(range(1, len(text) + 1))
    stretches: list[list[int]] = []
    for run in JOINING.finditer(text):
        start, end = max(0, run.start() - 1), min(len(text), run.end() + 1)
        if stretches and start < stretches[-1][1]:
            stretches[-1][1] = end
        else:
            stretches.append([start, end])
    for first, last in stretches:
        for cluster in regex.finditer(r"\X", text[first:last]):
            start, end = first + cluster.start(), first + cluster.end()
            starts[start:end] = [start] * (end - start)
            ends[start:end] = [end] * (end - start)
    return starts, ends


def word_span(segment: str, start: int, end: int, bounds: tuple[list[int], list[int]]) -> tuple[int, int] | None:
    """The span `(start, end)` cut to its non-space characters and widened to whole grapheme clusters; None
    when it holds only whitespace."""
    while start < end and segment[start].isspace():
        start += 1
    while end > start and segment[end - 1].isspace():
        end -= 1
    if start == end:
        return None
    # A mark after a space clusters with the space ("\u0301" alone): the word then starts at the mark.
    cluster_start = bounds[0][start]
    return (start if segment[cluster_start].isspace() else cluster_start), bounds[1][end - 1]


def check_tokenizer(tokenizer: object) -> None:
    """Refuse what is not a fast tokenizer: words and their character spans need `word_ids` and offsets."""
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise ExplainerInputError(
            f"The tokenizer is a {type(tokenizer).__name__}: pass the model's tokenizer, "
            "AutoTokenizer.from_pretrained(model_folder)."
        )
    if not getattr(tokenizer, "is_fast", False):
        raise ExplainerInputError(
            f"{type(tokenizer).__name__} is a slow tokenizer: word-level scores need a fast one (word_ids and "
            "character offsets). Load it with AutoTokenizer.from_pretrained(..., use_fast=True)."
        )


def tokenize(tokenizer: PreTrainedTokenizerBase, texts: Sequence[TextInput], max_length: int) -> list[TokenizedText]:
    """Tokenize `texts` (str or `(text, text_pair)`; truncating to `max_length` tokens with a warning) and map
    tokens to words. A single text far longer than `max_length` tokens is read through the prefix that holds its
    kept tokens (`kept_prefix`)."""
    check_tokenizer(tokenizer)
    texts, _ = check_texts(list(texts))
    items: list[TokenizedText | None] = [None] * len(texts)
    # Single texts and pairs are tokenized in two calls: a tokenizer call takes one kind.
    for is_pair in (False, True):
        indices = [i for i, text in enumerate(texts) if isinstance(text, tuple) == is_pair]
        if not indices:
            continue
        second = [texts[i][1] for i in indices] if is_pair else None
        with exclusive(tokenizer):  # a fast tokenizer's truncation setting is shared state
            first = [texts[i][0] if is_pair else kept_prefix(tokenizer, texts[i], max_length) for i in indices]
            encoding = tokenizer(first, second, truncation=True, max_length=max_length, return_offsets_mapping=True)
        for row, i in enumerate(indices):
            # A prefix's spans count from the text's start, as the text's do: the item keeps the whole text.
            item = tokenized_text(texts[i] if is_pair else first[row], encoding, row, i)
            items[i] = item if is_pair else dataclasses.replace(item, text=texts[i])
            if items[i].truncated:
                warnings.warn(
                    f"Text {i} is longer than {max_length} tokens: only its first {len(items[i].words)} words are "
                    "explained (long_text='windows' reads it all).",
                    stacklevel=4,
                )
    return items


def kept_prefix(tokenizer: PreTrainedTokenizerBase, text: str, max_length: int) -> str:
    """The shortest prefix of `text` (from `PREFIX_CHARS_PER_TOKEN` x `max_length` characters, doubling) whose first
    `max_length` tokens are the text's, or `text` itself. They are when the prefix has more tokens than are kept and
    the last kept one belongs to a word before the prefix's last (which the cut may have split): the pre-tokenizer
    makes each word's tokens, offsets and word id depend on that word alone. Tokenizing a whole row of 5 million
    characters to keep 512 tokens took half a minute and gigabytes."""
    kept = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    size = PREFIX_CHARS_PER_TOKEN * max_length
    while size < len(text):
        words = [word for word in tokenizer(text[:size], add_special_tokens=False).word_ids() if word is not None]
        if len(words) > kept and words[kept - 1] != words[-1]:
            return text[:size]
        size *= 2
    return text


def tokenized_text(
    text: TextInput, encoding, row: int, index: int, bounds: list[tuple[list[int], list[int]]] | None = None
) -> TokenizedText:
    """Row `row` of a tokenizer's `encoding` of `text` (text number `index`) as a `TokenizedText`; `bounds` are the
    `grapheme_bounds` of each segment, when the caller has them (the windows of one text share them)."""
    segments = text if isinstance(text, tuple) else (text,)
    if bounds is None:
        bounds = [grapheme_bounds(segment) for segment in segments]
    # Raw spans of the tokenizer's words, keyed (segment, word id), in order of first appearance.
    raw: dict[tuple[int, int], list[int]] = {}
    keys: list[tuple[int, int] | None] = []
    for word_id, segment, (start, end) in zip(
        encoding.word_ids(row), encoding.sequence_ids(row), encoding["offset_mapping"][row], strict=True
    ):
        key = None if word_id is None or segment is None else (segment, word_id)
        keys.append(key)
        if key is not None:
            span = raw.setdefault(key, [start, end])
            span[0], span[1] = min(span[0], start), max(span[1], end)
    # Whitespace cut, whole grapheme clusters; a word whose cluster the previous word already holds joins it.
    word_of_key: dict[tuple[int, int], int] = {}
    spans: list[tuple[int, int]] = []
    word_segments: list[int] = []
    for key, (start, end) in raw.items():
        span = word_span(segments[key[0]], start, end, bounds[key[0]])
        if span is None:
            continue
        if spans and word_segments[-1] == key[0] and span[0] < spans[-1][1]:
            spans[-1] = (min(spans[-1][0], span[0]), max(spans[-1][1], span[1]))
        else:
            spans.append(span)
            word_segments.append(key[0])
        word_of_key[key] = len(spans) - 1
    if not spans:
        raise ExplainerInputError(f"Text {index} ({segments[0][:40]!r}) gives no token the model knows.")
    # The tokenizer keeps the tokens it cut off: a text was truncated exactly when there are some.
    truncated = bool(encoding.encodings[row].overflowing)
    return TokenizedText(
        text=segments[0],
        input_ids=encoding["input_ids"][row],
        token_type_ids=encoding["token_type_ids"][row] if "token_type_ids" in encoding else None,
        word_index=[-1 if key is None else word_of_key.get(key, -1) for key in keys],
        words=[segments[s][start:end] for s, (start, end) in zip(word_segments, spans, strict=True)],
        spans=spans,
        truncated=truncated,
        text_pair=segments[1] if len(segments) == 2 else None,
        word_segments=word_segments if len(segments) == 2 else None,
    )


@dataclass
class TokenBatch:
    """Texts padded to a common length, as the model takes them.

    Attributes:
        input_ids: `(batch, seq_len)`.
        attention_mask: `(batch, seq_len)`, 1 for real tokens.
        token_type_ids: `(batch, seq_len)` or None when the tokenizer gives none.
        word_index: `(batch, seq_len)`, the word of each token, -1 for special tokens and padding.
        num_words: `(batch,)`.
        position_ids: `(batch, seq_len)` for a batch padded on the left (decoder classifiers), counted from each
            text's first real token so that a text has the same positions in any batch; None otherwise.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor | None
    word_index: torch.Tensor
    num_words: torch.Tensor
    position_ids: torch.Tensor | None = None

    @property
    def left_padded(self) -> bool:
        return self.position_ids is not None

    def model_inputs(self) -> dict[str, torch.Tensor]:
        inputs = {"input_ids": self.input_ids, "attention_mask": self.attention_mask}
        for name in ("token_type_ids", "position_ids"):
            if getattr(self, name) is not None:
                inputs[name] = getattr(self, name)
        return inputs

    def columns(self, width: int) -> slice:
        """The `width` columns that hold every real token of a sub-batch whose longest text has `width` tokens."""
        return slice(self.input_ids.shape[1] - width, None) if self.left_padded else slice(0, width)

    def select(self, rows: torch.Tensor) -> "TokenBatch":
        """The sub-batch of `rows` (a `(k,)` index tensor), cut to its own longest text so that it carries
        no column of padding only."""
        keep = self.columns(int(self.attention_mask[rows].sum(-1).max()))

        def cut(tensor: torch.Tensor | None) -> torch.Tensor | None:
            return tensor[rows, keep] if tensor is not None else None

        return TokenBatch(
            input_ids=cut(self.input_ids),
            attention_mask=cut(self.attention_mask),
            token_type_ids=cut(self.token_type_ids),
            word_index=cut(self.word_index),
            num_words=self.num_words[rows],
            position_ids=cut(self.position_ids),
        )

    @property
    def is_word(self) -> torch.Tensor:
        """`(batch, seq_len)` bool: the token belongs to a word (not special, not padding)."""
        return self.word_index >= 0


def collate(
    items: list[TokenizedText], pad_token_id: int, device: torch.device | str = "cpu", left: bool = False
) -> TokenBatch:
    """Pad tokenized texts into one batch on `device`, on the right, or on the left (with position ids)."""
    length = max(len(item.input_ids) for item in items)

    def padded(rows: list[list[int]], value: int) -> torch.Tensor:
        padding = [[value] * (length - len(row)) for row in rows]
        return torch.tensor(
            [pad + row if left else row + pad for row, pad in zip(rows, padding, strict=True)], device=device
        )

    has_types = items[0].token_type_ids is not None
    mask = padded([[1] * len(item.input_ids) for item in items], 0)
    return TokenBatch(
        input_ids=padded([item.input_ids for item in items], pad_token_id),
        attention_mask=mask,
        token_type_ids=padded([item.token_type_ids for item in items], 0) if has_types else None,
        word_index=padded([item.word_index for item in items], -1),
        num_words=torch.tensor([len(item.words) for item in items], device=device),
        position_ids=(mask.cumsum(-1) - 1).clamp(min=0) if left else None,
    )


def token_to_word_scores(token_scores: torch.Tensor, word_index: torch.Tensor, max_words: int) -> torch.Tensor:
    """Sum each word's sub-token scores (signed), `(..., seq_len) -> (..., max_words)`.

    `word_index` is `(batch, seq_len)` and broadcasts over leading dimensions of `token_scores` (e.g. classes);
    special tokens and padding (-1) are dropped.
    """
    index = word_index.expand_as(token_scores)
    keep = index >= 0
    words = torch.zeros(*token_scores.shape[:-1], max_words + 1, dtype=token_scores.dtype, device=token_scores.device)
    # Dropped tokens go to an extra last column, cut off afterwards.
    words.scatter_add_(-1, torch.where(keep, index, max_words), token_scores.masked_fill(~keep, 0))
    return words[..., :max_words]


def word_to_token_scores(word_scores: torch.Tensor, word_index: torch.Tensor) -> torch.Tensor:
    """Spread one value per word evenly over its sub-tokens, `(batch, max_words) -> (batch, seq_len)`, so that
    `token_to_word_scores` gives the word values back; special tokens and padding get 0.

    For methods that score words directly (SHAP, random) and return token scores like the others.
    """
    keep = word_index >= 0
    index = word_index.clamp(min=0)
    counts = torch.zeros_like(word_scores).scatter_add_(-1, index, keep.to(word_scores.dtype))
    per_token = (word_scores / counts.clamp(min=1)).gather(-1, index)
    return per_token.masked_fill(~keep, 0.0)
