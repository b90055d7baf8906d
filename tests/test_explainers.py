"""Properties of the explainers: completeness, batching, agreement with the model, planted words."""

import pytest
import torch
from captum.attr import LayerIntegratedGradients
from conftest import PLANTED_WORD, make_model, planted_texts, tiny_encoder_config

from explainers import METHODS, explain
from explainers.base import length_sorted_batches
from explainers.methods.attention_graph import residual_attention
from explainers.methods.attention_rollout import rollout
from explainers.methods.forward import ExplainedOutput
from explainers.words import tokenize

SHORT = "why?"
MEDIUM = "who wrote the unbelievably popular novel about a whale?"
LONG = (
    "what is the name of the longest river that flows through the capital cities of more than three "
    "european countries, and which of those countries does it leave last before it reaches the black sea"
)

GRADIENT_METHODS = ["integrated_gradients", "saliency", "input_x_gradient", "grad_weighted_attention", "shap"]
EMBEDDING_METHODS = ["label_attention", "label_attention_weights", *GRADIENT_METHODS, "random"]
ENCODER_METHODS = [*EMBEDDING_METHODS, "attention_rollout", "attention_flow"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def double_models():
    # float64: a difference of 1e-5 then means a real error (a leak between rows, a coarse quadrature)
    # rather than float32 rounding.
    return {backbone: make_model(backbone, num_labels=3).double() for backbone in ("embedding", "encoder")}


def plain_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """Logits `(rows, labels)` of a plain forward pass over unpadded `ids` `(rows, seq_len)`."""
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


def centered(logits: torch.Tensor) -> torch.Tensor:
    """What a single-label model's explanations explain by default: each logit minus the mean logit."""
    return logits - logits.mean(dim=-1, keepdim=True)


def ig(model, tokenizer, texts, **options):
    return explain(model, tokenizer, texts, method="integrated_gradients", **options)


# --- Integrated Gradients ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backbone", ["embedding", "context", "encoder"])
@pytest.mark.parametrize("baseline", ["pad", "zero"])
def test_ig_completeness_and_endpoints(backbone, baseline, tokenizer, request):
    model = request.getfixturevalue(f"{backbone}_model")
    texts = [SHORT, MEDIUM, LONG]
    for text, exp in zip(texts, ig(model, tokenizer, texts, baseline=baseline, tolerance=None), strict=True):
        assert abs(exp.score - exp.baseline_score) > 1e-2, "a model whose F does not move would judge nothing"
        assert abs(sum(exp.scores) - (exp.score - exp.baseline_score)) <= abs(exp.delta) + 1e-5
        # F(x) is the model's own centered target logit; with the pad baseline, F(x') is that of [CLS] [PAD]… [SEP].
        ids = tokenizer(text, return_tensors="pt").input_ids
        assert exp.score == pytest.approx(float(centered(plain_logits(model, ids))[0, exp.target]), abs=1e-5)
        if baseline == "pad":
            ids[0, 1:-1] = tokenizer.pad_token_id
            expected = centered(plain_logits(model, ids))[0, exp.target]
            assert exp.baseline_score == pytest.approx(float(expected), abs=1e-5)


def test_ig_delta_is_captums_convergence_delta(tokenizer, double_models):
    model = double_models["encoder"]
    texts = [SHORT, LONG]
    results = ig(model, tokenizer, texts, n_steps=8, integration="gausslegendre", tolerance=None, target=1)
    for text, exp in zip(texts, results, strict=True):
        ids = tokenizer(text, return_tensors="pt").input_ids
        forward = ExplainedOutput(model, exp.output)
        args = (torch.ones_like(ids), None, None, torch.tensor([1]), None)
        baseline = ids.clone()
        baseline[0, 1:-1] = tokenizer.pad_token_id
        attributions, delta = LayerIntegratedGradients(forward, model.get_input_embeddings()).attribute(
            ids, baselines=baseline, additional_forward_args=args, n_steps=8, return_convergence_delta=True
        )
        assert exp.delta == pytest.approx(float(delta[0]), abs=1e-6)
        assert exp.scores[0] == pytest.approx(float(attributions[0, 1].sum()), abs=1e-6)


@pytest.mark.parametrize("backbone", ["embedding", "encoder"])
def test_ig_zero_baseline_is_a_zero_embedding_at_the_words(backbone, tokenizer, embedding_model, encoder_model):
    model = embedding_model if backbone == "embedding" else encoder_model
    exp = ig(model, tokenizer, MEDIUM, baseline="zero")
    ids = tokenizer(MEDIUM, return_tensors="pt").input_ids
    embeds = model.get_input_embeddings()(ids).detach()
    embeds[0, 1:-1] = 0.0
    with torch.no_grad():
        baseline = centered(model(inputs_embeds=embeds, attention_mask=torch.ones_like(ids)).logits)[0, exp.target]
    assert exp.baseline_score == pytest.approx(float(baseline), abs=1e-5)
    pad = ig(model, tokenizer, MEDIUM, baseline="pad")
    assert abs(pad.baseline_score - exp.baseline_score) > 1e-3, "the test model's [PAD] row must not be zero"


def max_abs_delta(model, tokenizer, n_steps: int, integration: str) -> float:
    results = ig(model, tokenizer, [MEDIUM, LONG], n_steps=n_steps, integration=integration, tolerance=None)
    return max(abs(exp.delta) for exp in results)


def test_delta_shrinks_and_gausslegendre_needs_fewer_steps(tokenizer, double_models):
    # float64, so that float32 rounding (about 1e-6 here) does not hide the quadrature error.
    steps = (2, 4, 8, 16, 32)
    deltas = {
        (m, n): max_abs_delta(double_models["embedding"], tokenizer, n, m)
        for m in ("gausslegendre", "riemann_trapezoid")
        for n in steps
    }
    for method in ("gausslegendre", "riemann_trapezoid"):
        assert deltas[method, 32] < deltas[method, 8] < deltas[method, 2]
    goal = deltas["riemann_trapezoid", 32]
    needed = {m: min(n for n in steps if deltas[m, n] <= goal) for m in ("gausslegendre", "riemann_trapezoid")}
    assert needed["gausslegendre"] < needed["riemann_trapezoid"]


def test_tolerance_raises_n_steps_until_delta_is_small(tokenizer, encoder_model):
    results = ig(encoder_model, tokenizer, [SHORT, MEDIUM, LONG], n_steps=2, tolerance=1e-3, max_steps=256)
    assert any(exp.extras["n_steps"] > 2 for exp in results)
    for exp in results:
        assert abs(exp.delta) <= 1e-3 * abs(exp.score - exp.baseline_score) or exp.extras["n_steps"] == 256
        assert abs(sum(exp.scores) - (exp.score - exp.baseline_score)) <= abs(exp.delta) + 1e-5


def test_contrastive_ig_is_the_difference_of_single_targets(tokenizer, encoder_model):
    texts = [MEDIUM, LONG]
    pair = ig(encoder_model, tokenizer, texts, target=("class_2", 0), tolerance=None)
    first, second = (ig(encoder_model, tokenizer, texts, target=t, tolerance=None) for t in (2, 0))
    for p, a, b in zip(pair, first, second, strict=True):
        assert (p.target, p.contrast, p.contrast_label) == (2, 0, "class_0")
        assert p.scores == pytest.approx([x - y for x, y in zip(a.scores, b.scores, strict=True)], abs=1e-5)
        assert p.score == pytest.approx(a.score - b.score, abs=1e-5)


def test_length_sorted_batches_bound_the_padding(tokenizer):
    texts = ["a", "a b", "a b", "a b c d e f", "a b c d e f g", "a b c"]
    items = tokenize(tokenizer, texts, 64)
    lengths = [len(item.input_ids) for item in items]
    exact = length_sorted_batches(items, range(len(items)), 16, max_padding=0.0)
    assert sorted(i for batch in exact for i in batch) == list(range(len(items)))
    assert all(len({lengths[i] for i in batch}) == 1 for batch in exact)
    assert length_sorted_batches(items, range(len(items)), 16) == [sorted(range(6), key=lambda i: lengths[i])]
    assert [len(b) for b in length_sorted_batches(items, range(len(items)), 4)] == [4, 2]


# --- every method: batching, targets ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backbone", "method"),
    [("embedding", m) for m in EMBEDDING_METHODS] + [("encoder", m) for m in ENCODER_METHODS],
)
def test_batched_equals_one_at_a_time(backbone, method, tokenizer, double_models):
    model = double_models[backbone]
    texts = [LONG, SHORT, MEDIUM, LONG[:60]]
    options = {"n_samples": 3} if method == "shap" else {}
    batched = explain(model, tokenizer, texts, method=method, batch_size=3, **options)
    for text, exp in zip(texts, batched, strict=True):
        alone = explain(model, tokenizer, text, method=method, **options)
        assert exp.words == alone.words
        assert max(abs(a - b) for a, b in zip(exp.scores, alone.scores, strict=True)) <= 1e-5
        assert max(abs(s) for s in exp.scores) > 1e-3 or method == "label_attention_weights"


