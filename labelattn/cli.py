"""`labelattn`: one console command, one sub-command per job.

Each sub-command lives in its own module, which exposes `add_arguments(parser)` and `run(args)`; heavy
imports happen inside `run`, so that `labelattn --help` stays fast.
"""

import argparse
import importlib
import os
import sys

COMMANDS = {
    "train": (
        "labelattn.training.run",
        "Train a label-attention classifier on a CSV/JSONL file or a built-in data set.",
    ),
    "average": (
        "labelattn.training.average",
        "Average the weights of training runs that started from one --init-seed into one model, calibrated and "
        "scored again.",
    ),
    "predict": (
        "labelattn.predict",
        "Predict every row of a corpus (CSV, JSONL, Parquet, datasets folder) to a file; resumable, multi-process.",
    ),
    "explain": (
        "labelattn.explain",
        "Show which words drove a model's prediction, by any explanation method: for a few texts, or every row "
        "of a corpus (--data) to a file.",
    ),
    "summarize": (
        "labelattn.corpus.summarize",
        "Across a corpus of explanations, the words that push texts towards each class (tables and a plot).",
    ),
    "evaluate-explanations": (
        "labelattn.evaluate_explanations",
        "Measure the faithfulness of every explanation method on a data set "
        "(comprehensiveness, sufficiency, τ-LOO, rank agreement).",
    ),
    "export": (
        "labelattn.export",
        "Export a trained classifier to ONNX (with its tokenizer and labels), verified to give PyTorch's logits.",
    ),
    "predict-onnx": (
        "labelattn.onnx_predict",
        "Predict every row of a .jsonl/.csv/.txt file with an exported ONNX folder, without torch.",
    ),
    "space": ("labelattn.space", "Run the Gradio demo locally on a trained model."),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="labelattn",
        description="Text classifiers you can inspect: train, explain, measure and demo label-attention models.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args) or 0
    except (ValueError, OSError) as error:
        # A mistake of the user's (bad file, unknown label, ...) or of the system's (a full disk, a folder that
        # became read-only mid-run): the message says what to fix; LABELATTN_DEBUG=1 shows the traceback.
        if os.environ.get("LABELATTN_DEBUG"):
            raise
        print(f"labelattn {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # What a corpus command finished is on disk: the same command resumes from there.
        print(f"labelattn {args.command}: interrupted; what was finished is kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
