"""The settings of a training run: the defaults that depend on the backbone, the checks of the options, the
settings recorded in the output folder (training_args.json) and the rules of resuming, overwriting and launching.

Everything here runs before any model, process group or file exists, so that a user's mistake costs nothing.
"""

import argparse
import json
import math
import os
from pathlib import Path

from labelattn.training import backbones, checkpoints
from labelattn.training.arguments import DEFAULT_RESIDUAL_DROPOUT

SETTINGS_FILE = "training_args.json"
# Options that do not change the trained weights: a run may be resumed with other values.
NOT_SETTINGS = {"resume", "overwrite", "push_to_hub", "private", "license", "checkpoint_every", "run", "command"}
NOT_SETTINGS |= {"command_line", "output_dir"}  # the folder holding the settings is not one of them
PATH_SETTINGS = {"data", "validation_data", "test_data", "backbone", "label_file"}
# Numeric options and the values they take (every float must also be finite).
AT_LEAST_ONE = ("epochs", "batch_size", "gradient_accumulation_steps", "checkpoint_every", "hidden_size")
AT_LEAST_ONE += ("num_attention_heads", "max_length", "attention_key_size")  # attention_key_size: None or >= 1
AT_LEAST_ONE += ("scorer_rank",)  # None or >= 1
# What a run's saved settings meant for options added since: runs made before them compare as these values.
SAVED_BEFORE = {"scorer": "shared", "scorer_rank": None}
ABOVE_ZERO = ("learning_rate", "head_learning_rate", "max_grad_norm", "initializer_range")


class TrainingError(ValueError):
    """Training options that cannot work together, or an output folder that must not be overwritten."""


