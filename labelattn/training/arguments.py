"""The options of `labelattn train`, declared once with their help in four groups (data, model, optimisation,
output), and `command_line`, the command that gives a run's settings back (recorded in the model card)."""

import argparse
import shlex
from pathlib import Path

from labelattn import DEFAULT_MODEL_DIR
from labelattn.arguments import MIXED_PRECISION, add_overwrite_argument, add_text_column_argument
from labelattn.training.backbones import BACKBONES

# With --label-descriptions (see docs/many-classes.md for the measurement that chose it).
DEFAULT_RESIDUAL_DROPOUT = 0.5
# With --distill-from: the teachers' share of the loss, the labels' the rest (Hinton et al.'s usual half).
DEFAULT_DISTILL_WEIGHT = 0.5
# The licence a model card names without --license.
DEFAULT_LICENSE = "apache-2.0"
# Label-attention heads when --num-attention-heads is not given.
DEFAULT_ATTENTION_HEADS = 4
# Options that say how to run, not what to train: left out of the recorded command.
NOT_RECORDED = ("resume", "overwrite")


class DeclaredGroup:
    """An argument group that keeps the options declared in it (argparse lists a parser's only privately)."""

    def __init__(self, parser: argparse.ArgumentParser, title: str, declared: list[argparse.Action]) -> None:
        self.group, self.declared = parser.add_argument_group(title), declared

    def add_argument(self, *names: str, **options) -> argparse.Action:
        action = self.group.add_argument(*names, **options)
        self.declared.append(action)
        return action


