"""SHAP on words against exact Shapley values enumerated over every coalition of words, on a model whose words
interact and with words of several sub-tokens; forward passes counted; standard errors and the stopping rule."""

import math
from itertools import combinations

import pytest
import torch
from conftest import make_model

from explainers import ExplainerError, explain

# The estimator is tested on the raw logit (output="logit"), the F that `coalition_values` enumerates; what F is
# does not change how Shapley values are sampled.
# Five words, three of them several sub-tokens: zebra ##fish, out ##ran, un ##bel ##ie ##va ##bly.
TEXT = "the zebrafish outran unbelievably quick"
TEXTS = [TEXT, "who wrote hamlet", "cryptozoologists hate unhappiness"]


@pytest.fixture(scope="module")
def model(one_thread):
    """A 2-layer encoder with label attention: attention and non-linearities make its words interact. The shared
    scorer: the sample counts below (400 orderings within 5% of the exact values; a 5% target error within the
    default 32 orderings) were sized on this model's interactions, and another head's differ."""
    return make_model("encoder", num_labels=3, seed=3, scorer="shared")


def coalition_values(model, tokenizer, text: str, target: int) -> dict[frozenset, float]:
    """F (the target's logit) of every coalition of the text's words, absent words' sub-tokens all [PAD]."""
    encoding = tokenizer(text, return_tensors="pt")
    word_ids = encoding.word_ids(0)
    words = sorted({w for w in word_ids if w is not None})
    values = {}
    for size in range(len(words) + 1):
        for kept in combinations(words, size):
            ids = encoding.input_ids.clone()
            for t, w in enumerate(word_ids):
                if w is not None and w not in kept:
                    ids[0, t] = tokenizer.pad_token_id
            with torch.no_grad():
                values[frozenset(kept)] = float(
                    model(input_ids=ids, attention_mask=encoding.attention_mask).logits[0, target]
                )
    return values


def exact_shapley(values: dict[frozenset, float], n: int) -> list[float]:
    """φ_w = Σ_S |S|! (n − |S| − 1)! / n! · (v(S ∪ {w}) − v(S)), over the coalitions S without w."""
    phi = [0.0] * n
    for coalition, value in values.items():
        for w in range(n):
            if w in coalition:
                continue
            weight = math.factorial(len(coalition)) * math.factorial(n - len(coalition) - 1) / math.factorial(n)
            phi[w] += weight * (values[coalition | {w}] - value)
    return phi


@pytest.fixture(scope="module")
def exact(model, tokenizer):
    values = coalition_values(model, tokenizer, TEXT, target=0)
    return values, exact_shapley(values, 5)


def test_the_model_makes_words_interact(exact):
    # Otherwise any single ordering would give the exact values, and the tests below could not fail.
    values, phi = exact
    n = 5
    empty = values[frozenset()]
    additive = {s: empty + sum(values[frozenset({w})] - empty for w in s) for s in values}
    interaction = max(abs(values[s] - additive[s]) for s in values)
    assert interaction > 0.2 * sum(abs(p) for p in phi) / n


def test_many_samples_reach_the_exact_values_within_their_errors(model, tokenizer, exact):
    _, phi = exact
    exp = explain(model, tokenizer, TEXT, method="shap", output="logit", target=0, n_samples=400)
    assert exp.extras["n_samples"] == 400
    errors = torch.tensor(exp.extras["standard_errors"])
    gap = (torch.tensor(exp.scores) - torch.tensor(phi)).abs()
    assert (gap <= 4 * errors + 1e-6).all(), (gap, errors)
    assert float(gap.max()) < 0.05 * float(torch.tensor(phi).abs().mean())
    # One pair of orderings is not enough on this model: the comparison above can tell.
    few = explain(model, tokenizer, TEXT, method="shap", output="logit", target=0, n_samples=2)
    assert max(abs(a - b) for a, b in zip(few.scores, phi, strict=True)) > 5 * float(gap.max())


def test_every_ordering_adds_up_to_the_output_minus_the_empty_text(model, tokenizer, exact):
    values, _ = exact
    for options in ({"n_samples": 2}, {"n_samples": 7}, {}):
        exp = explain(model, tokenizer, TEXT, method="shap", output="logit", target=0, **options)
        assert exp.score == pytest.approx(values[frozenset(range(5))], abs=1e-5)
        assert exp.baseline_score == pytest.approx(values[frozenset()], abs=1e-5)
        assert sum(exp.scores) == pytest.approx(exp.score - exp.baseline_score, abs=1e-5)


def test_one_or_two_words_are_exact_with_zero_error(model, tokenizer):
    for text in ("hamlet", "unbelievably quick"):
        n = len(text.split())
        exp = explain(model, tokenizer, text, method="shap", output="logit", target=1)
        phi = exact_shapley(coalition_values(model, tokenizer, text, target=1), n)
        assert exp.scores == pytest.approx(phi, abs=1e-5)
        assert exp.extras["standard_errors"] == [0.0] * n
        assert exp.extras["n_samples"] == 2


class ForwardCounter:
    """Counts the model's forward passes and the texts they evaluate, and checks that every perturbed text keeps
    or drops each word whole (all its sub-tokens together)."""

    def __init__(self, model, tokenizer, text: str):
        encoding = tokenizer(text)
        self.original = torch.tensor(encoding["input_ids"])
        self.word_ids = encoding.word_ids()
        self.pad = tokenizer.pad_token_id
        self.calls = self.rows = 0
        self.handle = model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, module, args, kwargs):
        ids = kwargs["input_ids"]
        self.calls += 1
        self.rows += ids.shape[0]
        if ids.shape[1] != len(self.original):
            return
        for row in ids:
            kept = {}
            for t, w in enumerate(self.word_ids):
                if w is None:
                    assert row[t] == self.original[t], "a special token was perturbed"
                    continue
                is_kept = bool(row[t] == self.original[t])
                assert is_kept or row[t] == self.pad
                assert kept.setdefault(w, is_kept) == is_kept, f"word {w}'s sub-tokens were split"


