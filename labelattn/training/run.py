"""`labelattn train`: train a label-attention classifier with Accelerate, from one CPU to many GPUs.

    labelattn train                                   # TREC, embedding backbone -> models/trec-embedding
    labelattn train --data reviews.csv --backbone minilm --output-dir models/reviews
    accelerate launch -m labelattn train --data reviews.jsonl --backbone minilm --output-dir models/reviews

One code path for every set-up: `Accelerator` places the model, wraps it for DDP/FSDP/DeepSpeed when launched
so, accumulates gradients and runs mixed precision; nothing here names a device. `train` reads top to bottom as the
steps of a run, and this module holds the steps: start or resume, the training loop, its checkpoints, the final
scores and calibration, the saved model. The rest of `labelattn.training` has one module each: the options
(`arguments`), the checked settings the run reads past the command line (`settings.TrainSettings`, with the
defaults that depend on the backbone) and the rules of resuming (`settings`), the model and its loaders
(`build`), the prepared run (`setup`), the scores (`scores`), the temperature fitted on validation
(`calibration`), the calibration error and automatic coding rates it gives (`coding_report`), the teachers' targets
of `--distill-from` (`distillation`), the named backbones (`backbones`), the rules of the output folder
(`checkpoints`), and the named points of a run, where the fault-injection tests stop it (`events`).
"""

import argparse
import contextlib
import json
import os
from typing import TYPE_CHECKING

from labelattn.training import checkpoints
from labelattn.training.arguments import add_arguments
from labelattn.training.build import load_tokenizer
from labelattn.training.distillation import distillation_loss, load_teachers, pop_targets
from labelattn.training.scores import format_scores, predict_split, split_scores
from labelattn.training.settings import (
    SETTINGS_FILE,
    TrainingError,
    TrainSettings,
    check_launch,
    check_max_length,
    check_output_dir,
    check_saved_settings,
    label_smoothing,
    launch_of,
    many_classes_note,
    run_inputs,
    settings_of,
)
from labelattn.training.setup import Training, load_training_data, make_accelerator, set_up

if TYPE_CHECKING:  # matplotlib and scikit-learn load when a run reports, so that --help stays fast
    from labelattn.training.coding_report import CodingReport

# `labelattn.cli` reads the options of this command from here.
__all__ = ["add_arguments", "run"]


def start_fresh(run: Training) -> None:
    """A new run: the folder emptied if --overwrite, an empty checkpoint folder, the settings recorded."""
    if run.accelerator.is_main_process:
        if run.settings.overwrite:
            checkpoints.delete(checkpoints.overwritable(run.output_dir, run_inputs(run.settings)))
        checkpoints.start(run.output_dir)
        (run.output_dir / SETTINGS_FILE).write_text(json.dumps(settings_of(run.settings), indent=2) + "\n")
    run.progress.launch = launch_of(run.accelerator)
    run.accelerator.wait_for_everyone()


def resume(run: Training) -> None:
    """Load the newest checkpoint that verifies (warning about damaged newer ones, deleting them and any cut short)."""
    accelerator = run.accelerator
    checkpoint = checkpoints.resumable_checkpoint(run.output_dir, warn=accelerator.print)
    accelerator.wait_for_everyone()  # every process has chosen its checkpoint before any is deleted
    if accelerator.is_main_process:
        checkpoints.discard_after(run.output_dir, checkpoints.step_of(checkpoint))
    accelerator.load_state(str(checkpoint))
    check_launch(accelerator, run.progress.launch, run.settings)
    progress = run.progress
    accelerator.print(f"Resumed at step {progress.steps} (epoch {progress.epoch + 1}, batch {progress.batches}).")
    run.events("resumed", step=progress.steps)


def all_finite(accelerator, tensors) -> bool:
    """Whether every value of `tensors` is finite on every process (a collective: every process calls it)."""
    import torch

    finite = all(bool(torch.isfinite(t).all()) for t in tensors)
    return bool(accelerator.gather(torch.tensor([finite], device=accelerator.device)).all())


def diverged(run: Training, what: str, step: int) -> "TrainingError":
    kept = checkpoints.complete_checkpoints(run.output_dir)
    last = f"the last good checkpoint, {kept[-1]}, is kept" if kept else "no checkpoint had been saved yet"
    return TrainingError(
        f"{what} at step {step} (epoch {run.progress.epoch + 1}): training diverged, and no "
        f"model was saved; {last}. Lower --learning-rate or --max-grad-norm, then train again with --overwrite."
    )


def training_loss(run: Training, batch: dict):
    """The batch's loss: the model's own, or with label smoothing the cross-entropy against targets that spread
    `run.label_smoothing` of each text's weight evenly over the classes, computed here from the logits as
    transformers' Trainer does (`label_smoothing_factor`), so that the model's `loss` stays the plain one; with
    `--distill-from`, that and the cross-entropy against the teachers' targets, weighed by `--distill-weight`."""
    teacher = pop_targets(batch)
    if not run.label_smoothing and teacher is None:
        return run.model(**batch).loss
    import torch

    logits = run.model(**{name: value for name, value in batch.items() if name != "labels"}).logits
    loss = torch.nn.functional.cross_entropy(logits.float(), batch["labels"], label_smoothing=run.label_smoothing)
    if teacher is None:
        return loss
    weight = run.settings.distill_weight
    return (1 - weight) * loss + weight * distillation_loss(logits, *teacher)


