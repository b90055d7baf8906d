"""Saliency: how sensitive F is to each token's embedding, `s_t = ‖∂F/∂e_t‖₂` (unsigned)."""

import torch

from ..registry import register
from .gradients import EmbeddingGradientExplainer


@register
class SaliencyExplainer(EmbeddingGradientExplainer):
    """The ℓ2 norm of the gradient of F with respect to each token embedding; a word's score is the sum of
    its sub-tokens' norms. Non-negative: it says how much, not in which direction."""

    name = "saliency"
    title = "Saliency (gradient)"
    order = 30
    score_meaning = "the size of the gradient, unsigned, with respect to each word, of"

    @staticmethod
    def reduce(attributions: torch.Tensor) -> torch.Tensor:
        return attributions.norm(dim=-1)
