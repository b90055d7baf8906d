"""What a person sees of explanations: the text in coloured pieces (Gradio's `HighlightedText`), HTML (one
explanation, a table of many, a page saved to a file, shown by Jupyter), heatmaps of one or several explanations
of a text, and the diagnostics in words.

Written here rather than taken from Captum: `captum.attr.visualization.visualize_text` renders tokens (not words
with their character spans), knows no text pairs, and needs IPython at call time; these views read the
`Explanation` itself and return plain values (a list, a str, a matplotlib `Figure`) that any front end can use.
"""

import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Union

from .errors import ExplainerInputError
from .registry import METHODS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .explanation import Explanation

# The colours of a score's sign, as RGB: green pushes towards the target, red against it.
TOWARDS = (22, 163, 74)
AGAINST = (220, 38, 38)

Explanations = Union["Explanation", Sequence["Explanation | Sequence[Explanation]"], Mapping[str, Sequence]]


class HTML(str):
    """An HTML string that Jupyter shows rendered (`_repr_html_`); everywhere else it is the str it is."""

    def _repr_html_(self) -> str:
        return str(self)


def scaled(scores: Sequence[float]) -> list[float]:
    """Scores divided by the largest absolute score, in [-1, 1] (all 0 when every score is 0)."""
    top = max((abs(s) for s in scores), default=0.0)
    return [s / top if top > 0 and math.isfinite(top) else 0.0 for s in scores]


def pieces(exp: "Explanation") -> list[tuple[str, int | None]]:
    """The whole text as `(piece, word)`: each word with its index, the text between words with None (a pair:
    the first text, a blank line, the second)."""
    parts: list[tuple[str, int | None]] = []
    texts = (exp.text,) if exp.text_pair is None else (exp.text, exp.text_pair)
    word_segments = exp.word_segments or [0] * len(exp.words)
    for segment, text in enumerate(texts):
        if segment:
            parts.append(("\n\n", None))
        cursor = 0
        for i, ((start, end), own) in enumerate(zip(exp.spans, word_segments, strict=True)):
            if own != segment:
                continue
            if start > cursor:
                parts.append((text[cursor:start], None))
            parts.append((text[start:end], i))
            cursor = end
        if cursor < len(text):
            parts.append((text[cursor:], None))
    return parts


def segments(exp: "Explanation") -> list[tuple[str, float | None]]:
    """The whole text as `(piece, score)`: words with their score scaled to [-1, 1], the text between them with
    None. This is the value Gradio's `HighlightedText` reads as a signed colour scale."""
    values = scaled(exp.scores)
    return [(piece, None if word is None else round(values[word], 4)) for piece, word in pieces(exp)]


def question(exp: "Explanation") -> str:
    """What the scores answer, e.g. "Why LOC rather than HUM?"."""
    rather = f" rather than {exp.contrast_label}" if exp.contrast_label is not None else ""
    return f"Why {exp.target_label}{rather}?"


def method_title(method: str) -> str:
    """A method's display name: its class's `title` where it declares one, else its name."""

    return getattr(METHODS.get(method), "title", None) or method


def diagnostics(exp: "Explanation") -> list[str]:
    """What an explanation's scores are and the checks it carries, one sentence each, whichever method made it:
    what they explain and how they add up (`explainers.outputs.describe`: F(x), F(baseline), their sum, the
    integration error), and the sampling error where the method reports standard errors of the word scores."""
    from .outputs import describe

    lines = [describe(exp)]
    errors = exp.extras.get("standard_errors")
    if errors:
        lines.append(
            f"Sampling: mean standard error of a word's score {sum(errors) / len(errors):.2e} (more samples make it "
            "smaller)."
        )
    return lines


def is_explanation(value: object) -> bool:
    """`value` is one explanation (not a list or mapping of them): read by its fields, so that the views need not
    import the record, which calls them."""
    return all(hasattr(value, name) for name in ("words", "spans", "scores", "method"))


def flatten(explanations: Explanations) -> list["Explanation"]:
    """One list of explanations from one, a list (of explanations, or of lists as `top_k` and `targets="all"`
    give), or a mapping method → list per text, which is read text by text (each text's methods together)."""
    flat: list[Explanation] = []
    if is_explanation(explanations):
        flat = [explanations]
    elif isinstance(explanations, Mapping):
        runs = [flatten(run) for run in explanations.values()]
        if len({len(run) for run in runs}) > 1:
            raise ExplainerInputError(
                "The methods of the mapping explain different numbers of texts: give each the same texts."
            )
        flat = [exp for row in zip(*runs, strict=True) for exp in row]
    elif isinstance(explanations, Sequence) and not isinstance(explanations, str):
        flat = [exp for item in explanations for exp in ([item] if is_explanation(item) else flatten(item))]
    if not flat:
        raise ExplainerInputError(
            f"Nothing to show in {type(explanations).__name__} {explanations!r:.60}: pass an Explanation, a list of "
            "them (as explain() returns), or a mapping method → list."
        )
    return flat


def _colour(value: float) -> str:
    red, green, blue = TOWARDS if value >= 0 else AGAINST
    return f"rgba({red}, {green}, {blue}, {abs(value):.3f})"


