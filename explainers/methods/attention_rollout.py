"""Attention rollout (Abnar & Zuidema 2020): the residual attention matrices multiplied across the layers."""

import torch

from ..base import Explainer, TokenScores
from ..registry import register
from ..words import TokenBatch
from .attention_graph import attention_graph


def rollout(layers: torch.Tensor) -> torch.Tensor:
    """`(batch, L, seq, seq)` residual attention -> `(batch, seq, seq)` rollout `Â_L ⋯ Â_2 Â_1`.

    Row i says how much of top-layer position i comes from each input token; every row sums to 1.
    """
    result = layers[:, 0]
    for layer in range(1, layers.shape[1]):
        result = layers[:, layer] @ result
    return result


@register
class AttentionRolloutExplainer(Explainer):
    """The classifier's read-out of the top layer (see `attention_graph.readout_weights`) times the rollout:
    how much of what the classifier reads comes from each input token. Non-negative; over all tokens, special
    ones included, the scores sum to 1."""

    name = "attention_rollout"
    title = "Attention rollout"
    order = 60
    needs_attentions = True

    def token_scores(self, batch: TokenBatch, target: torch.Tensor, contrast: torch.Tensor | None) -> TokenScores:
        layers, readout = attention_graph(self, batch, target)
        return TokenScores(scores=(readout[:, None, :] @ rollout(layers)).squeeze(1))
