"""The head under the conventions of production: torch.export traces the whole forward pass (no data-dependent
Python branch) and gives eager's logits; activation checkpointing of the encoder changes no loss or gradient; a
calibration temperature scales the logits and their label contributions alike; old configs load without one."""

import json
from pathlib import Path

import pytest
import torch
from conftest import make_model

from configuration_labelattn import LabelAttnConfig, LabelAttnConfigError
from modeling_labelattn import LabelAttnForSequenceClassification, LabelAttnInputError

TEXTS = ["the screen cracked", "fast delivery but the screen cracked after two days of use", ""]
V1_CHECKPOINTS = Path(__file__).parent / "data" / "labelattn-v1"


def padded_batch(tokenizer) -> dict[str, torch.Tensor]:
    """Right-padded texts and a text of only padding (the case a host-side `if` used to handle)."""
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    batch["attention_mask"][-1] = 0
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


@pytest.mark.parametrize("num_labels", [3, 40])  # few classes (keys folded into the queries) and more
@pytest.mark.parametrize("backbone", ["context", "encoder"])
@torch.no_grad()
def test_torch_export_traces_the_forward_pass_and_gives_eager_logits(backbone, num_labels, tokenizer):
    """Exported with a dynamic batch size and length, the program gives eager's logits on the traced batch and on a
    batch of another shape (no size of the head depends on the shape it was traced with)."""
    model = make_model(backbone, num_labels=num_labels)
    batch = padded_batch(tokenizer)
    dynamic = {name: {0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO} for name in batch}
    exported = torch.export.export(model, (), batch, dynamic_shapes=dynamic).module()
    other = tokenizer(["a much longer question about the screen, the delivery and the price"] * 5, return_tensors="pt")
    for inputs in (batch, {name: other[name] for name in batch}):
        want = model(**inputs).logits
        assert want.std() > 0.1
        torch.testing.assert_close(exported(**inputs).logits, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))


def test_the_token_id_check_still_acts_in_eager_mode(tokenizer):
    model = make_model("embedding")
    with pytest.raises(LabelAttnInputError, match="outside the vocabulary"):
        model(input_ids=torch.tensor([[101, 10**6, 102]]))


@pytest.mark.filterwarnings("ignore:`gradient_checkpointing_enable` is deprecated:FutureWarning")
@pytest.mark.parametrize("enable", ["gradient_checkpointing_enable", "activation_checkpointing_enable"])
def test_gradient_checkpointing_of_the_encoder_keeps_loss_and_gradients(enable, tokenizer):
    model = make_model("encoder", num_labels=5).train()
    batch = padded_batch(tokenizer)
    labels = torch.tensor([0, 3, 4])
    results = []
    for checkpointing in (False, True):
        if checkpointing:
            getattr(model, enable)()
            assert any(getattr(m, "gradient_checkpointing", False) for m in model.labelattn.encoder.modules())
        model.zero_grad()
        out = model(**batch, labels=labels)
        out.loss.backward()
        results.append(
            (out.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        )
    (loss, grads), (loss_ckpt, grads_ckpt) = results
    torch.testing.assert_close(loss_ckpt, loss)
    assert grads.keys() == grads_ckpt.keys()
    assert grads["labelattn.encoder.encoder.layer.0.attention.self.query.weight"].abs().max() > 1e-4
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ckpt[name], grad, rtol=1e-5, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")


def test_the_embedding_backbone_has_nothing_to_checkpoint():
    with pytest.raises(ValueError, match="does not support activation checkpointing"):
        make_model("embedding").activation_checkpointing_enable()


@pytest.mark.parametrize("pooling", ["label_attention", "mean"])
@pytest.mark.parametrize("backbone", ["context", "encoder"])
@torch.no_grad()
def test_temperature_divides_logits_and_contributions_alike(backbone, pooling, tokenizer):
    model = make_model(backbone, pooling, num_labels=4)
    batch = padded_batch(tokenizer)
    labels = torch.tensor([0, 3, 1])
    plain = model(**batch, labels=labels, output_label_contributions=True)
    model.config.temperature = 2.5
    scaled = model(**batch, labels=labels, output_label_contributions=True)
    assert plain.logits.std() > 0.1
    torch.testing.assert_close(scaled.logits, plain.logits / 2.5)
    torch.testing.assert_close(scaled.label_contributions, plain.label_contributions / 2.5)
    torch.testing.assert_close(
        scaled.label_contributions.sum(-1) + scaled.label_contribution_bias, scaled.logits, rtol=0, atol=1e-5
    )
    torch.testing.assert_close(scaled.loss, torch.nn.functional.cross_entropy(plain.logits / 2.5, labels))
    torch.testing.assert_close(model(**batch).logits, scaled.logits, rtol=1e-5, atol=1e-5)  # every route


def test_temperature_survives_save_and_reload_and_old_configs_have_none(tmp_path, tokenizer):
    assert json.loads((V1_CHECKPOINTS / "embedding" / "config.json").read_text()).get("temperature") is None
    assert LabelAttnConfig.from_pretrained(V1_CHECKPOINTS / "embedding").temperature is None
    model = make_model("context", temperature=0.7)
    model.save_pretrained(tmp_path)
    reloaded = LabelAttnForSequenceClassification.from_pretrained(tmp_path).eval()
    assert reloaded.config.temperature == 0.7
    batch = padded_batch(tokenizer)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, model(**batch).logits)


def test_a_key_wider_than_an_encoders_vectors_is_refused():
    from conftest import tiny_encoder_config

    with pytest.raises(LabelAttnConfigError, match="attention_key_size=33 is above hidden_size=32"):
        LabelAttnConfig(num_labels=3, backbone="encoder", encoder_config=tiny_encoder_config(), attention_key_size=33)
