"""An adaptive composite Simpson rule on [0, 1] that knows the exact error of each of its panels.

Integrated Gradients integrates the derivative of F along its path, `h(α) = dF(x′ + α(x − x′))/dα`. Each node of
the rule costs one forward and backward pass of the model, and the forward pass gives F(α) as well as h(α); so
for a panel [a, b] whose ends are nodes the integral is known exactly, F(b) − F(a), and so is the rule's error
on that panel. This rule spends its nodes where those errors are: it starts from a uniform grid and bisects the
panels whose error is largest until the errors add up to no more than the budget. A bisected panel keeps its three
nodes (the ends and the middle of its halves): no evaluation is thrown away, and each round adds two nodes per
bisected panel.

Why by hand: Captum's approximation methods are fixed grids (one list of α shared by all inputs of a call, the
weighted sum returned, no nesting), and scipy's adaptive integrators (`quad`, `quad_vec`) estimate errors from
Gauss–Kronrod differences and call the integrand one point at a time, where here the nodes of many texts are
evaluated together in one batched pass and every panel's error is known, not estimated.

On the TREC BERT classifier of bench/finetune_bert_trec.py, h(α) is a narrow bump where F turns from its baseline
value to its value at the text, at a place along the path that differs per text: a fixed rule that reaches 1%
on every text must place many nodes everywhere; this one places them around the bump (bench/ig_speed.py).
"""

import torch

# Panels bisected per round: the two worst. One at a time spends the fewest nodes but needs more rounds (passes
# through the model, each with its fixed cost); bisecting every panel over an equal share of the budget needs the
# fewest rounds but more nodes. On 30 TREC validation questions and the BERT classifier of the benchmark, for 1%:
# 18.2, 19.9 and 21.7 nodes per text in 4.6, 2.7 and 2.4 rounds after the first pass.
PANELS_PER_ROUND = 2


class AdaptiveSimpson:
    """The composite Simpson rule of one integrand on [0, 1], refined by bisecting its worst panels.

    A panel [a, b] holds three nodes a, m = (a + b)/2 and b, and estimates `∫ₐᵇ h ≈ (b − a)/6 · (h(a) + 4h(m) +
    h(b))`; neighbouring panels share their end node. The caller evaluates the nodes the rule asks for (`alphas`
    at first, then what `refine` returns) and passes back, for every node so far, in the order asked, the
    integrand `slopes` and the antiderivative `values` (F itself, for Integrated Gradients).

    Attributes:
        alphas: every node asked for, in the order asked.
        panels: `(start, middle, end)` indices into `alphas` of each panel, left to right.
    """

    def __init__(self, n_nodes: int):
        """A uniform grid of the odd number of nodes at or below `n_nodes` (8 gives 7), at least 3 (one panel)."""
        count = max(1, (n_nodes - 1) // 2)
        self.alphas = [k / (2 * count) for k in range(2 * count + 1)]
        self.panels = [(2 * k, 2 * k + 1, 2 * k + 2) for k in range(count)]

    @property
    def start(self) -> int:
        """Index of the node α = 0."""
        return self.panels[0][0]

    @property
    def end(self) -> int:
        """Index of the node α = 1."""
        return self.panels[-1][2]

    def weights(self) -> torch.Tensor:
        """`(nodes,)` float64 weight of each node in the rule over the current panels (they sum to 1)."""
        a, m, b, width = self.panel_nodes()
        weights = torch.zeros(len(self.alphas), dtype=torch.float64)
        return weights.index_add(0, a, width / 6).index_add(0, m, 4 * width / 6).index_add(0, b, width / 6)

    def errors(self, slopes: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """`(panels,)` each panel's Simpson estimate of `∫ slopes` minus the exact `values[end] − values[start]`;
        their sum is the rule's error over [0, 1]."""
        slopes, values = slopes.double().cpu(), values.double().cpu()
        a, m, b, width = self.panel_nodes()
        return width / 6 * (slopes[a] + 4 * slopes[m] + slopes[b]) - (values[b] - values[a])

    def panel_nodes(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`(panels,)` each panel's start, middle and end node (indices into `alphas`) and its width."""
        a, m, b = torch.tensor(self.panels).unbind(-1)
        alphas = torch.tensor(self.alphas, dtype=torch.float64)
        return a, m, b, alphas[b] - alphas[a]

    def refine(self, slopes: torch.Tensor, values: torch.Tensor, budget: float, max_nodes: int) -> list[float]:
        """The nodes to evaluate next: none when the panels' errors add up to at most `budget` in absolute value
        (so that the rule's error is within it too) or when no bisection fits in `max_nodes`; else the quarter
        points of the worst panels (`PANELS_PER_ROUND`), which are bisected."""
        errors = self.errors(slopes, values).abs()
        room = (max_nodes - len(self.alphas)) // 2
        if errors.sum() <= budget or room < 1:
            return []
        worst = set(errors.argsort(descending=True, stable=True)[: min(PANELS_PER_ROUND, room)].tolist())
        panels, new = [], []
        for k, (a, m, b) in enumerate(self.panels):
            if k not in worst:
                panels.append((a, m, b))
                continue
            left, right = len(self.alphas), len(self.alphas) + 1
            self.alphas += [(self.alphas[a] + self.alphas[m]) / 2, (self.alphas[m] + self.alphas[b]) / 2]
            new += self.alphas[-2:]
            panels += [(a, left, m), (m, right, b)]
        self.panels = panels
        return new
