"""The default fast model against TF-IDF + LinearSVC: quality and training time on TREC and BBC News, in one run.

    python bench/train_quality.py                            # both data sets, the default and the previous default
    python bench/train_quality.py --data trec --variants default bag random --seeds 0 1 2
    python bench/train_quality.py --throughput               # also training samples/s, label attention vs mean
    python bench/train_quality.py --data --throughput        # the throughput alone
    python bench/train_quality.py --data --throughput --throughput-data icd10-cm     # ... at 1,918 classes
    python bench/train_quality.py --data --throughput --throughput-data icd10-cm --group-by-length  # like lengths

For each data set (its fixed split, `labelattn.data.reading.load_data`): TF-IDF (1-grams and 1-2-grams, sublinear tf) +
LinearSVC fitted on the training split; then the embedding backbone trained by `labelattn train` itself (a
subprocess, with the defaults but for `--data`, `--pooling`, `--seed` and the variant's options, see VARIANTS) into
models/bench/, with label attention and mean pooling. Scores: accuracy and macro-F1 of the saved model on the test
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

from labelattn.data.reading import load_data
from labelattn.training import build, settings
from labelattn.training.static_embeddings import DEFAULT_EMBEDDINGS, load_static_embeddings

ROOT = Path(__file__).resolve().parents[1]
POOLINGS = ("label_attention", "mean")
# The training steps timed against each other, interleaved (`labelattn train` options). Options that the class count
# decides are spelt out where a row names them, so that no two rows are one model at 1,000 classes or more.
FEW_CLASS_HEAD = ["--label-projections", "--token-context-width", "5"]
THROUGHPUT_SYSTEMS = {
    "label attention, the few-class defaults": FEW_CLASS_HEAD,
    "label attention, classifier dropout 0.1": ["--classifier-dropout", "0.1"],
    "label attention, keys of 16 per head": ["--attention-key-size", "16"],
    "label attention, keys of 8 per head": ["--attention-key-size", "8"],
    "label attention, no label projections": ["--no-label-projections", "--token-context-width", "5"],
    "the many-class recipe": ["--no-label-projections", "--token-context-width", "3"],
    "the fast many-class recipe": [
        *["--no-label-projections", "--token-context-width", "3"],
        *["--num-attention-heads", "1", "--attention-key-size", "32", "--scorer-rank", "64"],
    ],
    "mean pooling": ["--pooling", "mean"],
}
# Variants of the embedding backbone: `labelattn train` options added to the defaults.
VARIANTS = {
    "default": [],  # MiniLM's input vectors, 384 wide, frozen; a width-5 token context; no classifier dropout
    "bag": [  # the previous default
        *["--token-context-width", "0", "--hidden-size", "128", "--no-freeze-embeddings", "--classifier-dropout", "0.1"]
    ],
    "trained-table": ["--no-freeze-embeddings"],
    "classifier-dropout": ["--classifier-dropout", "0.1"],  # the class vectors formed and dropped out
    "random": ["--embeddings", "random", "--hidden-size", "128"],
    "model2vec": ["--embeddings", "model2vec", "--hidden-size", "256"],
    "grouped": ["--group-by-length"],  # batches of texts of like length (less padding)
    "free": ["--no-label-projections"],  # each class's own query, no output map (LAAT's head)
    # How a class vector becomes its logit (docs/model.md): the scorer choices, with the rest of the defaults.
    "shared": ["--scorer", "shared"],
    "class-bias": ["--scorer", "class_bias"],
    "per-class": ["--scorer", "per_class"],
    "per-class-r16": ["--scorer", "per_class", "--scorer-rank", "16"],
    "normed": ["--scorer", "normed"],
    # The cost levers at thousands of classes: one head with keys of 32.
    "shared-1h-k32": ["--scorer", "shared", "--num-attention-heads", "1", "--attention-key-size", "32"],
    "per-class-r16-1h-k32": [
        *["--scorer", "per_class", "--scorer-rank", "16", "--num-attention-heads", "1", "--attention-key-size", "32"]
    ],
}


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


def train_and_score(data_name: str, data, variant: str, pooling: str, seed: int) -> tuple[dict[str, float], float]:
    """Test scores of `labelattn train --data D --pooling P --seed S <the variant's options>`, and its wall-clock
    seconds."""
    folder = ROOT / "models" / "bench" / f"{data_name}-{variant}-{pooling}-{seed}"
    options = ["--data", data_name, "--pooling", pooling, "--seed", str(seed), *VARIANTS[variant]]
    command = [sys.executable, "-m", "labelattn", "train", *options, "--output-dir", str(folder), "--overwrite"]
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return test_scores(folder, data), time.perf_counter() - start


def mean_scores(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: statistics.mean(run[name] for run in runs) for name in runs[0]}


def make_stepper(data, options: list[str], batches: list[dict]):
    """A function running one training step of a fresh model built exactly as `labelattn train <options>` builds it."""
    train_settings = settings.TrainSettings.of_command(options, len(data.label_names))
    torch.manual_seed(0)
    model = build.build_model(train_settings, data.label_names, False, 30522).train()
    optimizer = torch.optim.AdamW(
        build.optimizer_groups(model, train_settings), weight_decay=train_settings.weight_decay, fused=True
    )
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


def throughput(data, steps: int = 40, rounds: int = 5, grouped: bool = False) -> dict[str, list[float]]:
    """Training samples per second of the default model and its variants in THROUGHPUT_SYSTEMS, interleaved A, B,
    C, A, B, C in one process so that all see the same load on a shared machine. The batches are 40 of 32 training
    texts: the first rows, or with `grouped` the first batches of `labelattn train --group-by-length`'s first
    epoch."""
    from labelattn.training.length_groups import EpochLengthGroupedSampler

    tokenizer = build.load_tokenizer("embedding")
    texts, labels = list(data.splits["train"]["text"]), list(data.splits["train"]["label"])
    order = list(range(32 * 40))
    if grouped:
        lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=64)["input_ids"]]
        order = list(EpochLengthGroupedSampler(lengths, 32, seed=0))[: 32 * 40]
    batches = []
    for start in range(0, 32 * 40, 32):
        rows = order[start : start + 32]
        batch = tokenizer([texts[i] for i in rows], padding=True, truncation=True, max_length=64, return_tensors="pt")
        batch.pop("token_type_ids")
        batches.append({**batch, "labels": torch.tensor([labels[i] for i in rows])})
    real = sum(b["attention_mask"].sum().item() for b in batches) / (32 * 40)
    padded = sum(b["attention_mask"].numel() for b in batches) / (32 * 40)
    print(f"throughput batches: {real:.1f} tokens a text, padded to {padded:.1f}")
    steppers = {name: make_stepper(data, options, batches) for name, options in THROUGHPUT_SYSTEMS.items()}
    for step in steppers.values():  # warm-up: first-call allocations and kernel selection
        step()
    rates = {name: [] for name in steppers}
    for _ in range(rounds):
        for name, step in steppers.items():
            start, samples = time.perf_counter(), sum(step() for _ in range(steps))
            rates[name].append(samples / (time.perf_counter() - start))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data", nargs="*", default=["trec", "bbc-news"], help="Built-in data sets to measure (none: throughput only)."
    )
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=["default", "bag"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="Training seeds; scores are averaged.")
    parser.add_argument("--throughput", action="store_true", help="Also measure training samples/s.")
    parser.add_argument(
        "--throughput-data", default="trec", help="Built-in data set whose rows and classes are timed (default: trec)."
    )
    parser.add_argument(
        "--group-by-length",
        action="store_true",
        help="Time batches of like length (`labelattn train --group-by-length`).",
    )
    cli = parser.parse_args()
    print(f"torch threads: {torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    static = load_static_embeddings(DEFAULT_EMBEDDINGS, 384)  # made once here: the training times exclude it
    state = "cached" if static.cached else "made now"
    print(f"{DEFAULT_EMBEDDINGS} vectors: one-time preparation {static.seconds:.1f} s ({state}: {static.path})")

    rows, table = [], []
    for data_name in cli.data:
        data = load_data(data_name)
        baseline = tfidf_scores(data, (1, 2))
        rows.append((data_name, "TF-IDF (1-grams) + LinearSVC", tfidf_scores(data, (1, 1)), None))
        rows.append((data_name, "TF-IDF (1-2-grams) + LinearSVC", baseline, None))
        results = {}
        for variant in cli.variants:
            for pooling in POOLINGS:
                runs = [train_and_score(data_name, data, variant, pooling, seed) for seed in cli.seeds]
                results[variant, pooling] = mean_scores([run for run, _ in runs])
                seconds = statistics.median(seconds for _, seconds in runs)
                rows.append((data_name, f"embedding, {variant}, {pooling}", results[variant, pooling], seconds))
                print(f"{rows[-1][0]} {rows[-1][1]}: {results[variant, pooling]}, {seconds:.0f} s", flush=True)
        for variant in cli.variants:
            attention, mean = results[variant, "label_attention"], results[variant, "mean"]
            differences = [
                attention["accuracy"] - baseline["accuracy"],
                attention["macro_f1"] - baseline["macro_f1"],
                attention["accuracy"] - mean["accuracy"],
                attention["macro_f1"] - mean["macro_f1"],
            ]
            table.append(f"| {data_name} | {variant} | " + " | ".join(f"{d:+.4f}" for d in differences) + " |")

    if rows:
        seeds = ", ".join(map(str, cli.seeds))
        print(f"\nTest scores (mean over seeds {seeds}); time: wall-clock seconds of `labelattn train` (median)")
        print(
            "Variants (options added to the defaults): "
            + "; ".join(f"{v}: {' '.join(VARIANTS[v]) or '-'}" for v in cli.variants)
            + "\n"
        )
        print("| data | model | accuracy | macro-F1 | train s |")
        print("|---|---|---|---|---|")
        for data_name, name, result, seconds in rows:
            time_cell = f"{seconds:.0f}" if seconds is not None else ""
            print(f"| {data_name} | {name} | {result['accuracy']:.4f} | {result['macro_f1']:.4f} | {time_cell} |")
        print("\nLabel attention against TF-IDF (1-2-grams) + LinearSVC and against mean pooling (differences)\n")
        print("| data | variant | accuracy − TF-IDF | macro-F1 − TF-IDF | accuracy − mean | macro-F1 − mean |")
        print("|---|---|---|---|---|---|")
        print("\n".join(table))

    if cli.throughput:
        data = load_data(cli.throughput_data)
        rates = {
            name: statistics.median(values) for name, values in throughput(data, grouped=cli.group_by_length).items()
        }
        print(f"\n{cli.throughput_data}: {len(data.label_names)} classes, batches of 32 training rows, <= 64 tokens")
        print("\n| model (`labelattn train` options) | samples/s | against mean pooling |\n|---|---|---|")
        for name, rate in rates.items():
            options = " ".join(THROUGHPUT_SYSTEMS[name]) or "the defaults"
            print(f"| {name} (`{options}`) | {rate:.0f} | {rate / rates['mean pooling']:.2f} |")


if __name__ == "__main__":
    main()
