"""What the label-attention head costs against mean pooling, at 6, 732 and 5,000 classes.

- Forward pass of 16 texts x 64 tokens, eval mode under `torch.inference_mode`, on the embedding backbone
  (`LabelAttnConfig` defaults: hidden 128, 4 heads) and on all-MiniLM-L6-v2 (`from_encoder`, hidden 384, 4 heads).
- The matmul floor of the embedding backbone: the two `batch x seq x classes x hidden` products of the attention
  (`Q K^T` and `A V`), timed alone with operands of the head's shapes.
- Peak memory of one forward pass at 5,000 classes: label attention without weights (the fused path), with
  `output_attentions=True` (the weights formed and returned), and mean pooling.
- Training throughput on the embedding backbone, built as `labelattn train` builds it (forward, backward, gradient
  clipping, fused AdamW), on batches of 32 TREC questions of at most 64 tokens: its 6 classes, and 732 classes
  (the same texts with labels drawn at random: what a step costs, not what it learns); label attention also with
  `classifier_dropout=0.1`, where every class vector must be formed for its dropout mask (the default, 0, folds the
  classifier into the head in training too).

The systems compared are timed in interleaved rounds (A, B, C, then C, B, A), so that load from other processes
hits them alike. Times are CPU seconds of the one thread doing the work (torch runs with one thread), so that time
spent descheduled on a shared machine does not count; on an accelerator, wall time with synchronisation. Rounds are
ranked by their total time and the quietest half kept; the tables report medians over those rounds and the median
of their per-round ratios. The tables are printed and written into docs/model.md between the benchmark markers.

    .venv/bin/python bench/model_latency.py
"""

import argparse
import itertools
import os
import platform
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from _docs_block import write_into_docs
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from configuration_labelattn import LabelAttnConfig
from labelattn import minilm_path
from labelattn.data.reading import load_data
from labelattn.training import arguments, settings
from labelattn.training.build import build_model, load_tokenizer, optimizer_groups
from modeling_labelattn import LabelAttnForSequenceClassification

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python bench/model_latency.py"
CLASS_COUNTS = (6, 732, 5000)
BATCH_SIZE, SEQ_LEN = 16, 64
TRAIN_BATCH, TRAIN_MAX_LENGTH = 32, 64
POOLINGS = ("label_attention", "mean")


def build(backbone: str, pooling: str, num_labels: int, device: torch.device) -> LabelAttnForSequenceClassification:
    torch.manual_seed(0)
    if backbone == "embedding":
        model = LabelAttnForSequenceClassification(LabelAttnConfig(num_labels=num_labels, pooling=pooling))
    else:
        model = LabelAttnForSequenceClassification.from_encoder(minilm_path(), num_labels=num_labels, pooling=pooling)
    return model.to(device).eval()


