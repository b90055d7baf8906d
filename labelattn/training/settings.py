"""The settings of a training run: `TrainSettings`, the one typed object a run's steps read past the command line
(the parsed options with the defaults that depend on the backbone filled in, every check passed), the settings
recorded in the output folder (training_args.json) and the rules of resuming, overwriting and launching.

Everything here runs before any model, process group or file exists, so that a user's mistake costs nothing.
"""

import argparse
import json
import math
import os
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from labelattn.training import backbones, checkpoints
from labelattn.training.arguments import (
    DEFAULT_ATTENTION_HEADS,
    DEFAULT_DISTILL_WEIGHT,
    DEFAULT_RESIDUAL_DROPOUT,
    add_arguments,
    command_line,
    typed_options,
)

SETTINGS_FILE = "training_args.json"
# Options that do not change the trained weights: a run may be resumed with other values.
NOT_SETTINGS = {"resume", "overwrite", "push_to_hub", "private", "license", "checkpoint_every", "command_line"}
NOT_SETTINGS |= {"output_dir"}  # the folder holding the settings is not one of them
NOT_SETTINGS |= {"by_class_count"}  # which options took their default: the values are recorded
PATH_SETTINGS = {"data", "validation_data", "test_data", "backbone", "label_file", "distill_from"}
# Numeric options and the values they take (every float must also be finite).
AT_LEAST_ONE = ("epochs", "batch_size", "gradient_accumulation_steps", "checkpoint_every", "hidden_size")
AT_LEAST_ONE += ("num_attention_heads", "max_length", "attention_key_size")  # attention_key_size: None or >= 1
AT_LEAST_ONE += ("scorer_rank",)  # None or >= 1
# What a run's saved settings meant for options added since: runs made before them compare as these values.
SAVED_BEFORE = {"scorer": "shared", "scorer_rank": None, "untrained_class_offset": None, "group_by_length": False}
SAVED_BEFORE |= {"label_projections": True, "label_smoothing": 0.0, "encoder_layers": None, "ema_decay": None}
SAVED_BEFORE |= {"distill_from": None, "distill_weight": None, "init_seed": None}
# The share of a single-label target spread over the classes when --label-smoothing is not given (`label_smoothing`).
DEFAULT_LABEL_SMOOTHING = 0.1
ABOVE_ZERO = ("learning_rate", "head_learning_rate", "max_grad_norm", "initializer_range")
# The defaults that depend on the number of classes (`class_count_defaults`): below MANY_CLASSES, those made on TREC's
# 6 and TREC fine's 50 classes; from it, the many-class recipe measured on ICD-10-CM's 1,918 (docs/many-classes.md,
# "Which command at many classes"): there it was more accurate than the few-class defaults (0.9308 and 0.9314 top-1
# on two seeds against 0.9244-0.9259) in under half their time (1.98x fastText's against 4x or more). It was
# measured on single-label data at 1,918 classes only: the threshold sits below that, and above the 896 classes of
# bench/untrained_classes.py, which keeps the few-class defaults it was measured with.
MANY_CLASSES = 1000
FEW_CLASS_DEFAULTS = {"group_by_length": False, "label_projections": True, "token_context_width": 5, "epochs": 5}
FEW_CLASS_DEFAULTS |= {"batch_size": 32}
# Faster still at many classes, for 0.7 points of top-1: one narrow head and a rank-64 scorer per class, in the
# batches of 32 it was measured with over three seeds (with 64 it lost 0.2 points on one).
FAST_RECIPE = "--num-attention-heads 1 --attention-key-size 32 --scorer-rank 64 --batch-size 32"


class TrainingError(ValueError):
    """Training options that cannot work together, or an output folder that must not be overwritten."""


