"""Texts longer than the model reads: windows against truncation, and the cost of windows as texts grow.

    .venv/bin/python bench/long_text.py [--model models/bbc-embedding] [--articles 3] [--docs]
    .venv/bin/python bench/long_text.py --scaling [--docs]
    .venv/bin/python bench/long_text.py --truncate-cost

For the BBC News articles nearest to 2,000 words (the model reads 128 tokens at a time), prints for
`long_text="truncate"` and `long_text="windows"` of Integrated Gradients: the words explained, the windows, the
largest completeness gap of a window against its convergence delta, and the seconds per article (median of
interleaved rounds). With `--scaling`, instead: the seconds and microseconds per word of `predict` and of
`explain(method="label_attention")` with `long_text="windows"` on texts of 1,000, 10,000 and 100,000 words (BBC News
articles one after another), which are equal per word when the cost is linear in the text's length. With `--docs`
the table goes into docs/explainers.md. With `--truncate-cost`: the seconds and peak memory of tokenizing
one row of about 2.2 million characters (CJK, then English) to keep `--max-length` tokens, through the prefix
that holds them (`explainers.words.kept_prefix`) and whole, with the MiniLM tokenizer (no model needed). The other
modes need the model: `labelattn train --data bbc-news --output-dir models/bbc-embedding`.
"""

import argparse
import itertools
import statistics
import time
import warnings
from pathlib import Path

import torch
from _docs_block import write_into_docs

from explainers import explain, load_classifier, predict
from explainers.checks import check_max_length
from labelattn.data.builtin import BUILTIN

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python bench/long_text.py --docs"
SCALING_COMMAND = ".venv/bin/python bench/long_text.py --scaling --docs"
SCALING_WORDS = (1_000, 10_000, 100_000)


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


def text_of(words: int) -> str:
    """The first `words` words (split at spaces) of the BBC News articles, one after another."""
    articles = itertools.cycle(BUILTIN["bbc-news"][0]().texts)
    taken: list[str] = []
    while len(taken) < words:
        taken += next(articles).split()
    return " ".join(taken[:words])


def scaling(model, tokenizer, rounds: int, sizes: list[int]) -> str:
    """The seconds and µs per word of `predict` and label attention's `explain` with windows, by text length."""
    ways = {
        "predict": lambda text: predict(model, tokenizer, text, long_text="windows"),
        "explain": lambda text: explain(model, tokenizer, text, method="label_attention", long_text="windows"),
    }
    texts = {words: text_of(words) for words in sizes}
    times = {(way, words): [] for way in ways for words in texts}
    for _ in range(rounds):  # interleaved: every size and way sees the same load
        for words, text in texts.items():
            for way, call in ways.items():
                start = time.perf_counter()
                call(text)
                times[way, words].append(time.perf_counter() - start)
    rows = []
    for words in texts:
        cells = []
        for way in ways:
            seconds = statistics.median(times[way, words])
            cells += [f"{seconds:.2f}", f"{seconds / words * 1e6:.0f}"]
        rows.append(f"| {words:,} | " + " | ".join(cells) + " |")
    return "\n".join(
        [
            f"`{SCALING_COMMAND}` (model `{Path(model.name_or_path).name}`, windows of "
            f"{check_max_length(None, model, tokenizer)} tokens, {torch.get_num_threads()} threads, median of {rounds} "
            "interleaved rounds; words split at spaces):",
            "",
            "| words | predict, s | predict, µs/word | explain (label attention), s | explain, µs/word |",
            "|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )


ROWS = {"CJK": "漢字の文章を読む。" * 250_000, "English": "the quick brown fox jumps over the lazy dog " * 50_000}


def tokenize_one_row(name: str, whole: bool, max_length: int) -> tuple[float, float, int, bool]:
    """In a process of its own (its peak memory is this row's): seconds, peak MB over the start, tokens, truncated."""
    import resource

    from transformers import AutoTokenizer

    from explainers import words
    from labelattn import minilm_path

    tokenizer, text = AutoTokenizer.from_pretrained(minilm_path()), ROWS[name]
    if whole:
        words.PREFIX_CHARS_PER_TOKEN = len(text)  # no prefix is tried: the text is tokenized whole
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "only its first ... words are explained"
        item = words.tokenize(tokenizer, [text], max_length)[0]
    seconds = time.perf_counter() - start
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    return seconds, grown, len(item.input_ids), item.truncated


def truncate_cost(max_length: int) -> None:
    """One huge row tokenized to keep `max_length` tokens, through its prefix and whole, each in a fresh process."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    for name, text in ROWS.items():
        for way in ("prefix", "whole"):
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                seconds, grown, tokens, truncated = pool.submit(
                    tokenize_one_row, name, way == "whole", max_length
                ).result()
            print(
                f"{name}, {len(text):,} characters, {way}: {seconds:.2f} s, peak memory +{grown:,.0f} MB, "
                f"{tokens} tokens, truncated {truncated}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(REPO_ROOT / "models" / "bbc-embedding"))
    parser.add_argument("--articles", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scaling", action="store_true", help="time windows at 1,000 to 100,000 words instead")
    parser.add_argument("--words", type=int, nargs="+", default=list(SCALING_WORDS), help="--scaling's text lengths")
    parser.add_argument("--truncate-cost", action="store_true", help="time one huge row's truncation instead")
    parser.add_argument("--docs", action="store_true")
    args = parser.parse_args()
    if args.truncate_cost:
        truncate_cost(args.max_length)
        return
    model, tokenizer = load_classifier(args.model)
    if args.scaling:
        table = scaling(model, tokenizer, args.rounds, args.words)
        print(table)
        if args.docs:
            write_into_docs(table, REPO_ROOT / "docs" / "explainers.md", "long-text-scaling")
        return
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
