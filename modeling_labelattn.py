"""labelattn: a label-attention head on a bag of token embeddings or on a pretrained Transformers encoder.

Instead of pooling the tokens into one sentence vector shared by all classes, every class owns a learned
query that attends over the tokens (queries = label embeddings, keys/values = token vectors), which gives one
sentence vector per class; a scorer turns it into the class's logit (`config.scorer`: by default a linear scorer
and a bias per class). The attention weights are a by-product of the forward pass and are returned as
`label_attentions`.

This file is remote code: it is copied into every saved model folder and Hub repository, so it imports
nothing but torch, transformers and `configuration_labelattn` (relatively when loaded as remote code).
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoModel, PretrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.utils import ModelOutput, logging

try:  # as remote code, a module of a package under `transformers_modules`
    from .configuration_labelattn import LabelAttnConfig, LabelAttnConfigError
except ImportError:  # as an installed top-level module
    from configuration_labelattn import LabelAttnConfig, LabelAttnConfigError

logger = logging.get_logger(__name__)


class LabelAttnInputError(ValueError):
    """The inputs given to a labelattn model cannot be classified."""


@dataclass
class LabelAttnModelOutput(ModelOutput):
    r"""
    Output of [`LabelAttnModel`].

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch, seq_len, hidden_size)`):
            The token vectors the head reads (the backbone's output).
        pooler_output (`torch.FloatTensor`, *optional*):
            One vector per class, `(batch, num_labels, hidden_size)`, for label attention; the masked mean of the
            token vectors, `(batch, hidden_size)`, for mean pooling. A text of only padding gets vectors of 0 with
            both poolings, so its logits are the classifier's biases alone (equal for every class with label
            attention's shared scorer).
            None when a `readout` was passed: then the class vectors are never formed.
        hidden_states (`tuple(torch.FloatTensor)`, *optional*):
            The encoder's hidden states, one `(batch, seq_len, hidden_size)` per layer and the embeddings, when
            `output_hidden_states=True` and the backbone is an encoder.
        attentions (`tuple(torch.FloatTensor)`, *optional*):
            The encoder's self-attention weights, one `(batch, encoder_heads, seq_len, seq_len)` per layer, when
            `output_attentions=True` and the backbone is an encoder.
        label_attentions (`torch.FloatTensor` of shape `(batch, num_attention_heads, num_labels, seq_len)`, *optional*):
            The label-attention weights, when `output_attentions=True` and `pooling="label_attention"`: the very
            tensor that weighted the values in this forward pass. Each row sums to 1 over the real tokens and is
            exactly 0 on padding (a text of only padding gets a row of zeros).
        class_scores (`torch.FloatTensor` of shape `(batch, num_labels)`, *optional*):
            `readout(class vector)` for every class, when a `readout` layer was passed (label attention only).
        label_contributions (`torch.FloatTensor` of shape `(batch, num_labels, seq_len)`, *optional*):
            When `output_label_contributions=True` (with a `readout`): each position's exact term in each class's
            score, `Σ_h A[c, h, t] (s_t,h − r_h)` with the token value `s_t,h = (u_h W_V,h)·v_t` measured from what
            the average class reads, `r_h = Σ_t mean_c A[c, h, t] s_t,h` (see `LabelAttention._contributions` for
            why), where `u_h` is head h's slice of `W_Oᵀ w` (the readout folded into the output map; of `w` itself
            without the label projections) and `v_t` the vector the values read at position t: on the embedding
            backbone the token's own embedding (the token context steers only the weights), on the encoder
            backbone the final layer's output at t, which has already mixed in the text (the terms are per
            final-layer position). Exactly 0 on padding, and everywhere for a text of only padding. `class_scores`
            is computed from them in the same call: `class_scores = label_contributions.sum(-1) +
            label_contribution_bias`.
        label_contribution_bias (`torch.FloatTensor` of shape `(batch, num_labels)`, *optional*):
            With `label_contributions`: the part of each score that no position carries, `class_scores −
            label_contributions.sum(-1)`. It is `w·b_O + Σ_h u_h·b_V,h + b_w + Σ_h r_h` (the value bias and the
            reference pass the weighting unchanged, since the weights sum to 1 over the real tokens). With the shared
            scorer (`config.scorer="shared"`) it is the same for every class up to float rounding, so it cancels in
            every difference of classes and in the softmax. With a scorer or a bias per class (`"per_class"`, the
            default, or `"class_bias"`) `w`, `u_h` and `b_w` are each class's own, and so is this part: the class's
            prior, which no token carries. A text of only padding has `b_w` (the readout's bias) alone.
    """

    last_hidden_state: torch.FloatTensor | None = None
    pooler_output: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    label_attentions: torch.FloatTensor | None = None
    class_scores: torch.FloatTensor | None = None
    label_contributions: torch.FloatTensor | None = None
    label_contribution_bias: torch.FloatTensor | None = None


@dataclass
class LabelAttnSequenceClassifierOutput(ModelOutput):
    r"""
    Output of [`LabelAttnForSequenceClassification`].

    Args:
        loss (`torch.FloatTensor` of shape `()`, *optional*):
            Cross-entropy (single-label) or binary cross-entropy (multi-label), when `labels` are given.
        logits (`torch.FloatTensor` of shape `(batch, num_labels)`):
            One score per class, before softmax (single-label) or sigmoid (multi-label); divided by
            `config.temperature` when it is set (the loss is computed on these scaled logits).
        hidden_states, attentions, label_attentions:
            As in [`LabelAttnModelOutput`].
        label_contributions (`torch.FloatTensor` of shape `(batch, num_labels, seq_len)`, *optional*):
            When `output_label_contributions=True`: each position's exact term in each class's logit, 0 on padding,
            and the logits of the same call are computed from them: `logits = label_contributions.sum(-1) +
            label_contribution_bias` (both divided by `config.temperature` when it is set, so the sum still holds).
            Label attention: as in [`LabelAttnModelOutput`], with the classifier as the readout. Mean pooling:
            `W_c·x_t / n` for the `n` real tokens, `x_t` the vectors it averages (with the token context, each
            position's convolved vector, which also holds its neighbours').
        label_contribution_bias (`torch.FloatTensor` of shape `(batch, num_labels)`, *optional*):
            With `label_contributions`: the part of each logit that no position carries. Label attention: the same
            for every class with the shared scorer, each class's prior with a scorer or bias per class (see
            [`LabelAttnModelOutput`]); mean pooling: the classifier's
            bias `b_c`.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    label_attentions: torch.FloatTensor | None = None
    label_contributions: torch.FloatTensor | None = None
    label_contribution_bias: torch.FloatTensor | None = None


class LabelDescriptions(nn.Module):
    """What each class is given from its description (`config.label_description_size`): `map(v̂_c) + r_c`.

    `v_c (num_labels, label_description_size)` is a buffer, saved with the weights: one vector per class for its
    description (`labelattn train --label-descriptions` stores the mean of the backbone's token vectors over it), read
    at unit length `v̂_c`. Each map is linear, shared by every class and trained with them; `r_c` is the class's free
    parameter, its residual beside the map, which only a class with training rows has (`has_rows[c]`; for the others
    it counts as 0). So a class no training row shows still gets, through maps that training taught:
    - its label embedding `e_c = M v̂_c + r_c`, and so its query (`forward`, `LabelAttention.label_queries`);
    - with a scorer per class, its code `C v̂_c + r_c` (`code_map`) and with a bias per class its bias `β·v̂_c + r_c`
      (`bias_map`): the scorer of `LabelScorer`, which decides what the tokens the class attends to are worth.
    In training, each class's residuals are left out with probability `config.label_residual_dropout` (a row at a
    time, not rescaled), so that the maps cannot leave their work to the residuals. Outside training, a class without
    rows gets `config.untrained_class_offset` on its logit (`offsets`): the maps read the descriptions they were
    trained on better than a new one, and without it such a class is almost never ranked first.
    """

    def __init__(self, config: LabelAttnConfig, embedding_size: int):
        super().__init__()
        size, scorer = config.label_description_size, config.scorer
        self.vectors = nn.Buffer(torch.zeros(config.num_labels, size))
        self.has_rows = nn.Buffer(torch.ones(config.num_labels, dtype=torch.bool))
        self.map = nn.Linear(size, embedding_size)
        self.code_map = nn.Linear(size, config.scorer_rank or config.hidden_size) if scorer == "per_class" else None
        self.bias_map = nn.Linear(size, 1) if scorer in ("per_class", "class_bias") else None
        self.residual_dropout = config.label_residual_dropout
        self.untrained_offset = config.untrained_class_offset

    def described(self, described_map: nn.Linear, residuals: torch.Tensor) -> torch.Tensor:
        """`described_map(v̂_c) + r_c` for every class, `residuals (labels, n)` -> `(labels, n)`."""
        # v̂: (labels, size), in float32: in fp16 the floor of 1e-12 rounds to 0, and a class without a description
        # (a vector of 0) would get 0 / 0.
        vectors = nn.functional.normalize(self.vectors.float(), dim=-1)
        kept = self.has_rows.to(residuals.dtype)  # (labels,)
        if self.training and self.residual_dropout > 0:
            kept = kept * torch.bernoulli(torch.full_like(kept, 1 - self.residual_dropout))
        return described_map(vectors.to(described_map.weight.dtype)) + residuals * kept[:, None]

    def offsets(self, dtype: torch.dtype) -> torch.Tensor:
        """The offset on each class's logit, `(labels,)`: `config.untrained_class_offset` for a class without
        training rows, 0 for the others; 0 for every class in training, which the measured offsets were fitted
        without (calibrated stacking: a correction of a trained model's ranking, not something to learn around)."""
        offset = 0.0 if self.training else self.untrained_offset
        return (~self.has_rows).to(dtype) * offset

    def forward(self, residuals: torch.Tensor) -> torch.Tensor:
        """`residuals (labels, n)` -> label embeddings `(labels, n)` (`n`: `LabelAttention.label_embeddings`' width)."""
        return self.described(self.map, residuals)


class LabelScorer(nn.Module):
    """How a class vector `z_c` becomes its logit, `config.scorer` (label attention only):

    - `"shared"`: `w·z_c + b`, one `w` for every class (the first version's head);
    - `"class_bias"`: `w·z_c + b + b_c`, and a prior per class;
    - `"per_class"`: `w_c·z_c + b_c`, a scorer per class; `w_c = e_c P` with a basis `P (r, d)` shared by the classes
      and a code `e_c (r)` per class when `config.scorer_rank = r` is set, `w_c` free otherwise;
    - `"normed"`: `w·RMSNorm(z_c) + b`: each class vector divided by its root mean square first.

    Every linear choice is `e_c·(P z_c) + β_c`, with class codes `e_c (r)` (`class_weights`), a map `P (r, d)` shared by
    the classes (`readout_map`, None for the identity) and a bias `β_c` (`biases`): the head folds `P` into its values,
    so that it never forms the class vectors (see `LabelAttention`), and label contributions stay exact.
    """

    def __init__(self, config: LabelAttnConfig):
        super().__init__()
        self.kind = config.scorer
        labels, hidden = config.num_labels, config.hidden_size
        if self.kind == "per_class":
            rank = config.scorer_rank or hidden
            self.basis = nn.Parameter(torch.empty(rank, hidden)) if config.scorer_rank else None
            self.weight = nn.Parameter(torch.empty(labels, rank))  # e_c, or w_c itself at full rank
            self.bias = nn.Parameter(torch.empty(labels))
        else:  # the first version's nn.Linear(hidden, 1): its checkpoints' names and shapes (and its random draws)
            self.basis = None
            linear = nn.Linear(hidden, 1)
            self.weight, self.bias = linear.weight, linear.bias
        self.class_bias = nn.Parameter(torch.empty(labels)) if self.kind == "class_bias" else None

    @property
    def is_linear(self) -> bool:
        """Whether the logit is linear in the class vector, so that the scorer folds into the head."""
        return self.kind != "normed"

    def class_weights(self, descriptions: LabelDescriptions | None = None) -> torch.Tensor:
        """The classes' codes `e_c`, `(num_labels, r)`, or `(1, 1)` when the classes share the scorer; computed from
        the classes' `descriptions` where the model has them (`LabelDescriptions`)."""
        if self.kind != "per_class":
            return self.weight.new_ones(1, 1)
        return self.weight if descriptions is None else descriptions.described(descriptions.code_map, self.weight)

    def readout_map(self) -> torch.Tensor | None:
        """`P (r, d)`, the map shared by the classes that their codes read; None for the identity."""
        return self.basis if self.kind == "per_class" else self.weight

    def biases(self, descriptions: LabelDescriptions | None = None) -> torch.Tensor:
        """`β_c`, `(num_labels,)`, or `(1,)` when the classes share it; computed from the classes' `descriptions`
        where the model has them, with their offsets for the classes without training rows."""
        own = self.bias if self.kind == "per_class" else self.class_bias  # (labels,) or None
        if own is not None and descriptions is not None:
            own = descriptions.described(descriptions.bias_map, own[:, None])[:, 0]
        biases = own if self.kind == "per_class" else self.bias if own is None else self.bias + own
        return biases if descriptions is None else biases + descriptions.offsets(biases.dtype)

    def forward(self, vectors: torch.Tensor, descriptions: LabelDescriptions | None = None) -> torch.Tensor:
        """`(batch, num_labels, hidden)` class vectors -> `(batch, num_labels)` logits, by definition."""
        if self.kind == "normed":
            vectors = nn.functional.rms_norm(vectors, vectors.shape[-1:], eps=1e-6)
        projected = vectors if self.readout_map() is None else nn.functional.linear(vectors, self.readout_map())
        return (projected * self.class_weights(descriptions)).sum(-1) + self.biases(descriptions)


class LabelAttention(nn.Module):
    """Multi-head cross-attention from one learned query per class to the tokens.

    `Q = L W_Q` (label embeddings `L (num_labels, d)`), `K = X W_K`, `V = X W_V`, value heads of size
    `d_h = d / n_h` and query/key heads of size `d_k` (`config.attention_key_size`, `d_h` by default),
    `softmax(Q K^T / sqrt(d_k))` with padding masked to -inf, heads concatenated and projected by `W_O`: one vector
    `z_c` per class, which a `LabelScorer` (`readout`) turns into a logit. Without `config.label_projections`, there
    is no `W_Q` and no `W_O` (LAAT's head): each class's query is its own parameter, `Q = L (num_labels, n_h d_k)`,
    and its vector is the heads' contexts concatenated.

    Three routes to the same numbers (up to float rounding), chosen in `forward` by what is asked:
    - the reference (`_weights`): the weights formed as a tensor (returned with `output_attentions`, dropped out in
      training with `attention_dropout`), the class vectors formed from them and scored by the scorer's definition;
    - the fused kernel (`_fused`): `scaled_dot_product_attention` weighs the values without storing the weights: the
      class vectors, or, for a linear scorer, the logits with the scorer folded into the values (`_folded_values`):
      `e_c·P (W_O c + b_O)` is linear in the heads' contexts `c`, so each token gets `m` numbers per head (`m = 1`
      for a shared scorer, `r` for a rank-`r` one) and no class vector is formed;
    - the blocked route (`_contributions`): the weights one block of classes at a time, and each token's exact
      term in every class's logit, the logits computed as their sum.
    """

    # A block of classes of the blocked route holds at most this many weights.
    block_elements = 2**19

    def __init__(self, config: LabelAttnConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads  # of the values
        self.key_size = config.attention_key_size or self.head_size  # of the queries and keys
        query_size = self.num_heads * self.key_size
        # Each class's free embedding (its query itself without the projections), or with descriptions its residual
        # beside the shared map (`label_queries`).
        embedding_size = config.hidden_size if config.label_projections else query_size
        self.label_embeddings = nn.Parameter(torch.empty(config.num_labels, embedding_size))
        self.descriptions = LabelDescriptions(config, embedding_size) if config.label_description_size else None
        # The two maps shared by the classes, or None (`config.label_projections`).
        self.query = nn.Linear(config.hidden_size, query_size) if config.label_projections else None
        self.key = nn.Linear(config.hidden_size, query_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.output = nn.Linear(config.hidden_size, config.hidden_size) if config.label_projections else None
        # Its output is the weight tensor that multiplies the values: a forward hook here sees and can change it.
        self.attention_dropout = nn.Dropout(config.attention_dropout)

    def label_queries(self) -> torch.Tensor:
        """Every class's query `(labels, heads × d_k)`: `W_Q e_c + b_Q` (`e_c` itself without the projections), with
        `e_c` the class's free embedding, or, where the config has descriptions, the embedding its description gives
        (`LabelDescriptions`)."""
        embeddings = self.label_embeddings
        if self.descriptions is not None:
            embeddings = self.descriptions(embeddings)
        return embeddings if self.query is None else self.query(embeddings)

    def _class_vectors(self, contexts: torch.Tensor) -> torch.Tensor:
        """The heads' contexts `(batch, heads, labels, d_h)` -> class vectors `(batch, labels, hidden)`: concatenated,
        and projected by `W_O` where the config has the projections."""
        vectors = contexts.transpose(1, 2).flatten(-2)
        return vectors if self.output is None else self.output(vectors)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """`(..., n, heads × size)` -> `(..., heads, n, size)` (queries and keys, or values)."""
        return x.unflatten(-1, (self.num_heads, -1)).transpose(-2, -3)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor,
        output_attentions: bool = False,
        readout: LabelScorer | None = None,
        value_states: torch.Tensor | None = None,
        output_contributions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """
        Args:
            hidden_states: token vectors `(batch, seq_len, hidden)`, which the keys read (and the values, unless
                `value_states` is given).
            attention_mask: `(batch, seq_len)`, 1 for real tokens and 0 for padding.
            output_attentions: form the weights `(batch, heads, num_labels, seq_len)`, weigh the values with them
                and return them (also done in training when `attention_dropout` is set, to drop weights out).
            readout: the scorer of the class vectors; when given, the logits are returned in place of the vectors.
            value_states: token vectors `(batch, seq_len, hidden)` that the values read, when they differ from the
                keys' (the embedding backbone's token context steers where a class looks, and the class vector is
                made of the tokens' own vectors, so that a weight is exactly one token's share of it).
            output_contributions: with a linear `readout`, also return each token's term in every class's logit, and
                compute the logits as their sum (see `_contributions`).

        Returns:
            class vectors `(batch, num_labels, hidden)`, or with `readout` the logits `(batch, num_labels)`; the
            weights, or None when they were not formed; the contributions `(batch, num_labels, seq_len)`, or None.
        """
        queries = self.label_queries()
        is_token = attention_mask.bool()
        # A text of only padding would make every score -inf and the softmax NaN; let such a row see all
        # positions (finite values and gradients), then zero its weights and its class vectors (W_O's bias
        # included), as mean pooling gives such a text the vector 0: its logits are the scorer's biases.
        is_empty = ~is_token.any(dim=-1)
        visible = is_token | is_empty[:, None]
        tokens = (hidden_states, hidden_states if value_states is None else value_states)  # read by keys, values
        forms_weights = output_attentions or (self.training and self.attention_dropout.p > 0)
        weights = contributions = vectors = scores = None  # scores: the logits before the scorer's biases
        if forms_weights:
            weights = self._weights(hidden_states, queries, is_token, visible)
        if readout is not None and readout.is_linear and (output_contributions or not forms_weights):
            scores, contributions = self._blocked(
                *tokens, queries, is_token, visible, readout, weights, output_contributions
            )
        elif forms_weights:
            values = self._split_heads(self.value(tokens[1]))  # (batch, heads, seq, d_h)
            vectors = self._class_vectors(weights @ values)  # (batch, labels, hidden)
        else:
            values = self._split_heads(self.value(tokens[1]))
            vectors = self._class_vectors(self._fused(hidden_states, values, queries, visible))
        # No test on the host (`if is_empty.any()`): the forward pass stays free of data-dependent branches, so that
        # torch.export traces it; the fill costs one pass over the output.
        if vectors is not None:
            vectors = vectors.masked_fill(is_empty[:, None, None], 0.0)  # (batch, labels, hidden)
            return (vectors if readout is None else readout(vectors, self.descriptions)), weights, contributions
        return scores.masked_fill(is_empty[:, None], 0.0) + readout.biases(self.descriptions), weights, contributions

    def _weights(
        self, hidden_states: torch.Tensor, queries: torch.Tensor, is_token: torch.Tensor, visible: torch.Tensor
    ) -> torch.Tensor:
        """The weights `(batch, heads, labels, seq)`, 0 on padding, as they leave `attention_dropout`."""
        keys = self._split_heads(self.key(hidden_states))  # (batch, heads, seq, d_k)
        scores = self._split_heads(queries) @ keys.transpose(-1, -2) / math.sqrt(self.key_size)
        weights = torch.softmax(scores.masked_fill(~visible[:, None, None, :], float("-inf")), dim=-1)
        return self.attention_dropout(weights.masked_fill(~is_token[:, None, None, :], 0.0))

    def _folded_values(
        self, value_states: torch.Tensor, readout: LabelScorer
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A linear scorer folded into the values: `(token values (batch, heads, seq, m), class codes (labels or 1,
        heads, m), offset (labels or 1,))` with `logit_c = Σ_h codes_c,h·(Σ_j a_c,h,j values_h,j) + offset_c + β_c`.

        Exact: `e_c·P (W_O c + b_O) = Σ_h e_c·(M_h c_h) + e_c·P b_O` with `M = P W_O` cut into one `(r, d_h)` slice per
        head, and `M_h Σ_j a_j V_h,j = Σ_j a_j (M_h V_h,j)`. When `r ≤ d_h` each token gets `M_h V_h,j`, `r` numbers
        per head (`M_h W_V,h` folded into one map); otherwise (a full-rank scorer per class) the values stay `V_h,j`
        and the codes become `(e_c M)_h`. Without the projections `W_O` is the identity with no bias: `M = P`, or
        nothing to fold at all for a full scorer per class, whose codes are then cut per head as they are.
        """
        codes, basis = readout.class_weights(self.descriptions), readout.readout_map()  # (labels or 1, r), (r, d)|None
        out_map, out_bias = basis, None  # M: (r, hidden) or None for the identity; P b_O
        if self.output is not None:
            out_map = self.output.weight if basis is None else basis @ self.output.weight
            out_bias = self.output.bias if basis is None else basis @ self.output.bias
        offset = codes.new_zeros(codes.shape[0]) if out_bias is None else codes @ out_bias  # e_c·P b_O
        heads, head_size = self.num_heads, self.head_size
        if out_map is not None and out_map.shape[0] <= head_size:
            head_maps = out_map.view(-1, heads, head_size)  # M_h
            value_maps = torch.einsum("rhk,hkd->hrd", head_maps, self.value.weight.view(heads, head_size, -1))
            value_biases = torch.einsum("rhk,hk->hr", head_maps, self.value.bias.view(heads, head_size))
            values = nn.functional.linear(value_states, value_maps.flatten(0, 1), value_biases.flatten())
            return self._split_heads(values), codes[:, None, :].expand(-1, heads, -1), offset
        values = self._split_heads(self.value(value_states))  # (batch, heads, seq, d_h)
        head_codes = codes if out_map is None else codes @ out_map
        return values, head_codes.view(-1, heads, head_size), offset

    def _fused(
        self, hidden_states: torch.Tensor, values: torch.Tensor, queries: torch.Tensor, visible: torch.Tensor
    ) -> torch.Tensor:
        """The class contexts `(batch, heads, labels, d_h)` of `values (batch, heads, seq, d_h)`, weighed by the fused
        kernel, which never stores the weights."""
        keys = self._split_heads(self.key(hidden_states))  # (batch, heads, seq, d_k)
        return nn.functional.scaled_dot_product_attention(
            self._split_heads(queries).expand(hidden_states.shape[0], -1, -1, -1),
            keys,
            values,
            attn_mask=visible[:, None, None, :],
            scale=1 / math.sqrt(self.key_size),
        )

    def _blocked(
        self,
        hidden_states: torch.Tensor,
        value_states: torch.Tensor,
        queries: torch.Tensor,
        is_token: torch.Tensor,
        visible: torch.Tensor,
        readout: LabelScorer,
        weights: torch.Tensor | None,
        output_contributions: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The logits of a linear scorer before its biases, `(batch, labels)`, from the weights of one block of
        classes at a time (or from `weights`, when they were formed); with `output_contributions`, also each token's
        term in every class's logit, `(batch, labels, seq)`, 0 on padding, and the logits computed as their sum.

        Logits: `Σ_h Σ_j a_c,h,j s_c,h,j + offset_c`, with each token's value to each class `s_c,h,j =
        codes_c,h·values_h,j` (see `_folded_values`). The blocks hold every token of the batch side by side, `(heads,
        block, seq, batch)`: the scores and the values are then two products of a block's codes with every token at
        once, instead of a small product per text whose inner size is its length: on a CPU at 1,918 classes, 2.3×
        faster prediction and a 1.3× faster training step (docs/model.md).

        Terms: since a head's weights sum to 1 over the real tokens, `Σ_j a_c,h,j s_c,h,j = Σ_j a_c,h,j (s_c,h,j −
        r_c,h) + r_c,h` for any `r_c,h`. The terms are `Σ_h a_c,h,j (s_c,h,j − r_c,h)`, each token's value measured
        from what the class's scorer finds where the average class looks, `r_c,h = Σ_j ā_h,j s_c,h,j` (`ā` the
        weights averaged over the classes): adding a constant to every value of a head adds it to the logit whatever
        the weights, so only a token's value against what the classes read says what a class found in it. Measured
        from 0 instead, a token that lowers every class's value, and its own class's least, would count against that
        class. With a shared scorer the part no token carries is the average class's logit, the same for every class.
        A scorer per class is measured from the text's mean token as that class values it (`ā` uniform over the real
        tokens): the average class looks at a text's rare words (its keyword), so measured from there a class's own
        keyword would carry almost nothing (docs/model.md). The blocks are computed twice (the average weights
        first, then the terms): the extra memory is the output.
        """
        values, codes, offset = self._folded_values(value_states, readout)  # (b, h, seq, m), (labels or 1, h, m)
        batch_size, heads, seq_len, width = values.shape
        labels = queries.shape[0]
        codes = codes.expand(labels, -1, -1).transpose(0, 1)  # (heads, labels, m)
        values = values.permute(1, 3, 2, 0).reshape(heads, width, seq_len * batch_size)  # every token, (seq, batch)
        if weights is not None:  # one block: the returned weights are the ones used
            size, blocks = labels, lambda: [(0, weights.permute(1, 2, 3, 0))]
        else:
            size, blocks = self._weight_blocks(hidden_states, queries, visible)
        code_blocks = codes.split(size, dim=1)  # one backward for all blocks (see `_weight_blocks`)

        def token_values(start: int, end: int) -> torch.Tensor:  # s_c,h,j: (heads, block, seq, batch)
            return (code_blocks[start // size] @ values).view(heads, end - start, seq_len, batch_size)

        if not output_contributions:
            scores = [(block * token_values(start, start + block.shape[1])).sum((0, 2)) for start, block in blocks()]
            return torch.cat(scores).T + offset, None
        real = is_token.T.to(values.dtype)  # (seq, batch): the softmax of a text of only padding sees its padding
        if readout.kind == "per_class":  # the text's mean token, as this class's scorer values it
            mean_weights = real / real.sum(0).clamp_min(1.0)  # (seq, batch)
        else:  # where the average class looks
            mean_weights = sum(block.sum(1, keepdim=True) for _, block in blocks()) / labels * real  # (h, 1, seq, b)
        read = (values.view(heads, width, seq_len, batch_size) * mean_weights).sum(2)  # the reference's: (h, m, b)
        reference = codes @ read  # r_c,h: (heads, labels, batch)
        contributions = values.new_empty(batch_size, labels, seq_len)
        for start, block in blocks():  # (heads, block, seq, batch), written block by block
            end = start + block.shape[1]
            shifted = token_values(start, end) - reference[:, start:end, None]
            contributions[:, start:end] = (block * real * shifted).sum(0).permute(2, 0, 1)
        return contributions.sum(-1) + reference.sum(0).T + offset, contributions

    def _weight_blocks(self, hidden_states: torch.Tensor, queries: torch.Tensor, visible: torch.Tensor):
        """The classes in a block, and a function giving, each time it is called, `(first class, weights (heads,
        block, seq, batch))` for one block of classes after another, the weights of `_weights` before padding is
        zeroed: the weights of thousands of classes are never held at once. (Traced or compiled, one block: its size
        would depend on the batch's shape.) The queries are split into blocks once, not sliced per block: a slice's
        backward fills a zero gradient the size of every class, a split's joins the blocks' in one pass (at 1,918
        classes a training step 1.06× faster on a CPU).

        With few classes (`labels × (d + 1 − d_k) < d × d_k`, by a multiply-add count), `W_K` folds into the queries
        and the heads compare them with the token vectors themselves, `[x, 1]`: `q_h·(W_K,h x + b_K,h) =
        (q_h W_K,h)·x + q_h·b_K,h`, and no `(seq, d) × (d, heads × d_k)` key projection is paid. (The softmax ignores
        `q_h·b_K,h`, constant over the tokens, but it is kept: every parameter then takes part, as DDP requires.)
        """
        batch_size, seq_len, hidden = hidden_states.shape
        heads, key_size, labels = self.num_heads, self.key_size, queries.shape[0]
        head_queries = self._split_heads(queries) / math.sqrt(key_size)  # (heads, labels, d_k)
        if labels * (hidden + 1 - key_size) < hidden * key_size:
            key_maps = self.key.weight.view(heads, key_size, hidden)  # W_K,h
            key_biases = self.key.bias.view(heads, 1, key_size)
            head_queries = torch.cat([head_queries @ key_maps, (head_queries * key_biases).sum(-1, keepdim=True)], -1)
            tokens = torch.cat([hidden_states, hidden_states.new_ones(batch_size, seq_len, 1)], dim=-1)
            keys = tokens.permute(2, 1, 0).reshape(1, hidden + 1, -1).expand(heads, -1, -1)  # (heads, d + 1, tokens)
        else:
            keys = self.key(hidden_states).view(batch_size, seq_len, heads, key_size).permute(2, 3, 1, 0)
            keys = keys.reshape(heads, key_size, -1)  # (heads, d_k, every token of the batch: (seq, batch))
        padding = torch.zeros(1, 1, seq_len * batch_size, device=keys.device, dtype=keys.dtype)
        padding = padding.masked_fill(~visible.T.reshape(1, 1, -1), float("-inf"))
        size = labels if is_traced() else max(1, self.block_elements // (heads * batch_size * seq_len))
        query_blocks = head_queries.split(size, dim=1)

        def blocks():
            for index, block_queries in enumerate(query_blocks):
                scores = torch.baddbmm(padding, block_queries, keys)
                yield index * size, torch.softmax(scores.view(heads, -1, seq_len, batch_size), dim=2)

        return size, blocks


class TokenContext(nn.Conv1d):
    """A residual convolution over neighbouring token vectors, `x + GELU(conv(x))`, for the embedding backbone.

    Label attention's keys read these vectors and its values the tokens' own: the context decides where a class looks
    ("many" after "how"), and a class vector is still a weighted sum of single tokens' vectors, so that its weights
    keep saying which words it is made of. Mean pooling averages these vectors. Padding is zeroed before the
    convolution, so that a text's vectors do not depend on how much padding its batch has (nor on what vectors
    `inputs_embeds` put there).
    """

    def __init__(self, config: LabelAttnConfig):
        width = config.token_context_width
        super().__init__(config.hidden_size, config.hidden_size, width, padding=width // 2)

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """`tokens (batch, seq_len, hidden)`, `attention_mask (batch, seq_len)` -> `(batch, seq_len, hidden)`."""
        tokens = tokens * attention_mask.unsqueeze(-1).to(tokens.dtype)
        context = super().forward(tokens.transpose(1, 2)).transpose(1, 2)
        return tokens + nn.functional.gelu(context)


def masked_mean(hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the real tokens' vectors, `(batch, seq, hidden) -> (batch, hidden)`; 0 for a text of only padding."""
    mask = attention_mask.to(hidden_states.dtype).unsqueeze(-1)
    return (hidden_states * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def mean_contributions(hidden_states: torch.Tensor, attention_mask: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Each position's term `W_c·x_t / n` in `W x̄` of mean pooling over the `n` real tokens, `weight (labels, hidden)`:
    `(batch, seq, hidden) -> (batch, labels, seq)`, 0 on padding and for a text of only padding."""
    mask = attention_mask.to(hidden_states.dtype)
    shares = mask / mask.sum(dim=-1, keepdim=True).clamp(min=1.0)  # 1/n on the real tokens
    return nn.functional.linear(hidden_states, weight).transpose(1, 2) * shares[:, None, :]


def is_traced() -> bool:
    """Whether the forward pass is being traced or compiled (torch.export, torch.compile, torch.jit.trace), where a
    Python branch on a tensor's values cannot run: the checks that read values are then skipped."""
    return torch.compiler.is_compiling() or torch.compiler.is_exporting() or torch.jit.is_tracing()


def without_pooler(encoder: PreTrainedModel) -> PreTrainedModel:
    """Drop an encoder's [CLS] pooler: it is never read, and DDP rejects parameters that get no gradient."""
    if getattr(encoder, "pooler", None) is not None:
        encoder.pooler = None
    return encoder


class LabelAttnPreTrainedModel(PreTrainedModel):
    config_class = LabelAttnConfig
    base_model_prefix = "labelattn"
    main_input_name = "input_ids"
    _supports_sdpa = True
    _supports_attention_backend = True
    # The loss is the batch's mean whatever `forward`'s **kwargs hold: Trainer must divide it by the accumulated
    # steps itself rather than pass `num_items_in_batch` (which its check of **kwargs would otherwise assume).
    accepts_loss_kwargs = False

    @property
    def supports_gradient_checkpointing(self) -> bool:
        """Activation checkpointing recomputes an encoder's layers in the backward pass instead of keeping their
        activations: `model.gradient_checkpointing_enable()` reaches the encoder's layers. The embedding backbone has
        no layers to recompute."""
        return self.config.backbone == "encoder"

    def __init__(self, config: LabelAttnConfig, *inputs, **kwargs):
        super().__init__(config, *inputs, **kwargs)
        # `register_for_auto_class` keeps one Auto class per model class; a saved folder must load through
        # AutoConfig, AutoModel and AutoModelForSequenceClassification alike, so the map is written in full.
        module = self.__class__.__module__.rsplit(".", 1)[-1]
        config.auto_map = {
            "AutoConfig": f"{module.replace('modeling_', 'configuration_')}.LabelAttnConfig",
            "AutoModel": f"{module}.LabelAttnModel",
            "AutoModelForSequenceClassification": f"{module}.LabelAttnForSequenceClassification",
        }

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`, with a clear error when the labels asked for (`num_labels`,
        `id2label` or a `config`) differ in number from the checkpoint's, instead of a size-mismatch report."""
        asked = kwargs.get("config")
        # Not isinstance(LabelAttnConfig): as remote code, the config class may come from another module copy.
        asked = asked.num_labels if isinstance(asked, PretrainedConfig) else kwargs.get("num_labels")
        if kwargs.get("id2label"):
            asked = len(kwargs["id2label"])
        if asked is not None and not kwargs.get("ignore_mismatched_sizes", False):
            hub_kwargs = ("cache_dir", "revision", "token", "local_files_only", "subfolder", "force_download")
            saved = LabelAttnConfig.from_pretrained(
                pretrained_model_name_or_path, **{k: kwargs[k] for k in hub_kwargs if k in kwargs}
            )
            if saved.num_labels != asked:
                raise LabelAttnConfigError(
                    f"The checkpoint {pretrained_model_name_or_path} was trained for {saved.num_labels} labels "
                    f"{list(saved.id2label.values())}, but {asked} were asked for. Load it without num_labels/id2label "
                    "to use its own labels, or pass ignore_mismatched_sizes=True to start a new, untrained head."
                )
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, LabelAttention):
            if module.descriptions is None:
                init.normal_(module.label_embeddings, mean=0.0, std=self.config.initializer_range)
            else:  # the shared map starts the queries; the residuals start at 0 and learn what it misses
                init.zeros_(module.label_embeddings)
        elif isinstance(module, LabelScorer):
            if module.kind == "per_class" and self.config.label_description_size:  # residuals beside the code map
                init.zeros_(module.weight)
            else:
                init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            init.zeros_(module.bias)
            if module.class_bias is not None:
                init.zeros_(module.class_bias)
            if module.basis is not None:  # rows of unit length on average: w_c = e_c P has the scale of e_c
                init.normal_(module.basis, mean=0.0, std=module.basis.shape[-1] ** -0.5)
        elif isinstance(module, TokenContext):
            # LeCun scale: the context branch starts at the size of the token vectors it adds to, whatever the width.
            fan_in = module.in_channels * module.kernel_size[0]
            init.normal_(module.weight, mean=0.0, std=fan_in**-0.5)
            init.zeros_(module.bias)