@pytest.mark.parametrize("method", ["integrated_gradients", "label_attention", "label_attention_weights", "saliency"])
def test_all_targets_in_one_call(method, tokenizer, double_models):
    encoder_model = double_models["encoder"]
    texts = [SHORT, MEDIUM]
    every = explain(encoder_model, tokenizer, texts, method=method, targets="all")
    assert [len(per_text) for per_text in every] == [3, 3]
    for text, per_text in zip(texts, every, strict=True):
        for target, exp in enumerate(per_text):
            alone = explain(encoder_model, tokenizer, text, method=method, target=target)
            assert exp.target == target
            assert exp.scores == pytest.approx(alone.scores, abs=1e-5)


def test_multi_label_probability_is_the_sigmoid(tokenizer):
    model = make_model("embedding", multi_label=True, num_labels=4)
    exps = explain(model, tokenizer, MEDIUM, method="label_attention", targets="all")
    logits = plain_logits(model, tokenizer(MEDIUM, return_tensors="pt").input_ids)[0]
    assert [exp.probability for exp in exps] == pytest.approx(torch.sigmoid(logits).tolist(), abs=1e-6)


# --- agreement with the model ------------------------------------------------------------------------------


@pytest.mark.parametrize("backbone", ["embedding", "encoder"])
def test_label_attention_weights_are_the_models_own(backbone, tokenizer, embedding_model, encoder_model):
    model = embedding_model if backbone == "embedding" else encoder_model
    text = "an unbelievably unbreakable zebra-crossing"  # several words of several sub-tokens
    exp = explain(model, tokenizer, text, method="label_attention_weights", target=1)
    encoding = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        weights = model(**encoding, output_attentions=True).label_attentions[0].mean(dim=0)  # (labels, seq)
    word_ids = encoding.word_ids(0)
    expected = [[0.0] * len(exp.words) for _ in range(3)]
    for position, word in enumerate(word_ids):
        if word is not None:
            for label in range(3):
                expected[label][word] += float(weights[label, position])
    assert exp.scores == pytest.approx(expected[1], abs=1e-6)
    for label in range(3):
        assert exp.extras["class_scores"][label] == pytest.approx(expected[label], abs=1e-6)
    assert len(exp.words) < len(word_ids) - 2, "the text must have words of several sub-tokens"


