"""Errors a user of the explainers can cause: each says what was wrong and what to do."""


class ExplainerError(ValueError):
    """Base class of the explainers' errors."""


class ExplainerInputError(ExplainerError):
    """A text or tokenizer that cannot be explained (empty text, slow tokenizer, ...)."""


class TargetError(ExplainerError):
    """A target class that does not exist, or a kind of target the method cannot take."""


class MethodError(ExplainerError):
    """An unknown method, or one that does not fit the model (e.g. rollout on a model without layers)."""


class NonFiniteLogitsError(ExplainerError):
    """Logits that are not finite numbers: for every text (`every_text`: the model's weights are broken) or for some
    (those texts overflow, say in float16), which a corpus run turns into those rows' errors."""

    def __init__(self, message: str, every_text: bool) -> None:
        super().__init__(message)
        self.every_text = every_text
