"""What asking for label contributions costs: one forward pass with and without them, at 6 and 2,000 classes.

- The embedding backbone as `labelattn train` builds it (hidden 384, 4 heads; at 6 classes a width-5 token context
  and label projections, at 2,000 the many-class recipe's width 3 and each class's own query; random weights, since
  cost does not depend on them) and all-MiniLM-L6-v2 (`from_encoder`, hidden 384, 4 heads; label projections as the
  class count says), 16 texts x 64 tokens, eval mode under `torch.inference_mode`.
- Systems: the logits alone; with `output_label_contributions=True` (the per-token terms, `(16, classes, 64)`);
  and, on the embedding backbone, with `output_attentions=True` (the weights, `(16, 4, classes, 64)`, what the
  label-attention explainer read before the contributions) and with both. MiniLM is timed without the weights:
  asking for them switches its encoder to eager attention for good, which would slow every later system.
- Peak memory of one forward pass at 2,000 classes, above the weights, for each system.

Timing as in `model_latency.py` (its helpers): one torch thread, CPU time of that thread, interleaved rounds, the
quietest half kept, medians and median per-round ratios against the logits alone. The table is printed and
written into docs/model.md between the benchmark markers.

    .venv/bin/python bench/label_contributions.py
"""

import argparse
import os
import platform
from datetime import UTC, datetime
from pathlib import Path

import torch
from _docs_block import write_into_docs
from model_latency import interleaved, median_over, peak_forward_bytes, quietest, random_batch, ratio_over

from configuration_labelattn import LabelAttnConfig
from labelattn import minilm_path
from labelattn.training.settings import TrainSettings
from modeling_labelattn import LabelAttnForSequenceClassification

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python bench/label_contributions.py"
CLASS_COUNTS = (6, 2000)
SYSTEMS = {
    "logits": {},
    "contributions": {"output_label_contributions": True},
    "weights": {"output_attentions": True},
    "both": {"output_attentions": True, "output_label_contributions": True},
}


def build(backbone: str, num_labels: int) -> LabelAttnForSequenceClassification:
    torch.manual_seed(0)
    train = TrainSettings.of_command([], num_labels)  # labelattn train's defaults for this class count
    if backbone == "embedding":
        width = train.token_context_width
        config = LabelAttnConfig(
            num_labels=num_labels, hidden_size=384, token_context_width=width, label_projections=train.label_projections
        )
        return LabelAttnForSequenceClassification(config).eval()
    encoder = LabelAttnForSequenceClassification.from_encoder
    return encoder(minilm_path(), num_labels=num_labels, label_projections=train.label_projections).eval()


def rows_for(backbone: str, rounds: int) -> list[dict]:
    names = list(SYSTEMS) if backbone == "embedding" else ["logits", "contributions"]
    rows = []
    for num_labels in CLASS_COUNTS:
        model = build(backbone, num_labels)
        batch = random_batch(model.config.vocab_size, model.device)
        systems = {name: (lambda m=model, b=batch, kwargs=SYSTEMS[name]: m(**b, **kwargs)) for name in names}
        with torch.inference_mode():
            times = interleaved(systems, model.device, rounds)
            kept = quietest(times)
            row = dict(backbone=backbone, classes=num_labels, rounds=f"{len(kept)}/{rounds}")
            for name in names:
                row[f"{name}_ms"] = 1000 * median_over(times[name], kept)
                row[f"{name}_ratio"] = ratio_over(times[name], times["logits"], kept)
                row[f"{name}_mib"] = peak_forward_bytes(model, batch, **SYSTEMS[name]) / 2**20
        rows.append(row)
        print(row, flush=True)
    return rows


def cell(row: dict, name: str, key: str, form: str) -> str:
    return format(row[f"{name}_{key}"], form) if f"{name}_{key}" in row else "—"


def table(rows: list[dict], started: str) -> str:
    load_before = os.getloadavg()[0]
    lines = [
        f"Command: `{COMMAND}`. Device: cpu, 1 torch thread, torch {torch.__version__}, {platform.machine()} with "
        f"{os.cpu_count()} cores, {started}; 1-minute load average {load_before:.1f} at the end (the cores were "
        "shared with other jobs). Interleaved rounds, CPU time of the working thread, medians over the quietest half.",
        "",
        "One forward pass of 16 texts × 64 tokens: milliseconds (× the logits alone, median per-round ratio), and the "
        "peak memory above the weights (MiB):",
        "",
        "| backbone | classes | rounds kept | logits | + contributions | + weights | + both"
        " | logits MiB | + contributions MiB | + weights MiB | + both MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        times = [
            f"{row['logits_ms']:.2f}",
            *(
                f"{row[f'{name}_ms']:.2f} ({row[f'{name}_ratio']:.2f}×)" if f"{name}_ms" in row else "—"
                for name in ("contributions", "weights", "both")
            ),
        ]
        memory = [cell(row, name, "mib", ".1f") for name in SYSTEMS]
        lines.append(
            f"| {row['backbone']} | {row['classes']:,} | {row['rounds']} | {' | '.join(times)} | {' | '.join(memory)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="Interleaved rounds per class count (default: 10).")
    parser.add_argument("--no-docs", action="store_true", help="Print the table without writing docs/model.md.")
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    rows = rows_for("embedding", args.rounds) + rows_for("minilm", args.rounds)
    text = table(rows, started)
    print(text)
    if not args.no_docs:
        write_into_docs(text, REPO_ROOT / "docs" / "model.md", "label_contributions")


if __name__ == "__main__":
    main()
