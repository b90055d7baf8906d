"""Label-attention queries started from class descriptions (`labelattn.training.label_queries`)."""

import pytest
import torch
from conftest import make_model

from labelattn.training.label_queries import description_vectors, fit_untrained_queries, start_queries_from_descriptions


@pytest.mark.parametrize("key_size", [None, 3])  # keys as wide as the hidden size, or narrower (W_Q is 12 × 32)
def test_each_query_becomes_the_key_of_its_description(tokenizer, key_size):
    model = make_model("context", num_labels=3, attention_key_size=key_size)
    descriptions = {"class_0": "animals and plants", "class_2": "dates in the calendar"}
    described = start_queries_from_descriptions(model, tokenizer, descriptions)
    assert described == 2
    head = model.labelattn.label_attention
    texts = ["animals and plants", "class_1", "dates in the calendar"]  # class_1 has no description: its name
    keys = head.key(description_vectors(model, tokenizer, texts)) - head.query.bias
    queries = head.query(head.label_embeddings) - head.query.bias
    assert torch.allclose(torch.cosine_similarity(queries, keys, dim=1), torch.ones(3), atol=1e-4)
    lengths = head.label_embeddings.norm(dim=1)  # the random start's length, 0.1 × √32 in make_model's config
    assert torch.allclose(lengths, torch.full((3,), model.config.initializer_range * 32**0.5), rtol=1e-4)


@pytest.mark.parametrize("backbone", ["embedding", "context"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_described_word_draws_its_own_class_more_than_the_other(tokenizer, backbone, seed):
    # Not "the class's top token": attention is a dot product, so a token with a long key can outdraw the
    # description's own (about one model in three). Against the other class, each described word wins.
    model = make_model(backbone, num_labels=2, seed=seed)
    start_queries_from_descriptions(model, tokenizer, {"class_0": "volcano", "class_1": "banana"})
    batch = tokenizer(["the volcano ate a banana today"], return_tensors="pt")
    weights = model(**batch, output_attentions=True).label_attentions[0].mean(0)  # over heads: (classes, seq)
    volcano, banana = 2, 5
    assert weights[0, volcano] > weights[1, volcano] and weights[1, banana] > weights[0, banana]


def test_an_untrained_class_gets_its_description_key_at_the_trained_queries_length(tokenizer):
    model = make_model("context", num_labels=3)
    head = model.labelattn.label_attention
    before = head.label_embeddings.detach().clone()
    fit_untrained_queries(model, tokenizer, {"class_1": "dates in the calendar"}, ["class_1"])
    assert torch.equal(head.label_embeddings[[0, 2]], before[[0, 2]])  # the trained classes keep theirs
    key = head.key(description_vectors(model, tokenizer, ["dates in the calendar"]))[0] - head.query.bias
    queries = head.query(head.label_embeddings) - head.query.bias
    assert torch.cosine_similarity(queries[1], key, dim=0) > 1 - 1e-4
    trained_length = queries[[0, 2]].norm(dim=1).mean()
    assert torch.isclose(queries[1].norm(), trained_length, rtol=1e-4)
