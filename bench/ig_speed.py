"""Integrated Gradients on a plain transformers classifier: passes, time and accuracy of labelattn's rules beside
an oracle, transformers-interpret and Captum called one text at a time.

The model (`--model`, default `models/trec-bert`: the all-MiniLM-L6-v2 encoder under transformers' own
`BertForSequenceClassification`, fine-tuned on TREC by `bench/finetune_bert_trec.py`) is loaded with
`explainers.load_classifier`; the texts are the first `--texts` TREC test questions; every way explains the
predicted class against the baseline [CLS] [PAD]… [SEP], and all but transformers-interpret explain the
library's default F for the model (for this single-label classifier the logit minus the mean logit):

- oracle: Gauss–Legendre with, for each text, the fewest nodes that bring its |delta| within 1% of
  |F(x) − F(x′)| (found beforehand by trying 1, 2, 3, ... nodes; not timed), the texts of one node count
  explained together: what a rule that knew each text's need in advance would spend;
- library: `explain(..., method="integrated_gradients")` with its defaults (the adaptive Simpson rule, 1%
  tolerance, texts in length-sorted groups of 16);
- library, Gauss–Legendre 32: the previous default (`integration="gausslegendre", n_steps=32`): a text that
  misses 1% is integrated again from scratch with 64 nodes (then 128, ...);
- transformers-interpret 0.10: `SequenceClassificationExplainer(model, tokenizer)(text)`, one text per call, its
  default 50 steps (Captum's `LayerIntegratedGradients`, all steps in one batch), explaining the softmax
  probability of the predicted class. It shows no delta, but the Captum call it makes computes one: it is read
  from `explainer.attributions.delta`, and F(x), F(x′) from its own forward function, inputs and reference;
- captum: `LayerIntegratedGradients` per text on that F with Captum's default 50 steps, all in one
  batch, and `return_convergence_delta=True`; the predicted classes are given to it (predicted untimed).

Passes per text are the model evaluations that integrate it: gradient passes (one forward and one backward pass
of one row, at one node) and forward-only passes (F(x) and F(x′) for Captum's layer endpoints, and two more for
`return_convergence_delta`). The adaptive rule's x and x′ are two of its nodes. The one forward pass that
predicts the class is the same in every way and not counted.

Accuracy: the share of texts with |delta| ≤ 1% of |F(x) − F(x′)|, each way with its own F; and for the ways that
explain the library's F, the error of the word scores themselves, ‖s − s_ref‖ / ‖s_ref‖, against a reference of 128
Gauss–Legendre nodes (untimed; `--no-reference` skips it).

The texts are cut into chunks and the ways run on each chunk in a rotating order (A, B, C, then B, C, A, ...),
so that load from other processes hits all of them alike. A way's speed-up is transformers-interpret's total
time over its own and, in brackets, the median of the per-chunk ratios. The table is printed and written into
docs/explainers.md between the benchmark markers.

    .venv/bin/python bench/finetune_bert_trec.py   # once
    nice .venv/bin/python bench/ig_speed.py
"""

import argparse
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from functools import partial
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from _docs_block import write_into_docs
from captum.attr import LayerIntegratedGradients
from tqdm import tqdm
from transformers_interpret import SequenceClassificationExplainer

from explainers import explain, get_explainer, load_classifier
from explainers.checks import check_max_length
from explainers.methods.forward import ExplainedOutput
from explainers.outputs import PHRASES, default_output
from explainers.words import tokenize
from labelattn.data.reading import load_data

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python bench/ig_speed.py"
TOLERANCE = 0.01
CAPTUM_STEPS = 50
ORACLE_MAX = 128
REFERENCE = {"integration": "gausslegendre", "n_steps": 128, "tolerance": None}
PREVIOUS = {"integration": "gausslegendre", "n_steps": 32}
WAYS = ("oracle", "library", "previous", "transformers_interpret", "captum")
LABELS = {
    "oracle": "oracle: Gauss–Legendre, each text's fewest nodes for 1%",
    "library": 'labelattn `explain(method="integrated_gradients")`, defaults (adaptive, tolerance 1%)',
    "previous": 'labelattn, `integration="gausslegendre", n_steps=32` (the previous default; tolerance 1%)',
    "transformers_interpret": "transformers-interpret 0.10, defaults (50 steps, one text per call)",
    "captum": "Captum `LayerIntegratedGradients` per text, 50 steps in one batch",
}


