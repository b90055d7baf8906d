"""Label attention: the weights each class gave the tokens in the forward pass (intrinsic, no extra pass)."""

import torch

from .base import Explainer, TokenScores, at_least_float32, register
from .words import TokenBatch


@register
class LabelAttentionExplainer(Explainer):
    """The target class's label-attention row, averaged over heads: how much each token was used to build that
    class's sentence vector. Non-negative, sums to 1 over the tokens; the classes × words matrix is in
    `extras["class_scores"]`."""

    name = "label_attention"
    title = "Label attention"
    order = 10
    needs_label_attention = True

    @torch.no_grad()
    def token_scores(self, batch: TokenBatch, target: torch.Tensor, contrast: torch.Tensor | None) -> TokenScores:
        weights = self.model(**batch.model_inputs(), output_attentions=True).label_attentions
        per_class = at_least_float32(weights).mean(dim=1)  # (batch, labels, seq)
        scores = per_class.gather(1, target[:, None, None].expand(-1, 1, per_class.shape[-1])).squeeze(1)
        return TokenScores(scores=scores, class_scores=per_class)
