"""Properties of the label-attention model: the weights it returns are the ones it used, the contributions it returns
sum to its logits, padding changes nothing, mean pooling is a masked mean, and bad input fails early with a message
that names the problem."""

import json
from pathlib import Path

import pytest
import torch
from conftest import float32_rounding, make_model
from transformers import AutoModel

from configuration_labelattn import LabelAttnConfig, LabelAttnConfigError
from labelattn import minilm_path
from modeling_labelattn import LabelAttention, LabelAttnForSequenceClassification, LabelAttnInputError

TEXTS = ["the screen cracked", "fast delivery but the screen cracked after two days of use", "fine"]
BACKBONES = ["embedding", "context", "encoder"]
POOLINGS = ["label_attention", "mean"]


# Every scorer of label attention (`config.scorer`, `scorer_rank`): hidden 32 and 4 heads make the values 8 wide, so
# that rank 3 folds into the values and rank 20 and the full scorer into the class codes (see `_folded_values`).
SCORERS = [("shared", None), ("class_bias", None), ("per_class", None), ("per_class", 3), ("per_class", 20)]
SCORERS += [("normed", None)]
LINEAR_SCORERS = SCORERS[:-1]
# The scorers again without the query and output projections (`label_projections=False`): no W_O to fold, the codes
# read the heads' contexts themselves (a full scorer cut per head, rank 3 folded into the values).
UNPROJECTED = [("shared", None), ("per_class", None), ("per_class", 3), ("normed", None)]


def realistic(backbone: str, pooling: str = "label_attention", **kwargs) -> LabelAttnForSequenceClassification:
    """`make_model`, with biases of realistic scale too (its biases are 0), so that bias terms are checked; the shared
    scorer unless another is asked for."""
    model = make_model(backbone, pooling, **{"scorer": "shared", **kwargs})
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias") and "LayerNorm" not in name:
                param.normal_(0.0, 0.5)
    return model


