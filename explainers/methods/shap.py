"""SHAP on words: Shapley values of the words by antithetic permutation sampling, with each word's standard error
and a stopping rule on it.

Captum's `ShapleyValueSampling` computes the same estimator, but it returns only the average over its orderings:
no per-ordering contribution, hence no standard error and no way to stop once the error is small, and it draws
every ordering independently (no antithetic pairs). So the orderings are run here, directly over the words, with
the perturbed texts of a text batched into few forward passes.
"""

import math
from dataclasses import dataclass
from typing import Any

import torch

from ..base import Explainer, TokenScores, text_seed
from ..errors import ExplainerError
from ..options import Option
from ..outputs import OUTPUTS
from ..registry import register
from ..words import TokenBatch, word_to_token_scores
from .forward import ExplainedOutput


@dataclass
class ShapleyEstimate:
    """One text's Shapley values `(num_words,)` (float64), their standard errors (None when they cannot be told
    from the samples drawn), the orderings used, F(x) and F(no word)."""

    values: torch.Tensor
    standard_errors: torch.Tensor | None
    n_samples: int
    score: float
    baseline_score: float


@register
class ShapExplainer(Explainer):
    """`φ_w`: the mean over random orderings of the words of F(words before w and w) − F(words before w), where
    an absent word has all its sub-tokens replaced by the baseline token (special tokens always stay).

    Each ordering adds up exactly to F(x) − F(no word), so `Σ_w φ_w = score − baseline_score` for any number of
    samples; the samples only set how close each φ_w is to the exact Shapley value. Orderings come in antithetic
    pairs (an ordering and its reverse: a word early in one is late in the other, which cancels much of the
    sampling noise); the mean of a pair is one independent sample, and a word's standard error is the standard
    deviation of its pair means over √(pairs). With two words or fewer one pair is every ordering: the values are
    exact and their standard errors 0.

    The options are declared in `options`.
    """

    name = "shap"
    title = "SHAP (Shapley value sampling)"
    order = 80
    score_meaning = "each word's Shapley value for"
    outputs = OUTPUTS
    baseline_name = "every word removed"
    allows_contrast = True
    options = (
        Option(
            "target_error",
            0.1,
            float,
            "stop once the words' standard errors average at most target_error × the mean |φ| of the text's words "
            "(None: always draw max_samples)",
            nullable=True,
        ),
        Option("min_samples", 8, int, "the fewest orderings per text under the stopping rule", minimum=1),
        Option(
            "max_samples",
            32,
            int,
            "the most orderings per text (each costs one forward pass per word, less one); the stopping rule often "
            "ends sooner",
            minimum=1,
            cost=True,
            cap=64,
        ),
        Option(
            "n_samples",
            None,
            int,
            "a fixed number of orderings instead of the rule (None: the rule); odd numbers are rounded up to whole "
            "pairs",
            nullable=True,
            minimum=1,
        ),
        Option(
            "baseline",
            "pad",
            str,
            "the token standing for an absent word: pad (the model's padding or baseline token) or mask "
            "(the tokenizer's [MASK])",
            choices=("pad", "mask"),
        ),
        Option("perturbations_per_eval", 128, int, "perturbed texts evaluated in one forward pass", minimum=1),
        Option(
            "seed", 0, int, "the orderings depend only on it and the text, so a text gets the same values in any batch"
        ),
    )

    def check_option_values(self, options: dict[str, Any]) -> None:
        if options["baseline"] == "mask" and self.tokenizer.mask_token_id is None:
            raise ExplainerError(f"{type(self.tokenizer).__name__} has no mask token: use baseline='pad'.")
        if options["min_samples"] > options["max_samples"]:
            raise ExplainerError(
                f"min_samples={options['min_samples']} is above max_samples={options['max_samples']}: "
                "give min_samples <= max_samples."
            )
        error = options["target_error"]
        if error is not None and not (math.isfinite(error) and error >= 0):
            raise ExplainerError(
                f"target_error={error!r}: give a fraction of the mean |value| (e.g. 0.1), 0 or more, or None to "
                "always draw max_samples."
            )

    def token_scores(
        self,
        batch: TokenBatch,
        target: torch.Tensor,
        contrast: torch.Tensor | None,
        baseline: str,
        seed: int,
        output: str,
        **sampling,
    ) -> TokenScores:
        baseline_id = self.tokenizer.mask_token_id if baseline == "mask" else self.baseline_id
        words = torch.zeros(batch.input_ids.shape[0], int(batch.num_words.max()), device=self.device)
        diagnostics = []
        # One text at a time, cut to its own tokens: its orderings and forward passes are then the same whatever
        # batch it came in.
        for row in range(batch.input_ids.shape[0]):
            text = batch.select(torch.tensor([row], device=self.device))
            text_contrast = contrast[row : row + 1] if contrast is not None else None
            forward = WordCoalitions(
                ExplainedOutput(self.model, output), text, target[row : row + 1], text_contrast, baseline_id
            )
            generator = torch.Generator().manual_seed(text_seed(text.input_ids[0].tolist(), seed))
            estimate = estimate_shapley(forward, generator, **sampling)
            words[row, : estimate.values.shape[0]] = estimate.values
            errors = estimate.standard_errors
            diagnostics.append(
                {
                    "score": estimate.score,
                    "baseline_score": estimate.baseline_score,
                    "standard_errors": errors.tolist() if errors is not None else None,
                    "n_samples": estimate.n_samples,
                }
            )
        return TokenScores(scores=word_to_token_scores(words, batch.word_index), diagnostics=diagnostics)


