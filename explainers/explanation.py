"""`Explanation`: the one result type of every method, the check of a dict sent back (`from_dict`), and its views
(JSON here; Gradio, HTML and heatmaps in `explainers.views`, which it calls). Whether an explanation can be a given
model's is `explainers.checks.check_explanation`."""

import math
from dataclasses import asdict, dataclass, field, fields
from numbers import Real
from typing import TYPE_CHECKING, Any

from . import views
from .errors import ExplainerInputError

if TYPE_CHECKING:  # matplotlib and transformers are imported only when a plot or a check is asked for
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


@dataclass
class Explanation:
    """Word scores of one text (or text pair) for one target class.

    Attributes:
        text: the text as given (the first segment of a pair).
        words: the words, `words[i] == text[spans[i][0]:spans[i][1]]` (for a pair, in the word's own segment,
            `(text, text_pair)[word_segments[i]]`); no special token, no padding.
        spans: `(start, end)` character offsets of each word in its segment, covering all its sub-tokens.
        scores: one signed score per word (sub-token scores summed); positive pushes towards the target.
        target, target_label: the class explained.
        probability: the model's probability of the target (softmax, or sigmoid for multi-label models).
        method, options: the method and the options it ran with.
        contrast, contrast_label: the class b of a pair target "why target rather than b?", else None.
        truncated: the text was longer than the model reads; only the words kept are explained.
        output: the number of the model the scores explain (`explainers.outputs`: "logit", "centered_logit",
            "log_probability" or "probability"), or None for a method whose scores are no share of an output
            (attention rollout and flow, label-attention weights, random).
        score, baseline_score, delta: F(x) and F(x') of that output for the methods whose scores add up to their
            difference (Integrated Gradients, SHAP, label attention), so that `sum(scores) ≈ score -
            baseline_score`, within Integrated Gradients' convergence `delta`.
        extras: method-specific diagnostics that are JSON-able, e.g. `class_scores` (classes × words) and
            `labels` for label attention, `n_steps` used by IG, `standard_errors` of SHAP.
        text_pair: the second segment of a text pair, else None.
        word_segments: for a pair, the segment (0 or 1) of each word; else None.
    """

    text: str
    words: list[str]
    spans: list[tuple[int, int]]
    scores: list[float]
    target: int
    target_label: str
    probability: float
    method: str
    options: dict[str, Any] = field(default_factory=dict)
    contrast: int | None = None
    contrast_label: str | None = None
    truncated: bool = False
    output: str | None = None
    score: float | None = None
    baseline_score: float | None = None
    delta: float | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    text_pair: str | None = None
    word_segments: list[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values."""
        data = asdict(self)
        data["spans"] = [list(span) for span in self.spans]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Explanation":
        """The `Explanation` of `to_dict()`'s output, after checking every field (types, one span and score per
        word, each word at its span); raises `ExplainerInputError` naming the first field that is wrong."""
        if not isinstance(data, dict):
            raise ExplainerInputError(f"An explanation is a dict (from to_dict()), not a {type(data).__name__}.")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        missing = sorted(REQUIRED - set(data))
        if unknown or missing:
            raise ExplainerInputError(f"Explanation fields: unknown {unknown}, missing {missing}.")
        for name, value in data.items():
            if not _valid(value, FIELD_TYPES[name]):
                raise ExplainerInputError(f"Explanation field {name}={value!r:.80}: expected {FIELD_TYPES[name]}.")
        n = len(data["words"])
        for name in ("spans", "scores") + (("word_segments",) if data.get("word_segments") is not None else ()):
            if len(data[name]) != n:
                raise ExplainerInputError(f"Explanation has {len(data[name])} {name} for {n} words: give one each.")
        if (data.get("text_pair") is None) != (data.get("word_segments") is None):
            raise ExplainerInputError("Explanation: text_pair and word_segments come together (a pair) or not at all.")
        segments = (data["text"], data.get("text_pair"))
        for i, (word, (start, end)) in enumerate(zip(data["words"], data["spans"], strict=True)):
            segment = segments[data["word_segments"][i]] if data.get("word_segments") is not None else data["text"]
            if segment is None or not 0 <= start < end <= len(segment) or segment[start:end] != word:
                raise ExplainerInputError(f"Explanation word {i} {word!r} is not at its span {[start, end]}.")
        if not 0.0 <= data["probability"] <= 1.0:
            raise ExplainerInputError(f"Explanation probability={data['probability']!r} is not in [0, 1].")
        values = {**data, "spans": [tuple(span) for span in data["spans"]]}
        return cls(**values)

    def top_words(self, k: int = 5) -> list[tuple[str, float]]:
        """The `k` words with the highest scores, highest first."""
        order = sorted(range(len(self.words)), key=lambda i: -self.scores[i])
        return [(self.words[i], self.scores[i]) for i in order[:k]]

    def normalized_scores(self) -> list[float]:
        """Scores divided by the largest absolute score, in [-1, 1] (all 0 when every score is 0)."""
        return views.scaled(self.scores)

    def segments(self) -> list[tuple[str, float | None]]:
        """The whole text as `(piece, score)`, the value of Gradio's `HighlightedText` (`views.segments`)."""
        return views.segments(self)

    def to_html(self) -> "views.HTML":
        """This explanation as a one-row table of `views.to_html` (words on green or red, scores on hover)."""
        return views.to_html(self)

    def _repr_html_(self) -> str:
        """What Jupyter shows: the table of `to_html`."""
        return str(self.to_html())

    def plot(self, ax: "Axes | None" = None) -> "Figure":
        """A matplotlib heatmap: classes × words when the method gives every class (label attention), else one
        row of word scores (`views.plot` draws several explanations). Returns the figure."""
        if "class_scores" in self.extras:
            title = f"{views.method_title(self.method)}: every class"
            return views.heatmap(self.extras["class_scores"], self.extras["labels"], self.words, title, ax)
        return views.plot(self, ax)