def token_vectors(model: LabelAttnForSequenceClassification, batch: dict, context: bool = True) -> torch.Tensor:
    """The backbone's token vectors `(batch, seq_len, hidden)`, computed outside the model's pooling code: with the
    embedding backbone's token context (what mean pooling and label attention's keys read), or without it (what
    label attention's values read)."""
    inner = model.labelattn
    if inner.encoder is not None:
        return inner.encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    vectors = inner.embeddings(batch["input_ids"])
    if inner.token_context is None or not context:
        return vectors
    vectors = vectors * batch["attention_mask"].unsqueeze(-1)
    width = inner.config.token_context_width
    convolved = torch.nn.functional.conv1d(vectors.transpose(1, 2), inner.token_context.weight, padding=width // 2)
    return vectors + torch.nn.functional.gelu(convolved.transpose(1, 2) + inner.token_context.bias)


def assert_scale(logits: torch.Tensor) -> None:
    """Tolerances below are ~1e-5: they judge something only if the logits differ by O(0.1) or more."""
    assert logits.std() > 0.1, f"logits too flat for the tolerances to mean anything: {logits}"


@pytest.mark.parametrize("backbone", BACKBONES)
@torch.no_grad()
def test_returned_weights_are_the_weights_used(backbone, tokenizer):
    """A hook replaces the weights inside the forward pass; the model returns exactly them and its logits follow."""
    model = realistic(backbone)
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    lengths = batch["attention_mask"].sum(-1)
    before = model(**batch).logits

    attention = model.labelattn.label_attention
    batch_size, seq_len = batch["input_ids"].shape
    heads, labels = attention.num_heads, model.config.num_labels
    replaced = torch.zeros(batch_size, heads, labels, seq_len)
    for b in range(batch_size):
        for h in range(heads):
            for c in range(labels):
                replaced[b, h, c, (3 * c + h) % int(lengths[b])] = 1.0  # each class reads one real token
    handle = attention.attention_dropout.register_forward_hook(lambda module, args, output: replaced)
    try:
        out = model(**batch, output_attentions=True)
    finally:
        handle.remove()

    assert torch.equal(out.label_attentions, replaced)
    # By hand: classifier(W_O(A V)), heads split and joined explicitly; V from the tokens' own vectors.
    own = token_vectors(model, batch, context=False)
    values = attention.value(own).view(batch_size, seq_len, heads, -1).permute(0, 2, 1, 3)
    context = (replaced @ values).permute(0, 2, 1, 3).reshape(batch_size, labels, -1)
    expected = model.classifier(attention.output(context)).squeeze(-1)
    assert_scale(expected)
    torch.testing.assert_close(out.logits, expected, rtol=1e-5, atol=1e-5)
    assert (out.logits - before).abs().max() > 0.1, "replacing the weights did not change the logits"


def count_paths(monkeypatch) -> dict[str, int]:
    """Counts the calls of the head's three routes, so that a test knows which one it checked."""
    calls = {"_weights": 0, "_blocked": 0, "_fused": 0}
    for name in calls:
        method = getattr(LabelAttention, name)

        def counted(self, *args, _method=method, _name=name):
            calls[_name] += 1
            return _method(self, *args)

        monkeypatch.setattr(LabelAttention, name, counted)
    return calls


# 3 classes: W_K folded into the queries (fewer than d_k... by the multiply-add count); 40 and 700: keys projected;
# 700 in many blocks of classes.
CLASS_COUNTS = [3, 40, 700]


def padded_batch(tokenizer) -> dict:
    """The texts, right-padded, and a text of only padding."""
    batch = tokenizer([*TEXTS, ""], padding=True, return_tensors="pt")
    batch["attention_mask"][-1] = 0
    return batch


@pytest.mark.parametrize(
    ("scorer", "rank", "key_size", "projections"),
    [
        *((*s, None, True) for s in SCORERS),
        ("shared", None, 3, True),
        *((*s, None, False) for s in UNPROJECTED),
        ("per_class", None, 3, False),
    ],
)
@pytest.mark.parametrize("num_labels", CLASS_COUNTS)
@pytest.mark.parametrize("backbone", BACKBONES)
@torch.no_grad()
def test_the_paths_without_weights_give_what_the_weights_give(
    backbone, num_labels, scorer, rank, key_size, projections, tokenizer, monkeypatch
):
    """The routes that form no weights == the reference that forms and returns them, for the classifier's logits of
    every scorer and for the base model's class vectors, with padding and a text of only padding, with keys as wide
    as the values (8) or narrower (3), in several blocks of classes, with and without the label projections."""
    model = realistic(
        backbone,
        num_labels=num_labels,
        attention_key_size=key_size,
        scorer=scorer,
        scorer_rank=rank,
        label_projections=projections,
    )
    monkeypatch.setattr(LabelAttention, "block_elements", 4 * model.config.hidden_size * 64)  # blocks of 36-64
    calls = count_paths(monkeypatch)
    batch = padded_batch(tokenizer)
    explicit = model(**batch, output_attentions=True)
    fast = model(**batch)
    logits_path = "_blocked" if scorer != "normed" else "_fused"  # the normed scorer needs the class vectors
    assert calls == {name: int(name in ("_weights", logits_path)) for name in calls}
    assert fast.label_attentions is None
    assert_scale(explicit.logits)
    torch.testing.assert_close(fast.logits, explicit.logits, rtol=0, atol=float32_rounding(model, explicit.logits))
    torch.testing.assert_close(fast.logits[-1], model.classifier.biases().expand(num_labels), rtol=0, atol=1e-6)
    vectors = model.labelattn(**batch).pooler_output
    assert calls["_fused"] == 1 + (logits_path == "_fused")
    torch.testing.assert_close(vectors, model.labelattn(**batch, output_attentions=True).pooler_output)
    assert (vectors[-1] == 0).all()


@pytest.mark.parametrize(
    ("classifier_dropout", "key_size", "scorer", "rank", "projections"),
    [(0.0, None, "shared", None, True), (0.3, None, "shared", None, True), (0.0, 3, "shared", None, True)]
    + [(0.0, None, scorer, rank, True) for scorer, rank in SCORERS[1:]]
    + [(0.3, None, "per_class", 3, True)]
    + [(0.0, None, scorer, rank, False) for scorer, rank in UNPROJECTED[:-1]]
    + [(0.3, 3, "per_class", None, False)],
)
@pytest.mark.parametrize("num_labels", CLASS_COUNTS[:2])
@pytest.mark.parametrize("backbone", BACKBONES)
def test_training_gradients_are_those_of_the_weights(
    backbone, num_labels, classifier_dropout, key_size, scorer, rank, projections, tokenizer, monkeypatch
):
    """In train mode the routes give the same loss and gradients as the reference that forms the weights: with
    classifier dropout (the class vectors are formed, then dropped out: the same mask from the same seed) and without
    (the scorer folded into the head, its classes in several blocks), for every scorer. Embedding and attention
    dropout are 0, so that nothing else draws random numbers."""
    monkeypatch.setattr(LabelAttention, "block_elements", 4 * 16 * 16)  # blocks of a few classes
    model = realistic(
        backbone,
        num_labels=num_labels,
        classifier_dropout=classifier_dropout,
        attention_key_size=key_size,
        scorer=scorer,
        scorer_rank=rank,
        label_projections=projections,
    ).train()
    batch = padded_batch(tokenizer)
    labels = torch.arange(len(TEXTS) + 1) % num_labels
    gradients = []
    for output_attentions in (True, False):
        model.zero_grad()
        torch.manual_seed(0)
        out = model(**batch, labels=labels, output_attentions=output_attentions)
        out.loss.backward()
        gradients.append(
            {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}
        )
        assert all(grad.isfinite().all() for grad in gradients[-1].values())
    assert gradients[0].keys() == gradients[1].keys()
    assert gradients[0]["labelattn.label_attention.key.weight"].abs().max() > 1e-3
    # Float32 rounding grows with the gradients' scale (per-class scorers have gradients of O(10) in these models).
    tolerance = 1e-5 * max(float(grad.abs().max()) for grad in gradients[0].values())
    for name, grad in gradients[0].items():
        message = lambda m, n=name: f"{n}: {m}"  # noqa: E731
        torch.testing.assert_close(gradients[1][name], grad, rtol=1e-4, atol=tolerance, msg=message)


def contribution_tolerance(terms: torch.Tensor, bias: torch.Tensor) -> float:
    """Float32 rounding of a sum grows with the size of its terms, not of the result: 1e-5 of the largest sum of the
    terms' magnitudes (tests assert that the logits differ by O(0.1) or more, so that this judges them)."""
    return 1e-5 * float(terms.abs().sum(-1).max() + bias.abs().max())


def class_scorers_by_hand(model: LabelAttnForSequenceClassification) -> torch.Tensor:
    """`w_c` `(labels, hidden)`: the vector that scores class c's vector (`e_c P`, the same `w` for a shared scorer)."""
    scorer = model.classifier
    codes, basis = scorer.class_weights(), scorer.readout_map()
    return (codes if basis is None else codes @ basis).expand(model.config.num_labels, -1)


def output_map_by_hand(model: LabelAttnForSequenceClassification) -> tuple[torch.Tensor, torch.Tensor]:
    """`W_O, b_O`: the output projection of the heads' contexts, the identity and 0 without the projections."""
    attention, hidden = model.labelattn.label_attention, model.config.hidden_size
    if attention.output is None:
        return torch.eye(hidden), torch.zeros(hidden)
    return attention.output.weight, attention.output.bias


def token_values_by_hand(model: LabelAttnForSequenceClassification, batch: dict) -> torch.Tensor:
    """`s_c,t,h = u_c,h·(W_V,h v_t)` `(batch, labels, seq, heads)`, outside the model's code: `u_c = W_Oᵀ w_c` cut into
    heads, `v_t` what the values read (the token's own vector, without the token context)."""
    attention = model.labelattn.label_attention
    readouts = (class_scorers_by_hand(model) @ output_map_by_hand(model)[0]).unflatten(-1, (attention.num_heads, -1))
    values = token_vectors(model, batch, context=False) @ attention.value.weight.T  # W_V v_t, without b_V
    return torch.einsum("chk,bthk->bcth", readouts, values.unflatten(-1, readouts.shape[1:]))


def reference_by_hand(model: LabelAttnForSequenceClassification, batch: dict, weights: torch.Tensor) -> torch.Tensor:
    """`r_c,h` `(batch, labels, heads)`: what class c's scorer finds where the average class looks,
    `Σ_t mean_c' A[c', h, t] s_c,t,h`, or with a scorer per class at the text's mean token (0 for only padding)."""
    mask = batch["attention_mask"].to(weights.dtype)
    values = token_values_by_hand(model, batch) * mask[:, None, :, None]
    if model.config.scorer == "per_class":
        uniform = mask / mask.sum(-1, keepdim=True).clamp_min(1.0)
        return torch.einsum("bt,bcth->bch", uniform, values)
    return torch.einsum("bht,bcth->bch", weights.mean(2), values)


def contributions_by_hand(
    model: LabelAttnForSequenceClassification, batch: dict, weights: torch.Tensor
) -> torch.Tensor:
    """`Σ_h A[c, h, t] (s_c,t,h − r_c,h)` for given weights `(batch, heads, labels, seq)`, outside the model's code."""
    token_values = token_values_by_hand(model, batch) - reference_by_hand(model, batch, weights)[:, :, None, :]
    return torch.einsum("bhct,bcth->bct", weights, token_values * batch["attention_mask"][:, None, :, None])


def bias_by_hand(model: LabelAttnForSequenceClassification, batch: dict, weights: torch.Tensor) -> torch.Tensor:
    """`β_c + w_c·b_O + (W_Oᵀ w_c)·b_V + Σ_h r_c,h`, `(batch, labels)`: what the classifier adds to every class of a
    text with a real token (a text of only padding gets the scorer's biases `β_c` alone)."""
    output_weight, output_bias = output_map_by_hand(model)
    constant = class_scorers_by_hand(model) @ (output_bias + output_weight @ model.labelattn.label_attention.value.bias)
    has_token = batch["attention_mask"].any(-1, keepdim=True)
    return model.classifier.biases() + has_token * (constant + reference_by_hand(model, batch, weights).sum(-1))


@pytest.mark.parametrize(
    ("multi_label", "key_size", "scorer", "rank", "projections"),
    [
        (False, None, "shared", None, True),
        (True, None, "shared", None, True),
        (False, 3, "shared", None, True),
        *((False, None, scorer, rank, True) for scorer, rank in LINEAR_SCORERS[1:]),
        *((False, None, scorer, rank, False) for scorer, rank in UNPROJECTED[:-1]),
        (True, 3, "per_class", None, False),
    ],
)
@pytest.mark.parametrize("num_labels", CLASS_COUNTS)
@pytest.mark.parametrize("backbone", BACKBONES)
@torch.no_grad()
def test_contributions_sum_to_the_logits_of_every_path(
    backbone, num_labels, multi_label, key_size, scorer, rank, projections, tokenizer, monkeypatch
):
    """`label_contributions.sum(-1) + label_contribution_bias` == the logits of the same call and of every route
    (weights formed; blocked; class vectors from the fused kernel, scored by the classifier), for every linear
    scorer, with and without the label projections, in several blocks of classes; padding exactly 0; the bias is the
    formula's, and a text of only padding has only the scorer's biases."""
    model = realistic(
        backbone,
        num_labels=num_labels,
        multi_label=multi_label,
        attention_key_size=key_size,
        scorer=scorer,
        scorer_rank=rank,
        label_projections=projections,
    )
    monkeypatch.setattr(LabelAttention, "block_elements", 4 * model.config.hidden_size * 64)  # blocks of 36-64
    calls = count_paths(monkeypatch)
    batch = padded_batch(tokenizer)
    out = model(**batch, output_label_contributions=True)
    assert calls == {name: int(name == "_blocked") for name in calls}
    terms, bias = out.label_contributions, out.label_contribution_bias
    assert terms.shape == (len(TEXTS) + 1, num_labels, batch["input_ids"].shape[1])
    assert bias.shape == out.logits.shape
    tolerance = contribution_tolerance(terms, bias)
    torch.testing.assert_close(terms.sum(-1) + bias, out.logits, rtol=0, atol=tolerance)
    base = model.labelattn(**batch, readout=model.classifier, output_label_contributions=True)
    assert torch.equal(base.label_contributions, terms) and torch.equal(base.label_contribution_bias, bias)

    references = {
        "weights": model(**batch, output_attentions=True).logits,
        "blocked": model(**batch).logits,
        "fused class vectors": model.classifier(model.labelattn(**batch).pooler_output),
    }
    assert calls["_weights"] == 1 and calls["_blocked"] == 3 and calls["_fused"] == 1
    assert_scale(references["weights"])
    for path, logits in references.items():
        message = lambda m, p=path: f"{p}: {m}"  # noqa: E731
        torch.testing.assert_close(terms.sum(-1) + bias, logits, rtol=0, atol=tolerance, msg=message)

    is_padding = batch["attention_mask"][:, None, :].expand_as(terms) == 0
    assert (terms[is_padding] == 0).all() and (terms[-1] == 0).all()
    assert terms[~is_padding].abs().max() > 1000 * tolerance  # terms far above the rounding the sums are judged by
    expected_bias = bias_by_hand(model, batch, model(**batch, output_attentions=True).label_attentions)
    biases = model.classifier.biases().expand(num_labels)
    assert (expected_bias[:-1] - biases).abs().max() > 100 * tolerance  # the head's biases count
    torch.testing.assert_close(expected_bias[-1], biases)  # only padding: the scorer's biases
    torch.testing.assert_close(bias, expected_bias, rtol=0, atol=tolerance)


@pytest.mark.parametrize(
    ("scorer", "rank", "projections"),
    [*((*s, True) for s in LINEAR_SCORERS), *((*s, False) for s in UNPROJECTED[:-1])],
)
@pytest.mark.parametrize("backbone", BACKBONES)
@torch.no_grad()
def test_contributions_are_the_weights_times_each_tokens_own_value(backbone, scorer, rank, projections, tokenizer):
    """The contributions are `Σ_h A[c, h, t] (s_c,t,h − r_c,h)` of the returned weights, `s_c,t,h = u_c,h·W_V,h v_t`
    (with the token context, `v_t` is the token's own vector), for every linear scorer, with and without the label
    projections; the blocks give the same without forming the weights; and when a hook replaces the weights in the
    forward pass, the contributions and the logits follow the replacement."""
    model = realistic(backbone, num_labels=40, scorer=scorer, scorer_rank=rank, label_projections=projections)
    batch = padded_batch(tokenizer)
    both = model(**batch, output_attentions=True, output_label_contributions=True)
    expected = contributions_by_hand(model, batch, both.label_attentions)
    tolerance = contribution_tolerance(expected, both.label_contribution_bias)
    assert expected.abs().max() > 0.1
    torch.testing.assert_close(both.label_contributions, expected, rtol=0, atol=tolerance)
    blocks = model(**batch, output_label_contributions=True)
    torch.testing.assert_close(blocks.label_contributions, expected, rtol=0, atol=tolerance)

    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")  # a distribution over real tokens for every row
    generator = torch.Generator().manual_seed(0)
    replaced = torch.rand(both.label_attentions[: len(TEXTS)].shape, generator=generator) ** 4
    replaced = replaced * batch["attention_mask"][:, None, None, :]
    replaced = replaced / replaced.sum(-1, keepdim=True)
    attention = model.labelattn.label_attention
    handle = attention.attention_dropout.register_forward_hook(lambda module, args, output: replaced)
    try:
        out = model(**batch, output_attentions=True, output_label_contributions=True)
    finally:
        handle.remove()
    assert torch.equal(out.label_attentions, replaced)
    expected = contributions_by_hand(model, batch, replaced)
    torch.testing.assert_close(out.label_contributions, expected, rtol=0, atol=tolerance)
    torch.testing.assert_close(
        out.label_contribution_bias, bias_by_hand(model, batch, replaced), atol=tolerance, rtol=0
    )
    assert (out.logits - model(**batch).logits).abs().max() > 0.1, "replacing the weights did not change the logits"


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("backbone", BACKBONES)
@torch.no_grad()
def test_contributions_are_the_same_alone_and_padded(backbone, pooling, tokenizer):
    """Each text's contributions alone == its real positions' inside a padded batch (right padding, and left for the
    embedding backbone), and exactly 0 at its padding."""
    model = realistic(backbone, pooling)
    alone = [model(**tokenizer([text], return_tensors="pt"), output_label_contributions=True) for text in TEXTS]
    assert_scale(torch.cat([one.logits for one in alone]))
    for side in ["right"] if backbone == "encoder" else ["right", "left"]:  # an encoder's positions move with left
        tokenizer.padding_side = side
        try:
            batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
        finally:
            tokenizer.padding_side = "right"
        padded = model(**batch, output_label_contributions=True)
        for i, one in enumerate(alone):
            terms, bias = one.label_contributions[0], one.label_contribution_bias[0]
            tolerance = contribution_tolerance(terms, bias)
            real = batch["attention_mask"][i].bool()
            torch.testing.assert_close(padded.label_contributions[i][:, real], terms, rtol=0, atol=tolerance)
            assert (padded.label_contributions[i][:, ~real] == 0).all()
            torch.testing.assert_close(padded.label_contribution_bias[i], bias, rtol=0, atol=tolerance)


@pytest.mark.parametrize("multi_label", [False, True])
@pytest.mark.parametrize("backbone", BACKBONES)
@torch.no_grad()
def test_mean_pooling_contributions_are_each_positions_share(backbone, multi_label, tokenizer):
    """Mean pooling: `W_c·x_t / n` for the vectors it averages (the token context's, which hold the neighbours'),
    summing to its logits, with the classifier's bias as the part no position carries; 0 on padding."""
    model = realistic(backbone, "mean", multi_label=multi_label)
    batch = padded_batch(tokenizer)
    out = model(**batch, output_label_contributions=True)
    mask = batch["attention_mask"]
    shares = mask / mask.sum(-1, keepdim=True).clamp(min=1)
    expected = (token_vectors(model, batch) @ model.classifier.weight.T).transpose(1, 2) * shares[:, None, :]
    bias = model.classifier.bias.expand(len(TEXTS) + 1, -1)
    tolerance = contribution_tolerance(expected, bias)
    assert_scale(expected[:, :, 1])
    torch.testing.assert_close(out.label_contributions, expected, rtol=0, atol=tolerance)
    assert torch.equal(out.label_contribution_bias, bias)
    torch.testing.assert_close(out.logits, model(**batch).logits, rtol=0, atol=tolerance)
    assert (out.label_contributions[mask[:, None, :].expand_as(expected) == 0] == 0).all()


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("backbone", BACKBONES)
@torch.no_grad()
def test_contributions_are_the_same_after_save_and_reload(backbone, pooling, tokenizer, tmp_path):
    model = realistic(backbone, pooling, num_labels=40)
    batch = padded_batch(tokenizer)
    before = model(**batch, output_label_contributions=True)
    model.save_pretrained(tmp_path)
    after = LabelAttnForSequenceClassification.from_pretrained(tmp_path).eval()(
        **batch, output_label_contributions=True
    )
    assert_scale(before.logits)
    # Not bit-equal: a reloaded weight may sit in memory otherwise and take another kernel's rounding.
    tolerance = float32_rounding(model, before.logits)
    assert torch.allclose(after.label_contributions, before.label_contributions, rtol=0, atol=tolerance)
    assert torch.allclose(after.label_contribution_bias, before.label_contribution_bias, rtol=0, atol=tolerance)


@pytest.mark.parametrize(
    ("kwargs", "call", "message"),
    [
        (dict(classifier_dropout=0.1), "classifier", "exact only without classifier dropout, .* call model.eval"),
        (dict(attention_dropout=0.1), "classifier", "exact only without attention dropout, .* call model.eval"),
        (dict(), "base", "base model forms only with a scoring layer: call LabelAttnForSequenceClassification"),
        (dict(pooling="mean"), "base", "base model forms only with a scoring layer"),
    ],
)
def test_contributions_are_refused_where_they_would_not_be_exact(kwargs, call, message):
    model = realistic("embedding", **kwargs).train()
    forward = model if call == "classifier" else model.labelattn
    with pytest.raises(LabelAttnInputError, match=message):
        forward(input_ids=torch.tensor([[101, 7592, 102]]), output_label_contributions=True)


def test_contributions_in_training_without_dropout_sum_to_the_differentiable_logits():
    """With no attention or classifier dropout, training mode decomposes its logits too, and they carry gradients."""
    model = realistic("context", num_labels=40).train()
    input_ids = torch.tensor([[101, 7592, 2088, 102], [101, 2088, 102, 0]])
    attention_mask = (input_ids != 0).long()
    out = model(input_ids=input_ids, attention_mask=attention_mask, output_label_contributions=True)
    terms, bias = out.label_contributions, out.label_contribution_bias
    tolerance = contribution_tolerance(terms.detach(), bias.detach())
    plain = model(input_ids=input_ids, attention_mask=attention_mask).logits
    torch.testing.assert_close(terms.sum(-1) + bias, plain, rtol=0, atol=tolerance)
    out.logits.sum().backward()
    assert model.labelattn.label_attention.key.weight.grad.abs().max() > 1e-3


V1_CHECKPOINTS = Path(__file__).parent / "data" / "labelattn-v1"


@pytest.mark.parametrize("backbone", ["embedding", "encoder"])  # the first version had no token context
@torch.no_grad()
def test_checkpoints_of_the_first_version_give_the_logits_they_gave(backbone):
    """Tiny checkpoints saved by the unfolded head of the first version (tests/data/labelattn-v1, made by its
    make_v1.py), with the logits that code computed: the folded and fused head reads them unchanged."""
    folder = V1_CHECKPOINTS / backbone
    expected = json.loads((folder / "expected.json").read_text())
    model = LabelAttnForSequenceClassification.from_pretrained(folder).eval()
    inputs = {
        "input_ids": torch.tensor(expected["input_ids"]),
        "attention_mask": torch.tensor(expected["attention_mask"]),
    }
    want = torch.tensor(expected["logits"])
    assert_scale(want)
    for asked in ({}, {"output_attentions": True}, {"output_label_contributions": True}):
        got = model(**inputs, **asked).logits
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_readout_needs_label_attention(small_mean_model):
    with pytest.raises(LabelAttnInputError, match="only pooling='label_attention' forms"):
        small_mean_model.labelattn(input_ids=torch.tensor([[101, 102]]), readout=small_mean_model.classifier)


@pytest.fixture(scope="module")
def small_mean_model():
    return realistic("embedding", "mean")


@pytest.mark.parametrize("backbone", BACKBONES)
@torch.no_grad()
def test_weights_are_distributions_over_real_tokens(backbone, tokenizer):
    model = realistic(backbone)
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    weights = model(**batch, output_attentions=True).label_attentions
    expected_shape = (
        len(TEXTS),
        model.config.num_attention_heads,
        model.config.num_labels,
        batch["input_ids"].shape[1],
    )
    assert weights.shape == expected_shape
    is_pad = batch["attention_mask"][:, None, None, :].expand_as(weights) == 0
    assert is_pad.any()
    assert (weights[is_pad] == 0).all()
    assert (weights[~is_pad] > 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]), rtol=0, atol=1e-6)


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("backbone", BACKBONES)
@torch.no_grad()
def test_padding_changes_nothing(backbone, pooling, tokenizer):
    """Each text scores the same alone as inside a padded batch (right and left padding alike)."""
    model = realistic(backbone, pooling)
    alone = torch.cat([model(**tokenizer([text], return_tensors="pt")).logits for text in TEXTS])
    assert_scale(alone)
    padded = model(**tokenizer(TEXTS, padding=True, return_tensors="pt")).logits
    torch.testing.assert_close(padded, alone, rtol=1e-5, atol=1e-5)
    if backbone != "encoder":  # an encoder's positions move with left padding; the embedding backbone has none
        tokenizer.padding_side = "left"
        try:
            left = model(**tokenizer(TEXTS, padding=True, return_tensors="pt")).logits
        finally:
            tokenizer.padding_side = "right"
        torch.testing.assert_close(left, alone, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backbone", BACKBONES)
@torch.no_grad()
def test_mean_pooling_is_the_masked_mean(backbone, tokenizer):
    model = realistic(backbone, "mean")
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    vectors = token_vectors(model, batch)
    expected = torch.stack([vectors[i, : int(n)].mean(0) for i, n in enumerate(batch["attention_mask"].sum(-1))])
    torch.testing.assert_close(model.labelattn(**batch).pooler_output, expected, rtol=1e-5, atol=1e-6)
    logits = model(**batch).logits
    assert_scale(logits)
    torch.testing.assert_close(logits, expected @ model.classifier.weight.T + model.classifier.bias)


@pytest.mark.parametrize("multi_label", [False, True])
@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("backbone", BACKBONES)
def test_a_text_of_only_padding_scores_the_bias_with_finite_gradients(backbone, pooling, multi_label):
    """Documented: a text of only padding has pooled vectors 0, so its logits are the classifier's bias."""
    model = realistic(backbone, pooling, multi_label=multi_label)
    input_ids = torch.tensor([[101, 7592, 2088, 102], [0, 0, 0, 0]])
    attention_mask = torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]])
    labels = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]) if multi_label else torch.tensor([2, 1])
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, output_attentions=True)
    bias = model.classifier.bias.detach()
    torch.testing.assert_close(out.logits[1].detach(), bias.expand(model.config.num_labels), rtol=0, atol=1e-7)
    assert bias.abs().max() > 0.1
    if pooling == "label_attention":
        assert (out.label_attentions[1] == 0).all()
    out.loss.backward()
    assert torch.isfinite(out.loss)
    for name, param in model.named_parameters():
        assert param.grad is None or torch.isfinite(param.grad).all(), f"non-finite gradient in {name}"