def resolve_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the options whose default depends on the backbone, and check the numbers."""
    kind = backbones.backbone_kind(args.backbone)
    if args.learning_rate is None:
        args.learning_rate = backbones.default_learning_rate(args.backbone)
    if args.head_learning_rate is None:
        args.head_learning_rate = 1e-3 if kind == "encoder" else args.learning_rate
    if args.freeze_embeddings is None:
        args.freeze_embeddings = kind == "embedding" and args.embeddings != "random"
    check_numbers(args)
    if args.scorer_rank is not None and args.scorer != "per_class":
        raise TrainingError("--scorer-rank sets the rank of a per-class scorer: add --scorer per_class, or drop it.")
    if args.label_descriptions and args.pooling != "label_attention":
        raise TrainingError("--label-descriptions computes label-attention queries: drop it, or --pooling mean.")
    if args.label_residual_dropout is not None and not args.label_descriptions:
        raise TrainingError(
            "--label-residual-dropout acts on queries computed from descriptions: add --label-descriptions, or drop it."
        )
    if args.label_descriptions and args.label_residual_dropout is None:
        args.label_residual_dropout = DEFAULT_RESIDUAL_DROPOUT
    if not backbones.is_backbone(args.backbone):
        raise TrainingError(backbones.unknown_backbone_message(args.backbone))
    return args


def check_numbers(args: argparse.Namespace) -> None:
    """Every numeric option finite and in its range, before anything is built (a NaN learning rate would train
    a NaN model)."""

    def refuse(name: str, what: str) -> None:
        raise TrainingError(f"--{name.replace('_', '-')} must be {what}, got {getattr(args, name)}.")

    for name in AT_LEAST_ONE:
        if getattr(args, name) is not None and getattr(args, name) < 1:
            refuse(name, "at least 1")
    if args.token_context_width < 0 or (args.token_context_width % 2 == 0 and args.token_context_width):
        refuse("token_context_width", "0 (none) or an odd width such as 3")
    for name in ABOVE_ZERO:
        if not (math.isfinite(getattr(args, name)) and getattr(args, name) > 0):
            refuse(name, "a finite number above 0")
    if not (math.isfinite(args.weight_decay) and args.weight_decay >= 0):
        refuse("weight_decay", "a finite number, 0 or above")
    if not 0 <= args.warmup_ratio < 1:
        refuse("warmup_ratio", "in [0, 1)")
    if not 0 <= args.classifier_dropout < 1:
        refuse("classifier_dropout", "in [0, 1)")
    if args.label_residual_dropout is not None and not 0 <= args.label_residual_dropout < 1:
        refuse("label_residual_dropout", "in [0, 1)")


def check_max_length(args: argparse.Namespace, tokenizer) -> None:
    """A text must keep at least one token of its own besides the special ones the tokenizer adds."""
    shortest = tokenizer.num_special_tokens_to_add() + 1
    if args.max_length < shortest:
        raise TrainingError(
            f"--max-length must be at least {shortest} (the tokenizer adds {shortest - 1} special tokens to every "
            f"text), got {args.max_length}."
        )


def settings_of(args: argparse.Namespace) -> dict:
    """The options that decide the trained weights, as JSON values; paths normalised, so that `./data.csv` and
    `data.csv` are the same setting (not made absolute: the file goes to the Hub with the model)."""
    settings = {}
    for name, value in vars(args).items():
        if name in NOT_SETTINGS:
            continue
        if name in PATH_SETTINGS and value is not None:
            value = os.path.normpath(value)
        settings[name] = str(value) if isinstance(value, Path) else value
    return settings


def saved_settings(folder: Path) -> dict | None:
    path = folder / SETTINGS_FILE
    return {**SAVED_BEFORE, **json.loads(path.read_text())} if path.is_file() else None


def run_inputs(args: argparse.Namespace) -> dict[str, Path]:
    """The files and folders the run reads, by option: `--overwrite` must never delete them."""
    given = {"--data": args.data, "--validation-data": args.validation_data, "--test-data": args.test_data}
    given |= {"--backbone": args.backbone, "--label-file": args.label_file}
    return {option: Path(value) for option, value in given.items() if value and Path(value).exists()}


def check_output_dir(args: argparse.Namespace) -> None:
    """Refuse, before any work starts: to overwrite another model or the user's files, to resume what cannot be
    resumed, and to restart over the checkpoints of an unfinished run."""
    folder: Path = args.output_dir
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"--output-dir {folder} is a file; give a folder.")
    saved = saved_settings(folder)
    if args.resume:
        checkpoints.resumable_checkpoint(folder, warn=lambda message: None)  # refuses a folder without one
        differing = {k: (saved.get(k), v) for k, v in settings_of(args).items() if saved.get(k) != v} if saved else {}
        if saved is None or differing:
            raise TrainingError(
                f"--resume: {folder} was trained with other settings (saved, now): {differing or 'unknown'}; "
                "resume with the same options or train into another --output-dir."
            )
        return
    if args.overwrite:
        checkpoints.overwritable(folder, run_inputs(args))  # refuses to delete what is not the folder's own
        return
    if not folder.exists() or not any(p.name != checkpoints.LOCK for p in folder.iterdir()):
        return
    unfinished = checkpoints.unfinished_checkpoint(folder)
    if unfinished is not None:
        raise TrainingError(
            f"{folder}: this folder holds checkpoint {checkpoints.step_of(unfinished)} of an unfinished run: "
            "add --resume to continue or --overwrite to start again."
        )
    if saved != settings_of(args):
        what = "a model trained with other settings" if saved else "files that are not a labelattn training run"
        raise FileExistsError(
            f"{folder} already holds {what}: pass --overwrite to replace it, --resume to continue its training, "
            "or choose another --output-dir."
        )


def launch_of(accelerator) -> dict:
    """What decides the data each process sees and the arithmetic, besides the command's options."""
    return {
        "num_processes": accelerator.num_processes,
        "distributed_type": str(accelerator.distributed_type),
        "mixed_precision": accelerator.mixed_precision,
        "gradient_accumulation_steps": accelerator.gradient_accumulation_steps,
    }


def check_launch(accelerator, saved: dict, args: argparse.Namespace) -> None:
    """A resumed run must be launched as the interrupted one (`saved`): with another process count each process
    would skip a wrong number of rows, and the schedule would be counted in other units."""
    differing = {k: (saved.get(k), v) for k, v in launch_of(accelerator).items() if saved.get(k) != v}
    if differing:
        raise TrainingError(
            f"--resume: {args.output_dir} was launched otherwise (saved, now): {differing}; launch it as before "
            "(same accelerate launch options and number of processes)."
        )
