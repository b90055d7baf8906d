"""`labelattn explain`: the words that drove a text classifier's prediction, for a few texts or a whole corpus.

A few texts, in the terminal (and optionally as HTML):
  labelattn explain models/trec-embedding "Who wrote Hamlet ?" --method integrated_gradients
  labelattn explain MODEL --examples 5 --method shap --option n_samples=50 --html out.html
  labelattn explain NLI_MODEL "A man plays a guitar." --pair "Someone makes music."   (a text pair)

A whole corpus, to a file (one row per text, or per class with --all-targets / --top-k), resumable:
  labelattn explain MODEL --data tickets.csv --method label_attention --output out/tickets.parquet --summary
  accelerate launch --num_processes 8 -m labelattn explain MODEL --data big.parquet --method integrated_gradients

Options are KEY=VALUE with VALUE read as JSON: --option n_steps=64 --option tolerance=null.
"""

import argparse
import html
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from labelattn import DEFAULT_MODEL_DIR
from labelattn.arguments import add_method_argument, add_model_arguments, add_option_argument
from labelattn.corpus.options import DATA_HELP, add_corpus_arguments

if TYPE_CHECKING:  # explainers pulls in torch: imported in `run` only
    from explainers import Explanation


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    parser.add_argument(
        "model",
        nargs="?",
        default=str(DEFAULT_MODEL_DIR),
        help=f"a text classifier: a local folder or a Hub id in the cache, any architecture (default: "
        f"{DEFAULT_MODEL_DIR}, made by `labelattn train`)",
    )
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="texts to explain")
    parser.add_argument(
        "--pair",
        action="append",
        default=[],
        metavar="TEXT_B",
        help="the second text of a pair (premise/hypothesis, question/passage): one --pair per TEXT, in order",
    )
    parser.add_argument("--examples", type=int, default=0, metavar="N", help="also explain N test texts of TREC")
    add_method_argument(parser)
    parser.add_argument("--target", help="class to explain, by name or index (default: the predicted class)")
    parser.add_argument(
        "--contrast", help='with --target: explain "target rather than this class" (a logit difference)'
    )
    parser.add_argument("--all-targets", action="store_true", help="explain every class of each text")
    parser.add_argument("--top-k", type=int, metavar="K", help="explain the K most probable classes of each text")
    add_option_argument(parser)
    parser.add_argument("--batch-size", type=int, default=16, help="texts explained together (default 16)")
    parser.add_argument("--html", type=Path, metavar="FILE", help="also write the explanations as an HTML page")
    add_model_arguments(parser)
    corpus = parser.add_argument_group("a whole corpus (--data)")
    corpus.add_argument("--data", metavar="DATA", help=f"explain every row of DATA instead of TEXTs: {DATA_HELP}")
    add_corpus_arguments(corpus, default_output="outputs/explanations/<data>-<method>.parquet")
    corpus.add_argument(
        "--summary",
        action="store_true",
        help="also write the words that push texts towards each class (FILE.summary/: Markdown, CSV, PNG); "
        "the same as `labelattn summarize FILE`",
    )


def parse_target(value: str | None) -> int | str | None:
    """A class index when the value is a number, else a label name."""
    if value is None:
        return None
    return int(value) if value.lstrip("-").isdigit() else value


def colour(word: str, value: float) -> str:
    """`word` on a green (for) or red (against) background whose strength is |value| in [0, 1] (24-bit ANSI)."""
    strength = min(abs(value), 1.0)
    base = (22, 163, 74) if value >= 0 else (220, 38, 38)
    r, g, b = (round(255 - (255 - c) * strength) for c in base)
    return f"\x1b[48;2;{r};{g};{b}m\x1b[30m{word}\x1b[0m"


def render(exp: "Explanation", use_colour: bool) -> str:
    """The explanation as terminal text: a title line, the text with highlighted words, the word scores, and what
    they explain in words (`explainers.outputs.describe`)."""
    from explainers.outputs import describe

    title = f"{exp.method} · {exp.target_label} (p={exp.probability:.3f})"
    if exp.contrast_label is not None:
        title += f" rather than {exp.contrast_label}"
    if exp.truncated:
        title += " · truncated"
    lines = [title]
    if use_colour and getattr(exp, "text_pair", None) is None:
        lines.append("".join(colour(piece, v) if v is not None else piece for piece, v in exp.segments()))
    lines.append("  ".join(f"{word} {score:+.3f}" for word, score in zip(exp.words, exp.scores, strict=True)))
    if exp.delta is not None:
        lines.append(f"F(x)={exp.score:.4f}  F(x')={exp.baseline_score:.4f}  delta={exp.delta:+.2e}")
    lines.append(describe(exp))
    return "\n".join(lines)


