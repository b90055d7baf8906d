"""A training run once set up: the options' data loaded, the model, optimizer, schedule and loaders prepared by
Accelerate, and the progress that every checkpoint saves (`Training`)."""

import math
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labelattn.training.build import build_model, optimizer_groups, tokenized_loaders
from labelattn.training.events import RunEvents
from labelattn.training.scores import load_metrics
from labelattn.training.settings import TrainingError, TrainSettings, label_smoothing

if TYPE_CHECKING:  # torch and Accelerate load inside the functions, so that --help stays fast
    import torch
    from accelerate import Accelerator
    from torch.optim.swa_utils import AveragedModel


def load_training_data(settings: TrainSettings):
    """The splits the data settings name (`labelattn.data.reading.load_data`, whose options are named alike)."""
    from labelattn.data.reading import load_data

    return load_data(
        settings.data,
        settings.validation_data,
        settings.test_data,
        text_column=settings.text_column,
        label_column=settings.label_column,
        label_separator=settings.label_separator,
        seed=settings.split_seed,
        hierarchy_separator=settings.hierarchy_separator or "",
        label_file=settings.label_file,
        hierarchy_levels=settings.hierarchy_levels,
        described_classes=bool(settings.label_descriptions),
    )


@dataclass
class Progress:
    """Where the run is, saved with every checkpoint so that a resumed run skips exactly the batches consumed."""

    epoch: int = 0
    batches: int = 0  # batches consumed in `epoch`
    steps: int = 0  # optimizer steps in all
    launch: dict = field(default_factory=dict)  # `launch_of` the run: a resumed run must match it

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)


@dataclass
class Training:
    """A run once set up: the prepared model, optimizer, schedule and loaders, and where the run is."""

    settings: TrainSettings
    accelerator: Any
    data: Any  # labelattn.data.records.LabelledData
    tokenizer: Any
    model: Any
    optimizer: Any
    scheduler: Any
    loaders: dict  # split name -> prepared DataLoader
    metrics: dict
    steps_per_epoch: int
    events: RunEvents  # called at the run's named points (labelattn.training.events)
    # The moving average of the weights that is saved (`torch.optim.swa_utils.AveragedModel`), or None (--ema-decay).
    average: Any = None
    progress: Progress = field(default_factory=Progress)

    @property
    def output_dir(self) -> Path:
        return self.settings.output_dir

    @property
    def label_smoothing(self) -> float:
        """The share of each target spread over the classes (`settings.label_smoothing`)."""
        return label_smoothing(self.settings, self.data.multi_label)


def make_accelerator(settings: TrainSettings):
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration

    return Accelerator(
        gradient_accumulation_steps=settings.gradient_accumulation_steps,
        mixed_precision=settings.mixed_precision,
        # The data order depends on the seed and the epoch only: a resumed run replays it.
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=settings.seed),
    )


