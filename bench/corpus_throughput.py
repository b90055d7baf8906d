"""Corpus runs: rows/s of `labelattn predict` / `explain --data` with 1 and 2 processes, peak memory on 10x more
rows, and SIGKILL in the middle of a 2-process run.

    .venv/bin/python bench/corpus_throughput.py                       # the figures of docs/corpus.md
    .venv/bin/python bench/corpus_throughput.py --rows 400 --ig-rows 60 --memory-rows 2000 20000   # quicker

Models (untrained: throughput needs no training): the embedding model as `labelattn train` builds it and one on
the MiniLM encoder (`from_encoder(minilm_path())`), 6 TREC labels. Data: the TREC questions repeated to the size
asked, as Parquet. Every figure is one command in a fresh process, as a user runs it; 1 and 2 processes are
interleaved (A, B, A, B) and the median of the rounds reported, since this machine's 2 cores are shared. Two
processes are `accelerate launch --multi_gpu --num_processes 2` on the CPU (gloo, ACCELERATE_USE_CPU=true).
"""

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import datasets
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ENV = {
    **os.environ,
    "ACCELERATE_USE_CPU": "true",
    "HF_HUB_OFFLINE": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_CBWR": "COMPATIBLE",
    "PYTHONPATH": str(ROOT),
}
TWO = ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
TWO += ["--mixed_precision", "no", "--dynamo_backend", "no", "-m", "labelattn"]
# Run the command in this process and print its peak resident memory (KiB on Linux) last.
PEAK = (
    "import resource, sys; from labelattn.cli import main; code = main(sys.argv[1:]); "
    "print('peak_rss_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(code)"
)
TASKS = {
    "predict": ["predict"],
    "label_attention": ["explain", "--method", "label_attention"],
    "integrated_gradients": ["explain", "--method", "integrated_gradients"],
}


def build_models(folder: Path) -> dict[str, Path]:
    from transformers import AutoTokenizer

    from labelattn import minilm_path
    from labelattn.training import build
    from labelattn.training.settings import TrainSettings
    from modeling_labelattn import LabelAttnForSequenceClassification

    labels = {i: name for i, name in enumerate(["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"])}
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    models = {
        "embedding": build.build_model(TrainSettings.of_command([], 6), list(labels.values()), False, len(tokenizer)),
        "minilm": LabelAttnForSequenceClassification.from_encoder(minilm_path(), id2label=labels),
    }
    paths = {}
    for name, model in models.items():
        paths[name] = folder / name
        model.save_pretrained(paths[name])
        tokenizer.save_pretrained(paths[name])
    return paths


def build_data(folder: Path, rows: int) -> Path:
    from labelattn.data.builtin import BUILTIN

    texts = BUILTIN["trec"][0]().texts
    path = folder / f"trec-{rows}.parquet"
    repeated = [texts[i % len(texts)] for i in range(rows)]
    datasets.Dataset.from_dict({"id": list(range(rows)), "text": repeated}).to_parquet(path)
    return path


def command(task: str, model: Path, data: Path, output: Path, *extra: str) -> list[str]:
    data_arg = ["--data", str(data)] if task != "predict" else [str(data)]
    return [*TASKS[task][:1], str(model), *data_arg, *TASKS[task][1:], "--output", str(output), "--no-progress", *extra]


