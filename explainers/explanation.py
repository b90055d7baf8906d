"""`Explanation`: the one result type of every method, and its views (JSON, Gradio, HTML, heatmap)."""

import html
import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # matplotlib is imported only when a plot is asked for
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


@dataclass
class Explanation:
    """Word scores of one text for one target class.

    Attributes:
        text: the text as given.
        words: the words, `words[i] == text[spans[i][0]:spans[i][1]]`; no special token, no padding.
        spans: `(start, end)` character offsets of each word in `text`, covering all its sub-tokens.
        scores: one signed score per word (sub-token scores summed); positive pushes towards the target.
        target, target_label: the class explained.
        probability: the model's probability of the target (softmax, or sigmoid for multi-label models).
        method, options: the method and the options it ran with.
        contrast, contrast_label: the class b of a pair target "why target rather than b?", else None.
        truncated: the text was longer than the model reads; only the words kept are explained.
        score, baseline_score, delta: for Integrated Gradients, F(x), F(x') and Captum's convergence delta,
            so that `sum(scores) ≈ score - baseline_score` within `delta`.
        extras: method-specific diagnostics that are JSON-able, e.g. `class_scores` (classes × words) and
            `labels` for label attention, `n_steps` used by IG.
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
    score: float | None = None
    baseline_score: float | None = None
    delta: float | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values."""
        data = asdict(self)
        data["spans"] = [list(span) for span in self.spans]
        return data

    def top_words(self, k: int = 5) -> list[tuple[str, float]]:
        """The `k` words with the highest scores, highest first."""
        order = sorted(range(len(self.words)), key=lambda i: -self.scores[i])
        return [(self.words[i], self.scores[i]) for i in order[:k]]

    def normalized_scores(self) -> list[float]:
        """Scores divided by the largest absolute score, in [-1, 1] (all 0 when every score is 0)."""
        top = max((abs(s) for s in self.scores), default=0.0)
        return [s / top if top > 0 and math.isfinite(top) else 0.0 for s in self.scores]

    def segments(self) -> list[tuple[str, float | None]]:
        """The whole text as `(piece, score)`: words with their score in [-1, 1], the text between them with
        None. This is the value Gradio's `HighlightedText` reads as a signed colour scale."""
        pieces: list[tuple[str, float | None]] = []
        cursor = 0
        for (start, end), value in zip(self.spans, self.normalized_scores(), strict=True):
            if start > cursor:
                pieces.append((self.text[cursor:start], None))
            pieces.append((self.text[start:end], round(value, 4)))
            cursor = end
        if cursor < len(self.text):
            pieces.append((self.text[cursor:], None))
        return pieces

    def to_highlighted_text(self) -> list[tuple[str, float | None]]:
        """The value of a `gradio.HighlightedText` component (see `segments`)."""
        return self.segments()

    def to_html(self) -> str:
        """A standalone HTML snippet: words on a red (against) to green (for) background, scores on hover."""
        parts = []
        for piece, value in self.segments():
            if value is None:
                parts.append(html.escape(piece))
                continue
            colour = f"rgba(22, 163, 74, {abs(value):.3f})" if value >= 0 else f"rgba(220, 38, 38, {abs(value):.3f})"
            parts.append(
                f'<span style="background:{colour};border-radius:3px" title="{value:+.3f}">{html.escape(piece)}</span>'
            )
        title = f"{html.escape(self.method)} · {html.escape(self.target_label)} (p={self.probability:.3f})"
        if self.contrast_label is not None:
            title += f" rather than {html.escape(self.contrast_label)}"
        return f'<div class="labelattn-explanation"><div><b>{title}</b></div><p>{"".join(parts)}</p></div>'

    def plot(self, ax: "Axes | None" = None) -> "Figure":
        """A matplotlib heatmap: words × classes when the method gives every class (label attention),
        else one row of word scores. Returns the figure."""
        import matplotlib.pyplot as plt

        if "class_scores" in self.extras:
            matrix, rows = self.extras["class_scores"], self.extras["labels"]
        else:
            matrix, rows = [self.scores], [self.target_label]
        if ax is None:
            width = max(4.0, 0.55 * len(self.words) + 1.5)
            _, ax = plt.subplots(figsize=(width, 0.45 * len(rows) + 1.4))
        top = max((abs(v) for row in matrix for v in row), default=1.0) or 1.0
        signed = min(min(row) for row in matrix) < 0
        image = ax.imshow(
            matrix, cmap="RdBu_r" if signed else "Reds", vmin=-top if signed else 0, vmax=top, aspect="auto"
        )
        ax.set_xticks(range(len(self.words)), self.words, rotation=60, ha="right")
        ax.set_yticks(range(len(rows)), rows)
        ax.set_title(f"{self.method}: {self.target_label}")
        ax.figure.colorbar(image, ax=ax)
        ax.figure.tight_layout()
        return ax.figure
