"""Texts to token batches that know their words, and token scores back to word scores.

The only place where sub-word tokens meet words: every explainer and the faithfulness metrics use it.
"""

import warnings
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from .errors import ExplainerInputError


@dataclass
class TokenizedText:
    """One text, tokenized once, with the map from tokens to words.

    `word_index[t]` is the word of token `t`, or -1 for a special token. `spans[w]` covers every sub-token of
    word `w`, so that `words[w] == text[start:end]`.
    """

    text: str
    input_ids: list[int]
    token_type_ids: list[int] | None
    word_index: list[int]
    words: list[str]
    spans: list[tuple[int, int]]
    truncated: bool


def tokenize(tokenizer: PreTrainedTokenizerBase, texts: list[str], max_length: int) -> list[TokenizedText]:
    """Tokenize `texts` (truncating to `max_length` tokens with a warning) and map tokens to words."""
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
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ExplainerInputError(f"Text {i} is a {type(text).__name__}, not a str.")
        if not text.strip():
            raise ExplainerInputError(f"Text {i} is empty or only whitespace: there is nothing to explain.")
    encoding = tokenizer(list(texts), truncation=True, max_length=max_length, return_offsets_mapping=True)
    items = []
    for i, text in enumerate(texts):
        word_ids = encoding.word_ids(i)
        offsets = encoding["offset_mapping"][i]
        word_of_id: dict[int, int] = {}
        spans: list[list[int]] = []
        word_index = []
        for word_id, (start, end) in zip(word_ids, offsets, strict=True):
            if word_id is None:
                word_index.append(-1)
                continue
            if word_id not in word_of_id:
                word_of_id[word_id] = len(spans)
                spans.append([start, end])
            span = spans[word_of_id[word_id]]
            span[0], span[1] = min(span[0], start), max(span[1], end)
            word_index.append(word_of_id[word_id])
        if not spans:
            raise ExplainerInputError(f"Text {i} ({text[:40]!r}) gives no token the model knows.")
        # The tokenizer keeps the tokens it cut off: a text was truncated exactly when there are some.
        truncated = bool(encoding.encodings[i].overflowing)
        if truncated:
            warnings.warn(
                f"Text {i} is longer than {max_length} tokens: only its first {spans[-1][1]} characters "
                f"({len(spans)} words) are explained.",
                stacklevel=3,
            )
        token_type_ids = encoding["token_type_ids"][i] if "token_type_ids" in encoding else None
        items.append(
            TokenizedText(
                text=text,
                input_ids=encoding["input_ids"][i],
                token_type_ids=token_type_ids,
                word_index=word_index,
                words=[text[start:end] for start, end in spans],
                spans=[(start, end) for start, end in spans],
                truncated=truncated,
            )
        )
    return items


@dataclass
class TokenBatch:
    """Texts padded to a common length, as the model takes them.

    Attributes:
        input_ids: `(batch, seq_len)`.
        attention_mask: `(batch, seq_len)`, 1 for real tokens.
        token_type_ids: `(batch, seq_len)` or None when the tokenizer gives none.
        word_index: `(batch, seq_len)`, the word of each token, -1 for special tokens and padding.
        num_words: `(batch,)`.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor | None
    word_index: torch.Tensor
    num_words: torch.Tensor

    def model_inputs(self) -> dict[str, torch.Tensor]:
        inputs = {"input_ids": self.input_ids, "attention_mask": self.attention_mask}
        if self.token_type_ids is not None:
            inputs["token_type_ids"] = self.token_type_ids
        return inputs

    def select(self, rows: torch.Tensor) -> "TokenBatch":
        """The sub-batch of `rows` (a `(k,)` index tensor), cut to its own longest text so that it carries
        no column of padding only."""
        length = int(self.attention_mask[rows].sum(-1).max())
        return TokenBatch(
            input_ids=self.input_ids[rows, :length],
            attention_mask=self.attention_mask[rows, :length],
            token_type_ids=self.token_type_ids[rows, :length] if self.token_type_ids is not None else None,
            word_index=self.word_index[rows, :length],
            num_words=self.num_words[rows],
        )

    @property
    def is_word(self) -> torch.Tensor:
        """`(batch, seq_len)` bool: the token belongs to a word (not special, not padding)."""
        return self.word_index >= 0


def collate(items: list[TokenizedText], pad_token_id: int, device: torch.device | str = "cpu") -> TokenBatch:
    """Pad tokenized texts into one batch on `device`."""
    length = max(len(item.input_ids) for item in items)

    def padded(rows: list[list[int]], value: int) -> torch.Tensor:
        return torch.tensor([row + [value] * (length - len(row)) for row in rows], device=device)

    has_types = items[0].token_type_ids is not None
    return TokenBatch(
        input_ids=padded([item.input_ids for item in items], pad_token_id),
        attention_mask=padded([[1] * len(item.input_ids) for item in items], 0),
        token_type_ids=padded([item.token_type_ids for item in items], 0) if has_types else None,
        word_index=padded([item.word_index for item in items], -1),
        num_words=torch.tensor([len(item.words) for item in items], device=device),
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
