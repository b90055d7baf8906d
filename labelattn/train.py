"""`labelattn train`: train a label-attention classifier with Accelerate, from one CPU to many GPUs.

    labelattn train                                   # TREC, embedding backbone -> models/trec-embedding
    labelattn train --data reviews.csv --backbone minilm --output-dir models/reviews
    accelerate launch -m labelattn.train --data reviews.jsonl --backbone minilm --output-dir models/reviews

One code path for every set-up: `Accelerator` places the model, wraps it for DDP/FSDP/DeepSpeed when launched
so, accumulates gradients and runs mixed precision; nothing here names a device. `run` reads top to bottom as the
steps of a run; the rules of the output folder (checkpoints, resume, overwrite) live in `labelattn.checkpoints`.
"""

import argparse
import json
import math
import os
import shlex
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labelattn import DEFAULT_MODEL_DIR, checkpoints

METRICS_DIR = Path(__file__).parent / "metrics"
SETTINGS_FILE = "training_args.json"
# Options that do not change the trained weights: a run may be resumed with other values.
NOT_SETTINGS = {"resume", "overwrite", "push_to_hub", "private", "license", "checkpoint_every", "run", "command"}
NOT_SETTINGS |= {"command_line", "output_dir"}  # the folder holding the settings is not one of them
PATH_SETTINGS = {"data", "validation_data", "test_data", "backbone"}
# Learning rates: a bag of embeddings learns from scratch, a pretrained encoder is fine-tuned.
LEARNING_RATES = {"embedding": 5e-3, "encoder": 5e-5}
# Numeric options and the values they take (every float must also be finite).
AT_LEAST_ONE = ("epochs", "batch_size", "gradient_accumulation_steps", "checkpoint_every", "hidden_size")
AT_LEAST_ONE += ("num_attention_heads", "max_length")
ABOVE_ZERO = ("learning_rate", "head_learning_rate", "max_grad_norm", "initializer_range")
# Ranking metrics (precision@k, recall@k): reported for multi-label data, and for single-label data from this many
# classes on.
MANY_CLASSES = 20
RANKING_CUTOFFS = (1, 5)
# For fault-injection tests and debugging: each process appends one JSON line per event of the run (the rows of
# every batch, each phase of saving) to the file named by RUN_LOG_ENV (with `.rank<N>` appended), and stops for good
# at the event named by PAUSE_ENV ("EVENT" or "EVENT@N", its N-th occurrence), where a test kills it.
RUN_LOG_ENV = "LABELATTN_RUN_LOG"
PAUSE_ENV = "LABELATTN_PAUSE_AT"


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
        help="'embedding' (a bag of token embeddings, fast), 'minilm' (the offline all-MiniLM-L6-v2 "
        "encoder) or the path of a local encoder folder (default: embedding).",
    )
    model.add_argument("--pooling", choices=["label_attention", "mean"], default="label_attention")
    model.add_argument(
        "--hidden-size",
        type=int,
        default=384,
        help="Width of the embedding backbone (default: 384, MiniLM's own width, so its token vectors are kept whole).",
    )
    model.add_argument(
        "--token-context-width",
        type=int,
        default=3,
        help="Odd width of the embedding backbone's residual convolution that lets each token see its neighbours "
        "('how many' is not 'many ... how'); 0 reads a pure bag of tokens (default: 3).",
    )
    model.add_argument("--num-attention-heads", type=int, default=4, help="Label-attention heads (default: 4).")
    model.add_argument("--max-length", type=int, default=128, help="Tokens read per text (default: 128).")
    model.add_argument(
        "--classifier-dropout",
        type=float,
        default=0.0,
        help="Dropout on the class vectors before the scoring layer (default: 0: label attention then folds the "
        "scoring layer into the head in training too and never forms the class vectors, about 1.1x faster a step "
        "at 6 classes and far more at hundreds; as accurate on TREC and BBC News).",
    )
    model.add_argument(
        "--initializer-range",
        type=float,
        default=0.1,
        help="Standard deviation of the new weights (default: 0.1: with the usual 0.02 the product of embedding, "
        "key/value and output projections starts so small that learning stalls).",
    )
    from labelattn.static_embeddings import DEFAULT_EMBEDDINGS, EMBEDDINGS

    model.add_argument(
        "--embeddings",
        choices=EMBEDDINGS,
        default=DEFAULT_EMBEDDINGS,
        help="Where the embedding backbone's token table starts: 'model2vec' (MiniLM distilled to static vectors "
        "by Model2Vec), 'minilm-input' (MiniLM's input embeddings) — both reduced to --hidden-size by PCA, made "
        f"offline once and cached under the Hugging Face cache — or 'random' (default: {DEFAULT_EMBEDDINGS}).",
    )
    model.add_argument(
        "--freeze-embeddings",
        action=argparse.BooleanOptionalAction,
        help="Keep the token table as it starts (the backbone's input embeddings for an encoder). Default: frozen "
        "for the embedding backbone started from MiniLM's vectors (more accurate on TREC, and faster: the update "
        "of the 30,522-row table would dominate a step), trained otherwise.",
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
        help="Delete what --output-dir holds (another model, old checkpoints) and train into it; refused when it "
        "holds anything else, such as the data.",
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


# ------------------------------------------------------------------------------------------------ checks


def backbone_kind(backbone: str) -> str:
    return "embedding" if backbone == "embedding" else "encoder"


def resolve_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the options whose default depends on the backbone, and check the numbers."""
    kind = backbone_kind(args.backbone)
    args.learning_rate = LEARNING_RATES[kind] if args.learning_rate is None else args.learning_rate
    if args.head_learning_rate is None:
        args.head_learning_rate = 1e-3 if kind == "encoder" else args.learning_rate
    if args.freeze_embeddings is None:
        args.freeze_embeddings = kind == "embedding" and args.embeddings != "random"
    check_numbers(args)
    if kind == "encoder" and args.backbone != "minilm" and not (Path(args.backbone) / "config.json").is_file():
        raise TrainingError(
            f"--backbone {args.backbone!r} is neither 'embedding', 'minilm' nor a folder with a config.json "
            "(a Transformers encoder saved with save_pretrained)."
        )
    return args


def check_numbers(args: argparse.Namespace) -> None:
    """Every numeric option finite and in its range, before anything is built (a NaN learning rate would train
    a NaN model)."""

    def refuse(name: str, what: str) -> None:
        raise TrainingError(f"--{name.replace('_', '-')} must be {what}, got {getattr(args, name)}.")

    for name in AT_LEAST_ONE:
        if getattr(args, name) < 1:
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
    return json.loads(path.read_text()) if path.is_file() else None


def run_inputs(args: argparse.Namespace) -> dict[str, Path]:
    """The files and folders the run reads, by option: `--overwrite` must never delete them."""
    given = {"--data": args.data, "--validation-data": args.validation_data, "--test-data": args.test_data}
    given["--backbone"] = args.backbone
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
    if not folder.exists() or not any(folder.iterdir()):
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
        if value is None or value == getattr(defaults, name):
            continue
        # A switched-off flag can only differ from its default as `--no-...` (a BooleanOptionalAction).
        words.append(action.option_strings[-1] if value is False else action.option_strings[0])
        if not isinstance(value, bool):
            words.append(str(value))
    return shlex.join(words)


# ------------------------------------------------------------------------------------------------ the run log


@dataclass
class RunLog:
    """The events of one process's run, for tests and debugging (see RUN_LOG_ENV); does nothing when unset."""

    path: str | None = None
    pause_at: str | None = None
    counts: Counter = field(default_factory=Counter)

    @classmethod
    def from_env(cls, rank: int) -> "RunLog":
        path = os.environ.get(RUN_LOG_ENV)
        return cls(f"{path}.rank{rank}" if path else None, os.environ.get(PAUSE_ENV))

    def event(self, name: str, **fields) -> None:
        self.counts[name] += 1
        if self.path:
            with open(self.path, "a") as log:
                log.write(json.dumps({"event": name, **fields}) + "\n")
        if self.pause_at in (name, f"{name}@{self.counts[name]}"):
            self.event("paused", at=self.pause_at)
            while True:  # until the test kills the process
                time.sleep(60)


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
    from labelattn.static_embeddings import initialise_embeddings
    from modeling_labelattn import LabelAttnForSequenceClassification

    common = dict(
        id2label=dict(enumerate(label_names)),
        label2id={name: i for i, name in enumerate(label_names)},
        pooling=args.pooling,
        num_attention_heads=args.num_attention_heads,
        initializer_range=args.initializer_range,
        classifier_dropout=args.classifier_dropout,
        problem_type="multi_label_classification" if multi_label else "single_label_classification",
    )
    if args.backbone == "embedding":
        config = LabelAttnConfig(
            vocab_size=vocab_size,
            hidden_size=args.hidden_size,
            token_context_width=args.token_context_width,
            max_seq_length=args.max_length,
            **common,
        )
        model = LabelAttnForSequenceClassification(config)
        initialise_embeddings(model, args.embeddings)  # the vectors are in the saved weights: loading needs nothing
    else:
        encoder = minilm_path() if args.backbone == "minilm" else args.backbone
        model = LabelAttnForSequenceClassification.from_encoder(encoder, **common)
    model.get_input_embeddings().weight.requires_grad_(not args.freeze_embeddings)
    return model


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
    names = ("accuracy", "f1", "precision_at_k")
    return {name: evaluate.load(str(METRICS_DIR / name), config, keep_in_memory=True) for name in names}


def ranking_cutoffs(num_labels: int, multi_label: bool) -> list[int]:
    """The k of the precision@k and recall@k a run reports: for multi-label data, and for single-label data with many
    classes, where a reader looks at the few most probable classes."""
    if not multi_label and num_labels < MANY_CLASSES:
        return []
    return [k for k in RANKING_CUTOFFS if k < num_labels]


def evaluate_split(model, loader, accelerator, metrics: dict, multi_label: bool) -> dict[str, float]:
    """Accuracy and macro-F1 (and micro-F1 for multi-label; precision@k and recall@k for multi-label or many
    classes) over a split, gathered from every process."""
    import torch

    model.eval()
    predictions, references, logits = [], [], []
    with torch.no_grad():
        for batch in loader:
            batch.pop("id")
            labels = batch.pop("labels")
            scores = model(**batch).logits.float()  # (batch, num_labels)
            predicted = (scores > 0).long() if multi_label else scores.argmax(dim=-1)
            predicted, labels, scores = accelerator.gather_for_metrics((predicted, labels.long(), scores))
            predictions.append(predicted.cpu())
            references.append(labels.cpu())
            logits.append(scores.cpu())
    model.train()
    logits = torch.cat(logits)
    predictions, references = torch.cat(predictions).tolist(), torch.cat(references).tolist()
    scores = {
        "accuracy": metrics["accuracy"].compute(predictions=predictions, references=references)["accuracy"],
        "macro_f1": metrics["f1"].compute(predictions=predictions, references=references, average="macro")["f1"],
    }
    if multi_label:
        scores["micro_f1"] = metrics["f1"].compute(predictions=predictions, references=references, average="micro")[
            "f1"
        ]
    cutoffs = ranking_cutoffs(logits.shape[1], multi_label)
    if cutoffs:
        ranking = metrics["precision_at_k"].compute(predictions=logits.tolist(), references=references, k=cutoffs)
        scores.update(ranking)
    return scores


def format_scores(scores: dict[str, float]) -> str:
    return ", ".join(f"{name.replace('_', '-')} {value:.4f}" for name, value in scores.items())


def optimizer_groups(model, args: argparse.Namespace) -> list[dict]:
    """A pretrained encoder learns slowly, the new head quickly; the embedding backbone is all new."""
    encoder = model.labelattn.encoder
    encoder_params = {id(p) for p in encoder.parameters()} if encoder is not None else set()
    trained = [p for p in model.parameters() if p.requires_grad]  # not a frozen token table
    groups = [
        {"params": [p for p in trained if id(p) in encoder_params], "lr": args.learning_rate},
        {"params": [p for p in trained if id(p) not in encoder_params], "lr": args.head_learning_rate},
    ]
    return [group for group in groups if group["params"]]


@dataclass
class Training:
    """A run once set up: the prepared model, optimizer, schedule and loaders, and where the run is."""

    args: argparse.Namespace
    accelerator: Any
    data: Any  # labelattn.data.LabelledData
    tokenizer: Any
    model: Any
    optimizer: Any
    scheduler: Any
    loaders: dict  # split name -> prepared DataLoader
    metrics: dict
    steps_per_epoch: int
    log: RunLog
    progress: Progress = field(default_factory=Progress)

    @property
    def output_dir(self) -> Path:
        return self.args.output_dir


def make_accelerator(args: argparse.Namespace):
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration

    return Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        mixed_precision=args.mixed_precision,
        # The data order depends on the seed and the epoch only: a resumed run replays it.
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=args.seed),
    )