@pytest.mark.parametrize("output", ["logit", "centered_logit"])
@pytest.mark.parametrize(
    ("backbone", "num_labels", "multi_label"),
    [("embedding", 3, False), ("context", 40, False), ("encoder", 3, False), ("embedding", 5, True)],
)
def test_label_attention_contributions_add_up_to_the_output(backbone, num_labels, multi_label, output, tokenizer):
    # Complete as Integrated Gradients, with no integration error: the words' terms add up to the explained output
    # (of the model's own logits) minus the bias and the special tokens, in a padded batch as alone.
    if multi_label and output == "centered_logit":
        return  # refused: a multi-label model's classes do not compete (tests/test_explainers_api.py)
    model = make_model(backbone, num_labels=num_labels, multi_label=multi_label)
    texts = [LONG, SHORT, MEDIUM]
    batched = explain(model, tokenizer, texts, method="label_attention", output=output, top_k=2)
    for text, per_text in zip(texts, batched, strict=True):
        logits = plain_logits(model, tokenizer(text, return_tensors="pt").input_ids)[0]
        explained = centered(logits) if output == "centered_logit" else logits
        for exp in per_text:
            scale = float(logits.abs().max())
            assert exp.output == output
            assert exp.score == pytest.approx(float(explained[exp.target]), abs=1e-5 * scale)
            assert sum(exp.scores) == pytest.approx(exp.score - exp.baseline_score, abs=1e-5 * scale)
            alone = explain(model, tokenizer, text, method="label_attention", output=output, target=exp.target)
            assert exp.scores == pytest.approx(alone.scores, abs=1e-5 * scale)
            if output == "centered_logit":  # every word's terms sum to 0 over the classes
                assert torch.tensor(exp.extras["class_scores"]).sum(0).abs().max() < 1e-5 * scale


