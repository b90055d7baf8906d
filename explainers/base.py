"""The base every method shares: argument checks, tokenization, target resolution, batching, word aggregation.

A method subclasses `Explainer`, declares what it needs, and implements `token_scores` for one padded batch;
everything else (texts to tokens, targets, length-sorted batches, tokens to words, the `Explanation`) is here.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .errors import ExplainerError, MethodError
from .explanation import Explanation
from .targets import Target, resolve_targets
from .words import TokenBatch, TokenizedText, collate, token_to_word_scores, tokenize

METHODS: dict[str, type["Explainer"]] = {}


def register(cls: type["Explainer"]) -> type["Explainer"]:
    """Class decorator: make a method available to `explain(method=cls.name)`."""
    METHODS[cls.name] = cls
    return cls


@dataclass
class TokenScores:
    """What a method computes for one batch.

    Attributes:
        scores: `(batch, seq_len)` signed score of each token for its row's target (padding and special tokens
            may hold anything: they are dropped when tokens become words).
        class_scores: `(batch, num_labels, seq_len)` scores for every class, for methods that give them at once.
        diagnostics: one dict per row, copied onto the `Explanation` (`score`, `baseline_score`, `delta` as
            attributes, anything else JSON-able into `extras`).
    """

    scores: torch.Tensor
    class_scores: torch.Tensor | None = None
    diagnostics: list[dict[str, Any]] = field(default_factory=list)


def probabilities(model: PreTrainedModel, logits: torch.Tensor) -> torch.Tensor:
    """Class probabilities: sigmoid for a multi-label model, softmax otherwise."""
    if model.config.problem_type == "multi_label_classification":
        return torch.sigmoid(logits)
    return torch.softmax(logits, dim=-1)


class Explainer:
    """Base of all methods. Subclasses set `name` and implement `token_scores`.

    Class attributes:
        name: the `method=` name.
        allows_contrast: the method can explain a logit difference (pair targets).
        needs_encoder: the method reads an encoder's layers (attention rollout, flow).
        needs_label_attention: the method reads the label-attention weights.
        max_padding: the largest fraction of padding a batch may hold (see `length_sorted_batches`); 0 for
            methods whose cost per text is large enough that batching only texts of one length costs nothing.
        defaults: the method's options and their default values; other options are refused.
    """

    name: ClassVar[str] = ""
    allows_contrast: ClassVar[bool] = False
    needs_encoder: ClassVar[bool] = False
    needs_label_attention: ClassVar[bool] = False
    max_padding: ClassVar[float] = 0.25
    defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase):
        config = model.config
        if getattr(config, "model_type", None) != "labelattn":
            raise MethodError(f"The explainers read labelattn models; got a {type(model).__name__}.")
        if self.needs_encoder and config.backbone != "encoder":
            raise MethodError(
                f"{self.name} follows attention through the encoder's layers, and this model's "
                f"{config.backbone!r} backbone has none: use label_attention, integrated_gradients or shap."
            )
        if self.needs_label_attention and config.pooling != "label_attention":
            raise MethodError(
                f"{self.name} reads the label-attention weights, and this model pools with {config.pooling!r}: "
                "use integrated_gradients, saliency or shap."
            )
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        self.id2label = {int(k): v for k, v in config.id2label.items()}

    def token_scores(
        self, batch: TokenBatch, target: torch.Tensor, contrast: torch.Tensor | None, **options
    ) -> TokenScores:
        """Scores of the tokens of one padded batch.

        Args:
            batch: the texts, padded, on the model's device.
            target: `(batch,)` class explained in each row.
            contrast: `(batch,)` class b of "target rather than b" in each row, or None.
        """
        raise NotImplementedError

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            raise ExplainerError(
                f"{self.name} takes no option {unknown}: its options are {sorted(self.defaults) or 'none'}."
            )
        return {**self.defaults, **options}

    @torch.no_grad()
    def predict(self, items: list[TokenizedText], batch_size: int) -> torch.Tensor:
        """Logits `(texts, num_labels)` of the tokenized texts, in length-sorted batches."""
        logits = torch.empty(len(items), len(self.id2label), device=self.device)
        for rows in length_sorted_batches(items, range(len(items)), batch_size):
            batch = collate([items[i] for i in rows], self.tokenizer.pad_token_id or 0, self.device)
            logits[rows] = self.model(**batch.model_inputs()).logits.float()
        return logits

    def explain(
        self,
        texts: str | Sequence[str],
        target: Target | list[Target] = None,
        targets: str | None = None,
        batch_size: int = 16,
        max_length: int | None = None,
        **options,
    ) -> Explanation | list[Explanation] | list[list[Explanation]]:
        """Explain one text (one `Explanation`) or a list of texts (a list, same order).

        Args:
            target: None (predicted class), a class index, a label name, a pair `(a, b)`, or one per text.
            targets: `"all"` explains every class of each text in the same batched passes; the result of a text
                is then a list with one `Explanation` per class.
            batch_size: rows (text × target) computed together; rows are grouped by length so that little
                padding is computed.
            max_length: longest input in tokens; defaults to what the model and tokenizer read. Longer texts are
                truncated with a warning and flagged `truncated`.
            options: the method's own options (see its `defaults`).
        """
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        if not texts:
            raise ExplainerError("No text to explain: pass a str or a non-empty list of str.")
        if targets not in (None, "all"):
            raise ExplainerError(f"targets={targets!r}: the only value is 'all' (every class).")
        if targets == "all" and target is not None:
            raise ExplainerError("Pass either target or targets='all', not both.")
        if batch_size < 1:
            raise ExplainerError(f"batch_size must be at least 1, got {batch_size}.")
        options = self.check_options(options)
        limit = min(self.model.config.max_seq_length, getattr(self.tokenizer, "model_max_length", 10**9))
        items = tokenize(self.tokenizer, texts, max_length or limit)

        logits = self.predict(items, batch_size)
        probs = probabilities(self.model, logits)
        num_labels = logits.shape[-1]
        if targets == "all":
            rows = [i for i in range(len(items)) for _ in range(num_labels)]
            target_index = torch.arange(num_labels, device=self.device).repeat(len(items))
            contrast_index = None
        else:
            rows = list(range(len(items)))
            target_index, contrast_index = resolve_targets(
                target, logits.argmax(-1), self.id2label, self.allows_contrast, self.name
            )

        explanations: list[Explanation | None] = [None] * len(rows)
        for group in length_sorted_batches(items, rows, batch_size, positions=True, max_padding=self.max_padding):
            group_items = [items[rows[j]] for j in group]
            batch = collate(group_items, self.tokenizer.pad_token_id or 0, self.device)
            group_target = target_index[group]
            group_contrast = contrast_index[group] if contrast_index is not None else None
            result = self.token_scores(batch, group_target, group_contrast, **options)
            max_words = int(batch.num_words.max())
            word_scores = token_to_word_scores(result.scores.detach().float(), batch.word_index, max_words)
            class_words = None
            if result.class_scores is not None:
                class_words = token_to_word_scores(
                    result.class_scores.detach().float(), batch.word_index[:, None], max_words
                )
            for k, j in enumerate(group):
                explanations[j] = self._explanation(
                    group_items[k],
                    word_scores[k],
                    class_words[k] if class_words is not None else None,
                    int(group_target[k]),
                    int(group_contrast[k]) if group_contrast is not None else None,
                    float(probs[rows[j], group_target[k]]),
                    result.diagnostics[k] if result.diagnostics else {},
                    options,
                )
        if targets == "all":
            explanations = [explanations[i * num_labels : (i + 1) * num_labels] for i in range(len(items))]
        return explanations[0] if single else explanations

    def _explanation(
        self,
        item: TokenizedText,
        word_scores: torch.Tensor,
        class_words: torch.Tensor | None,
        target: int,
        contrast: int | None,
        probability: float,
        diagnostics: dict[str, Any],
        options: dict[str, Any],
    ) -> Explanation:
        n = len(item.words)
        extras = {k: v for k, v in diagnostics.items() if k not in ("score", "baseline_score", "delta")}
        if class_words is not None:
            extras["class_scores"] = class_words[:, :n].tolist()
            extras["labels"] = [self.id2label[i] for i in range(len(self.id2label))]
        return Explanation(
            text=item.text,
            words=item.words,
            spans=item.spans,
            scores=word_scores[:n].tolist(),
            target=target,
            target_label=self.id2label[target],
            probability=probability,
            method=self.name,
            options=dict(options),
            contrast=contrast,
            contrast_label=self.id2label[contrast] if contrast is not None else None,
            truncated=item.truncated,
            score=diagnostics.get("score"),
            baseline_score=diagnostics.get("baseline_score"),
            delta=diagnostics.get("delta"),
            extras=extras,
        )


def text_seed(input_ids: list[int], seed: int) -> int:
    """A random seed that depends only on `seed` and a text's token ids (stable across runs, unlike `hash`),
    so that a randomised method gives a text the same scores in any batch."""
    key = sum((i + 1) * token for i, token in enumerate(input_ids)) % 1_000_003
    return seed * 1_000_003 + key


def length_sorted_batches(
    items: list[TokenizedText],
    rows: Sequence[int],
    batch_size: int,
    positions: bool = False,
    max_padding: float = 1.0,
) -> list[list[int]]:
    """Split rows into batches of similar token length, so that padding costs little.

    `rows[j]` is the index in `items` of row j. A batch holds at most `batch_size` rows, and is closed early
    rather than let padding exceed the fraction `max_padding` of its positions (0: only texts of one length
    together). Returns lists of row values, or of positions j when `positions` is set.
    """
    order = sorted(range(len(rows)), key=lambda j: len(items[rows[j]].input_ids))
    chunks: list[list[int]] = []
    tokens = 0
    for j in order:
        length = len(items[rows[j]].input_ids)
        # Sorted by length: the new row is the longest, so the batch would be padded to its length.
        if (
            chunks
            and len(chunks[-1]) < batch_size
            and (tokens + length) >= (1 - max_padding) * length * (len(chunks[-1]) + 1)
        ):
            chunks[-1].append(j)
            tokens += length
        else:
            chunks.append([j])
            tokens = length
    return chunks if positions else [[rows[j] for j in chunk] for chunk in chunks]
