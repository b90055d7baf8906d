"""Label-attention queries computed from class descriptions (`labelattn.training.label_queries`,
`modeling_labelattn.LabelDescriptions`)."""

import copy
import json

import pytest
import torch
from conftest import make_model

from configuration_labelattn import LabelAttnConfig, LabelAttnConfigError
from labelattn.training.label_queries import LabelDescriptionError, describe_classes, description_vectors
from modeling_labelattn import LabelAttnForSequenceClassification

DESCRIPTIONS = {"class_0": "animals and plants", "class_1": "dates in the calendar"}  # class_2: its name


def described_model(tokenizer, backbone: str = "context", trained=("class_0", "class_2"), **config):
    model = make_model(backbone, num_labels=3, label_description_size=32, **config)
    describe_classes(model, tokenizer, DESCRIPTIONS, set(trained))
    return model


@pytest.mark.parametrize("backbone", ["context", "encoder"])
def test_each_class_stores_its_description_vector_and_whether_it_has_rows(tokenizer, backbone):
    model = described_model(tokenizer, backbone)
    stored = model.labelattn.label_attention.descriptions
    texts = ["animals and plants", "dates in the calendar", "class_2"]  # class_2 has no description: its name
    assert torch.equal(stored.vectors, description_vectors(model, tokenizer, texts))
    assert stored.has_rows.tolist() == [True, False, True]
    # The vectors the backbone gives before the head: the token table's rows, or the encoder's last layer.
    batch = tokenizer("dates in the calendar", return_tensors="pt")
    if backbone == "context":
        backbone_vectors = model.labelattn.embeddings(batch["input_ids"])
    else:
        backbone_vectors = model.labelattn.encoder(**batch).last_hidden_state
    assert torch.allclose(stored.vectors[1], backbone_vectors[0, 1:-1].mean(0), atol=1e-6)  # without [CLS], [SEP]


@pytest.mark.parametrize("projections", [True, False])
def test_a_class_without_rows_gets_its_query_from_its_description_alone(tokenizer, projections):
    """Through `W_Q` from the map's label embedding, or, without the projections, the map's output as the query."""
    model = described_model(tokenizer, label_projections=projections)
    head = model.labelattn.label_attention
    queries = head.label_queries().detach()
    with torch.no_grad():
        head.label_embeddings.normal_()  # new residuals
        changed = head.label_queries()
    assert torch.equal(changed[1], queries[1])  # the class without rows: residual 0, whatever it holds
    assert not torch.allclose(changed[[0, 2]], queries[[0, 2]])
    with torch.no_grad():
        expected = head.descriptions.map(head.descriptions.vectors[1] / head.descriptions.vectors[1].norm())
        expected = expected if head.query is None else head.query(expected)
    assert changed.shape == (3, model.config.hidden_size)  # 4 heads of 8: the query is as wide either way
    assert torch.allclose(changed[1], expected, atol=1e-6)
    other = described_model(tokenizer)
    describe_classes(other, tokenizer, {**DESCRIPTIONS, "class_1": "rivers and lakes"}, {"class_0", "class_2"})
    assert not torch.allclose(other.labelattn.label_attention.label_queries()[1], queries[1])


@pytest.mark.parametrize("scorer", ["per_class", "class_bias"])
def test_a_class_without_rows_gets_its_scorer_from_its_description_alone(tokenizer, scorer):
    model = described_model(tokenizer, scorer=scorer)
    layer, descriptions = model.classifier, model.labelattn.label_attention.descriptions
    own = layer.bias if scorer == "per_class" else layer.class_bias  # each class's own bias (its residual)
    shared = 0.0 if scorer == "per_class" else layer.bias.detach().clone()
    codes, biases = layer.class_weights(descriptions).detach(), layer.biases(descriptions).detach() - shared
    with torch.no_grad():
        layer.weight.normal_()  # new residuals (per_class: the codes; class_bias: the shared scorer)
        own.normal_()
        new_codes, new_biases = layer.class_weights(descriptions), layer.biases(descriptions) - shared
    assert torch.equal(new_biases[1], biases[1])  # the class without rows: its description's bias alone
    assert not torch.allclose(new_biases[[0, 2]], biases[[0, 2]])
    if scorer == "per_class":
        assert torch.equal(new_codes[1], codes[1]) and not torch.allclose(new_codes[[0, 2]], codes[[0, 2]])


def test_residual_dropout_leaves_whole_rows_out_in_training_only(tokenizer):
    model = described_model(tokenizer, trained=("class_0", "class_1", "class_2"), label_residual_dropout=0.5)
    head = model.labelattn.label_attention
    with torch.no_grad():
        head.label_embeddings.normal_()
        vectors = head.descriptions.vectors
        computed = head.descriptions.map(vectors / vectors.norm(dim=1, keepdim=True))
        full = head.descriptions(head.label_embeddings)
        assert torch.allclose(full, computed + head.label_embeddings, atol=1e-6)  # eval: every residual
        head.train()
        torch.manual_seed(0)
        rows = [head.descriptions(head.label_embeddings) for _ in range(40)]
    kept = torch.stack([torch.isclose(row, full, atol=1e-6).all(1) for row in rows])  # (draws, classes)
    left_out = torch.stack([torch.isclose(row, computed, atol=1e-6).all(1) for row in rows])
    assert bool((kept ^ left_out).all())  # each row whole: with its residual, or the map's alone (not rescaled)
    assert 0.3 < left_out.float().mean() < 0.7