@dataclass(frozen=True)
class TrainSettings:
    """A training run's settings, checked: one field per option of `labelattn.training.arguments` (same name; its
    default and help are there), plus the command that gives them. Made once by `from_args` from the parsed
    command line; constructing one runs every check (`check_settings`)."""

    # data
    data: str  # a built-in data set's name, or the training file or datasets folder
    validation_data: str | None  # its own validation file, or None: held out of `data`
    test_data: str | None  # its own test file, or None: held out of `data`
    text_column: str  # the column of the texts
    label_column: str  # the column of the labels (a list per row for multi-label data)
    label_separator: str  # splits string labels into several ("" keeps them whole)
    split_seed: int  # the seed of the held-out splits
    hierarchy_separator: str | None  # splits a label into its groups, top first
    label_file: str | None  # a file of the classes: parent, description
    hierarchy_levels: list[str] | None  # names of the hierarchy's levels, top first
    # model
    backbone: str  # a named backbone (`backbones.BACKBONES`) or a local encoder folder
    encoder_layers: int | None  # with an encoder backbone, the first layers kept (None: all)
    pooling: str  # "label_attention" or "mean"
    label_descriptions: bool | None  # queries computed from descriptions (None: not given, as runs before the option)
    label_residual_dropout: float | None  # with label_descriptions, a probability; None otherwise
    untrained_class_offset: float | None  # with label_descriptions, a logit; None: the config's default
    hidden_size: int  # the embedding backbone's width
    token_context_width: int  # the embedding backbone's convolution width: 0 or odd
    num_attention_heads: int  # label-attention heads
    attention_key_size: int | None  # width of a head's queries and keys (None: the values' width)
    scorer: str  # how a class vector becomes its logit (`configuration_labelattn.SCORERS`)
    scorer_rank: int | None  # with scorer "per_class": the rank of each class's scorer (None: full)
    label_projections: bool  # queries and class vectors through maps shared by the classes (W_Q, W_O)
    max_length: int  # tokens read per text
    classifier_dropout: float  # dropout on the class vectors, a probability
    initializer_range: float  # standard deviation of the new weights
    embeddings: str  # where the embedding backbone's token table starts (`static_embeddings.EMBEDDINGS`)
    freeze_embeddings: bool  # the token table (or the encoder's input embeddings) kept as it starts
    # optimisation
    epochs: int  # passes over the training data
    batch_size: int  # texts per batch and process
    group_by_length: bool  # batches of texts of like length (`length_groups`)
    learning_rate: float  # AdamW's peak learning rate (of the encoder, for an encoder backbone)
    head_learning_rate: float  # the head's learning rate
    weight_decay: float  # AdamW's weight decay, 0 or above
    warmup_ratio: float  # share of the steps warming up, in [0, 1)
    gradient_accumulation_steps: int  # batches per optimizer step
    max_grad_norm: float  # gradients clipped to this norm
    label_smoothing: float | None  # share of a single-label target spread over the classes (None: `label_smoothing`)
    ema_decay: float | None  # the decay of the weights' moving average that is saved (None: the last weights)
    distill_from: list[str] | None  # the teachers' folders (`distillation`), or None
    distill_weight: float | None  # with distill_from, the teachers' share of the loss; None otherwise
    mixed_precision: str | None  # "no", "fp16", "bf16", or None: as Accelerate is configured
    seed: int  # seed of initialisation, data order and dropout
    init_seed: int | None  # seed of the model's initial values alone (None: seed), for runs to average
    # output
    output_dir: Path  # where the model goes
    overwrite: bool  # replace what output_dir holds
    checkpoint_every: int  # optimizer steps between checkpoints
    resume: bool  # continue from output_dir's last checkpoint
    push_to_hub: str | None  # the Hub repository the model is pushed to, or None
    private: bool  # create that repository as private
    license: str  # the licence the model card names
    command_line: str  # the `labelattn train` command that gives these settings (for the model card)
    by_class_count: frozenset[str] = frozenset()  # the options not given, whose default the class count decides

    def __post_init__(self) -> None:
        check_settings(self)

    @property
    def initial_seed(self) -> int:
        """The seed the model's initial values come from: `init_seed`, or `seed` without it."""
        return self.seed if self.init_seed is None else self.init_seed

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "TrainSettings":
        """The settings of the options `labelattn train` parsed into `args`: the defaults that depend on the backbone
        filled in, every check passed (or a `TrainingError` naming the option)."""
        made_here = ("command_line", "by_class_count")
        values = {field.name: getattr(args, field.name) for field in fields(cls) if field.name not in made_here}
        kind = backbones.backbone_kind(args.backbone)
        if values["learning_rate"] is None:
            values["learning_rate"] = backbones.default_learning_rate(args.backbone)
        if values["head_learning_rate"] is None:
            values["head_learning_rate"] = 1e-3 if kind == "encoder" else values["learning_rate"]
        if values["freeze_embeddings"] is None:
            values["freeze_embeddings"] = kind == "embedding" and args.embeddings != "random"
        if args.label_descriptions and args.label_residual_dropout is None:
            values["label_residual_dropout"] = DEFAULT_RESIDUAL_DROPOUT
        if args.distill_from and args.distill_weight is None:
            values["distill_weight"] = DEFAULT_DISTILL_WEIGHT
        by_class_count = frozenset(name for name in FEW_CLASS_DEFAULTS if values[name] is None)
        values |= {name: FEW_CLASS_DEFAULTS[name] for name in by_class_count}  # until `for_classes` knows the count
        return cls(**values, command_line=command_line(args), by_class_count=by_class_count)

    @classmethod
    def of_command(cls, options: list[str], num_classes: int) -> "TrainSettings":
        """The settings that `labelattn train OPTIONS` gives data of `num_classes` classes, without running it: what
        benchmarks and tests build a model from."""
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        return cls.from_args(parser.parse_args(options)).for_classes(num_classes)

    def for_classes(self, num_classes: int) -> "TrainSettings":
        """These settings for data of `num_classes` classes: the options not given take `class_count_defaults`, or,
        with `--resume`, the values the resumed run recorded, so that a run started before those defaults (or under
        others) continues as it started when resumed with its own command."""
        defaults = class_count_defaults(self, num_classes)
        resumed = (saved_settings(self.output_dir) or {}) if self.resume else {}
        kept = {
            name: resumed[name] for name in self.by_class_count if resumed.get(name, defaults[name]) != defaults[name]
        }
        settings = replace(self, **{name: defaults[name] for name in self.by_class_count} | kept)
        if not kept:
            return settings
        # The saved values are the run's options now: its card gives the command that trains it, its note no default.
        command = f"{self.command_line} {typed_options(kept)}"
        return replace(settings, command_line=command, by_class_count=self.by_class_count - frozenset(kept))


