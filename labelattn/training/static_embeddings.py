"""Pretrained static token vectors for the embedding backbone, made offline from the shipped MiniLM encoder.

The embedding backbone reads one vector per token id and nothing else, so starting its table from vectors that
already place related words near each other lets it classify texts whose words it never saw in training. Two
recipes, both computed on this machine from the encoder folder (nothing is downloaded):

- `model2vec`: [Model2Vec](https://github.com/MinishLab/model2vec)'s `distill` runs every token of the vocabulary
  through the encoder alone, averages the output, reduces it to `hidden_size` by PCA and weights it by the token's
  frequency rank (SIF), so that frequent tokens ("the", "what") get short vectors.
- `minilm-input`: the encoder's own input embedding matrix, reduced to `hidden_size` by PCA.

`random` keeps the model's random initialisation. The vectors are made once, on first use, and cached as
safetensors under the Hugging Face cache (`HF_HOME/labelattn/static-embeddings/`); a trained model holds its own
copy in its weights, so it loads anywhere without the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: `labelattn train --help` reads EMBEDDINGS from here
    import torch

EMBEDDINGS = ("model2vec", "minilm-input", "random")
# Measured with `labelattn train` on TREC and BBC News (docs/default-model.md): MiniLM's input embeddings give the
# best label-attention model on both, for 3 s of preparation and no extra package.
DEFAULT_EMBEDDINGS = "minilm-input"
# Bumped whenever a recipe changes, so that vectors cached by an older version are made again.
RECIPE_VERSION = 1


class StaticEmbeddingsError(ValueError):
    """Static token vectors that cannot be made for the model asked for."""


@dataclass
class StaticVectors:
    """Token vectors `(vocab_size, hidden_size)`, row i for token id i of the encoder's tokenizer."""

    vectors: torch.Tensor
    path: Path
    seconds: float  # how long making them took, when they were made (read back from the cache later)
    cached: bool  # read from the cache rather than made by this call


def cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HOME) / "labelattn" / "static-embeddings"


def cache_key(kind: str, hidden_size: int, encoder: str) -> str:
    """Names the vectors of one recipe, width and encoder folder; a reinstalled encoder gets a new key."""
    weights = Path(encoder) / "model.safetensors"
    stat = weights.stat() if weights.is_file() else None
    source = {
        "kind": kind,
        "hidden_size": hidden_size,
        "encoder": str(Path(encoder).resolve()),
        "weights": [stat.st_size, stat.st_mtime_ns] if stat else None,
        "recipe": RECIPE_VERSION,
    }
    digest = hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()[:16]
    return f"{kind}-{hidden_size}-{digest}"


def load_static_embeddings(kind: str, hidden_size: int, encoder: str | None = None) -> StaticVectors:
    """The `kind` vectors of width `hidden_size` for the tokenizer of `encoder` (default: the shipped MiniLM),
    read from the cache or made and cached first."""
    if kind not in EMBEDDINGS or kind == "random":
        raise StaticEmbeddingsError(f"Unknown static embeddings {kind!r}: choose one of {EMBEDDINGS[:-1]}.")
    if encoder is None:
        from labelattn import minilm_path

        encoder = minilm_path()
    path = cache_dir() / f"{cache_key(kind, hidden_size, encoder)}.safetensors"
    if path.is_file():
        return read_cached(path)
    start = time.perf_counter()
    vectors = BUILDERS[kind](encoder, hidden_size)
    seconds = time.perf_counter() - start
    write_atomically(path, vectors, {"kind": kind, "encoder": str(encoder), "seconds": f"{seconds:.3f}"})
    return StaticVectors(vectors, path, seconds, cached=False)


def read_cached(path: Path) -> StaticVectors:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as file:
        vectors = file.get_tensor("vectors")
        seconds = float(file.metadata().get("seconds", "nan"))
    return StaticVectors(vectors, path, seconds, cached=True)


