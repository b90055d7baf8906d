"""The Hugging Face conventions a labelattn model must keep, one fast test each on tiny models: Trainer training and
`save_model` reloaded as remote code, `pipeline(top_k=None)` with batches, `torch.compile`, bf16 loading, PEFT LoRA
on the encoder backbone, activation checkpointing, `resize_token_embeddings`, `attn_implementation` and
`device_map="cpu"`. Each compares against the eager float32 model, with tolerances from the logits' scale."""

import copy

import pytest
import torch
from conftest import float32_rounding, make_model, planted_texts, save_model
from transformers import AutoModelForSequenceClassification

from modeling_labelattn import LabelAttnForSequenceClassification

TEXTS = ["how many people live in tokyo ?", "who wrote hamlet ?", "what is a zebra", "name a river in france"]


@pytest.fixture(scope="module")
def encoder_model():
    return make_model("encoder", num_labels=3)


@pytest.fixture(scope="module")
def encoder_folder(encoder_model, tokenizer, tmp_path_factory):
    return save_model(encoder_model, tokenizer, tmp_path_factory.mktemp("conventions") / "encoder")


def logits_of(model, tokenizer, texts=TEXTS) -> torch.Tensor:
    batch = tokenizer(texts, padding=True, return_tensors="pt").to(model.device)
    with torch.no_grad():
        return model(**batch).logits.float()


def assert_close(actual: torch.Tensor, expected: torch.Tensor, model, what: str, factor: float = 1.0) -> None:
    bound = factor * float32_rounding(model, expected)
    gap = float((actual - expected).abs().max())
    assert gap <= bound, f"{what}: logits differ by {gap:.3g} (allowed {bound:.3g} at scale {expected.abs().max():.3g})"


def is_remote_code(model) -> bool:
    return type(model).__module__.startswith("transformers_modules")


@pytest.fixture(autouse=True)
def unregistered(monkeypatch):
    """Every test loads the folders' remote code, as in a fresh process: `explainers.load_classifier` registers the
    installed labelattn classes, which transformers then prefers to a folder's remote code, so that an earlier test
    would decide what loads."""
    from transformers.models.auto import configuration_auto, modeling_auto

    mappings = (
        configuration_auto.CONFIG_MAPPING,
        modeling_auto.MODEL_MAPPING,
        modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING,
    )
    for mapping in mappings:
        kept = {k: v for k, v in mapping._extra_content.items() if "labelattn" not in str(k).lower()}
        monkeypatch.setattr(mapping, "_extra_content", kept)


def test_trainer_trains_and_its_saved_model_reloads_as_remote_code(tokenizer, tmp_path):
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    model = make_model("encoder", num_labels=2).train()
    before = copy.deepcopy(model.state_dict())
    texts, labels = planted_texts(20)
    rows = [{**tokenizer(text), "labels": label} for text, label in zip(texts, labels, strict=True)]
    arguments = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=5,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        logging_steps=1,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=arguments, train_dataset=rows, data_collator=DataCollatorWithPadding(tokenizer))
    result = trainer.train()
    assert result.global_step == 5 and torch.isfinite(torch.tensor(result.training_loss))
    changed = [name for name, value in model.state_dict().items() if not torch.equal(value, before[name])]
    assert any("label_attention" in n for n in changed) and any("encoder" in n for n in changed), changed

    trainer.save_model(str(tmp_path / "saved"))
    tokenizer.save_pretrained(tmp_path / "saved")
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "saved", trust_remote_code=True).eval()
    assert is_remote_code(reloaded), type(reloaded).__module__
    model.eval()
    assert_close(logits_of(reloaded, tokenizer), logits_of(model, tokenizer), model, "Trainer's saved model")


def test_pipeline_scores_every_class_in_batches_as_the_model_does(encoder_model, encoder_folder, tokenizer):
    from transformers import pipeline

    classify = pipeline("text-classification", model=str(encoder_folder), trust_remote_code=True, device="cpu")
    rows = classify(TEXTS, top_k=None, batch_size=3)  # a batch of 3 and one of 1: padding differs between them
    expected = torch.stack([logits_of(encoder_model, tokenizer, [text])[0] for text in TEXTS]).softmax(-1)
    labels = encoder_model.config.id2label
    assert [len(row) for row in rows] == [len(labels)] * len(TEXTS)
    scores = torch.tensor(
        [[{r["label"]: r["score"] for r in row}[labels[i]] for i in range(len(labels))] for row in rows]
    )
    gap = float((scores - expected).abs().max())
    assert gap <= 1e-5, f"the pipeline's probabilities differ from the model's by {gap:.3g}"


def test_torch_compile_gives_the_eager_logits(tokenizer, one_thread):
    model = make_model("embedding", num_labels=3)  # the smallest graph: inductor compiles it in ~10 s
    compiled = torch.compile(model, dynamic=False)
    assert_close(logits_of(compiled, tokenizer), logits_of(model, tokenizer), model, "torch.compile")


def test_loading_in_bfloat16_gives_bfloat16_weights_and_close_logits(encoder_model, encoder_folder, tokenizer):
    model = AutoModelForSequenceClassification.from_pretrained(
        encoder_folder, trust_remote_code=True, dtype=torch.bfloat16
    ).eval()
    dtypes = {p.dtype for p in model.parameters()}
    assert dtypes == {torch.bfloat16}, dtypes
    expected = logits_of(encoder_model, tokenizer)
    # bf16 keeps 8 significant bits: a relative 2^-8 per layer of rounding, the encoder's 2 layers and the head.
    bound = 4 * 2**-8 * float(expected.abs().max())
    gap = float((logits_of(model, tokenizer) - expected).abs().max())
    assert gap <= bound, f"bf16 logits differ by {gap:.3g} (allowed {bound:.3g})"


