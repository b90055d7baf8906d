"""Label-attention queries that start from the classes' descriptions (`labelattn train --label-descriptions`).

A class's query is what its attention looks for: `q_c = W_Q e_c + b_Q`, compared with every token's key
`W_K x_t + b_K`. Started at random, a class with few training rows has little to learn it from. Started from its
description ("Malignant neoplasm of breast", or its name where it has none), the query is the key of the
description's mean token vector (as the backbone reads it), up to the bias and a scale: the class looks, from the
first step, for tokens whose keys resemble those of its own description. Solving `W_Q e_c = k_c − b_Q` for the
label embedding `e_c` is the only thing here the model does not do itself.
"""

import torch

from modeling_labelattn import LabelAttnForSequenceClassification, masked_mean


@torch.no_grad()
def description_vectors(model: LabelAttnForSequenceClassification, tokenizer, texts: list[str], batch_size: int = 64):
    """The mean of the token vectors the label-attention keys read over each text's own tokens (no special
    tokens), one row per text `(len(texts), d)`."""
    was_training = model.training
    model.eval()  # no dropout on the vectors a query is made from
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
        tokens = model.labelattn(**batch).last_hidden_state
        rows.append(masked_mean(tokens, words))
    model.train(was_training)
    return torch.cat(rows)


@torch.no_grad()
def start_queries_from_descriptions(
    model: LabelAttnForSequenceClassification, tokenizer, descriptions: dict[str, str]
) -> int:
    """Set every class's label embedding so that its query points along the key of its description's mean token
    vector, both less the query bias (the class name where `descriptions` has none), at the length of the random
    start; the number of classes that had a description."""
    head = model.labelattn.label_attention
    if head is None:
        raise ValueError("Label descriptions start label-attention queries; this model pools with 'mean'.")
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    texts = [descriptions.get(name) or name for name in names]
    keys = head.key(description_vectors(model, tokenizer, texts))  # (num_labels, d)
    weight, bias = head.query.weight.float(), head.query.bias.float()
    # q = W e + b  =>  e = W⁻¹ (k − b); least squares, in case W is singular.
    embeddings = torch.linalg.lstsq(weight, (keys.float() - bias).T).solution.T
    # At the scale of the random start: W⁻¹ can make some rows hundreds of times longer, and an over-sharp start
    # does not train (measured on trec-fine: 0.12 accuracy unscaled). Each query keeps its direction.
    scale = model.config.initializer_range * embeddings.shape[1] ** 0.5
    embeddings = embeddings / embeddings.norm(dim=1, keepdim=True).clamp_min(1e-12) * scale
    head.label_embeddings.copy_(embeddings.to(head.label_embeddings.dtype))
    return sum(name in descriptions for name in names)