class WordCoalitions:
    """F of one text with only some of its words present: `(coalitions, num_words)` bool -> `(coalitions,)`.

    An absent word has every sub-token replaced by the baseline token; special tokens always stay. Rows are run
    `perturbations_per_eval` at a time.
    """

    def __init__(
        self,
        forward: ExplainedOutput,
        text: TokenBatch,
        target: torch.Tensor,
        contrast: torch.Tensor | None,
        baseline_id: int,
    ):
        self.forward = forward
        self.args = self.forward.args(text, target, contrast)
        self.input_ids = text.input_ids  # (1, seq_len)
        self.word_of_token = text.word_index[0]  # (seq_len,), -1 for special tokens
        self.baseline_id = baseline_id
        self.num_words = int(text.num_words[0])

    @torch.no_grad()
    def __call__(self, present: torch.Tensor, perturbations_per_eval: int) -> torch.Tensor:
        is_word = self.word_of_token >= 0
        # (coalitions, seq_len): a token is kept when it is special or its word is present.
        keep = ~is_word | present[:, self.word_of_token.clamp(min=0)]
        ids = torch.where(keep, self.input_ids, self.baseline_id)
        if ids.shape[0] == 0:  # a text of one word has no inner coalition
            return torch.empty(0, dtype=torch.float64, device=ids.device)
        values = [
            self.forward(chunk, *_repeat(self.args, chunk.shape[0])) for chunk in ids.split(perturbations_per_eval)
        ]
        # float64: the contributions are differences of these, and their sums must telescope exactly.
        return torch.cat(values).double()


def estimate_shapley(
    coalitions: WordCoalitions,
    generator: torch.Generator,
    target_error: float | None,
    min_samples: int,
    max_samples: int,
    n_samples: int | None,
    perturbations_per_eval: int,
) -> ShapleyEstimate:
    """Shapley values of a text's words from antithetic pairs of random orderings, drawn in rounds until the
    stopping rule (see `ShapExplainer`) holds or the budget is spent."""
    num_words = coalitions.num_words
    device = coalitions.input_ids.device
    everything, nothing = coalitions(torch.tensor([[True], [False]], device=device).expand(2, num_words), 2)
    if num_words <= 2:  # one pair is every ordering
        n_samples, target_error = 2, None
    min_pairs, max_pairs = (
        ((n_samples + 1) // 2,) * 2 if n_samples is not None else ((min_samples + 1) // 2, (max_samples + 1) // 2)
    )
    pair_means: list[torch.Tensor] = []
    pairs = 0
    draw = min_pairs
    while draw > 0:
        orders = torch.stack([torch.randperm(num_words, generator=generator) for _ in range(draw)]).to(device)
        orders = torch.cat([orders, orders.flip(-1)])  # (2 draw, num_words): each ordering, then its reverse
        contributions = ordering_contributions(coalitions, orders, everything, nothing, perturbations_per_eval)
        pair_means.append((contributions[:draw] + contributions[draw:]) / 2)
        pairs += draw
        draw = pairs_still_needed(torch.cat(pair_means), target_error, max_pairs)
    means = torch.cat(pair_means)
    errors = torch.zeros_like(means[0]) if num_words <= 2 else standard_errors(means)
    return ShapleyEstimate(means.mean(0), errors, 2 * pairs, float(everything), float(nothing))


def ordering_contributions(
    coalitions: WordCoalitions,
    orders: torch.Tensor,
    everything: torch.Tensor,
    nothing: torch.Tensor,
    perturbations_per_eval: int,
) -> torch.Tensor:
    """Each word's contribution in each ordering, `(orderings, num_words)`: F(the words up to it) − F(the words
    before it). A row sums to F(x) − F(no word) exactly, since the chain's two ends are shared by every ordering."""
    count, num_words = orders.shape
    rank = orders.argsort(-1)  # rank[o, w]: the step at which word w arrives in ordering o
    steps = torch.arange(1, num_words, device=orders.device)
    # (orderings, num_words - 1, num_words): the words present after each inner step of each ordering.
    present = rank[:, None, :] < steps[None, :, None]
    inner = coalitions(present.reshape(-1, num_words), perturbations_per_eval).reshape(count, num_words - 1)
    chain = torch.cat([nothing.expand(count, 1), inner, everything.expand(count, 1)], dim=1)
    return torch.zeros_like(chain[:, 1:]).scatter_(1, orders, chain.diff(dim=1))


def standard_errors(pair_means: torch.Tensor) -> torch.Tensor | None:
    """Standard error of each word's mean over `(pairs, num_words)` independent pair means; None from one pair."""
    if pair_means.shape[0] < 2:
        return None
    return pair_means.std(0) / math.sqrt(pair_means.shape[0])


def pairs_still_needed(pair_means: torch.Tensor, target_error: float | None, max_pairs: int) -> int:
    """How many more pairs to draw: 0 once the mean standard error is within `target_error` × mean |φ| or the
    budget is spent; else the number the errors so far project (an error falls as 1/√pairs), at most doubling."""
    pairs = pair_means.shape[0]
    left = max_pairs - pairs
    if left <= 0:
        return 0
    if target_error is None:
        return left
    errors = standard_errors(pair_means)
    if errors is None:
        return 1
    allowed = target_error * float(pair_means.mean(0).abs().mean())
    typical = float(errors.mean())
    if typical <= allowed:
        return 0
    projected = math.ceil(pairs * (typical / allowed) ** 2) - pairs if allowed > 0 else left
    return max(1, min(projected, pairs, left))


def _repeat(args: tuple, rows: int) -> tuple:
    """Forward arguments of a one-row batch for `rows` rows (views, no copies)."""
    return tuple(a.expand(rows, *a.shape[1:]) if isinstance(a, torch.Tensor) else a for a in args)