def test_label_attention_contrast_is_the_difference_of_the_two_classes(tokenizer, context_model):
    pair = explain(context_model, tokenizer, MEDIUM, method="label_attention", target=(0, 2))
    first, second = (explain(context_model, tokenizer, MEDIUM, method="label_attention", target=c) for c in (0, 2))
    assert pair.scores == pytest.approx([a - b for a, b in zip(first.scores, second.scores, strict=True)], abs=1e-6)
    assert pair.score == pytest.approx(first.score - second.score, abs=1e-6)
    assert sum(pair.scores) == pytest.approx(pair.score - pair.baseline_score, abs=1e-5)


def test_rollout_rows_sum_to_one(tokenizer, encoder_model):
    encoding = tokenizer([SHORT, LONG], padding=True, return_tensors="pt")
    with torch.no_grad():
        attentions = encoder_model(**encoding, output_attentions=True).attentions
    layers = residual_attention(attentions)
    rolled = rollout(layers)
    assert torch.allclose(layers.sum(-1), torch.ones(layers.shape[:-1]), atol=1e-6)
    assert torch.allclose(rolled.sum(-1), torch.ones(rolled.shape[:-1]), atol=1e-5)
    # The read-out is a distribution over the tokens, so the rollout scores of all tokens (special ones
    # included) sum to 1, and the words get less than all of it.
    exp = explain(encoder_model, tokenizer, LONG, method="attention_rollout")
    assert 0.5 < sum(exp.scores) < 1.0
    assert min(exp.scores) >= 0


def test_shap_sums_to_the_output_minus_the_empty_text(tokenizer, encoder_model):
    exp = explain(encoder_model, tokenizer, MEDIUM, method="shap", n_samples=5)
    assert sum(exp.scores) == pytest.approx(exp.score - exp.baseline_score, abs=1e-4)
    ids = tokenizer(MEDIUM, return_tensors="pt").input_ids
    assert exp.score == pytest.approx(float(centered(plain_logits(encoder_model, ids))[0, exp.target]), abs=1e-5)
    ids[0, 1:-1] = tokenizer.pad_token_id
    expected = centered(plain_logits(encoder_model, ids))[0, exp.target]
    assert exp.baseline_score == pytest.approx(float(expected), abs=1e-5)


def test_shap_converges_to_exact_shapley_values(tokenizer, embedding_model):
    # Three words: 6 orderings in all, so many samples give the exact values; compare with the formula.
    from itertools import permutations

    text = "who wrote this"
    exp = explain(embedding_model, tokenizer, text, method="shap", n_samples=400, target=0)
    ids = tokenizer(text, return_tensors="pt").input_ids[0]

    def value(kept: set[int]) -> float:
        row = ids.clone()
        for w in range(3):
            if w not in kept:
                row[1 + w] = tokenizer.pad_token_id
        return float(centered(plain_logits(embedding_model, row[None]))[0, 0])

    exact = [0.0, 0.0, 0.0]
    for order in permutations(range(3)):
        for k, w in enumerate(order):
            exact[w] += (value(set(order[: k + 1])) - value(set(order[:k]))) / 6
    assert exp.scores == pytest.approx(exact, abs=0.15 * max(abs(v) for v in exact))


