"""`labelattn explain`: the words that drove a model's prediction, in the terminal and optionally as HTML.

labelattn explain models/trec-embedding "Who wrote Hamlet ?" --method integrated_gradients
labelattn explain --examples 5 --method shap --option n_samples=50 --html out.html
"""

import argparse
import ast
import html
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from . import DEFAULT_MODEL_DIR

if TYPE_CHECKING:  # explainers pulls in torch: imported in `run` only
    from explainers import Explanation


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        nargs="?",
        default=str(DEFAULT_MODEL_DIR),
        help=f"folder of a trained labelattn model (default: {DEFAULT_MODEL_DIR}, made by `labelattn train`)",
    )
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="texts to explain")
    parser.add_argument("--examples", type=int, default=0, metavar="N", help="also explain N test texts of TREC")
    parser.add_argument(
        "--method",
        default="integrated_gradients",
        help="explanation method, e.g. label_attention, integrated_gradients, shap (an unknown name lists them all)",
    )
    parser.add_argument("--target", help="class to explain, by name or index (default: the predicted class)")
    parser.add_argument(
        "--contrast", help='with --target: explain "target rather than this class" (a logit difference)'
    )
    parser.add_argument("--all-targets", action="store_true", help="explain every class of each text")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the method, e.g. n_steps=50 or baseline=zero (repeatable)",
    )
    parser.add_argument("--html", type=Path, metavar="FILE", help="also write the explanations as an HTML page")


def parse_target(value: str | None) -> int | str | None:
    """A class index when the value is a number, else a label name."""
    if value is None:
        return None
    return int(value) if value.lstrip("-").isdigit() else value


def parse_options(pairs: list[str]) -> dict:
    """`["n_steps=50", "baseline=zero"]` -> `{"n_steps": 50, "baseline": "zero"}` (Python literals, else strings)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--option {pair!r} is not KEY=VALUE, e.g. --option n_steps=50.")
        try:
            options[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            options[key] = value
    return options


def colour(word: str, value: float) -> str:
    """`word` on a green (for) or red (against) background whose strength is |value| in [0, 1] (24-bit ANSI)."""
    strength = min(abs(value), 1.0)
    base = (22, 163, 74) if value >= 0 else (220, 38, 38)
    r, g, b = (round(255 - (255 - c) * strength) for c in base)
    return f"\x1b[48;2;{r};{g};{b}m\x1b[30m{word}\x1b[0m"


def render(exp: "Explanation", use_colour: bool) -> str:
    """The explanation as terminal text: a title line, the text with highlighted words, and the word scores."""
    title = f"{exp.method} · {exp.target_label} (p={exp.probability:.3f})"
    if exp.contrast_label is not None:
        title += f" rather than {exp.contrast_label}"
    if exp.truncated:
        title += " · truncated"
    lines = [title]
    if use_colour:
        lines.append("".join(colour(piece, v) if v is not None else piece for piece, v in exp.segments()))
    lines.append("  ".join(f"{word} {score:+.3f}" for word, score in zip(exp.words, exp.scores, strict=True)))
    if exp.delta is not None:
        lines.append(f"F(x)={exp.score:.4f}  F(x')={exp.baseline_score:.4f}  delta={exp.delta:+.2e}")
    return "\n".join(lines)


def example_texts(n: int) -> list[str]:
    """The first `n` test texts of the default data set (TREC)."""
    from .data import load_data  # the data loader pulls in `datasets`: only when asked

    return list(load_data("trec").splits["test"]["text"][:n])


def run(args: argparse.Namespace) -> int:
    model_dir = Path(args.model)
    if not model_dir.is_dir():
        raise FileNotFoundError(
            f"No model folder at {model_dir}: give the folder of a trained model first (then the texts), "
            f"or train the default one with `labelattn train --output-dir {DEFAULT_MODEL_DIR}`."
        )
    if args.examples < 0:
        raise ValueError(f"--examples {args.examples}: give a number of texts, 0 or more.")
    texts = list(args.texts) + (example_texts(args.examples) if args.examples else [])
    if not texts:
        raise ValueError(
            'Nothing to explain: give texts after the model folder, e.g. "Who wrote Hamlet ?", or --examples N.'
        )
    if args.contrast is not None and args.target is None:
        raise ValueError("--contrast needs --target: explain --target A --contrast B, 'why A rather than B'.")

    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from explainers import explain

    model = AutoModelForSequenceClassification.from_pretrained(model_dir, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    target = parse_target(args.target)
    if args.contrast is not None:
        target = (target, parse_target(args.contrast))
    options = parse_options(args.option)
    if args.all_targets:
        if target is not None:
            raise ValueError("Give --all-targets or --target, not both.")
        options["targets"] = "all"
    results = explain(model, tokenizer, texts, method=args.method, target=target, **options)
    flat = [exp for item in results for exp in (item if isinstance(item, list) else [item])]

    use_colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    print("\n\n".join(render(exp, use_colour) for exp in flat))
    if args.html:
        body = "\n".join(exp.to_html() for exp in flat)
        page = f"<!doctype html><meta charset='utf-8'><title>{html.escape(str(model_dir))}</title>\n{body}\n"
        args.html.write_text(page, encoding="utf-8")
        print(f"\nWrote {args.html}")
    return 0
