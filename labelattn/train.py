"""`labelattn train`: train a label-attention classifier with Accelerate, from one CPU to many GPUs.

    labelattn train                                   # TREC, embedding backbone -> models/trec-embedding
    labelattn train --data reviews.csv --backbone minilm --output-dir models/reviews
    accelerate launch -m labelattn.train --data reviews.jsonl --backbone minilm --output-dir models/reviews

One code path for every set-up: `Accelerator` places the model, wraps it for DDP/FSDP/DeepSpeed when launched
so, accumulates gradients and runs mixed precision; nothing here names a device.
"""

import argparse
import json
import math
import os
import shlex
import shutil
import signal
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labelattn import DEFAULT_MODEL_DIR

METRICS_DIR = Path(__file__).parent / "metrics"
CHECKPOINTS = "checkpoints"  # sub-folder of --output-dir, where Accelerate's automatic naming puts them
# Written last into a checkpoint folder: one without it was cut short (a kill during the save) and is not resumed.
COMPLETE = "complete"
SETTINGS_FILE = "training_args.json"
# Options that do not change the trained weights: a run may be resumed with other values.
NOT_SETTINGS = {"resume", "overwrite", "push_to_hub", "private", "license", "checkpoint_every", "run", "command"}
NOT_SETTINGS |= {"command_line", "output_dir"}  # the folder holding the settings is not one of them
PATH_SETTINGS = {"data", "validation_data", "test_data", "backbone"}
NOT_SETTINGS |= {"debug_sample_ids", "debug_kill_at_step"}
# Learning rates: a bag of embeddings learns from scratch, a pretrained encoder is fine-tuned.
LEARNING_RATES = {"embedding": 5e-3, "encoder": 5e-5}