# --- planted word -----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backbone", "method"),
    [("embedding", m) for m in EMBEDDING_METHODS if m != "random"]
    + [("context", m) for m in EMBEDDING_METHODS if m != "random"]
    + [("encoder", m) for m in ("attention_rollout", "attention_flow", "integrated_gradients", "shap")],
)
def test_planted_word_ranks_first(backbone, method, tokenizer, request):
    model = request.getfixturevalue(f"planted_{backbone}_model")
    texts = [text for text, label in zip(*planted_texts(12, seed=7), strict=True) if label == 1]
    options = {"n_samples": 5} if method == "shap" else {}
    for exp in explain(model, tokenizer, texts, method=method, **options):
        assert exp.target_label == "planted"
        # Ties allowed: attention flow saturates, several tokens can carry the whole read-out capacity of 1.
        assert exp.scores[exp.words.index(PLANTED_WORD)] == max(exp.scores), (method, exp.text, exp.top_words(3))


def test_random_is_seeded_per_text(tokenizer, embedding_model):
    first = explain(embedding_model, tokenizer, [MEDIUM, LONG], method="random", seed=3)
    again = explain(embedding_model, tokenizer, [LONG, MEDIUM], method="random", seed=3)
    other = explain(embedding_model, tokenizer, MEDIUM, method="random", seed=4)
    assert first[0].scores == again[1].scores and first[1].scores == again[0].scores
    assert other.scores != first[0].scores
    assert first[0].scores[: len(first[0].scores)] != first[1].scores[: len(first[0].scores)]
    assert all(0.0 <= s < 1.0 for exp in first for s in exp.scores)


# --- the model is left as it was ----------------------------------------------------------------------------


DROPOUT = {
    "classifier_dropout": 0.5,
    "encoder_config": tiny_encoder_config(hidden_dropout_prob=0.5, attention_probs_dropout_prob=0.5),
}


@pytest.mark.parametrize("method", ENCODER_METHODS)
def test_model_state_is_left_as_it_was(method, tokenizer):
    # Mid-training, with frozen embeddings and one part in eval mode: explaining must run in eval mode (no
    # dropout) and hand every module its own mode back, change no requires_grad and fill no .grad.
    model = make_model("encoder", **DROPOUT).train()
    model.labelattn.encoder.embeddings.eval()
    model.get_input_embeddings().requires_grad_(False)
    modes = {name: module.training for name, module in model.named_modules()}
    frozen = {name: p.requires_grad for name, p in model.named_parameters()}
    options = {"n_samples": 2} if method == "shap" else {}
    exp = explain(model, tokenizer, MEDIUM, method=method, **options)
    alone = explain(make_model("encoder", **DROPOUT), tokenizer, MEDIUM, method=method, **options)
    assert exp.scores == pytest.approx(alone.scores, abs=1e-5), "dropout or a frozen weight changed the scores"
    assert {name: module.training for name, module in model.named_modules()} == modes
    assert {name: p.requires_grad for name, p in model.named_parameters()} == frozen
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize(("method", "options"), [("integrated_gradients", {"baseline": "zero"}), ("shap", {})])
def test_hooks_and_modes_are_restored_when_the_model_fails(method, options, tokenizer, monkeypatch):
    model = make_model("encoder", num_labels=3).train()
    forward = model.forward

    def failing(*args, **kwargs):  # the prediction pass works; the method's own passes fail
        if getattr(failing, "calls", 0):
            raise RuntimeError("out of memory")
        failing.calls = 1
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", failing)
    with pytest.raises(RuntimeError, match="out of memory"):
        explain(model, tokenizer, MEDIUM, method=method, **options)
    assert model.training
    assert not model.get_input_embeddings()._forward_hooks


