"""The model's attention as a graph between layers, shared by attention rollout and attention flow.

Both follow Abnar & Zuidema (2020): each layer's attention is averaged over heads and mixed with the residual
connection, `Â = 0.5·A + 0.5·I` (rows renormalised), and the classifier's own read-out of the top layer closes
the graph (`readout_weights`, by the family of the model's head, see `explainers.models`): the first token for
BERT-like heads, the last real token for decoder classifiers, the mean of the real tokens for mean-pooling heads,
the target's label-attention row (heads averaged) for a labelattn model with label attention.
"""

import torch

from ..base import Explainer, at_least_float32
from ..models import readout, returned_attentions
from ..words import TokenBatch


def residual_attention(attentions: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """`L × (batch, heads, seq, seq)` -> `(batch, L, seq, seq)`: heads averaged, `0.5·A + 0.5·I`, rows summing to 1.

    At least float32 whatever the model's dtype: the rollout multiplies L of these, and bf16 rounding would
    compound.
    """
    mixed = 0.5 * at_least_float32(torch.stack(attentions, dim=1)).mean(dim=2)
    mixed = mixed + 0.5 * torch.eye(mixed.shape[-1], dtype=mixed.dtype, device=mixed.device)
    return mixed / mixed.sum(dim=-1, keepdim=True)


def readout_weights(
    family: str, batch: TokenBatch, label_attentions: torch.Tensor | None, target: torch.Tensor
) -> torch.Tensor:
    """`(batch, seq)`: how much the classifier head reads each position of the top layer for each row's target.

    Args:
        family: `explainers.models.readout(model)`.
        label_attentions: `(batch, heads, labels, seq)` for the `"label_attention"` family.
    """
    mask = batch.attention_mask.to(torch.float32)
    if family == "label_attention":
        rows = at_least_float32(label_attentions).mean(dim=1)  # (batch, labels, seq)
        return rows[torch.arange(rows.shape[0], device=rows.device), target]
    if family == "mean":
        return mask / mask.sum(dim=-1, keepdim=True)
    weights = torch.zeros_like(mask)
    # Decoder classifiers are padded on the left: their last real token is the last column.
    weights[:, -1 if family == "last" else 0] = 1.0
    return weights


@torch.no_grad()
def attention_graph(explainer: Explainer, batch: TokenBatch, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The layers' residual attention `(batch, L, seq, seq)` (row i: how position i of layer l+1 mixes the
    positions of layer l) and the classifier's read-out of the top layer `(batch, seq)` for each row's target."""
    with returned_attentions(explainer.model):
        outputs = explainer.model(**batch.model_inputs(), output_attentions=True)
    layers = residual_attention(outputs.attentions)
    family = readout(explainer.model)
    label_attentions = getattr(outputs, "label_attentions", None)
    return layers, readout_weights(family, batch, label_attentions, target).to(layers.dtype)
