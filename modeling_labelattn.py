"""labelattn: a label-attention head on a bag of token embeddings or on a pretrained Transformers encoder.

Instead of pooling the tokens into one sentence vector shared by all classes, every class owns a learned
query that attends over the tokens (queries = label embeddings, keys/values = token vectors), which gives one
sentence vector per class; one shared linear layer scores each class's vector. The attention weights are a
by-product of the forward pass and are returned as `label_attentions`.

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
            both poolings, so its logits are the classifier's bias alone (equal for every class with label attention).
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
            why), where `u_h` is head
            h's slice of `W_Oᵀ w` (the readout folded into the output map) and `v_t` the vector the values read at
            position t: on the embedding backbone the
            token's own embedding (the token context steers only the weights), on the encoder backbone the final
            layer's output at t, which has already mixed in the text (the terms are per final-layer position).
            Exactly 0 on padding, and everywhere for a text of only padding. `class_scores` is
            computed from them in the same call: `class_scores = label_contributions.sum(-1) +
            label_contribution_bias`.
        label_contribution_bias (`torch.FloatTensor` of shape `(batch, num_labels)`, *optional*):
            With `label_contributions`: the part of each score that no position carries, `class_scores −
            label_contributions.sum(-1)`. It is `w·b_O + Σ_h u_h·b_V,h + b_w + Σ_h r_h` (the value bias and the
            reference pass the weighting unchanged, since the weights sum to 1 over the real tokens): the mean of the
            classes' scores (the average class's), the same for every class up to float rounding, so it cancels in
            every difference of classes and in the softmax; a text of only padding has `b_w` (the readout's bias)
            alone.
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
            One score per class, before softmax (single-label) or sigmoid (multi-label).
        hidden_states, attentions, label_attentions:
            As in [`LabelAttnModelOutput`].
        label_contributions (`torch.FloatTensor` of shape `(batch, num_labels, seq_len)`, *optional*):
            When `output_label_contributions=True`: each position's exact term in each class's logit, 0 on padding,
            and the logits of the same call are computed from them: `logits = label_contributions.sum(-1) +
            label_contribution_bias`. Label attention: as in [`LabelAttnModelOutput`], with the classifier as the
            readout. Mean pooling: `W_c·x_t / n` for the `n` real tokens, `x_t` the vectors it averages (with the
            token context, each position's convolved vector, which also holds its neighbours').
        label_contribution_bias (`torch.FloatTensor` of shape `(batch, num_labels)`, *optional*):
            With `label_contributions`: the part of each logit that no position carries. Label attention: the same
            for every class up to float rounding (see [`LabelAttnModelOutput`]); mean pooling: the classifier's
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
    """Label embeddings computed from the classes' descriptions: `e_c = M v̂_c + r_c` (`config.label_description_size`).

    `v_c (num_labels, label_description_size)` is a buffer, saved with the weights: one vector per class for its
    description (`labelattn train --label-descriptions` stores the mean of the backbone's token vectors over it), read
    at unit length `v̂_c`. `M` is one linear map shared by every class and trained with them, so that a class no
    training row shows (`has_rows[c]` False) still gets an embedding, and through it a query, that training taught
    to read: its residual `r_c` counts as 0. In training, each class's residual is left out with probability
    `config.label_residual_dropout` (a row at a time, not rescaled), so that the map cannot leave its work to the
    residuals.
    """

    def __init__(self, config: LabelAttnConfig):
        super().__init__()
        self.vectors = nn.Buffer(torch.zeros(config.num_labels, config.label_description_size))
        self.has_rows = nn.Buffer(torch.ones(config.num_labels, dtype=torch.bool))
        self.map = nn.Linear(config.label_description_size, config.hidden_size)
        self.residual_dropout = config.label_residual_dropout

    def forward(self, residuals: torch.Tensor) -> torch.Tensor:
        """`residuals (labels, hidden)` -> label embeddings `(labels, hidden)`."""
        vectors = self.vectors / self.vectors.norm(dim=-1, keepdim=True).clamp_min(1e-12)  # v̂: (labels, size)
        kept = self.has_rows.to(residuals.dtype)  # (labels,)
        if self.training and self.residual_dropout > 0:
            kept = kept * torch.bernoulli(torch.full_like(kept, 1 - self.residual_dropout))
        return self.map(vectors.to(self.map.weight.dtype)) + residuals * kept[:, None]


class LabelAttention(nn.Module):
    """Multi-head cross-attention from one learned query per class to the tokens.

    `Q = L W_Q` (label embeddings `L (num_labels, d)`), `K = X W_K`, `V = X W_V`, value heads of size
    `d_h = d / n_h` and query/key heads of size `d_k` (`config.attention_key_size`, `d_h` by default),
    `softmax(Q K^T / sqrt(d_k))` with padding masked to -inf, heads concatenated and projected by `W_O`.

    Given the scoring layer `w` that a classifier shares between the classes (`readout`), the head returns each
    class's score instead of its vector: `w·(W_O c + b_O) = (w W_O)·c + w·b_O` is linear in the heads' contexts `c`,
    so `W_O` and `w` fold into one vector `u_h` per head and no `d × d` product per class is paid. Four ways to the
    same numbers (up to float rounding), picked by what is asked and by cost:
    - weights asked for: the weights are formed as a tensor, weigh `V` and are returned (`_weigh_values`);
    - few classes (`heads × classes` below about `d`): `W_K` folds into the queries and `W_V` into the output map, so
      the heads attend over the token vectors themselves and no `(seq, d) × (d, d)` projection is paid (`_folded`);
    - many classes, scores: the value side folds too, `Σ_j a_j (V_j,h·u_h)`, a weighted sum of one number per token
      and head, so the second attention product disappears (`_value_folded`);
    - many classes, class vectors: a fused kernel (`scaled_dot_product_attention`) weighs `V` without storing the
      weights (`_fused`).
    The last two run one block of classes at a time, so that memory stays bounded at thousands of classes. A fifth
    way gives each token's exact term in every class's score, and the scores as their sum (`_contributions`).
    """

    # A block of classes holds at most this many numbers (the scores of `_value_folded` and `_contributions`, the
    # contexts of `_fused`).
    block_elements = 2**19

    def __init__(self, config: LabelAttnConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads  # of the values
        self.key_size = config.attention_key_size or self.head_size  # of the queries and keys
        # Each class's free embedding, or with descriptions its residual beside the shared map (`label_queries`).
        self.label_embeddings = nn.Parameter(torch.empty(config.num_labels, config.hidden_size))
        self.descriptions = LabelDescriptions(config) if config.label_description_size else None
        self.query = nn.Linear(config.hidden_size, self.num_heads * self.key_size)
        self.key = nn.Linear(config.hidden_size, self.num_heads * self.key_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.output = nn.Linear(config.hidden_size, config.hidden_size)
        # Its output is the weight tensor that multiplies the values: a forward hook here sees and can change it.
        self.attention_dropout = nn.Dropout(config.attention_dropout)

    def label_queries(self) -> torch.Tensor:
        """Every class's query `(labels, heads × d_k)`: `W_Q e_c + b_Q`, with `e_c` the class's free embedding, or,
        where the config has descriptions, the embedding its description gives (`LabelDescriptions`)."""
        embeddings = self.label_embeddings
        if self.descriptions is not None:
            embeddings = self.descriptions(embeddings)
        return self.query(embeddings)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """`(..., n, heads × size)` -> `(..., heads, n, size)` (queries and keys, or values)."""
        return x.unflatten(-1, (self.num_heads, -1)).transpose(-2, -3)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor,
        output_attentions: bool = False,
        readout: nn.Linear | None = None,
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
            readout: a scoring layer `hidden -> 1`; when given, its score of every class vector is returned in
                place of the vectors, computed with `readout` folded into `W_O`.
            value_states: token vectors `(batch, seq_len, hidden)` that the values read, when they differ from the
                keys' (the embedding backbone's token context steers where a class looks, and the class vector is
                made of the tokens' own vectors, so that a weight is exactly one token's share of it).
            output_contributions: with `readout`, also return each token's term in every class's score, and compute
                the scores as their sum (see `_contributions`).

        Returns:
            class vectors `(batch, num_labels, hidden)`, or with `readout` their scores `(batch, num_labels)`; the
            weights, or None when they were not formed; the contributions `(batch, num_labels, seq_len)`, or None.
        """
        queries = self.label_queries()  # (labels, heads × d_k)
        is_token = attention_mask.bool()
        # A text of only padding would make every score -inf and the softmax NaN; let such a row see all
        # positions (finite values and gradients), then zero its weights and its class vectors (W_O's bias
        # included), as mean pooling gives such a text the vector 0.
        is_empty = ~is_token.any(dim=-1)
        visible = is_token | is_empty[:, None]
        out_weight, out_bias = self.output.weight, self.output.bias  # concatenated heads -> outputs
        if readout is not None:  # w·(W_O c + b_O) = (w W_O)·c + w·b_O
            out_weight, out_bias = readout.weight @ out_weight, readout.weight @ out_bias  # (1, hidden), (1,)

        tokens = (hidden_states, hidden_states if value_states is None else value_states)  # read by keys, values
        weights = contributions = None
        if output_contributions:  # the scores as the sum of their terms, the reference and `u·b_V` (see below)
            contributions, weights, reference = self._contributions(
                *tokens, queries, is_token, visible, out_weight, output_attentions
            )
            bias = out_bias + out_weight @ self.value.bias + reference.sum(-1)[:, None, None]
            pooled = contributions.sum(-1, keepdim=True) + bias
        elif output_attentions or (self.training and self.attention_dropout.p > 0):
            context, weights = self._weigh_values(*tokens, queries, is_token, visible)
            pooled = nn.functional.linear(context, out_weight, out_bias)
        elif self._folds_projections(*hidden_states.shape[:2]):
            pooled = self._folded(*tokens, queries, visible, out_weight, out_bias)
        elif readout is not None:
            pooled = self._value_folded(*tokens, queries, visible, out_weight, out_bias)
        else:
            pooled = self._fused(*tokens, queries, visible, out_weight, out_bias)
        if is_empty.any():  # (a test on the host: padding-only texts are rare, and the fill costs a pass)
            pooled = pooled.masked_fill(is_empty[:, None, None], 0.0)  # (batch, labels, hidden or 1)
        if readout is not None:
            pooled = pooled.squeeze(-1) + readout.bias
        return pooled, weights, contributions

    def _weigh_values(
        self,
        hidden_states: torch.Tensor,
        value_states: torch.Tensor,
        queries: torch.Tensor,
        is_token: torch.Tensor,
        visible: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The weights `(batch, heads, labels, seq)` as a tensor, and the class contexts `(batch, labels, hidden)`."""
        weights = self._weights(hidden_states, queries, is_token, visible)
        values = self._split_heads(self.value(value_states))
        return (weights @ values).transpose(1, 2).flatten(-2), weights

    def _weights(
        self, hidden_states: torch.Tensor, queries: torch.Tensor, is_token: torch.Tensor, visible: torch.Tensor
    ) -> torch.Tensor:
        """The weights `(batch, heads, labels, seq)`, 0 on padding, as they leave `attention_dropout`."""
        keys = self._split_heads(self.key(hidden_states))  # (batch, heads, seq, d_k)
        scores = self._split_heads(queries) @ keys.transpose(-1, -2) / math.sqrt(self.key_size)
        weights = torch.softmax(scores.masked_fill(~visible[:, None, None, :], float("-inf")), dim=-1)
        return self.attention_dropout(weights.masked_fill(~is_token[:, None, None, :], 0.0))

    def _folds_projections(self, batch_size: int, seq_len: int) -> bool:
        """Whether `_folded` costs fewer multiply-adds than `_fused`: folding `W_K` into the queries
        (`labels × keys × d`, `keys = heads × d_k`), `heads` times wider attention products, values per class
        (`batch × labels × d²`), against the key and value projections of every token (`tokens × (keys + d) × d`)
        and the attention products."""
        labels, hidden = self.label_embeddings.shape
        tokens, keys = batch_size * seq_len, self.num_heads * self.key_size
        fused = tokens * (keys + hidden) * (hidden + labels)
        folded = (
            labels * keys * hidden + batch_size * labels * hidden**2 + 2 * tokens * self.num_heads * labels * hidden
        )
        return folded < fused

    def _folded(
        self,
        hidden_states: torch.Tensor,
        value_states: torch.Tensor,
        queries: torch.Tensor,
        visible: torch.Tensor,
        out_weight: torch.Tensor,
        out_bias: torch.Tensor,
    ) -> torch.Tensor:
        """Outputs `(batch, labels, outputs)` with `W_K` folded into the queries and `W_V` applied after the weighting
        (or, for a readout, folded into it): the heads attend over the token vectors themselves.

        Exact: `q_h·(W_K,h x + b_K,h) = (q_h W_K,h)·x + q_h·b_K,h`; the weights sum to 1, so
        `Σ_j a_j (W_V,h x_j + b_V,h) = W_V,h (Σ_j a_j x_j) + b_V,h`. (The softmax ignores `q_h·b_K,h`, constant over
        the tokens, but it is kept: every parameter then takes part, as DDP requires, with its true gradient 0.)
        """
        labels, hidden = queries.shape[0], hidden_states.shape[-1]
        outputs = out_weight.shape[0]
        heads, head_size, key_size = self.num_heads, self.head_size, self.key_size
        key_maps = self.key.weight.view(heads, key_size, hidden)  # W_K,h
        value_maps = self.value.weight.view(heads, head_size, hidden)  # W_V,h
        # q_h W_K,h for every class and head, in (class, head) order to match the contexts below.
        head_queries = queries.view(labels, heads, key_size) / math.sqrt(key_size)
        folded_queries = torch.einsum("thk,hkd->thd", head_queries, key_maps).reshape(labels * heads, hidden)
        key_bias_terms = (head_queries * self.key.bias.view(heads, key_size)).sum(-1).flatten()  # q_h·b_K,h
        scores = nn.functional.linear(hidden_states, folded_queries, key_bias_terms)  # (batch, seq, labels * heads)
        weights = torch.softmax(scores.masked_fill(~visible[:, :, None], float("-inf")), dim=1)
        context = torch.bmm(weights.transpose(1, 2), value_states)  # Σ_j a_j x_j: (batch, labels * heads, hidden)
        context = context.view(-1, labels, heads, hidden)
        bias = out_bias + out_weight @ self.value.bias  # b_V passes the weighting unchanged, then the output map
        if outputs < hidden:  # a readout: W_V,h folds into its slice of the output map, one vector per head
            out_maps = torch.einsum("ohk,hkd->ohd", out_weight.view(outputs, heads, head_size), value_maps)
            return nn.functional.linear(context.flatten(-2), out_maps.flatten(-2), bias)
        values = torch.einsum("bthd,hkd->bthk", context, value_maps).flatten(-2)
        return nn.functional.linear(values, out_weight, bias)

    def _value_folded(
        self,
        hidden_states: torch.Tensor,
        value_states: torch.Tensor,
        queries: torch.Tensor,
        visible: torch.Tensor,
        out_weight: torch.Tensor,
        out_bias: torch.Tensor,
    ) -> torch.Tensor:
        """Scores `(batch, labels, 1)` of a readout folded into the output map (`out_weight (1, hidden)`).

        Exact: `u_h·Σ_j a_j V_j,h = Σ_j a_j (u_h·V_j,h)`, and `u_h·V_j,h = (u_h W_V,h)·x_j + u_h·b_V,h`: one number per
        token and head, `(batch, seq, heads)` for `batch × seq × hidden × heads` multiply-adds. What is left per class
        is `Q K^T` and a weighted sum of those numbers.
        """
        heads, head_size = self.num_heads, self.head_size
        head_readouts = out_weight.view(heads, head_size)  # u_h
        token_maps = torch.einsum("hk,hkd->hd", head_readouts, self.value.weight.view(heads, head_size, -1))
        token_biases = (head_readouts * self.value.bias.view(heads, head_size)).sum(-1)
        token_scores = nn.functional.linear(value_states, token_maps, token_biases).permute(2, 0, 1)  # (h, b, seq)
        blocks = self._weight_blocks(hidden_states, queries, visible)
        # (block, batch) per block of classes; the sum is 2-3x faster than einsum's permuting copy.
        class_scores = [(weights * token_scores[:, None]).sum((0, 3)) for _, weights in blocks()]
        return (torch.cat(class_scores).T + out_bias).unsqueeze(-1)

    def _contributions(
        self,
        hidden_states: torch.Tensor,
        value_states: torch.Tensor,
        queries: torch.Tensor,
        is_token: torch.Tensor,
        visible: torch.Tensor,
        out_weight: torch.Tensor,
        output_attentions: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Each token's term in every class's score of a readout folded into the output map (`out_weight (1, hidden)`):
        `(batch, labels, seq)`, 0 on padding; the weights when asked for (the contributions are then theirs); and the
        reference `r (batch, heads)` the terms are measured from.

        Exact: as in `_value_folded`, `u_h·Σ_j a_j V_j,h = Σ_j a_j (u_h W_V,h)·x_j + u_h·b_V,h`, and since a head's
        weights sum to 1 over the real tokens, `Σ_j a_h,j s_j,h = Σ_j a_h,j (s_j,h − r_h) + r_h` for any `r_h`. The
        terms are `Σ_h a_h,j (s_j,h − r_h)`, the token values `s_j,h = (u_h W_V,h)·x_j` measured from what the average
        class reads, `r_h = Σ_j ā_h,j s_j,h` (`ā` the weights averaged over the classes): adding a constant to every
        value of a head adds it to every class's score, so only a token's value against what the classes read says
        what a class found in it. Measured from 0 instead, a token that lowers every class's value, and its own
        class's least, would count against that class. With this reference the scores' part no token carries is
        the average class's score, `Σ_h r_h` plus the biases.
        The same blocks of classes as `_value_folded`, twice (the average weights first, then the terms): the extra
        memory is the output.
        """
        heads, head_size = self.num_heads, self.head_size
        head_readouts = out_weight.view(heads, head_size)  # u_h
        token_maps = torch.einsum("hk,hkd->hd", head_readouts, self.value.weight.view(heads, head_size, -1))
        token_scores = nn.functional.linear(value_states, token_maps)  # (u_h W_V,h)·x_j: (batch, seq, heads)
        # 0 on padding, so that its terms are 0 even in a text of only padding, whose weights see every position.
        token_scores = token_scores.masked_fill(~is_token[:, :, None], 0.0)
        if output_attentions:
            weights = self._weights(hidden_states, queries, is_token, visible)
            reference = torch.einsum("bhj,bjh->bh", weights.mean(2), token_scores)
            shifted = (token_scores - reference[:, None, :]).masked_fill(~is_token[:, :, None], 0.0)
            return torch.einsum("bhcj,bjh->bcj", weights, shifted), weights, reference
        blocks = self._weight_blocks(hidden_states, queries, visible)
        mean_weights = sum(block.sum(1) for _, block in blocks()) / queries.shape[0]  # (heads, batch, seq)
        reference = torch.einsum("hbj,bjh->bh", mean_weights, token_scores)
        shifted = (token_scores - reference[:, None, :]).masked_fill(~is_token[:, :, None], 0.0).permute(2, 0, 1)
        contributions = token_scores.new_empty(hidden_states.shape[0], queries.shape[0], hidden_states.shape[1])
        for start, block in blocks():  # written block by block
            contributions[:, start : start + block.shape[1]] = (block * shifted[:, None]).sum(0).transpose(0, 1)
        return contributions, None, reference

    def _weight_blocks(self, hidden_states: torch.Tensor, queries: torch.Tensor, visible: torch.Tensor):
        """A function giving, each time it is called, `(first class, weights (heads, block, batch, seq))` for one
        block of classes after another: the weights of thousands of classes are never held at once. Every text's
        keys side by side, so that `Q K^T` is one product per head and block of classes."""
        batch_size, seq_len, _ = hidden_states.shape
        heads, key_size = self.num_heads, self.key_size
        keys = self.key(hidden_states).view(batch_size * seq_len, heads, key_size).permute(1, 2, 0)
        padding = torch.zeros(batch_size, seq_len, device=keys.device, dtype=keys.dtype).masked_fill(
            ~visible, float("-inf")
        )
        size = max(1, self.block_elements // (heads * batch_size * seq_len))

        def blocks():
            for start in range(0, queries.shape[0], size):
                block_queries = self._split_heads(queries[start : start + size]) / math.sqrt(key_size)
                scores = torch.bmm(block_queries, keys).view(heads, -1, batch_size, seq_len) + padding
                yield start, torch.softmax(scores, dim=-1)

        return blocks

    def _fused(
        self,
        hidden_states: torch.Tensor,
        value_states: torch.Tensor,
        queries: torch.Tensor,
        visible: torch.Tensor,
        out_weight: torch.Tensor,
        out_bias: torch.Tensor,
    ) -> torch.Tensor:
        """Outputs `(batch, labels, outputs)` from the fused kernel, one block of classes at a time."""
        keys = self._split_heads(self.key(hidden_states))  # (batch, heads, seq, d_k)
        values = self._split_heads(self.value(value_states))  # (batch, heads, seq, d_h)
        batch_size, hidden = hidden_states.shape[0], hidden_states.shape[-1]
        block = max(1, self.block_elements // (batch_size * hidden))
        outputs = []
        for block_queries in self._split_heads(queries).split(block, dim=1):  # (heads, block, d_k)
            context = nn.functional.scaled_dot_product_attention(
                block_queries.expand(batch_size, -1, -1, -1),
                keys,
                values,
                attn_mask=visible[:, None, None, :],
                scale=1 / math.sqrt(self.key_size),
            )  # (batch, heads, block, d_h)
            outputs.append(nn.functional.linear(context.transpose(1, 2).flatten(-2), out_weight, out_bias))
        return torch.cat(outputs, dim=1)


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
        if input_ids is None:
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
        readout: nn.Linear | None = None,
        output_label_contributions: bool = False,
        **kwargs,
    ) -> LabelAttnModelOutput | tuple:
        """
        Args:
            input_ids: `(batch, seq_len)` token ids.
            attention_mask: `(batch, seq_len)`, 1 for real tokens and 0 for padding; all ones when omitted.
            token_type_ids: `(batch, seq_len)`, passed to an encoder that uses them; ignored by the embedding backbone.
            inputs_embeds: `(batch, seq_len, hidden)` token embeddings in place of `input_ids`.
            output_attentions: return `label_attentions` and the encoder's `attentions`. An encoder running with
                `sdpa` attention returns no weights, so the first call that asks for them switches the encoder to
                eager attention for good (the results are the same, computed a little more slowly).
            readout: a scoring layer `hidden -> 1` shared by the classes (label attention only): `class_scores`
                holds its score of every class vector, computed without forming the vectors (`pooler_output` is
                None then). [`LabelAttnForSequenceClassification`] passes its classifier.
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
    """[`LabelAttnModel`] and a scoring layer: `W_head (d, 1)` shared by the class vectors of label attention,
    or `W (d, num_labels)` on the mean-pooled vector."""

    def __init__(self, config: LabelAttnConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.labelattn = LabelAttnModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        outputs_per_vector = 1 if config.pooling == "label_attention" else config.num_labels
        self.classifier = nn.Linear(config.hidden_size, outputs_per_vector)
        self.post_init()

    @classmethod
    def from_encoder(cls, encoder_name_or_path: str, **config_kwargs) -> "LabelAttnForSequenceClassification":
        """A new classifier on the pretrained encoder saved at `encoder_name_or_path` (a local folder works
        offline); the head is freshly initialised. `config_kwargs` go to [`LabelAttnConfig`], e.g.
        `id2label={0: "neg", 1: "pos"}` or `pooling="mean"`."""
        model = cls(LabelAttnConfig.from_encoder(encoder_name_or_path, **config_kwargs))
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
        # Label attention scores every class vector with one shared layer, which folds into the head (see
        # `LabelAttention`), unless dropout must act on the class vectors between the two.
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
            logits = self.classifier(self.dropout(outputs.pooler_output))
            if self.config.pooling == "label_attention":
                logits = logits.squeeze(-1)  # (batch, labels, 1) -> (batch, labels)

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
            if int(labels.min()) < 0 or int(labels.max()) >= self.num_labels:
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
]