@torch.no_grad()
def test_default_config_builds_a_working_model(tokenizer):
    model = LabelAttnForSequenceClassification(LabelAttnConfig(num_labels=3)).eval()
    out = model(**tokenizer(TEXTS, padding=True, return_tensors="pt"), output_attentions=True)
    assert out.logits.shape == (3, 3)
    assert out.label_attentions.shape[:3] == (3, 4, 3)
    assert model.config.label2id == {"LABEL_0": 0, "LABEL_1": 1, "LABEL_2": 2}


@pytest.mark.parametrize("multi_label", [False, True])
def test_loss_follows_the_problem_type(multi_label):
    model = realistic("embedding", multi_label=multi_label)
    input_ids = torch.tensor([[101, 7592, 102], [101, 2088, 102]])
    labels = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]) if multi_label else torch.tensor([2, 0])
    out = model(input_ids=input_ids, labels=labels)
    loss_fn = torch.nn.functional.binary_cross_entropy_with_logits if multi_label else torch.nn.functional.cross_entropy
    torch.testing.assert_close(out.loss, loss_fn(out.logits, labels))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(hidden_size=30, num_attention_heads=4), r"hidden_size \(30\) is not divisible by num_attention_heads"),
        (dict(num_attention_heads=0), "num_attention_heads must be a positive integer"),
        (dict(attention_key_size=0), "attention_key_size must be a positive integer or None"),
        (dict(hidden_size=64, attention_key_size=65), r"attention_key_size=65 is above hidden_size=64.*<= 64"),
        (dict(temperature=0.0), "temperature must be a finite number > 0"),
        (dict(temperature=float("inf")), "temperature must be a finite number > 0"),
        (dict(temperature="1.5"), "temperature must be a finite number > 0"),
        (dict(num_labels=1), "at least 2 labels"),
        (dict(num_labels=1, problem_type="single_label_classification"), "at least 2 labels"),
        (dict(backbone="lstm"), "Unknown backbone 'lstm'"),
        (dict(pooling="max"), "Unknown pooling 'max'"),
        (dict(backbone="encoder"), "backbone='encoder' needs an encoder_config"),
        (dict(problem_type="regression"), "problem_type='regression' is not supported"),
        (dict(attention_dropout=1.5), r"attention_dropout must be in \[0, 1\), got 1.5"),
        (
            dict(token_context_width=2),
            r"token_context_width must be 0 \(none\) or an odd width such as 3, got 2: use 3",
        ),
        (dict(token_context_width=-1), r"token_context_width must be 0 \(none\) or an odd width such as 3, got -1"),
        (dict(num_attention_heads=True), "num_attention_heads must be a positive integer, got True"),
        (dict(scorer="per_class", scorer_rank=True), r"scorer_rank must be an integer in \[1, hidden_size=128\]"),
        (dict(embedding_dropout=None), r"embedding_dropout must be in \[0, 1\), got None"),
        (dict(classifier_dropout="0.1"), r"classifier_dropout must be in \[0, 1\), got '0.1'"),
        (dict(pad_token_id=30522), r"pad_token_id must be an id of the vocabulary, in \[0, vocab_size=30522\)"),
        (dict(pad_token_id=-1), r"pad_token_id must be an id of the vocabulary.*got -1: use the tokenizer's"),
        (dict(initializer_range=-1), "initializer_range must be a finite number > 0"),
        (dict(initializer_range=float("nan")), "initializer_range must be a finite number > 0"),
    ],
)
def test_bad_config_is_refused(kwargs, message):
    with pytest.raises(LabelAttnConfigError, match=message):
        LabelAttnConfig(**kwargs)


