"""SHAP on words: Shapley values of the words, estimated by Captum's `ShapleyValueSampling`."""

from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from captum.attr import ShapleyValueSampling

from .base import Explainer, TokenScores, register, text_seed
from .errors import ExplainerError
from .forward import TargetLogit
from .words import TokenBatch, word_to_token_scores


@register
class ShapExplainer(Explainer):
    """`φ_w`: the mean over random orderings of the words of F(words before w and w) − F(words before w), where
    an absent word has all its sub-tokens replaced by the baseline token (special tokens always stay).

    Each ordering adds up exactly to F(x) − F(no word), so `Σ_w φ_w = score − baseline_score` for any number of
    samples; the samples only set how close each φ_w is to the exact Shapley value.

    Options:
        n_samples: random orderings of the words per text (each costs one evaluation per word).
        baseline: the token standing for an absent word, "pad" or "mask" (the tokenizer's [MASK]).
        perturbations_per_eval: perturbed texts evaluated in one forward pass.
        seed: the orderings depend only on it and the text, so a text gets the same scores in any batch.
    """

    name = "shap"
    allows_contrast = True
    defaults: ClassVar[dict[str, Any]] = {"n_samples": 25, "baseline": "pad", "perturbations_per_eval": 64, "seed": 0}
    choices: ClassVar[dict[str, Sequence[str]]] = {"baseline": ("pad", "mask")}

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        options = super().check_options(options)
        if options["baseline"] == "mask" and self.tokenizer.mask_token_id is None:
            raise ExplainerError(f"{type(self.tokenizer).__name__} has no mask token: use baseline='pad'.")
        for name in ("n_samples", "perturbations_per_eval"):
            if options[name] < 1:
                raise ExplainerError(f"{name}={options[name]} must be at least 1.")
        return options

    def token_scores(
        self,
        batch: TokenBatch,
        target: torch.Tensor,
        contrast: torch.Tensor | None,
        n_samples: int,
        baseline: str,
        perturbations_per_eval: int,
        seed: int,
    ) -> TokenScores:
        baseline_id = self.tokenizer.mask_token_id if baseline == "mask" else (self.tokenizer.pad_token_id or 0)
        words = torch.zeros(batch.input_ids.shape[0], int(batch.num_words.max()), device=self.device)
        diagnostics = []
        # One text at a time, cut to its own tokens: its orderings and perturbation batches are then the same
        # whatever batch it came in (Captum would share one ordering of the word slots across a batch).
        for row in range(batch.input_ids.shape[0]):
            text = batch.select(torch.tensor([row], device=self.device))
            text_contrast = contrast[row : row + 1] if contrast is not None else None
            phi, output, empty = self.shapley(
                text, target[row : row + 1], text_contrast, baseline_id, n_samples, perturbations_per_eval, seed
            )
            words[row, : phi.shape[0]] = phi
            diagnostics.append({"score": output, "baseline_score": empty})
        return TokenScores(scores=word_to_token_scores(words, batch.word_index), diagnostics=diagnostics)

    def shapley(
        self,
        text: TokenBatch,
        target: torch.Tensor,
        contrast: torch.Tensor | None,
        baseline_id: int,
        n_samples: int,
        perturbations_per_eval: int,
        seed: int,
    ) -> tuple[torch.Tensor, float, float]:
        """Shapley values `(num_words,)` of one text (a batch of one), F(x) and F(no word)."""
        is_word = text.is_word[0]
        template = text.input_ids
        forward = TargetLogit(self.model)

        def on_words(word_ids: torch.Tensor, *args) -> torch.Tensor:
            """F of texts whose word tokens are `word_ids` `(k, word_tokens)`, special tokens kept."""
            full = template.expand(word_ids.shape[0], -1).clone()
            full[:, is_word] = word_ids
            return forward(full, *args)

        word_ids = template[:, is_word]
        args = forward.args(text, target, contrast)
        with torch.no_grad():
            ends = on_words(torch.cat([word_ids, torch.full_like(word_ids, baseline_id)]), *_repeat(args, 2))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(text_seed(template[0].tolist(), seed))
            phi = ShapleyValueSampling(on_words).attribute(
                word_ids,
                baselines=baseline_id,
                additional_forward_args=args,
                feature_mask=text.word_index[:, is_word],
                n_samples=n_samples,
                perturbations_per_eval=perturbations_per_eval,
            )
        # Captum gives every sub-token of a word the word's value: keep one per word.
        values = torch.zeros(int(text.num_words[0]), dtype=phi.dtype, device=phi.device)
        values.scatter_(0, text.word_index[0, is_word], phi[0])
        return values, float(ends[0]), float(ends[1])


def _repeat(args: tuple, times: int) -> tuple:
    """Forward arguments for `times` copies of a one-row batch."""
    return tuple(torch.cat([a] * times) if isinstance(a, torch.Tensor) else a for a in args)
