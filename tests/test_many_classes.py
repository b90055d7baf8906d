"""Many classes end to end (issue 13, point 3): 300 classes, each decided by its own planted keyword, single- and
multi-label. `labelattn train` must learn them and report it; the explainers, asked for the k most probable classes,
must return those classes in order and find each class's keyword; `labelattn explain --data --top-k` writes k
explanations per row."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import FILLER
from huggingface_hub import ModelCard

import explainers
from labelattn import minilm_path

ROOT = Path(__file__).resolve().parents[1]
NUM_CLASSES = 300
ROWS_PER_CLASS = {"train": 8, "validation": 1, "test": 1}
TOP_K = 3
# The default model (MiniLM's frozen vectors, no classifier dropout) at twice the default rate, with the many-class
# recipe's width-3 token context: the made-up keywords have no meaning to start from, but their pieces have vectors
# the head can learn to pick. Multi-label learns more slowly (300 sigmoids, each positive in 1% of the rows): more
# epochs. With the default's width 5, a token's key reads two neighbours on each side, and Integrated Gradients put
# one of 100 texts' keyword below a neighbour. Without label smoothing (the default's 0.1 since 5 December 2026):
# trained with it, the single-label model leans on another word more than on the keyword in 2 of the 300 test texts
# (label attention's exact terms), and IG and SHAP miss a third text's keyword from their top two; these tests check
# the explainers against a model that learnt every one.
COMMON = ["--batch-size", "32", "--seed", "1", "--label-smoothing", "0", "--token-context-width", "3"]
TRAINING = {
    "single": [*COMMON, "--epochs", "5", "--learning-rate", "1e-2"],
    "multi": [*COMMON, "--epochs", "8", "--learning-rate", "1e-2"],
}
pytestmark = pytest.mark.usefixtures("one_thread")
EXPLAINED = 12  # test texts explained per method
OPTIONS = {"integrated_gradients": {"n_steps": 16}, "shap": {"max_samples": 8}}


def made_up_keywords(n: int, seed: int = 0) -> list[str]:
    """`n` pronounceable made-up words of one or two word pieces each, no piece shared with another keyword or with
    the filler words: each class's keyword is visible to the model only through its own pieces."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    rng = random.Random(seed)
    used = {piece for word in FILLER for piece in tokenizer.tokenize(word)}
    keywords: list[str] = []
    while len(keywords) < n:
        word = "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(2, 3)))
        word += rng.choice("bdfgklmnprstvz")
        pieces = tokenizer.tokenize(word)
        if len(pieces) <= 2 and not set(pieces) & used:
            used |= set(pieces)
            keywords.append(word)
    return keywords


KEYWORDS = made_up_keywords(NUM_CLASSES)
LABELS = [f"class_{i:03d}" for i in range(NUM_CLASSES)]


def planted_text(rng: random.Random, keywords: list[str]) -> str:
    """Six filler words with the keywords inserted at random places."""
    words = rng.sample(FILLER, 6)
    for keyword in keywords:
        words.insert(rng.randrange(len(words) + 1), keyword)
    return " ".join(words)


def single_label_rows(split: str, seed: int) -> list[dict]:
    """Every class `ROWS_PER_CLASS[split]` times: one keyword, one class."""
    rng = random.Random(seed)
    count = ROWS_PER_CLASS[split] * NUM_CLASSES
    return [
        {"text": planted_text(rng, [KEYWORDS[i % NUM_CLASSES]]), "label": LABELS[i % NUM_CLASSES]} for i in range(count)
    ]


def multi_label_rows(split: str, seed: int) -> list[dict]:
    """Rows of two or three keywords and their classes; every class appears in every split."""
    rng = random.Random(seed)
    rows = []
    for i in range(ROWS_PER_CLASS[split] * NUM_CLASSES):
        others = rng.sample([c for c in range(NUM_CLASSES) if c != i % NUM_CLASSES], rng.randint(1, 2))
        classes = [i % NUM_CLASSES, *others]
        rows.append({"text": planted_text(rng, [KEYWORDS[c] for c in classes]), "label": [LABELS[c] for c in classes]})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run_module(module: str, *args, timeout: int = 240) -> subprocess.CompletedProcess:
    """A labelattn command in a fresh process, as users run it (one thread: the cores are shared)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "LABELATTN_DEBUG": ""}
    command = [sys.executable, "-m", module, *map(str, args)]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def printed_scores(stdout: str) -> dict[str, float]:
    """The scores of the line `test accuracy 0.9, macro-f1 0.8, ...` that training prints last."""
    line = next(line for line in stdout.splitlines() if line.startswith("test accuracy"))
    return {
        name: float(value) for name, value in (part.rsplit(" ", 1) for part in line.removeprefix("test ").split(", "))
    }


def card_scores(folder: Path) -> dict[str, float]:
    """The test scores of the model card's model-index (what the Hub shows)."""
    results = ModelCard.load(folder / "README.md").data.eval_results
    return {result.metric_name: result.metric_value for result in results if result.dataset_split == "test"}