def set_up(accelerator, args: argparse.Namespace, data, tokenizer) -> Training:
    """Model, loaders, optimizer and schedule, prepared by Accelerate; the progress registered for checkpoints."""
    import torch
    from accelerate.utils import set_seed
    from transformers import get_linear_schedule_with_warmup

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
    run = Training(
        args=args,
        accelerator=accelerator,
        data=data,
        tokenizer=tokenizer,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        loaders={"train": train_loader, "validation": validation_loader, "test": test_loader},
        metrics=load_metrics(data.multi_label),
        steps_per_epoch=steps_per_epoch,
        log=RunLog.from_env(accelerator.process_index),
    )
    accelerator.register_for_checkpointing(run.progress)
    accelerator.register_save_state_pre_hook(lambda *_: run.log.event("save_state", step=run.progress.steps))
    return run


def start_fresh(run: Training) -> None:
    """A new run: the folder emptied if --overwrite, an empty checkpoint folder, the settings recorded."""
    if run.accelerator.is_main_process:
        if run.args.overwrite:
            checkpoints.delete(checkpoints.overwritable(run.output_dir, run_inputs(run.args)))
        checkpoints.start(run.output_dir)
        (run.output_dir / SETTINGS_FILE).write_text(json.dumps(settings_of(run.args), indent=2) + "\n")
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
    check_launch(accelerator, run.progress.launch, run.args)
    progress = run.progress
    accelerator.print(f"Resumed at step {progress.steps} (epoch {progress.epoch + 1}, batch {progress.batches}).")
    run.log.event("resumed", step=progress.steps)


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