def run(args: list[str], processes: int = 1) -> tuple[float, str]:
    """Run a labelattn command; its rows/s from the report line, and its stderr."""
    prefix = [sys.executable, *TWO] if processes == 2 else [sys.executable, "-m", "labelattn"]
    done = subprocess.run(prefix + args, env=ENV, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return float(re.search(r"\(([\d.]+) rows/s", done.stderr).group(1)), done.stderr


def throughput(models: dict[str, Path], folder: Path, rows: int, ig_rows: int, rounds: int) -> list[str]:
    lines = ["| model | task | rows | 1 process rows/s | 2 processes rows/s | ratio |", "|---|---|---:|---:|---:|---:|"]
    for name, model in models.items():
        for task in TASKS:
            n = ig_rows if task == "integrated_gradients" else rows
            data = build_data(folder, n)
            rates = {1: [], 2: []}
            for r in range(rounds):
                for processes in (1, 2):
                    output = folder / f"{name}-{task}-{processes}-{r}.parquet"
                    rates[processes].append(
                        run(command(task, model, data, output, "--shard-size", "100"), processes)[0]
                    )
            one, two = statistics.median(rates[1]), statistics.median(rates[2])
            lines.append(f"| {name} | {task} | {n} | {one:.1f} | {two:.1f} | {two / one:.2f} |")
            print(lines[-1], flush=True)
    return lines


def memory(model: Path, folder: Path, sizes: list[int]) -> list[str]:
    lines = ["| task | " + " | ".join(f"{n} rows: peak RSS MiB" for n in sizes) + " | ratio |", "|---|---:|---:|---:|"]
    for task in ("predict", "label_attention"):
        peaks = []
        for n in sizes:
            args = command(task, model, build_data(folder, n), folder / f"mem-{task}-{n}.parquet")
            done = subprocess.run(
                [sys.executable, "-c", PEAK, *args], env=ENV, cwd=ROOT, capture_output=True, text=True
            )
            if done.returncode:
                raise SystemExit(done.stderr[-3000:])
            peaks.append(int(re.search(r"peak_rss_kib (\d+)", done.stderr).group(1)) / 1024)
        lines.append(f"| {task} | " + " | ".join(f"{p:.0f}" for p in peaks) + f" | {peaks[-1] / peaks[0]:.2f} |")
        print(lines[-1], flush=True)
    return lines


def descendants(pid: int) -> list[int]:
    """Every process started by `pid`, and by those, from /proc (the workers of `accelerate launch`)."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return [grandchild for child in children for grandchild in (child, *descendants(child))]


def fault(model: Path, folder: Path, rows: int) -> list[str]:
    """SIGKILL a 2-process explain run once a third of its shards exist, run it again, compare with one process."""
    data = build_data(folder, rows)
    args = lambda output: command("integrated_gradients", model, data, output, "--shard-size", "10")  # noqa: E731
    run(args(folder / "fault-whole.parquet"), 1)
    output = folder / "fault.parquet"
    shards = folder / "fault.parquet.shards"
    process = subprocess.Popen([sys.executable, *TWO, *args(output)], env=ENV, cwd=ROOT, stderr=subprocess.DEVNULL)
    total = -(-rows // 10)
    while len(list(shards.glob("*.arrow"))) < total // 3 and process.poll() is None:
        time.sleep(0.05)
    for pid in [process.pid, *descendants(process.pid)]:  # the launcher and both workers, at once
        os.kill(pid, signal.SIGKILL)
    process.wait()
    time.sleep(1)
    stamps = {p.name: p.stat().st_mtime_ns for p in shards.glob("*.arrow")}
    _, stderr = run(args(output), 2)
    recomputed = sum(p.stat().st_mtime_ns != stamps[p.name] for p in shards.glob("*.arrow") if p.name in stamps)
    killed, whole = pq.read_table(output), pq.read_table(folder / "fault-whole.parquet")
    identical = killed.equals(whole)
    if not identical:
        print(sum(a != b for a, b in zip(killed.to_pylist(), whole.to_pylist(), strict=True)), "rows differ")
    report = re.search(r"\d+ shard\(s\) computed[^)]*", stderr).group(0)
    return [
        f"- killed after {len(stamps)} of {total} shards; the same command again: {report}; finished shards "
        f"written again: {recomputed}; output identical to an uninterrupted 1-process run: {identical}"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2000, help="rows for predict and label_attention")
    parser.add_argument("--ig-rows", type=int, default=200, help="rows for integrated_gradients")
    parser.add_argument("--memory-rows", type=int, nargs=2, default=[10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fault-rows", type=int, default=120)
    parser.add_argument("--models", nargs="*", default=["embedding", "minilm"], choices=["embedding", "minilm"])
    parser.add_argument("--skip", nargs="*", default=[], choices=["throughput", "memory", "fault"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        models = {name: path for name, path in build_models(folder).items() if name in args.models}
        if "throughput" not in args.skip:
            print("\n".join(throughput(models, folder, args.rows, args.ig_rows, args.rounds)))
        if "memory" not in args.skip:
            print("\n".join(memory(models[args.models[0]], folder, args.memory_rows)))
        if "fault" not in args.skip:
            print("\n".join(fault(models[args.models[0]], folder, args.fault_rows)))


if __name__ == "__main__":
    main()
