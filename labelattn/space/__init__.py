"""`labelattn space [MODEL]`: serve the Gradio demo (`labelattn.space.app`) locally, on loopback by default;
`labelattn space --export DIR [--model ID]`: write a folder that runs it as a Hugging Face Space
(`labelattn.space.export`).

Gradio is imported only when the page is built, so that `labelattn --help` stays fast.
"""

import argparse
import importlib
from types import ModuleType


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model",
        nargs="?",
        default=None,
        help="any text classifier: a local folder or a cached Hub repo id (default: $LABELATTN_MODEL, else "
        "models/trec-embedding as saved by `labelattn train`)",
    )
    parser.add_argument("--port", type=int, default=7860, help="port to serve on (default: 7860)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, this machine only; 0.0.0.0 opens it to the network)",
    )
    export = parser.add_argument_group("export a Space folder instead of serving")
    export.add_argument(
        "--export",
        metavar="DIR",
        help="write a new folder that runs the demo as a Hugging Face Docker Space (a wheel of labelattn, "
        "requirements, Dockerfile, card, app.py); upload it with `hf upload` (docs/space.md)",
    )
    export.add_argument(
        "--model",
        dest="export_model",
        metavar="ID",
        help="the model the exported Space serves: a Hub repo id, or a local model folder, copied into the Space "
        "(same as MODEL; default: none, the Space variable LABELATTN_MODEL names it)",
    )
    export.add_argument(
        "--wheel",
        metavar="PATH",
        help="the labelattn wheel to ship (default: one built from this checkout with pip wheel)",
    )


def load_app() -> ModuleType:
    """The module `labelattn.space.app` (its `build_demo` builds the page, its `launch` serves it)."""
    return importlib.import_module("labelattn.space.app")


def run(args: argparse.Namespace) -> int:
    if args.export is None:
        if args.export_model is not None or args.wheel is not None:
            raise ValueError("--model and --wheel go with --export DIR; to serve a model, give it as MODEL.")
        return serve(args)
    if args.model is not None and args.export_model is not None and args.model != args.export_model:
        raise ValueError(f"Two models given ({args.model} and --model {args.export_model}): give one.")
    from .export import export_space

    folder = export_space(args.export, args.export_model or args.model, args.wheel)
    print(
        f"labelattn space: wrote {folder}. Publish it as the Space NAME: `hf repos create NAME --type space --sdk "
        f"docker`, then `hf upload NAME {folder} --repo-type space` (docs/space.md)."
    )
    return 0


def serve(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise ValueError(f"--port {args.port} is not a TCP port: pick one from 1 to 65535.")
    app = load_app()
    # A model asked for by name is loaded here, so that a wrong name fails at once with the loader's one message
    # (`explainers.LoadError`) rather than on the page; without one, the page says how to get a model.
    model = app.Backend(args.model) if args.model else app.find_model()
    shown = getattr(model, "model_path", model) or "no model (the page says how to train one)"
    print(f"labelattn space: serving {shown} on http://{args.host}:{args.port}")
    app.launch(app.build_demo(model), server_name=args.host, server_port=args.port)
    return 0
