"""`labelattn average`: one model from the mean of the weights of runs that started from the same initial values.

    labelattn train --data icd10-cm --backbone minilm ... --init-seed 0 --seed 0 --output-dir models/icd-0
    labelattn train --data icd10-cm --backbone minilm ... --init-seed 0 --seed 1 --output-dir models/icd-1
    labelattn average models/icd-0 models/icd-1 --output-dir models/icd

Runs that start from the same weights and see the data in different orders end near each other, where the mean of
their weights is often a better model than either, at the cost of one model to run (a "model soup", Wortsman et al.,
2022): two such runs of ICD-10-CM's accurate recipe averaged to 0.9418 test top-1, against 0.9414 and 0.9405
(docs/many-classes.md). Runs whose heads started apart end with each class's scorer pointing elsewhere, and their mean
is worse than either: refused. What may differ between the runs is what their training chose (`MAY_DIFFER`); the
data, the model and its initial values must be the same, and every check runs before anything is loaded.

The average is then scored, calibrated and written as `labelattn train` writes its model at its end
(`coding_report.score_and_calibrate`): the temperature and the coding thresholds fitted again on the validation
split, the figures, the card, and `averaged.json`, which names the runs with each one's validation scores beside
the average's (a run that pulls the average down shows there). The data is read as the runs name it (a relative
path from the working directory, as `--resume` reads it), and must still be theirs: the classes of their config,
the split hashes of their card (which hash the rows' ids: a file of as many rows, edited in place, passes). Nothing
in `--output-dir` is deleted before all of that has worked. One process: not under `accelerate launch`.

Written by hand: no library averages saved training folders or checks that they may be averaged
(`torch.optim.swa_utils` averages one run's weights along its way).
"""

import argparse
import dataclasses
import json
import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from labelattn.arguments import add_overwrite_argument
from labelattn.training import checkpoints
from labelattn.training.arguments import DEFAULT_LICENSE
from labelattn.training.settings import SETTINGS_FILE, TrainSettings, folder_settings, run_inputs, settings_of

if TYPE_CHECKING:  # torch loads inside `run`, so that `labelattn --help` stays fast
    import torch

    from labelattn.data.records import LabelledData

WEIGHTS = "model.safetensors"
# Settings that only the training chose: the data order and dropout (--seed), the optimiser, its schedule and
# precision, the epochs, the teachers. Runs may differ in them (Wortsman et al. average runs of several learning
# rates); the data, the model and its initial values (`TrainSettings.initial_seed`) must be the same.
MAY_DIFFER = {"seed", "init_seed", "epochs", "batch_size", "group_by_length", "learning_rate", "head_learning_rate"}
MAY_DIFFER |= {"weight_decay", "warmup_ratio", "gradient_accumulation_steps", "max_grad_norm", "label_smoothing"}
MAY_DIFFER |= {"ema_decay", "distill_from", "distill_weight", "mixed_precision", "classifier_dropout"}
MAY_DIFFER |= {"freeze_embeddings", "label_residual_dropout"}
# Keys of config.json that the end of a run sets, that name its making, or that are dropout rates (`MAY_DIFFER`):
# the rest must be equal.
NOT_THE_MODEL = {"temperature", "transformers_version", "_name_or_path", "classifier_dropout", "label_residual_dropout"}


class AverageError(ValueError):
    """Runs that cannot be averaged, or an output folder that must not be written; the message says what to do."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="The folders of two runs or more of `labelattn train` that share --init-seed (and all but the "
        "training's settings: seed, learning rates, epochs, ...).",
    )
    parser.add_argument("--output-dir", type=Path, required=True, help="Where the averaged model goes.")
    add_overwrite_argument(
        parser,
        "what --output-dir holds (another model): deleted once the average is computed, then written; refused when "
        "it holds anything else, or a run, or a file the runs read",
    )


def read_run(folder: Path) -> TrainSettings:
    """The settings of a finished `labelattn train` run's folder (refused: any other folder, or a run in progress)."""
    try:
        settings = folder_settings(folder) if folder.is_dir() else None
    except ValueError as error:  # a damaged training_args.json, or settings no run could have had
        raise AverageError(f"{folder}/{SETTINGS_FILE}: {error}") from None
    if settings is None or not (folder / WEIGHTS).is_file():
        raise AverageError(
            f"{folder} is not the folder of a finished `labelattn train` run (it needs {SETTINGS_FILE} and "
            f"{WEIGHTS}): give the --output-dir of a run that finished."
        )
    if checkpoints.unfinished_checkpoint(folder) is not None:
        raise AverageError(
            f"{folder} holds the checkpoints of a run that has not finished: its {WEIGHTS} may be an older model's. "
            "Let the run finish (or resume it) first."
        )
    return settings


