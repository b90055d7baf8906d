"""Attention flow (Abnar & Zuidema 2020): the maximum flow from each input token to the classifier's read-out
through the layered graph of residual attention, solved by networkx."""

import networkx as nx
import torch

from ..base import Explainer, TokenScores
from ..registry import register
from ..words import TokenBatch
from .attention_graph import attention_graph


def flow_graph(layers: torch.Tensor, readout: torch.Tensor) -> nx.DiGraph:
    """The flow network of one text's real tokens.

    Args:
        layers: `(L, n, n)` residual attention; `layers[l, i, j]` is the capacity of the edge from position j
            of layer l to position i of layer l+1 (nodes `(l, i)`, layer 0 being the input tokens).
        readout: `(n,)` the classifier's weights on the top layer: capacities of the edges into the node "out".
    """
    num_layers, n, _ = layers.shape
    weights = layers.tolist()
    graph = nx.DiGraph()
    for layer in range(num_layers):
        graph.add_edges_from(
            ((layer, j), (layer + 1, i), {"capacity": weights[layer][i][j]}) for i in range(n) for j in range(n)
        )
    graph.add_edges_from(((num_layers, i), "out", {"capacity": value}) for i, value in enumerate(readout.tolist()))
    return graph


@register
class AttentionFlowExplainer(Explainer):
    """Score of token j = the maximum flow from input node `(0, j)` to the read-out node. Non-negative.
    One max-flow problem per token: slower than rollout (seconds for a long text on a 6-layer encoder)."""

    name = "attention_flow"
    title = "Attention flow"
    order = 70
    needs_attentions = True

    def token_scores(self, batch: TokenBatch, target: torch.Tensor, contrast: torch.Tensor | None) -> TokenScores:
        layers, readout = attention_graph(self, batch, target)
        scores = torch.zeros(batch.input_ids.shape, dtype=torch.float64)
        for row, mask in enumerate(batch.attention_mask.bool()):
            # Only the real tokens: they never attend to padding, so padding carries no flow to them.
            real = mask.nonzero().squeeze(1)
            own = layers[row][:, real][:, :, real]
            graph = flow_graph(own.double().cpu(), readout[row, real].double().cpu())
            for j, position in enumerate(real.tolist()):
                scores[row, position] = nx.maximum_flow_value(graph, (0, j), "out")
        return TokenScores(scores=scores.to(self.device))