class Trained:
    """A model trained by `labelattn train` on a planted data set, with its test rows and what the run printed."""

    def __init__(self, folder: Path, test_rows: list[dict], stdout: str) -> None:
        self.folder, self.test_rows, self.stdout = folder, test_rows, stdout
        self.model, self.tokenizer = explainers.load_classifier(folder)

    @property
    def explained(self) -> tuple[list[str], list[list[str]]]:
        """The first test texts and their classes (a list per text)."""
        rows = self.test_rows[:EXPLAINED]
        return [row["text"] for row in rows], [
            row["label"] if isinstance(row["label"], list) else [row["label"]] for row in rows
        ]


def train_planted(tmp_path: Path, kind: str) -> Trained:
    rows_of = single_label_rows if kind == "single" else multi_label_rows
    splits = {split: rows_of(split, seed) for seed, split in enumerate(ROWS_PER_CLASS)}
    files = {split: write_jsonl(tmp_path / f"{split}.jsonl", rows) for split, rows in splits.items()}
    folder = tmp_path / "model"
    result = run_module(
        "labelattn",
        "train",
        *("--data", files["train"], "--validation-data", files["validation"], "--test-data", files["test"]),
        *TRAINING[kind],
        *("--output-dir", folder),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return Trained(folder, splits["test"], result.stdout)


@pytest.fixture(scope="module")
def single_label(tmp_path_factory) -> Trained:
    return train_planted(tmp_path_factory.mktemp("single"), "single")


@pytest.fixture(scope="module")
def multi_label(tmp_path_factory) -> Trained:
    return train_planted(tmp_path_factory.mktemp("multi"), "multi")


def keyword_of(label: str) -> str:
    return KEYWORDS[LABELS.index(label)]


def top_word(explanation: explainers.Explanation) -> str:
    return top_words(explanation, 1)[0]


def top_words(explanation: explainers.Explanation, count: int) -> list[str]:
    ranked = sorted(range(len(explanation.words)), key=explanation.scores.__getitem__, reverse=True)
    return [explanation.words[i] for i in ranked[:count]]


@pytest.fixture(params=["single", "multi"])
def trained(request) -> Trained:
    return request.getfixturevalue(f"{request.param}_label")


def test_keywords_are_made_up_and_split_into_one_or_two_pieces(tokenizer):
    assert len(set(KEYWORDS)) == NUM_CLASSES
    for keyword in KEYWORDS:
        assert 1 <= len(tokenizer.tokenize(keyword)) <= 2 and keyword not in FILLER


@pytest.mark.slow
def test_training_reports_high_scores_for_300_classes(single_label, multi_label):
    """The scores printed at the end and the model card's model-index agree, and are high (chance is 1/300). One
    test row is 0.0033: a change of summation order alone moved recall at 5 below 0.99 (to 0.9867), so the bounds leave
    a few rows to chance."""
    single, multi = printed_scores(single_label.stdout), printed_scores(multi_label.stdout)
    assert set(single) == {"accuracy", "macro-f1", "precision-at-1", "recall-at-1", "precision-at-5", "recall-at-5"}
    assert single["accuracy"] >= 0.95 and single["macro-f1"] >= 0.9 and single["recall-at-5"] >= 0.97
    assert single["precision-at-1"] == pytest.approx(single["accuracy"])
    assert {"micro-f1", "macro-f1", "precision-at-1", "recall-at-5"} <= set(multi)
    assert multi["micro-f1"] >= 0.8 and multi["precision-at-1"] >= 0.95 and multi["recall-at-5"] >= 0.9
    for trained, printed in ((single_label, single), (multi_label, multi)):
        written = card_scores(trained.folder)
        for name, value in printed.items():
            assert written[name] == pytest.approx(value, abs=1e-4), name


@pytest.mark.slow
def test_predict_gives_softmax_or_sigmoid_over_300_classes(trained):
    texts, _ = trained.explained
    predictions = explainers.predict(trained.model, trained.tokenizer, texts)
    assert predictions.probabilities.shape == (len(texts), NUM_CLASSES) and predictions.labels == LABELS
    with torch.no_grad():
        logits = trained.model(**trained.tokenizer(texts, padding=True, return_tensors="pt")).logits
    multi = trained.model.config.problem_type == "multi_label_classification"
    expected = torch.sigmoid(logits) if multi else torch.softmax(logits, dim=-1)
    torch.testing.assert_close(predictions.probabilities, expected, atol=1e-5, rtol=1e-4)
    if not multi:
        torch.testing.assert_close(predictions.probabilities.sum(-1), torch.ones(len(texts)))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["label_attention", "integrated_gradients", "shap"])