def read_runs(folders: list[Path]) -> list[TrainSettings]:
    """Each folder's training settings, once each has been checked to be a finished run that can be averaged with
    the first: the same settings but `MAY_DIFFER` (and not all the same: one run twice), the same initial values,
    config and tokenizer."""
    if len(folders) < 2:
        raise AverageError(f"labelattn average needs two runs or more, got {len(folders)}: add the others' folders.")
    runs = [read_run(folder) for folder in folders]
    resolved = [folder.resolve() for folder in folders]
    if len(set(resolved)) < len(resolved):
        raise AverageError("A run is listed twice: give each run's folder once (its weights would count twice).")
    first, first_saved = folders[0], settings_of(runs[0])
    for folder, settings in zip(folders[1:], runs[1:], strict=True):
        saved = settings_of(settings)
        differing = {k: (first_saved[k], v) for k, v in saved.items() if k not in MAY_DIFFER and first_saved[k] != v}
        if differing:
            raise AverageError(
                f"{first} and {folder} were trained with other data or models ({first}'s, {folder}'s): {differing}; "
                "only runs of one data set and one model can be averaged."
            )
        if saved == first_saved:
            raise AverageError(
                f"{first} and {folder} were trained with the same settings and --seed: they are one run twice (or a "
                "copy), whose average is that run. Average runs of different --seed."
            )
        if settings.initial_seed != runs[0].initial_seed:
            raise AverageError(
                f"{first} and {folder} started from different initial weights (those of seeds "
                f"{runs[0].initial_seed} and {settings.initial_seed}): the mean of runs that started apart is worse "
                "than either. Average runs trained with one --init-seed (and different --seed)."
            )
        for name, ignored in (("config.json", NOT_THE_MODEL), ("tokenizer.json", set())):
            if read_json(first / name, ignored) != read_json(folder / name, ignored):
                raise AverageError(
                    f"{first}/{name} and {folder}/{name} differ: the runs are not of one model; train them again, "
                    "or average others."
                )
    return runs


def read_json(path: Path, ignored: set[str]) -> dict:
    """The JSON object of `path` without the keys `ignored`; an error naming the file where it is not one."""
    try:
        values = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise AverageError(f"{path} could not be read as JSON ({error}): is the run's folder complete?") from None
    if not isinstance(values, dict):
        raise AverageError(f"{path} holds no JSON object: is the run's folder complete?")
    return {key: value for key, value in values.items() if key not in ignored}


def protected(folders: list[Path], runs: list[TrainSettings]) -> dict[str, Path]:
    """What --overwrite must not delete: the runs' folders and every file or folder they read (data, backbone,
    teachers), as `checkpoints.overwritable` names them."""
    inputs = {f"RUN {folder}": folder for folder in folders}
    for folder, settings in zip(folders, runs, strict=True):
        inputs |= {f"{option} of {folder}": path for option, path in run_inputs(settings).items()}
    return inputs


def check_output_dir(output_dir: Path, inputs: dict[str, Path], overwrite: bool) -> None:
    """The averaged model's folder: new or empty, or with --overwrite a model folder that holds none of `inputs`."""
    if output_dir.exists() and not output_dir.is_dir():
        raise AverageError(f"--output-dir {output_dir} is a file; give a folder.")
    if overwrite:  # refuses to delete what the runs are or read, or anything not a model folder's own
        checkpoints.overwritable(output_dir, inputs)
    elif output_dir.is_dir() and any(entry.name != checkpoints.LOCK for entry in output_dir.iterdir()):
        raise AverageError(
            f"{output_dir} already holds files: pass --overwrite to replace them (only a model folder's own files), "
            "or choose another --output-dir."
        )


def check_data(data: "LabelledData", folders: list[Path], label_names: list[str]) -> None:
    """The data read now must be the runs': their classes, in their order, and the splits their cards record."""
    from labelattn.training.card import recorded_splits

    if data.label_names != label_names:
        raise AverageError(
            f"The data's classes are not the runs' ({len(data.label_names)} now, {len(label_names)} in their "
            "config): the data changed since they were trained. Average them on the data they were trained on."
        )
    for folder in folders:
        recorded = recorded_splits(folder)
        differing = [
            split for split, digest in recorded.items() if data.split_record["ids_sha256"].get(split) != digest
        ]
        if differing:
            raise AverageError(
                f"The {', '.join(differing)} split(s) of the data read now are not those of {folder} (the ids hash in "
                "its README.md differs): the data changed, or a relative --data path was read from another working "
                "directory. Run labelattn average where the runs were trained, on their data."
            )