def training_step(run: Training, batch: dict):
    """One forward and backward pass (and an optimizer step once the gradients are accumulated); the loss."""
    accelerator, model = run.accelerator, run.model
    with accelerator.accumulate(model):
        loss = model(**batch).loss
        if not all_finite(accelerator, [loss.detach()]):
            raise diverged(run, f"The loss is {loss.item()}", run.progress.steps + 1)
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(model.parameters(), run.args.max_grad_norm)
        run.optimizer.step()
        run.scheduler.step()
        run.optimizer.zero_grad()
    return loss


def save_checkpoint(run: Training) -> None:
    """`save_state` into checkpoint_<step>, then its checksums once every process has written its part."""
    accelerator, step = run.accelerator, run.progress.steps
    if not all_finite(accelerator, run.model.parameters()):
        raise diverged(run, "Some weights are not finite", step)
    path = checkpoints.checkpoint_dir(run.output_dir, step)
    accelerator.save_state(str(path))
    accelerator.wait_for_everyone()
    run.log.event("checkpoint_written", step=step)
    if accelerator.is_main_process:
        checkpoints.mark_complete(path)
        checkpoints.prune(run.output_dir)
    accelerator.wait_for_everyone()
    run.log.event("checkpoint_complete", step=step)


def train_epoch(run: Training, bar) -> None:
    """The rest of the current epoch, from the batch the progress says, with the checkpoints on the way."""
    progress, loader = run.progress, run.loaders["train"]
    loader.set_epoch(progress.epoch)
    batches = run.accelerator.skip_first_batches(loader, progress.batches) if progress.batches else loader
    for batch in batches:
        ids = batch.pop("id")
        run.log.event("batch", epoch=progress.epoch, step=progress.steps + 1, ids=ids.tolist())
        loss = training_step(run, batch)
        progress.batches += 1
        if not run.accelerator.sync_gradients:
            continue
        progress.steps += 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
        if progress.steps % run.args.checkpoint_every == 0:
            save_checkpoint(run)


