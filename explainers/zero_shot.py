"""Zero-shot classifiers: an NLI model scoring `(text, hypothesis)` for each candidate label, as transformers'
`pipeline("zero-shot-classification")` runs it, wrapped as a classifier of texts whose classes are the candidate labels,
so that every method explains it unchanged.

`ZeroShotClassifier` reads the tokens of one text (`[CLS] text [SEP]`, `tokenizer(text)`), and in its forward pass
appends to them each label's hypothesis, making exactly the pipeline's pair encodings
(`[CLS] text [SEP] This example is sports. [SEP]`); it runs the NLI model on those pairs and returns one logit per
label:

- `multi_label=False` with two labels or more: the label's entailment logit. The labels compete: their softmax is the
  pipeline's score, and a word that raises one label's entailment lowers every other label's probability.
- `multi_label=True`, or one label (the pipeline scores one label this way too): the label's log-odds of entailment
  against contradiction, `z_entailment − z_contradiction`. Its sigmoid is the pipeline's score (the softmax of those
  two logits), and `config.problem_type` is multi-label: each label is its own yes/no.

The entailment class is the pipeline's `entailment_id`: the first label name of the NLI model's config that starts with
"entail" (any case). The contradiction class is, as in the pipeline, index 0, or the last class when entailment is 0.

Only the text's tokens go through `get_input_embeddings()`, the layer that the methods hook: Integrated Gradients
interpolates, saliency differentiates and SHAP removes the words of the text, while the hypothesis is a fixed part of
the function explained (embedded by the NLI model's own layer, never scored). So there is one score per word of the
text, and completeness holds as for any classifier. The NLI model runs on `inputs_embeds`; a model that cannot (BART,
which finds its `</s>` tokens in `input_ids`) is refused when the classifier is made.

Cost: every text row the methods compute runs the NLI model once per label (the labels' softmax needs all of them), and
`targets="all"` computes a row per label: a text costs `labels²` pair passes per step or sample.

Text longer than the model's window: the pipeline cuts each pair on its own (only the text, `only_first`), so a label
with a long hypothesis sees less text than one with a short one; here a text is cut once, to what the model reads
beside the longest hypothesis, flagged `truncated`, and every label sees the same words.

Written here: transformers has the pipeline (whose label and template rules are followed) but no differentiable
function of the text alone; Captum explains such a function once it exists, and this module is that function.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerBase
from transformers.pipelines import ZeroShotClassificationPipeline
from transformers.utils import ModelOutput

from .base import at_least_float32, evaluating, get_explainer
from .errors import ExplainerInputError, MethodError
from .explanation import Explanation
from .models import baseline_token_id, is_pipeline, pads_left, pooling_ready, token_limit, unwrap
from .registry import METHODS
from .targets import Target
from .words import check_texts, text_problem, tokenize

DEFAULT_TEMPLATE = "This example is {}."  # the pipeline's default
# Options of `explain` that make it explain a zero-shot classifier (for `explain(pipeline, None, text, ...)`).
ZERO_SHOT_OPTIONS = ("candidate_labels", "hypothesis_template", "multi_label")
# The text on which the classifier checks, once, that it makes the pipeline's pair encodings.
PROBE = "A probe text, to see where the tokenizer puts the second segment."


@dataclass
class ZeroShotClassifierOutput(ModelOutput):
    """
    Attributes:
        logits: `(batch, labels)` one logit per candidate label: its entailment logit, or for a multi-label
            classifier its log-odds of entailment against contradiction.
        nli_logits: `(batch, labels, nli_classes)` the NLI model's logits of each (text, hypothesis) pair.
    """

    logits: torch.Tensor | None = None
    nli_logits: torch.Tensor | None = None


class TextEmbeddings(nn.Module):
    """The NLI model's input embeddings of the text's tokens: the layer the methods hook. The hypotheses are embedded by
    the NLI model's layer itself, which no method hooks."""

    def __init__(self, embeddings: nn.Module):
        super().__init__()
        self.embeddings = embeddings

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embeddings(input_ids)


def wants_zero_shot(model: Any, options: dict[str, Any]) -> bool:
    """`explain(model, tokenizer, texts, **options)` asks for zero-shot explanations: `model` is a zero-shot pipeline
    or `options` holds one of `ZERO_SHOT_OPTIONS`."""
    return isinstance(model, ZeroShotClassificationPipeline) or any(name in options for name in ZERO_SHOT_OPTIONS)