def linear_schedule(step: int, *, warmup_steps: int, total_steps: int) -> float:
    """The learning rate's factor at `step`: up from 0 over the warm-up steps, then down to 0 at the last step.

    The schedule of `transformers.get_linear_schedule_with_warmup`, to the float (`tests/test_train.py` compares
    them). It is written here because that function's module imports `transformers.trainer_utils`, which imports
    peft wherever it is installed: 2 s of every run's start, more than a small run's training."""
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def set_up(accelerator, settings: TrainSettings, data, tokenizer, teachers: list | None = None) -> Training:
    """Model, loaders, optimizer and schedule, prepared by Accelerate; the progress registered for checkpoints.
    With `teachers` (`distillation.load_teachers`), the training rows carry their targets."""
    import dataclasses

    import torch
    from accelerate.utils import set_seed

    from labelattn.training.distillation import with_teacher_targets
    from labelattn.training.label_queries import describe_classes

    if settings.ema_decay is not None:
        check_moving_average(accelerator)  # first: the teachers' predictions can take minutes
    if teachers:
        # Every process computes them all (before the seed is set: they draw nothing), then reads its own rows.
        train = with_teacher_targets(
            data.splits["train"], teachers, len(data.label_names), accelerator.device, accelerator.is_local_main_process
        )
        data = dataclasses.replace(data, splits={**data.splits, "train": train})
    set_seed(settings.initial_seed)
    model = build_model(settings, data.label_names, data.multi_label, len(tokenizer), data.hierarchy)
    if settings.initial_seed != settings.seed:
        set_seed(settings.seed)  # dropout from --seed, as the data order
    if settings.label_descriptions:
        untrained = set(data.split_record.get("untrained_classes", []))
        trained = {name for name in data.label_names if name not in untrained}
        describe_classes(model, tokenizer, data.descriptions or {}, trained)
    max_length = min(settings.max_length, model.config.max_seq_length)
    loaders = tokenized_loaders(data, tokenizer, settings, max_length, settings.seed)
    # The fused AdamW is several times faster on a CPU, where the update of the embedding table dominates a step.
    optimizer = torch.optim.AdamW(optimizer_groups(model, settings), weight_decay=settings.weight_decay, fused=True)
    # Each process gets every num_processes-th batch (the last ones padded to an even count).
    steps_per_epoch = math.ceil(
        math.ceil(len(loaders["train"]) / accelerator.num_processes) / settings.gradient_accumulation_steps
    )
    total_steps = steps_per_epoch * settings.epochs
    # The prepared scheduler steps once per process at each optimizer step: count in those units. It is prepared
    # in the same call as the model and optimizer, which DeepSpeed needs to take it over.
    schedule = partial(
        linear_schedule,
        warmup_steps=round(settings.warmup_ratio * total_steps) * accelerator.num_processes,
        total_steps=total_steps * accelerator.num_processes,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    model, optimizer, train_loader, validation_loader, test_loader, scheduler = accelerator.prepare(
        model, optimizer, loaders["train"], loaders["validation"], loaders["test"], scheduler
    )
    run = Training(
        settings=settings,
        accelerator=accelerator,
        data=data,
        tokenizer=tokenizer,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        loaders={"train": train_loader, "validation": validation_loader, "test": test_loader},
        metrics=load_metrics(data.multi_label),
        steps_per_epoch=steps_per_epoch,
        events=RunEvents.from_env(accelerator.process_index),
    )
    accelerator.register_for_checkpointing(run.progress)
    if settings.ema_decay is not None:
        run.average = moving_average(accelerator, model, settings.ema_decay)
        accelerator.register_for_checkpointing(run.average)
    accelerator.register_save_state_pre_hook(lambda *_: run.events("save_state", step=run.progress.steps))
    return run


def check_moving_average(accelerator: "Accelerator") -> None:
    """--ema-decay averages the whole model in each process: refused where the launch shards the weights."""
    from accelerate.utils import DistributedType

    deepspeed = accelerator.state.deepspeed_plugin
    if accelerator.distributed_type == DistributedType.FSDP or (deepspeed and deepspeed.zero_stage == 3):
        # Each process holds a shard of the weights there: an average of its shard would not be the model's.
        raise TrainingError(
            "--ema-decay averages the whole model's weights in every process, and FSDP or DeepSpeed ZeRO-3 shard "
            "them: drop --ema-decay, or launch with DDP or ZeRO-1/2."
        )


def moving_average(accelerator: "Accelerator", model: "torch.nn.Module", decay: float) -> "AveragedModel":
    """A float32 copy of the prepared model's weights that `update_parameters` moves towards them: after the first
    update they are its weights, after each next `decay` x the average + (1 - decay) x the weights."""
    import torch
    from torch.optim.swa_utils import AveragedModel

    def update(averages: list[torch.Tensor], weights: list[torch.Tensor], _: torch.Tensor) -> None:
        # DeepSpeed's bf16 and fp16 modules hold half-precision weights, where a step of (1 - decay) x the
        # difference would mostly round away: the average is kept, and moved, in float32.
        for average, weight in zip(averages, weights, strict=True):
            average.lerp_(weight.to(average.dtype), 1 - decay)

    return AveragedModel(accelerator.unwrap_model(model), multi_avg_fn=update).float()