def train_epochs(run: Training) -> dict[str, float]:
    """Train to the last epoch, with a validation after each; the last validation scores ({} when resumed after
    the last epoch)."""
    from tqdm.auto import tqdm

    args, progress, accelerator = run.args, run.progress, run.accelerator
    accelerator.print(
        f"Training {args.backbone}/{args.pooling} on {run.data.source.name}: {run.data.split_record['sizes']} rows, "
        f"{len(run.data.label_names)} labels, {args.epochs} epochs of {run.steps_per_epoch} steps, "
        f"{accelerator.num_processes} process(es) on {accelerator.device}."
    )
    total = run.steps_per_epoch * args.epochs
    bar = tqdm(total=total, initial=progress.steps, disable=not accelerator.is_local_main_process, unit="step")
    run.model.train()
    validation = {}
    while progress.epoch < args.epochs:
        train_epoch(run, bar)
        progress.epoch, progress.batches = progress.epoch + 1, 0
        run.log.event("evaluate", epoch=progress.epoch)
        validation = evaluate(run, "validation")
        accelerator.print(f"epoch {progress.epoch}: validation {format_scores(validation)}")
    bar.close()
    if not checkpoints.is_complete(checkpoints.checkpoint_dir(run.output_dir, progress.steps)):
        save_checkpoint(run)  # the final state, unless a checkpoint was saved (or resumed from) at this step
    return validation