def accurate(delta: float, output: float, baseline: float) -> bool:
    return abs(delta) <= TOLERANCE * abs(output - baseline)


def run_library(model, tokenizer, texts: list[str], **options) -> list[dict]:
    """Per text: within 1%, gradient and forward-only passes, word scores."""
    runs = []
    for e in explain(model, tokenizer, texts, method="integrated_gradients", **options):
        passes = e.extras["passes"]
        if options.get("integration", "adaptive") == "adaptive":
            gradient = passes
        else:  # each attempt of a fixed rule: its nodes and two forward passes (Captum's endpoints)
            attempts = (e.extras["n_steps"] // options["n_steps"]).bit_length()
            gradient = passes - 2 * attempts
        runs.append(
            {"ok": accurate(e.delta, e.score, e.baseline_score), "gradient": gradient, "forward": passes - gradient}
            | {"scores": e.scores}
        )
    return runs


def find_oracle(model, tokenizer, texts: list[str]) -> list[int]:
    """Each text's fewest Gauss–Legendre nodes for 1%: 1, 2, 3, ... tried on the texts that still miss."""
    need = [0] * len(texts)
    left = list(range(len(texts)))
    for n in tqdm(range(1, ORACLE_MAX + 1), desc="oracle", leave=False):
        options = {"integration": "gausslegendre", "n_steps": n, "tolerance": None}
        results = explain(model, tokenizer, [texts[i] for i in left], method="integrated_gradients", **options)
        for i, e in zip(left, results, strict=True):
            if accurate(e.delta, e.score, e.baseline_score):
                need[i] = n
        left = [i for i in left if not need[i]]
        if not left:
            return need
    raise RuntimeError(f"texts {left} need more than {ORACLE_MAX} Gauss–Legendre nodes for 1%")


def run_oracle(model, tokenizer, texts: list[str], need: list[int]) -> list[dict]:
    """The texts of one node count together, with exactly that many nodes."""
    runs: list[dict | None] = [None] * len(texts)
    groups = defaultdict(list)
    for i, n in enumerate(need):
        groups[n].append(i)
    for n, rows in groups.items():
        options = {"integration": "gausslegendre", "n_steps": n, "tolerance": None}
        for i, run in zip(rows, run_library(model, tokenizer, [texts[i] for i in rows], **options), strict=True):
            runs[i] = run
    return runs


def run_transformers_interpret(explainer: SequenceClassificationExplainer, texts: list[str]) -> list[dict]:
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
                # 50 nodes; 2 forward passes for Captum's layer endpoints, 2 for return_convergence_delta
                "gradient": explainer.n_steps,
                "forward": 4,
            }
        )
    return runs


@torch.no_grad()
def ti_accuracy(explainer: SequenceClassificationExplainer, runs: list[dict]) -> None:
    """Per text, |delta| ≤ 1% for transformers-interpret's own F (the class's softmax probability): `ok` with the
    delta its Captum call returned (against its reference x′), `ok_start` with the quadrature's own error (against
    where its path starts)."""
    for run in runs:
        explainer.selected_index = run["class"]
        output, baseline, start = (
            float(explainer._forward(*run[key])[0]) for key in ("inputs", "reference", "path_start")
        )
        run["ok"] = accurate(run["delta"], output, baseline)
        run["ok_start"] = accurate(run["sum"] - (output - start), output, start)


