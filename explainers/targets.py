"""Targets ("which class to explain") resolved in one place for every method."""

from collections.abc import Mapping, Sequence
from numbers import Integral

import torch

from .errors import TargetError
from .registry import method_names

Target = int | str | tuple[int | str, int | str] | None


def class_index(target: int | str, id2label: Mapping[int, str]) -> int:
    """A class index from an index or a label name, checked against the model's labels."""
    labels = [id2label[i] for i in range(len(id2label))]
    # Integral: numpy integers too (a class index often comes out of an arg-max).
    if isinstance(target, bool) or not isinstance(target, Integral | str):
        raise TargetError(f"A target is a class index or a label name, not {type(target).__name__} {target!r}.")
    if isinstance(target, str):
        if target not in labels:
            raise TargetError(f"Unknown target label {target!r}: the model's labels are {labels}.")
        return labels.index(target)
    if not 0 <= target < len(labels):
        raise TargetError(
            f"Target index {target} is out of range: the model has {len(labels)} classes (0..{len(labels) - 1})."
        )
    return int(target)


def resolve_targets(
    target: Target | Sequence[Target],
    predicted: torch.Tensor,
    id2label: Mapping[int, str],
    allow_contrast: bool,
    method: str,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-text target and contrast class indices, `(batch,)` each (contrast None when no pair was asked).

    Args:
        target: None (the predicted class), an index, a label name, a pair `(a, b)` ("why a rather than b":
            the logit of a minus the logit of b), or a list of these, one per text.
        predicted: `(batch,)` predicted class of each text.
    """
    batch = predicted.shape[0]
    per_text = list(target) if isinstance(target, list) else [target] * batch
    if len(per_text) != batch:
        raise TargetError(f"{len(per_text)} targets were given for {batch} texts: give one per text, or one for all.")
    targets, contrasts = [], []
    for i, item in enumerate(per_text):
        if isinstance(item, tuple):
            if not allow_contrast:
                raise TargetError(
                    f"The method {method!r} cannot explain a pair target {item!r} (a logit difference): "
                    f"use {method_names(allows_contrast=True)}."
                )
            if len(item) != 2:
                raise TargetError(f"A pair target has two classes (a, b), got {item!r}.")
            targets.append(class_index(item[0], id2label))
            contrasts.append(class_index(item[1], id2label))
            if targets[-1] == contrasts[-1]:
                raise TargetError(
                    f"The pair target {item!r} names class {id2label[targets[-1]]!r} twice: a contrast explains "
                    "'a rather than b' for two different classes; for one class pass it alone."
                )
        else:
            targets.append(int(predicted[i]) if item is None else class_index(item, id2label))
            contrasts.append(None)
    has_contrast = any(c is not None for c in contrasts)
    if has_contrast and not all(c is not None for c in contrasts):
        raise TargetError("Mix of pair and single targets in one call: explain them in separate calls.")
    device = predicted.device
    contrast = torch.tensor(contrasts, device=device) if has_contrast else None
    return torch.tensor(targets, device=device), contrast