def class_count_defaults(settings: TrainSettings, num_classes: int) -> dict:
    """The defaults of the options in `FEW_CLASS_DEFAULTS` for data of `num_classes` classes. From `MANY_CLASSES`:
    batches of like length, each class's own query (label attention), and for the embedding backbone a token
    context of 3, 3 epochs and batches of 64; an encoder keeps its 5 epochs and batches of 32, as in the accurate
    recipe measured on ICD-10-CM."""
    if num_classes < MANY_CLASSES:
        return FEW_CLASS_DEFAULTS
    many = {"group_by_length": True}
    if settings.pooling == "label_attention":
        many["label_projections"] = False
    if backbones.backbone_kind(settings.backbone) == "embedding":
        many |= {"token_context_width": 3, "epochs": 3, "batch_size": 64}
    return FEW_CLASS_DEFAULTS | many


def check_settings(settings: TrainSettings) -> None:
    """The options' ranges and the options that cannot go together."""
    check_numbers(settings)
    if settings.scorer_rank is not None and settings.scorer != "per_class":
        raise TrainingError("--scorer-rank sets the rank of a per-class scorer: add --scorer per_class, or drop it.")
    if settings.label_descriptions and settings.pooling != "label_attention":
        raise TrainingError("--label-descriptions computes label-attention queries: drop it, or --pooling mean.")
    if settings.label_residual_dropout is not None and not settings.label_descriptions:
        raise TrainingError(
            "--label-residual-dropout acts on queries computed from descriptions: add --label-descriptions, or drop it."
        )
    if settings.untrained_class_offset is not None and not settings.label_descriptions:
        raise TrainingError(
            "--untrained-class-offset acts on classes known by their descriptions: add --label-descriptions, or drop "
            "it."
        )
    if settings.distill_weight is not None and not settings.distill_from:
        raise TrainingError("--distill-weight weighs the teachers' targets: add --distill-from, or drop it.")
    for option, names in (("--distill-from", settings.distill_from), ("--hierarchy-levels", settings.hierarchy_levels)):
        if names is not None and not all(names):
            raise TrainingError(f"{option} lists an empty name ('{','.join(names)}'): drop the comma too many.")
    if not backbones.is_backbone(settings.backbone):
        raise TrainingError(backbones.unknown_backbone_message(settings.backbone))
    if settings.encoder_layers is not None:
        check_encoder_layers(settings)


def check_encoder_layers(settings: TrainSettings) -> None:
    """`--encoder-layers` keeps the first layers of an encoder: refused for the embedding backbone, and beyond the
    encoder's own count (the config's rule, read from the encoder folder's config.json: no weights are loaded)."""
    if backbones.backbone_kind(settings.backbone) != "encoder":
        raise TrainingError(
            f"--encoder-layers keeps the first layers of an encoder, and --backbone {settings.backbone} has none: "
            "add --backbone minilm (or an encoder folder), or drop the option."
        )
    from transformers import AutoConfig

    from configuration_labelattn import encoder_layers_problem

    encoder = AutoConfig.from_pretrained(backbones.encoder_path(settings.backbone))
    if (problem := encoder_layers_problem(settings.encoder_layers, encoder)) is not None:
        raise TrainingError(f"--encoder-layers {problem}.")


