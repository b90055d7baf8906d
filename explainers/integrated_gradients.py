"""Integrated Gradients on the token embeddings (Captum's `LayerIntegratedGradients`), batched across texts.

`IG_t = Σ_j (e_tj − e′_tj) ∫₀¹ ∂F(e′ + α(e − e′))/∂e_tj dα`, so that `Σ_t IG_t = F(x) − F(x′)` (completeness)
up to the quadrature error `delta`. The baseline x′ is the text with each word token replaced by the baseline
token (`explainers.models.baseline_token_id`: the padding token, else the unknown or end-of-text token of
models without one) or by a zero embedding, special tokens and padding kept: only word tokens differ between
x and x′, so every unit of `F(x) − F(x′)` lands on a word.
"""

import math
from contextlib import nullcontext
from typing import Any

import torch
from captum.attr import LayerIntegratedGradients
from torch import nn

from .base import Explainer, TokenScores, at_least_float32, register
from .errors import ExplainerError
from .forward import ExplainedOutput, embedding_output
from .options import Option
from .outputs import OUTPUTS
from .words import TokenBatch

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
            32,
            int,
            "quadrature points along the path, all computed in one batch with the other texts of the group",
            minimum=1,
            cost=True,
            cap=64,
        ),
        Option(
            "integration",
            "gausslegendre",
            str,
            "the quadrature rule (Captum's `method`): gausslegendre reaches a given delta with the fewest steps",
            choices=QUADRATURES,
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
            "a text whose |delta| > tolerance · |F(x) − F(x′)| is integrated again with twice the steps, up to "
            "max_steps (None: keep n_steps); extras['n_steps'] says how many it took",
            nullable=True,
        ),
        Option("max_steps", 256, int, "the most steps tolerance may ask for", minimum=1, cap=64),
    )

    def check_option_values(self, options: dict[str, Any]) -> None:
        n_steps, max_steps, tolerance = options["n_steps"], options["max_steps"], options["tolerance"]
        if n_steps > max_steps:
            raise ExplainerError(f"n_steps={n_steps} must be at least 1 and at most max_steps={max_steps}.")
        if tolerance is not None and not (math.isfinite(tolerance) and tolerance > 0):
            raise ExplainerError(f"tolerance={tolerance} must be a positive finite number, or None to keep n_steps.")

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
        output, baseline_output = forward.output_of(batch.input_ids), forward.output_of(baseline_ids)
        # Captum's convergence delta (`return_convergence_delta=True` computes the same), from the F(x) and F(x′)
        # of Captum's own passes rather than two more forward passes. Special tokens and padding, equal in x and
        # x′, get exactly 0, so the sum over all tokens is the sum over the words.
        delta = scores.sum(-1) - (output - baseline_output)
        return scores, output, baseline_output, delta

    def token_scores(
        self,
        batch: TokenBatch,
        target: torch.Tensor,
        contrast: torch.Tensor | None,
        n_steps: int,
        tolerance: float | None,
        max_steps: int,
        **path: str,
    ) -> TokenScores:
        """IG of the batch with `n_steps`, then again with more steps for the texts `tolerance` finds too coarse;
        `path` is `integrate`'s `integration`, `baseline` and `output`."""
        scores, output, baseline_output, delta = self.integrate(batch, target, contrast, n_steps, **path)
        steps = torch.full_like(delta, n_steps, dtype=torch.long)
        while tolerance is not None:
            # The texts still too coarse all use the same step count: integrate them again together.
            again = (delta.abs() > tolerance * (output - baseline_output).abs()) & (steps < max_steps)
            if not again.any():
                break
            rows = again.nonzero().squeeze(1)
            more = min(2 * int(steps[rows[0]]), max_steps)
            sub = self.integrate(
                batch.select(rows),
                target[rows],
                contrast[rows] if contrast is not None else None,
                more,
                **path,
            )
            kept = batch.columns(sub[0].shape[1])
            scores[rows] = 0.0
            scores[rows, kept] = sub[0]
            delta[rows], steps[rows] = sub[3], more
        diagnostics = [
            {"score": float(o), "baseline_score": float(b), "delta": float(d), "n_steps": int(s)}
            for o, b, d, s in zip(output, baseline_output, delta, steps, strict=True)
        ]
        return TokenScores(scores=scores, diagnostics=diagnostics)
