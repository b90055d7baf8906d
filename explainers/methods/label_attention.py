"""Label attention as contributions: each word's exact share of the class's output, read from the forward pass.

The head is linear in its values, so a labelattn model returns each token's exact term in every logit
(`label_contributions`, see modeling_labelattn.py) and the part no token carries (`label_contribution_bias`). A
word's score is its tokens' terms (centered over the classes for the centered logit); the special tokens' terms
and the bias are the baseline, so `sum(scores) == score - baseline_score` to float rounding. One forward pass, no
gradient. The weights alone (where a class looked, not what it found there) are `label_attention_weights`.
"""

import torch

from ..base import Explainer, TokenScores, at_least_float32
from ..outputs import LINEAR, explained_output, is_multi_label
from ..registry import register
from ..words import TokenBatch


def pick(per_class: torch.Tensor, target: torch.Tensor, contrast: torch.Tensor | None) -> torch.Tensor:
    """`per_class (batch, labels, ...)` at each row's target, minus at its contrast: `(batch, ...)`."""
    rows = torch.arange(per_class.shape[0], device=per_class.device)
    picked = per_class[rows, target]
    return picked - per_class[rows, contrast] if contrast is not None else picked


@register
class LabelAttentionExplainer(Explainer):
    """Each word's exact term in the explained output (the logit, or the logit minus the mean logit) of the target
    class: signed, complete, free. The classes × words matrix of the same terms is in `extras["class_scores"]`.
    For the encoder backbone the terms are those of the final layer's positions (what the head reads), each
    credited to its token's word."""

    name = "label_attention"
    title = "Label attention"
    order = 10
    outputs = LINEAR
    score_meaning = "each word's exact term in"
    baseline_name = "the special tokens and what no token carries"
    allows_contrast = True
    needs_label_attention = True

    @torch.no_grad()
    def token_scores(
        self, batch: TokenBatch, target: torch.Tensor, contrast: torch.Tensor | None, output: str
    ) -> TokenScores:
        outputs = self.model(**batch.model_inputs(), output_label_contributions=True)
        terms = at_least_float32(outputs.label_contributions)  # (batch, labels, seq)
        bias = at_least_float32(outputs.label_contribution_bias)  # (batch, labels)
        if output == "centered_logit":  # the logit minus the mean logit is linear in the logits: so are its terms
            terms, bias = terms - terms.mean(1, keepdim=True), bias - bias.mean(1, keepdim=True)
        scores = pick(terms, target, contrast)
        not_words = (scores * ~batch.is_word).sum(-1)  # special tokens; padding holds 0
        baseline = pick(bias, target, contrast) + not_words
        score = explained_output(at_least_float32(outputs.logits), target, contrast, output, is_multi_label(self.model))
        diagnostics = [{"score": float(s), "baseline_score": float(b)} for s, b in zip(score, baseline, strict=True)]
        return TokenScores(scores=scores, class_scores=terms, diagnostics=diagnostics)


@register
class LabelAttentionWeightsExplainer(Explainer):
    """The target class's label-attention row, averaged over heads: how much each token was used to build that
    class's vector (where the class looked, not what it found there). Non-negative, sums to 1 over the tokens; the
    classes × words matrix is in `extras["class_scores"]`."""

    name = "label_attention_weights"
    title = "Label-attention weights"
    order = 15
    needs_label_attention = True

    @torch.no_grad()
    def token_scores(self, batch: TokenBatch, target: torch.Tensor, contrast: torch.Tensor | None) -> TokenScores:
        weights = self.model(**batch.model_inputs(), output_attentions=True).label_attentions
        per_class = at_least_float32(weights).mean(dim=1)  # (batch, labels, seq)
        return TokenScores(scores=pick(per_class, target, None), class_scores=per_class)