def example_texts(n: int) -> list[str]:
    """The first `n` test texts of the default data set (TREC)."""
    from labelattn.data.reading import load_data  # the data loader pulls in `datasets`: only when asked

    return list(load_data("trec").splits["test"]["text"][:n])


def check_arguments(args: argparse.Namespace) -> None:
    """Mistakes the arguments alone show, before the model loads."""
    if args.contrast is not None and args.target is None:
        raise ValueError("--contrast needs --target: explain --target A --contrast B, 'why A rather than B'.")
    if args.data is not None:
        if args.texts or args.examples or args.pair or args.html:
            raise ValueError("--data explains a corpus: drop the TEXTs, --pair, --examples and --html.")
        return
    if args.summary:
        raise ValueError("--summary summarizes a corpus: give --data (or run `labelattn summarize FILE`).")
    if args.examples < 0:
        raise ValueError(f"--examples {args.examples}: give a number of texts, 0 or more.")
    if args.pair and len(args.pair) != len(args.texts):
        raise ValueError(f"{len(args.pair)} --pair for {len(args.texts)} TEXTs: give one --pair per TEXT.")
    if not args.texts and not args.examples:
        raise ValueError(
            'Nothing to explain: give texts after the model, e.g. "Who wrote Hamlet ?", --examples N, or --data DATA.'
        )


def request(args: argparse.Namespace) -> dict:
    """The target and options of `explain` from the arguments (options parsed by the one shared parser)."""
    from explainers import parse_options

    target = parse_target(args.target)
    if args.contrast is not None:
        target = (target, parse_target(args.contrast))
    return {"target": target, "options": parse_options(args.option)}


def run(args: argparse.Namespace) -> int:
    check_arguments(args)
    if args.data is not None:
        return run_corpus(args)
    if not Path(args.model).exists() and args.model == str(DEFAULT_MODEL_DIR):
        raise FileNotFoundError(
            f"No model folder at {args.model}: give a model first (then the texts), or train the default one with "
            f"`labelattn train --output-dir {DEFAULT_MODEL_DIR}`."
        )
    from explainers import explain
    from labelattn.arguments import classifier_from_arguments

    texts = list(zip(args.texts, args.pair, strict=True)) if args.pair else list(args.texts)
    texts += example_texts(args.examples) if args.examples else []
    model, tokenizer = classifier_from_arguments(args)
    asked = request(args)
    results = explain(
        model,
        tokenizer,
        texts,
        method=args.method,
        target=asked["target"],
        targets="all" if args.all_targets else None,
        top_k=args.top_k,
        batch_size=args.batch_size,
        max_length=args.max_length,
        long_text=args.long_text,
        **asked["options"],
    )
    flat = [exp for item in results for exp in (item if isinstance(item, list) else [item])]

    use_colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    print("\n\n".join(render(exp, use_colour) for exp in flat))
    if args.html:
        body = "\n".join(exp.to_html() for exp in flat)
        page = f"<!doctype html><meta charset='utf-8'><title>{html.escape(str(args.model))}</title>\n{body}\n"
        args.html.write_text(page, encoding="utf-8")
        print(f"\nWrote {args.html}")
    return 0


def run_corpus(args: argparse.Namespace) -> int:
    """`--data`: every row of DATA explained, in shards, to --output (see `labelattn.corpus.jobs`)."""
    from labelattn.corpus.command import checked_output, open_corpus_run, run_to_file

    output = checked_output(args, "explanations", f"-{args.method}")  # before the explainers load torch
    from labelattn.corpus.jobs import explain_job
    from labelattn.corpus.process_state import process_state
    from labelattn.corpus.summarize import write_summary

    asked = request(args)
    dataset, model, tokenizer = open_corpus_run(args, output)
    job = explain_job(
        model,
        tokenizer,
        args.method,
        target=asked["target"],
        all_targets=args.all_targets,
        top_k=args.top_k,
        options=asked["options"],
        batch_size=args.batch_size,
        max_length=args.max_length,
        long_text=args.long_text,
    )
    report = run_to_file(job, dataset, output, args)
    if args.summary and process_state().is_main_process:
        folder = write_summary(report.dataset, output.with_name(output.name + ".summary"))
        print(f"labelattn: wrote the corpus summary to {folder}", file=sys.stderr)
    return 0
