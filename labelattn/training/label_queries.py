"""Label-attention queries computed from the classes' descriptions (`labelattn train --label-descriptions`).

A class's query is what its attention looks for: `q_c = W_Q e_c + b_Q`, compared with every token's key. With
descriptions, the label embedding is computed, `e_c = M v̂_c + r_c` (`modeling_labelattn.LabelDescriptions`): `v_c`
is the mean of the backbone's token vectors over the class's description ("Malignant neoplasm of breast", or its
name where it has none), `M` a map shared by all classes and trained with them, and `r_c` a free residual that only
classes with training rows have. A class that a label file describes but no training row shows gets its query
through the map that the other classes trained: it reads texts the way training taught.

This module makes the description vectors, once, at the start of training (`describe_classes`); the model stores
them (a buffer saved with its weights), so that a saved model needs neither the descriptions nor this code.
"""

import torch

from modeling_labelattn import LabelAttnForSequenceClassification, masked_mean


class LabelDescriptionError(ValueError):
    """Descriptions were asked for a model that cannot use them."""


@torch.no_grad()
def description_vectors(
    model: LabelAttnForSequenceClassification, tokenizer, texts: list[str], batch_size: int = 64
) -> torch.Tensor:
    """The mean of the backbone's token vectors over each text's own tokens (no special tokens, no token context, no
    dropout), one row per text `(len(texts), hidden)` in float32: the embedding table's rows for the embedding
    backbone, the encoder's last layer for an encoder."""
    backbone = model.labelattn
    was_training = model.training
    model.eval()
    rows = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(
            texts[start : start + batch_size],
            padding=True,
            truncation=True,
            max_length=model.config.max_seq_length,
            return_special_tokens_mask=True,
            return_tensors="pt",
        ).to(model.device)
        words = batch["attention_mask"] * (1 - batch.pop("special_tokens_mask"))  # [CLS] and [SEP] describe no class
        if backbone.encoder is not None:
            tokens = backbone.encoder(**batch).last_hidden_state
        else:
            tokens = backbone.get_input_embeddings()(batch["input_ids"])
        rows.append(masked_mean(tokens.float(), words))
    model.train(was_training)
    return torch.cat(rows)


@torch.no_grad()
def describe_classes(
    model: LabelAttnForSequenceClassification, tokenizer, descriptions: dict[str, str], trained: set[str]
) -> int:
    """Store every class's description vector in the model (its name where `descriptions` has none) and which
    classes have training rows (`trained`, the others' residuals count as 0); the number of described classes."""
    head = model.labelattn.label_attention
    if head is None or head.descriptions is None:
        raise LabelDescriptionError(
            "Label descriptions compute label-attention queries: build the model with pooling='label_attention' "
            "and label_description_size set (labelattn train --label-descriptions does)."
        )
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    vectors = description_vectors(model, tokenizer, [descriptions.get(name) or name for name in names])
    head.descriptions.vectors.copy_(vectors)
    head.descriptions.has_rows.copy_(torch.tensor([name in trained for name in names]))
    return sum(name in descriptions for name in names)