def _valid(value: Any, expected: str) -> bool:
    """`value` is of the kind named by `expected` (the names of `FIELD_TYPES`)."""
    optional = expected.endswith(" or None")
    if optional and value is None:
        return True
    kind = expected.removesuffix(" or None")
    number = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)
    checks = {
        "str": lambda: isinstance(value, str),
        "number": lambda: number,
        "class index": lambda: isinstance(value, int) and not isinstance(value, bool) and value >= 0,
        "bool": lambda: isinstance(value, bool),
        "dict": lambda: isinstance(value, dict),
        "list of str": lambda: isinstance(value, list) and all(isinstance(v, str) for v in value),
        "list of numbers": lambda: isinstance(value, list) and all(_valid(v, "number") for v in value),
        "list of 0/1": lambda: isinstance(value, list) and all(v in (0, 1) and not isinstance(v, bool) for v in value),
        "list of [start, end]": lambda: (
            isinstance(value, list)
            and all(
                isinstance(span, list | tuple)
                and len(span) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in span)
                for span in value
            )
        ),
    }
    return checks[kind]()


FIELD_TYPES = {
    "text": "str",
    "words": "list of str",
    "spans": "list of [start, end]",
    "scores": "list of numbers",
    "target": "class index",
    "target_label": "str",
    "probability": "number",
    "method": "str",
    "options": "dict",
    "contrast": "class index or None",
    "contrast_label": "str or None",
    "truncated": "bool",
    "output": "str or None",
    "score": "number or None",
    "baseline_score": "number or None",
    "delta": "number or None",
    "extras": "dict",
    "text_pair": "str or None",
    "word_segments": "list of 0/1 or None",
}
REQUIRED = frozenset({"text", "words", "spans", "scores", "target", "target_label", "probability", "method"})