def add_arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Declare the options of `labelattn train` on `parser`, grouped; returns them in the order declared."""
    declared: list[argparse.Action] = []
    add_data_options(DeclaredGroup(parser, "data", declared))
    add_model_options(DeclaredGroup(parser, "model", declared))
    add_optimisation_options(DeclaredGroup(parser, "optimisation", declared))
    add_output_options(DeclaredGroup(parser, "output", declared))
    return declared


def comma_separated(text: str) -> list[str]:
    return [part.strip() for part in text.split(",")]


def add_data_options(group: DeclaredGroup) -> None:
    """Where the texts and labels come from."""
    group.add_argument(
        "--data",
        default="trec",
        help="A built-in data set (trec, trec-fine, bbc-news, icd10-cm: docs/many-classes.md) or the training "
        "data: a .csv, a .jsonl or a datasets folder "
        "(default: trec). Splits not given are held out of it, stratified: 10%% validation, 10%% test.",
    )
    group.add_argument("--validation-data", help="Validation rows (.csv, .jsonl or a datasets folder).")
    group.add_argument("--test-data", help="Test rows (.csv, .jsonl or a datasets folder).")
    add_text_column_argument(group)
    group.add_argument(
        "--label-column",
        default="label",
        help="Column holding the label, or a list of labels per row for multi-label data (default: label).",
    )
    group.add_argument(
        "--label-separator",
        default="",
        help="Split string labels on this separator, e.g. '|' for multi-label CSV cells such as 'sport|politics'.",
    )
    group.add_argument("--split-seed", type=int, default=42, help="Seed of the held-out splits (default: 42).")
    group.add_argument(
        "--hierarchy-separator",
        help="Labels written with their groups, top first, split on this separator, e.g. '>' for "
        "'Neoplasms>Breast>C50' (see docs/many-classes.md).",
    )
    group.add_argument(
        "--label-file",
        help="A file of the classes (.csv, .jsonl or a datasets folder) with the columns label and parent (a class's "
        "group, a group's own group; empty at the top), and optionally description.",
    )
    group.add_argument(
        "--hierarchy-levels",
        type=comma_separated,
        metavar="NAMES",
        help="Names of the hierarchy's levels, top first, comma-separated, e.g. chapter,block,category "
        "(default: level 1, level 2, ...).",
    )


def add_model_options(group: DeclaredGroup) -> None:
    """The backbone, the head and their sizes: one declaration per option with its help, long because the model has
    many options, not because it does much."""
    named = ", ".join(f"{name!r} ({backbone.summary})" for name, backbone in BACKBONES.items())
    group.add_argument(
        "--backbone",
        default="embedding",
        help=f"{named} or the path of a local encoder folder (default: embedding).",
    )
    group.add_argument(
        "--encoder-layers",
        type=int,
        metavar="N",
        help="With an encoder backbone: keep its first N layers, with their pretrained weights, and leave the rest "
        "out (default: all). Fewer layers cost less a token: on ICD-10-CM, --backbone minilm --encoder-layers 2 "
        "--learning-rate 1e-4 --mixed-precision bf16 trained in 55%% of all 6 layers' time, 0.45 points of top-1 "
        "below them (docs/many-classes.md).",
    )
    group.add_argument("--pooling", choices=["label_attention", "mean"], default="label_attention")
    group.add_argument(
        "--label-descriptions",
        action="store_true",
        default=None,  # not False: the settings of runs made before the option still match
        help="Compute each class's label-attention query from its description (the built-in many-class data sets "
        "and --label-file give them; the class name otherwise) by a map that the classes share and train, plus a "
        "free residual for classes with training rows: a class a --label-file describes but no training row shows "
        "is then a class of the model too. See docs/many-classes.md.",
    )
    group.add_argument(
        "--label-residual-dropout",
        type=float,
        help="With --label-descriptions: the probability that a training step leaves a class's residual out, so "
        f"that the shared map learns to carry what descriptions say (default: {DEFAULT_RESIDUAL_DROPOUT}).",
    )
    group.add_argument(
        "--untrained-class-offset",
        type=float,
        help="With --label-descriptions: added to the logit of every class that no training row shows, so that a "
        "class known only by its description can be ranked first (default: the config's, 6.0; 0 ranks such classes "
        "as the shared maps alone do; see docs/many-classes.md).",
    )
    group.add_argument(
        "--hidden-size",
        type=int,
        default=384,
        help="Width of the embedding backbone (default: 384, MiniLM's own width, so its token vectors are kept whole).",
    )
    group.add_argument(
        "--token-context-width",
        type=int,
        default=None,
        help="Odd width of the embedding backbone's residual convolution that lets each token see its neighbours "
        "('how many' is not 'many ... how'); 0 reads a pure bag of tokens (default: 5, two on each side: more "
        "accurate than 3 on TREC and TREC fine over five seeds; 3 from 1,000 classes, as accurate there and "
        "faster, see docs/default-model.md).",
    )
    group.add_argument(
        "--num-attention-heads",
        type=int,
        default=DEFAULT_ATTENTION_HEADS,
        help=f"Label-attention heads (default: {DEFAULT_ATTENTION_HEADS}).",
    )
    group.add_argument(
        "--attention-key-size",
        type=int,
        default=None,
        help="Width of each head's queries and keys (default: the values' width, hidden size / heads); comparing "
        "every class with every token costs in proportion to it, the head's main cost at thousands of classes.",
    )
    group.add_argument(
        "--scorer",
        choices=["shared", "class_bias", "per_class", "normed"],
        default="per_class",
        help="How label attention turns a class vector into its logit (see docs/model.md): one scorer shared by "
        "the classes ('shared'), plus a bias per class ('class_bias'), a scorer per class ('per_class', see "
        "--scorer-rank), or an RMS norm before the shared scorer ('normed'; its label contributions are refused). "
        "Default: 'per_class', the most accurate on TREC, TREC fine and ICD-10-CM over three seeds each, with "
        "label contributions still exact.",
    )
    group.add_argument(
        "--scorer-rank",
        type=int,
        default=None,
        help="With --scorer per_class: each class's scorer is its code of this many numbers read through a basis "
        "shared by the classes, so each token carries this many numbers per head instead of the hidden size "
        "(default: none, a full scorer per class).",
    )
    group.add_argument(
        "--label-projections",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Compute each class's query from its label embedding through a map shared by the classes, and its class "
        "vector through an output map (as transformers' attention); --no-label-projections gives each class its own "
        "query and scores the heads' contexts directly (LAAT's head), which spares two products of every class "
        "with those maps per step, each class's own parameters then learning at 10x the head's rate: 1.28x faster "
        "steps at 1,918 classes (default: on; off from 1,000 classes).",
    )
    group.add_argument("--max-length", type=int, default=128, help="Tokens read per text (default: 128).")
    group.add_argument(
        "--classifier-dropout",
        type=float,
        default=0.0,
        help="Dropout on the class vectors before the scoring layer (default: 0: label attention then folds the "
        "scoring layer into the head in training too and never forms the class vectors, about 1.1x faster a step "
        "at 6 classes and far more at hundreds; as accurate on TREC and BBC News).",
    )
    group.add_argument(
        "--initializer-range",
        type=float,
        default=0.1,
        help="Standard deviation of the new weights (default: 0.1: with the usual 0.02 the product of embedding, "
        "key/value and output projections starts so small that learning stalls).",
    )
    from labelattn.training.static_embeddings import DEFAULT_EMBEDDINGS, EMBEDDINGS

    group.add_argument(
        "--embeddings",
        choices=EMBEDDINGS,
        default=DEFAULT_EMBEDDINGS,
        help="Where the embedding backbone's token table starts: 'model2vec' (MiniLM distilled to static vectors "
        "by Model2Vec), 'minilm-input' (MiniLM's input embeddings) — both reduced to --hidden-size by PCA, made "
        f"offline once and cached under the Hugging Face cache — or 'random' (default: {DEFAULT_EMBEDDINGS}).",
    )
    group.add_argument(
        "--freeze-embeddings",
        action=argparse.BooleanOptionalAction,
        help="Keep the token table as it starts (the backbone's input embeddings for an encoder). Default: frozen "
        "for the embedding backbone started from MiniLM's vectors (more accurate on TREC, and faster: the update "
        "of the 30,522-row table would dominate a step), trained otherwise.",
    )


def add_optimisation_options(group: DeclaredGroup) -> None:
    """How the model is trained."""
    group.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="Passes over the training data (default: 5: TREC and TREC fine are more accurate than with 3 over five "
        "seeds; 3 for the embedding backbone from 1,000 classes, where they give nearly as much in 0.6x the time, "
        "see docs/default-model.md).",
    )
    group.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="Texts per batch and process (default: 32; 64 for the embedding backbone from 1,000 classes, where two "
        "seeds of ICD-10-CM were 0.24 points more accurate in 0.93-0.96x the time, see docs/many-classes.md).",
    )
    group.add_argument(
        "--group-by-length",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Batch texts of like length together, in a random order of such batches: less padding, so faster steps "
        "where lengths vary; ICD-10-CM trains 1.5x faster at the same accuracy, TREC 1.4x at 0.8 points less "
        "(default: off, random rows; on from 1,000 classes).",
    )
    group.add_argument(
        "--learning-rate", type=float, help="Peak learning rate of AdamW (default: 5e-3 embedding, 5e-5 encoder)."
    )
    group.add_argument(
        "--head-learning-rate",
        type=float,
        help="Learning rate of the new head on a pretrained encoder (default: 1e-3; the --learning-rate otherwise).",
    )
    group.add_argument("--weight-decay", type=float, default=0.01)
    group.add_argument("--warmup-ratio", type=float, default=0.1, help="Share of steps of linear warm-up.")
    group.add_argument("--gradient-accumulation-steps", type=int, default=1)
    group.add_argument("--max-grad-norm", type=float, default=1.0)
    group.add_argument(
        "--label-smoothing",
        type=float,
        help="Share of a single-label text's target spread evenly over the classes (cross-entropy's "
        "label_smoothing, transformers' label_smoothing_factor); the temperature fitted after training calibrates "
        "the probabilities again (default: 0.1 for single-label data, 0 for multi-label data, where it is refused).",
    )
    group.add_argument(
        "--ema-decay",
        type=float,
        help="Save the exponential moving average of the weights (torch.optim.swa_utils.AveragedModel), updated "
        "after every optimizer step with this decay, instead of the last weights (default: off; 0.999 averages "
        "about the last 1,000 steps, see docs/many-classes.md).",
    )
    group.add_argument(
        "--distill-from",
        type=comma_separated,
        metavar="MODEL[,MODEL...]",
        help="Knowledge distillation: train against the mean probabilities that these trained classifiers (model "
        "folders with the data's classes, such as labelattn train's) give each training text, as well as against "
        "the labels; computed once before training (default: off; see docs/many-classes.md).",
    )
    group.add_argument(
        "--distill-weight",
        type=float,
        help="With --distill-from, the teachers' share of the loss, in (0, 1]; the labels weigh the rest "
        f"(default: {DEFAULT_DISTILL_WEIGHT}).",
    )
    group.add_argument(
        "--mixed-precision",
        choices=MIXED_PRECISION,
        help="Mixed precision (default: as set by `accelerate config` / `accelerate launch`, else no).",
    )
    group.add_argument("--seed", type=int, default=0, help="Seed of initialisation, data order, dropout.")
    group.add_argument(
        "--init-seed",
        type=int,
        help="Seed of the model's initial values alone (default: --seed). Runs with one --init-seed and several "
        "--seed start from the same weights and see the data in different orders: their weights can be averaged "
        "into one model (a model soup, see docs/many-classes.md), which runs with different heads cannot.",
    )


def add_output_options(group: DeclaredGroup) -> None:
    """Where the model goes, its checkpoints and its Hub repository."""
    group.add_argument(
        "--output-dir",
        type=Path,
        default=DEFAULT_MODEL_DIR,
        help=f"Where the model goes (default: {DEFAULT_MODEL_DIR}).",
    )
    add_overwrite_argument(
        group,
        "what --output-dir holds (another model, old checkpoints): deleted, then trained into; refused when it holds "
        "anything else, such as the data",
    )
    group.add_argument(
        "--checkpoint-every",
        type=int,
        default=500,
        help="Save the training state every N optimizer steps, and at the end (default: 500, as transformers' "
        "Trainer saves).",
    )
    group.add_argument("--resume", action="store_true", help="Continue from the last checkpoint in --output-dir.")
    group.add_argument("--push-to-hub", metavar="REPO", help="Push the model with its card to this Hub repository.")
    group.add_argument("--private", action="store_true", help="Create the Hub repository as private.")
    group.add_argument(
        "--license", default=DEFAULT_LICENSE, help=f"Licence in the model card (default: {DEFAULT_LICENSE})."
    )


def command_line(args: argparse.Namespace) -> str:
    """The `labelattn train` command that gives these settings (options left at their default are omitted)."""
    parser = argparse.ArgumentParser()
    declared = add_arguments(parser)
    defaults = parser.parse_args([])
    words = ["labelattn", "train"]
    for action in declared:
        name, value = action.dest, getattr(args, action.dest, None)
        if name in NOT_RECORDED or value is None or value == getattr(defaults, name):
            continue
        words += option_words(action, value)
    return shlex.join(words)


def typed_options(values: dict) -> str:
    """The options of `labelattn train` that give these settings (by name) these values, as typed."""
    declared = {action.dest: action for action in add_arguments(argparse.ArgumentParser())}
    return shlex.join([word for name, value in values.items() for word in option_words(declared[name], value)])


def option_words(action: argparse.Action, value) -> list[str]:
    """The words that give option `action` the value `value`: a flag for a boolean (a switched-off one can only be
    `--no-...`, a BooleanOptionalAction), else the option and its value (a list comma-joined)."""
    if isinstance(value, bool):
        return [action.option_strings[-1] if value is False else action.option_strings[0]]
    return [action.option_strings[0], ",".join(value) if isinstance(value, list) else str(value)]
