"""SHAP on words: seconds per text and the error against exact Shapley values, labelattn's sampler against
Captum's `ShapleyValueSampling` (what `method="shap"` used before: 25 independent orderings, no error reported).

The model (`--model`, default `models/trec-bert`, see `bench/finetune_bert_trec.py`) explains its predicted
class; an absent word has all its sub-tokens replaced by [PAD]. Ways:

- default: `explain(..., method="shap")` with its defaults (antithetic pairs of orderings until the words'
  standard errors average at most 10% of the mean |φ|, 8 to 32 orderings);
- fixed 24: the same sampler with `n_samples=24` (12 antithetic pairs), no stopping rule;
- captum 25: `ShapleyValueSampling(n_samples=25, perturbations_per_eval=64)` over the same words.

Speed: the first `--texts` TREC test questions, in chunks run in a rotating order (A, B, C, then B, C, A, ...)
so that load from other processes hits all ways alike. Error: on the first `--exact-texts` test questions of 4 to
8 words, where all 2^n coalitions can be evaluated, the exact Shapley values; the error of a text is
mean_w |φ_w − exact_w| / mean_w |exact_w|, and for the sampler the share of words whose error is within two
reported standard errors tells whether those errors can be trusted. The table goes into docs/explainers.md.

    .venv/bin/python bench/shap_error.py
"""

import argparse
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from _docs_block import write_into_docs
from captum.attr import ShapleyValueSampling

from explainers import explain, get_explainer, load_classifier, predict
from explainers.checks import check_max_length
from explainers.methods.forward import ExplainedOutput
from explainers.methods.shap import WordCoalitions
from explainers.outputs import default_output
from explainers.words import TokenizedText, tokenize
from labelattn.data.reading import load_data

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python bench/shap_error.py"
WAYS = ("default", "fixed 24", "captum 25")


def captum_shapley(model, shap, item: TokenizedText, target: int) -> list[float]:
    """Word values by Captum's `ShapleyValueSampling` (the feature mask groups each word's sub-tokens), of the
    output `method="shap"` explains by default."""
    batch = shap.collate([item])
    is_word = batch.is_word[0]
    forward = ExplainedOutput(model, default_output(model))

    def on_words(word_ids: torch.Tensor, *args) -> torch.Tensor:
        full = batch.input_ids.expand(word_ids.shape[0], -1).clone()
        full[:, is_word] = word_ids
        return forward(full, *args)

    with torch.no_grad():
        phi = ShapleyValueSampling(on_words).attribute(
            batch.input_ids[:, is_word],
            baselines=shap.baseline_id,
            additional_forward_args=forward.args(batch, torch.tensor([target]), None),
            feature_mask=batch.word_index[:, is_word],
            n_samples=25,
            perturbations_per_eval=64,
        )
    values = torch.zeros(len(item.words), dtype=phi.dtype)
    return values.scatter_(0, batch.word_index[0, is_word], phi[0]).tolist()


def run_way(way: str, model, tokenizer, shap, items, texts, targets) -> list[dict]:
    if way == "captum 25":
        return [{"scores": captum_shapley(model, shap, i, t)} for i, t in zip(items, targets, strict=True)]
    options = {"n_samples": 24} if way == "fixed 24" else {}
    results = explain(model, tokenizer, texts, method="shap", target=targets, **options)
    return [
        {"scores": e.scores, "errors": e.extras["standard_errors"], "samples": e.extras["n_samples"]} for e in results
    ]


@torch.no_grad()
def exact_shapley(model, shap, item: TokenizedText, target: int) -> torch.Tensor:
    """Exact Shapley values `(num_words,)` from F of all 2^n coalitions of the words."""
    n = len(item.words)
    forward = ExplainedOutput(model, default_output(model))  # what `method="shap"` explains by default
    coalitions = WordCoalitions(forward, shap.collate([item]), torch.tensor([target]), None, shap.baseline_id)
    masks = torch.arange(2**n)[:, None].bitwise_and(2 ** torch.arange(n)) > 0  # (2^n, n)
    values = coalitions(masks, 256)
    sizes = masks.sum(-1)
    phi = torch.zeros(n, dtype=torch.float64)
    for w in range(n):
        without = ~masks[:, w]
        size = sizes[without]
        weight = torch.tensor(
            [math.factorial(s) * math.factorial(n - s - 1) / math.factorial(n) for s in size.tolist()]
        )
        phi[w] = (weight * (values[torch.nonzero(without)[:, 0] + 2**w] - values[without])).sum()
    return phi


def relative_error(scores: list[float], exact: torch.Tensor) -> float:
    return float((torch.tensor(scores, dtype=torch.float64) - exact).abs().mean() / exact.abs().mean())