def training_step(run: Training, batch: dict):
    """One forward and backward pass (and an optimizer step once the gradients are accumulated); the loss."""
    accelerator, model = run.accelerator, run.model
    with accelerator.accumulate(model):
        loss = training_loss(run, batch)
        if not all_finite(accelerator, [loss.detach()]):
            raise diverged(run, f"The loss is {loss.item()}", run.progress.steps + 1)
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(model.parameters(), run.settings.max_grad_norm)
        run.optimizer.step()
        run.scheduler.step()
        run.optimizer.zero_grad()
        if run.average is not None and accelerator.sync_gradients:
            run.average.update_parameters(accelerator.unwrap_model(model))
    return loss


def save_checkpoint(run: Training) -> None:
    """`save_state` into checkpoint_<step>, then its checksums once every process has written its part."""
    accelerator, step = run.accelerator, run.progress.steps
    if not all_finite(accelerator, run.model.parameters()):
        raise diverged(run, "Some weights are not finite", step)
    path = checkpoints.checkpoint_dir(run.output_dir, step)
    accelerator.save_state(str(path))
    accelerator.wait_for_everyone()
    run.events("checkpoint_written", step=step)
    if accelerator.is_main_process:
        checkpoints.mark_complete(path)
        checkpoints.prune(run.output_dir)
    accelerator.wait_for_everyone()
    run.events("checkpoint_complete", step=step)


def train_epoch(run: Training, bar) -> None:
    """The rest of the current epoch, from the batch the progress says, with the checkpoints on the way."""
    progress, loader = run.progress, run.loaders["train"]
    loader.set_epoch(progress.epoch)
    batches = run.accelerator.skip_first_batches(loader, progress.batches) if progress.batches else loader
    for batch in batches:
        ids = batch.pop("id")
        run.events("batch", epoch=progress.epoch, step=progress.steps + 1, ids=ids.tolist())
        loss = training_step(run, batch)
        progress.batches += 1
        if not run.accelerator.sync_gradients:
            continue
        progress.steps += 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
        if progress.steps % run.settings.checkpoint_every == 0:
            save_checkpoint(run)


def train_epochs(run: Training):
    """Train to the last epoch, with a validation after each; the last validation's `predict_split` tensors, which
    `final_scores` reuses (None when a resumed run had no epoch left to train)."""
    from tqdm.auto import tqdm

    settings, progress, accelerator, data = run.settings, run.progress, run.accelerator, run.data
    accelerator.print(
        f"Training {settings.backbone}/{settings.pooling} on {data.source.name}: {data.split_record['sizes']} rows, "
        f"{len(data.label_names)} labels, {settings.epochs} epochs of {run.steps_per_epoch} steps, "
        f"{accelerator.num_processes} process(es) on {accelerator.device}."
    )
    if (note := many_classes_note(settings, len(data.label_names))) is not None:
        accelerator.print(note)
    total = run.steps_per_epoch * settings.epochs
    bar = tqdm(total=total, initial=progress.steps, disable=not accelerator.is_local_main_process, unit="step")
    run.model.train()
    validation = None
    while progress.epoch < settings.epochs:
        train_epoch(run, bar)
        progress.epoch, progress.batches = progress.epoch + 1, 0
        run.events("evaluate", epoch=progress.epoch)
        validation = predict(run, "validation")
        accelerator.print(f"epoch {progress.epoch}: validation {format_scores(scores_of(run, validation))}")
    bar.close()
    if not checkpoints.is_complete(checkpoints.checkpoint_dir(run.output_dir, progress.steps)):
        save_checkpoint(run)  # the final state, unless a checkpoint was saved (or resumed from) at this step
    return validation


def use_average(run: Training) -> None:
    """Give the model the moving average's weights (--ema-decay), the ones scored, calibrated and saved."""
    import torch

    model = run.accelerator.unwrap_model(run.model)
    with torch.no_grad():
        for weight, averaged in zip(model.parameters(), run.average.module.parameters(), strict=True):
            weight.copy_(averaged)


def predict(run: Training, split: str):
    """`predict_split` of `split`: predicted and true labels and the logits, gathered from every process."""
    return predict_split(run.model, run.loaders[split], run.accelerator, run.data.multi_label)


def scores_of(run: Training, predicted) -> dict[str, float]:
    """The scores of `predict`'s tensors, with those of every upper level of the data's class hierarchy."""
    data = run.data
    return split_scores(run.metrics, *predicted, data.multi_label, data.label_names, data.hierarchy)


