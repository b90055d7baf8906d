"""The anchors for many classes, fastText and TF-IDF + LinearSVC, beside labelattn's models, on the project's splits.

    python bench/many_classes.py                                         # trec and trec-fine, the two anchors
    nice python bench/many_classes.py --data icd10-cm                    # 1,918 classes: about 10 minutes
    python bench/many_classes.py --data trec-fine --systems fasttext fasttext-autotune --autotune-seconds 60
    python bench/many_classes.py --data trec-fine --model models/trec-fine-embedding     # a trained model's row
    python bench/many_classes.py --data trec-fine --train "--backbone minilm --max-length 64"   # train it here, timed
    python bench/many_classes.py --data icd10-cm --docs                  # write the table into docs/many-classes.md

Every system is trained on the training split of `labelattn.data.reading.load_data(NAME)` and scored on its test split:
- `fasttext`: supervised fastText (`fasttext-numpy2==0.10.4`) with the settings its users start from: 25 epochs,
  learning rate 0.5, word bigrams, softmax, one thread, seed 0, on lower-cased texts with punctuation split off;
- `fasttext-char`: the same with character n-grams of 3 to 6 (`minn=3, maxn=6`);
- `fasttext-autotune`: fastText's own search (`autotuneValidationFile` = the validation split, optimising F1,
  `--autotune-seconds` long), then trained with what it found;
- `tfidf`: TF-IDF of word 1-2-grams (sublinear tf) + LinearSVC (C=1), scikit-learn;
- a labelattn model: a folder given with `--model` (prediction only; its training time is not known here), or one
  trained here by `labelattn train --data NAME OPTIONS` for each `--train OPTIONS`, timed end to end (start-up,
  data, training, evaluation, saving).

Scores: top-1 accuracy, macro-F1 (scikit-learn's, over the classes in the test labels or the predictions, as
`labelattn train` reports it), precision@5 (for single-label data the top-5 accuracy over 5, as the shipped
`precision_at_k` metric defines it; the top-5 accuracy, i.e. recall@5, beside it), and the accuracy at each upper
level of the data's hierarchy (a predicted class implies its groups). The top 5 are counted here from each system's
5 best classes: the shipped metric wants every class's score as Python lists, 16 million floats at ICD-10-CM's size.
Training seconds are wall-clock; prediction rows/s time the whole test split (tokenising included), top 5 asked.
`--repeats N` runs the systems N times, interleaved (A, B, A, B), and reports the median times; scores come from the
first round (every system here is deterministic but the autotuned fastText, whose search is timed). The CPU is
shared: expect noise in the times, not in the scores.
"""

import argparse
import functools
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _docs_block import write_into_docs
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import accuracy_score, f1_score
from sklearn.svm import LinearSVC

from labelattn.data.reading import load_data
from labelattn.data.records import LabelledData

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "many-classes.md"
TOP = 5
FASTTEXT = {"epoch": 25, "lr": 0.5, "wordNgrams": 2, "loss": "softmax", "thread": 1, "seed": 0, "verbose": 0}


@dataclass
class Run:
    """One system's test predictions (the 5 best class indices per text, best first) and its times."""

    top: np.ndarray
    train_seconds: float | None
    predict_seconds: float
    note: str = ""


# --------------------------------------------------------------------------------------------------- systems


def fasttext_text(text: str) -> str:
    """fastText splits on whitespace only: lower-cased words with punctuation split off, one line."""
    return " ".join(re.findall(r"\w+|[^\w\s]", text.lower()))


def fasttext_run(data: LabelledData, autotune_seconds: int = 0, **options) -> Run:
    import fasttext

    with tempfile.TemporaryDirectory() as folder:
        files = {}
        for split in ("train", "validation"):
            files[split] = Path(folder) / f"{split}.txt"
            rows = zip(data.splits[split]["label"][:], data.splits[split]["text"][:], strict=True)
            files[split].write_text("".join(f"__label__{label} {fasttext_text(text)}\n" for label, text in rows))
        settings = {**FASTTEXT, **options}
        if autotune_seconds:
            settings = {"thread": 1, "seed": 0, "verbose": 0, "autotuneDuration": autotune_seconds}
            settings["autotuneValidationFile"] = str(files["validation"])
        start = time.perf_counter()
        model = fasttext.train_supervised(input=str(files["train"]), **settings)
        train_seconds = time.perf_counter() - start
    texts = [fasttext_text(text) for text in data.splits["test"]["text"][:]]
    start = time.perf_counter()
    labels, _ = model.predict(texts, k=TOP)
    predict_seconds = time.perf_counter() - start
    top = np.array([[int(label.removeprefix("__label__")) for label in row] for row in labels])
    found = f"epoch {model.epoch}, lr {model.lr:.3g}, wordNgrams {model.wordNgrams}, dim {model.dim}, minn {model.minn}"
    return Run(top, train_seconds, predict_seconds, f"autotuned: {found}" if autotune_seconds else "")