class TrainingError(ValueError):
    """Training options that cannot work together, or an output folder that must not be overwritten."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("data")
    data.add_argument(
        "--data",
        default="trec",
        help="A built-in data set (trec, bbc-news) or the training data: a .csv, a .jsonl or a datasets folder "
        "(default: trec). Splits not given are held out of it, stratified: 10%% validation, 10%% test.",
    )
    data.add_argument("--validation-data", help="Validation rows (.csv, .jsonl or a datasets folder).")
    data.add_argument("--test-data", help="Test rows (.csv, .jsonl or a datasets folder).")
    data.add_argument("--text-column", default="text", help="Column holding the texts (default: text).")
    data.add_argument(
        "--label-column",
        default="label",
        help="Column holding the label, or a list of labels per row for multi-label data (default: label).",
    )
    data.add_argument(
        "--label-separator",
        default="",
        help="Split string labels on this separator, e.g. '|' for multi-label CSV cells such as 'sport|politics'.",
    )
    data.add_argument("--split-seed", type=int, default=42, help="Seed of the held-out splits (default: 42).")

    model = parser.add_argument_group("model")
    model.add_argument(
        "--backbone",
        default="embedding",
        help="'embedding' (token embeddings trained from scratch, fast), 'minilm' (the offline all-MiniLM-L6-v2 "
        "encoder) or the path of a local encoder folder (default: embedding).",
    )
    model.add_argument("--pooling", choices=["label_attention", "mean"], default="label_attention")
    model.add_argument("--hidden-size", type=int, default=128, help="Width of the embedding backbone (default: 128).")
    model.add_argument("--num-attention-heads", type=int, default=4, help="Label-attention heads (default: 4).")
    model.add_argument("--max-length", type=int, default=128, help="Tokens read per text (default: 128).")
    model.add_argument(
        "--initializer-range",
        type=float,
        default=0.1,
        help="Standard deviation of the new weights (default: 0.1, about 1/sqrt(hidden size): with the usual 0.02 "
        "the product of embedding, key/value and output projections starts so small that learning stalls).",
    )

    optim = parser.add_argument_group("optimisation")
    optim.add_argument(
        "--epochs",
        type=int,
        default=3,
        help="Passes over the training data (default: 3; the embedding backbone overfits TREC after that).",
    )
    optim.add_argument("--batch-size", type=int, default=32, help="Texts per batch and process (default: 32).")
    optim.add_argument(
        "--learning-rate", type=float, help="Peak learning rate of AdamW (default: 5e-3 embedding, 5e-5 encoder)."
    )
    optim.add_argument(
        "--head-learning-rate",
        type=float,
        help="Learning rate of the new head on a pretrained encoder (default: 1e-3; the --learning-rate otherwise).",
    )
    optim.add_argument("--weight-decay", type=float, default=0.01)
    optim.add_argument("--warmup-ratio", type=float, default=0.1, help="Share of steps of linear warm-up.")
    optim.add_argument("--gradient-accumulation-steps", type=int, default=1)
    optim.add_argument("--max-grad-norm", type=float, default=1.0)
    optim.add_argument(
        "--mixed-precision",
        choices=["no", "fp16", "bf16"],
        help="Mixed precision (default: as set by `accelerate config` / `accelerate launch`, else no).",
    )
    optim.add_argument("--seed", type=int, default=0, help="Seed of initialisation, data order, dropout.")

    out = parser.add_argument_group("output")
    out.add_argument(
        "--output-dir",
        type=Path,
        default=DEFAULT_MODEL_DIR,
        help=f"Where the model goes (default: {DEFAULT_MODEL_DIR}).",
    )
    out.add_argument(
        "--overwrite",
        action="store_true",
        help="Delete what --output-dir holds (another model, old checkpoints) and train into it.",
    )
    out.add_argument(
        "--checkpoint-every",
        type=int,
        default=200,
        help="Save the training state every N optimizer steps, and at the end (default: 200).",
    )
    out.add_argument("--resume", action="store_true", help="Continue from the last checkpoint in --output-dir.")
    out.add_argument("--push-to-hub", metavar="REPO", help="Push the model with its card to this Hub repository.")
    out.add_argument("--private", action="store_true", help="Create the Hub repository as private.")
    out.add_argument("--license", default="apache-2.0", help="Licence in the model card (default: apache-2.0).")
    # For tests: where each process writes the ids of the rows of every batch; SIGKILL the run after N steps.
    out.add_argument("--debug-sample-ids", type=Path, help=argparse.SUPPRESS)
    out.add_argument("--debug-kill-at-step", type=int, help=argparse.SUPPRESS)


# ------------------------------------------------------------------------------------------------ checks


def backbone_kind(backbone: str) -> str:
    return "embedding" if backbone == "embedding" else "encoder"


def resolve_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the options whose default depends on the backbone, and check the numbers."""
    kind = backbone_kind(args.backbone)
    args.learning_rate = LEARNING_RATES[kind] if args.learning_rate is None else args.learning_rate
    if args.head_learning_rate is None:
        args.head_learning_rate = 1e-3 if kind == "encoder" else args.learning_rate
    for name in ("epochs", "batch_size", "gradient_accumulation_steps", "checkpoint_every", "max_length"):
        if getattr(args, name) < 1:
            raise TrainingError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}.")
    if not 0 <= args.warmup_ratio < 1:
        raise TrainingError(f"--warmup-ratio must be in [0, 1), got {args.warmup_ratio}.")
    if kind == "encoder" and args.backbone != "minilm" and not (Path(args.backbone) / "config.json").is_file():
        raise TrainingError(
            f"--backbone {args.backbone!r} is neither 'embedding', 'minilm' nor a folder with a config.json "
            "(a Transformers encoder saved with save_pretrained)."
        )
    return args


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


def check_output_dir(args: argparse.Namespace) -> None:
    """Refuse to overwrite a different model, and to resume what cannot be resumed (before any work starts)."""
    folder: Path = args.output_dir
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"--output-dir {folder} is a file; give a folder.")
    saved_file = folder / SETTINGS_FILE
    saved = json.loads(saved_file.read_text()) if saved_file.is_file() else None
    if args.resume:
        last_checkpoint(folder)  # refuses a folder without a complete one
        differing = {k: (saved.get(k), v) for k, v in settings_of(args).items() if saved.get(k) != v} if saved else {}
        if saved is None or differing:
            raise TrainingError(
                f"--resume: {folder} was trained with other settings (saved, now): {differing or 'unknown'}; "
                "resume with the same options or train into another --output-dir."
            )
        return
    if args.overwrite and folder.exists():
        here = Path.cwd().resolve()
        if any(place.is_relative_to(folder.resolve()) for place in (here, Path.home().resolve())):
            raise FileExistsError(
                f"--overwrite would delete {folder}, which holds the working directory or the home folder: "
                "give the model a folder of its own."
            )
    if not folder.exists() or not any(folder.iterdir()) or args.overwrite:
        return
    if saved != settings_of(args):
        what = "a model trained with other settings" if saved else "files that are not a labelattn training run"
        raise FileExistsError(
            f"{folder} already holds {what}: pass --overwrite to replace it, --resume to continue its training, "
            "or choose another --output-dir."
        )