def _words_html(exp: "Explanation") -> str:
    """The text with each word on its colour (scaled to the explanation's largest score), its score on hover."""
    values = scaled(exp.scores)
    parts = []
    for piece, word in pieces(exp):
        if word is None:
            parts.append(html.escape(piece))
        else:
            parts.append(
                f'<span class="word" style="background:{_colour(values[word])}" title="{exp.scores[word]:+.4g}">'
                f"{html.escape(piece)}</span>"
            )
    return "".join(parts)


STYLE = """
.labelattn-explanations { border-collapse: collapse; font-family: sans-serif; font-size: 14px; }
.labelattn-explanations th, .labelattn-explanations td {
  border-bottom: 1px solid #ddd; padding: 6px 10px; text-align: left; vertical-align: top; }
.labelattn-explanations .text { white-space: pre-wrap; line-height: 1.9; max-width: 60em; }
.labelattn-explanations .word { border-radius: 3px; padding: 1px 0; }
.labelattn-explanations .checks { color: #666; font-size: 12px; }
.labelattn-explanations caption { caption-side: bottom; color: #666; font-size: 12px; padding-top: 6px; }
"""


def to_html(explanations: Explanations) -> HTML:
    """A table of explanations, one row each (texts × methods: a text's rows together): the text number, the
    method, the target and its probability, and the text with each word on a green (towards the target) or red
    (against it) background, scaled to the row's largest score, the score itself on hover; below the words,
    the row's diagnostics. Jupyter shows the result as the table; `str` of it is the HTML."""
    flat = flatten(explanations)
    texts = list(dict.fromkeys((exp.text, exp.text_pair) for exp in flat))
    rows = []
    for exp in flat:
        number = texts.index((exp.text, exp.text_pair)) + 1
        target = html.escape(exp.target_label)
        if exp.contrast_label is not None:
            target += f" rather than {html.escape(exp.contrast_label)}"
        notes = diagnostics(exp) + (["The text was cut: only the words shown were read."] if exp.truncated else [])
        checks = "".join(f'<div class="checks">{html.escape(note)}</div>' for note in notes)
        rows.append(
            f'<tr><td>{number}</td><td class="method">{html.escape(method_title(exp.method))}</td>'
            f'<td class="target">{target}</td><td class="probability">{exp.probability:.3f}</td>'
            f'<td><div class="text">{_words_html(exp)}</div>{checks}</td></tr>'
        )
    return HTML(
        f'<table class="labelattn-explanations"><style>{STYLE}</style>'
        "<caption>Green: the word pushes towards the target; red: against it. Each row is scaled to its largest "
        "score; hover a word for its score.</caption>"
        "<thead><tr><th>text</th><th>method</th><th>target</th><th>p(target)</th><th>words</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def save_html(path: str | Path, explanations: Explanations, title: str = "Explanations") -> Path:
    """Write `to_html(explanations)` as a standalone page (UTF-8) to `path` (its folder made if need be); returns
    the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    page = (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>\n'
        f"<body><h1>{html.escape(title)}</h1>\n{to_html(explanations)}\n</body></html>\n"
    )
    path.write_text(page, encoding="utf-8")
    return path


def plot(explanations: Explanations, ax: "Axes | None" = None) -> "Figure":
    """A heatmap of several explanations of one text: one row each, one column per word. Rows of one method
    share one colour scale (e.g. the classes of `top_k`); rows of several methods, whose scores have different
    units, are each scaled to their largest score. Draws on `ax`, else on a new `Figure` (not pyplot's: nothing
    stays open); returns the figure."""
    flat = flatten(explanations)
    words = flat[0].words
    if any(exp.words != words for exp in flat):
        raise ExplainerInputError("A heatmap shows the words of one text: give explanations of the same text.")
    methods = {exp.method for exp in flat}
    if len(methods) == 1:
        matrix = [list(exp.scores) for exp in flat]
        labels = [exp.target_label for exp in flat]
        title = f"{method_title(flat[0].method)}: {', '.join(dict.fromkeys(labels))}"
    else:
        matrix = [scaled(exp.scores) for exp in flat]
        labels = [f"{method_title(exp.method)}: {exp.target_label}" for exp in flat]
        title = "each row scaled to its largest score"
    return heatmap(matrix, labels, words, title, ax)


def heatmap(
    matrix: Sequence[Sequence[float]], rows: Sequence[str], words: Sequence[str], title: str, ax: "Axes | None" = None
) -> "Figure":
    """`matrix` (rows × words) as a heatmap: a diverging scale centred on 0 for signed scores, else one from 0."""
    if ax is None:
        from matplotlib.figure import Figure

        figure = Figure(figsize=(max(4.0, 0.55 * len(words) + 1.5), 0.45 * len(rows) + 1.6))
        ax = figure.add_subplot()
    top = max((abs(v) for row in matrix for v in row), default=1.0) or 1.0
    signed = min(min(row) for row in matrix) < 0
    image = ax.imshow(matrix, cmap="RdBu_r" if signed else "Reds", vmin=-top if signed else 0, vmax=top, aspect="auto")
    ax.set_xticks(range(len(words)), words, rotation=60, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_title(title)
    ax.figure.colorbar(image, ax=ax)
    ax.figure.tight_layout()
    return ax.figure
