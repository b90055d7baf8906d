"""`labelattn space [MODEL]`: run the Gradio demo of `space/app.py` locally, on loopback by default."""

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType

# The Space's app lives in the repository's `space/` folder (what a Hugging Face Space runs unchanged), next to
# this package in a clone or an editable install.
APP_FILE = Path(__file__).resolve().parents[1] / "space" / "app.py"


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


def load_app() -> ModuleType:
    """The module `space/app.py` (its `build_demo` builds the page, its `launch` serves it)."""
    if not APP_FILE.is_file():
        raise FileNotFoundError(
            f"The demo app {APP_FILE} is missing: `labelattn space` runs the space/ folder of a clone of the "
            "repository (pip install -e '.[space]' there)."
        )
    spec = importlib.util.spec_from_file_location("labelattn_space_app", APP_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(args: argparse.Namespace) -> int:
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