def test_mean_pooling_takes_any_width():
    """The head count divides the width for label attention's heads; mean pooling has none."""
    model = make_model(pooling="mean", hidden_size=30)
    assert model(input_ids=torch.tensor([[101, 7592, 102]])).logits.shape == (1, 3)
    with pytest.raises(LabelAttnConfigError, match=r"hidden_size \(30\) is not divisible by num_attention_heads"):
        LabelAttnConfig(pooling="label_attention", hidden_size=30, num_attention_heads=4)


def test_a_roberta_style_encoder_reads_its_longest_text_and_refuses_a_longer_one():
    """RoBERTa-style encoders number positions from pad_token_id + 1: with 20 position embeddings and pad id 1, 18
    tokens fit, and a 19th is refused with the length to truncate to, not an index error inside the encoder."""
    from transformers import RobertaConfig

    encoder = RobertaConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=20,
        pad_token_id=1,
    )
    model = make_model("encoder", encoder_config=encoder)
    assert model.config.max_seq_length == 18
    ids = torch.randint(3, 100, (2, 18), generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(model(input_ids=ids).logits).all()
    with pytest.raises(LabelAttnInputError, match="The input has 19 tokens but the model reads at most 18"):
        model(input_ids=torch.cat([ids, ids[:, :1]], dim=1))


def test_a_single_multi_label_output_is_allowed():
    assert LabelAttnConfig(num_labels=1, problem_type="multi_label_classification").num_labels == 1


@pytest.fixture(scope="module")
def small_model():
    return realistic("embedding")


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (dict(input_ids=torch.zeros(0, 5, dtype=torch.long)), "The batch is empty"),
        (dict(input_ids=torch.tensor([[101, 30522, 102]])), "Token id 30522 is outside the vocabulary"),
        (dict(input_ids=torch.tensor([[101, -1, 102]])), "Token id -1 is outside the vocabulary"),
        (dict(input_ids=torch.ones(1, 513, dtype=torch.long)), "513 tokens but the model reads at most 512"),
        (dict(input_ids=torch.tensor([101, 7592, 102])), r"input_ids must have 2 dimensions"),
        (dict(input_ids=torch.ones(2, 3, dtype=torch.long), attention_mask=torch.ones(2, 4)), "attention_mask has"),
        (dict(), "exactly one of input_ids or inputs_embeds"),
        (dict(input_ids=torch.ones(2, 3, dtype=torch.long), labels=torch.tensor([[0, 1]])), r"shape \(batch,\)"),
        (dict(input_ids=torch.ones(2, 3, dtype=torch.long), labels=torch.tensor([0, 3])), r"indices in \[0, 3\)"),
    ],
)
def test_bad_input_is_refused(small_model, inputs, message):
    with pytest.raises(LabelAttnInputError, match=message):
        small_model(**inputs)


