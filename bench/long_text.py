"""Integrated Gradients on BBC News articles longer than the model reads: windows against truncation.

    .venv/bin/python bench/long_text.py [--model models/bbc-embedding] [--articles 3] [--docs]

For the BBC News articles nearest to 2,000 words (the model reads 128 tokens at a time), prints for
`long_text="truncate"` and `long_text="windows"`: the words explained, the windows, the largest completeness gap of
a window against its convergence delta, and the seconds per article (median of interleaved rounds). With `--docs`
the table goes into docs/explainers.md. Train the model first: `labelattn train --data bbc-news --output-dir
models/bbc-embedding`.
"""

import argparse
import statistics
import time
import warnings
from pathlib import Path

from _docs_block import write_into_docs

from explainers import explain, load_classifier
from labelattn.data.builtin import BUILTIN

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python bench/long_text.py --docs"


def articles_near(words: int, count: int) -> list[str]:
    texts = BUILTIN["bbc-news"][0]().texts
    return sorted(texts, key=lambda text: abs(len(text.split()) - words))[:count]


def run(model, tokenizer, text: str, long_text: str, max_length: int):
    start = time.perf_counter()
    with warnings.catch_warnings():  # truncation is the point of one of the two ways
        warnings.simplefilter("ignore")
        exp = explain(model, tokenizer, text, method="integrated_gradients", long_text=long_text, max_length=max_length)
    return exp, time.perf_counter() - start


def completeness(exp) -> tuple[float, float, int]:
    """The largest |sum of a window's word scores − (F(x) − F(x′))| beyond its |delta| and float32 rounding (1e-5 of
    |F(x)|, summing a window's words: ≤ 0 means within), the largest |delta| relative to |F(x) − F(x′)|, and the number
    of windows."""
    windows = exp.extras.get("windows") or [
        {"sum_of_scores": sum(exp.scores), "score": exp.score, "baseline_score": exp.baseline_score, "delta": exp.delta}
    ]
    over = max(
        abs(w["sum_of_scores"] - (w["score"] - w["baseline_score"]))
        - abs(w["delta"])
        - 1e-5 * max(1.0, abs(w["score"]))
        for w in windows
    )
    relative = max(abs(w["delta"]) / max(abs(w["score"] - w["baseline_score"]), 1e-12) for w in windows)
    return over, relative, len(windows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(REPO_ROOT / "models" / "bbc-embedding"))
    parser.add_argument("--articles", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--docs", action="store_true")
    args = parser.parse_args()
    model, tokenizer = load_classifier(args.model)
    texts = articles_near(2000, args.articles)
    rows = []
    for i, text in enumerate(texts):
        times, explained = {"truncate": [], "windows": []}, {}
        for _ in range(args.rounds):  # interleaved: both ways see the same load
            for way in times:
                explained[way], seconds = run(model, tokenizer, text, way, args.max_length)
                times[way].append(seconds)
        truncated, results = explained["truncate"], explained["windows"]
        over, relative, windows = completeness(results)
        rows.append(
            f"| {i + 1} | {len(text.split())} | {len(truncated.words)} | {len(results.words)} | {windows} | "
            f"{'yes' if over <= 0 else f'no ({over:.1e})'} | {relative:.2%} | "
            f"{statistics.median(times['truncate']):.2f} | {statistics.median(times['windows']):.2f} | "
            f"{statistics.median(times['windows']) / statistics.median(times['truncate']):.1f}× |"
        )
    table = "\n".join(
        [
            f"`{COMMAND}` (model `{Path(args.model).name}`, {args.max_length} tokens a window, IG at its defaults, "
            f"median of {args.rounds} interleaved rounds):",
            "",
            "| article | words (split at spaces) | words explained, truncated | words explained, windows | windows | "
            "every window complete within its delta | largest \\|delta\\| / \\|F(x) − F(x′)\\| | s, truncated | "
            "s, windows | windows / truncated |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if args.docs:
        write_into_docs(table, REPO_ROOT / "docs" / "explainers.md", "long-text")


if __name__ == "__main__":
    main()