def synchronize(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def seconds(run: Callable[[], object], device: torch.device) -> float:
    """CPU time of this thread on a CPU (descheduled time left out), wall time on an accelerator."""
    clock = time.thread_time if device.type == "cpu" else time.perf_counter
    synchronize(device)
    start = clock()
    run()
    synchronize(device)
    return clock() - start


def interleaved(systems: dict[str, Callable[[], object]], device: torch.device, rounds: int) -> dict[str, list]:
    """Seconds per call of each system, `rounds` rounds, the order reversed every other round."""
    names = list(systems)
    for run in systems.values():  # warm-up: first calls allocate and pick kernels
        run()
        run()
    times = {name: [] for name in names}
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            times[name].append(seconds(systems[name], device))
    return times


def quietest(times: dict[str, list]) -> list[int]:
    """The rounds of least total time, the quietest half (at least 3)."""
    totals = [sum(column) for column in zip(*times.values(), strict=True)]
    ranked = sorted(range(len(totals)), key=totals.__getitem__)
    return ranked[: max(3, len(ranked) // 2)]


def median_over(values: list[float], rounds: list[int]) -> float:
    return statistics.median(values[i] for i in rounds)


def ratio_over(numerator: list[float], denominator: list[float], rounds: list[int]) -> float:
    return statistics.median(numerator[i] / denominator[i] for i in rounds)


def random_batch(vocab_size: int, device: torch.device) -> dict:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1000, vocab_size, (BATCH_SIZE, SEQ_LEN), generator=generator)
    return {"input_ids": input_ids.to(device), "attention_mask": torch.ones_like(input_ids).to(device)}


def matmul_floor(config: LabelAttnConfig, device: torch.device) -> Callable[[], tuple]:
    """The two products of the attention, each as one batched matrix product in its most convenient layout, with
    random operands: `Q K^T`, `(heads, classes, d_h) x (heads, d_h, batch * seq)`, and `A V`,
    `(batch * heads, classes, seq) x (batch * heads, seq, d_h)`."""
    heads, head_size, classes = (
        config.num_attention_heads,
        config.hidden_size // config.num_attention_heads,
        config.num_labels,
    )
    queries = torch.randn(heads, classes, head_size, device=device)
    keys = torch.randn(heads, head_size, BATCH_SIZE * SEQ_LEN, device=device)
    weights = torch.rand(BATCH_SIZE * heads, classes, SEQ_LEN, device=device)
    values = torch.randn(BATCH_SIZE * heads, SEQ_LEN, head_size, device=device)
    return lambda: (torch.bmm(queries, keys), torch.bmm(weights, values))


def peak_forward_bytes(model: LabelAttnForSequenceClassification, batch: dict, **kwargs) -> int:
    """Peak of the memory allocated during one forward pass, above what was allocated before it (the weights)."""
    device = model.device
    if device.type != "cpu":
        synchronize(device)
        before = torch.accelerator.memory_allocated(device)
        torch.accelerator.reset_peak_memory_stats(device)
        model(**batch, **kwargs)
        synchronize(device)
        return torch.accelerator.max_memory_allocated(device) - before
    # The CPU allocator keeps no statistics; the profiler records every allocation and free in time order.
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        model(**batch, **kwargs)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events = sorted((e for e in events if e.device_type() == DeviceType.CPU), key=lambda e: e.start_ns())
    return max(itertools.accumulate(e.nbytes() for e in events), default=0)


def forward_rows(backbone: str, device: torch.device, rounds: int) -> list[dict]:
    """One row per class count: label attention against mean pooling (and the matmul floor, embedding backbone)."""
    rows = []
    for num_labels in CLASS_COUNTS:
        models = {pooling: build(backbone, pooling, num_labels, device) for pooling in POOLINGS}
        batch = random_batch(models["mean"].config.vocab_size, device)
        systems = {pooling: (lambda m=model, b=batch: m(**b)) for pooling, model in models.items()}
        if backbone == "embedding":
            systems["floor"] = matmul_floor(models["label_attention"].config, device)
        with torch.inference_mode():
            times = interleaved(systems, device, rounds)
            kept = quietest(times)
            row = dict(backbone=backbone, classes=num_labels, rounds=f"{len(kept)}/{rounds}")
            row.update({f"{name}_ms": 1000 * median_over(t, kept) for name, t in times.items()})
            row["ratio"] = ratio_over(times["label_attention"], times["mean"], kept)
            if "floor" in times:
                row["floor_ratio"] = ratio_over(times["label_attention"], times["floor"], kept)
            if num_labels == max(CLASS_COUNTS):
                row["peak_mib"] = {
                    "label attention": peak_forward_bytes(models["label_attention"], batch) / 2**20,
                    "label attention, weights returned": peak_forward_bytes(
                        models["label_attention"], batch, output_attentions=True
                    )
                    / 2**20,
                    "mean pooling": peak_forward_bytes(models["mean"], batch) / 2**20,
                }
        rows.append(row)
        print(row, flush=True)
    return rows


def training_batches(num_labels: int) -> tuple[list[str], list[dict]]:
    """TREC training questions in batches of 32 (at most 64 tokens), with their labels for 6 classes, and labels
    drawn at random for more."""
    data = load_data("trec")
    texts, labels = list(data.splits["train"]["text"]), list(data.splits["train"]["label"])
    names = data.label_names
    if num_labels != len(names):
        names = [f"class_{i}" for i in range(num_labels)]
        labels = random.Random(0).choices(range(num_labels), k=len(texts))
    tokenizer = load_tokenizer("embedding")
    batches = []
    for start in range(0, TRAIN_BATCH * 40, TRAIN_BATCH):
        batch = tokenizer(
            texts[start : start + TRAIN_BATCH],
            padding=True,
            truncation=True,
            max_length=TRAIN_MAX_LENGTH,
            return_tensors="pt",
        )
        batch.pop("token_type_ids", None)
        batches.append({**batch, "labels": torch.tensor(labels[start : start + TRAIN_BATCH])})
    return names, batches


def training_step(
    pooling: str, label_names: list[str], batches: list[dict], steps: int, classifier_dropout: float | None = None
) -> Callable[[], None]:
    """`steps` training steps of a fresh default embedding model built exactly as `labelattn train` builds it
    (with another `classifier_dropout` when given)."""
    parser = argparse.ArgumentParser()
    arguments.add_arguments(parser)
    train_settings = settings.TrainSettings.from_args(parser.parse_args(["--pooling", pooling]))
    torch.manual_seed(0)
    model = build_model(train_settings, label_names, False, 30522).train()
    if classifier_dropout is not None:
        model.config.classifier_dropout = model.dropout.p = classifier_dropout
    optimizer = torch.optim.AdamW(
        optimizer_groups(model, train_settings), weight_decay=train_settings.weight_decay, fused=True
    )
    cycle = itertools.cycle(batches)

    def run() -> None:
        for _ in range(steps):
            model(**next(cycle)).loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), train_settings.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()

    return run


def training_rows(rounds: int, steps: int) -> list[dict]:
    rows = []
    for num_labels in (6, 732):
        label_names, batches = training_batches(num_labels)
        systems = {pooling: training_step(pooling, label_names, batches, steps) for pooling in POOLINGS}
        # With dropout on the class vectors (the default has none), each class vector is formed for its mask.
        systems["dropout"] = training_step("label_attention", label_names, batches, steps, classifier_dropout=0.1)
        times = interleaved(systems, torch.device("cpu"), rounds)
        kept = quietest(times)
        row = dict(classes=num_labels, rounds=f"{len(kept)}/{rounds}")
        for name, t in times.items():
            row[f"{name}_rate"] = steps * TRAIN_BATCH / median_over(t, kept)
            row[f"{name}_ratio"] = ratio_over(times["mean"], t, kept)  # throughput ratio = inverse time ratio
        rows.append(row)
        print(row, flush=True)
    return rows


def markdown(forward: list[dict], training: list[dict], device: torch.device, load: tuple[float, float]) -> str:
    lines = [
        f"Command: `{COMMAND}`. Device: {device.type}, {torch.get_num_threads()} torch thread, torch "
        f"{torch.__version__}, {platform.machine()} with {os.cpu_count()} cores, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; 1-minute load average {load[0]:.1f} before and "
        f"{load[1]:.1f} after (the cores were shared with other jobs). Interleaved rounds, CPU time of the working "
        "thread, medians over the quietest half of the rounds.",
        "",
        f"Forward pass, {BATCH_SIZE} texts × {SEQ_LEN} tokens (ms); ratio = median per-round ratio:",
        "",
        "| backbone | classes | rounds kept | label attention | mean pooling | label attention / mean pooling "
        "| matmul floor | label attention / floor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in forward:
        floor = f"{r['floor_ms']:.2f} | {r['floor_ratio']:.2f}×" if "floor_ms" in r else "— | —"
        lines.append(
            f"| {r['backbone']} | {r['classes']:,} | {r['rounds']} | {r['label_attention_ms']:.2f} "
            f"| {r['mean_ms']:.2f} | {r['ratio']:.2f}× | {floor} |"
        )
    lines += [
        "",
        f"Peak memory of one forward pass at {max(CLASS_COUNTS):,} classes, above the weights (MiB):",
        "",
        "| backbone | " + " | ".join(forward[-1]["peak_mib"]) + " |",
        "|---|" + "---|" * len(forward[-1]["peak_mib"]),
    ]
    for r in forward:
        if "peak_mib" in r:
            lines.append(f"| {r['backbone']} | " + " | ".join(f"{v:.1f}" for v in r["peak_mib"].values()) + " |")
    lines += [
        "",
        f"Training, embedding backbone as `labelattn train` builds it, batches of {TRAIN_BATCH} TREC questions "
        "(samples per CPU second); ratio = median per-round ratio of label attention's throughput to mean pooling's:",
        "",
        "| classes | rounds kept | label attention | mean pooling | ratio | label attention, classifier_dropout=0.1 "
        "| ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in training:
        lines.append(
            f"| {r['classes']:,} | {r['rounds']} | {r['label_attention_rate']:.0f} | {r['mean_rate']:.0f} "
            f"| {r['label_attention_ratio']:.2f}× | {r['dropout_rate']:.0f} | {r['dropout_ratio']:.2f}× |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds per forward comparison")
    parser.add_argument("--train-rounds", type=int, default=30, help="interleaved rounds of training steps")
    parser.add_argument("--train-steps", type=int, default=10, help="training steps per round")
    # One thread by default: on a CPU shared with other jobs, the threads of one kernel wait for each other whenever
    # one is descheduled, which measures the scheduler, not the model; the thread's CPU time then is the work done.
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of torch (default 1, see above)")
    parser.add_argument("--docs", type=Path, default=REPO_ROOT / "docs" / "model.md", help="Markdown file to update")
    parser.add_argument("--device", default=str(torch.accelerator.current_accelerator() or "cpu"))
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    forward = [row for backbone in ("embedding", "minilm") for row in forward_rows(backbone, device, args.rounds)]
    training = training_rows(args.train_rounds, args.train_steps)
    table = markdown(forward, training, device, (load_before, os.getloadavg()[0]))
    print(table)
    write_into_docs(table, args.docs, "model_latency")
    print(f"\nwritten into {args.docs}")


if __name__ == "__main__":
    main()
