"""F, the number that the gradient and perturbation methods explain (`explainers.outputs`), as a function Captum
can call; and a temporary hook on the embedding layer's output."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn
from transformers import PreTrainedModel

from ..base import at_least_float32
from ..outputs import explained_output, is_multi_label
from ..words import TokenBatch


class ExplainedOutput:
    """`F(rows) -> (rows,)`: the explained output of the target class (e.g. its log-probability), minus the same of
    the contrast class for a pair target.

    Captum calls it with its inputs first (token ids `(rows, seq_len)`) and then `args(...)`, which it repeats
    along the rows for every interpolation step or perturbation. The model runs in its own dtype; F is float32,
    so that what Captum sums from it (convergence delta, Shapley values) is not rounded to bf16.
    """

    def __init__(self, model: PreTrainedModel, output: str):
        self.model = model
        self.output = output
        self.multi_label = is_multi_label(model)

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        target: torch.Tensor,
        contrast: torch.Tensor | None,
    ) -> torch.Tensor:
        inputs = {"token_type_ids": token_type_ids, "position_ids": position_ids}
        inputs = {name: value for name, value in inputs.items() if value is not None}
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, **inputs).logits
        return explained_output(at_least_float32(logits), target, contrast, self.output, self.multi_label)

    @staticmethod
    def args(batch: TokenBatch, target: torch.Tensor, contrast: torch.Tensor | None) -> tuple:
        """The arguments after the token ids, in the order `__call__` takes them."""
        return (batch.attention_mask, batch.token_type_ids, batch.position_ids, target, contrast)


@contextmanager
def embedding_output(
    model: PreTrainedModel, change: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
) -> Iterator[None]:
    """Within the block, the embedding layer's output `(batch, seq_len, hidden)` is `change(input_ids, output)`;
    the hook is removed on exit, even when the block raises."""

    def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> torch.Tensor:
        return change(inputs[0], output)

    handle = model.get_input_embeddings().register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()
