"""Explaining one model from many threads at once gives exactly what one thread gives, and leaves the model as it was
found (issue 20 point 2): its config (a decoder's `pad_token_id`), its mode, its hooks, its own forward pass."""

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from test_any_classifier import FILLER, build_model, build_tokenizer

from explainers import explain, predict

METHODS = {
    "shap": {"n_samples": 4},
    "saliency": {},
    "integrated_gradients": {"n_steps": 8, "tolerance": None},
    "attention_rollout": {},
}
TEXTS = ["who wrote it", " ".join(FILLER[:12]), "a short one about " + " ".join(FILLER[20:26])]
THREADS, ROUNDS = 4, 3


def explained(model, tokenizer, method: str) -> list[dict]:
    return [exp.to_dict() for exp in explain(model, tokenizer, TEXTS, method=method, **METHODS[method])]


def own_logits(model, tokenizer) -> torch.Tensor:
    """The model's own forward pass, outside the explainers: on a right-padded batch, or text by text for a model
    without a padding token (which transformers refuses to batch). A `pad_token_id` left at -1 by an explainer
    would change the first; a hook or a mode left behind, both."""
    rows = [tokenizer(text).input_ids for text in TEXTS]
    with torch.no_grad():
        if model.config.pad_token_id is None:
            return torch.cat([model(input_ids=torch.tensor([row])).logits for row in rows])
        width = max(map(len, rows))
        ids = torch.tensor([row + [model.config.pad_token_id] * (width - len(row)) for row in rows])
        mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows])
        return model(input_ids=ids, attention_mask=mask).logits


def assert_same(got: list[dict], want: list[dict], where: str) -> None:
    for a, b in zip(got, want, strict=True):
        assert a["words"] == b["words"] and a["target"] == b["target"], where
        scale = max(1.0, *map(abs, b["scores"]))
        assert a["scores"] == pytest.approx(b["scores"], abs=1e-6 * scale), where
        assert a["probability"] == pytest.approx(b["probability"], abs=1e-6), where


@pytest.fixture(scope="module", params=["gpt2-no-padding", "gpt2-pad-0", "bert"])
def classifier(request):
    family = "bert" if request.param == "bert" else "gpt2"
    tokenizer = build_tokenizer("wordpiece" if family == "bert" else "bpe_gpt2")
    model = build_model(family, tokenizer)
    if request.param == "gpt2-pad-0":
        model.config.pad_token_id = 0
    if request.param == "gpt2-no-padding":
        assert model.config.pad_token_id is None and tokenizer.pad_token_id is None
    return model, tokenizer


def test_threads_give_the_sequential_results_and_leave_the_model_as_found(classifier):
    model, tokenizer = classifier
    config, logits = model.config.to_dict(), own_logits(model, tokenizer)
    sequential = {method: explained(model, tokenizer, method) for method in METHODS}
    jobs = [method for _ in range(ROUNDS) for method in METHODS]
    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(lambda method: explained(model, tokenizer, method), jobs))
    for method, result in zip(jobs, results, strict=True):
        assert_same(result, sequential[method], f"{method} in a thread")
    assert model.config.to_dict() == config
    assert not model.training
    assert torch.equal(own_logits(model, tokenizer), logits)


def test_predict_and_explain_mixed_in_threads(classifier):
    model, tokenizer = classifier
    alone = predict(model, tokenizer, TEXTS).probabilities
    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(predict, model, tokenizer, TEXTS) for _ in range(4)]
        futures += [pool.submit(explained, model, tokenizer, "saliency") for _ in range(4)]
        results = [future.result() for future in futures]
    for result in results[:4]:
        torch.testing.assert_close(result.probabilities, alone, rtol=0, atol=1e-6)
