"""Integrated Gradients' adaptive rule: completeness within the reported delta and the tolerance met on every
text, for both baselines; a text's scores independent of its batch and its padding; the rule equal to a direct
composite Simpson rule of its own nodes (Captum's, for the first pass); bad options refused."""

import math
import re

import pytest
import torch
from captum.attr import LayerIntegratedGradients
from conftest import make_model

from explainers import ExplainerError, explain
from explainers.methods import integrated_gradients as ig_module
from explainers.methods.forward import ExplainedOutput
from explainers.methods.integrated_gradients import IntegratedGradientsExplainer
from explainers.methods.quadrature import AdaptiveSimpson
from explainers.words import tokenize

SHORT = "why?"
MEDIUM = "who wrote the unbelievably popular novel about a whale?"
SAME_LENGTH = "who painted the unbelievably famous picture of a smile?"  # as many tokens as MEDIUM
LONG = (
    "what is the name of the longest river that flows through the capital cities of more than three "
    "european countries, and which of those countries does it leave last before it reaches the black sea"
)
TEXTS = [SHORT, MEDIUM, SAME_LENGTH, LONG]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def double_encoder():
    # float64: a difference of 1e-9 is then a real difference (another node, a leak between rows), not rounding.
    return make_model("encoder", num_labels=3).double()


def ig(model, tokenizer, texts, **options):
    return explain(model, tokenizer, texts, method="integrated_gradients", **options)


def word_scores(tokenizer, text: str, token_scores: torch.Tensor) -> list[float]:
    """`(seq_len,)` token scores of the unpadded text added up into its words."""
    item = tokenize(tokenizer, [text], 512)[0]
    words = [0.0] * len(item.words)
    for token, word in enumerate(item.word_index):
        if word >= 0:
            words[word] += float(token_scores[token])
    return words


def recorded_rules(monkeypatch) -> list[AdaptiveSimpson]:
    """The `AdaptiveSimpson` rules that IG makes from now on, in the order made (one per text of a batch)."""
    rules = []

    class Recorded(AdaptiveSimpson):
        def __init__(self, n_nodes: int):
            super().__init__(n_nodes)
            rules.append(self)

    monkeypatch.setattr(ig_module, "AdaptiveSimpson", Recorded)
    return rules


# --- completeness and the tolerance --------------------------------------------------------------------------


@pytest.mark.parametrize("backbone", ["embedding", "context", "encoder"])
@pytest.mark.parametrize("baseline", ["pad", "zero"])
def test_every_text_meets_the_tolerance_and_its_words_add_up(backbone, baseline, tokenizer, request):
    model = request.getfixturevalue(f"{backbone}_model")
    # The default, and one panel to start from with a tolerance still well above float32 rounding (some texts'
    # F moves by only 0.03).
    for n_steps, tolerance in ((9, 1e-2), (3, 1e-3)):
        results = ig(model, tokenizer, TEXTS, baseline=baseline, n_steps=n_steps, tolerance=tolerance)
        for exp in results:
            difference = exp.score - exp.baseline_score
            assert abs(difference) > 1e-2, "a model whose F does not move would judge nothing"
            # float32 sums of a few dozen O(1) terms: rounding is about 1e-6.
            assert abs(sum(exp.scores) - difference) <= abs(exp.delta) + 1e-5
            assert abs(exp.delta) <= tolerance * abs(difference), (exp.text, exp.extras)
            assert exp.extras["passes"] == exp.extras["n_steps"] < 256
    # One panel is too coarse for 1e-3 somewhere: the refinement ran.
    assert max(exp.extras["n_steps"] for exp in results) > 3


