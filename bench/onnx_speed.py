"""Rows per second of the exported ONNX model in ONNX Runtime against the PyTorch model, on 2 CPU cores.

The default model (`labelattn train`, the embedding backbone on TREC) is exported with `labelattn.export` to a
temporary folder, then both predict the class probabilities of TREC's questions end to end (tokenizing included):
PyTorch through `explainers.predict` (what `labelattn predict` runs), ONNX Runtime through
`labelattn.onnx_predict.OnnxClassifier` (what `labelattn predict-onnx` runs, without torch); both in length-sorted
batches of 32, and one text per call (a request at a time, as a service sees them); and the forward pass alone,
`model(**batch)` against `session.run` on the same padded token arrays (batches of 32 in corpus order), which
separates the runtime's share of the gain from the tokenizing and bookkeeping around it. torch and ONNX Runtime each get
2 threads. The systems are timed in interleaved rounds (A, B, then B, A) of wall time, so that load from other
processes hits both alike; the table reports the median rows/s over rounds and the median of the per-round ratios.
The probabilities of the two are compared too (the largest gap). The table is printed and written into
docs/production.md between the benchmark markers.

    .venv/bin/python bench/onnx_speed.py --model models/trec-embedding
"""

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
from _docs_block import write_into_docs

from explainers import load_classifier, predict
from labelattn.data.builtin import BUILTIN
from labelattn.export import export_onnx
from labelattn.onnx_predict import OnnxClassifier

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python bench/onnx_speed.py --model models/trec-embedding"
THREADS = 2


def interleaved(systems: dict, rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each system, `rounds` rounds, the order reversed every other round (after a warm-up)."""
    names = list(systems)
    for run in systems.values():
        run()
    seconds = {name: [] for name in names}
    for round_index in range(rounds):
        for name in names if round_index % 2 == 0 else reversed(names):
            start = time.perf_counter()
            systems[name]()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(REPO_ROOT / "models" / "trec-embedding"), help="a trained model folder")
    parser.add_argument("--rows", type=int, default=1000, help="TREC questions per batched round (default 1000)")
    parser.add_argument("--single-rows", type=int, default=200, help="questions per one-at-a-time round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--no-docs", action="store_true", help="print the table only")
    args = parser.parse_args()
    if not Path(args.model).is_dir():
        parser.error(f"{args.model} is not a model folder: train the default model first (labelattn train).")

    torch.set_num_threads(THREADS)
    model, tokenizer = load_classifier(args.model)
    texts = BUILTIN["trec"][0]().texts[: args.rows]
    singles = texts[: args.single_rows]
    with tempfile.TemporaryDirectory() as folder:
        report = export_onnx(model, tokenizer, Path(folder) / "onnx")
        onnx = OnnxClassifier(Path(folder) / "onnx", threads=THREADS)
        gap = float(abs(onnx.probabilities(texts) - predict(model, tokenizer, texts).probabilities.numpy()).max())
        with torch.inference_mode():
            batched = interleaved(
                {
                    "PyTorch": lambda: predict(model, tokenizer, texts, batch_size=32),
                    "ONNX Runtime": lambda: onnx.probabilities(texts, batch_size=32),
                },
                args.rounds,
            )
            arrays = [onnx._batch(onnx.tokenizer.encode_batch(texts[i : i + 32])) for i in range(0, len(texts), 32)]
            tensors = [{k: torch.from_numpy(v) for k, v in batch.items()} for batch in arrays]
            forward = interleaved(
                {
                    "PyTorch": lambda: [model(**batch).logits for batch in tensors],
                    "ONNX Runtime": lambda: [onnx.session.run(["logits"], batch) for batch in arrays],
                },
                args.rounds,
            )
            single = interleaved(
                {
                    "PyTorch": lambda: [predict(model, tokenizer, [t]) for t in singles],
                    "ONNX Runtime": lambda: [onnx.probabilities([t]) for t in singles],
                },
                args.rounds,
            )

    lines = [
        f"Default model ({model.config.backbone} backbone, {model.config.num_labels} classes), TREC questions, "
        f"{THREADS} threads each, {platform.processor() or platform.machine()}, torch {torch.__version__}; "
        f"median of {args.rounds} interleaved rounds (wall time). Largest probability gap ONNX vs PyTorch: "
        f"{gap:.1e}; export check: {report.summary()}.",
        "",
        "| calls | rows | PyTorch rows/s | ONNX Runtime rows/s | ONNX / PyTorch (median of rounds) |",
        "|---|---|---|---|---|",
    ]
    runs = (
        ("predict, batches of 32", batched, len(texts)),
        ("forward only, the same padded batches of 32", forward, len(texts)),
        ("predict, one text a call", single, len(singles)),
    )
    for name, seconds, rows in runs:
        ratios = [p / o for p, o in zip(seconds["PyTorch"], seconds["ONNX Runtime"], strict=True)]
        lines.append(
            f"| {name} | {rows} | {rows / statistics.median(seconds['PyTorch']):,.0f} | "
            f"{rows / statistics.median(seconds['ONNX Runtime']):,.0f} | {statistics.median(ratios):.2f}× |"
        )
    lines += ["", f"Command: `{COMMAND}`"]
    table = "\n".join(lines)
    print(table)
    if not args.no_docs:
        write_into_docs(table, REPO_ROOT / "docs" / "production.md", "onnx-speed")


if __name__ == "__main__":
    main()
