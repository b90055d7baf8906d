"""The base every method shares: argument checks, tokenization, target resolution, batching, word aggregation.

A method subclasses `Explainer`, declares what it needs, and implements `token_scores` for one padded batch;
everything else (texts to tokens, targets, length-sorted batches, tokens to words, the `Explanation`) is here.
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .checks import check_count, check_max_length, check_target_choice
from .errors import MethodError
from .explanation import Explanation
from .loading import label_names
from .models import (
    baseline_token_id,
    check_finite_logits,
    exclusive,
    has_input_embeddings,
    has_label_attention,
    pads_left,
    pooling_ready,
    returns_attentions,
    unwrap,
)
from .options import Option, check_options
from .outputs import resolve_output
from .registry import method_class, method_names
from .targets import Target, resolve_targets
from .windows import check_long_text, mean_by_text, merge_windows, tokenize_windows
from .words import TextInput, TokenBatch, TokenizedText, check_texts, collate, token_to_word_scores, tokenize


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
    """Class probabilities `(batch, num_labels)`: sigmoid for a multi-label model, softmax otherwise."""
    if model.config.problem_type == "multi_label_classification":
        return torch.sigmoid(logits)
    return torch.softmax(logits, dim=-1)


def at_least_float32(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` in float32, or float64 if it is: the dtype to add up scores in, whatever the model computes in
    (bf16 and fp16 would round sums of many small terms)."""
    return tensor.to(torch.promote_types(tensor.dtype, torch.float32))


@contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """Within the block every module is in eval mode (no dropout); on exit each gets its own mode back, so that
    explaining in the middle of training leaves the training as it was."""
    modes = {module: module.training for module in model.modules()}
    model.eval()
    try:
        yield
    finally:
        for module, training in modes.items():
            module.train(training)


def get_explainer(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None, method: str) -> "Explainer":
    """The explainer of `method` for this model (raises `MethodError` if unknown or unfit for the model).
    `model` may be a `pipeline("text-classification")` with `tokenizer=None`."""
    return method_class(method)(model, tokenizer)


