"""Forward latency and peak memory of the label-attention head against masked mean pooling, end to end.

Both poolings run on the same backbone (the fastText-style embedding of `LabelAttnConfig(num_labels=6)`, and
all-MiniLM-L6-v2 via `from_encoder`), at batch 32 x 64 tokens and 1 x 64 tokens, in eval mode under
`torch.inference_mode`. The two poolings are timed alternately (A, B, B, A, ...) in one run, so that load from other
processes hits both alike; the table reports medians and the median of the per-round ratios. The table is printed
and written into docs/model.md between the benchmark markers.

    .venv/bin/python bench/model_latency.py
"""

import argparse
import itertools
import os
import platform
import statistics
import time
from pathlib import Path

import torch
from _docs_block import write_into_docs
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from configuration_labelattn import LabelAttnConfig
from labelattn import minilm_path
from modeling_labelattn import LabelAttnForSequenceClassification

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python bench/model_latency.py"
SHAPES = [(32, 64), (1, 64)]
NUM_LABELS = 6


def build(backbone: str, pooling: str, device: torch.device) -> LabelAttnForSequenceClassification:
    if backbone == "embedding":
        model = LabelAttnForSequenceClassification(LabelAttnConfig(num_labels=NUM_LABELS, pooling=pooling))
    else:
        model = LabelAttnForSequenceClassification.from_encoder(minilm_path(), num_labels=NUM_LABELS, pooling=pooling)
    return model.to(device).eval()


def synchronize(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def seconds_per_forward(model: LabelAttnForSequenceClassification, batch: dict) -> float:
    synchronize(model.device)
    start = time.perf_counter()
    model(**batch)
    synchronize(model.device)
    return time.perf_counter() - start


def peak_forward_bytes(model: LabelAttnForSequenceClassification, batch: dict) -> int:
    """Peak of the memory allocated during one forward pass, above what was allocated before it (the weights)."""
    device = model.device
    if device.type != "cpu":
        synchronize(device)
        before = torch.accelerator.memory_allocated(device)
        torch.accelerator.reset_peak_memory_stats(device)
        model(**batch)
        synchronize(device)
        return torch.accelerator.max_memory_allocated(device) - before
    # The CPU allocator keeps no statistics; the profiler records every allocation and free in time order.
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model(**batch)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events = sorted((e for e in events if e.device_type() == DeviceType.CPU), key=lambda e: e.start_ns())
    return max(itertools.accumulate(e.nbytes() for e in events), default=0)


def compare(backbone: str, device: torch.device, repeats: int, budget_s: float) -> list[dict]:
    """One row per shape: label attention (A) against mean pooling (B) on the same backbone, for `repeats` rounds
    or until `budget_s` seconds have passed (at least 5 rounds)."""
    models = {pooling: build(backbone, pooling, device) for pooling in ("label_attention", "mean")}
    rows = []
    for batch_size, seq_len in SHAPES:
        generator = torch.Generator().manual_seed(0)
        input_ids = torch.randint(1000, models["mean"].config.vocab_size, (batch_size, seq_len), generator=generator)
        batch = {"input_ids": input_ids.to(device), "attention_mask": torch.ones_like(input_ids).to(device)}
        times = {pooling: [] for pooling in models}
        with torch.inference_mode():
            for model in models.values():  # warm-up: first calls allocate and pick kernels
                for _ in range(2):
                    model(**batch)
            start = time.perf_counter()
            for round_ in range(repeats):
                order = ["label_attention", "mean"] if round_ % 2 == 0 else ["mean", "label_attention"]
                for pooling in order:
                    times[pooling].append(seconds_per_forward(models[pooling], batch))
                if round_ >= 4 and time.perf_counter() - start > budget_s:
                    break
            peaks = {pooling: peak_forward_bytes(model, batch) for pooling, model in models.items()}
        paired = [a / b for a, b in zip(times["label_attention"], times["mean"], strict=True)]
        rows.append(
            dict(
                backbone=backbone,
                shape=f"{batch_size} × {seq_len}",
                rounds=len(paired),
                label_ms=1000 * statistics.median(times["label_attention"]),
                mean_ms=1000 * statistics.median(times["mean"]),
                time_ratio=statistics.median(paired),
                label_mib=peaks["label_attention"] / 2**20,
                mean_mib=peaks["mean"] / 2**20,
                memory_ratio=peaks["label_attention"] / peaks["mean"],
            )
        )
    return rows


def markdown(rows: list[dict], device: torch.device, load: tuple[float, float]) -> str:
    lines = [
        "| backbone | batch × tokens | rounds | label attention (ms) | mean pooling (ms) | time ratio | "
        "label attention peak (MiB) | mean pooling peak (MiB) | memory ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backbone']} | {r['shape']} | {r['rounds']} | {r['label_ms']:.2f} | {r['mean_ms']:.2f} "
            f"| {r['time_ratio']:.2f}× | {r['label_mib']:.2f} | {r['mean_mib']:.2f} | {r['memory_ratio']:.2f}× |"
        )
    return "\n".join(
        [
            f"Command: `{COMMAND}` — interleaved rounds (label attention, mean pooling, then the other order), "
            "median milliseconds per forward pass; time ratio = median of the per-round ratios label attention / "
            "mean pooling; peak = most memory allocated during one forward pass above the weights.",
            f"Device: {device.type}, {torch.get_num_threads()} torch thread(s), torch {torch.__version__}, "
            f"{platform.machine()} with {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
            f"1-minute load average {load[0]:.1f} before and {load[1]:.1f} after (more than the cores: shared).",
            "",
            *lines,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="most interleaved rounds per shape")
    parser.add_argument("--budget", type=float, default=25.0, help="seconds of timing per shape, at least 5 rounds")
    # One thread by default: on a CPU shared with other jobs, the threads of one kernel wait for each other whenever
    # one is descheduled, which measures the scheduler (a 1 x 64 forward took 140 ms instead of 0.2 ms), not the model.
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of torch (default 1, see above)")
    parser.add_argument("--docs", type=Path, default=REPO_ROOT / "docs" / "model.md", help="Markdown file to update")
    parser.add_argument("--device", default=str(torch.accelerator.current_accelerator() or "cpu"))
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    rows = [row for backbone in ("embedding", "minilm") for row in compare(backbone, device, args.repeats, args.budget)]
    table = markdown(rows, device, (load_before, os.getloadavg()[0]))
    print(table)
    write_into_docs(table, args.docs, "model_latency")
    print(f"\nwritten into {args.docs}")


if __name__ == "__main__":
    main()