class LabelAttnModel(LabelAttnPreTrainedModel):
    """Backbone and pooling: token ids to one vector per class (label attention) or one per text (mean)."""

    def __init__(self, config: LabelAttnConfig):
        super().__init__(config)
        if config.backbone == "encoder":
            self.encoder = without_pooler(AutoModel.from_config(config.encoder_config))
            self.embeddings = None
        else:
            self.encoder = None
            self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.token_context = (
            TokenContext(config) if config.backbone == "embedding" and config.token_context_width else None
        )
        self.dropout = nn.Dropout(config.embedding_dropout)
        self.label_attention = LabelAttention(config) if config.pooling == "label_attention" else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        if self.encoder is not None:
            return self.encoder.get_input_embeddings()
        return self.embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        if self.encoder is not None:
            self.encoder.set_input_embeddings(value)
        else:
            self.embeddings = value

    def _check_inputs(
        self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, inputs_embeds: torch.Tensor | None
    ) -> None:
        if (input_ids is None) == (inputs_embeds is None):
            raise LabelAttnInputError("Pass exactly one of input_ids or inputs_embeds.")
        expected_dims = 2 if input_ids is not None else 3
        given = input_ids if input_ids is not None else inputs_embeds
        if given.dim() != expected_dims:
            raise LabelAttnInputError(
                f"{'input_ids' if input_ids is not None else 'inputs_embeds'} must have {expected_dims} dimensions "
                f"(batch, seq_len{', hidden' if expected_dims == 3 else ''}), got shape {tuple(given.shape)}."
            )
        batch_and_length = given.shape[:2]
        if attention_mask is not None and attention_mask.shape != batch_and_length:
            raise LabelAttnInputError(
                f"attention_mask has shape {tuple(attention_mask.shape)} but the input has (batch, seq_len) = "
                f"{tuple(batch_and_length)}: pass the mask the tokenizer returned with these ids."
            )
        if batch_and_length[0] == 0:
            raise LabelAttnInputError("The batch is empty: pass at least one text.")
        if batch_and_length[1] > self.config.max_seq_length:
            raise LabelAttnInputError(
                f"The input has {batch_and_length[1]} tokens but the model reads at most {self.config.max_seq_length}: "
                f"tokenize with truncation=True, max_length={self.config.max_seq_length}."
            )
        if input_ids is None or is_traced():  # reading the ids' values is a data-dependent branch: eager mode only
            return
        lowest, highest = int(input_ids.min()), int(input_ids.max())
        if lowest < 0 or highest >= self.config.vocab_size:
            bad = lowest if lowest < 0 else highest
            raise LabelAttnInputError(
                f"Token id {bad} is outside the vocabulary of {self.config.vocab_size} ids [0, "
                f"{self.config.vocab_size}): was the text tokenized with the model's own tokenizer?"
            )

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        readout: "LabelScorer | None" = None,
        output_label_contributions: bool = False,
        **kwargs,
    ) -> LabelAttnModelOutput | tuple:
        """The backbone, then the head: checks of the inputs and of what is asked, the encoder or token table, the
        token context, label attention or mean pooling. One function on purpose (as transformers' `forward`s): the
        steps read top to bottom, and each branch is a choice of the config, not a second path.

        Args:
            input_ids: `(batch, seq_len)` token ids.
            attention_mask: `(batch, seq_len)`, 1 for real tokens and 0 for padding; all ones when omitted.
            token_type_ids: `(batch, seq_len)`, passed to an encoder that uses them; ignored by the embedding backbone.
            inputs_embeds: `(batch, seq_len, hidden)` token embeddings in place of `input_ids`.
            output_attentions: return `label_attentions` and the encoder's `attentions`. An encoder running with
                `sdpa` attention returns no weights, so the first call that asks for them switches the encoder to
                eager attention for good (the results are the same, computed a little more slowly).
            readout: a `LabelScorer` (label attention only): `class_scores` holds its score of every class vector,
                computed without forming the vectors where the scorer is linear (`pooler_output` is None then).
                [`LabelAttnForSequenceClassification`] passes its classifier.
            output_label_contributions: with a `readout`, return `label_contributions`, each position's exact term
                in each class score, and `label_contribution_bias`, the part no position carries; `class_scores` is
                then computed as their sum. Not in training with `attention_dropout`, whose rescaled weights no
                longer sum to 1.
        """
        self._check_inputs(input_ids, attention_mask, inputs_embeds)
        if readout is not None and self.label_attention is None:
            raise LabelAttnInputError("A readout scores class vectors, which only pooling='label_attention' forms.")
        if output_label_contributions and readout is None:
            raise LabelAttnInputError(
                "Label contributions are the terms of class scores, which the base model forms only with a scoring "
                "layer: call LabelAttnForSequenceClassification, or pass readout= (pooling='label_attention')."
            )
        if output_label_contributions and not readout.is_linear:
            raise LabelAttnInputError(
                f"Label contributions are exact only for a scorer linear in the class vectors, and scorer="
                f"'{self.config.scorer}' is not: it divides each class vector by its own root mean square, so no "
                "per-token terms sum to the logit. Explain this model with integrated_gradients, or train it with "
                "scorer='per_class' (or 'shared', 'class_bias'), whose label contributions are exact."
            )
        if output_label_contributions and self.training and self.label_attention.attention_dropout.p > 0:
            raise LabelAttnInputError(
                "Label contributions are exact only without attention dropout, which acts in training: call "
                "model.eval() first, or set attention_dropout=0."
            )
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        if attention_mask is None:
            attention_mask = torch.ones((input_ids if input_ids is not None else inputs_embeds).shape[:2])
            attention_mask = attention_mask.to(self.device, dtype=torch.long)

        attentions = hidden_states = None
        if self.encoder is not None:
            if output_attentions and self.encoder.config._attn_implementation != "eager":
                logger.info("Switching the encoder to eager attention, the only one that returns its weights.")
                self.encoder.set_attn_implementation("eager")
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=True,
            )
            tokens = encoder_outputs.last_hidden_state
            attentions, hidden_states = encoder_outputs.attentions, encoder_outputs.hidden_states
        else:
            tokens = self.embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        tokens = own_tokens = self.dropout(tokens)
        if self.token_context is not None:
            tokens = self.token_context(tokens, attention_mask)

        label_attentions = class_scores = contributions = contribution_bias = None
        if self.label_attention is not None:
            values_from = own_tokens if self.token_context is not None else None
            pooled, weights, contributions = self.label_attention(
                tokens, attention_mask, output_attentions, readout, values_from, output_label_contributions
            )
            label_attentions = weights if output_attentions else None
            if readout is not None:
                pooled, class_scores = None, pooled
            if contributions is not None:
                contribution_bias = class_scores - contributions.sum(-1)
        else:
            pooled = masked_mean(tokens, attention_mask)

        output = LabelAttnModelOutput(
            last_hidden_state=tokens,
            pooler_output=pooled,
            hidden_states=hidden_states,
            attentions=attentions,
            label_attentions=label_attentions,
            class_scores=class_scores,
            label_contributions=contributions,
            label_contribution_bias=contribution_bias,
        )
        return output if return_dict else output.to_tuple()


