"""Integrated Gradients on the token embeddings, batched across texts.

`IG_t = Σ_j (e_tj − e′_tj) ∫₀¹ ∂F(e′ + α(e − e′))/∂e_tj dα`, so that `Σ_t IG_t = F(x) − F(x′)` (completeness)
up to the quadrature error `delta`. The baseline x′ is the text with each word token replaced by the baseline
token (`explainers.models.baseline_token_id`: the padding token, else the unknown or end-of-text token of
models without one) or by a zero embedding, special tokens and padding kept: only word tokens differ between
x and x′, so every unit of `F(x) − F(x′)` lands on a word.

Two ways to integrate (`integration`):
- "adaptive" (default): `explainers.methods.quadrature.AdaptiveSimpson`, one rule per text, whose nodes go where the
  rule's error is. Its nodes are evaluated here, by hand: Captum's `LayerIntegratedGradients` integrates one list
  of α shared by every input of a call and returns only the weighted sum, while this rule needs for each text its
  own α, each node's token scores (weighted anew when a panel is bisected) and F at each node (the exact error
  of each panel). One forward and one backward pass of a row give all three; the rows of all texts of a batch
  go through the model together. F(x) and F(x′) are the rule's nodes α = 1 and α = 0: no pass of their own.
- Captum's fixed rules ("gausslegendre", "riemann_*"), by `LayerIntegratedGradients`: `n_steps` nodes, and a
  text whose delta misses the tolerance is integrated again from scratch with twice the steps.
"""

import math
from contextlib import nullcontext
from typing import Any

import torch
from captum.attr import LayerIntegratedGradients
from torch import nn

from ..base import Explainer, TokenScores, at_least_float32
from ..errors import ExplainerError
from ..options import Option
from ..outputs import OUTPUTS
from ..registry import register
from ..words import TokenBatch
from .forward import ExplainedOutput, embedding_output
from .quadrature import AdaptiveSimpson

# Captum's quadrature rules (the `method` of `LayerIntegratedGradients.attribute`).
QUADRATURES = ("gausslegendre", "riemann_left", "riemann_right", "riemann_middle", "riemann_trapezoid")


class EndpointRecorder(ExplainedOutput):
    """`ExplainedOutput` that keeps its outputs of the passes run without gradient, by input ids.

    `LayerIntegratedGradients` runs the model once on the inputs and once on the baselines (to read the layer's
    endpoints) before integrating: those outputs are F(x) and F(x′), reused here rather than recomputed.
    """

    def __init__(self, model: nn.Module, output: str):
        super().__init__(model, output)
        self.outputs: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, input_ids: torch.Tensor, *args) -> torch.Tensor:
        output = super().__call__(input_ids, *args)
        if not torch.is_grad_enabled():
            self.outputs.append((input_ids, output.detach()))
        return output

    def output_of(self, input_ids: torch.Tensor) -> torch.Tensor:
        """`(rows,)` output of the recorded pass over exactly these ids."""
        return next(out for ids, out in self.outputs if ids.shape == input_ids.shape and torch.equal(ids, input_ids))


