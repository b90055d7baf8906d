"""Label-attention queries that start from the classes' descriptions (`labelattn train --label-descriptions`).

A class's query is what its attention looks for: `q_c = W_Q e_c + b_Q`, compared with every token's key
`W_K x_t + b_K`. Started at random, a class with few training rows has little to learn it from. Started from its
description ("Malignant neoplasm of breast", or its name where it has none), the query is the key of the
description's mean token vector (as the backbone reads it), up to the bias and a scale: the class looks, from the
first step, for tokens whose keys resemble those of its own description. Solving `W_Q e_c = k_c − b_Q` for the
label embedding `e_c` is the only thing here the model does not do itself.

A class that a label file describes but no training row shows has nothing to learn its query from: after every
epoch it is made again from its description, with the keys the model has learnt by then
(`fit_untrained_queries`), so that such a class is still predicted where a text reads like its description.
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
    embeddings = described_embeddings(model, tokenizer, [descriptions.get(name) or name for name in names])
    # At the scale of the random start: W⁻¹ can make some rows hundreds of times longer, and an over-sharp start
    # does not train (measured on trec-fine: 0.12 accuracy unscaled). Each query keeps its direction.
    scale = model.config.initializer_range * embeddings.shape[1] ** 0.5
    embeddings = embeddings / embeddings.norm(dim=1, keepdim=True).clamp_min(1e-12) * scale
    head.label_embeddings.copy_(embeddings.to(head.label_embeddings.dtype))
    return sum(name in descriptions for name in names)


@torch.no_grad()
def fit_untrained_queries(
    model: LabelAttnForSequenceClassification, tokenizer, descriptions: dict[str, str], names: list[str]
) -> None:
    """Make the queries of the classes `names` (which have no training rows) from their descriptions with the
    model's present weights, each as long as the trained classes' queries are on average (less the query bias):
    a longer query would attend more sharply, and win more often, than the classes the data taught."""
    head = model.labelattn.label_attention
    untrained = torch.tensor([model.config.label2id[name] for name in names], device=head.label_embeddings.device)
    embeddings = described_embeddings(model, tokenizer, [descriptions.get(name) or name for name in names])
    trained = torch.ones(model.config.num_labels, dtype=torch.bool, device=untrained.device)
    trained[untrained] = False
    weight = head.query.weight.float()
    length = (head.label_embeddings[trained].float() @ weight.T).norm(dim=1).mean()
    embeddings = embeddings * (length / (embeddings @ weight.T).norm(dim=1, keepdim=True).clamp_min(1e-12))
    head.label_embeddings[untrained] = embeddings.to(head.label_embeddings.dtype)


@torch.no_grad()
def described_embeddings(model: LabelAttnForSequenceClassification, tokenizer, texts: list[str]) -> torch.Tensor:
    """The label embeddings `e (len(texts), d)` whose queries `W_Q e + b_Q` are the keys of the texts' mean token
    vectors (least squares, in case `W_Q` is singular), in float32."""
    head = model.labelattn.label_attention
    keys = head.key(description_vectors(model, tokenizer, texts)).float()
    return torch.linalg.lstsq(head.query.weight.float(), (keys - head.query.bias.float()).T).solution.T