def test_grad_weighted_attention_of_a_frozen_model(tokenizer, encoder_model):
    frozen = make_model("encoder", num_labels=3).requires_grad_(False)
    assert explain(frozen, tokenizer, MEDIUM, method="grad_weighted_attention").scores == pytest.approx(
        explain(encoder_model, tokenizer, MEDIUM, method="grad_weighted_attention").scores, abs=1e-6
    )
    assert not any(p.requires_grad for p in frozen.parameters())


@pytest.mark.parametrize("method", ENCODER_METHODS)
def test_half_precision_model(method, tokenizer, encoder_model):
    # bf16 computes the model; scores are added up in float32, so IG's delta is exactly its completeness gap.
    # (On the raw logit: a centered logit is a difference of logits, whose bf16 rounding is a larger share of it.)
    half = make_model("encoder", num_labels=3).to(torch.bfloat16)
    options = {"n_samples": 2} if method == "shap" else {"tolerance": None} if method == "integrated_gradients" else {}
    options |= {"output": "logit"} if METHODS[method].outputs else {}
    exp = explain(half, tokenizer, MEDIUM, method=method, target=0, **options)
    full = explain(encoder_model, tokenizer, MEDIUM, method=method, target=0, **options)
    assert half.dtype == torch.bfloat16
    assert all(isinstance(s, float) for s in exp.scores)
    assert max(abs(a - b) for a, b in zip(exp.scores, full.scores, strict=True)) <= 0.15 * max(map(abs, full.scores))
    if method == "integrated_gradients":
        assert sum(exp.scores) - (exp.score - exp.baseline_score) == pytest.approx(exp.delta, abs=1e-5)


@pytest.fixture(scope="module")
def keyword_lowers_every_logit(tokenizer):
    """A hand-built label-attention model where the planted word lowers every class's logit and its own class's
    least: every token but the keyword embeds to 0; the keyword brings the value -3 to whatever attends to it; the
    classes `other_*` attend to every token alike, while `planted` looks away from the keyword. So the planted class
    wins a text with the keyword because the others fall more: on the raw logit, the keyword counts against it."""
    model = make_model("embedding", num_labels=3, hidden_size=4, num_attention_heads=1, scorer="shared")
    keyword = tokenizer.convert_tokens_to_ids(PLANTED_WORD)
    attention = model.labelattn.label_attention
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        model.labelattn.embeddings.weight[keyword, 0] = 1.0
        for layer in (attention.query, attention.key, attention.value, attention.output):
            layer.weight.copy_(torch.eye(4))
        attention.label_embeddings[2, 0] = -2.0  # the planted class's query looks away from the keyword's key
        model.classifier.weight[0, 0] = -3.0
    model.config.id2label = {0: "other_a", 1: "other_b", 2: "planted"}
    model.config.label2id = {label: i for i, label in model.config.id2label.items()}
    return model


@pytest.mark.parametrize("method", [m for m in EMBEDDING_METHODS if m not in ("label_attention_weights", "random")])
def test_a_keyword_that_lowers_every_logit_is_found_for_its_class(method, tokenizer, keyword_lowers_every_logit):
    model = keyword_lowers_every_logit
    text = f"the old {PLANTED_WORD} was there"
    with torch.no_grad():
        logits = plain_logits(model, tokenizer(text, return_tensors="pt").input_ids)[0]
        without = plain_logits(model, tokenizer("the old was there", return_tensors="pt").input_ids)[0]
    assert (logits < without - 0.1).all() and logits.argmax() == 2, "the keyword must lower every logit"
    assert (without - logits).argmin() == 2, "and the planted class's least"
    exp = explain(model, tokenizer, text, method=method, **({"n_samples": 8} if method == "shap" else {}))
    assert exp.target_label == "planted"
    assert exp.top_words(1)[0][0] == PLANTED_WORD, exp.scores
    if method == "integrated_gradients":  # on the raw logit the keyword counts against its class
        raw = explain(model, tokenizer, text, method=method, output="logit")
        assert raw.scores[exp.words.index(PLANTED_WORD)] < 0
