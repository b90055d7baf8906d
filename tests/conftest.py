"""Shared fixtures: the offline MiniLM tokenizer, small models of realistic weight scale, planted-word models."""

import functools
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import random
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

from configuration_labelattn import LabelAttnConfig
from labelattn import minilm_path
from modeling_labelattn import LabelAttnForSequenceClassification

PLANTED_WORD = "zebra"
# Common English words, one a line, in a fixed order: the filler of the planted-word texts.
FILLER = (Path(__file__).parent / "data" / "filler_words.txt").read_text().split()


def bench_script(name: str):
    """The script `bench/<name>.py` as a module (bench/ is not a package): its functions, for its tests."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def float32_rounding(model, reference: torch.Tensor) -> float:
    """How far two float32 computations of `reference` by the same weights may differ (another process, thread count,
    memory layout or batch): float32's relative rounding for each layer the model stacks (an encoder's layers, the
    embeddings and the head), each a sum over `hidden_size` terms whose rounding errors add up like a random walk,
    times the quantity's scale. A 6-layer, 384-wide encoder's logits around 7 carry about 1e-6 of rounding and this
    allows 1e-4; a wrong weight or code path moves O(1) logits by far more."""
    config = model.config
    layers = config.encoder_config.num_hidden_layers if config.backbone == "encoder" else 1
    scale = max(1.0, float(reference.abs().max()))
    return 4 * torch.finfo(torch.float32).eps * (layers + 2) * config.hidden_size**0.5 * scale


@pytest.fixture(scope="session")
def tokenizer():
    return AutoTokenizer.from_pretrained(minilm_path())


def tiny_encoder_config(**kwargs) -> BertConfig:
    """A 2-layer BERT of width 32 with the MiniLM tokenizer's vocabulary: fast enough for every test."""
    defaults = dict(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return BertConfig(**{**defaults, **kwargs})


def make_model(
    backbone: str = "embedding",
    pooling: str = "label_attention",
    multi_label: bool = False,
    num_labels: int = 3,
    seed: int = 0,
    **config_kwargs,
) -> LabelAttnForSequenceClassification:
    """A model in eval mode whose weights have a realistic scale (std 0.5 rather than 0.02), so that logits
    differ by O(1) and tolerances mean something. `backbone="context"` is the embedding backbone with the
    token-context convolution that `labelattn train` gives it (width 3 here; `labelattn train`'s default is 5)."""
    if backbone == "context":
        backbone, config_kwargs = "embedding", {"token_context_width": 3, **config_kwargs}
    torch.manual_seed(seed)
    kwargs = dict(
        id2label={i: f"class_{i}" for i in range(num_labels)},
        pooling=pooling,
        hidden_size=32,
        num_attention_heads=4,
        problem_type="multi_label_classification" if multi_label else "single_label_classification",
        embedding_dropout=0.0,
        classifier_dropout=0.0,
    )
    if backbone == "encoder":
        kwargs.update(backbone="encoder", encoder_config=tiny_encoder_config())
    config = LabelAttnConfig(**{**kwargs, **config_kwargs})
    model = LabelAttnForSequenceClassification(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() > 1 and "LayerNorm" not in name:
                param.normal_(0.0, 0.5 / param[0].numel() ** 0.5 * 4)  # over the fan-in (a conv's: in × width)
    return model.eval()


@pytest.fixture
def model_factory():
    return make_model


@pytest.fixture(scope="module")
def one_thread():
    """These models are tiny: one thread runs them faster than two, and much faster on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def embedding_model():
    return make_model("embedding", num_labels=3)


@pytest.fixture(scope="module")
def context_model():
    return make_model("context", num_labels=3)


@pytest.fixture(scope="module")
def encoder_model():
    return make_model("encoder", num_labels=3)


def save_model(model, tokenizer, folder: Path) -> Path:
    """Write `model` and `tokenizer` as one model folder, as `labelattn train` does, and return the folder."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def bert_folder(tmp_path_factory, tokenizer) -> Path:
    """A plain transformers BERT classifier (3 labels, not a labelattn model) and the MiniLM tokenizer, saved once."""
    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_encoder_config(num_labels=3)).eval()
    return save_model(model, tokenizer, tmp_path_factory.mktemp("bert") / "model")


@pytest.fixture
def broken(bert_folder, tmp_path) -> Path:
    """A copy of the BERT folder for a test to damage."""
    return Path(shutil.copytree(bert_folder, tmp_path / "model"))


def planted_texts(n: int, seed: int = 0) -> tuple[list[str], list[int]]:
    """Texts of 4-12 filler words; label 1 exactly when the planted word is among them."""
    rng = random.Random(seed)
    texts, labels = [], []
    for i in range(n):
        words = rng.sample(FILLER, rng.randint(4, 12))
        label = i % 2
        if label:
            words.insert(rng.randrange(len(words) + 1), PLANTED_WORD)
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


def fit_planted(model, encode, steps: int = 150, name: str = "planted"):
    """Train `model` on planted texts (`encode(texts)` gives its inputs) with Adam until the planted word alone
    decides the class, checked on held-out texts; returns it in eval mode."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    texts, labels = planted_texts(32 * steps, seed=2)
    for step in range(steps):
        batch = encode(texts[step * 32 : (step + 1) * 32])
        loss = model(**batch, labels=torch.tensor(labels[step * 32 : (step + 1) * 32])).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    held_out, truth = planted_texts(64, seed=3)
    with torch.no_grad():
        predicted = model(**encode(held_out)).logits.argmax(-1)
    accuracy = (predicted == torch.tensor(truth)).float().mean().item()
    assert accuracy == 1.0, f"the {name} model did not learn its rule ({accuracy:.2f})"
    return model


def train_planted(backbone: str, pooling: str = "label_attention", steps: int = 150):
    """A model trained until the planted word alone decides the class (checked on held-out texts)."""
    tok = AutoTokenizer.from_pretrained(minilm_path())
    # The shared scorer: a class can then tell the planted word only by where it looks, which the weight-reading
    # explainers (weights, rollout, flow) assume. With a scorer per class, the values can decide too (see
    # docs/model.md, "The scorer"), and the weights need not single the word out.
    scorer = {"scorer": "shared"} if pooling == "label_attention" else {}
    model = make_model(backbone, pooling, num_labels=2, seed=1, **scorer)
    model.config.id2label, model.config.label2id = {0: "other", 1: "planted"}, {"other": 0, "planted": 1}
    encode = functools.partial(tok, padding=True, return_tensors="pt")
    return fit_planted(model, encode, steps, name=f"planted {backbone}/{pooling}")


@pytest.fixture(scope="session")
def planted_embedding_model():
    return train_planted("embedding")


@pytest.fixture(scope="session")
def planted_context_model():
    return train_planted("context")


@pytest.fixture(scope="session")
def planted_encoder_model():
    return train_planted("encoder")
