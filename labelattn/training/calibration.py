"""The temperature a training run fits on its validation split, so that the model's probabilities mean what they say.

Temperature scaling (Guo et al., 2017) divides every logit by one number T > 0, fitted to minimise the negative
log-likelihood of the validation split's labels: the softmax's order, hence every prediction, is unchanged, and only
how sure the model says it is moves. A multi-label model's per-class sigmoids share one temperature, fitted on their
binary cross-entropy likewise. The fit is torch's L-BFGS on log T (so T stays positive), bounded to
[`MIN_TEMPERATURE`, `MAX_TEMPERATURE`]: a validation split the model never gets wrong would drive T towards 0.
The model's config stores T (`temperature`), and its forward divides the logits by it.
"""

import math

import torch

MIN_TEMPERATURE, MAX_TEMPERATURE = 0.05, 20.0


def nll(logits: torch.Tensor, labels: torch.Tensor, multi_label: bool) -> torch.Tensor:
    """The mean negative log-likelihood of `labels` under `logits`: cross-entropy, or binary per class."""
    if multi_label:
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
    return torch.nn.functional.cross_entropy(logits, labels.long())


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor, multi_label: bool) -> float:
    """The temperature T minimising the NLL of `labels` under `logits / T` (logits `(n, classes)`, before any
    temperature; labels class indices `(n,)`, or 0/1 `(n, classes)` for a multi-label model)."""
    # In float32, as the model computes its logits: at ICD-10-CM's 8,322 × 1,918 validation logits a float64 fit took
    # 9 s (3.6 s of it the first float64 backward's start-up), float32 1 s; the mean NLL loses no digit T needs.
    logits = logits.detach().float()
    log_temperature = torch.zeros((), requires_grad=True)
    optimizer = torch.optim.LBFGS([log_temperature], lr=1.0, max_iter=100, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = nll(logits / log_temperature.exp(), labels, multi_label)
        loss.backward()
        return loss

    optimizer.step(closure)
    temperature = math.exp(log_temperature.item())
    if not math.isfinite(temperature):
        return MAX_TEMPERATURE if log_temperature.item() > 0 else MIN_TEMPERATURE
    return min(max(temperature, MIN_TEMPERATURE), MAX_TEMPERATURE)