@pytest.mark.parametrize("scorer", ["shared", "class_bias", "per_class", "normed"])
def test_a_class_without_rows_gets_the_offset_outside_training_only(tokenizer, tmp_path, scorer):
    """`untrained_class_offset` moves the logit of the class without rows (class_1) by exactly itself, and no
    other; a saved model takes another offset at loading; label contributions still sum to the logits."""
    described_model(tokenizer, scorer=scorer, untrained_class_offset=0.0).save_pretrained(tmp_path)
    batch = tokenizer(["the calendar of animals", "plants"], padding=True, return_tensors="pt")
    batch.pop("token_type_ids")
    logits = {}
    for offset in (0.0, 2.5):
        model = LabelAttnForSequenceClassification.from_pretrained(tmp_path, untrained_class_offset=offset).eval()
        with torch.no_grad():
            logits[offset] = model(**batch).logits
    moved = logits[2.5] - logits[0.0]
    scale = logits[0.0].abs().max()
    torch.testing.assert_close(moved, torch.tensor([0.0, 2.5, 0.0]).expand_as(moved), rtol=0, atol=1e-5 * scale)
    descriptions = model.labelattn.label_attention.descriptions
    assert descriptions.offsets(torch.float32).tolist() == [0.0, 2.5, 0.0]
    assert descriptions.train().offsets(torch.float32).tolist() == [0.0, 0.0, 0.0]  # training sees none
    if scorer != "normed":  # the only scorer without exact terms (tests/test_head_scorers.py)
        with torch.no_grad():
            out = model.eval()(**batch, output_label_contributions=True)
        total = out.label_contributions.sum(-1) + out.label_contribution_bias
        torch.testing.assert_close(total, logits[2.5], rtol=0, atol=1e-5 * scale)


def test_a_config_saved_before_the_offset_loads_without_it(tokenizer, tmp_path):
    described_model(tokenizer).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved.pop("untrained_class_offset") == LabelAttnConfig.__dataclass_fields__["untrained_class_offset"].default
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert LabelAttnConfig.from_pretrained(tmp_path).untrained_class_offset == 0.0


@pytest.mark.parametrize("backbone", ["context", "encoder"])
def test_a_model_with_descriptions_reloads_with_the_same_logits(tokenizer, tmp_path, backbone):
    model = described_model(tokenizer, backbone, label_residual_dropout=0.3)
    model.save_pretrained(tmp_path)
    loaded = LabelAttnForSequenceClassification.from_pretrained(tmp_path).eval()
    batch = tokenizer(["the calendar of animals", "plants"], padding=True, return_tensors="pt")
    batch.pop("token_type_ids")
    expected = model(**batch).logits
    # Equal weights; the encoder's products may round their last bit otherwise in weights loaded elsewhere in memory.
    torch.testing.assert_close(loaded(**batch).logits, expected, rtol=0, atol=1e-6 * expected.abs().max().item())
    assert loaded.labelattn.label_attention.descriptions.has_rows.tolist() == [True, False, True]


def test_a_model_without_descriptions_keeps_its_free_queries(tokenizer):
    model = make_model("context", num_labels=3)
    head = model.labelattn.label_attention
    assert head.descriptions is None and not any("descriptions" in key for key in model.state_dict())
    assert torch.equal(head.label_queries(), head.query(head.label_embeddings))
    with pytest.raises(LabelDescriptionError, match="label_description_size"):
        describe_classes(model, tokenizer, DESCRIPTIONS, {"class_0"})


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (dict(label_description_size=32, pooling="mean"), "pooling='mean' has no queries"),
        (dict(label_description_size=0), "label_description_size must be a positive integer"),
        (dict(label_description_size=32, label_residual_dropout=1.0), r"label_residual_dropout must be in \[0, 1\)"),
        (dict(label_residual_dropout=0.5), "set label_description_size too"),
        (dict(label_description_size=32, untrained_class_offset=float("inf")), "must be a finite number"),
        (dict(label_description_size=32, untrained_class_offset=True), "must be a finite number"),
    ],
)
def test_bad_description_settings_are_refused(options, expected):
    with pytest.raises(LabelAttnConfigError, match=expected):
        LabelAttnConfig(num_labels=3, **options)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_in_half_precision_a_class_without_a_description_vector_gives_a_finite_close_logit(tokenizer, dtype):
    """A class whose description vector is 0 (every class of a new model) is normalised in float32: in fp16 the
    floor under the norm would round to 0 and its logit would be 0 / 0."""
    model = described_model(tokenizer)
    with torch.no_grad():
        model.labelattn.label_attention.descriptions.vectors[2] = 0
    batch = tokenizer(["animals in the calendar", "plants"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).logits
        logits = copy.deepcopy(model).to(dtype)(**batch).logits.float()
    assert torch.isfinite(logits).all(), logits
    # A relative rounding of the type's epsilon per layer: the embeddings, the context, the head.
    bound = 8 * torch.finfo(dtype).eps * float(expected.abs().max())
    gap = float((logits - expected).abs().max())
    assert gap <= bound, f"{dtype} logits differ by {gap:.3g} (allowed {bound:.3g})"