def run_captum(model, ig_explainer, items, targets) -> list[dict]:
    """One `LayerIntegratedGradients.attribute` call per text, unpadded, all steps in one batch, on the library's
    F (its default output for the model)."""
    forward = ExplainedOutput(model, default_output(model))
    lig = LayerIntegratedGradients(forward, model.get_input_embeddings())
    runs = []
    for item, target in zip(items, targets, strict=True):
        batch = ig_explainer.collate([item])
        baseline = batch.input_ids.masked_fill(batch.is_word, ig_explainer.baseline_id)
        args = forward.args(batch, torch.tensor([target]), None)
        attributions, delta = lig.attribute(
            batch.input_ids,
            baselines=baseline,
            additional_forward_args=args,
            n_steps=CAPTUM_STEPS,
            return_convergence_delta=True,
        )
        runs.append({"delta": float(delta[0]), "batch": batch, "args": args, "baseline": baseline})
        runs[-1] |= {"tokens": attributions[0].sum(-1).detach(), "gradient": CAPTUM_STEPS, "forward": 4}
    return runs


@torch.no_grad()
def captum_accuracy(model, items, runs: list[dict]) -> None:
    """F(x) and F(x′) of each Captum run (untimed), and its token scores added up into words."""
    forward = ExplainedOutput(model, default_output(model))
    for item, run in zip(items, runs, strict=True):
        both = (torch.cat([a, a]) if isinstance(a, torch.Tensor) else a for a in run["args"])
        ends = forward(torch.cat([run["batch"].input_ids, run["baseline"]]), *both)
        run["ok"] = accurate(run["delta"], float(ends[0]), float(ends[1]))
        words = [0.0] * len(item.words)
        for token, word in enumerate(item.word_index):
            if word >= 0:
                words[word] += float(run["tokens"][token])
        run["scores"] = words


def relative_error(scores: list[float], reference: list[float]) -> float:
    difference = sum((a - b) ** 2 for a, b in zip(scores, reference, strict=True)) ** 0.5
    return difference / max(sum(b * b for b in reference) ** 0.5, 1e-12)


def compare(model_path: str, texts: list[str], chunk_size: int, reference: bool) -> dict:
    model, tokenizer = load_classifier(model_path)
    ig_explainer = get_explainer(model, tokenizer, "integrated_gradients")
    items = tokenize(tokenizer, texts, check_max_length(None, model, tokenizer, False))
    targets = ig_explainer.predict(items, 16).argmax(-1).tolist()
    ti = SequenceClassificationExplainer(model, tokenizer)
    need = find_oracle(model, tokenizer, texts)
    references = None
    if reference:
        references = [e.scores for e in explain(model, tokenizer, texts, method="integrated_gradients", **REFERENCE)]
    for warm_up in (partial(run_library, model, tokenizer), partial(run_transformers_interpret, ti)):
        warm_up(texts[:2])

    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    runs: dict[str, list[dict]] = {way: [] for way in WAYS}
    starts = range(0, len(texts), chunk_size)
    for c, start in enumerate(tqdm(starts, desc="chunks")):
        part = slice(start, min(start + chunk_size, len(texts)))
        calls = {
            "oracle": partial(run_oracle, model, tokenizer, texts[part], need[part]),
            "library": partial(run_library, model, tokenizer, texts[part]),
            "previous": partial(run_library, model, tokenizer, texts[part], **PREVIOUS),
            "transformers_interpret": partial(run_transformers_interpret, ti, texts[part]),
            "captum": partial(run_captum, model, ig_explainer, items[part], targets[part]),
        }
        for way in WAYS[c % len(WAYS) :] + WAYS[: c % len(WAYS)]:
            begin = time.perf_counter()
            result = calls[way]()
            seconds[way].append(time.perf_counter() - begin)
            if way == "transformers_interpret":
                ti_accuracy(ti, result)
            elif way == "captum":
                captum_accuracy(model, items[part], result)
            runs[way] += result

    totals = {way: sum(seconds[way]) for way in WAYS}
    result = {
        "model": model_path,
        "architecture": type(model).__name__,
        "output": PHRASES[default_output(model)],
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
        "accurate": {way: statistics.mean(r["ok"] for r in rs) for way, rs in runs.items()},
        "ti_path_start": statistics.mean(r["ok_start"] for r in runs["transformers_interpret"]),
        "gradient": {way: statistics.mean(r["gradient"] for r in rs) for way, rs in runs.items()},
        "forward": {way: statistics.mean(r["forward"] for r in rs) for way, rs in runs.items()},
        "oracle_nodes": (statistics.median(need), max(need)),
        "library_nodes": (
            statistics.median(r["gradient"] for r in runs["library"]),
            max(r["gradient"] for r in runs["library"]),
        ),
        "word_error": {},
    }
    if references is not None:
        for way in ("oracle", "library", "previous", "captum"):
            errors = sorted(relative_error(r["scores"], ref) for r, ref in zip(runs[way], references, strict=True))
            result["word_error"][way] = (statistics.median(errors), errors[int(0.9 * (len(errors) - 1))])
    return result