def checkpoint_number(path: Path) -> int:
    return int(path.name.rsplit("_", 1)[1])


def last_checkpoint(folder: Path) -> Path:
    """The newest complete checkpoint of the run in `folder`."""
    complete = [path for path in (folder / CHECKPOINTS).glob("checkpoint_*") if (path / COMPLETE).is_file()]
    if not complete:
        raise TrainingError(
            f"--resume: {folder / CHECKPOINTS} holds no complete checkpoint; train without --resume first."
        )
    return max(complete, key=checkpoint_number)


def save_checkpoint(accelerator) -> None:
    """`save_state`, then the completion mark, once every process has written its part."""
    path = Path(accelerator.save_state())
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (path / COMPLETE).touch()


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


def command_line(args: argparse.Namespace) -> str:
    """The `labelattn train` command that gives these settings (options left at their default are omitted)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    defaults = parser.parse_args([])
    words = ["labelattn", "train"]
    for action in parser._actions:
        name, value = action.dest, getattr(args, action.dest, None)
        if action.help == argparse.SUPPRESS or name in ("help", "resume", "overwrite") or not action.option_strings:
            continue
        if value is None or value == getattr(defaults, name) or value is False:
            continue
        words.append(action.option_strings[0])
        if value is not True:
            words.append(str(value))
    return shlex.join(words)


# ------------------------------------------------------------------------------------------------ training


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


def load_tokenizer(backbone: str):
    """The MiniLM WordPiece tokenizer, or a local encoder's own tokenizer when its folder has one."""
    from transformers import AutoTokenizer

    from labelattn import minilm_path

    folder = Path(backbone)
    has_own = backbone not in ("embedding", "minilm") and any(
        (folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt")
    )
    return AutoTokenizer.from_pretrained(str(folder) if has_own else minilm_path())


def build_model(args: argparse.Namespace, label_names: list[str], multi_label: bool, vocab_size: int):
    from configuration_labelattn import LabelAttnConfig
    from labelattn import minilm_path
    from modeling_labelattn import LabelAttnForSequenceClassification

    common = dict(
        id2label=dict(enumerate(label_names)),
        label2id={name: i for i, name in enumerate(label_names)},
        pooling=args.pooling,
        num_attention_heads=args.num_attention_heads,
        initializer_range=args.initializer_range,
        problem_type="multi_label_classification" if multi_label else "single_label_classification",
    )
    if args.backbone == "embedding":
        config = LabelAttnConfig(
            vocab_size=vocab_size, hidden_size=args.hidden_size, max_seq_length=args.max_length, **common
        )
        return LabelAttnForSequenceClassification(config)
    encoder = minilm_path() if args.backbone == "minilm" else args.backbone
    return LabelAttnForSequenceClassification.from_encoder(encoder, **common)


def tokenized_loaders(data, tokenizer, args: argparse.Namespace, max_length: int, seed: int):
    """DataLoaders over the tokenized splits; the training one shuffles with its own generator, so that building
    it (or resuming) never draws from the global random state that dropout uses."""
    import torch
    from torch.utils.data import DataLoader
    from transformers import DataCollatorWithPadding

    num_labels = len(data.label_names)

    def encode(batch: dict) -> dict:
        encoded = tokenizer(batch["text"], truncation=True, max_length=max_length)
        if data.multi_label:  # class indices -> 0/1 targets (num_labels,)
            encoded["labels"] = [[float(i in set(row)) for i in range(num_labels)] for row in batch["label"]]
        else:
            encoded["labels"] = batch["label"]
        return encoded

    tokenized = data.splits.map(encode, batched=True, remove_columns=["text", "label"])
    collate = DataCollatorWithPadding(tokenizer)
    loaders = {}
    for split in tokenized:
        shuffle = split == "train"
        generator = torch.Generator().manual_seed(seed) if shuffle else None
        loaders[split] = DataLoader(
            tokenized[split], batch_size=args.batch_size, shuffle=shuffle, collate_fn=collate, generator=generator
        )
    return loaders


def load_metrics(multi_label: bool) -> dict:
    """The metric modules shipped in labelattn/metrics, loaded by path (offline)."""
    import evaluate

    config = "multilabel" if multi_label else None
    return {name: evaluate.load(str(METRICS_DIR / name), config, keep_in_memory=True) for name in ("accuracy", "f1")}


def evaluate_split(model, loader, accelerator, metrics: dict, multi_label: bool) -> dict[str, float]:
    """Accuracy and macro-F1 (and micro-F1 for multi-label) over a split, gathered from every process."""
    import torch

    model.eval()
    predictions, references = [], []
    with torch.no_grad():
        for batch in loader:
            batch.pop("id")
            labels = batch.pop("labels")
            logits = model(**batch).logits
            predicted = (logits > 0).long() if multi_label else logits.argmax(dim=-1)
            predicted, labels = accelerator.gather_for_metrics((predicted, labels.long()))
            predictions.append(predicted.cpu())
            references.append(labels.cpu())
    model.train()
    predictions, references = torch.cat(predictions).tolist(), torch.cat(references).tolist()
    scores = {
        "accuracy": metrics["accuracy"].compute(predictions=predictions, references=references)["accuracy"],
        "macro_f1": metrics["f1"].compute(predictions=predictions, references=references, average="macro")["f1"],
    }
    if multi_label:
        scores["micro_f1"] = metrics["f1"].compute(predictions=predictions, references=references, average="micro")[
            "f1"
        ]
    return scores


def format_scores(scores: dict[str, float]) -> str:
    return ", ".join(f"{name.replace('_', '-')} {value:.4f}" for name, value in scores.items())


def log_sample_ids(path: Path, rank: int, progress: Progress, ids) -> None:
    """Append one line per batch: which rows this process trained on, at which optimizer step (for tests)."""
    with open(f"{path}.rank{rank}", "a") as log:
        log.write(json.dumps({"epoch": progress.epoch, "step": progress.steps + 1, "ids": ids.tolist()}) + "\n")


def optimizer_groups(model, args: argparse.Namespace) -> list[dict]:
    """A pretrained encoder learns slowly, the new head quickly; the embedding backbone is all new."""
    encoder = model.labelattn.encoder
    encoder_params = {id(p) for p in encoder.parameters()} if encoder is not None else set()
    groups = [
        {"params": [p for p in model.parameters() if id(p) in encoder_params], "lr": args.learning_rate},
        {"params": [p for p in model.parameters() if id(p) not in encoder_params], "lr": args.head_learning_rate},
    ]
    return [group for group in groups if group["params"]]


def run(args: argparse.Namespace) -> int:
    import torch
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, ProjectConfiguration, set_seed
    from tqdm.auto import tqdm
    from transformers import get_linear_schedule_with_warmup

    from labelattn import card
    from labelattn.data import load_data

    args.command_line = command_line(args)
    args = resolve_defaults(args)
    check_output_dir(args)
    # Every user error surfaces here, before any process group or model exists.
    data = load_data(
        args.data,
        args.validation_data,
        args.test_data,
        text_column=args.text_column,
        label_column=args.label_column,
        label_separator=args.label_separator,
        seed=args.split_seed,
    )
    tokenizer = load_tokenizer(args.backbone)

    output_dir: Path = args.output_dir
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        mixed_precision=args.mixed_precision,
        project_config=ProjectConfiguration(
            project_dir=str(output_dir), automatic_checkpoint_naming=True, total_limit=2
        ),
        # The data order depends on the seed and the epoch only: a resumed run replays it.
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=args.seed),
    )
    set_seed(args.seed)
    model = build_model(args, data.label_names, data.multi_label, len(tokenizer))
    max_length = min(args.max_length, model.config.max_seq_length)
    loaders = tokenized_loaders(data, tokenizer, args, max_length, args.seed)
    # The fused AdamW is several times faster on a CPU, where the update of the embedding table dominates a step.
    optimizer = torch.optim.AdamW(optimizer_groups(model, args), weight_decay=args.weight_decay, fused=True)

    # Each process gets every num_processes-th batch (the last ones padded to an even count).
    steps_per_epoch = math.ceil(
        math.ceil(len(loaders["train"]) / accelerator.num_processes) / args.gradient_accumulation_steps
    )
    total_steps = steps_per_epoch * args.epochs
    # The prepared scheduler steps once per process at each optimizer step: count in those units. It is prepared
    # in the same call as the model and optimizer, which DeepSpeed needs to take it over.
    scheduler = get_linear_schedule_with_warmup(
        optimizer,
        num_warmup_steps=round(args.warmup_ratio * total_steps) * accelerator.num_processes,
        num_training_steps=total_steps * accelerator.num_processes,
    )
    model, optimizer, train_loader, validation_loader, test_loader, scheduler = accelerator.prepare(
        model, optimizer, loaders["train"], loaders["validation"], loaders["test"], scheduler
    )
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    metrics = load_metrics(data.multi_label)

    if args.resume:
        checkpoint = last_checkpoint(output_dir)
        accelerator.wait_for_everyone()  # every process has found the same checkpoint before any is deleted
        if accelerator.is_main_process:  # checkpoints cut short by the kill: their numbers are reused
            for path in (output_dir / CHECKPOINTS).glob("checkpoint_*"):
                if checkpoint_number(path) > checkpoint_number(checkpoint):
                    shutil.rmtree(path)
        accelerator.load_state(str(checkpoint))
        check_launch(accelerator, progress.launch, args)
        # Accelerate does not restore its checkpoint counter: continue the numbering after the one loaded.
        accelerator.project_configuration.iteration = checkpoint_number(checkpoint) + 1
        accelerator.print(f"Resumed at step {progress.steps} (epoch {progress.epoch + 1}, batch {progress.batches}).")
    else:
        if accelerator.is_main_process:
            if args.overwrite:
                shutil.rmtree(output_dir, ignore_errors=True)
            shutil.rmtree(output_dir / CHECKPOINTS, ignore_errors=True)
            (output_dir / CHECKPOINTS).mkdir(parents=True)
            (output_dir / SETTINGS_FILE).write_text(json.dumps(settings_of(args), indent=2) + "\n")
        progress.launch = launch_of(accelerator)
        accelerator.wait_for_everyone()

    accelerator.print(
        f"Training {args.backbone}/{args.pooling} on {data.source.name}: {data.split_record['sizes']} rows, "
        f"{len(data.label_names)} labels, {args.epochs} epochs of {steps_per_epoch} steps, "
        f"{accelerator.num_processes} process(es) on {accelerator.device}."
    )
    bar = tqdm(total=total_steps, initial=progress.steps, disable=not accelerator.is_local_main_process, unit="step")
    model.train()
    validation = {}
    while progress.epoch < args.epochs:
        train_loader.set_epoch(progress.epoch)
        batches = accelerator.skip_first_batches(train_loader, progress.batches) if progress.batches else train_loader
        for batch in batches:
            ids = batch.pop("id")
            if args.debug_sample_ids:
                log_sample_ids(args.debug_sample_ids, accelerator.process_index, progress, ids)
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            progress.batches += 1
            if not accelerator.sync_gradients:
                continue
            progress.steps += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
            if progress.steps % args.checkpoint_every == 0:
                save_checkpoint(accelerator)
            if progress.steps == args.debug_kill_at_step:
                os.kill(os.getpid(), signal.SIGKILL)
        progress.epoch, progress.batches = progress.epoch + 1, 0
        validation = evaluate_split(model, validation_loader, accelerator, metrics, data.multi_label)
        accelerator.print(f"epoch {progress.epoch}: validation {format_scores(validation)}")
    bar.close()
    if progress.steps % args.checkpoint_every:
        save_checkpoint(accelerator)
    if not validation:  # resumed after the last epoch had finished: still report its metrics
        validation = evaluate_split(model, validation_loader, accelerator, metrics, data.multi_label)
    test = evaluate_split(model, test_loader, accelerator, metrics, data.multi_label)

    accelerator.wait_for_everyone()
    # A collective under FSDP / DeepSpeed ZeRO-3 (the full weights are gathered), so every process calls it.
    state_dict = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        model = accelerator.unwrap_model(model)
        model.save_pretrained(output_dir, state_dict=state_dict, save_function=accelerator.save)
        tokenizer.save_pretrained(output_dir)
        card.write_model_card(
            output_dir, data, args, {"validation": validation, "test": test}, repo_id=args.push_to_hub
        )
    accelerator.wait_for_everyone()
    accelerator.print(f"test {format_scores(test)}")
    accelerator.print(f"Saved the model to {output_dir}")
    if args.push_to_hub and accelerator.is_main_process:
        url = card.push_to_hub(output_dir, args.push_to_hub, private=args.private)
        accelerator.print(f"Pushed to {url}")
    accelerator.end_training()
    return 0


if __name__ == "__main__":  # accelerate launch -m labelattn.train ... / torchrun -m labelattn.train ...
    from labelattn.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
