"""Command-line arguments that several commands share, each declared once with its help, and what they mean.

- `add_model_arguments`: `--revision` and `--trust-remote-code`, for every command that loads a classifier
  (`classifier_from_arguments` loads it with them).
- `add_method_argument`: `--method`, whose choices are the registered methods (`explainers.METHODS`), read only when
  argparse checks a value or prints the help, so that `labelattn --help` does not import torch.
- `add_text_column_argument`: `--text-column`, for every command that reads texts from a file (train, the corpus
  commands, evaluate-explanations).
- `add_overwrite_argument`: `--overwrite`, for every command that writes a folder or file of results; each says what
  it replaces.
- `MIXED_PRECISION`: the choices of `--mixed-precision` (`labelattn train`, `labelattn predict`).
- `add_option_argument`: `--option KEY=VALUE`, a method's options, VALUE read as JSON by `explainers.parse_options`
  (or `METHOD.KEY=VALUE` for the commands that run several methods).
"""

import argparse
import sys
from pathlib import Path
from typing import Any, Protocol

# `--mixed-precision` of `labelattn train` and `labelattn predict`, as Accelerate names the precisions.
MIXED_PRECISION = ("no", "fp16", "bf16")


class Declares(Protocol):
    """What options are declared on: a parser, an argument group, or `labelattn train`'s declared groups."""

    def add_argument(self, *names: str, **options: Any) -> argparse.Action: ...


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """`--revision` and `--trust-remote-code`: how to load the positional `model` (see `explainers.load_classifier`)."""
    parser.add_argument(
        "--revision",
        metavar="COMMIT",
        help="for a Hub id in the cache: the branch, tag or commit to read (default: main); pin a commit with "
        "--trust-remote-code, so that the code you read is the code that runs",
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run the model's own Python code (its config.json's auto_map), for architectures transformers does "
        "not know; read that code first. Not needed for labelattn models or any architecture transformers has",
    )


def add_text_column_argument(parser: Declares) -> None:
    """`--text-column NAME`: where the texts are in a CSV, JSONL or Parquet file or a datasets folder."""
    parser.add_argument(
        "--text-column",
        default="text",
        metavar="NAME",
        help="column of the texts in a CSV, JSONL or Parquet file or a datasets folder (default: text)",
    )


def add_overwrite_argument(parser: Declares, replaces: str) -> None:
    """`--overwrite`: replace an earlier run's results; `replaces` says which, and what is never deleted."""
    parser.add_argument("--overwrite", action="store_true", help=f"replace {replaces}")


def classifier_from_arguments(args: argparse.Namespace, device=None):
    """The classifier `args.model` and its tokenizer, loaded as `--revision` and `--trust-remote-code` say."""
    from explainers import load_classifier

    if args.trust_remote_code and args.revision is None and not Path(args.model).exists():
        print(
            f"labelattn: warning: --trust-remote-code runs the code of {args.model}'s cached main branch, whatever "
            "it holds now: pin the commit you read with --revision COMMIT.",
            file=sys.stderr,
        )
    return load_classifier(args.model, revision=args.revision, trust_remote_code=args.trust_remote_code, device=device)


def add_option_argument(parser: argparse.ArgumentParser, per_method: bool = False) -> None:
    """`--option`, repeatable: `KEY=VALUE` for the one method of the command, or `METHOD.KEY=VALUE` (`per_method`)
    for a command that runs several."""
    if per_method:
        metavar, example = "METHOD.KEY=VALUE", "shap.n_samples=10, integrated_gradients.n_steps=50"
    else:
        metavar, example = "KEY=VALUE", "n_steps=50, baseline=zero, tolerance=null"
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar=metavar,
        help=f"an option of {'one' if per_method else 'the'} method, VALUE read as JSON (null, true, numbers, "
        f"lists; anything else a string), e.g. {example} (repeatable)",
    )


class RegisteredMethods:
    """The names of the registered explanation methods, as argparse `choices` for the help: looked up in
    `explainers.METHODS` when the help is printed, so that a method module registered later is listed too. Every
    value passes argparse's check: an unknown name gets the explainers' own `MethodError` (which lists the methods),
    the one message of the command line and the API."""

    def __contains__(self, name: object) -> bool:
        return True

    def __iter__(self):
        from explainers import METHODS

        return iter(list(METHODS))


def add_method_argument(parser: argparse.ArgumentParser, default: str = "integrated_gradients") -> None:
    """`--method NAME`, one of the registered methods."""
    parser.add_argument(
        "--method",
        default=default,
        choices=RegisteredMethods(),
        metavar="METHOD",
        help=f"the explanation method, one of: %(choices)s (default: {default})",
    )
