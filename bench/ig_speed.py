"""Integrated Gradients on a plain transformers classifier: labelattn's explainers against transformers-interpret
and against Captum called one text at a time.

The model (`--model`, default `models/trec-bert`: the all-MiniLM-L6-v2 encoder under transformers' own
`BertForSequenceClassification`, fine-tuned on TREC by `bench/finetune_bert_trec.py`) is loaded with
`explainers.load_classifier`; the texts are the first `--texts` TREC test questions; every way explains the
predicted class against the baseline [CLS] [PAD]… [SEP]:

- library: `explain(..., method="integrated_gradients")` with its defaults (Gauss-Legendre, 32 steps, texts in
  length-sorted groups of 16 with all steps in one batch, and a text whose |delta| > 1% of |F(x) − F(x′)| is
  integrated again with twice the steps); and the same with 16 steps, with and without that tolerance;
- transformers-interpret 0.10: `SequenceClassificationExplainer(model, tokenizer)(text)`, one text per call, its
  default 50 steps (Captum's `LayerIntegratedGradients`, all steps in one batch), explaining the softmax
  probability of the predicted class. It shows no delta, but the Captum call it makes computes one: it is read
  from `explainer.attributions.delta`, and F(x), F(x′) from its own forward function, inputs and reference;
- captum: `LayerIntegratedGradients` per text on the target logit with Captum's default 50 steps, all in one
  batch (`internal_batch_size=None`); the predicted classes are given to it (predicted outside the timing).

Accuracy is the share of texts with |delta| ≤ 1% of |F(x) − F(x′)|, each way with its own F. The texts are cut
into chunks and the ways run on each chunk in a rotating order (A, B, C, then B, C, A, ...), so that load from
other processes hits all of them alike. A way's speed-up is transformers-interpret's total time over its own and,
in brackets, the median of the per-chunk ratios. The table is printed and written into docs/explainers.md between
the benchmark markers.

    .venv/bin/python bench/finetune_bert_trec.py   # once, 5 to 15 min
    .venv/bin/python bench/ig_speed.py
"""

import argparse
import os
import platform
import statistics
import sys
import time
from functools import partial
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from _docs_block import write_into_docs
from captum.attr import LayerIntegratedGradients
from transformers_interpret import SequenceClassificationExplainer

from explainers import explain, get_explainer, load_classifier
from explainers.forward import ExplainedOutput
from explainers.words import tokenize
from labelattn.data import load_data

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python bench/ig_speed.py"
CAPTUM_STEPS = 50
# The library's default, and two settings with fewer steps: what the step count buys on this model.
LIBRARY = {
    "library": {},
    "library, 16 steps": {"n_steps": 16},
    "library, 16 steps, no tolerance": {"n_steps": 16, "tolerance": None},
}
WAYS = (*LIBRARY, "transformers_interpret", "captum")
LABELS = {
    "library": 'labelattn `explain(method="integrated_gradients")`, defaults (32 steps, tolerance 1%)',
    "library, 16 steps": "labelattn, `n_steps=16` (tolerance 1%)",
    "library, 16 steps, no tolerance": "labelattn, `n_steps=16, tolerance=None`",
    "transformers_interpret": "transformers-interpret 0.10, defaults (50 steps, one text per call)",
    "captum": "Captum `LayerIntegratedGradients` per text, 50 steps in one batch",
}


def accurate(delta: float, output: float, baseline: float) -> bool:
    return abs(delta) <= 0.01 * abs(output - baseline)


def library(model, tokenizer, texts: list[str], **options) -> list[tuple[bool, int]]:
    """Per text: |delta| ≤ 1%, and the steps it took."""
    return [
        (accurate(e.delta, e.score, e.baseline_score), e.extras["n_steps"])
        for e in explain(model, tokenizer, texts, **options)
    ]


def transformers_interpret(explainer: SequenceClassificationExplainer, texts: list[str]) -> list[dict]:
    """One call per text; what its accuracy needs is gathered after the timing (`ti_accuracy`)."""
    runs = []
    for text in texts:
        explainer(text)
        e = explainer
        runs.append(
            {
                "delta": float(e.attributions.delta[0]),
                "inputs": (e.input_ids, e.token_type_ids, e.position_ids, e.attention_mask),
                "reference": (e.ref_input_ids, e.ref_token_type_ids, e.ref_position_ids, e.attention_mask),
                # Where its path starts: LayerIntegratedGradients moves only the word embeddings, so the path keeps
                # the text's token types and positions, which its reference sets to 0.
                "path_start": (e.ref_input_ids, e.token_type_ids, e.position_ids, e.attention_mask),
                "sum": float(e.attributions._attributions.sum()),
                "class": e.selected_index,
            }
        )
    return runs


@torch.no_grad()
def ti_accuracy(explainer: SequenceClassificationExplainer, runs: list[dict]) -> tuple[list[bool], list[bool]]:
    """Per text, |delta| ≤ 1% for transformers-interpret's own F (the class's softmax probability): with the delta
    its Captum call returned (against its reference x′), and with the quadrature's own error (against where its
    path starts)."""
    own, quadrature = [], []
    for run in runs:
        explainer.selected_index = run["class"]
        output, baseline, start = (
            float(explainer._forward(*run[key])[0]) for key in ("inputs", "reference", "path_start")
        )
        own.append(accurate(run["delta"], output, baseline))
        quadrature.append(accurate(run["sum"] - (output - start), output, start))
    return own, quadrature