def markdown(result: dict, load: tuple[float, float], command: str) -> str:
    lines = [
        f"`{command}` — {result['model']} ({result['architecture']}), {result['texts']} TREC test questions "
        f"(mean {result['tokens']:.1f} tokens), F the {result['output']} of the predicted class (the softmax "
        f"probability for transformers-interpret); {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} torch threads, torch {torch.__version__}, load average {load[0]:.1f} before "
        f"/ {load[1]:.1f} after (the machine was shared with other work: seconds are noisy, the ratios were "
        "measured in the same run on interleaved chunks).",
        "",
        "| way | passes per text: gradient + forward-only = all | seconds per text | speed-up over "
        "transformers-interpret (median of chunks) | texts with \\|delta\\| ≤ 1% \\|F(x) − F(x′)\\| | "
        "word-score error against 128 nodes: median, 90th percentile |",
        "|---|---|---|---|---|---|",
    ]
    for way in WAYS:
        gradient, forward = result["gradient"][way], result["forward"][way]
        accuracy = f"{result['accurate'][way]:.0%}"
        if way == "transformers_interpret":
            accuracy += f" (against where its path starts: {result['ti_path_start']:.0%})"
        error = result["word_error"].get(way)
        error = (
            f"{error[0]:.2%}, {error[1]:.2%}" if error else "— (another F)" if way == "transformers_interpret" else "—"
        )
        lines.append(
            f"| {LABELS[way]} | {gradient:.1f} + {forward:.1f} = **{gradient + forward:.1f}** | "
            f"{result['per_text'][way]:.3f} | **{result['speedup'][way]:.2f}×** ({result['median_speedup'][way]:.2f}) "
            f"| {accuracy} | {error} |"
        )
    (oracle_median, oracle_max), (library_median, library_max) = result["oracle_nodes"], result["library_nodes"]
    gradient, every = (
        result["gradient"]["library"] / result["gradient"]["oracle"],
        (result["gradient"]["library"] + result["forward"]["library"])
        / (result["gradient"]["oracle"] + result["forward"]["oracle"]),
    )
    lines += [
        "",
        f"Nodes per text: oracle median {oracle_median:g}, most {oracle_max}; library median {library_median:g}, "
        f"most {library_max}. Library passes over the oracle's: {gradient:.2f}× the gradient passes, {every:.2f}× "
        "all passes.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/trec-bert", help="a model folder or cached Hub id")
    parser.add_argument("--texts", type=int, default=200, help="TREC test questions to explain")
    parser.add_argument("--chunk-size", type=int, default=16, help="texts per interleaving round")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--no-reference", action="store_true", help="skip the 128-node reference of the scores")
    parser.add_argument("--docs", type=Path, default=REPO_ROOT / "docs" / "explainers.md", help="file to update")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    texts = list(load_data("trec").splits["test"]["text"][: args.texts])
    before = os.getloadavg()[0]
    result = compare(args.model, texts, args.chunk_size, not args.no_reference)
    command = " ".join([COMMAND, *(a for a in sys.argv[1:] if not a.startswith("--docs") and a != str(args.docs))])
    table = markdown(result, (before, os.getloadavg()[0]), command)
    print(table)
    write_into_docs(table, args.docs, "ig_speed")
    print(f"\nwritten into {args.docs}")


if __name__ == "__main__":
    main()
