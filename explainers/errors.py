"""Errors a user of the explainers can cause: each says what was wrong and what to do."""


class ExplainerError(ValueError):
    """Base class of the explainers' errors."""


class ExplainerInputError(ExplainerError):
    """A text or tokenizer that cannot be explained (empty text, slow tokenizer, ...)."""


class TargetError(ExplainerError):
    """A target class that does not exist, or a kind of target the method cannot take."""


class MethodError(ExplainerError):
    """An unknown method, or one that does not fit the model (e.g. rollout on a model without layers)."""
