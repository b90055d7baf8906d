"""Gradient × input: the first-order contribution of each token embedding, `s_t = Σ_j e_tj · ∂F/∂e_tj` (signed)."""

import torch

from ..registry import register
from .gradients import EmbeddingGradientExplainer


@register
class InputXGradientExplainer(EmbeddingGradientExplainer):
    """The gradient of F times the token embedding, summed over the hidden dimension: positive when moving the
    embedding from zero to its value raises F (to first order)."""

    name = "input_x_gradient"
    title = "Gradient × input"
    order = 40
    score_meaning = "each word's first-order share (gradient × embedding) of"
    multiply_by_inputs = True

    @staticmethod
    def reduce(attributions: torch.Tensor) -> torch.Tensor:
        return attributions.sum(dim=-1)