def evaluate(run: Training, split: str) -> dict[str, float]:
    return evaluate_split(run.model, run.loaders[split], run.accelerator, run.metrics, run.data.multi_label)


def save_model(run: Training, scores: dict[str, dict]) -> None:
    """The model folder: weights (finite, or refused), code, tokenizer and card; then the run is marked finished."""
    from labelattn import card

    accelerator = run.accelerator
    if not all_finite(accelerator, run.model.parameters()):
        raise diverged(run, "Some weights of the final model are not finite", run.progress.steps)
    accelerator.wait_for_everyone()
    # A collective under FSDP / DeepSpeed ZeRO-3 (the full weights are gathered), so every process calls it.
    state_dict = accelerator.get_state_dict(run.model)
    if accelerator.is_main_process:
        run.log.event("save_pretrained")
        accelerator.unwrap_model(run.model).save_pretrained(run.output_dir, state_dict=state_dict)
        run.log.event("tokenizer")
        run.tokenizer.save_pretrained(run.output_dir)
        run.log.event("card")
        card.write_model_card(run.output_dir, run.data, run.args, scores, repo_id=run.args.push_to_hub)
        run.log.event("finish")
        checkpoints.mark_finished(run.output_dir)
    accelerator.wait_for_everyone()


def push(run: Training) -> None:
    """Upload the saved folder; if that fails, the local model stays and the message says how to push it later."""
    from labelattn import card

    if not run.args.push_to_hub or not run.accelerator.is_main_process:
        return
    try:
        url = card.push_to_hub(run.output_dir, run.args.push_to_hub, private=run.args.private)
    except card.CardError as error:
        raise TrainingError(
            f"The model is saved in {run.output_dir}, but pushing it failed: {error} Push it later with "
            f"`python -c \"from labelattn.card import push_to_hub; push_to_hub('{run.output_dir}', "
            f"'{run.args.push_to_hub}')\"`."
        ) from None
    run.accelerator.print(f"Pushed to {url}")


def load_training_data(args: argparse.Namespace):
    from labelattn.data import load_data

    return load_data(
        args.data,
        args.validation_data,
        args.test_data,
        text_column=args.text_column,
        label_column=args.label_column,
        label_separator=args.label_separator,
        seed=args.split_seed,
    )


def run(args: argparse.Namespace) -> int:
    from labelattn import card

    args.command_line = command_line(args)
    args = resolve_defaults(args)
    check_output_dir(args)
    if args.push_to_hub:
        card.check_can_push(args.push_to_hub)
    data = load_training_data(args)
    tokenizer = load_tokenizer(args.backbone)
    check_max_length(args, tokenizer)
    # Every user error has surfaced by now, before any process group, model or file exists.
    training = set_up(make_accelerator(args), args, data, tokenizer)
    if args.resume:
        resume(training)
    else:
        start_fresh(training)
    validation = train_epochs(training)
    scores = {"validation": validation or evaluate(training, "validation"), "test": evaluate(training, "test")}
    save_model(training, scores)
    training.accelerator.print(f"test {format_scores(scores['test'])}")
    training.accelerator.print(f"Saved the model to {args.output_dir}")
    push(training)
    training.accelerator.end_training()
    return 0


if __name__ == "__main__":  # accelerate launch -m labelattn.train ... / torchrun -m labelattn.train ...
    from labelattn.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