def test_top_k_explains_the_most_probable_classes_and_finds_their_keywords(trained, method):
    """`top_k=3`: the three most probable classes of each text, most probable first; the first is one of the text's
    classes (for all texts but one in ten at most: 300 classes learnt from 8 rows each, a model trained from vectors
    made with another thread count may miss one), and every class of the text among them has its own keyword as its
    top word (label attention) or among its top two (IG and SHAP: see the next test)."""
    texts, classes = trained.explained
    ranks = 1 if method == "label_attention" else 2  # see test_every_single_label_text_finds_its_keyword
    probabilities = explainers.predict(trained.model, trained.tokenizer, texts).probabilities
    results = explainers.explain(
        trained.model, trained.tokenizer, texts, method=method, top_k=TOP_K, **OPTIONS.get(method, {})
    )
    assert len(results) == len(texts)
    found, misclassified = [], []
    for result, row_probabilities, labels in zip(results, probabilities, classes, strict=True):
        assert [row_probabilities[e.target].item() for e in result] == pytest.approx([e.probability for e in result])
        assert [e.probability for e in result] == pytest.approx(row_probabilities.topk(TOP_K).values.tolist(), abs=1e-5)
        if result[0].target_label not in labels:
            misclassified.append((result[0].text, result[0].target_label, labels))
        found += [keyword_of(e.target_label) in top_words(e, ranks) for e in result if e.target_label in labels]
    assert len(misclassified) <= len(texts) // 10, misclassified
    assert all(found), f"keywords found: {found}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "texts"), [("label_attention", NUM_CLASSES), ("integrated_gradients", 100), ("shap", 60)]
)
def test_every_single_label_text_finds_its_keyword(single_label, method, texts):
    """Every test text's top word for its own class is that class's keyword (its class, not the predicted one: a
    text the model gets wrong, one in a few hundred, must still credit its keyword for its class). The softmax model
    learns that a keyword lowers every class's logit and its own class's least, so on the raw logit about one text
    in ten missed it (issue 17); the explained output is shift-invariant now (the logit minus the mean logit), and
    label attention's terms are measured from what the average class reads (with a scorer per class, the default:
    from the text's mean token). All 300 texts for label attention (one pass), the first 100 / 60 for Integrated
    Gradients and SHAP (they cost tens of passes a text). On a text the model gets wrong, an approximate method (IG's
    sum over steps, SHAP's samples) may rank a filler word the predicted class leans on just above the keyword (IG:
    `how` 3.64 against `titus` 3.51, at probability 0.01): there the keyword must be among the top two words. So
    must it for IG and SHAP on every text: trained on an AMD EPYC (one thread), the model reads `baser see their look
    write thing all` right (probability 1.00) and label attention gives `baser` 28.6 and no other word more than 2.2,
    yet IG's path through the token context gives the filler pair `write` −42.1 and `thing` +38.7 (summing to −3.4)
    beside `baser`'s 30.4, at 16 steps and at 64 alike, and SHAP's 8 samples `their` 9.6 against `baser` 9.0: the
    model's interactions, which an exact per-token split has to spread somewhere."""
    rows = single_label.test_rows[:texts]
    explanations = explainers.explain(
        single_label.model,
        single_label.tokenizer,
        [row["text"] for row in rows],
        method=method,
        target=[row["label"] for row in rows],
        **OPTIONS.get(method, {}),
    )
    predictions = explainers.predict(single_label.model, single_label.tokenizer, [row["text"] for row in rows])
    predicted = [predictions.labels[i] for i in predictions.probabilities.argmax(-1).tolist()]
    missed = [
        e.text
        for e, row, label in zip(explanations, rows, predicted, strict=True)
        if keyword_of(row["label"])
        not in top_words(e, 1 if label == row["label"] and method == "label_attention" else 2)
    ]
    assert not missed, f"{len(missed)} of {len(rows)} texts missed their keyword, e.g. {missed[:3]}"


@pytest.mark.slow
def test_corpus_command_writes_k_explanations_per_row(multi_label, tmp_path):
    texts, classes = multi_label.explained
    data = write_jsonl(tmp_path / "rows.jsonl", [{"text": text} for text in texts])
    output = tmp_path / "out.parquet"
    result = run_module(
        "labelattn",
        *("explain", multi_label.folder, "--data", data, "--method", "label_attention"),
        *("--top-k", TOP_K, "--output", output, "--no-progress"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    table = pd.read_parquet(output)
    assert len(table) == TOP_K * len(texts)
    for row, labels in enumerate(classes):
        rows = table[table["row"] == row].sort_values("rank")
        assert rows["rank"].tolist() == list(range(1, TOP_K + 1))
        assert rows["probability"].is_monotonic_decreasing
        first = rows.iloc[0]
        assert first["target_label"] in labels
        words, scores = list(first["words"]), list(first["scores"])
        assert words[scores.index(max(scores))] == keyword_of(first["target_label"])
