"""What a training run trains and how it feeds it: the tokenizer and the classifier the options name, the
tokenized data loaders, and the optimizer's parameter groups."""

import uuid
from typing import TYPE_CHECKING

from labelattn.training import backbones

if TYPE_CHECKING:  # labelattn.data.reading imports datasets: `labelattn --help` imports this module
    import torch

    from labelattn.data.records import Hierarchy
    from labelattn.training.settings import TrainSettings


def load_tokenizer(backbone: str):
    """The MiniLM WordPiece tokenizer, or a local encoder's own tokenizer when its folder has one."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(backbones.tokenizer_path(backbone))


def build_model(
    settings: "TrainSettings",
    label_names: list[str],
    multi_label: bool,
    vocab_size: int,
    hierarchy: "Hierarchy | None" = None,
):
    """A new classifier for `label_names` on the backbone the options name; the hierarchy, if any, goes into its
    config (PretrainedConfig keeps extra keyword arguments in config.json)."""
    import transformers
    from transformers import AutoConfig

    from configuration_labelattn import LabelAttnConfig
    from labelattn.training.static_embeddings import initialise_embeddings
    from modeling_labelattn import LabelAttnForSequenceClassification

    common = dict(
        id2label=dict(enumerate(label_names)),
        label2id={name: i for i, name in enumerate(label_names)},
        pooling=settings.pooling,
        num_attention_heads=settings.num_attention_heads,
        attention_key_size=settings.attention_key_size,
        scorer=settings.scorer,
        scorer_rank=settings.scorer_rank,
        label_projections=settings.label_projections,
        initializer_range=settings.initializer_range,
        classifier_dropout=settings.classifier_dropout,
        problem_type="multi_label_classification" if multi_label else "single_label_classification",
    )
    embedding = backbones.backbone_kind(settings.backbone) == "embedding"
    if settings.label_descriptions:  # queries computed from the mean of the backbone's token vectors over a description
        encoder = None if embedding else AutoConfig.from_pretrained(backbones.encoder_path(settings.backbone))
        common["label_description_size"] = settings.hidden_size if embedding else encoder.hidden_size
        common["label_residual_dropout"] = settings.label_residual_dropout
        if settings.untrained_class_offset is not None:
            common["untrained_class_offset"] = settings.untrained_class_offset
    if hierarchy is not None:
        ancestors = {name: list(hierarchy.ancestors[name]) for name in label_names}
        common["label_hierarchy"] = {"levels": hierarchy.levels, "ancestors": ancestors}
    if embedding:
        config = LabelAttnConfig(
            vocab_size=vocab_size,
            hidden_size=settings.hidden_size,
            token_context_width=settings.token_context_width,
            max_seq_length=settings.max_length,
            **common,
        )
        model = LabelAttnForSequenceClassification(config)
        initialise_embeddings(model, settings.embeddings)  # the vectors are in the saved weights: loading needs nothing
    else:
        # The layers --encoder-layers leaves out are in the encoder's weights file: transformers reports them as
        # unexpected keys, a table of warnings that says only what the option asked for.
        verbosity = transformers.logging.get_verbosity()
        if settings.encoder_layers is not None:
            transformers.logging.set_verbosity_error()
        try:
            model = LabelAttnForSequenceClassification.from_encoder(
                backbones.encoder_path(settings.backbone), settings.encoder_layers, **common
            )
        finally:
            transformers.logging.set_verbosity(verbosity)
    model.get_input_embeddings().weight.requires_grad_(not settings.freeze_embeddings)
    return model


def tokenized_loaders(data, tokenizer, settings: "TrainSettings", max_length: int, seed: int):
    """DataLoaders over the tokenized splits; the training one shuffles with its own generator, so that building
    it (or resuming) never draws from the global random state that dropout uses, and with `group_by_length` puts
    texts of like length together (`length_groups`); the others are read shortest first (at 1,918 classes the head's
    cost is in every padded token: a validation pass of ICD-10-CM 1.9× faster)."""
    import torch
    from torch.utils.data import DataLoader
    from transformers import DataCollatorWithPadding

    num_labels = len(data.label_names)

    def encode(batch: dict) -> dict:
        encoded = tokenizer(batch["text"], truncation=True, max_length=max_length)
        if data.multi_label:  # class indices -> 0/1 targets (num_labels,)
            encoded["labels"] = [[float(i in set(row)) for i in range(num_labels)] for row in batch["label"]]
        else:
            encoded["labels"] = batch["label"]
        return encoded

    # Each split is named by a fingerprint of its own: `datasets` would otherwise pickle `encode` with the tokenizer
    # to hash it, about 1 s a split; the splits live in memory (`splits.py`), so no cache file is looked up by it.
    tokenized = {
        name: split.map(encode, batched=True, remove_columns=["text", "label"], new_fingerprint=uuid.uuid4().hex)
        for name, split in data.splits.items()
    }
    collate = DataCollatorWithPadding(tokenizer)
    loaders = {}
    for split in tokenized:
        order = {}
        if split == "train":
            # Also with a sampler of its own: without a generator, each epoch's iterator draws its base seed from the
            # global random state, which dropout uses, and a resumed run would draw it at another point of that stream.
            order["generator"] = torch.Generator().manual_seed(seed)
            if settings.group_by_length:
                from labelattn.training.length_groups import EpochLengthGroupedSampler

                lengths = [len(ids) for ids in tokenized[split]["input_ids"]]
                order["sampler"] = EpochLengthGroupedSampler(lengths, settings.batch_size, seed)
            else:
                order["shuffle"] = True
        else:  # validation and test shortest first: less padding, the same logits (padded = unpadded), any order scores
            lengths = [len(ids) for ids in tokenized[split]["input_ids"]]
            order["sampler"] = sorted(range(len(lengths)), key=lengths.__getitem__)
        loaders[split] = DataLoader(tokenized[split], batch_size=settings.batch_size, collate_fn=collate, **order)
    return loaders


# The learning rate of a class's own parameters that no map shared by the classes multiplies, against the head's.
OWN_CLASS_LEARNING_RATE_SCALE = 10.0


def own_class_parameters(model) -> list["torch.nn.Parameter"]:
    """The parameters each class owns alone, a row per class, without the label projections: its query and its
    scorer (a full `w_c`, or a rank-r scorer's code `e_c`, which the classes' shared basis reads); none otherwise.

    Under AdamW each number of a parameter moves by about the learning rate a step. A projected query `W_Q e_c` moves
    by the sum of the moves of `d` numbers of `W_Q` and of `e_c`, a class's own query by its own numbers' alone: at
    the head's rate it learned too slowly (ICD-10-CM 0.9201 top-1 at 1x the rate, 0.9244 at 10x, against 0.9269 with
    the projections; TREC's macro-F1 0.8365 at 1x, 0.8604 at 10x, against 0.8627; docs/model.md). A rank-64 code
    moves `w_c = e_c P` by 64 numbers' moves where a full scorer moves 384: at 1x one narrow head with it reached
    ICD-10-CM 0.8563, at 10x 0.9248 (docs/many-classes.md, "The fast many-class recipe")."""
    head, config = model.labelattn.label_attention, model.config
    if head is None or config.label_projections:
        return []
    per_class = config.scorer == "per_class"
    return [head.label_embeddings, *([model.classifier.weight] if per_class else [])]


def optimizer_groups(model, settings: "TrainSettings") -> list[dict]:
    """A pretrained encoder learns slowly, the new head quickly (its classes' own parameters more quickly still, see
    `own_class_parameters`); the embedding backbone is all new."""
    encoder = model.labelattn.encoder
    encoder_params = {id(p) for p in encoder.parameters()} if encoder is not None else set()
    own = {id(p) for p in own_class_parameters(model)}
    trained = [p for p in model.parameters() if p.requires_grad]  # not a frozen token table
    head_rate = settings.head_learning_rate
    groups = [
        {"params": [p for p in trained if id(p) in encoder_params], "lr": settings.learning_rate},
        {"params": [p for p in trained if id(p) not in encoder_params | own], "lr": head_rate},
        {"params": [p for p in trained if id(p) in own], "lr": head_rate * OWN_CLASS_LEARNING_RATE_SCALE},
    ]
    return [group for group in groups if group["params"]]