def tfidf_run(data: LabelledData) -> Run:
    vectorizer, classifier = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True), LinearSVC()
    start = time.perf_counter()
    classifier.fit(vectorizer.fit_transform(data.splits["train"]["text"][:]), data.splits["train"]["label"][:])
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    scores = classifier.decision_function(vectorizer.transform(data.splits["test"]["text"][:]))
    top = classifier.classes_[np.argsort(-scores, axis=1)[:, :TOP]]
    return Run(top, train_seconds, time.perf_counter() - start)


def labelattn_run(data: LabelledData, folder: Path, train_seconds: float | None = None) -> Run:
    """A saved labelattn (or any) classifier, loaded as a user would, on the test split."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from explainers import predict

    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    if sorted(names) != sorted(data.label_names):
        raise SystemExit(f"{folder} predicts other classes than {data.source.name}'s: train it with --data NAME.")
    to_data = torch.tensor([data.label_names.index(name) for name in names])
    start = time.perf_counter()
    probabilities = predict(model, tokenizer, data.splits["test"]["text"][:], batch_size=64).probabilities
    top = to_data[probabilities.topk(min(TOP, len(names)), dim=-1).indices].numpy()
    return Run(top, train_seconds, time.perf_counter() - start, f"{torch.get_num_threads()} torch threads")


def train_labelattn(name: str, options: str, number: int) -> tuple[Path, float]:
    """`labelattn train --data NAME OPTIONS` into models/bench/many-classes/, and its wall-clock seconds."""
    folder = ROOT / "models" / "bench" / "many-classes" / f"{name}-{number}"
    command = [
        sys.executable,
        "-m",
        "labelattn",
        "train",
        "--data",
        name,
        *options.split(),
        "--output-dir",
        str(folder),
    ]
    start = time.perf_counter()
    done = subprocess.run([*command, "--overwrite"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return folder, time.perf_counter() - start


SYSTEMS: dict[str, tuple[str, Callable[..., Run]]] = {
    "fasttext": ("fastText, 25 epochs, bigrams", lambda data, args: fasttext_run(data)),
    "fasttext-char": (
        "fastText, 25 epochs, bigrams, char 3-6-grams",
        lambda data, args: fasttext_run(data, minn=3, maxn=6),
    ),
    "fasttext-autotune": (
        "fastText, autotuned on validation",
        lambda data, args: fasttext_run(data, autotune_seconds=args.autotune_seconds),
    ),
    "tfidf": ("TF-IDF 1-2-grams + LinearSVC", lambda data, args: tfidf_run(data)),
}


# --------------------------------------------------------------------------------------------------- scores


def scores(data: LabelledData, run: Run) -> dict[str, float]:
    truth = np.array(data.splits["test"]["label"][:])
    top1 = run.top[:, 0]
    recall = float(np.mean((run.top == truth[:, None]).any(axis=1)))
    result = {
        "accuracy": accuracy_score(truth, top1),
        "macro_f1": f1_score(truth, top1, average="macro"),
        f"precision_at_{TOP}": recall / TOP,
        f"recall_at_{TOP}": recall,
    }
    hierarchy = data.hierarchy
    for level in hierarchy.levels[:-1] if hierarchy else []:
        to_level = np.array(hierarchy.level_indices(data.label_names, level))
        result[f"{level}_accuracy"] = accuracy_score(to_level[truth], to_level[top1])
    return result


def table(data: LabelledData, rows: list[tuple[str, dict[str, float], float | None, float, str]]) -> str:
    upper = data.hierarchy.levels[:-1][::-1] if data.hierarchy else []
    many = len(data.label_names) > 2 * TOP  # precision@5 says nothing of 6 classes
    header = ["system", "top-1 accuracy", "macro-F1"] + ([f"p@{TOP} (recall@{TOP})"] if many else [])
    header += [f"{level} accuracy" for level in upper] + ["train s", "predict rows/s", "note"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, score, train_seconds, rows_per_second, note in rows:
        cells = [name, f"{score['accuracy']:.4f}", f"{score['macro_f1']:.4f}"]
        cells += [f"{score[f'precision_at_{TOP}']:.4f} ({score[f'recall_at_{TOP}']:.4f})"] if many else []
        cells += [f"{score[f'{level}_accuracy']:.4f}" for level in upper]
        cells += ["—" if train_seconds is None else f"{train_seconds:.0f}", f"{rows_per_second:,.0f}", note]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goal(rows: list[tuple[str, dict[str, float], float | None, float, str]], anchors: list[str]) -> str:
    """The best anchor's top-1 error, and the accuracy a model needs for an error of at most 0.75 times it."""
    errors = [(1 - score["accuracy"], name) for name, score, *_ in rows if name in anchors]
    if not errors:
        return "No anchor in this run (--systems gave none)."
    best = min(errors)
    return (
        f"Best anchor: {best[1]}, top-1 error {best[0]:.4f}; 0.75× that error is {0.75 * best[0]:.4f}, "
        f"i.e. top-1 accuracy ≥ {1 - 0.75 * best[0]:.4f}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="+", default=["trec", "trec-fine"], help="built-in data sets")
    parser.add_argument("--systems", nargs="*", default=["fasttext", "fasttext-char", "tfidf"], choices=SYSTEMS)
    parser.add_argument("--autotune-seconds", type=int, default=60, help="fastText autotune's search time")
    parser.add_argument("--model", nargs="*", default=[], type=Path, help="saved models to score (one data set)")
    parser.add_argument("--train", nargs="*", default=[], help="`labelattn train` options to train and score")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of every system; median times")
    parser.add_argument("--docs", action="store_true", help=f"write each table into {DOCS.relative_to(ROOT)}")
    args = parser.parse_args()
    if (args.model or args.train) and len(args.data) != 1:
        parser.error("--model and --train score one data set: give one --data.")
    for name in args.data:
        data = load_data(name)
        sizes = data.split_record["sizes"]
        print(
            f"\n## {name}: {len(data.label_names):,} classes, {sizes['train']:,} training and "
            f"{sizes['test']:,} test texts\n",
            flush=True,
        )
        rows = run_systems(name, data, args)
        text = f"{table(data, rows)}\n\n{goal(rows, [SYSTEMS[key][0] for key in args.systems])}"
        print(text, flush=True)
        if args.docs:
            write_into_docs(text, DOCS, f"many-classes-{name}")


def run_systems(name: str, data: LabelledData, args: argparse.Namespace) -> list[tuple]:
    """Every system `args` asks for, `args.repeats` times interleaved: one table row each."""
    systems = [(SYSTEMS[key][0], lambda key=key: SYSTEMS[key][1](data, args)) for key in args.systems]
    for folder in args.model:
        systems.append((f"labelattn `{folder.name}`", lambda folder=folder: labelattn_run(data, folder)))
    for number, options in enumerate(args.train):
        train = functools.partial(train_labelattn, name, options, number)
        systems.append((f"labelattn `train {options}`", lambda train=train: labelattn_run(data, *train())))
    runs: dict[str, list[Run]] = {label: [] for label, _ in systems}
    for _ in range(args.repeats):
        for label, run in systems:
            runs[label].append(run())
            print(f"  {label}: {runs[label][-1].train_seconds or 0:.0f} s to train", file=sys.stderr, flush=True)
    rows = []
    for label, done in runs.items():
        trained_in = [r.train_seconds for r in done if r.train_seconds is not None]
        rate = statistics.median(len(r.top) / r.predict_seconds for r in done)
        train_seconds = statistics.median(trained_in) if trained_in else None
        rows.append((label, scores(data, done[0]), train_seconds, rate, done[0].note))
    return rows


if __name__ == "__main__":
    main()
