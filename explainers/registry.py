"""The registry of explanation methods: `METHODS` (name -> class, in the order people see them), `register` (the
class decorator every method module uses), `method_class` (the one lookup, with the one message for an unknown
method) and `method_names` (the methods that fit a requirement, for error hints).

It imports nothing of the package but its errors, so that every layer may import it: the orchestrator (`base`),
the record's views, the outputs, the targets and the front ends read the methods here, never from `base`."""

from typing import TYPE_CHECKING

from .errors import MethodError

if TYPE_CHECKING:
    from .base import Explainer

METHODS: dict[str, type["Explainer"]] = {}


def register(cls: type["Explainer"]) -> type["Explainer"]:
    """Class decorator: make a method available to `explain(method=cls.name)`, the command line and the Space.
    `METHODS` stays in the order people see the methods in (`Explainer.order`, then name)."""
    METHODS[cls.name] = cls
    ordered = sorted(METHODS.values(), key=lambda method: (method.order, method.name))
    METHODS.clear()
    METHODS.update((method.name, method) for method in ordered)
    return cls


def method_class(method: object) -> type["Explainer"]:
    """The class registered as `method`; `MethodError` naming the choices for anything else (a list, None, a
    misspelt name)."""
    if not isinstance(method, str) or method not in METHODS:
        raise MethodError(f"Unknown method {method!r:.60}: choose one of {sorted(METHODS)}.")
    return METHODS[method]


def method_names(**requirements: bool) -> str:
    """The registered methods (the random baseline left out) whose class attributes have the given values, as text
    for an error hint: `method_names(needs_embeddings=False)` -> "attention_flow, ..., shap"."""
    names = [
        name
        for name, cls in sorted(METHODS.items())
        if not cls.is_baseline and all(getattr(cls, key) == value for key, value in requirements.items())
    ]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)
