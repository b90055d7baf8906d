"""Random word scores: the baseline every faithfulness measure must beat."""

import torch

from ..base import Explainer, TokenScores, text_seed
from ..options import Option
from ..registry import register
from ..words import TokenBatch, word_to_token_scores


@register
class RandomExplainer(Explainer):
    """Each word gets a score drawn uniformly from [0, 1), from a generator seeded by `seed` and the text, so
    that a text gets the same scores in any batch and different texts get different ones. Ignores the target.

    """

    name = "random"
    title = "Random (baseline)"
    order = 90
    allows_contrast = True
    is_baseline = True
    options = (Option("seed", 0, int, "change it to draw other scores"),)

    def token_scores(
        self, batch: TokenBatch, target: torch.Tensor, contrast: torch.Tensor | None, seed: int
    ) -> TokenScores:
        words = torch.zeros(batch.input_ids.shape[0], int(batch.num_words.max()))
        for row, (ids, mask, n) in enumerate(zip(batch.input_ids, batch.attention_mask, batch.num_words, strict=True)):
            generator = torch.Generator().manual_seed(text_seed(ids[mask.bool()].tolist(), seed))
            words[row, :n] = torch.rand(int(n), generator=generator)
        return TokenScores(scores=word_to_token_scores(words.to(self.device), batch.word_index))
