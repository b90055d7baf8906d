"""F, the scalar that the gradient and perturbation methods explain, as a function Captum can call."""

import torch
from transformers import PreTrainedModel

from .targets import target_output
from .words import TokenBatch


class TargetLogit:
    """`F(rows) -> (rows,)`: the target class's logit, minus the contrast class's logit for a pair target.

    Captum calls it with its inputs first (token ids `(rows, seq_len)`) and then `args(...)`, which it repeats
    along the rows for every interpolation step or perturbation.
    """

    def __init__(self, model: PreTrainedModel):
        self.model = model

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        target: torch.Tensor,
        contrast: torch.Tensor | None,
    ) -> torch.Tensor:
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits
        return target_output(logits, target, contrast)

    @staticmethod
    def args(batch: TokenBatch, target: torch.Tensor, contrast: torch.Tensor | None) -> tuple:
        """The arguments after the token ids, in the order `__call__` takes them."""
        return (batch.attention_mask, batch.token_type_ids, target, contrast)
