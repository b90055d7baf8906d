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
(`scores.score_and_calibrate`): the temperature and the coding thresholds fitted again on the validation split, the
figures, the card, and `averaged.json`, which names the runs with each one's validation scores beside the average's
(a run that pulls the average down shows there). Written by hand: no library averages saved training folders or
checks that they may be averaged (`torch.optim.swa_utils` averages one run's weights along its way).
"""

import argparse
import dataclasses
import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from labelattn.arguments import add_overwrite_argument
from labelattn.training import checkpoints
from labelattn.training.arguments import DEFAULT_LICENSE
from labelattn.training.settings import SETTINGS_FILE, TrainSettings, folder_settings, settings_of

if TYPE_CHECKING:  # torch loads inside `run`, so that `labelattn --help` stays fast
    import torch

WEIGHTS = "model.safetensors"
# Settings that only the training chose: the data order and dropout (--seed), the optimiser, its schedule and
# precision, the epochs, the teachers. Runs may differ in them (Wortsman et al. average runs of several learning
# rates); the data, the model and its initial values (`TrainSettings.initial_seed`) must be the same.
MAY_DIFFER = {"seed", "init_seed", "epochs", "batch_size", "group_by_length", "learning_rate", "head_learning_rate"}
MAY_DIFFER |= {"weight_decay", "warmup_ratio", "gradient_accumulation_steps", "max_grad_norm", "label_smoothing"}
MAY_DIFFER |= {"ema_decay", "distill_from", "distill_weight", "mixed_precision", "classifier_dropout"}
MAY_DIFFER |= {"freeze_embeddings", "label_residual_dropout"}
# Keys of config.json that a run's end sets or that name its making, not the model: the rest must be equal.
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
        parser, "what --output-dir holds (another model): deleted, then written; refused when it holds anything else"
    )


def read_runs(folders: list[Path]) -> list[TrainSettings]:
    """Each folder's training settings, once each has been checked to be a finished run that can be averaged with
    the first: the same settings but `MAY_DIFFER`, the same initial values, config and tokenizer."""
    if len(folders) < 2:
        raise AverageError(
            f"labelattn average needs two runs or more, got {len(folders)}: add the other runs' folders."
        )
    runs = []
    for folder in folders:
        settings = folder_settings(folder) if folder.is_dir() else None
        if settings is None or not (folder / WEIGHTS).is_file():
            raise AverageError(
                f"{folder} is not the folder of a finished `labelattn train` run (it needs {SETTINGS_FILE} and "
                f"{WEIGHTS}): give the --output-dir of a run that finished."
            )
        runs.append(settings)
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
    return {key: value for key, value in values.items() if key not in ignored}


def check_output_dir(output_dir: Path, folders: list[Path], overwrite: bool) -> None:
    """The averaged model's folder: new or empty, or with --overwrite a model folder that holds none of the runs."""
    if output_dir.exists() and not output_dir.is_dir():
        raise AverageError(f"--output-dir {output_dir} is a file; give a folder.")
    if overwrite:  # refuses to delete a run's folder, or anything not a model folder's own
        checkpoints.overwritable(output_dir, run_inputs(folders))
    elif output_dir.is_dir() and any(entry.name != checkpoints.LOCK for entry in output_dir.iterdir()):
        raise AverageError(
            f"{output_dir} already holds files: pass --overwrite to replace them (only a model folder's own files), "
            "or choose another --output-dir."
        )


def run_inputs(folders: list[Path]) -> dict[str, Path]:
    """The runs' folders, as `checkpoints.overwritable` names what it must not delete."""
    return {f"RUN {folder}": folder for folder in folders}


def average_weights(folders: list[Path]) -> dict[str, "torch.Tensor"]:
    """The mean of the runs' weights, computed in float64 and stored in each tensor's type; a tensor that is not a
    float (a count, an index) must be the same in every run, and is kept."""
    import torch

    states = [load_weights(folder) for folder in folders]
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
    run's validation scores), and the model folder."""
    folders, output_dir = list(args.runs), args.output_dir
    runs = read_runs(folders)
    check_output_dir(output_dir, folders, args.overwrite)
    command = shlex.join(["labelattn", "average", *map(str, folders), "--output-dir", str(output_dir)])
    settings = dataclasses.replace(
        runs[0], output_dir=output_dir, command_line=command, license=run_license(folders[0])
    )
    with checkpoints.locked(output_dir):
        if args.overwrite:
            checkpoints.delete(checkpoints.overwritable(output_dir, run_inputs(folders)))
        average(folders, runs, settings)
    return 0


def run_license(folder: Path) -> str:
    """The licence the first run's card names (the option that set it is not among the saved settings)."""
    from huggingface_hub import ModelCard

    card = folder / "README.md"
    return (ModelCard.load(card).data.license if card.is_file() else None) or DEFAULT_LICENSE


def average(folders: list[Path], runs: list[TrainSettings], settings: TrainSettings) -> None:
    """Score each run and the mean of their weights on the runs' data, calibrate the mean, and write its folder."""
    from accelerate import Accelerator

    from explainers import load_classifier
    from labelattn.training.build import tokenized_loaders
    from labelattn.training.card import write_model_card
    from labelattn.training.coding_report import format_report, write_report
    from labelattn.training.scores import format_scores, load_metrics, predict_split, score_and_calibrate, split_scores
    from labelattn.training.setup import load_training_data

    averaged = average_weights(folders)
    data = load_training_data(settings)
    data = dataclasses.replace(data, splits={split: data.splits[split] for split in ("validation", "test")})
    model, tokenizer = load_classifier(folders[0])  # checked as every command loads a model
    model.config.temperature = None  # the logits before any temperature: the average's is fitted on them
    max_length = min(settings.max_length, model.config.max_seq_length)
    loaders = tokenized_loaders(data, tokenizer, settings, max_length, settings.seed)
    accelerator = Accelerator(mixed_precision="no")  # the scores and the temperature of the saved, float32 model
    model, validation_loader, test_loader = accelerator.prepare(model, loaders["validation"], loaders["test"])
    loaders, metrics = {"validation": validation_loader, "test": test_loader}, load_metrics(data.multi_label)
    unwrapped = accelerator.unwrap_model(model)
    accelerator.print(f"Scoring the {len(folders)} runs on the validation split, then their average on both splits.")
    run_scores = {}
    for folder in folders:
        unwrapped.load_state_dict(load_weights(folder), strict=True)
        predicted = predict_split(model, loaders["validation"], accelerator, data.multi_label)
        run_scores[str(folder)] = split_scores(metrics, *predicted, data.multi_label, data.label_names, data.hierarchy)
        accelerator.print(f"{folder}: validation {format_scores(run_scores[str(folder)])}")
    unwrapped.load_state_dict(averaged, strict=True)
    scores, report = score_and_calibrate(model, loaders, accelerator, data, metrics)
    output_dir = settings.output_dir
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


def load_weights(folder: Path) -> dict[str, "torch.Tensor"]:
    """A run's weights, by name."""
    from safetensors.torch import load_file

    return load_file(folder / WEIGHTS)
