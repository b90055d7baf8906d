"""Gradient-weighted attention: attention weights times the size of F's gradient with respect to them."""

from typing import Any

import torch
from transformers import PreTrainedModel

from ..base import Explainer, TokenScores, at_least_float32
from ..errors import MethodError
from ..models import has_label_attention, returned_attentions, returns_attentions
from ..options import Option
from ..outputs import OUTPUTS, explained_output, is_multi_label
from ..registry import method_names, register
from ..words import TokenBatch
from .forward import embedding_output


@register
class GradWeightedAttentionExplainer(Explainer):
    """`α̃ = α ⊙ |∂F/∂α|` for every attention weight α the forward pass used, averaged over heads and summed
    over what attends (classes of the label attention; query positions and layers of the encoder): the score of
    token j is the gradient-weighted attention it received. Non-negative.

    The weights are the tensors the model returns with `output_attentions=True`, which are the very tensors that
    weighted the values in that pass, so their gradients are exact.

    """

    name = "grad_weighted_attention"
    title = "Gradient-weighted attention"
    order = 50
    score_meaning = "the attention each word receives, weighted by the size of its gradient, for"
    outputs = OUTPUTS
    allows_contrast = True
    needs_embeddings = True
    options = (
        Option(
            "source",
            "all",
            str,
            "all (label attention and the model's attention layers, summed: both are in units of F), label, or "
            "encoder (the attention layers of the model, encoder or decoder)",
            choices=("all", "label", "encoder"),
        ),
    )

    @classmethod
    def unsupported(cls, model: PreTrainedModel) -> str | None:
        """Besides input embeddings, attention weights of either kind: the layers' or the label attention's."""
        reason = super().unsupported(model)
        if reason is None and not (returns_attentions(model) or has_label_attention(model)):
            usable = method_names(needs_label_attention=False, needs_attentions=False)
            return (
                "the method weighs attention, and this model returns none (no attention weights from its layers, "
                f"no label attention); use {usable}."
            )
        return reason

    def check_option_values(self, options: dict[str, Any]) -> None:
        present = {
            "all": True,
            "label": has_label_attention(self.model),
            "encoder": returns_attentions(self.model),
        }
        if not present[options["source"]]:
            raise MethodError(
                f"source={options['source']!r}: this {type(self.model).__name__} has no {options['source']} "
                "attention; use source='all'."
            )

    def token_scores(
        self, batch: TokenBatch, target: torch.Tensor, contrast: torch.Tensor | None, source: str, output: str
    ) -> TokenScores:
        # The embeddings require grad, so that every attention weight does even when the weights are frozen.
        hook = embedding_output(self.model, lambda ids, out: out.detach().requires_grad_())
        with torch.enable_grad(), hook, returned_attentions(self.model):
            outputs = self.model(**batch.model_inputs(), output_attentions=True)
            weights = []  # each (batch, heads, queries, seq): queries are classes or token positions
            label_attentions = getattr(outputs, "label_attentions", None)
            if source in ("all", "label") and label_attentions is not None:
                weights.append(label_attentions)
            if source in ("all", "encoder") and outputs.attentions:
                weights.extend(outputs.attentions)
            explained = explained_output(
                at_least_float32(outputs.logits), target, contrast, output, is_multi_label(self.model)
            )
            # Rows are independent, so the gradient of the sum holds each row's own gradient.
            grads = torch.autograd.grad(explained.sum(), weights)
        weighted = (at_least_float32(w) * at_least_float32(g).abs() for w, g in zip(weights, grads, strict=True))
        scores = sum(w.mean(dim=1).sum(dim=1) for w in weighted)  # heads averaged, what attends summed
        return TokenScores(scores=scores.detach())
