"""Static token vectors for the embedding backbone: built from a tiny encoder folder made here, row i for token
id i, cached once and written atomically, and not needed by a saved model."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, BertConfig, BertModel, BertTokenizerFast

from configuration_labelattn import LabelAttnConfig
from labelattn.training import static_embeddings
from labelattn.training.static_embeddings import StaticEmbeddingsError, initialise_embeddings, load_static_embeddings
from modeling_labelattn import LabelAttnForSequenceClassification

WORDS = [
    "the",
    "a",
    "what",
    "who",
    "where",
    "when",
    "how",
    "many",
    "city",
    "river",
    "name",
    "president",
    "year",
    "color",
    "animal",
    "food",
    "sport",
    "music",
]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]"]
HIDDEN = 16


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> str:
    """A 1-layer BERT of width 16 with a WordPiece vocabulary of 7 specials, 18 words and 26 letters."""
    folder = tmp_path_factory.mktemp("encoder")
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = SPECIALS + WORDS + [c for c in letters if c not in WORDS] + [f"##{c}" for c in letters]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab=str(folder / "vocab.txt"))
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "static-embeddings"
    monkeypatch.setattr(static_embeddings, "cache_dir", lambda: folder)
    return folder


def test_minilm_input_rows_follow_token_ids(encoder, cache):
    """At full width the PCA is a rotation of the centred table: distances between rows are those between the
    encoder's input embeddings of the same ids."""
    vectors = load_static_embeddings("minilm-input", HIDDEN, encoder).vectors
    table = AutoModel.from_pretrained(encoder).get_input_embeddings().weight.detach()
    assert vectors.shape == table.shape
    torch.testing.assert_close(torch.cdist(vectors, vectors), torch.cdist(table, table), atol=1e-4, rtol=1e-4)
    assert load_static_embeddings("minilm-input", 4, encoder).vectors.shape == (table.shape[0], 4)


def test_model2vec_rows_follow_token_ids(encoder):
    """Row `id` of the table is Model2Vec's own vector for that token (what its `encode` gives a one-token text);
    the tokens it drops get zero rows."""
    pytest.importorskip("model2vec", reason="--embeddings model2vec needs model2vec==0.10.0 and skeletoken")
    tokenizer = BertTokenizerFast.from_pretrained(encoder)
    static = static_embeddings.distill(encoder, 8)
    rows = static_embeddings.rows_by_token_id(static, tokenizer)
    assert rows.shape == (len(tokenizer), 8)
    for word in ("what", "river", "president"):
        row = rows[tokenizer.convert_tokens_to_ids(word)]
        expected = torch.as_tensor(static.encode([word])[0])
        torch.testing.assert_close(row / row.norm(), expected / expected.norm(), atol=1e-5, rtol=1e-5)
    assert rows[tokenizer.convert_tokens_to_ids("[unused0]")].abs().sum() == 0


def test_vectors_are_made_once_and_cached(encoder, cache, monkeypatch):
    calls = []
    build = static_embeddings.BUILDERS["minilm-input"]
    monkeypatch.setitem(static_embeddings.BUILDERS, "minilm-input", lambda *a: calls.append(a) or build(*a))
    made = load_static_embeddings("minilm-input", 8, encoder)
    again = load_static_embeddings("minilm-input", 8, encoder)
    assert (made.cached, again.cached) == (False, True)
    assert len(calls) == 1 and again.path == made.path and again.path.parent == cache
    torch.testing.assert_close(made.vectors, again.vectors, atol=0, rtol=0)
    assert again.seconds == pytest.approx(made.seconds, abs=1e-3)  # the preparation time is kept with the vectors
    assert load_static_embeddings("minilm-input", 4, encoder).path != made.path  # another width, another file


def test_interrupted_write_leaves_no_file(encoder, cache, monkeypatch):
    """A write that fails half-way (disk full, kill) leaves neither a cache file that would be read later nor a
    temporary file."""
    import safetensors.torch

    def half_write(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", half_write)
    with pytest.raises(OSError, match="disk full"):
        load_static_embeddings("minilm-input", 8, encoder)
    assert list(cache.iterdir()) == []


def test_bad_requests_are_refused(encoder, cache):
    with pytest.raises(StaticEmbeddingsError, match="choose one of"):
        load_static_embeddings("glove", 8, encoder)
    with pytest.raises(StaticEmbeddingsError, match="at most 16"):
        load_static_embeddings("minilm-input", 32, encoder)


def tiny_classifier(encoder: str, kind: str) -> LabelAttnForSequenceClassification:
    config = LabelAttnConfig(
        vocab_size=len(BertTokenizerFast.from_pretrained(encoder)), hidden_size=8, num_labels=3, initializer_range=0.5
    )
    torch.manual_seed(0)
    model = LabelAttnForSequenceClassification(config)
    initialise_embeddings(model, kind, encoder)
    return model.eval()


def test_initialised_table_is_scaled_vectors(encoder, cache):
    model = tiny_classifier(encoder, "minilm-input")
    table = model.labelattn.embeddings.weight.detach()
    vectors = load_static_embeddings("minilm-input", 8, encoder).vectors
    assert table[0].abs().sum() == 0  # padding
    scale = table[1:] / vectors[1:]
    torch.testing.assert_close(scale, torch.full_like(scale, scale[0, 0].item()))  # one factor for every entry
    assert table.pow(2).mean().sqrt() == pytest.approx(model.config.initializer_range, rel=0.05)
    random = tiny_classifier(encoder, "random")
    assert not torch.equal(random.labelattn.embeddings.weight, model.labelattn.embeddings.weight)


def test_saved_model_needs_no_cache(encoder, cache, tmp_path):
    """The vectors live in the saved weights: a fresh process with an empty Hugging Face cache loads the model as
    remote code and computes the same logits."""
    model = tiny_classifier(encoder, "minilm-input")
    model.save_pretrained(tmp_path / "model")
    ids = [[2, 7, 12, 20, 3], [2, 9, 3, 0, 0]]
    mask = [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    with torch.no_grad():
        expected = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits
    script = (
        "import json, sys, torch\n"
        "from transformers import AutoModelForSequenceClassification\n"
        "model = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], trust_remote_code=True).eval()\n"
        f"logits = model(input_ids=torch.tensor({ids}), attention_mask=torch.tensor({mask})).logits\n"
        "print(json.dumps(logits.tolist()))\n"
    )
    empty_home = tmp_path / "hf-home"
    environment = {**os.environ, "HF_HOME": str(empty_home), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "model")],
        env=environment,
        cwd=tmp_path,  # not the repository: the model's own copy of the code is what loads
        capture_output=True,
        text=True,
        check=True,
    )
    reloaded = torch.tensor(json.loads(done.stdout.strip().splitlines()[-1]))
    torch.testing.assert_close(reloaded, expected, atol=1e-6, rtol=1e-6)
    assert not (empty_home / "labelattn").exists()
