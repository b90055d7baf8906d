"""The encoder's attention as a graph between layers, shared by attention rollout and attention flow.

Both follow Abnar & Zuidema (2020): each layer's attention is averaged over heads and mixed with the residual
connection, `Â = 0.5·A + 0.5·I` (rows renormalised), and the classifier's own read-out of the top layer closes
the graph: the target's label-attention row (heads averaged) for a label-attention model, the mean over the
real tokens for a mean-pooling one (these models read no [CLS] vector).
"""

import torch

from .base import Explainer, at_least_float32
from .words import TokenBatch


def residual_attention(attentions: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """`L × (batch, heads, seq, seq)` -> `(batch, L, seq, seq)`: heads averaged, `0.5·A + 0.5·I`, rows summing to 1.

    At least float32 whatever the model's dtype: the rollout multiplies L of these, and bf16 rounding would
    compound.
    """
    mixed = 0.5 * at_least_float32(torch.stack(attentions, dim=1)).mean(dim=2)
    mixed = mixed + 0.5 * torch.eye(mixed.shape[-1], dtype=mixed.dtype, device=mixed.device)
    return mixed / mixed.sum(dim=-1, keepdim=True)


@torch.no_grad()
def attention_graph(explainer: Explainer, batch: TokenBatch, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The layers' residual attention `(batch, L, seq, seq)` (row i: how position i of layer l+1 mixes the
    positions of layer l) and the classifier's read-out of the top layer `(batch, seq)` for each row's target."""
    outputs = explainer.model(**batch.model_inputs(), output_attentions=True)
    layers = residual_attention(outputs.attentions)
    if outputs.label_attentions is not None:
        rows = at_least_float32(outputs.label_attentions).mean(dim=1)  # (batch, labels, seq)
        readout = rows[torch.arange(rows.shape[0], device=rows.device), target]
    else:
        mask = batch.attention_mask.to(layers.dtype)
        readout = mask / mask.sum(dim=-1, keepdim=True)
    return layers, readout
