"""Label-attention queries computed from the class descriptions against a random start, on the classes with few rows.

    python bench/label_descriptions.py                                  # trec-fine, seeds 0 1 2
    python bench/label_descriptions.py --data icd10-cm --seeds 0 --epochs 1
    python bench/label_descriptions.py --data icd10-cm --chapters --seeds 0    # ten disease chapters only

Trains the default model with `labelattn train` (a subprocess, defaults but for `--data`, `--seed`, `--epochs` and
the `--train` options), once as it is and once with `--label-descriptions`, into models/bench/, and scores each saved
model on the test split: accuracy and macro-F1 overall, and accuracy on the test rows whose class has at most `--few`
training rows (the classes a random query has least to learn from), averaged over the seeds. Prints one markdown
table.
"""

import argparse
import os
import shlex
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import torch
from sklearn.metrics import f1_score
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from labelattn.data.reading import load_data

ROOT = Path(__file__).resolve().parents[1]
STARTS = {"random start": [], "from descriptions": ["--label-descriptions"]}


def chapter_files(chapters: list[str]) -> dict[str, Path]:
    """The ICD-10-CM categories of `chapters` as CSV files and a label file (`bench/untrained_classes.py`'s, with no
    category held out)."""
    from untrained_classes import build_files

    return build_files(chapters, 0.0, 0, ROOT / "models" / "bench" / "chapters")[0]


def train(data: str, seed: int, epochs: int | None, extra: list[str], files: dict[str, Path] | None) -> Path:
    """The model trained with `extra` options into models/bench/ (on `files` where given); its folder."""
    name = "icd10-cm-chapters" if files else data
    folder = (
        ROOT / "models" / "bench" / f"{name}-{'descriptions' if '--label-descriptions' in extra else 'random'}-{seed}"
    )
    if files:  # the same files and classes (with their groups) for both starts
        data, extra = str(files["train"]), [*extra, "--validation-data", str(files["validation"])]
        extra += ["--test-data", str(files["test"]), "--label-file", str(files["labels"])]
        extra += ["--hierarchy-levels", "chapter,block,category"]
    command = [sys.executable, "-m", "labelattn", "train", "--data", data, "--seed", str(seed), *extra]
    command += ["--epochs", str(epochs)] if epochs else []
    subprocess.run([*command, "--output-dir", str(folder), "--overwrite"], check=True, env={**os.environ})
    return folder


@torch.no_grad()
def top_classes(
    folder: Path, texts: list[str], k: int = 1, batch_size: int = 256, **config
) -> tuple[list[list[int]], list[str]]:
    """The `k` most probable class indices of each text by the saved model in `folder` (its `config` values replaced
    by the keyword arguments), and its class names."""
    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True, **config).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    top = []
    for start in range(0, len(texts), batch_size):
        chunk = texts[start : start + batch_size]
        limit = model.config.max_seq_length  # the tokenizer's own limit (512) may be above the model's
        batch = tokenizer(chunk, padding=True, truncation=True, max_length=limit, return_tensors="pt")
        batch.pop("token_type_ids", None)
        top += model(**batch).logits.topk(k, dim=-1).indices.tolist()
    return top, [model.config.id2label[i] for i in range(model.config.num_labels)]


def predictions(folder: Path, texts: list[str]) -> list[str]:
    """The most probable class name of each text by the saved model in `folder`."""
    top, names = top_classes(folder, texts)
    return [names[best[0]] for best in top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="trec-fine")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=None, help="default: labelattn train's")
    parser.add_argument("--few", type=int, default=5, help="a class with at most this many training rows is few")
    parser.add_argument(
        "--chapters",
        nargs="*",
        help="with --data icd10-cm: only the categories of these chapters (none named: the ten disease chapters of "
        "bench/untrained_classes.py), trained from CSV files with their label file",
    )
    parser.add_argument("--train", default="", help="more `labelattn train` options for both starts")
    args = parser.parse_args()

    files = None
    if args.chapters is not None:
        from untrained_classes import DISEASE_CHAPTERS

        if args.data != "icd10-cm":
            parser.error("--chapters selects chapters of --data icd10-cm")
        files = chapter_files(args.chapters or DISEASE_CHAPTERS)
    data = (
        load_data(str(files["train"]), str(files["validation"]), str(files["test"])) if files else load_data(args.data)
    )
    counts = Counter(data.splits["train"]["label"])
    test = data.splits["test"]
    labels = [data.label_names[label] for label in test["label"]]
    counts = {data.label_names[label]: count for label, count in counts.items()}
    few = [i for i, label in enumerate(labels) if counts[label] <= args.few]
    print(f"{args.data}: {len(labels)} test rows, {len(few)} of classes with <= {args.few} training rows")
    rows = []
    for name, extra in STARTS.items():
        scores = {"accuracy": [], "macro_f1": [], "few": []}
        for seed in args.seeds:
            folder = train(args.data, seed, args.epochs, [*extra, *shlex.split(args.train)], files)
            predicted = predictions(folder, test["text"])
            right = [p == t for p, t in zip(predicted, labels, strict=True)]
            scores["accuracy"].append(sum(right) / len(right))
            scores["macro_f1"].append(f1_score(labels, predicted, average="macro"))
            scores["few"].append(sum(right[i] for i in few) / max(len(few), 1))
        rows.append((name, *(statistics.mean(values) for values in scores.values())))
    few_column = f"accuracy, classes with ≤ {args.few} training rows ({len(few)} test rows)"
    print(f"\n| start | accuracy | macro-F1 | {few_column} |")
    print("|---|---|---|---|")
    for name, accuracy, macro_f1, few_accuracy in rows:
        print(f"| {name} | {accuracy:.4f} | {macro_f1:.4f} | {few_accuracy:.4f} |")
    print(f"\n(mean of seeds {args.seeds})")


if __name__ == "__main__":
    main()
