"""Texts longer than the model reads, read whole in overlapping windows (`long_text="windows"`): every word once, its
span into the whole text; the prediction from the windows' mean logits; completeness per window; a planted word in
the last window found; a text that fits is explained exactly as without windows."""

import random
import time

import pytest
import regex
import torch
from conftest import FILLER, PLANTED_WORD

from explainers import ExplainerError, ExplainerInputError, explain, predict
from explainers.windows import tokenize_windows
from explainers.words import grapheme_bounds

pytestmark = pytest.mark.usefixtures("one_thread")
WINDOW = 32  # tokens per window, special tokens included: 30 words of one token each
METHODS = {
    "label_attention": {},
    "integrated_gradients": {"n_steps": 16},
    "saliency": {},
    "input_x_gradient": {},
    "shap": {"max_samples": 8},
}


def long_text(words: int = 72, planted_at: int | None = 66, seed: int = 0) -> str:
    """Filler words (one token each) with the planted word at `planted_at`: 72 words make three windows of 32."""
    rng = random.Random(seed)
    chosen = [rng.choice(FILLER[:40]) for _ in range(words)]
    if planted_at is not None:
        chosen[planted_at] = PLANTED_WORD
    return " ".join(chosen)


def test_windows_cover_the_text_and_share_a_quarter(tokenizer):
    text = long_text()
    windows, owners = tokenize_windows(tokenizer, [text, "a short one"], WINDOW)
    assert owners == [0, 0, 0, 1]
    assert all(len(w.input_ids) <= WINDOW for w in windows)
    first, second = windows[0], windows[1]
    shared = set(first.spans) & set(second.spans)
    assert len(shared) == int(0.25 * (WINDOW - 2))  # one-token words: the overlap in tokens is in words
    covered = {span for w in windows[:3] for span in w.spans}
    assert [text[s:e] for s, e in sorted(covered)] == text.split()


@pytest.mark.parametrize("method", list(METHODS))
def test_every_word_once_and_the_planted_word_of_the_last_window_found(method, tokenizer, planted_context_model):
    text = long_text()
    # The mean of three windows' logits, two of them without the word, need not predict "planted": ask for it.
    asked = {"target": "planted", "max_length": WINDOW, **METHODS[method]}
    exp = explain(planted_context_model, tokenizer, text, method=method, long_text="windows", **asked)
    assert exp.words == text.split() and [text[s:e] for s, e in exp.spans] == exp.words  # once each, in order
    assert not exp.truncated
    assert exp.top_words(1)[0][0] == PLANTED_WORD
    windows = exp.extras["windows"]
    assert [w["words"] for w in windows] == [[0, 30], [23, 53], [46, 72]]
    assert exp.words.index(PLANTED_WORD) >= windows[-1]["words"][0]  # only the last window holds it
    cut = explain(planted_context_model, tokenizer, text, method=method, **asked)
    assert cut.truncated and PLANTED_WORD not in cut.words


@pytest.mark.parametrize("method", ["integrated_gradients", "label_attention", "shap"])
def test_completeness_holds_in_every_window(method, tokenizer, planted_context_model):
    exp = explain(
        planted_context_model,
        tokenizer,
        long_text(),
        method=method,
        long_text="windows",
        max_length=WINDOW,
        **METHODS[method],
    )
    for window in exp.extras["windows"]:
        gap = window["sum_of_scores"] - (window["score"] - window["baseline_score"])
        allowed = abs(window["delta"]) if window["delta"] is not None else 0.0
        assert abs(gap) <= allowed + 1e-5 * max(1.0, abs(window["score"])), window


def test_prediction_is_the_mean_of_the_windows_logits(tokenizer, planted_context_model):
    model, text = planted_context_model, long_text()
    windows, _ = tokenize_windows(tokenizer, [text], WINDOW)
    with torch.no_grad():
        logits = torch.cat([model(input_ids=torch.tensor([w.input_ids])).logits for w in windows]).mean(0)
    predicted = predict(model, tokenizer, [text], long_text="windows", max_length=WINDOW)
    torch.testing.assert_close(predicted.probabilities[0], logits.softmax(-1), rtol=0, atol=1e-6)
    assert predicted.truncated == [False]
    exp = explain(model, tokenizer, text, method="saliency", long_text="windows", max_length=WINDOW)
    assert exp.probability == pytest.approx(float(logits.softmax(-1).max()), abs=1e-6)


def test_a_text_that_fits_is_explained_as_without_windows(tokenizer, planted_context_model):
    texts = [long_text(20, 5), "a short one"]
    for method in ("integrated_gradients", "label_attention"):
        windows = explain(planted_context_model, tokenizer, texts, method=method, long_text="windows", top_k=2)
        plain = explain(planted_context_model, tokenizer, texts, method=method, top_k=2)
        assert windows == plain


def test_bad_long_text_values_are_refused(tokenizer, planted_context_model):
    with pytest.raises(ExplainerError, match="long_text='pages': choose 'truncate'"):
        explain(planted_context_model, tokenizer, "who", method="saliency", long_text="pages")
    with pytest.raises(ExplainerInputError, match="reads single texts"):
        explain(planted_context_model, tokenizer, ("a", "b"), method="saliency", long_text="windows")


def plain_grapheme_bounds(text: str) -> tuple[list[int], list[int]]:
    """The bounds of every character's cluster by one `\\X` match per cluster: what `grapheme_bounds` must equal."""
    starts, ends = [0] * len(text), [0] * len(text)
    for cluster in regex.finditer(r"\X", text):
        for i in range(cluster.start(), cluster.end()):
            starts[i], ends[i] = cluster.start(), cluster.end()
    return starts, ends


def test_grapheme_bounds_equal_one_match_per_cluster():
    # ASCII, CR LF, combining marks, ZWJ and emoji modifiers, flags, Hangul jamo, a prepended mark, Devanagari.
    pool = [*"ab .,#*1\t\r\n", "\u0301", "\u200d", "\ufe0f", "\U0001f44d", "\U0001f3fd", "\U0001f1eb", "\U0001f1f7"]
    pool += ["\u1100", "\u1161", "\u11a8", "\u0600", "\u0928", "\u092e", "\u094d", "\u0947", "\x85", "\u00e9", "\u20e3"]
    rng = random.Random(0)
    for _ in range(5000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 14)))
        assert grapheme_bounds(text) == plain_grapheme_bounds(text), repr(text)


def test_time_per_word_is_flat(tokenizer, planted_context_model):
    """Windows cost the same per word at 2,000 and at 16,000 words (the windows of one text once cost each a pass
    over the whole text: 8 times the words took 64 times as long). Best of two runs of each, interleaved."""
    small, large = long_text(2_000, None), long_text(16_000, None)

    def seconds(text: str) -> float:
        start = time.perf_counter()
        predict(planted_context_model, tokenizer, text, long_text="windows", max_length=WINDOW)
        explain(
            planted_context_model, tokenizer, text, method="label_attention", long_text="windows", max_length=WINDOW
        )
        return time.perf_counter() - start

    times = {small: [], large: []}
    for _ in range(2):
        for text in times:
            times[text].append(seconds(text))
    ratio = min(times[large]) / min(times[small])
    assert ratio < 8 * 2.5, f"8 times the words took {ratio:.1f} times as long"