def test_the_endpoints_are_the_models_own_outputs(tokenizer, double_encoder):
    """F(x) is the model's target logit on the text, F(x′) its logit on [CLS] [PAD]… [SEP], though both come from
    nodes of the rule (α = 1 and α = 0) rather than passes of their own."""
    exp = ig(double_encoder, tokenizer, MEDIUM, output="logit")
    ids = tokenizer(MEDIUM, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = double_encoder(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        ids[0, 1:-1] = tokenizer.pad_token_id
        baseline = double_encoder(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    assert exp.score == pytest.approx(float(logits[0, exp.target]), abs=1e-12)
    assert exp.baseline_score == pytest.approx(float(baseline[0, exp.target]), abs=1e-12)


# --- independence of the batch -------------------------------------------------------------------------------


def test_a_texts_scores_do_not_depend_on_its_batch(tokenizer, double_encoder):
    together = ig(double_encoder, tokenizer, TEXTS, tolerance=1e-4, batch_size=4)
    for text, exp in zip(TEXTS, together, strict=True):
        alone = ig(double_encoder, tokenizer, text, tolerance=1e-4)
        assert exp.extras == alone.extras
        assert exp.scores == pytest.approx(alone.scores, abs=1e-9 * max(map(abs, alone.scores)))


def test_padding_changes_no_score(tokenizer, double_encoder):
    """The library batches only texts of one length, but a padded batch gives each text its own scores too."""
    explainer = IntegratedGradientsExplainer(double_encoder, tokenizer)
    options = explainer.check_options({"tolerance": 1e-4})
    items = tokenize(tokenizer, [LONG, SHORT], 512)
    target = torch.tensor([1, 1])
    padded = explainer.token_scores(explainer.collate(items), target, None, **options)
    for row, item in enumerate(items):
        alone = explainer.token_scores(explainer.collate([item]), target[:1], None, **options)
        width = len(item.input_ids)
        assert padded.diagnostics[row]["n_steps"] == alone.diagnostics[0]["n_steps"]
        torch.testing.assert_close(padded.scores[row, :width], alone.scores[0], rtol=0, atol=1e-9)
        assert padded.diagnostics[row]["delta"] == pytest.approx(alone.diagnostics[0]["delta"], abs=1e-9)


# --- the rule ------------------------------------------------------------------------------------------------


def test_the_first_pass_is_captums_composite_simpson(tokenizer, double_encoder):
    """Without refinement the rule is composite Simpson on a uniform grid: with 4 panels, (T + 2M)/3 for the
    trapezoid rule T on the 5 panel ends, the mean of Captum's left and right Riemann sums, and Captum's
    midpoint rule M on the 4 panel middles."""
    exp = ig(double_encoder, tokenizer, LONG, n_steps=9, tolerance=None, target=1)
    assert exp.extras["n_steps"] == 9
    ids = tokenizer(LONG, return_tensors="pt").input_ids
    baseline = ids.clone()
    baseline[0, 1:-1] = tokenizer.pad_token_id
    lig = LayerIntegratedGradients(ExplainedOutput(double_encoder, exp.output), double_encoder.get_input_embeddings())
    args = (torch.ones_like(ids), None, None, torch.tensor([1]), None)
    left, right, middle = (
        lig.attribute(ids, baselines=baseline, additional_forward_args=args, n_steps=4, method=f"riemann_{m}")
        for m in ("left", "right", "middle")
    )
    simpson = word_scores(tokenizer, LONG, (((left + right) / 2 + 2 * middle) / 3)[0].sum(-1))
    assert exp.scores == pytest.approx(simpson, abs=1e-9 * max(map(abs, simpson)))


def test_the_refined_rule_is_the_direct_rule_of_its_nodes(tokenizer, double_encoder, monkeypatch):
    """After refinement a text's scores are composite Simpson over its final panels, each node's gradient taken
    once: the same as evaluating that rule directly, node by node, through the model's own `inputs_embeds` (F the
    default, the target logit minus the mean logit)."""
    rules = recorded_rules(monkeypatch)
    texts = [MEDIUM, LONG]  # of two lengths: one batch each, shorter first
    results = ig(double_encoder, tokenizer, texts, tolerance=1e-5, target=0)
    assert {exp.output for exp in results} == {"centered_logit"}
    embed = double_encoder.get_input_embeddings()
    for text, exp, rule in zip(texts, results, rules, strict=True):
        assert exp.extras["n_steps"] == len(rule.alphas) == len(set(rule.alphas)) > 9, "refined, no node twice"
        nodes = sorted(rule.alphas)
        weights: dict[float, float] = {}
        for a, m, b in zip(nodes[0:-1:2], nodes[1::2], nodes[2::2], strict=True):
            assert m == (a + b) / 2, "the sorted nodes are the panels' ends and middles in turn"
            for node, weight in ((a, 1), (m, 4), (b, 1)):
                weights[node] = weights.get(node, 0.0) + weight * (b - a) / 6
        ids = tokenizer(text, return_tensors="pt").input_ids
        baseline = ids.clone()
        baseline[0, 1:-1] = tokenizer.pad_token_id
        e, e0 = embed(ids).detach(), embed(baseline).detach()
        total = torch.zeros(ids.shape[1], dtype=torch.float64)
        for alpha, weight in weights.items():
            point = (e0 + alpha * (e - e0)).requires_grad_()
            logits = double_encoder(inputs_embeds=point, attention_mask=torch.ones_like(ids)).logits[0]
            (gradient,) = torch.autograd.grad(logits[0] - logits.mean(), point)
            total += weight * (gradient * (e - e0)).sum(-1)[0]
        direct = word_scores(tokenizer, text, total)
        assert exp.scores == pytest.approx(direct, abs=1e-9 * max(map(abs, direct)))


def test_the_rule_gathers_its_nodes_where_the_integrand_turns():
    """On F(α) = tanh((α − 0.3)/0.02), a step at α = 0.3 as on the TREC classifier, the rule meets its budget
    with most nodes near the step, where composite Simpson on a uniform grid of as many nodes misses it."""

    def value(alpha: torch.Tensor) -> torch.Tensor:
        return torch.tanh((alpha - 0.3) / 0.02)

    def slope(alpha: torch.Tensor) -> torch.Tensor:
        return (1 - value(alpha) ** 2) / 0.02

    exact = float(value(torch.tensor(1.0)) - value(torch.tensor(0.0)))
    budget = 1e-3 * abs(exact)
    rule = AdaptiveSimpson(9)
    while True:
        alphas = torch.tensor(rule.alphas, dtype=torch.float64)
        if not rule.refine(slope(alphas), value(alphas), budget, max_nodes=256):
            break
    alphas = torch.tensor(rule.alphas, dtype=torch.float64)
    assert abs(float(rule.weights() @ slope(alphas)) - exact) <= budget
    assert float(rule.weights().sum()) == pytest.approx(1.0, abs=1e-12)
    assert float(((alphas - 0.3).abs() < 0.1).double().mean()) > 0.5
    uniform = AdaptiveSimpson(len(rule.alphas))
    grid = torch.tensor(uniform.alphas, dtype=torch.float64)
    assert abs(float(uniform.weights() @ slope(grid)) - exact) > budget
    # max_nodes bounds the refinement
    capped = AdaptiveSimpson(9)
    while capped.refine(slope(a := torch.tensor(capped.alphas, dtype=torch.float64)), value(a), budget, 14):
        pass
    assert len(capped.alphas) == 13


def test_a_fixed_rule_counts_the_passes_of_every_attempt(tokenizer, encoder_model):
    """Captum's Gauss–Legendre, restarted with twice the steps: each attempt costs its steps and the two forward
    passes over x and x′."""
    results = ig(encoder_model, tokenizer, TEXTS, integration="gausslegendre", n_steps=2, tolerance=1e-3)
    for exp in results:
        attempts = [2 * 2**k for k in range(int(math.log2(exp.extras["n_steps"] // 2)) + 1)]
        assert exp.extras["passes"] == sum(n + 2 for n in attempts)
        assert abs(exp.delta) <= 1e-3 * abs(exp.score - exp.baseline_score)
    assert max(exp.extras["n_steps"] for exp in results) > 2


# --- options -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"integration": "simpson"}, "integration='simpson': choose one of ['adaptive', 'gausslegendre', "),
        ({"n_steps": 2, "max_steps": 2}, "max_steps=2 is too few for integration='adaptive'"),
        ({"integration": "riemann_left", "n_steps": 1}, "n_steps=1 is too few for integration='riemann_left'"),
        ({"n_steps": 65, "max_steps": 64}, "n_steps=65 must be at least 1 and at most max_steps=64"),
        ({"tolerance": 0.0}, "tolerance=0.0 must be a positive finite number"),
        ({"n_steps": 9.0}, "n_steps=9.0 has the wrong type (float)"),
    ],
)
def test_bad_options_are_refused(options, message, tokenizer, embedding_model):
    with pytest.raises(ExplainerError, match=re.escape(message)):
        ig(embedding_model, tokenizer, MEDIUM, **options)


def test_a_fixed_rule_may_take_two_steps(tokenizer, embedding_model):
    exp = ig(embedding_model, tokenizer, MEDIUM, integration="riemann_right", n_steps=2, max_steps=2)
    assert exp.extras["n_steps"] <= 2
