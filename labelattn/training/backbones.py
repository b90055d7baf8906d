"""The named backbones of `labelattn train --backbone`, in one table: what each is, where its encoder and tokenizer
come from, its default learning rate, and what `--help` and the model card say about it.

Adding a named backbone is one entry of `BACKBONES`. Any other `--backbone` value is the path of a local
Transformers encoder folder (saved with `save_pretrained`), fine-tuned with the encoder defaults.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from labelattn import minilm_path

# Learning rates: a bag of embeddings learns from scratch, a pretrained encoder is fine-tuned.
EMBEDDING_LEARNING_RATE = 5e-3
ENCODER_LEARNING_RATE = 5e-5
# Files by which a local encoder folder shows it has its own tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt")


@dataclass(frozen=True)
class Backbone:
    """A named backbone: `kind` "embedding" (a token table built here) or "encoder" (a pretrained encoder)."""

    kind: str
    learning_rate: float
    summary: str  # the words of `--backbone --help`
    description: str  # the model card's words
    encoder: Callable[[], str] | None = None  # the encoder's folder, for kind "encoder"
    base_model: str | None = None  # the Hub id the card names as the base model


BACKBONES = {
    "embedding": Backbone(
        kind="embedding",
        learning_rate=EMBEDDING_LEARNING_RATE,
        summary="a bag of token embeddings, fast",
        description="token embeddings with no attention layer (fastText style)",
    ),
    "minilm": Backbone(
        kind="encoder",
        learning_rate=ENCODER_LEARNING_RATE,
        summary="the offline all-MiniLM-L6-v2 encoder",
        description="the pretrained encoder all-MiniLM-L6-v2 (BERT, 6 layers, hidden size 384), fine-tuned",
        encoder=minilm_path,
        base_model="sentence-transformers/all-MiniLM-L6-v2",
    ),
}


def backbone_kind(name: str) -> str:
    """ "embedding" for a token table, "encoder" for a pretrained encoder (named or a local folder)."""
    return BACKBONES[name].kind if name in BACKBONES else "encoder"


def is_backbone(name: str) -> bool:
    """Whether `name` is a named backbone or a folder holding a Transformers encoder (the fallback)."""
    return name in BACKBONES or (Path(name) / "config.json").is_file()


def encoder_path(name: str) -> str:
    """The folder of the pretrained encoder `name` stands for: a named encoder's, or `name` itself."""
    return BACKBONES[name].encoder() if name in BACKBONES else name


def tokenizer_path(name: str) -> str:
    """Where the tokenizer comes from: a local encoder folder's own one when it has one, else the MiniLM
    WordPiece tokenizer (shared by the named backbones, so that their token ids agree)."""
    folder = Path(name)
    if name not in BACKBONES and any((folder / file).is_file() for file in TOKENIZER_FILES):
        return str(folder)
    return minilm_path()


def default_learning_rate(name: str) -> float:
    return BACKBONES[name].learning_rate if name in BACKBONES else ENCODER_LEARNING_RATE


def base_model(name: str) -> str | None:
    """The Hub id of the model `name` starts from, for the card's metadata (None for a table or a local folder)."""
    return BACKBONES[name].base_model if name in BACKBONES else None


def description(name: str, encoder_layers: int | None = None) -> str:
    """What the model card says the backbone is (an encoder cut to its first `encoder_layers` layers says so)."""
    text = BACKBONES[name].description if name in BACKBONES else f"the pretrained encoder at `{name}`, fine-tuned"
    if encoder_layers is None:
        return text
    return f"{text}, cut to its first {encoder_layers} layer{'s' if encoder_layers > 1 else ''}"


def unknown_backbone_message(name: str) -> str:
    """Why `name` is no backbone (see `is_backbone`)."""
    names = ", ".join(repr(known) for known in BACKBONES)
    return (
        f"--backbone {name!r} is neither {names} nor a folder with a config.json "
        "(a Transformers encoder saved with save_pretrained)."
    )