def write_atomically(path: Path, vectors: torch.Tensor, metadata: dict[str, str]) -> None:
    """Write into a temporary file beside `path`, then rename: a reader (or a concurrent writer) never sees a
    half-written file, whoever renames last wins, and both wrote the same vectors."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
    os.close(handle)
    try:
        save_file({"vectors": vectors.contiguous()}, temporary, metadata=metadata)
        os.chmod(temporary, 0o644)  # mkstemp makes it private; the cache is shared like the rest of HF_HOME
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def initialise_embeddings(model, kind: str, encoder: str | None = None) -> StaticVectors | None:
    """Start the embedding backbone's table (`model.labelattn.embeddings`) from the `kind` vectors, rescaled so that
    their root mean square is the config's `initializer_range` (the scale the rest of the model is initialised
    for); the padding row stays zero. `random` leaves the model as it is. In a run of several processes the main
    one makes the vectors first and the others read its cache."""
    from accelerate import PartialState

    state = PartialState()
    if kind == "random":
        state.print(
            "Token vectors: random start, nothing to prepare "
            "(--embeddings minilm-input or model2vec start from MiniLM's)."
        )
        return None
    import torch

    with state.main_process_first():
        static = load_static_embeddings(kind, model.config.hidden_size, encoder)
    table = model.labelattn.embeddings.weight
    if static.vectors.shape != table.shape:
        raise StaticEmbeddingsError(
            f"The {kind} vectors have shape {tuple(static.vectors.shape)} but the model's embedding table is "
            f"{tuple(table.shape)}: the model must use the tokenizer of the encoder the vectors were made from."
        )
    vectors = static.vectors * (model.config.initializer_range / static.vectors.pow(2).mean().sqrt())
    with torch.no_grad():
        table.copy_(vectors)
        if model.config.pad_token_id is not None:
            table[model.config.pad_token_id].zero_()
    how = "read from the cache" if static.cached else "made"
    state.print(f"Token vectors: {kind}, {how} {static.path} (the one-time preparation took {static.seconds:.1f} s).")
    return static


# ------------------------------------------------------------------------------------------------ recipes


def check_width(hidden_size: int, available: int, vocab_size: int) -> None:
    if not 1 <= hidden_size <= min(available, vocab_size):
        raise StaticEmbeddingsError(
            f"--hidden-size {hidden_size} cannot be reduced from the encoder's {available} dimensions: "
            f"choose at most {min(available, vocab_size)}, or --embeddings random."
        )


def principal_components(matrix: torch.Tensor, dims: int) -> torch.Tensor:
    """`(n, d) -> (n, dims)`: the centred rows projected on their `dims` main directions."""
    import torch

    centred = matrix - matrix.mean(dim=0)
    _, _, right = torch.linalg.svd(centred, full_matrices=False)
    return centred @ right[:dims].T


def minilm_input_vectors(encoder: str, hidden_size: int) -> torch.Tensor:
    """The encoder's input token-embedding matrix, PCA-reduced to `hidden_size`."""
    from transformers import AutoModel

    table = AutoModel.from_pretrained(encoder).get_input_embeddings().weight.detach().float()
    check_width(hidden_size, table.shape[1], table.shape[0])
    return principal_components(table, hidden_size)


def distill(encoder: str, hidden_size: int):
    """Model2Vec's `StaticModel` distilled from the encoder folder (float32, PCA to `hidden_size`, SIF weights)."""
    try:
        from model2vec.distill import distill_from_model
    except ImportError as error:
        raise ImportError(
            "--embeddings model2vec needs model2vec: pip install model2vec==0.10.0 skeletoken "
            "(not model2vec[distill], which pins an older transformers)."
        ) from error
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(encoder)
    model = AutoModel.from_pretrained(encoder)
    check_width(hidden_size, model.config.hidden_size, len(tokenizer))
    return distill_from_model(model, tokenizer, pca_dims=hidden_size, quantize_to="float32")


def rows_by_token_id(static, tokenizer) -> torch.Tensor:
    """`(len(tokenizer), dims)`: row i is the static vector of the tokenizer's token i. Model2Vec renumbers the
    tokens it keeps and drops some (`[unused*]`, special tokens it does not need): their rows are zero."""
    import torch

    distilled = torch.as_tensor(static.embedding, dtype=torch.float32)
    ids = tokenizer.get_vocab()
    rows = torch.zeros(len(tokenizer), distilled.shape[1])
    for token, index in static.tokenizer.get_vocab().items():
        rows[ids[token]] = distilled[index]
    return rows


def model2vec_vectors(encoder: str, hidden_size: int) -> torch.Tensor:
    from transformers import AutoTokenizer

    return rows_by_token_id(distill(encoder, hidden_size), AutoTokenizer.from_pretrained(encoder))


BUILDERS = {"model2vec": model2vec_vectors, "minilm-input": minilm_input_vectors}