def load_weights(folder: Path) -> dict[str, "torch.Tensor"]:
    """A run's weights, by name; an error naming the file where they cannot be read."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(folder / WEIGHTS)
    except (OSError, SafetensorError) as error:
        raise AverageError(f"{folder / WEIGHTS} could not be read ({error}): the run's weights are damaged.") from None


def average_weights(states: list[dict[str, "torch.Tensor"]]) -> dict[str, "torch.Tensor"]:
    """The mean of the runs' weights (`load_weights` of each), computed in float64 and stored in each tensor's type; a
    tensor that is not a float (a count, an index) must be the same in every run, and is kept."""
    import torch

    averaged = {}
    for name, first in states[0].items():
        tensors = [state.get(name) for state in states]
        if any(t is None or t.shape != first.shape or t.dtype != first.dtype for t in tensors):
            raise AverageError(f"The runs' {WEIGHTS} differ in {name}: they are not weights of one model.")
        if first.is_floating_point():
            averaged[name] = (sum(t.double() for t in tensors) / len(tensors)).to(first.dtype)
        elif all(torch.equal(t, first) for t in tensors):
            averaged[name] = first
        else:
            raise AverageError(f"The runs' {WEIGHTS} hold different values of {name}, which cannot be averaged.")
    if any(set(state) != set(averaged) for state in states):
        raise AverageError(f"The runs' {WEIGHTS} hold different tensors: they are not weights of one model.")
    if not all(bool(torch.isfinite(t).all()) for t in averaged.values() if t.is_floating_point()):
        raise AverageError("Some averaged weights are not finite: a run's weights are damaged; average the others.")
    return averaged


def run(args: argparse.Namespace) -> int:
    """`labelattn average` as parsed: every check, then the mean of the weights, its scores and calibration (and each
    run's validation scores); the output folder emptied (--overwrite) and written only then."""
    from labelattn.training.card import recorded_license

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise AverageError("labelattn average runs in one process: run it without accelerate launch or torchrun.")
    folders, output_dir = list(args.runs), args.output_dir
    runs = read_runs(folders)
    inputs = protected(folders, runs)
    check_output_dir(output_dir, inputs, args.overwrite)
    command = shlex.join(["labelattn", "average", *map(str, folders), "--output-dir", str(output_dir)])
    licence = recorded_license(folders[0]) or DEFAULT_LICENSE
    settings = dataclasses.replace(runs[0], output_dir=output_dir, command_line=command, license=licence)
    with checkpoints.locked(output_dir):
        average(folders, runs, settings, inputs if args.overwrite else None)
    return 0


def average(folders: list[Path], runs: list[TrainSettings], settings: TrainSettings, overwrite: dict | None) -> None:
    """Score each run and the mean of their weights on the runs' data, calibrate the mean, and write its folder
    (emptied first when `overwrite` holds the paths it must keep)."""
    from accelerate import Accelerator

    from explainers import load_classifier
    from labelattn.training.build import tokenized_loaders
    from labelattn.training.card import write_model_card
    from labelattn.training.coding_report import format_report, score_and_calibrate, write_report
    from labelattn.training.scores import format_scores, load_metrics, predict_split, split_scores
    from labelattn.training.setup import load_training_data

    states = [load_weights(folder) for folder in folders]  # read once: averaged, then each run scored
    averaged = average_weights(states)
    model, tokenizer = load_classifier(folders[0])  # checked as every command loads a model
    data = load_training_data(settings)
    check_data(data, folders, [model.config.id2label[i] for i in range(model.config.num_labels)])
    data = dataclasses.replace(data, splits={split: data.splits[split] for split in ("validation", "test")})
    model.config.temperature = None  # the logits before any temperature: the average's is fitted on them
    max_length = min(settings.max_length, model.config.max_seq_length)
    loaders = tokenized_loaders(data, tokenizer, settings, max_length, settings.seed)
    accelerator = Accelerator(mixed_precision="no")  # the scores and the temperature of the saved, float32 model
    model, validation_loader, test_loader = accelerator.prepare(model, loaders["validation"], loaders["test"])
    loaders, metrics = {"validation": validation_loader, "test": test_loader}, load_metrics(data.multi_label)
    unwrapped = accelerator.unwrap_model(model)
    accelerator.print(f"Scoring the {len(folders)} runs on the validation split, then their average on both splits.")
    run_scores = {}
    for folder, state in zip(folders, states, strict=True):
        unwrapped.load_state_dict(state, strict=True)
        predicted = predict_split(model, loaders["validation"], accelerator, data.multi_label)
        run_scores[str(folder)] = split_scores(metrics, *predicted, data.multi_label, data.label_names, data.hierarchy)
        accelerator.print(f"{folder}: validation {format_scores(run_scores[str(folder)])}")
    unwrapped.load_state_dict(averaged, strict=True)
    scores, report = score_and_calibrate(model, loaders, accelerator, data, metrics)
    output_dir = settings.output_dir
    if overwrite is not None:
        checkpoints.delete(checkpoints.overwritable(output_dir, overwrite))
    unwrapped.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    write_report(output_dir, report)
    write_model_card(output_dir, data, settings, scores, coding=report.summary, averaged=runs)
    record = {"runs": [{"folder": str(f), "validation": run_scores[str(f)]} for f in folders], "average": scores}
    (output_dir / checkpoints.AVERAGED_FILE).write_text(json.dumps(record, indent=2) + "\n")
    accelerator.print(f"average: validation {format_scores(scores['validation'])}")
    accelerator.print(f"average: test {format_scores(scores['test'])}")
    accelerator.print(format_report(report.summary))
    accelerator.print(f"Saved the averaged model to {output_dir}")
