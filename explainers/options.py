"""A method's keyword options, each declared once: name, type, default, allowed values, whether None is allowed,
whether it scales the method's cost and how far an interactive caller may raise it.

Every reader of options reads these declarations: the argument checks of `Explainer` (one place, before anything
runs), `--option KEY=VALUE` of the command line, the Space's sliders and the options tables of docs/explainers.md
(`options_table`). A method declares `options = (Option(...), ...)` on its class, the way Captum documents the
keyword arguments of `attribute()`.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ExplainerError


@dataclass(frozen=True)
class Option:
    """One keyword option of a method.

    Attributes:
        name: the keyword.
        default: its value when not given.
        kind: the accepted type, or a tuple of types (an int is accepted where a float is; a bool never stands for a
            number).
        help: one sentence: what it does, in the user's terms.
        choices: the values allowed, when it takes one of a few.
        nullable: None is allowed (its meaning is said in `help`).
        minimum: the smallest number allowed (inclusive; the value must also be finite), for numbers; rules a
            declaration cannot say are the method's `check_option_values`.
        cost: this option scales the method's cost (the Space offers it as a slider).
        cap: the most an interactive caller (the Space) may ask for this option; for a cost option the slider's end.
    """

    name: str
    default: Any
    kind: type | tuple[type, ...]
    help: str
    choices: tuple[Any, ...] | None = None
    nullable: bool = False
    minimum: float | None = None
    cost: bool = False
    cap: int | None = None

    @property
    def kinds(self) -> tuple[type, ...]:
        kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
        return (*kinds, int) if float in kinds and int not in kinds else kinds

    def type_name(self) -> str:
        names = " or ".join(k.__name__ for k in (self.kind if isinstance(self.kind, tuple) else (self.kind,)))
        return f"{names} or None" if self.nullable else names

    def check(self, value: Any, method: str) -> Any:
        """`value` if this option takes it, else an `ExplainerError` that says what it takes."""
        if value is None and self.nullable:
            return value
        wrong_kind = isinstance(value, bool) and bool not in self.kinds
        if wrong_kind or not isinstance(value, self.kinds):
            raise ExplainerError(
                f"{self.name}={value!r} has the wrong type ({type(value).__name__}): {method} expects "
                f"{self.type_name()} for it, e.g. the default {self.default!r}."
            )
        if self.choices is not None and value not in self.choices:
            raise ExplainerError(f"{self.name}={value!r}: choose one of {list(self.choices)}.")
        if self.minimum is not None and not (math.isfinite(value) and value >= self.minimum):
            raise ExplainerError(f"{self.name}={value!r} must be at least {self.minimum:g}.")
        return value


def check_options(declared: Sequence[Option], given: Mapping[str, Any], method: str) -> dict[str, Any]:
    """`given` checked against the declarations (names, types, choices, minimums), with the defaults filled in."""
    by_name = {option.name: option for option in declared}
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        raise ExplainerError(f"{method} takes no option {unknown}: its options are {sorted(by_name) or 'none'}.")
    return {
        name: option.check(given[name], method) if name in given else option.default for name, option in by_name.items()
    }


def cost_option(declared: Sequence[Option]) -> Option | None:
    """The option that scales the method's cost, or None when only the text's length does."""
    return next((option for option in declared if option.cost), None)


def options_table(declared: Sequence[Option]) -> str:
    """The options as a Markdown table (name, type, default, what it does), for docs/explainers.md."""
    if not declared:
        return "No options."
    rows = ["| option | type | default | what it does |", "|---|---|---|---|"]
    for option in declared:
        help_text = option.help.replace("|", "\\|") + "."
        if option.choices:
            help_text += f" One of {', '.join(f'`{c}`' for c in option.choices)}."
        rows.append(f"| `{option.name}` | {option.type_name()} | `{option.default!r}` | {help_text} |")
    return "\n".join(rows)


def write_options_tables(path: str) -> None:
    """Rewrite every `<!-- options:METHOD -->` ... `<!-- /options:METHOD -->` block of the Markdown file `path` with
    the method's `options_table` (docs/explainers.md: `python -c "from explainers.options import write_options_tables;
    write_options_tables('docs/explainers.md')"`)."""
    import re
    from pathlib import Path

    from .registry import METHODS

    page = Path(path)
    text = page.read_text(encoding="utf-8")
    for name, method in METHODS.items():
        block = f"<!-- options:{name} -->\n{options_table(method.all_options())}\n<!-- /options:{name} -->"
        text = re.sub(
            rf"<!-- options:{name} -->.*?<!-- /options:{name} -->", lambda _, block=block: block, text, flags=re.S
        )
    page.write_text(text, encoding="utf-8")