def captum_per_text(model, ig_explainer, items, targets) -> list[bool]:
    """One `LayerIntegratedGradients.attribute` call per text, unpadded, all steps in one batch."""
    forward = ExplainedOutput(model, "logit")
    lig = LayerIntegratedGradients(forward, model.get_input_embeddings())
    ok = []
    for item, target in zip(items, targets, strict=True):
        batch = ig_explainer.collate([item])
        baseline = batch.input_ids.masked_fill(batch.is_word, ig_explainer.baseline_id)
        args = forward.args(batch, torch.tensor([target]), None)
        _, delta = lig.attribute(
            batch.input_ids,
            baselines=baseline,
            additional_forward_args=args,
            n_steps=CAPTUM_STEPS,
            return_convergence_delta=True,
        )
        with torch.no_grad():
            both = (torch.cat([a, a]) if isinstance(a, torch.Tensor) else a for a in args)
            ends = forward(torch.cat([batch.input_ids, baseline]), *both)
        ok.append(accurate(float(delta[0]), float(ends[0]), float(ends[1])))
    return ok


def compare(model_path: str, texts: list[str], chunk_size: int) -> dict:
    model, tokenizer = load_classifier(model_path)
    ig_explainer = get_explainer(model, tokenizer, "integrated_gradients")
    items = tokenize(tokenizer, texts, ig_explainer.max_length(None))
    targets = ig_explainer.predict(items, 16).argmax(-1).tolist()
    ti = SequenceClassificationExplainer(model, tokenizer)
    for warm_up in (partial(library, model, tokenizer), partial(transformers_interpret, ti)):
        warm_up(texts[:2])

    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    accuracy: dict[str, list[bool]] = {way: [] for way in (*WAYS, "ti_quadrature")}
    steps: dict[str, list[int]] = {way: [] for way in LIBRARY}
    starts = range(0, len(texts), chunk_size)
    for c, start in enumerate(starts):
        part = slice(start, min(start + chunk_size, len(texts)))
        calls = {
            **{way: partial(library, model, tokenizer, texts[part], **options) for way, options in LIBRARY.items()},
            "transformers_interpret": partial(transformers_interpret, ti, texts[part]),
            "captum": partial(captum_per_text, model, ig_explainer, items[part], targets[part]),
        }
        for way in WAYS[c % len(WAYS) :] + WAYS[: c % len(WAYS)]:
            begin = time.perf_counter()
            result = calls[way]()
            seconds[way].append(time.perf_counter() - begin)
            if way == "transformers_interpret":
                own, quadrature = ti_accuracy(ti, result)
                accuracy[way] += own
                accuracy["ti_quadrature"] += quadrature
            elif way in LIBRARY:
                accuracy[way] += [ok for ok, _ in result]
                steps[way] += [n for _, n in result]
            else:
                accuracy[way] += result
        report = ", ".join(f"{way} {seconds[way][-1]:.1f}s" for way in WAYS)
        print(f"  chunk {c + 1}/{len(starts)}: {report}", flush=True)

    totals = {way: sum(seconds[way]) for way in WAYS}
    return {
        "model": model_path,
        "architecture": type(model).__name__,
        "texts": len(texts),
        "tokens": statistics.mean(len(item.input_ids) for item in items),
        "per_text": {way: totals[way] / len(texts) for way in WAYS},
        # transformers-interpret's time over each way's: how many times faster the way is.
        "speedup": {way: totals["transformers_interpret"] / totals[way] for way in WAYS},
        "median_speedup": {
            way: statistics.median(
                ti / s for ti, s in zip(seconds["transformers_interpret"], seconds[way], strict=True)
            )
            for way in WAYS
        },
        "accurate": {way: sum(ok) / len(ok) for way, ok in accuracy.items()},
        "steps": {way: statistics.mean(n) for way, n in steps.items()},
    }


def markdown(result: dict, load: tuple[float, float], command: str) -> str:
    lines = [
        f"`{command}` — {result['model']} ({result['architecture']}), {result['texts']} TREC test questions "
        f"(mean {result['tokens']:.1f} tokens); {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}, load average {load[0]:.1f} before "
        f"/ {load[1]:.1f} after (the machine was shared with other work: seconds are noisy, the ratios were "
        "measured in the same run on interleaved chunks).",
        "",
        "| way | mean steps | seconds per text | speed-up over transformers-interpret (median of chunks) | "
        "texts with \\|delta\\| ≤ 1% \\|F(x) − F(x′)\\| |",
        "|---|---|---|---|---|",
    ]
    ok = result["accurate"]
    for way in WAYS:
        steps = f"{result['steps'][way]:.1f}" if way in LIBRARY else "50"
        accuracy = f"{ok[way]:.0%}"
        if way == "transformers_interpret":
            accuracy += f" (against where its path starts: {ok['ti_quadrature']:.0%})"
        lines.append(
            f"| {LABELS[way]} | {steps} | {result['per_text'][way]:.3f} | **{result['speedup'][way]:.2f}×** "
            f"({result['median_speedup'][way]:.2f}) | {accuracy} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/trec-bert", help="a model folder or cached Hub id")
    parser.add_argument("--texts", type=int, default=200, help="TREC test questions to explain")
    parser.add_argument("--chunk-size", type=int, default=16, help="texts per interleaving round")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--docs", type=Path, default=REPO_ROOT / "docs" / "explainers.md", help="file to update")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    texts = list(load_data("trec").splits["test"]["text"][: args.texts])
    before = os.getloadavg()[0]
    result = compare(args.model, texts, args.chunk_size)
    command = " ".join([COMMAND, *(a for a in sys.argv[1:] if not a.startswith("--docs") and a != str(args.docs))])
    table = markdown(result, (before, os.getloadavg()[0]), command)
    print(table)
    write_into_docs(table, args.docs, "ig_speed")
    print(f"\nwritten into {args.docs}")


if __name__ == "__main__":
    main()