@pytest.mark.parametrize("n_samples", [2, 10, 30])
def test_forward_passes_match_the_samples_drawn(model, tokenizer, n_samples):
    counter = ForwardCounter(model, tokenizer, TEXT)
    try:
        exp = explain(
            model,
            tokenizer,
            TEXT,
            method="shap",
            output="logit",
            target=0,
            n_samples=n_samples,
            perturbations_per_eval=16,
        )
    finally:
        counter.handle.remove()
    # The prediction (one text), F(x) and F(no word), then 4 inner coalitions per ordering of the 5 words.
    perturbed = 2 + 4 * n_samples
    assert exp.extras["n_samples"] == n_samples
    assert counter.rows == 1 + perturbed
    assert counter.calls == 1 + 1 + math.ceil(4 * n_samples / 16)


def test_standard_errors_shrink_as_samples_grow_and_cover_the_exact_values(model, tokenizer, exact):
    _, phi = exact
    mean_error = {}
    covered = []
    for n_samples in (8, 32, 128):
        errors = []
        for seed in range(4):
            exp = explain(
                model, tokenizer, TEXT, method="shap", output="logit", target=0, n_samples=n_samples, seed=seed
            )
            errors.append(sum(exp.extras["standard_errors"]) / 5)
            if n_samples == 32:
                covered += [
                    abs(s - p) <= 2 * e for s, p, e in zip(exp.scores, phi, exp.extras["standard_errors"], strict=True)
                ]
        mean_error[n_samples] = sum(errors) / len(errors)
    # 1/sqrt(samples): a quarter of the error for 16 times the samples, each step about half.
    assert mean_error[32] < 0.7 * mean_error[8]
    assert mean_error[128] < 0.7 * mean_error[32]
    assert sum(covered) >= 0.75 * len(covered)


def test_the_default_stops_at_the_target_error_or_the_budget(model, tokenizer):
    for target_error in (0.2, 0.05):
        exp = explain(
            model, tokenizer, TEXT, method="shap", output="logit", target=0, target_error=target_error, max_samples=200
        )
        errors = exp.extras["standard_errors"]
        mean_abs = sum(abs(s) for s in exp.scores) / len(exp.scores)
        assert sum(errors) / len(errors) <= target_error * mean_abs or exp.extras["n_samples"] >= 200
        assert exp.extras["n_samples"] >= 8  # min_samples
    loose = explain(model, tokenizer, TEXT, method="shap", output="logit", target=0, target_error=0.2).extras[
        "n_samples"
    ]
    tight = explain(model, tokenizer, TEXT, method="shap", output="logit", target=0, target_error=0.05).extras[
        "n_samples"
    ]
    assert loose < tight <= 32  # the default max_samples
    capped = explain(model, tokenizer, TEXT, method="shap", output="logit", target=0, target_error=0.0, max_samples=12)
    assert capped.extras["n_samples"] == 12


def test_seeds_reproduce_and_differ(model, tokenizer):
    first = explain(model, tokenizer, TEXT, method="shap", output="logit", target=0, n_samples=6, seed=1)
    again = explain(model, tokenizer, TEXT, method="shap", output="logit", target=0, n_samples=6, seed=1)
    other = explain(model, tokenizer, TEXT, method="shap", output="logit", target=0, n_samples=6, seed=2)
    assert first.scores == again.scores
    assert first.extras["standard_errors"] == again.extras["standard_errors"]
    assert first.scores != other.scores


def test_a_text_gets_the_same_values_in_any_batch(model, tokenizer):
    together = explain(model, tokenizer, TEXTS, method="shap", output="logit", target=0, batch_size=3)
    reordered = explain(model, tokenizer, TEXTS[::-1], method="shap", output="logit", target=0, batch_size=2)[::-1]
    for exp, alone_text, other in zip(together, TEXTS, reordered, strict=True):
        alone = explain(model, tokenizer, alone_text, method="shap", output="logit", target=0)
        for result in (exp, other):
            assert result.scores == pytest.approx(alone.scores, abs=1e-5)
            assert result.extras["n_samples"] == alone.extras["n_samples"]


def test_a_contrast_target_adds_up_to_the_logit_difference(model, tokenizer, exact):
    exp = explain(model, tokenizer, TEXT, method="shap", output="logit", target=(0, 2), n_samples=4)
    with torch.no_grad():
        logits = model(**tokenizer(TEXT, return_tensors="pt")).logits[0]
    assert exp.score == pytest.approx(float(logits[0] - logits[2]), abs=1e-5)
    assert sum(exp.scores) == pytest.approx(exp.score - exp.baseline_score, abs=1e-5)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_samples": 10, "max_samples": 4}, "min_samples=10 is above max_samples=4"),
        ({"target_error": float("nan")}, "target_error=nan"),
        ({"target_error": -0.1}, "target_error=-0.1"),
        ({"n_samples": 2.5}, r"n_samples=2.5 has the wrong type \(float\)"),
        ({"max_samples": 0}, "max_samples=0 must be at least 1"),
    ],
)
def test_bad_options_are_refused(model, tokenizer, options, message):
    with pytest.raises(ExplainerError, match=message):
        explain(model, tokenizer, TEXT, method="shap", output="logit", **options)