def test_wrong_multi_label_targets_are_refused():
    model = realistic("embedding", multi_label=True)
    with pytest.raises(LabelAttnInputError, match=r"shape \(batch, num_labels\) = \(2, 3\), got \(2,\)"):
        model(input_ids=torch.ones(2, 3, dtype=torch.long), labels=torch.tensor([1.0, 0.0]))


def test_too_long_for_the_encoder(tokenizer):
    model = realistic("encoder")  # the tiny encoder has 128 positions
    with pytest.raises(LabelAttnInputError, match="at most 128: tokenize with truncation=True, max_length=128"):
        model(**tokenizer(["word " * 200], return_tensors="pt"))


def test_loading_with_another_label_count_is_refused(small_model, tmp_path):
    small_model.save_pretrained(tmp_path)
    for asked in (dict(num_labels=5), dict(id2label={0: "a", 1: "b"}), dict(config=LabelAttnConfig(num_labels=2))):
        with pytest.raises(LabelAttnConfigError, match=r"trained for 3 labels \['class_0', 'class_1', 'class_2'\]"):
            LabelAttnForSequenceClassification.from_pretrained(tmp_path, **asked)
    fresh_head = LabelAttnForSequenceClassification.from_pretrained(
        tmp_path, num_labels=5, ignore_mismatched_sizes=True
    )
    assert fresh_head.config.num_labels == 5
    assert LabelAttnForSequenceClassification.from_pretrained(tmp_path, num_labels=3).config.num_labels == 3