@register
class IntegratedGradientsExplainer(Explainer):
    """Integrated Gradients from a baseline of baseline-token (or zero) embeddings at the word positions: each
    word's share of F(x) − F(x′), within the convergence delta. The options are declared in `options`.

    Diagnostics (`extras`): `n_steps`, the nodes of the rule that gave the scores; `passes`, the model
    evaluations spent on the text: its gradient passes (one forward and one backward pass at one node),
    thrown-away attempts included, and for a fixed rule the two forward passes over x and x′ of each attempt
    (the adaptive rule's x and x′ are two of its nodes).
    """

    name = "integrated_gradients"
    title = "Integrated Gradients"
    order = 20
    score_meaning = "each word's share (integrated gradient) of"
    outputs = OUTPUTS
    baseline_name = "the baseline text, every word token replaced by the baseline token"
    allows_contrast = True
    needs_embeddings = True
    # Each text costs n_steps rows: a batch of texts of one length is already a large batch, and padding would
    # cost as much as real tokens.
    max_padding = 0.0
    options = (
        Option(
            "n_steps",
            9,
            int,
            "nodes of the first pass, computed in one batch with the other texts of the group: the adaptive rule "
            "starts from a uniform grid of the odd number at or below it (3 at the least), a fixed rule uses "
            "exactly n_steps",
            minimum=1,
            cost=True,
            cap=64,
        ),
        Option(
            "integration",
            "adaptive",
            str,
            "the quadrature: adaptive (composite Simpson, bisected where its exact error is largest: the fewest "
            "passes for a tolerance) or one of Captum's fixed rules (its `method`)",
            choices=("adaptive", *QUADRATURES),
        ),
        Option(
            "baseline",
            "pad",
            str,
            "x′: pad replaces each word token by the baseline token (the padding token, else the unknown or "
            "end-of-text token), zero gives the word positions a zero embedding",
            choices=("pad", "zero"),
        ),
        Option(
            "tolerance",
            0.01,
            float,
            "each text is integrated until |delta| ≤ tolerance · |F(x) − F(x′)|, up to max_steps: the adaptive "
            "rule bisects its worst panels, a fixed rule integrates a text that misses again with twice the steps "
            "(None: keep the first pass); extras['n_steps'] and extras['passes'] say what each text used",
            nullable=True,
        ),
        Option("max_steps", 256, int, "the most nodes per text that tolerance may ask for", minimum=1, cap=64),
    )

    def check_option_values(self, options: dict[str, Any]) -> None:
        n_steps, max_steps, tolerance = options["n_steps"], options["max_steps"], options["tolerance"]
        integration = options["integration"]
        if n_steps > max_steps:
            raise ExplainerError(f"n_steps={n_steps} must be at least 1 and at most max_steps={max_steps}.")
        if integration == "adaptive" and max_steps < 3:
            raise ExplainerError(
                f"max_steps={max_steps} is too few for integration='adaptive', whose first pass has 3 nodes at the "
                "least (one Simpson panel): raise it to 3 or more, or choose a fixed integration."
            )
        if integration.startswith("riemann") and n_steps < 2:
            raise ExplainerError(
                f"n_steps={n_steps} is too few for integration={integration!r}: Captum's Riemann sums take 2 steps "
                "at the least."
            )
        if tolerance is not None and not (math.isfinite(tolerance) and tolerance > 0):
            raise ExplainerError(f"tolerance={tolerance} must be a positive finite number, or None to keep n_steps.")

    def token_scores(
        self,
        batch: TokenBatch,
        target: torch.Tensor,
        contrast: torch.Tensor | None,
        integration: str,
        **options: Any,
    ) -> TokenScores:
        """IG of the batch by the adaptive rule or a fixed one; `options` are the other options."""
        if integration == "adaptive":
            return self.adaptive(batch, target, contrast, **options)
        return self.fixed_rule(batch, target, contrast, integration, **options)

    # --- the adaptive rule ----------------------------------------------------------------------------------

    def adaptive(
        self,
        batch: TokenBatch,
        target: torch.Tensor,
        contrast: torch.Tensor | None,
        n_steps: int,
        baseline: str,
        tolerance: float | None,
        max_steps: int,
        output: str,
    ) -> TokenScores:
        """Each text's own `AdaptiveSimpson` rule; every round evaluates the nodes the rules ask for, of all
        texts together, until none asks for more."""
        forward = ExplainedOutput(self.model, output)
        args = forward.args(batch, target, contrast)
        start, end = self.path_ends(batch, baseline)
        rules = [AdaptiveSimpson(n_steps) for _ in range(len(target))]
        # Per text, in the order its rule asked for the nodes: F at each node, and each node's token scores.
        values, node_scores = self.node_pass(forward, args, batch.input_ids, start, end, [r.alphas for r in rules])
        while tolerance is not None:
            asked = [
                rule.refine(s.sum(-1), v, tolerance * abs(float(v[rule.end] - v[rule.start])), max_steps)
                for rule, s, v in zip(rules, node_scores, values, strict=True)
            ]
            if not any(asked):
                break
            new_values, new_scores = self.node_pass(forward, args, batch.input_ids, start, end, asked)
            values = [torch.cat(pair) for pair in zip(values, new_values, strict=True)]
            node_scores = [torch.cat(pair) for pair in zip(node_scores, new_scores, strict=True)]
        scores = torch.stack([rule.weights().to(s) @ s for rule, s in zip(rules, node_scores, strict=True)])
        score = torch.stack([v[rule.end] for rule, v in zip(rules, values, strict=True)])
        baseline_score = torch.stack([v[rule.start] for rule, v in zip(rules, values, strict=True)])
        steps = torch.tensor([len(rule.alphas) for rule in rules])
        return self.result(scores, score, baseline_score, scores.sum(-1) - (score - baseline_score), steps, steps)

    def path_ends(self, batch: TokenBatch, baseline: str) -> tuple[torch.Tensor, torch.Tensor]:
        """The embeddings `(batch, seq_len, hidden)` where the path starts (x′) and where it ends (x)."""
        embed = self.model.get_input_embeddings()
        with torch.no_grad():
            end = embed(batch.input_ids)
            if baseline == "zero":
                return end.masked_fill(batch.is_word[..., None], 0.0), end
            return embed(batch.input_ids.masked_fill(batch.is_word, self.baseline_id)), end

    def node_pass(
        self,
        forward: ExplainedOutput,
        args: tuple,
        input_ids: torch.Tensor,
        start: torch.Tensor,
        end: torch.Tensor,
        asked: list[list[float]],
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """F and the token scores at the nodes `asked[i]` of each text i of the batch: per text, `(nodes,)` and
        `(nodes, seq_len)`, the score of token t at node α being `(e_t − e′_t) · ∂F/∂e_t` at e′ + α(e − e′).
        One forward and one backward pass for the nodes of all texts; only the path's gradient is taken, none
        of the weights'."""
        counts = [len(new) for new in asked]
        rows = torch.repeat_interleave(torch.arange(len(asked)), torch.tensor(counts)).to(self.device)
        dtype = start.dtype
        start, end = at_least_float32(start[rows]), at_least_float32(end[rows])
        alphas = torch.tensor([a for new in asked for a in new], dtype=start.dtype, device=self.device)
        # lerp is exact at both ends: α = 1 is the text's own embedding, so F there is F(x).
        path = torch.lerp(start, end, alphas[:, None, None]).to(dtype).requires_grad_()
        row_args = (a[rows] if isinstance(a, torch.Tensor) else a for a in args)
        with torch.enable_grad(), embedding_output(self.model, lambda ids, out: path):
            values = forward(input_ids[rows], *row_args)
            (gradient,) = torch.autograd.grad(values.sum(), path)
        scores = (at_least_float32(gradient) * (end - start)).sum(-1)
        return list(values.detach().split(counts)), list(scores.split(counts))

    # --- Captum's fixed rules -------------------------------------------------------------------------------

    def integrate(
        self,
        batch: TokenBatch,
        target: torch.Tensor,
        contrast: torch.Tensor | None,
        n_steps: int,
        integration: str,
        baseline: str,
        output: str,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One `LayerIntegratedGradients` call over the whole batch, all steps in one pass.

        Returns token attributions `(batch, seq_len)`, F(x), F(x′) and the convergence delta
        `Σ_t IG_t − (F(x) − F(x′))`, `(batch,)` each.
        """
        pad_id = self.baseline_id
        layer = self.model.get_input_embeddings()
        baseline_ids = batch.input_ids.masked_fill(batch.is_word, pad_id)
        forward = EndpointRecorder(self.model, output)
        # The "zero" baseline: the baseline positions of x′ embed to zero. x runs unchanged: its padding (the same
        # id) is masked out of every attention, so zeroing it would change no output, but a word token of that id
        # (GPT-2 pads with <|endoftext|>) would be wrongly zeroed.
        is_baseline = batch.is_word

        def zero_baseline(ids: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
            if ids.shape == baseline_ids.shape and torch.equal(ids, baseline_ids):
                return out.masked_fill(is_baseline[..., None], 0.0)
            return out

        zeroing = embedding_output(self.model, zero_baseline)
        with zeroing if baseline == "zero" else nullcontext():
            attributions = LayerIntegratedGradients(forward, layer).attribute(
                batch.input_ids,
                baselines=baseline_ids,
                additional_forward_args=forward.args(batch, target, contrast),
                n_steps=n_steps,
                method=integration,
            )
        scores = at_least_float32(attributions).sum(-1)
        score, baseline_score = forward.output_of(batch.input_ids), forward.output_of(baseline_ids)
        # Captum's convergence delta (`return_convergence_delta=True` computes the same), from the F(x) and F(x′)
        # of Captum's own passes rather than two more forward passes. Special tokens and padding, equal in x and
        # x′, get exactly 0, so the sum over all tokens is the sum over the words.
        delta = scores.sum(-1) - (score - baseline_score)
        return scores, score, baseline_score, delta

    def fixed_rule(
        self,
        batch: TokenBatch,
        target: torch.Tensor,
        contrast: torch.Tensor | None,
        integration: str,
        n_steps: int,
        tolerance: float | None,
        max_steps: int,
        **path: str,
    ) -> TokenScores:
        """IG of the batch with `n_steps`, then again with more steps for the texts `tolerance` finds too coarse;
        `path` is `integrate`'s `baseline` and `output`."""
        scores, score, baseline_score, delta = self.integrate(batch, target, contrast, n_steps, integration, **path)
        steps = torch.full_like(delta, n_steps, dtype=torch.long)
        passes = steps + 2
        while tolerance is not None:
            # The texts still too coarse all use the same step count: integrate them again together.
            again = (delta.abs() > tolerance * (score - baseline_score).abs()) & (steps < max_steps)
            if not again.any():
                break
            rows = again.nonzero().squeeze(1)
            more = min(2 * int(steps[rows[0]]), max_steps)
            sub = self.integrate(
                batch.select(rows),
                target[rows],
                contrast[rows] if contrast is not None else None,
                more,
                integration,
                **path,
            )
            kept = batch.columns(sub[0].shape[1])
            scores[rows] = 0.0
            scores[rows, kept] = sub[0]
            delta[rows], steps[rows] = sub[3], more
            passes[rows] += more + 2
        return self.result(scores, score, baseline_score, delta, steps, passes)

    @staticmethod
    def result(
        scores: torch.Tensor,
        score: torch.Tensor,
        baseline_score: torch.Tensor,
        delta: torch.Tensor,
        steps: torch.Tensor,
        passes: torch.Tensor,
    ) -> TokenScores:
        """The token scores `(batch, seq_len)` with each text's diagnostics, from `(batch,)` F(x), F(x′), delta,
        nodes of the rule and passes spent."""
        diagnostics = [
            {"score": float(o), "baseline_score": float(b), "delta": float(d), "n_steps": int(s), "passes": int(p)}
            for o, b, d, s, p in zip(score, baseline_score, delta, steps, passes, strict=True)
        ]
        return TokenScores(scores=scores, diagnostics=diagnostics)
