"""Gradients of F with respect to the token embeddings, the shared core of saliency and gradient × input."""

from typing import ClassVar

import torch
from captum.attr import LayerGradientXActivation

from ..base import Explainer, TokenScores, at_least_float32
from ..outputs import OUTPUTS
from ..words import TokenBatch
from .forward import ExplainedOutput


class EmbeddingGradientExplainer(Explainer):
    """One forward and one backward pass per batch: `g_t = ∂F/∂e_t` for every token embedding `e_t`
    `(batch, seq_len, hidden)`, by Captum's `LayerGradientXActivation` on `model.get_input_embeddings()`.

    Subclasses choose `multiply_by_inputs` (`g_t ⊙ e_t` rather than `g_t`) and how `reduce` turns the
    `(batch, seq_len, hidden)` attributions into one score per token.
    """

    outputs = OUTPUTS
    allows_contrast = True
    needs_embeddings = True
    multiply_by_inputs: ClassVar[bool] = False

    @staticmethod
    def reduce(attributions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def token_scores(
        self, batch: TokenBatch, target: torch.Tensor, contrast: torch.Tensor | None, output: str
    ) -> TokenScores:
        forward = ExplainedOutput(self.model, output)
        method = LayerGradientXActivation(
            forward, self.model.get_input_embeddings(), multiply_by_inputs=self.multiply_by_inputs
        )
        attributions = method.attribute(batch.input_ids, additional_forward_args=forward.args(batch, target, contrast))
        return TokenScores(scores=self.reduce(at_least_float32(attributions)))