def check_numbers(settings: TrainSettings) -> None:
    """Every numeric option finite and in its range, before anything is built (a NaN learning rate would train
    a NaN model). The model's own rules (the token context's width, a dropout probability) are the config's
    (`configuration_labelattn`), said here with the option's name."""
    # Imported here: the config imports transformers, and `labelattn --help` imports this module.
    from configuration_labelattn import dropout_problem, token_context_width_problem

    def refuse(name: str, what: str) -> None:
        raise TrainingError(f"--{name.replace('_', '-')} must be {what}, got {getattr(settings, name)}.")

    def refuse_if(name: str, problem_of) -> None:  # a rule of the config, said with the option's name
        problem = problem_of(getattr(settings, name))
        if problem is not None:
            raise TrainingError(f"--{name.replace('_', '-')} {problem}.")

    for name in AT_LEAST_ONE:
        if getattr(settings, name) is not None and getattr(settings, name) < 1:
            refuse(name, "at least 1")
    refuse_if("token_context_width", token_context_width_problem)
    for name in ABOVE_ZERO:
        if not (math.isfinite(getattr(settings, name)) and getattr(settings, name) > 0):
            refuse(name, "a finite number above 0")
    if not (math.isfinite(settings.weight_decay) and settings.weight_decay >= 0):
        refuse("weight_decay", "a finite number, 0 or above")
    if not 0 <= settings.warmup_ratio < 1:
        refuse("warmup_ratio", "in [0, 1)")
    if settings.label_smoothing is not None and not 0 <= settings.label_smoothing < 1:
        refuse("label_smoothing", "in [0, 1)")
    if settings.ema_decay is not None and not 0 <= settings.ema_decay < 1:
        refuse("ema_decay", "in [0, 1)")
    if settings.distill_weight is not None and not 0 < settings.distill_weight <= 1:
        refuse("distill_weight", "in (0, 1]")
    refuse_if("classifier_dropout", dropout_problem)
    if settings.label_residual_dropout is not None:
        refuse_if("label_residual_dropout", dropout_problem)
    if settings.untrained_class_offset is not None and not math.isfinite(settings.untrained_class_offset):
        refuse("untrained_class_offset", "a finite number")


def many_classes_note(settings: TrainSettings, num_classes: int) -> str | None:
    """What a run of `MANY_CLASSES` or more classes is told when it starts: the defaults its class count gave it, and,
    on the embedding backbone's full-width head, the fast recipe. None for fewer classes."""
    if num_classes < MANY_CLASSES:
        return None
    applied = {name: getattr(settings, name) for name in sorted(settings.by_class_count)}
    given = typed_options({name: value for name, value in applied.items() if value != FEW_CLASS_DEFAULTS[name]})
    note = f"note: {num_classes:,} classes: the many-class defaults apply ({given})." if given else ""
    full_width = settings.num_attention_heads == DEFAULT_ATTENTION_HEADS and settings.attention_key_size is None
    full_width &= settings.scorer == "per_class" and settings.scorer_rank is None  # the fast recipe's rank needs it
    if full_width and backbones.backbone_kind(settings.backbone) == "embedding" and settings.pooling != "mean":
        note += (
            f" Faster still: `{FAST_RECIPE}` trained ICD-10-CM in 0.4x the time for 0.7 points of top-1 "
            "(docs/many-classes.md, 'Which command at many classes')."
        )
    return note.strip() or None


def label_smoothing(settings: TrainSettings, multi_label: bool) -> float:
    """The share of each target spread over the classes: `--label-smoothing`, or `DEFAULT_LABEL_SMOOTHING` for
    single-label data and 0 for multi-label data, whose binary cross-entropy it does not apply to (refused there)."""
    if not multi_label:
        return DEFAULT_LABEL_SMOOTHING if settings.label_smoothing is None else settings.label_smoothing
    if settings.label_smoothing:
        raise TrainingError(
            "--label-smoothing spreads a single label's target over the classes, and this data has a set of labels "
            "per row (each class a yes/no decision): drop the option."
        )
    return 0.0


def check_max_length(settings: TrainSettings, tokenizer) -> None:
    """A text must keep at least one token of its own besides the special ones the tokenizer adds."""
    shortest = tokenizer.num_special_tokens_to_add() + 1
    if settings.max_length < shortest:
        raise TrainingError(
            f"--max-length must be at least {shortest} (the tokenizer adds {shortest - 1} special tokens to every "
            f"text), got {settings.max_length}."
        )


def settings_of(settings: TrainSettings) -> dict:
    """The options that decide the trained weights, as JSON values; paths normalised, so that `./data.csv` and
    `data.csv` are the same setting (not made absolute: the file goes to the Hub with the model)."""
    recorded = {}
    for name, value in asdict(settings).items():
        if name in NOT_SETTINGS:
            continue
        if name in PATH_SETTINGS and value is not None:
            value = [os.path.normpath(path) for path in value] if isinstance(value, list) else os.path.normpath(value)
        recorded[name] = value
    return recorded


