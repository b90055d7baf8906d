"""What an explanation explains: the number F(x) of the model that every method's scores account for, chosen once.

- `"logit"`: the raw score `z_c` of the class. A softmax classifier's decision does not depend on it: adding one
  number to every logit changes no probability, so on the raw logit a word that raises every class alike gets credit
  for something the model never decided.
- `"centered_logit"`: `z_c − mean_k z_k`, the softmax's own score. Shift-invariant (the probabilities are the softmax
  of these numbers, and they sum to 0 over the classes); linear in the logits, so label attention's exact per-token
  decomposition of the logits carries over.
- `"log_probability"`: `log p_c`; `"probability"`: `p_c`. Shift-invariant too.

A multi-label model decides each class on its own (a sigmoid): the logit *is* that class's log-odds, which is what
it explains by default; centering over the classes would mix decisions that do not compete, and is refused. There
`log_probability` and `probability` are the sigmoid's.

A pair target `(a, b)`, "why a rather than b", explains `F_a − F_b` of the chosen kind: for the three logit kinds the
logit difference `z_a − z_b`, which is shift-invariant already.

The default for a single-label model was chosen by measurement (docs/faithfulness.md): `DEFAULT_SINGLE_LABEL`.
"""

from typing import TYPE_CHECKING, Any

import torch

from .errors import ExplainerError
from .registry import METHODS

if TYPE_CHECKING:
    from .explanation import Explanation

OUTPUTS = ("logit", "centered_logit", "log_probability", "probability")
SHIFT_INVARIANT = ("centered_logit", "log_probability", "probability")
LINEAR = ("logit", "centered_logit")  # outputs that are a fixed linear map of the logits
DEFAULT_SINGLE_LABEL = "centered_logit"
DEFAULT_MULTI_LABEL = "logit"
# In words, for the sentence that says what the scores explain.
PHRASES = {
    "logit": "logit",
    "centered_logit": "logit minus the mean logit",
    "log_probability": "log-probability",
    "probability": "probability",
}


def is_multi_label(model: Any) -> bool:
    return getattr(model.config, "problem_type", None) == "multi_label_classification"


def default_output(model: Any, allowed: tuple[str, ...] = OUTPUTS) -> str:
    """The output a method explains when none is asked: the class's log-odds for a multi-label model, and for a
    single-label one the shift-invariant `DEFAULT_SINGLE_LABEL` (or the first shift-invariant output the method
    allows)."""
    if is_multi_label(model):
        return DEFAULT_MULTI_LABEL
    if DEFAULT_SINGLE_LABEL in allowed:
        return DEFAULT_SINGLE_LABEL
    return next(output for output in allowed if output in SHIFT_INVARIANT)


def resolve_output(output: str | None, model: Any, allowed: tuple[str, ...], method: str) -> str:
    """`output` checked for this model and method, or the default when None."""
    if output is None:
        return default_output(model, allowed)
    if output not in allowed:
        raise ExplainerError(f"output={output!r}: {method} explains one of {list(allowed)}.")
    if output == "centered_logit" and is_multi_label(model):
        raise ExplainerError(
            "output='centered_logit' centers over classes that compete, and a multi-label model's classes do not "
            "(each is its own yes/no): use output='logit' (the class's log-odds, the default), 'log_probability' "
            "or 'probability'."
        )
    return output


def explained_output(
    logits: torch.Tensor, target: torch.Tensor, contrast: torch.Tensor | None, output: str, multi_label: bool
) -> torch.Tensor:
    """The number each row is explained for, `(rows, classes) -> (rows,)`: `output` of the target class, minus the
    same of the contrast class for a pair target."""
    if output == "centered_logit":
        values = logits - logits.mean(dim=-1, keepdim=True)
    elif output == "log_probability":
        values = torch.nn.functional.logsigmoid(logits) if multi_label else torch.log_softmax(logits, dim=-1)
    elif output == "probability":
        values = torch.sigmoid(logits) if multi_label else torch.softmax(logits, dim=-1)
    else:
        values = logits
    explained = values.gather(-1, target[:, None]).squeeze(-1)
    if contrast is not None:
        explained = explained - values.gather(-1, contrast[:, None]).squeeze(-1)
    return explained


def output_phrase(exp: "Explanation") -> str:
    """What was explained, in words: "the log-probability of HUM" or "the logit of HUM minus that of LOC"."""
    phrase = f"the {PHRASES.get(exp.output, exp.output)} of {exp.target_label}"
    if exp.contrast_label is not None:
        phrase += f" minus that of {exp.contrast_label}"
    return phrase


def describe(exp: "Explanation") -> str:
    """One sentence saying what the scores of `exp` are, e.g. "The scores are each word's Shapley value for the
    log-probability of HUM: the words raise it from -1.79 (every word removed) to -0.21, and the scores add up to
    +1.58."."""

    method = METHODS.get(exp.method)
    if exp.output is None:
        return f"The scores of {exp.method} rank the words; they are no share of any output of the model."
    meaning = method.score_meaning if method is not None else "each word's score for"
    sentence = f"The scores are {meaning} {output_phrase(exp)}"
    if exp.score is None or exp.baseline_score is None:
        return sentence + "."
    rise = exp.score - exp.baseline_score
    baseline = method.baseline_name if method is not None else "the baseline"
    sentence += (
        f": the words {'raise' if rise >= 0 else 'lower'} it from {exp.baseline_score:.3g} ({baseline}) to "
        f"{exp.score:.3g}, and the scores add up to {sum(exp.scores):+.3g}"
    )
    if exp.delta is not None:
        sentence += f" (the integration error is {exp.delta:+.1e})"
    return sentence + "."
