"""Quality and training speed on the fixed TREC split: label attention vs mean pooling, embedding and MiniLM
backbones, beside TF-IDF + linear SVM.

    python bench/train_quality.py                 # evaluates the models in models/, training any that is missing
    python bench/train_quality.py --rounds 5      # more throughput rounds

Accuracy and macro-F1 are measured on the TREC test split (538 questions) of `labelattn.data.load_data("trec")`.
Neural models are the ones `labelattn train` saved in models/ (their training command is printed from their
training_args.json); missing ones are trained first with the commands in MODELS. Throughput: training samples per
second (forward, backward, fused AdamW step, batches of 32 TREC questions), label attention and mean pooling
interleaved A, B, A, B in one process, medians and their ratio reported.
"""

import argparse
import json
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

ROOT = Path(__file__).resolve().parents[1]
# name -> options of `labelattn train` (the data is the default, TREC)
MODELS = {
    "trec-embedding": [],
    "trec-embedding-mean": ["--pooling", "mean"],
    "trec-minilm": ["--backbone", "minilm", "--max-length", "64"],
    "trec-minilm-mean": ["--backbone", "minilm", "--pooling", "mean", "--max-length", "64"],
}


def ensure_trained(name: str) -> Path:
    folder = ROOT / "models" / name
    if not (folder / "model.safetensors").is_file():
        command = [sys.executable, "-m", "labelattn.train", *MODELS[name], "--output-dir", str(folder), "--overwrite"]
        print("training:", " ".join(command), flush=True)
        subprocess.run(command, cwd=ROOT, check=True)
    return folder


def test_scores(folder: Path, texts: list[str], labels: list[int]) -> dict[str, float]:
    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    predicted = []
    with torch.no_grad():
        for start in range(0, len(texts), 64):
            batch = tokenizer(
                texts[start : start + 64], padding=True, truncation=True, max_length=128, return_tensors="pt"
            )
            predicted += model(**batch).logits.argmax(-1).tolist()
    return {"accuracy": accuracy_score(labels, predicted), "macro_f1": f1_score(labels, predicted, average="macro")}


def tfidf_scores(data, ngrams: tuple[int, int]) -> dict[str, float]:
    train_split, test_split = data.splits["train"], data.splits["test"]
    pipeline = make_pipeline(TfidfVectorizer(ngram_range=ngrams, sublinear_tf=True), LinearSVC())
    pipeline.fit(list(train_split["text"]), list(train_split["label"]))
    predicted = pipeline.predict(list(test_split["text"]))
    labels = list(test_split["label"])
    return {"accuracy": accuracy_score(labels, predicted), "macro_f1": f1_score(labels, predicted, average="macro")}


def make_stepper(data, backbone: str, pooling: str, batches: list[dict]):
    """A function running one training step of a fresh model built exactly as `labelattn train` builds it."""
    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    args = train.resolve_defaults(parser.parse_args(["--backbone", backbone, "--pooling", pooling]))
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


def throughput(data, backbone: str, steps: int, rounds: int) -> dict[str, list[float]]:
    tokenizer = train.load_tokenizer(backbone)
    texts, labels = list(data.splits["train"]["text"]), list(data.splits["train"]["label"])
    batches = []
    for start in range(0, 32 * 40, 32):
        batch = tokenizer(texts[start : start + 32], padding=True, truncation=True, max_length=64, return_tensors="pt")
        batch.pop("token_type_ids")
        batches.append({**batch, "labels": torch.tensor(labels[start : start + 32])})
    steppers = {pooling: make_stepper(data, backbone, pooling, batches) for pooling in ("label_attention", "mean")}
    for step in steppers.values():  # warm-up: first-call allocations and kernel selection
        step()
    rates = {pooling: [] for pooling in steppers}
    for _ in range(rounds):
        for pooling, step in steppers.items():  # interleaved, so that both see the same load on a shared machine
            start, samples = time.perf_counter(), sum(step() for _ in range(steps))
            rates[pooling].append(samples / (time.perf_counter() - start))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="Interleaved throughput rounds per backbone.")
    cli = parser.parse_args()
    data = load_data("trec")
    test_texts, test_labels = list(data.splits["test"]["text"]), list(data.splits["test"]["label"])
    print(f"TREC split: {data.split_record}")
    print(f"torch threads: {torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}\n")

    rows = [
        ("TF-IDF (1-grams) + LinearSVC", tfidf_scores(data, (1, 1)), "scikit-learn, sublinear tf"),
        ("TF-IDF (1-2-grams) + LinearSVC", tfidf_scores(data, (1, 2)), "scikit-learn, sublinear tf"),
    ]
    for name in MODELS:
        folder = ensure_trained(name)
        command = json.loads((folder / "training_args.json").read_text())
        how = f"{command['epochs']} epochs, lr {command['learning_rate']}, max length {command['max_length']}"
        rows.append((name, test_scores(folder, test_texts, test_labels), how))

    print("| model | test accuracy | test macro-F1 | trained with |")
    print("|---|---|---|---|")
    for name, scores, how in rows:
        print(f"| {name} | {scores['accuracy']:.4f} | {scores['macro_f1']:.4f} | {how} |")

    print("\n| backbone | label attention samples/s | mean pooling samples/s | ratio (median) |")
    print("|---|---|---|---|")
    for backbone, steps in (("embedding", 40), ("minilm", 4)):
        rates = throughput(data, backbone, steps, cli.rounds)
        attention, mean = statistics.median(rates["label_attention"]), statistics.median(rates["mean"])
        print(f"| {backbone} | {attention:.0f} | {mean:.0f} | {attention / mean:.2f} |", flush=True)


if __name__ == "__main__":
    main()