def final_scores(run: Training, validation=None) -> tuple[dict[str, dict], "CodingReport"]:
    """The saved model's scores and calibration (`coding_report.score_and_calibrate`); `validation`: the last epoch's
    predictions, reused when that epoch made them in float32."""
    from labelattn.training.coding_report import score_and_calibrate

    if run.accelerator.mixed_precision != "no":
        # The scores and the temperature are the saved model's, and it predicts in float32: the autocast that
        # Accelerate wrapped the forward in is taken off for good (training is over), and the last epoch's
        # validation, computed under it, is computed again.
        run.accelerator.unwrap_model(run.model, keep_fp32_wrapper=False)
        validation = None
    return score_and_calibrate(run.model, run.loaders, run.accelerator, run.data, run.metrics, validation)


def save_model(run: Training, scores: dict[str, dict], report: "CodingReport") -> None:
    """The model folder: weights (finite, or refused), code, tokenizer, the coding thresholds and figures, and the
    card; then the run is marked finished."""
    from labelattn.training import card
    from labelattn.training.coding_report import write_report

    accelerator = run.accelerator
    if not all_finite(accelerator, run.model.parameters()):
        raise diverged(run, "Some weights of the final model are not finite", run.progress.steps)
    accelerator.wait_for_everyone()
    # A collective under FSDP / DeepSpeed ZeRO-3 (the full weights are gathered), so every process calls it.
    state_dict = accelerator.get_state_dict(run.model)
    if accelerator.is_main_process:
        run.events("save_pretrained")
        accelerator.unwrap_model(run.model).save_pretrained(run.output_dir, state_dict=state_dict)
        run.events("tokenizer")
        run.tokenizer.save_pretrained(run.output_dir)
        write_report(run.output_dir, report)
        run.events("card")
        card.write_model_card(
            run.output_dir, run.data, run.settings, scores, repo_id=run.settings.push_to_hub, coding=report.summary
        )
        run.events("finish")
        checkpoints.mark_finished(run.output_dir)
    accelerator.wait_for_everyone()


def push(run: Training) -> None:
    """Upload the saved folder; if that fails, the local model stays and the message says how to push it later."""
    from labelattn.training import card

    if not run.settings.push_to_hub or not run.accelerator.is_main_process:
        return
    try:
        url = card.push_to_hub(run.output_dir, run.settings.push_to_hub, private=run.settings.private)
    except card.CardError as error:
        raise TrainingError(
            f"The model is saved in {run.output_dir}, but pushing it failed: {error} Push it later with "
            f"`python -c \"from labelattn.training.card import push_to_hub; push_to_hub('{run.output_dir}', "
            f"'{run.settings.push_to_hub}')\"`."
        ) from None
    run.accelerator.print(f"Pushed to {url}")


def run(args: argparse.Namespace) -> int:
    """`labelattn train` as parsed: its settings checked (`TrainSettings`, the one object the run reads from
    here on), then the run, holding its output folder."""
    settings = TrainSettings.from_args(args)
    if settings.output_dir.exists() and not settings.output_dir.is_dir():
        check_output_dir(settings)  # refuses a file, before the lock would try to make a folder there
    # One run writes a folder at a time; under `accelerate launch`, the first process holds it for all.
    locked = int(os.environ.get("RANK", "0")) == 0
    with checkpoints.locked(settings.output_dir) if locked else contextlib.nullcontext():
        return train(settings)


def train(settings: TrainSettings) -> int:
    """The run, once it holds its output folder: every check, then training, saving and pushing."""
    from labelattn.training import card
    from labelattn.training.coding_report import format_report

    check_output_dir(settings)
    if settings.push_to_hub:
        card.check_can_push(settings.push_to_hub)
    data = load_training_data(settings)
    settings = settings.for_classes(len(data.label_names))  # the class count decides some defaults ...
    check_saved_settings(settings)  # ... which resuming, or training over a finished run, compares
    tokenizer = load_tokenizer(settings.backbone)
    check_max_length(settings, tokenizer)
    label_smoothing(settings, data.multi_label)  # refused for multi-label data
    teachers = load_teachers(settings, data.label_names, data.multi_label) if settings.distill_from else None
    # Every user error has surfaced by now, before any process group, model or file exists, but one that the launch
    # decides: --ema-decay where the weights are sharded, refused by set_up before any file is written.
    training = set_up(make_accelerator(settings), settings, data, tokenizer, teachers)
    del teachers  # their targets are in the training rows now: their memory is the training's
    if settings.resume:
        resume(training)
    else:
        start_fresh(training)
    validation = train_epochs(training)
    if training.average is not None:
        use_average(training)
        validation = None  # the last epoch's validation scored the last weights
    scores, report = final_scores(training, validation)
    save_model(training, scores, report)
    training.accelerator.print(f"test {format_scores(scores['test'])}")
    training.accelerator.print(format_report(report.summary))
    training.accelerator.print(f"Saved the model to {settings.output_dir}")
    push(training)
    training.accelerator.end_training()
    return 0