def check_candidate_labels(candidate_labels: Any) -> list[str]:
    """The candidate labels as a list of distinct names; a str is split at its commas, as the pipeline reads it."""
    example = "e.g. candidate_labels=['sports', 'politics']"
    if candidate_labels is None:
        raise ExplainerInputError(f"candidate_labels is missing: pass the labels to choose from, {example}.")
    if isinstance(candidate_labels, str):
        candidate_labels = [label.strip() for label in candidate_labels.split(",") if label.strip()]
    if not isinstance(candidate_labels, list | tuple):
        raise ExplainerInputError(
            f"candidate_labels is a {type(candidate_labels).__name__}: pass a list of label names, {example}."
        )
    if not candidate_labels:
        raise ExplainerInputError(f"candidate_labels is empty: pass at least one label, {example}.")
    for i, label in enumerate(candidate_labels):
        problem = text_problem(label)
        if problem is not None:
            raise ExplainerInputError(f"Candidate label {i} {problem}: each label is a name, {example}.")
    repeated = sorted({label for label in candidate_labels if candidate_labels.count(label) > 1})
    if repeated:
        raise ExplainerInputError(f"Candidate labels {repeated} are given twice: name each label once.")
    return list(candidate_labels)


def hypotheses_of(labels: Sequence[str], hypothesis_template: Any) -> list[str]:
    """Each label's hypothesis, `hypothesis_template.format(label)`, after the pipeline's check that the template has
    a place for the label."""
    example = "write one {} where the label goes, e.g. 'This example is {}.'"
    problem = text_problem(hypothesis_template)
    if problem is not None:
        raise ExplainerInputError(f"hypothesis_template {problem}: {example}")
    try:
        hypotheses = [hypothesis_template.format(label) for label in labels]
    except (IndexError, KeyError, ValueError) as error:
        raise ExplainerInputError(
            f"hypothesis_template {hypothesis_template!r} cannot take a label ({type(error).__name__}: {error}): "
            f"{example}"
        ) from None
    if hypotheses[0] == hypothesis_template:
        raise ExplainerInputError(f"hypothesis_template {hypothesis_template!r} has no {{}} for the label: {example}")
    return hypotheses


def entailment_id(model: PreTrainedModel) -> int:
    """The NLI model's entailment class, as the pipeline's `entailment_id` finds it: the first label whose name starts
    with "entail" (any case), in `config.label2id` (or `id2label` when the config has no `label2id`)."""
    config = model.config
    label2id = config.label2id or {name: int(index) for index, name in config.id2label.items()}
    for name, index in label2id.items():
        if str(name).lower().startswith("entail"):
            return int(index)
    raise MethodError(
        f"{type(model).__name__} has no entailment class (its labels are {list(label2id)}): a zero-shot classifier is "
        "an NLI model whose config names one class 'entailment' (config.id2label and label2id), as "
        "pipeline('zero-shot-classification') needs."
    )