class LabelAttnForSequenceClassification(LabelAttnPreTrainedModel):
    """[`LabelAttnModel`] and a scoring layer: the `LabelScorer` of `config.scorer` on the class vectors of label
    attention, or `W (d, num_labels)` on the mean-pooled vector."""

    def __init__(self, config: LabelAttnConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.labelattn = LabelAttnModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        if config.pooling == "label_attention":
            self.classifier = LabelScorer(config)
        else:
            self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @classmethod
    def from_encoder(
        cls, encoder_name_or_path: str, encoder_layers: int | None = None, **config_kwargs
    ) -> "LabelAttnForSequenceClassification":
        """A new classifier on the pretrained encoder saved at `encoder_name_or_path` (a local folder works
        offline), or on its first `encoder_layers` layers (the weights of the others are not read: transformers
        reports them as unexpected keys); the head is freshly initialised. `config_kwargs` go to
        [`LabelAttnConfig`], e.g. `id2label={0: "neg", 1: "pos"}` or `pooling="mean"`."""
        model = cls(LabelAttnConfig.from_encoder(encoder_name_or_path, encoder_layers, **config_kwargs))
        encoder = AutoModel.from_pretrained(encoder_name_or_path, config=model.config.encoder_config)
        model.labelattn.encoder = without_pooler(encoder)
        return model

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        output_label_contributions: bool = False,
        **kwargs,
    ) -> LabelAttnSequenceClassifierOutput | tuple:
        """
        Args:
            labels: `(batch,)` class indices (single-label) or `(batch, num_labels)` 0/1 targets (multi-label).
            output_label_contributions: return `label_contributions`, each position's exact term in each logit, and
                `label_contribution_bias`, the part no position carries, and compute the logits as their sum. For
                explanations, in eval mode: in training, classifier and attention dropout would break the sum.
            Others as in [`LabelAttnModel.forward`].
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        if output_label_contributions and self.training and self.dropout.p > 0:
            raise LabelAttnInputError(
                "Label contributions are exact only without classifier dropout, which acts in training: call "
                "model.eval() first, or set classifier_dropout=0."
            )
        # Label attention's scorer folds into the head where it is linear (see `LabelAttention`), unless dropout must
        # act on the class vectors between the two.
        folds = self.config.pooling == "label_attention" and not (self.training and self.dropout.p > 0)
        outputs = self.labelattn(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            readout=self.classifier if folds else None,
            output_label_contributions=output_label_contributions and folds,
        )
        contributions, contribution_bias = outputs.label_contributions, outputs.label_contribution_bias
        if folds:
            logits = outputs.class_scores
        elif output_label_contributions:  # mean pooling: W x̄ + b = Σ_t W x_t / n + b
            mask = attention_mask if attention_mask is not None else torch.ones_like(outputs.last_hidden_state[..., 0])
            contributions = mean_contributions(outputs.last_hidden_state, mask, self.classifier.weight)
            contribution_bias = self.classifier.bias.expand(contributions.shape[:2])
            logits = contributions.sum(-1) + contribution_bias
        else:
            head = self.labelattn.label_attention
            vectors = self.dropout(outputs.pooler_output)
            logits = self.classifier(vectors) if head is None else self.classifier(vectors, head.descriptions)

        if self.config.temperature is not None:  # calibrated: every term scaled alike, so their sum is still the logit
            logits = logits / self.config.temperature
            if contributions is not None:
                contributions = contributions / self.config.temperature
                contribution_bias = contribution_bias / self.config.temperature
        loss = self.loss(logits, labels) if labels is not None else None
        output = LabelAttnSequenceClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            label_attentions=outputs.label_attentions,
            label_contributions=contributions,
            label_contribution_bias=contribution_bias,
        )
        return output if return_dict else output.to_tuple()

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy or binary cross-entropy by `config.problem_type`, inferred from the labels when unset."""
        if self.config.problem_type is None:
            is_index = labels.dtype in (torch.long, torch.int) and labels.dim() == 1
            self.config.problem_type = "single_label_classification" if is_index else "multi_label_classification"
        if self.config.problem_type == "single_label_classification":
            if labels.dim() != 1 or labels.shape[0] != logits.shape[0]:
                raise LabelAttnInputError(
                    f"Single-label targets must have shape (batch,) = ({logits.shape[0]},), got {tuple(labels.shape)}."
                )
            if not is_traced() and (int(labels.min()) < 0 or int(labels.max()) >= self.num_labels):
                raise LabelAttnInputError(f"Labels must be class indices in [0, {self.num_labels}).")
            return nn.functional.cross_entropy(logits, labels.long())
        if labels.shape != logits.shape:
            raise LabelAttnInputError(
                f"Multi-label targets must have shape (batch, num_labels) = {tuple(logits.shape)}, "
                f"got {tuple(labels.shape)}."
            )
        return nn.functional.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


LabelAttnModel.register_for_auto_class("AutoModel")
LabelAttnForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")

__all__ = [
    "LabelAttention",
    "LabelAttnForSequenceClassification",
    "LabelAttnInputError",
    "LabelAttnModel",
    "LabelAttnModelOutput",
    "LabelAttnPreTrainedModel",
    "LabelAttnSequenceClassifierOutput",
    "LabelDescriptions",
    "LabelScorer",
]