@pytest.fixture(scope="module")
def minilm_model():
    return LabelAttnForSequenceClassification.from_encoder(minilm_path(), id2label={0: "neg", 1: "pos"}).eval()


@torch.no_grad()
def test_from_encoder_loads_the_pretrained_weights(minilm_model, tokenizer):
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    plain = AutoModel.from_pretrained(minilm_path()).eval()
    expected = plain(**batch).last_hidden_state
    torch.testing.assert_close(minilm_model.labelattn(**batch).last_hidden_state, expected, rtol=0, atol=1e-6)
    assert expected.std() > 0.1


@torch.no_grad()
def test_asking_for_attentions_switches_the_encoder_to_eager(minilm_model, tokenizer):
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    encoder = minilm_model.labelattn.encoder
    encoder.set_attn_implementation("sdpa")
    before = minilm_model(**batch).logits
    out = minilm_model(**batch, output_attentions=True)
    seq_len = batch["input_ids"].shape[1]
    assert encoder.config._attn_implementation == "eager"
    assert len(out.attentions) == 6
    assert all(layer.shape == (3, 12, seq_len, seq_len) for layer in out.attentions)
    torch.testing.assert_close(out.attentions[0].sum(-1), torch.ones(3, 12, seq_len), rtol=0, atol=1e-5)
    assert out.label_attentions.shape == (3, 4, 2, seq_len)
    torch.testing.assert_close(out.logits, before, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_from_encoder_keeps_the_first_layers_asked_for_with_their_weights(tokenizer, tmp_path):
    """`encoder_layers=2` of MiniLM's 6: the token vectors are those of MiniLM's own first two layers (its hidden
    state after layer 2), and the cut model saves and reloads as a 2-layer encoder with the same logits (to float32
    rounding: another process or thread count may sum in another order)."""
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    cut = LabelAttnForSequenceClassification.from_encoder(minilm_path(), encoder_layers=2, num_labels=3).eval()
    full = AutoModel.from_pretrained(minilm_path()).eval()
    expected = full(**batch, output_hidden_states=True).hidden_states[2]
    torch.testing.assert_close(cut.labelattn(**batch).last_hidden_state, expected, rtol=0, atol=1e-6)
    cut.save_pretrained(tmp_path)
    again = LabelAttnForSequenceClassification.from_pretrained(tmp_path).eval()
    assert len(again.labelattn.encoder.encoder.layer) == 2
    logits = cut(**batch).logits
    torch.testing.assert_close(again(**batch).logits, logits, rtol=0, atol=float32_rounding(cut, logits))
    with pytest.raises(
        LabelAttnConfigError, match=r"encoder_layers must be a number of layers from 1 to the encoder's 6"
    ):
        LabelAttnConfig.from_encoder(minilm_path(), encoder_layers=7)


def test_a_saved_config_keeps_no_local_encoder_path():
    """The encoder folder on the building machine means nothing elsewhere: it stays out of config.json."""
    config = LabelAttnConfig.from_encoder(minilm_path(), num_labels=2)
    assert config.encoder_config.name_or_path == minilm_path()
    saved = config.to_json_string()
    assert minilm_path() not in saved
    assert LabelAttnConfig.from_dict(config.to_dict()).encoder_config.hidden_size == 384