class ZeroShotClassifier(nn.Module):
    """An NLI model as a classifier of texts into candidate labels (see the module docstring).

    ```python
    classifier = ZeroShotClassifier(pipeline("zero-shot-classification", model=NLI), candidate_labels=["sports", "art"])
    explain(classifier, classifier.tokenizer, "The match went to penalties.", targets="all")  # one per label
    predict(classifier, classifier.tokenizer, texts).probabilities  # the pipeline's scores, in label order
    ```

    Args:
        model: a `pipeline("zero-shot-classification")` (then `tokenizer=None`), or an NLI sequence classifier.
        tokenizer: the NLI model's (fast) tokenizer, or None with a pipeline.
        candidate_labels: the labels (the classes), a list of names or one str of comma-separated names.
        hypothesis_template: the hypothesis of a label, with `{}` where the label goes.
        multi_label: each label is its own yes/no (entailment against contradiction) rather than one of the labels.

    Attributes:
        config: `num_labels`, `id2label`/`label2id` (the candidate labels), `problem_type` (multi-label when the
            labels do not compete) and `max_position_embeddings` (the most tokens of a text, the longest
            hypothesis's left out).
        model, tokenizer: the NLI model and its tokenizer.
        candidate_labels, hypotheses, hypothesis_template, multi_label: as given (`multi_label` is True for one
            label); `hypotheses[i]` is label i's.
        entailment_id, contradiction_id: the NLI classes whose logits make the labels' (the pipeline's rule).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: PreTrainedTokenizerBase | None = None,
        *,
        candidate_labels: str | Sequence[str] | None = None,
        hypothesis_template: str = DEFAULT_TEMPLATE,
        multi_label: bool = False,
    ):
        super().__init__()
        if is_pipeline(model) and not isinstance(model, ZeroShotClassificationPipeline):
            raise MethodError(
                f"This is a {getattr(model, 'task', type(model).__name__)!r} pipeline: explain zero-shot labels with "
                "pipeline('zero-shot-classification', model=NLI_MODEL), or pass the NLI model and its tokenizer."
            )
        model, tokenizer = unwrap(model, tokenizer)
        labels = check_candidate_labels(candidate_labels)
        hypotheses = hypotheses_of(labels, hypothesis_template)
        if not isinstance(multi_label, bool):
            raise ExplainerInputError(f"multi_label={multi_label!r}: give True or False.")
        if model.config.num_labels < 2:
            raise MethodError(
                f"{type(model).__name__} has {model.config.num_labels} class: an NLI model has entailment and "
                "contradiction (and usually neutral)."
            )
        self.model, self.tokenizer = model, tokenizer
        self.candidate_labels, self.hypotheses, self.hypothesis_template = labels, hypotheses, hypothesis_template
        self.multi_label = multi_label or len(labels) == 1
        self.entailment_id = entailment_id(model)
        self.contradiction_id = model.config.num_labels - 1 if self.entailment_id == 0 else 0
        self.text_embeddings = TextEmbeddings(model.get_input_embeddings())
        self.pads_left = pads_left(model)
        # The pipeline passes the tokenizer's model inputs only: token types when the tokenizer's model takes them.
        self.uses_token_types = "token_type_ids" in tokenizer.model_input_names
        longest_tail = self._set_layout(tokenizer, hypotheses, next(model.parameters()).device)
        text_limit = token_limit(model, tokenizer) - longest_tail + self.end_ids.numel()
        if text_limit <= self.head_ids.numel() + self.end_ids.numel():
            raise ExplainerInputError(
                f"The hypotheses leave no room for a text in the {token_limit(model, tokenizer)} tokens the model "
                "reads: shorten hypothesis_template or the labels."
            )
        self.config = PreTrainedConfig(
            num_labels=len(labels),
            id2label=dict(enumerate(labels)),
            label2id={label: i for i, label in enumerate(labels)},
            problem_type="multi_label_classification" if self.multi_label else "single_label_classification",
            max_position_embeddings=text_limit,
            # What the explainers set aside while a decoder's text batches are padded (models.pooling_ready).
            pad_token_id=getattr(model.config.get_text_config(), "pad_token_id", None),
        )
        self._check_reproduces_pairs()

    @property
    def base_model(self) -> nn.Module:
        """The classifier itself: the text limit is its config's `max_position_embeddings`, not the NLI model's."""
        return self

    def get_input_embeddings(self) -> nn.Module:
        return self.text_embeddings

    def _set_layout(self, tokenizer: PreTrainedTokenizerBase, hypotheses: list[str], device: torch.device) -> int:
        """Read from the tokenizer, on `PROBE`, the special tokens around a text alone (`head_ids`, `end_ids`) and
        what follows the text's words in each pair (the tails: the pair's separator, the hypothesis, its special
        tokens), after checking that a pair starts with the tokens of the text alone. Returns the longest tail."""
        limit = token_limit(self.model, tokenizer)
        (single,) = tokenize(tokenizer, [PROBE], limit)
        pairs = tokenize(tokenizer, [(PROBE, hypothesis) for hypothesis in hypotheses], limit)
        words = [t for t, w in enumerate(single.word_index) if w >= 0]
        first, last = words[0], words[-1] + 1
        types = single.token_type_ids or [0] * len(single.input_ids)
        tails, tail_types = [], []
        for pair in pairs:
            pair_types = pair.token_type_ids or [0] * len(pair.input_ids)
            if pair.input_ids[:last] != single.input_ids[:last] or pair_types[:last] != types[:last]:
                raise MethodError(
                    f"{type(tokenizer).__name__} does not start the pair (text, hypothesis) with the tokens of the "
                    "text alone, which a zero-shot classifier needs (it appends each hypothesis to the text's tokens)."
                )
            tails.append(pair.input_ids[last:])
            tail_types.append(pair_types[last:])
        pad = baseline_token_id(tokenizer)
        end = single.input_ids[last:]
        lengths = torch.tensor([len(tail) for tail in tails], device=device)
        buffers = {
            "head_ids": torch.tensor(single.input_ids[:first], dtype=torch.long, device=device),
            "end_ids": torch.tensor(end, dtype=torch.long, device=device),
            # Separators of a second segment, which a single text never holds between its special tokens.
            "separator_ids": torch.tensor(sorted(set(end) - {pad}), dtype=torch.long, device=device),
            # Every label's tail, then one padding token.
            "tail_ids": torch.tensor([t for tail in tails for t in tail] + [pad], dtype=torch.long, device=device),
            "tail_types": torch.tensor([t for types in tail_types for t in types] + [0], device=device),
            "tail_lengths": lengths,
            "tail_offsets": lengths.cumsum(0) - lengths,
        }
        for name, value in buffers.items():
            self.register_buffer(name, value, persistent=False)
        return int(lengths.max())

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_attentions: bool = False,
    ) -> ZeroShotClassifierOutput:
        """Label logits of a batch of texts, each `tokenizer(text)`, padded on either side.

        Args:
            input_ids, attention_mask, token_type_ids: `(batch, seq_len)`.
            position_ids: ignored: the positions are those of each pair, counted from its first token.
            output_attentions: refused: the model attends once per (text, hypothesis) pair, not over the text.
        """
        if output_attentions:
            raise NotImplementedError(
                "A zero-shot classifier has one attention per (text, hypothesis) pair, none over the text alone: "
                "explain it with integrated_gradients, saliency, input_x_gradient or shap."
            )
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        batch, width = input_ids.shape
        labels = len(self.candidate_labels)
        real = attention_mask.sum(-1)  # (batch,)
        start = (attention_mask.cumsum(-1) == 0).sum(-1)  # the padding before each text
        self._check_single_texts(input_ids, start, real)
        index, pair_mask = self._pair_columns(start, real - self.end_ids.numel(), width)
        # The text's tokens through the hooked layer, the hypotheses' through the NLI model's own.
        text_embeddings = self.text_embeddings(input_ids)
        tail_embeddings = self.model.get_input_embeddings()(self.tail_ids).expand(batch, -1, -1)
        source = torch.cat([text_embeddings, tail_embeddings], dim=1)
        embeddings = source.gather(1, index[..., None].expand(-1, -1, source.shape[-1]))
        inputs = {"inputs_embeds": embeddings.view(batch * labels, -1, source.shape[-1]), "attention_mask": pair_mask}
        if self.uses_token_types:
            types = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
            source_types = torch.cat([types, self.tail_types.expand(batch, -1)], dim=1)
            inputs["token_type_ids"] = source_types.gather(1, index).view(batch * labels, -1)
        if self.pads_left:
            inputs["position_ids"] = (pair_mask.cumsum(-1) - 1).clamp(min=0)
        try:
            # A decoder without a padding token takes batches only within `pooling_ready` (see explainers.models).
            with pooling_ready(self.model):
                nli_logits = self.model(**inputs).logits
        except NotImplementedError as error:
            raise MethodError(
                f"{type(self.model).__name__} cannot run on input embeddings ({error}), which explaining the text of "
                "a (text, hypothesis) pair needs: use an encoder NLI model (BERT, RoBERTa, DeBERTa, ...)."
            ) from None
        nli_logits = at_least_float32(nli_logits).view(batch, labels, -1)
        logits = nli_logits[..., self.entailment_id]
        if self.multi_label:
            logits = logits - nli_logits[..., self.contradiction_id]
        return ZeroShotClassifierOutput(logits=logits, nli_logits=nli_logits)

    def _pair_columns(self, start: torch.Tensor, kept: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Where each token of each (text, hypothesis) pair comes from: `(batch, labels · longest)` columns of
        [the batch's `width` tokens, every label's tail, one padding token], and the pairs' attention mask
        `(batch · labels, longest)`.

        Row b's pair with label l is its first `kept[b]` tokens from column `start[b]` on (the head and the text's
        words), then label l's tail; pairs are padded on the side the NLI model is padded on.
        """
        lengths = kept[:, None] + self.tail_lengths  # (batch, labels)
        longest = int(lengths.max())
        offset = longest - lengths if self.pads_left else torch.zeros_like(lengths)
        place = torch.arange(longest, device=start.device) - offset[..., None]  # (batch, labels, longest)
        kept = kept[:, None, None]
        in_text = (place >= 0) & (place < kept)
        in_tail = (place >= kept) & (place < lengths[..., None])
        padding = width + self.tail_ids.shape[0] - 1
        tail = width + self.tail_offsets[:, None] + place - kept
        index = torch.where(in_text, start[:, None, None] + place, torch.where(in_tail, tail, padding))
        return index.flatten(1), (in_text | in_tail).flatten(0, 1).long()

    def _check_single_texts(self, input_ids: torch.Tensor, start: torch.Tensor, real: torch.Tensor) -> None:
        """Refuse rows that are not one text as `tokenizer(text)` encodes it: the special tokens of a text alone at its
        two ends, and no separator of a second segment between them."""
        head, end = self.head_ids.numel(), self.end_ids.numel()
        ok = bool((real >= head + end).all())
        if ok:
            first = start[:, None] + torch.arange(head, device=start.device)
            last = (start + real - end)[:, None] + torch.arange(end, device=start.device)
            ok = bool(
                (input_ids.gather(1, first) == self.head_ids).all()
                and (input_ids.gather(1, last) == self.end_ids).all()
            )
        if ok and self.separator_ids.numel():
            place = torch.arange(input_ids.shape[1], device=start.device) - start[:, None]
            in_text = (place >= head) & (place < (real - end)[:, None])
            ok = not bool((torch.isin(input_ids, self.separator_ids) & in_text).any())
        if not ok:
            raise ExplainerInputError(
                f"The input is not texts as {type(self.tokenizer).__name__} encodes them alone: a zero-shot classifier "
                "reads single texts (tokenizer(text), not pairs) and appends each label's hypothesis itself."
            )

    @torch.no_grad()
    def _check_reproduces_pairs(self) -> None:
        """Once, on `PROBE`: the NLI logits of the pairs made here equal the NLI model's on the tokenizer's own pair
        encodings, one pair at a time as the pipeline runs them (up to rounding in the model's dtype)."""
        device = self.tail_ids.device
        with evaluating(self), pooling_ready(self.model):
            single = self.tokenizer(PROBE, return_tensors="pt").to(device)
            ours = self(**{name: value for name, value in single.items() if name != "special_tokens_mask"}).nli_logits
            theirs = []
            for hypothesis in self.hypotheses:
                pair = self.tokenizer(PROBE, hypothesis, return_tensors="pt").to(device)
                theirs.append(self.model(**{name: pair[name] for name in self.tokenizer.model_input_names}).logits)
        theirs = at_least_float32(torch.cat(theirs))
        dtype = next(self.model.parameters()).dtype
        tolerance = torch.finfo(dtype).eps ** 0.5 * (1 + float(theirs.abs().max()))
        if not torch.allclose(ours[0], theirs, rtol=0, atol=tolerance):
            raise MethodError(
                f"The pairs made from {type(self.tokenizer).__name__}'s tokens of a text do not give "
                f"{type(self.model).__name__} the logits of its own pair encodings (largest difference "
                f"{float((ours[0] - theirs).abs().max()):.3g}): this tokenizer and model cannot be explained zero-shot."
            )


