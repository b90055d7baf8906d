"""The default fast model against TF-IDF + LinearSVC: quality and training time on TREC and BBC News, in one run.

    python bench/train_quality.py                          # both data sets, every --embeddings choice, both poolings
    python bench/train_quality.py --data trec --embeddings model2vec --seeds 0 1 2
    python bench/train_quality.py --throughput             # also training samples/s, label attention vs mean pooling

For each data set (its fixed split, `labelattn.data.load_data`): TF-IDF (1-grams and 1-2-grams, sublinear tf) +
LinearSVC fitted on the training split; then the embedding backbone trained by `labelattn train` itself (a
subprocess, with the defaults but for `--data`, `--embeddings`, `--pooling`, `--seed`) into models/bench/, for every
embeddings choice with label attention and mean pooling. Scores: accuracy and macro-F1 of the saved model on the test
split (a different seed per run is averaged); the differences with TF-IDF (1-2-grams) and between the poolings are
printed. Training time: the wall-clock time of the whole `labelattn train` command (start-up, data, training,
evaluation, saving), after the static vectors were prepared once (their preparation time is printed first).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import accuracy_score, f1_score
from sklearn.pipeline import make_pipeline
from sklearn.svm import LinearSVC
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from labelattn import train
from labelattn.data import load_data
from labelattn.static_embeddings import DEFAULT_EMBEDDINGS, EMBEDDINGS, load_static_embeddings

ROOT = Path(__file__).resolve().parents[1]
POOLINGS = ("label_attention", "mean")


def scores(labels: list[int], predicted: list[int]) -> dict[str, float]:
    return {"accuracy": accuracy_score(labels, predicted), "macro_f1": f1_score(labels, predicted, average="macro")}


def tfidf_scores(data, ngrams: tuple[int, int]) -> dict[str, float]:
    train_split, test_split = data.splits["train"], data.splits["test"]
    pipeline = make_pipeline(TfidfVectorizer(ngram_range=ngrams, sublinear_tf=True), LinearSVC())
    pipeline.fit(list(train_split["text"]), list(train_split["label"]))
    return scores(list(test_split["label"]), pipeline.predict(list(test_split["text"])))


def test_scores(folder: Path, data) -> dict[str, float]:
    """The saved model, loaded as a user would, on the test split."""
    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    texts, predicted = list(data.splits["test"]["text"]), []
    with torch.no_grad():
        for start in range(0, len(texts), 64):
            batch = tokenizer(
                texts[start : start + 64],
                padding=True,
                truncation=True,
                max_length=model.config.max_seq_length,
                return_tensors="pt",
            )
            predicted += model(**batch).logits.argmax(-1).tolist()
    return scores(list(data.splits["test"]["label"]), predicted)


def train_and_score(data_name: str, data, embeddings: str, pooling: str, seed: int) -> tuple[dict[str, float], float]:
    """Test scores of `labelattn train --data D --embeddings E --pooling P --seed S`, and its wall-clock seconds."""
    folder = ROOT / "models" / "bench" / f"{data_name}-{embeddings}-{pooling}-{seed}"
    options = ["--data", data_name, "--embeddings", embeddings, "--pooling", pooling, "--seed", str(seed)]
    command = [sys.executable, "-m", "labelattn.train", *options, "--output-dir", str(folder), "--overwrite"]
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return test_scores(folder, data), time.perf_counter() - start


def mean_scores(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.mean(run[name] for run in runs) for name in runs[0]}


def make_stepper(data, pooling: str, batches: list[dict]):
    """A function running one training step of a fresh default model built exactly as `labelattn train` builds it."""
    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    args = train.resolve_defaults(parser.parse_args(["--pooling", pooling]))
    torch.manual_seed(0)
    model = train.build_model(args, data.label_names, False, 30522).train()
    optimizer = torch.optim.AdamW(train.optimizer_groups(model, args), weight_decay=args.weight_decay, fused=True)
    position = [0]

    def step() -> int:
        batch = batches[position[0] % len(batches)]
        position[0] += 1
        model(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        return batch["input_ids"].shape[0]

    return step


def throughput(data, steps: int = 40, rounds: int = 5) -> dict[str, list[float]]:
    """Training samples per second of the default model, label attention and mean pooling interleaved A, B, A, B
    in one process so that both see the same load on a shared machine."""
    tokenizer = train.load_tokenizer("embedding")
    texts, labels = list(data.splits["train"]["text"]), list(data.splits["train"]["label"])
    batches = []
    for start in range(0, 32 * 40, 32):
        batch = tokenizer(texts[start : start + 32], padding=True, truncation=True, max_length=64, return_tensors="pt")
        batch.pop("token_type_ids")
        batches.append({**batch, "labels": torch.tensor(labels[start : start + 32])})
    steppers = {pooling: make_stepper(data, pooling, batches) for pooling in POOLINGS}
    for step in steppers.values():  # warm-up: first-call allocations and kernel selection
        step()
    rates = {pooling: [] for pooling in steppers}
    for _ in range(rounds):
        for pooling, step in steppers.items():
            start, samples = time.perf_counter(), sum(step() for _ in range(steps))
            rates[pooling].append(samples / (time.perf_counter() - start))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="+", default=["trec", "bbc-news"], help="Built-in data sets to measure.")
    parser.add_argument("--embeddings", nargs="+", choices=EMBEDDINGS, default=list(EMBEDDINGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="Training seeds; scores are averaged.")
    parser.add_argument("--throughput", action="store_true", help="Also measure training samples/s (TREC).")
    cli = parser.parse_args()
    print(f"torch threads: {torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for kind in cli.embeddings:  # made once here, so that the training times below exclude it
        if kind != "random":
            static = load_static_embeddings(kind, 128)
            state = "cached" if static.cached else "made now"
            print(f"{kind} vectors: one-time preparation {static.seconds:.1f} s ({state}: {static.path})")

    rows, table = [], []
    for data_name in cli.data:
        data = load_data(data_name)
        baseline = tfidf_scores(data, (1, 2))
        rows.append((data_name, "TF-IDF (1-grams) + LinearSVC", tfidf_scores(data, (1, 1)), None))
        rows.append((data_name, "TF-IDF (1-2-grams) + LinearSVC", baseline, None))
        results = {}
        for embeddings in cli.embeddings:
            for pooling in POOLINGS:
                runs = [train_and_score(data_name, data, embeddings, pooling, seed) for seed in cli.seeds]
                results[embeddings, pooling] = mean_scores([run for run, _ in runs])
                seconds = statistics.median(seconds for _, seconds in runs)
                default = " (default)" if embeddings == DEFAULT_EMBEDDINGS and pooling == POOLINGS[0] else ""
                rows.append(
                    (data_name, f"embedding, {embeddings}, {pooling}{default}", results[embeddings, pooling], seconds)
                )
                print(f"{rows[-1][0]} {rows[-1][1]}: {results[embeddings, pooling]}, {seconds:.0f} s", flush=True)
        for embeddings in cli.embeddings:
            attention, mean = results[embeddings, "label_attention"], results[embeddings, "mean"]
            differences = [
                attention["accuracy"] - baseline["accuracy"],
                attention["macro_f1"] - baseline["macro_f1"],
                attention["accuracy"] - mean["accuracy"],
                attention["macro_f1"] - mean["macro_f1"],
            ]
            table.append(f"| {data_name} | {embeddings} | " + " | ".join(f"{d:+.4f}" for d in differences) + " |")

    seeds = ", ".join(map(str, cli.seeds))
    print(f"\nTest scores (mean over seeds {seeds}); time: wall-clock seconds of `labelattn train` (median)\n")
    print("| data | model | accuracy | macro-F1 | train s |")
    print("|---|---|---|---|---|")
    for data_name, name, result, seconds in rows:
        time_cell = f"{seconds:.0f}" if seconds is not None else ""
        print(f"| {data_name} | {name} | {result['accuracy']:.4f} | {result['macro_f1']:.4f} | {time_cell} |")
    print("\nLabel attention against TF-IDF (1-2-grams) + LinearSVC and against mean pooling (differences)\n")
    print("| data | embeddings | accuracy − TF-IDF | macro-F1 − TF-IDF | accuracy − mean | macro-F1 − mean |")
    print("|---|---|---|---|---|---|")
    print("\n".join(table))

    if cli.throughput:
        rates = throughput(load_data("trec"))
        attention, mean = statistics.median(rates["label_attention"]), statistics.median(rates["mean"])
        print("\n| label attention samples/s | mean pooling samples/s | ratio (median) |\n|---|---|---|")
        print(f"| {attention:.0f} | {mean:.0f} | {attention / mean:.2f} |")


if __name__ == "__main__":
    main()