def saved_settings(folder: Path) -> dict | None:
    path = folder / SETTINGS_FILE
    return {**SAVED_BEFORE, **json.loads(path.read_text())} if path.is_file() else None


def folder_settings(folder: Path) -> TrainSettings | None:
    """The settings of the run that trained `folder` (its training_args.json), with the command that trains it again
    into `folder`; None for a folder that no `labelattn train` wrote."""
    saved = saved_settings(folder)
    if saved is None:
        return None
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([])  # the options that are not settings (resume, licence, ...) at their defaults
    for name, value in {**saved, "output_dir": Path(folder)}.items():
        setattr(args, name, value)
    return TrainSettings.from_args(args)


def run_inputs(settings: TrainSettings) -> dict[str, Path]:
    """The files and folders the run reads, by option: `--overwrite` must never delete them."""
    given = {"--data": settings.data, "--validation-data": settings.validation_data, "--test-data": settings.test_data}
    given |= {"--backbone": settings.backbone, "--label-file": settings.label_file}
    given |= {f"--distill-from {folder}": folder for folder in settings.distill_from or ()}
    return {option: Path(value) for option, value in given.items() if value and Path(value).exists()}


def check_output_dir(settings: TrainSettings) -> None:
    """Refuse, before the data is read, what no class count changes: to overwrite another model or the user's
    files, to resume a folder without a checkpoint or a run, and to restart over the checkpoints of an unfinished
    run. `check_saved_settings` compares the settings once the class count has resolved them."""
    folder: Path = settings.output_dir
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"--output-dir {folder} is a file; give a folder.")
    saved = saved_settings(folder)
    if settings.resume:
        checkpoints.resumable_checkpoint(folder, warn=lambda message: None)  # refuses a folder without one
        if saved is None:
            raise TrainingError(
                f"--resume: {folder} holds no {SETTINGS_FILE}, so its settings are unknown; "
                "train into another --output-dir."
            )
        return
    if settings.overwrite:
        checkpoints.overwritable(folder, run_inputs(settings))  # refuses to delete what is not the folder's own
        return
    if not folder.exists() or not any(p.name != checkpoints.LOCK for p in folder.iterdir()):
        return
    unfinished = checkpoints.unfinished_checkpoint(folder)
    if unfinished is not None:
        raise TrainingError(
            f"{folder}: this folder holds checkpoint {checkpoints.step_of(unfinished)} of an unfinished run: "
            "add --resume to continue or --overwrite to start again."
        )
    if saved is None:
        raise FileExistsError(
            f"{folder} already holds files that are not a labelattn training run: pass --overwrite to replace them "
            "or choose another --output-dir."
        )


def check_saved_settings(settings: TrainSettings) -> None:
    """Refuse, once the data is read (the class count decides some settings), to resume a run with other settings
    or to train over a finished run of other settings. `check_output_dir` has refused the rest."""
    folder: Path = settings.output_dir
    saved = saved_settings(folder)
    if saved is None or (settings.overwrite and not settings.resume):
        return
    differing = {k: (saved.get(k), v) for k, v in settings_of(settings).items() if saved.get(k) != v}
    if differing and settings.resume:
        raise TrainingError(
            f"--resume: {folder} was trained with other settings (saved, now): {differing}; "
            "resume with the same options or train into another --output-dir."
        )
    if differing:
        raise FileExistsError(
            f"{folder} already holds a model trained with other settings: pass --overwrite to replace it, --resume "
            "to continue its training, or choose another --output-dir."
        )


def launch_of(accelerator) -> dict:
    """What decides the data each process sees and the arithmetic, besides the command's options."""
    return {
        "num_processes": accelerator.num_processes,
        "distributed_type": str(accelerator.distributed_type),
        "mixed_precision": accelerator.mixed_precision,
        "gradient_accumulation_steps": accelerator.gradient_accumulation_steps,
    }


def check_launch(accelerator, saved: dict, settings: TrainSettings) -> None:
    """A resumed run must be launched as the interrupted one (`saved`): with another process count each process
    would skip a wrong number of rows, and the schedule would be counted in other units."""
    differing = {k: (saved.get(k), v) for k, v in launch_of(accelerator).items() if saved.get(k) != v}
    if differing:
        raise TrainingError(
            f"--resume: {settings.output_dir} was launched otherwise (saved, now): {differing}; launch it as before "
            "(same accelerate launch options and number of processes)."
        )