def explain_zero_shot(
    model: Any,
    tokenizer: PreTrainedTokenizerBase | None,
    texts: str | list[str],
    candidate_labels: str | Sequence[str] | None = None,
    hypothesis_template: str = DEFAULT_TEMPLATE,
    multi_label: bool = False,
    method: str = "integrated_gradients",
    target: Target | list[Target] = None,
    targets: str | None = None,
    top_k: int | None = None,
    **options,
) -> list[Explanation] | list[list[Explanation]]:
    """Word scores of `texts` for the candidate labels of a zero-shot pipeline (or an NLI model and its tokenizer):
    by default one `Explanation` per label (in label order) for a text, a list of those for a list of texts.

    The words are the text's only (the hypothesis is fixed); `probability` is the pipeline's score of the label;
    `extras["hypothesis"]` is the label's hypothesis. `target`, `targets`, `top_k` (by label name or index) and the
    other options are `explain`'s; see `ZeroShotClassifier` for the rest.
    """
    checked, _ = check_texts(texts)
    if any(isinstance(text, tuple) for text in checked):
        raise ExplainerInputError(
            "A zero-shot classifier reads single texts: the second segment of each pair is the hypothesis it makes "
            "from a candidate label. Pass a str or a list of str."
        )
    classifier = ZeroShotClassifier(
        model,
        tokenizer,
        candidate_labels=candidate_labels,
        hypothesis_template=hypothesis_template,
        multi_label=multi_label,
    )
    if target is None and targets is None and top_k is None:
        targets = "all"
    if method in METHODS and METHODS[method].unsupported(classifier) is not None:
        # The classifier has input embeddings: what it lacks is attention over the text.
        raise MethodError(
            f"{method} reads attention weights, and a zero-shot classifier attends once per (text, hypothesis) pair, "
            "not over the text: use integrated_gradients, saliency, input_x_gradient or shap."
        )
    explainer = get_explainer(classifier, classifier.tokenizer, method)
    result = explainer.explain(texts, target=target, targets=targets, top_k=top_k, **options)
    for explanation in _flat(result):
        explanation.extras["hypothesis"] = classifier.hypotheses[explanation.target]
    return result


def _flat(result: Explanation | list) -> list[Explanation]:
    if isinstance(result, Explanation):
        return [result]
    return [explanation for item in result for explanation in _flat(item)]