def test_trainer_divides_the_accumulated_loss_itself(tmp_path):
    """forward takes **kwargs (transformers' convention) but returns the batch's mean loss: the Trainer must not pass
    num_items_in_batch and skip its own division by the accumulated steps, which would scale the gradients by them."""
    from transformers import Trainer, TrainingArguments

    arguments = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, gradient_accumulation_steps=4)
    assert Trainer(model=make_model(), args=arguments).model_accepts_loss_kwargs is False


def test_peft_lora_on_the_encoder_trains_merges_and_reloads(tokenizer, tmp_path):
    from peft import LoraConfig, get_peft_model

    model = make_model("encoder", num_labels=2)
    # The encoder's self-attention only: the head's own query/value layers are trained whole (modules_to_save).
    lora = LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=r".*encoder\.encoder\.layer\.\d+\.attention\.self\.(query|value)",
        modules_to_save=["label_attention", "classifier"],
    )
    peft_model = get_peft_model(model, lora)
    trainable = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    assert any("lora_A" in n for n in trainable) and not any("encoder.embeddings" in n for n in trainable)
    texts, labels = planted_texts(16)
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    optimizer = torch.optim.Adam([p for p in peft_model.parameters() if p.requires_grad], lr=1e-2)
    peft_model.train()
    losses = []
    for _ in range(5):
        loss = peft_model(**batch, labels=torch.tensor(labels)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    assert any(float(p.abs().max()) > 0 for n, p in peft_model.named_parameters() if "lora_B" in n)
    peft_model.eval()
    adapted = logits_of(peft_model, tokenizer)

    merged = peft_model.merge_and_unload()
    assert isinstance(merged, LabelAttnForSequenceClassification)
    assert not any("lora" in n for n, _ in merged.named_parameters())
    assert_close(logits_of(merged, tokenizer), adapted, merged, "merged LoRA", factor=10)
    save_model(merged, tokenizer, tmp_path / "merged")
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "merged", trust_remote_code=True).eval()
    assert_close(logits_of(reloaded, tokenizer), adapted, merged, "reloaded merged LoRA", factor=10)


def test_activation_checkpointing_on_the_encoder_gives_the_same_loss_and_gradients(tokenizer, monkeypatch):
    import transformers.modeling_utils

    calls = []
    checkpoint = transformers.modeling_utils.checkpoint

    def counted(*args, **kwargs):
        calls.append(1)
        return checkpoint(*args, **kwargs)

    monkeypatch.setattr(transformers.modeling_utils, "checkpoint", counted)
    texts, labels = planted_texts(6)
    batch = tokenizer(texts, padding=True, return_tensors="pt")

    def loss_and_gradients(model):
        model.train()
        loss = model(**batch, labels=torch.tensor(labels)).loss
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    plain_loss, plain_grads = loss_and_gradients(make_model("encoder", num_labels=2))
    model = make_model("encoder", num_labels=2)
    model.activation_checkpointing_enable()
    assert model.is_gradient_checkpointing
    loss, grads = loss_and_gradients(model)
    assert len(calls) == model.config.encoder_config.num_hidden_layers, "the encoder's layers were not checkpointed"
    assert torch.allclose(loss, plain_loss, rtol=1e-6, atol=0), (loss, plain_loss)
    assert grads.keys() == plain_grads.keys()
    for name, grad in grads.items():
        scale = float(plain_grads[name].abs().max()) + 1e-12
        assert float((grad - plain_grads[name]).abs().max()) <= 1e-5 * scale, name


@pytest.mark.parametrize("backbone", ["embedding", "encoder"])
def test_resize_token_embeddings_keeps_the_logits_and_reads_the_new_ids(backbone, tokenizer):
    model = make_model(backbone, num_labels=3)
    expected = logits_of(model, tokenizer)
    old_size = model.get_input_embeddings().num_embeddings
    model.resize_token_embeddings(old_size + 8)
    assert model.get_input_embeddings().num_embeddings == old_size + 8
    assert_close(logits_of(model, tokenizer), expected, model, "after resize_token_embeddings")
    new_ids = torch.tensor([[101, old_size + 7, 102]])
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=new_ids).logits).all()


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_attn_implementation_reaches_the_encoder(implementation, encoder_model, encoder_folder, tokenizer):
    model = AutoModelForSequenceClassification.from_pretrained(
        encoder_folder, trust_remote_code=True, attn_implementation=implementation
    ).eval()
    assert is_remote_code(model)
    assert model.labelattn.encoder.config._attn_implementation == implementation
    assert_close(logits_of(model, tokenizer), logits_of(encoder_model, tokenizer), model, implementation)


def test_device_map_cpu_loads_every_weight_on_the_cpu(encoder_model, encoder_folder, tokenizer):
    model = AutoModelForSequenceClassification.from_pretrained(
        encoder_folder, trust_remote_code=True, device_map="cpu"
    ).eval()
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    assert_close(logits_of(model, tokenizer), logits_of(encoder_model, tokenizer), model, 'device_map="cpu"')