class Explainer:
    """Base of all methods. A subclass declares what it is and needs, and implements `token_scores`; registered
    with `@register`, it is offered everywhere (`explain`, the command line, the Space, the faithfulness report).

    Class attributes:
        name: the `method=` name.
        title: the name shown to people (the Space, tables).
        order: where the method is listed among the others (lower first; ties by name).
        options: the method's keyword options (`explainers.options.Option`), declared once; others are refused.
        outputs: the outputs of the model the method can explain (`explainers.outputs`); empty for a method whose
            scores are not a share of any output (attention rollout and flow, weights). A method with outputs takes
            the option `output` (default: the model's, see `explainers.outputs.default_output`).
        score_meaning: what a word's score is, as the start of a phrase that ends with the explained output ("each
            word's Shapley value for" ... "the log-probability of HUM").
        baseline_name: what the method compares the text with, in words ("every word removed"), when its scores add
            up to `score - baseline_score`.
        allows_contrast: the method can explain a difference of two classes (pair targets).
        needs_embeddings: the method hooks the input embeddings (`get_input_embeddings()`).
        needs_attentions: the method follows the attention weights of the model's layers (rollout, flow).
        needs_label_attention: the method reads the label attention of a labelattn model.
        is_baseline: the method is a baseline to compare with (random), not an explanation.
        max_padding: the largest fraction of padding a batch may hold (see `length_sorted_batches`); 0 for
            methods whose cost per text is large enough that batching only texts of one length costs nothing.
    """

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    order: ClassVar[int] = 50
    options: ClassVar[tuple[Option, ...]] = ()
    outputs: ClassVar[tuple[str, ...]] = ()
    score_meaning: ClassVar[str] = "each word's score for"
    baseline_name: ClassVar[str] = "the baseline"
    allows_contrast: ClassVar[bool] = False
    needs_embeddings: ClassVar[bool] = False
    needs_attentions: ClassVar[bool] = False
    needs_label_attention: ClassVar[bool] = False
    is_baseline: ClassVar[bool] = False
    max_padding: ClassVar[float] = 0.25

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None = None):
        model, tokenizer = unwrap(model, tokenizer)
        reason = self.unsupported(model)
        if reason is not None:
            raise MethodError(f"{self.name} cannot explain this {type(model).__name__}: {reason}")
        self.model = model
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        self.id2label = dict(enumerate(label_names(model.config)))  # a built model's map checked as a loaded one's
        self.baseline_id = baseline_token_id(tokenizer)

    @classmethod
    def all_options(cls) -> tuple[Option, ...]:
        """The method's declared options, and `output` for a method that explains an output of the model."""
        if not cls.outputs:
            return cls.options
        output = Option(
            "output",
            None,
            str,
            "the number explained (None: the model's default, the logit minus the mean logit for a single-label "
            "model and the class's log-odds for a multi-label one; see docs/explainers.md)",
            choices=cls.outputs,
            nullable=True,
        )
        return (*cls.options, output)

    @classmethod
    def unsupported(cls, model: PreTrainedModel) -> str | None:
        """Why this method cannot explain `model` (a sentence naming what is missing and what to use), or None."""
        if cls.needs_embeddings and not has_input_embeddings(model):
            return (
                "it has no input embeddings (get_input_embeddings()) to take gradients at; use "
                f"{method_names(needs_embeddings=False, needs_label_attention=False, needs_attentions=False)}."
            )
        usable = method_names(needs_label_attention=False, needs_attentions=False)
        if cls.needs_label_attention and not has_label_attention(model):
            return (
                "the method reads label-attention weights, which only a labelattn model pooling with label_attention "
                f"has; use {usable}."
            )
        if cls.needs_attentions and not returns_attentions(model):
            return (
                "the method follows attention through the model's layers, and this model returns no attention "
                f"weights (a labelattn embedding backbone has none); use {usable}."
            )
        return None

    def token_scores(
        self, batch: TokenBatch, target: torch.Tensor, contrast: torch.Tensor | None, **options
    ) -> TokenScores:
        """Scores of the tokens of one padded batch.

        Args:
            batch: the texts, padded, on the model's device.
            target: `(batch,)` class explained in each row.
            contrast: `(batch,)` class b of "target rather than b" in each row, or None.
            options: the method's options, checked, defaults filled in (`output` resolved to a name).
        """
        raise NotImplementedError

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The options with the defaults filled in and `output` resolved for this model, after checking each against
        its declaration (`explainers.options`) and then the rules between options (`check_option_values`)."""
        options = check_options(self.all_options(), options, self.name)
        if self.outputs:
            options["output"] = resolve_output(options["output"], self.model, self.outputs, self.name)
        self.check_option_values(options)
        return options

    def check_option_values(self, options: dict[str, Any]) -> None:
        """Rules between a method's options, or of an option and the model (e.g. `n_steps <= max_steps`): raise
        `ExplainerError` with the fix. None by default."""

    def predict(self, items: list[TokenizedText], batch_size: int) -> torch.Tensor:
        """Logits `(texts, num_labels)` (float32) of the tokenized texts, checked to be finite."""
        logits = predict_logits(self.model, items, self.baseline_id, batch_size)
        check_finite_logits(logits)
        return logits

    def collate(self, items: list[TokenizedText]) -> TokenBatch:
        """Tokenized texts padded as the model takes them (on the left for decoder classifiers)."""
        return collate(items, self.baseline_id, self.device, left=pads_left(self.model))

    def explain(
        self,
        texts: TextInput | Sequence[TextInput],
        target: Target | list[Target] = None,
        targets: str | None = None,
        top_k: int | None = None,
        batch_size: int = 16,
        max_length: int | None = None,
        long_text: str = "truncate",
        **options,
    ) -> Explanation | list[Explanation] | list[list[Explanation]]:
        """Explain one text (one `Explanation`) or a list of texts (a list, same order).

        Args:
            texts: a str, a pair `(text, text_pair)` (a tuple of two str, for models that read two segments), or
                a list of those.
            target: None (predicted class), a class index, a label name, a pair `(a, b)`, or one per text.
            targets: `"all"` explains every class of each text in the same batched passes; the result of a text
                is then a list with one `Explanation` per class.
            top_k: explain the `top_k` most probable classes of each text (batched like `targets="all"`); the
                result of a text is then a list, most probable class first.
            batch_size: rows (text × target) computed together; rows are grouped by length so that little
                padding is computed.
            max_length: longest input in tokens; defaults to what the model and tokenizer read.
            long_text: what happens to a longer text: "truncate" (only its start is read and explained, with a
                warning, and the explanation is flagged `truncated`) or "windows" (read whole in overlapping windows
                of `max_length` tokens: see `explainers.windows`).
            options: the method's own options (see its `defaults`).
        """
        texts, single = check_texts(texts)
        check_target_choice(target, targets, top_k, len(self.id2label))
        check_count(batch_size, "batch_size", "rows")
        long_text = check_long_text(long_text, texts)
        options = self.check_options(options)
        pairs = any(isinstance(text, tuple) for text in texts)
        with exclusive(self.model):
            limit = check_max_length(max_length, self.model, self.tokenizer, pairs)
            if long_text == "windows":
                items, owners = tokenize_windows(self.tokenizer, texts, limit)
            else:
                items, owners = tokenize(self.tokenizer, texts, limit), None
            with evaluating(self.model), pooling_ready(self.model):
                logits = self.predict(items, batch_size)
                if owners is not None:
                    logits = mean_by_text(logits, owners, len(texts))
                explanations = self._explain(
                    items, owners, logits, target, targets == "all", top_k, batch_size, options
                )
        return explanations[0] if single else explanations

    def _explain(
        self,
        items: list[TokenizedText],
        owners: list[int] | None,
        logits: torch.Tensor,
        target: Target | list[Target],
        all_targets: bool,
        top_k: int | None,
        batch_size: int,
        options: dict[str, Any],
    ) -> list[Explanation] | list[list[Explanation]]:
        """`explain` once the arguments are checked, the texts tokenized (`items`, or with `owners` the windows of
        the texts) and their `logits (texts, labels)` computed: one result per text, or a list per text: every class
        in order (`all_targets`) or the `top_k` most probable, most probable first."""
        probs = probabilities(self.model, logits)
        num_texts = logits.shape[0]
        per_text = logits.shape[-1] if all_targets else top_k
        if per_text is not None:
            rows = [i for i in range(num_texts) for _ in range(per_text)]
            if all_targets:
                target_index = torch.arange(per_text, device=self.device).repeat(num_texts)
            else:
                # stable: equal probabilities keep the class order
                target_index = probs.sort(dim=-1, descending=True, stable=True).indices[:, :top_k].reshape(-1)
            contrast_index = None
        else:
            rows = list(range(num_texts))
            target_index, contrast_index = resolve_targets(
                target, logits.argmax(-1), self.id2label, self.allows_contrast, self.name
            )
        probability = probs[torch.tensor(rows, device=probs.device), target_index].tolist()
        if owners is None:
            explanations = self._explain_rows(
                items, rows, target_index, contrast_index, probability, batch_size, options
            )
        else:  # every window of a text row, for the text's target; then one explanation per text row
            windows_of = [[w for w, owner in enumerate(owners) if owner == i] for i in range(num_texts)]
            of_row = [r for r, text in enumerate(rows) for _ in windows_of[text]]
            pieces = self._explain_rows(
                items,
                [w for text in rows for w in windows_of[text]],
                target_index[of_row],
                contrast_index[of_row] if contrast_index is not None else None,
                [probability[r] for r in of_row],
                batch_size,
                options,
            )
            explanations = [
                merge_windows([piece for piece, r in zip(pieces, of_row, strict=True) if r == row], probability[row])
                for row in range(len(rows))
            ]
        if per_text is not None:
            return [explanations[i * per_text : (i + 1) * per_text] for i in range(num_texts)]
        return explanations

    def _explain_rows(
        self,
        items: list[TokenizedText],
        rows: list[int],
        target_index: torch.Tensor,
        contrast_index: torch.Tensor | None,
        probability: list[float],
        batch_size: int,
        options: dict[str, Any],
    ) -> list[Explanation]:
        """The explanation of each row: `items[rows[j]]` for class `target_index[j]` (rather than
        `contrast_index[j]`), in length-sorted batches."""
        explanations: list[Explanation | None] = [None] * len(rows)
        for group in length_sorted_batches(items, rows, batch_size, positions=True, max_padding=self.max_padding):
            group_items = [items[rows[j]] for j in group]
            batch = self.collate(group_items)
            group_target = target_index[group]
            group_contrast = contrast_index[group] if contrast_index is not None else None
            result = self.token_scores(batch, group_target, group_contrast, **options)
            max_words = int(batch.num_words.max())
            word_scores = token_to_word_scores(at_least_float32(result.scores.detach()), batch.word_index, max_words)
            class_words = None
            if result.class_scores is not None:
                class_words = token_to_word_scores(
                    at_least_float32(result.class_scores.detach()), batch.word_index[:, None], max_words
                )
            for k, j in enumerate(group):
                explanations[j] = self._explanation(
                    group_items[k],
                    word_scores[k],
                    class_words[k] if class_words is not None else None,
                    int(group_target[k]),
                    int(group_contrast[k]) if group_contrast is not None else None,
                    probability[j],
                    result.diagnostics[k] if result.diagnostics else {},
                    options,
                )
        return explanations

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
            output=options.get("output"),
            score=diagnostics.get("score"),
            baseline_score=diagnostics.get("baseline_score"),
            delta=diagnostics.get("delta"),
            extras=extras,
            text_pair=item.text_pair,
            word_segments=item.word_segments,
        )


@torch.no_grad()
def predict_logits(
    model: PreTrainedModel, items: Sequence[TokenizedText], pad_token_id: int, batch_size: int
) -> torch.Tensor:
    """Logits `(texts, num_labels)` (float32, on the model's device) of tokenized texts, in eval mode and in
    length-sorted batches, so that short texts are not padded to the longest one (decoder classifiers padded on
    the left: see `explainers.models`)."""
    device = next(model.parameters()).device
    logits = torch.empty(len(items), model.config.num_labels, device=device)
    left = pads_left(model)
    with exclusive(model), evaluating(model), pooling_ready(model):
        for rows in length_sorted_batches(items, range(len(items)), batch_size):
            batch = collate([items[i] for i in rows], pad_token_id, device, left=left)
            logits[rows] = model(**batch.model_inputs()).logits.float()
    return logits


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