def measure(model_path: str, texts: list[str], exact_texts: list[str], chunk_size: int) -> dict:
    model, tokenizer = load_classifier(model_path)
    shap = get_explainer(model, tokenizer, "shap")
    limit = check_max_length(None, model, tokenizer)
    items = tokenize(tokenizer, texts, limit)
    targets = predict(model, tokenizer, texts, max_length=limit).probabilities.argmax(-1).tolist()
    for way in WAYS:  # warm-up
        run_way(way, model, tokenizer, shap, items[:2], texts[:2], targets[:2])

    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    results: dict[str, list[dict]] = {way: [] for way in WAYS}
    starts = range(0, len(texts), chunk_size)
    for c, start in enumerate(starts):
        part = slice(start, min(start + chunk_size, len(texts)))
        for way in WAYS[c % len(WAYS) :] + WAYS[: c % len(WAYS)]:
            begin = time.perf_counter()
            results[way] += run_way(way, model, tokenizer, shap, items[part], texts[part], targets[part])
            seconds[way].append(time.perf_counter() - begin)
        print(f"  chunk {c + 1}/{len(starts)}: " + ", ".join(f"{w} {seconds[w][-1]:.1f}s" for w in WAYS), flush=True)

    exact_items = tokenize(tokenizer, exact_texts, limit)
    exact_targets = predict(model, tokenizer, exact_texts, max_length=limit).probabilities.argmax(-1).tolist()
    exact = [exact_shapley(model, shap, i, t) for i, t in zip(exact_items, exact_targets, strict=True)]
    errors: dict[str, list[float]] = {}
    covered: dict[str, list[bool]] = {}
    for way in WAYS:
        runs = run_way(way, model, tokenizer, shap, exact_items, exact_texts, exact_targets)
        errors[way] = [relative_error(r["scores"], e) for r, e in zip(runs, exact, strict=True)]
        if "errors" in runs[0]:
            covered[way] = [
                abs(s - float(x)) <= 2 * se
                for r, e in zip(runs, exact, strict=True)
                for s, x, se in zip(r["scores"], e, r["errors"], strict=True)
            ]
    reported = [
        statistics.mean(r["errors"]) / max(statistics.mean(abs(s) for s in r["scores"]), 1e-12)
        for r in results["default"]
    ]
    return {
        "model": model_path,
        "texts": len(texts),
        "tokens": statistics.mean(len(i.input_ids) for i in items),
        "words": statistics.mean(len(i.words) for i in items),
        "exact_texts": len(exact_texts),
        "exact_words": statistics.mean(len(i.words) for i in exact_items),
        "per_text": {way: sum(seconds[way]) / len(texts) for way in WAYS},
        "median_ratio": {
            way: statistics.median(s / d for s, d in zip(seconds[way], seconds["default"], strict=True)) for way in WAYS
        },
        "samples": {way: statistics.mean(r["samples"] for r in results[way]) for way in WAYS[:2]},
        "reported": statistics.median(reported),
        "error": {way: statistics.mean(v) for way, v in errors.items()},
        "covered": {way: sum(v) / len(v) for way, v in covered.items()},
    }


def markdown(r: dict, load: tuple[float, float], command: str) -> str:
    labels = {
        "default": "labelattn `shap`, defaults (8–32 orderings, stops at a mean standard error of 10%)",
        "fixed 24": "labelattn `shap`, `n_samples=24` (12 antithetic pairs)",
        "captum 25": "Captum `ShapleyValueSampling`, 25 orderings (the former default)",
    }
    lines = [
        f"`{command}` — {r['model']}; speed on {r['texts']} TREC test questions (mean {r['tokens']:.1f} tokens, "
        f"{r['words']:.1f} words), error on {r['exact_texts']} questions of 4–8 words (mean {r['exact_words']:.1f}) "
        f"against exact Shapley values; {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch "
        f"threads, load average {load[0]:.1f} before / {load[1]:.1f} after (shared machine: seconds are noisy, "
        "the ratios come from interleaved chunks of the same run).",
        "",
        "| way | seconds per text | × default's time (median of chunks) | orderings per text | mean error vs exact "
        "(share of mean \\|φ\\|) | words within 2 reported standard errors |",
        "|---|---|---|---|---|---|",
    ]
    for way in WAYS:
        samples = f"{r['samples'][way]:.1f}" if way in r["samples"] else "25"
        covered = f"{r['covered'][way]:.0%}" if way in r["covered"] else "— (none reported)"
        lines.append(
            f"| {labels[way]} | {r['per_text'][way]:.3f} | {r['median_ratio'][way]:.2f} | {samples} | "
            f"{r['error'][way]:.1%} | {covered} |"
        )
    lines += [
        "",
        f"Median reported standard error of the default relative to the mean \\|φ\\| of its text: {r['reported']:.1%}.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/trec-bert", help="a model folder or cached Hub id")
    parser.add_argument("--texts", type=int, default=100, help="TREC test questions timed")
    parser.add_argument("--exact-texts", type=int, default=30, help="questions of 4-8 words compared with exact values")
    parser.add_argument("--chunk-size", type=int, default=10, help="texts per interleaving round")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--docs", type=Path, default=REPO_ROOT / "docs" / "explainers.md", help="file to update")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    test = list(load_data("trec").splits["test"]["text"])
    short = [t for t in test if 4 <= len(t.split()) <= 8][: args.exact_texts]
    before = os.getloadavg()[0]
    result = measure(args.model, test[: args.texts], short, args.chunk_size)
    command = " ".join([COMMAND, *(a for a in sys.argv[1:] if not a.startswith("--docs") and a != str(args.docs))])
    table = markdown(result, (before, os.getloadavg()[0]), command)
    print(table)
    write_into_docs(table, args.docs, "shap_error")
    print(f"\nwritten into {args.docs}")


if __name__ == "__main__":
    main()
