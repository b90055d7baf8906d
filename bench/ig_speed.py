"""Integrated Gradients: the library's batched path against Captum called one text at a time, and the floor.

On real TREC questions (the default data set) and on two backbones (all-MiniLM-L6-v2 via `from_encoder`, and the
fastText-style embedding of `LabelAttnConfig(num_labels=6)`; untrained heads: timing does not need training), with
the target the predicted class and the baseline [CLS] [PAD]… [SEP]:

- library: `explain(..., method="integrated_gradients")` with its defaults (gausslegendre, 32 steps, texts in
  length-sorted groups of 16 with all steps in one batch, and a text whose |delta| > 1% of |F(x) − F(x′)| is
  integrated again with twice the steps);
- (a) Captum's `LayerIntegratedGradients` per text with `internal_batch_size=1` (Captum's default 50 steps);
- (b) the same per text with all 50 steps in one batch;
- library at a fixed n_steps (no tolerance) against the floor: the same n_steps forward+backward passes over
  exactly the texts' real tokens (texts of equal length batched together, no padding, no Captum, no endpoints).

The texts, sorted by length, are cut into chunks and every way runs on each chunk in a rotating order (A, B, C,
D, E, then B, C, D, E, A, ...), so that load from other processes hits all of them alike; ratios are of total
times and, in brackets, the median of the per-chunk ratios. (a) runs on the first texts of each chunk only and
is scaled to the chunk. The table is printed and written into docs/explainers.md between the benchmark markers.

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

import torch
from _docs_block import write_into_docs
from captum.attr import LayerIntegratedGradients
from captum.attr._utils.approximation_methods import approximation_parameters
from transformers import AutoTokenizer

from configuration_labelattn import LabelAttnConfig
from explainers import explain, get_explainer
from explainers.forward import TargetLogit
from explainers.words import collate, tokenize
from labelattn import minilm_path
from labelattn.data import load_data
from modeling_labelattn import LabelAttnForSequenceClassification

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python bench/ig_speed.py"
CAPTUM_STEPS = 50
GROUP = 16  # the library's default batch_size


def build(backbone: str) -> LabelAttnForSequenceClassification:
    if backbone == "embedding":
        return LabelAttnForSequenceClassification(LabelAttnConfig(num_labels=6)).eval()
    return LabelAttnForSequenceClassification.from_encoder(minilm_path(), num_labels=6).eval()


def captum_per_text(model, items, targets, pad_id: int, internal_batch_size: int | None) -> list[dict]:
    """Ways (a) and (b): one `LayerIntegratedGradients.attribute` call per text, unpadded."""
    layer = model.get_input_embeddings()
    results = []
    for item, target in zip(items, targets, strict=True):
        batch = collate([item], pad_id)
        forward = TargetLogit(model)
        attributions, delta = LayerIntegratedGradients(forward, layer).attribute(
            batch.input_ids,
            baselines=batch.input_ids.masked_fill(batch.is_word, pad_id),
            additional_forward_args=forward.args(batch, torch.tensor([target]), None),
            n_steps=CAPTUM_STEPS,
            internal_batch_size=internal_batch_size,
            return_convergence_delta=True,
        )
        scores = attributions.sum(-1)[0]
        words = torch.zeros(len(item.words)).index_add_(0, batch.word_index[0].clamp(min=0), scores * batch.is_word[0])
        results.append({"scores": words.tolist(), "delta": float(delta[0])})
    return results


def floor(model, items, targets, n_steps: int, pad_id: int) -> None:
    """n_steps forward+backward passes over exactly the real tokens: texts of one length batched, no padding."""
    alphas, _ = approximation_parameters("gausslegendre")
    alpha = torch.tensor(alphas(n_steps))[:, None, None, None]  # (steps, 1, 1, 1)
    embedding = model.get_input_embeddings()
    by_length: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        by_length.setdefault(len(item.input_ids), []).append(i)
    for rows in by_length.values():
        for start in range(0, len(rows), GROUP):
            chunk = rows[start : start + GROUP]
            batch = collate([items[i] for i in chunk], pad_id)
            with torch.no_grad():
                x = embedding(batch.input_ids)
                x0 = embedding(batch.input_ids.masked_fill(batch.is_word, pad_id))
            path = (x0 + alpha * (x - x0)).flatten(0, 1).requires_grad_()  # (steps * texts, seq, hidden)
            repeat = (n_steps, 1)
            logits = model(
                inputs_embeds=path,
                attention_mask=batch.attention_mask.repeat(repeat),
                token_type_ids=batch.token_type_ids.repeat(repeat) if batch.token_type_ids is not None else None,
            ).logits
            target = torch.tensor([targets[i] for i in chunk]).repeat(n_steps)
            torch.autograd.grad(logits.gather(1, target[:, None]).sum(), path)


def compare(backbone: str, texts: list[str], chunk_size: int, slow_per_chunk: int, n_steps: int) -> dict:
    model = build(backbone)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    pad_id = tokenizer.pad_token_id
    items = tokenize(tokenizer, texts, 512)
    # Chunks of the length-sorted texts, a multiple of the group size: within each chunk the library forms the
    # very groups it would form on all the texts, so chunking for the interleaving does not add padding.
    order = sorted(range(len(texts)), key=lambda i: len(items[i].input_ids))
    texts, items = [texts[i] for i in order], [items[i] for i in order]
    # Every way explains the predicted class; predicted once here, outside the timings.
    targets = get_explainer(model, tokenizer, "integrated_gradients").predict(items, GROUP).argmax(-1).tolist()
    explain(model, tokenizer, texts[:2], method="integrated_gradients")  # warm-up

    def ways(part: slice) -> dict:
        k = min(slow_per_chunk, part.stop - part.start)
        ig = partial(explain, model, tokenizer, texts[part], method="integrated_gradients")
        return {
            "library": ig,
            "fixed": partial(ig, n_steps=n_steps, tolerance=None),
            "floor": partial(floor, model, items[part], targets[part], n_steps, pad_id),
            "b": partial(captum_per_text, model, items[part], targets[part], pad_id, None),
            "a": partial(captum_per_text, model, items[part][:k], targets[part][:k], pad_id, 1),
        }

    names = list(ways(slice(0, 1)))
    totals = dict.fromkeys(names, 0.0)
    ratios: dict[str, list[float]] = {"a": [], "b": [], "floor": []}
    library, per_text_b, slow_texts = [], [], 0
    starts = range(0, len(texts), chunk_size)
    for c, start in enumerate(starts):
        part = slice(start, min(start + chunk_size, len(texts)))
        calls, seconds = ways(part), {}
        for name in names[c % len(names) :] + names[: c % len(names)]:
            begin = time.perf_counter()
            result = calls[name]()
            seconds[name] = time.perf_counter() - begin
            if name == "library":
                library.extend(result)
            elif name == "b":
                per_text_b.extend(result)
            elif name == "a":
                slow_texts += len(result)
                seconds[name] *= (part.stop - part.start) / len(result)
        for name in names:
            totals[name] += seconds[name]
        ratios["a"].append(seconds["a"] / seconds["library"])
        ratios["b"].append(seconds["b"] / seconds["library"])
        ratios["floor"].append(seconds["fixed"] / seconds["floor"])
        report = ", ".join(f"{name} {seconds[name]:.1f}s" for name in names)
        print(f"  {backbone} chunk {c + 1}/{len(starts)}: {report}", flush=True)

    def accurate(delta: float, output: float, baseline: float) -> bool:
        return abs(delta) <= 0.01 * abs(output - baseline)

    lib_ok = [accurate(e.delta, e.score, e.baseline_score) for e in library]
    # (a) and (b) report no F(x), F(x'): the library's (same model, same baseline) serve.
    b_ok = [accurate(r["delta"], e.score, e.baseline_score) for r, e in zip(per_text_b, library, strict=True)]
    diff = max(
        abs(x - y) for r, e in zip(per_text_b, library, strict=True) for x, y in zip(r["scores"], e.scores, strict=True)
    )
    scale = max(abs(s) for e in library for s in e.scores)
    return {
        "backbone": backbone,
        "texts": len(texts),
        "tokens": statistics.mean(len(item.input_ids) for item in items),
        "slow_texts": slow_texts,
        "totals": totals,
        "ratios": {k: (totals["a" if k == "a" else "b"] / totals["library"]) for k in ("a", "b")}
        | {"floor": totals["fixed"] / totals["floor"]},
        "median_ratios": {k: statistics.median(v) for k, v in ratios.items()},
        "lib_ok": sum(lib_ok) / len(lib_ok),
        "b_ok": sum(b_ok) / len(b_ok),
        "mean_steps": statistics.mean(e.extras["n_steps"] for e in library),
        "max_diff": diff,
        "max_score": scale,
    }


def markdown(rows: list[dict], n_steps: int, load: tuple[float, float], command: str) -> str:
    lines = [
        f"`{command}` — {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__}, load average {load[0]:.1f} before / {load[1]:.1f} after (the machine was "
        "shared with other work: figures are noisy, ratios were measured in the same run on interleaved chunks).",
        "",
        "| backbone | texts (mean tokens) | library | (a) per text, `internal_batch_size=1`, 50 steps | "
        "(b) per text, 50 steps in one batch | (a) / library | (b) / library | "
        f"library at {n_steps} steps, no tolerance | floor, {n_steps} steps | fixed / floor | "
        "texts with \\|delta\\| ≤ 1% \\|F(x) − F(x′)\\|: library · (b) | mean steps (library) | "
        "max \\|library − (b)\\| (max \\|score\\|) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t, ratio, median = r["totals"], r["ratios"], r["median_ratios"]
        lines.append(
            f"| {r['backbone']} | {r['texts']} ({r['tokens']:.1f}) | {t['library']:.1f} s | {t['a']:.1f} s "
            f"(from {r['slow_texts']} texts) | {t['b']:.1f} s | **{ratio['a']:.2f}×** ({median['a']:.2f}) | "
            f"**{ratio['b']:.2f}×** ({median['b']:.2f}) | {t['fixed']:.1f} s | {t['floor']:.1f} s | "
            f"**{ratio['floor']:.2f}×** ({median['floor']:.2f}) | {r['lib_ok']:.0%} · {r['b_ok']:.0%} | "
            f"{r['mean_steps']:.1f} | {r['max_diff']:.2g} ({r['max_score']:.2g}) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=200, help="TREC test questions to explain per backbone")
    parser.add_argument("--chunk-size", type=int, default=48, help="texts per interleaving round (a multiple of 16)")
    parser.add_argument("--slow-per-chunk", type=int, default=4, help="texts per chunk for the slow way (a)")
    parser.add_argument("--n-steps", type=int, default=32, help="steps of the fixed-step comparison with the floor")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument("--backbones", nargs="+", default=["embedding", "encoder"])
    parser.add_argument("--docs", type=Path, default=REPO_ROOT / "docs" / "explainers.md", help="file to update")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    texts = list(load_data("trec").splits["test"]["text"][: args.texts])
    before = os.getloadavg()[0]
    rows = [compare(b, texts, args.chunk_size, args.slow_per_chunk, args.n_steps) for b in args.backbones]
    command = " ".join([COMMAND, *(a for a in sys.argv[1:] if not a.startswith("--docs") and a != str(args.docs))])
    table = markdown(rows, args.n_steps, (before, os.getloadavg()[0]), command)
    print(table)
    write_into_docs(table, args.docs, "ig_speed")
    print(f"\nwritten into {args.docs}")


if __name__ == "__main__":
    main()
