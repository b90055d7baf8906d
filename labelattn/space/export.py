"""`labelattn space --export DIR`: a folder that runs the Space with nothing else, as a Hugging Face Space or on
any machine with Python (`pip install -r requirements.txt && python app.py` inside it).

The folder holds a wheel of labelattn (built from this checkout, or the one given), `requirements.txt` (CPU
PyTorch, that wheel, the Gradio the app was written for), a `Dockerfile`, the Space card `README.md`, an `app.py`
that starts `labelattn.space.app`, and the model when it is a local folder. It is a Docker Space, not a Gradio-SDK
one, because a Gradio-SDK Space installs `requirements.txt` alone, before the folder is copied into the image, so
a wheel in the folder cannot be installed there; the Dockerfile copies the wheel in first.

Every check (the folder, the model, the wheel) is made before anything is written, and the folder is written
beside its place and moved there at the end: a failed export leaves nothing half-made.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

from huggingface_hub import SpaceCard, SpaceCardData
from huggingface_hub.utils import filter_repo_objects, validate_repo_id
from packaging.requirements import Requirement

# What a Space holds of a model, fetched from the Hub at start or copied into the folder: config, tokenizer and
# safetensors weights; never pickle weights or code (labelattn models run the installed package's code).
MODEL_FILES = ["*.json", "*.safetensors", "*.txt", "*.model"]
# PyTorch's own index of CPU wheels: the registry's torch bundles CUDA libraries (gigabytes) a CPU Space never uses.
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
PORT = 7860
BUNDLED_MODEL = "model"


class ExportError(ValueError):
    """A Space folder that cannot be written as asked (the message says what to change)."""


def export_space(folder: str | Path, model: str | None = None, wheel: str | Path | None = None) -> Path:
    """Write the Space folder `folder` (new or empty) serving `model` (a Hub repo id, or a local model folder,
    copied in), shipping `wheel` (default: one built from the checkout holding this package). Returns the folder."""
    folder = Path(folder)
    check_target(folder)
    local_model = model is not None and Path(model).expanduser().is_dir()
    if local_model:
        from explainers import load_classifier

        load_classifier(model)  # refuses, with the loader's message, a folder that is no loadable classifier
    elif model is not None:
        try:
            validate_repo_id(model)
        except ValueError as error:
            raise ExportError(f"--model {model!r} is neither a model folder nor a Hub repo id ({error}).") from None
    with tempfile.TemporaryDirectory() as scratch:
        wheel = Path(wheel) if wheel is not None else build_wheel(checkout_root(), Path(scratch))
        metadata = wheel_metadata(wheel)
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        try:
            shutil.copy2(wheel, staging / wheel.name)
            if local_model:
                copy_model(Path(model).expanduser(), staging / BUNDLED_MODEL)
            hub_model = None if local_model else model
            (staging / "app.py").write_text(app_source(hub_model, bundled=local_model), encoding="utf-8")
            (staging / "requirements.txt").write_text(requirements(wheel.name, metadata), encoding="utf-8")
            (staging / "Dockerfile").write_text(dockerfile(wheel.name), encoding="utf-8")
            card(metadata, hub_model, bundled=local_model).save(staging / "README.md")
            os.replace(staging, folder)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return folder


def check_target(folder: Path) -> None:
    """Refuse an export folder that exists with files in it, or that cannot be made where it is asked: under a
    file, or where this process cannot write (tried, with a nameless temporary file). Every message names the
    path as it was given."""
    if folder.is_file() or (folder.is_dir() and any(folder.iterdir())):
        raise FileExistsError(f"{folder} exists and is not an empty folder: export the Space into a new folder.")
    existing = folder.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ExportError(
            f"--export {folder}: {existing} is a file, not a folder, so {folder} cannot be made: export the Space "
            "into a new folder elsewhere."
        )
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise ExportError(
            f"--export {folder}: nothing can be written in {existing} ({error.strerror or error}): export the Space "
            "into a folder you can write to."
        ) from None


def copy_model(source: Path, target: Path) -> None:
    """The files of `MODEL_FILES` of a model folder, copied into `target`."""
    target.mkdir()
    for name in filter_repo_objects(sorted(path.name for path in source.iterdir()), allow_patterns=MODEL_FILES):
        shutil.copy2(source / name, target / name)


def checkout_root() -> Path:
    """The source tree holding this package, if it is a checkout of labelattn (not an installed wheel)."""
    root = Path(__file__).resolve().parents[2]
    project = root / "pyproject.toml"
    if not project.is_file() or tomllib.loads(project.read_text())["project"]["name"] != "labelattn":
        raise FileNotFoundError(
            "labelattn runs from an installed wheel, not from a checkout, so there is no source to build a wheel "
            "of: pass the wheel to ship with --wheel PATH (e.g. the one you installed)."
        )
    return root


def build_wheel(root: Path, out: Path) -> Path:
    """A wheel of the checkout `root`, built by pip from a copy of what the wheel is made of (an in-place build
    would leave `build/` in the checkout, whose stale files a later wheel can pick up)."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    setuptools = config["tool"]["setuptools"]
    packages = {pattern.split(".")[0].rstrip("*") for pattern in setuptools["packages"]["find"]["include"]}
    names = ["pyproject.toml", config["project"]["readme"], *(f"{m}.py" for m in setuptools["py-modules"])]
    source = out / "source"
    source.mkdir()
    for name in names:
        shutil.copy2(root / name, source / name)
    for name in sorted(packages):
        shutil.copytree(root / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(source)]
    built = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    wheels = sorted(out.glob("labelattn-*.whl"))
    if built.returncode != 0 or len(wheels) != 1:
        raise ExportError(
            f"pip could not build a wheel of {root}:\n{built.stderr[-1500:]}\nBuild one yourself "
            "(pip wheel --no-deps -w dist .) and pass it with --wheel."
        )
    return wheels[0]


def wheel_metadata(wheel: Path):
    """The core metadata (`METADATA`) of a labelattn wheel, as an email message (Requires-Dist, Version, ...)."""
    if not wheel.is_file() or not wheel.name.startswith("labelattn-") or wheel.suffix != ".whl":
        raise ExportError(f"--wheel {wheel} is not a labelattn wheel file (labelattn-VERSION-py3-none-any.whl).")
    try:
        with zipfile.ZipFile(wheel) as archive:
            name = next((n for n in archive.namelist() if n.endswith(".dist-info/METADATA")), None)
            if name is None:
                raise ExportError(f"{wheel} holds no METADATA: it is not a wheel pip built.")
            return Parser().parsestr(archive.read(name).decode("utf-8"))
    except (zipfile.BadZipFile, UnicodeDecodeError) as error:
        raise ExportError(
            f"--wheel {wheel} is not a wheel ({error}): a wheel is a zip archive; build one with pip wheel --no-deps "
            "-w dist . and pass that file."
        ) from None


def requirements(wheel_name: str, metadata) -> str:
    """`requirements.txt`: CPU PyTorch at the wheel's pin, the wheel itself, and the wheel's own Gradio pin (the
    `space` extra)."""
    pins = [Requirement(line) for line in metadata.get_all("Requires-Dist", [])]
    torch = next(r for r in pins if r.name == "torch" and r.marker is None)
    (spec,) = torch.specifier
    gradio = next(r for r in pins if r.name == "gradio" and r.marker and r.marker.evaluate({"extra": "space"}))
    return (
        "# What the Space installs (the Dockerfile's `pip install -r requirements.txt`; locally, run it inside this\n"
        "# folder): PyTorch's CPU wheel (the registry's torch bundles CUDA libraries a CPU Space never uses),\n"
        "# labelattn from the wheel beside this file, and the Gradio its app was written for.\n"
        f"--extra-index-url {CPU_TORCH_INDEX}\n"
        f"torch{spec.operator}{spec.version}{'+cpu' if spec.operator == '==' else ''}\n"
        f"./{wheel_name}\n"
        f"gradio{gradio.specifier}\n"
    )


def dockerfile(wheel_name: str) -> str:
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return f"""\
# The labelattn Space, a Hugging Face Docker Space (README.md's front matter says `sdk: docker`). The wheel is
# copied in before `pip install`: a Gradio-SDK Space would install requirements.txt before the folder is there.
FROM python:{python}-slim
# Spaces run the container as the user of id 1000.
RUN useradd -m -u 1000 user
USER user
ENV HOME=/home/user PATH=/home/user/.local/bin:$PATH GRADIO_SERVER_NAME=0.0.0.0 GRADIO_SERVER_PORT={PORT}
WORKDIR /home/user/app
COPY --chown=user requirements.txt {wheel_name} ./
RUN pip install --no-cache-dir -r requirements.txt
COPY --chown=user . .
CMD ["python", "app.py"]
"""


def app_source(hub_model: str | None, bundled: bool) -> str:
    """`app.py`: `labelattn.space.app.main()`, serving the Hub model or the bundled folder unless
    `$LABELATTN_MODEL` names another (a variable of the Space)."""
    imports, default = "", ""
    if bundled:
        imports = "from pathlib import Path\n"
        default = f"str(Path(__file__).resolve().parent / {BUNDLED_MODEL!r})"
    elif hub_model is not None:
        default = repr(hub_model)
    if default:
        imports = "import os\n" + imports + "\n"
        default = f"    os.environ.setdefault(MODEL_ENV, {default})  # unless a Space variable sets it\n"
    return f'''\
"""The labelattn Space, written by `labelattn space --export`: `python app.py` serves the demo of the labelattn
package installed from the wheel in this folder (`labelattn.space.app`) on $GRADIO_SERVER_NAME (the Dockerfile sets
0.0.0.0; else loopback), port $GRADIO_SERVER_PORT (default 7860)."""

{imports}from labelattn.space.app import MODEL_ENV, main

if __name__ == "__main__":
{default}    main()
'''


CARD_BODY = """
# labelattn: why did the model decide?

Type a text (or a pair of texts, for NLI and paraphrase classifiers), see the class probabilities of a text
classifier, and see which words pushed the prediction: Integrated Gradients (with its convergence delta), saliency,
gradient × input, attention rollout and flow and gradient-weighted attention (models that return attentions), SHAP
(with its standard error), and label attention with its classes × words heatmap for labelattn models. Ask "why
this class?" for any class, or "why A rather than B?"; compare methods side by side; read the comprehensiveness
and sufficiency of what is shown.

The model is {model}.
The Space variable `LABELATTN_MODEL` chooses another: the Hub repo id of any transformers sequence classifier
with safetensors weights (a model trained with `labelattn train`, or a fine-tuned BERT, RoBERTa, DeBERTa, ...).

This folder was written by `labelattn space --export` from labelattn {version}, whose wheel it ships. Run it
without Docker: `pip install -r requirements.txt && python app.py` inside it. Calling it from Python with
`gradio_client`: see `docs/space.md` in the labelattn repository.
"""


def card(metadata, hub_model: str | None, bundled: bool) -> SpaceCard:
    """The Space card: front matter for a Docker Space (its port, the Hub model it links to), then what it does."""
    data = SpaceCardData(
        title="labelattn — why did the model decide?",
        emoji="🔎",
        colorFrom="green",
        colorTo="red",
        sdk="docker",
        app_port=PORT,
        license=metadata["License-Expression"].lower(),
        pinned=False,
        short_description="Any text classifier, explained word by word",
        models=[hub_model] if hub_model else None,
    )
    if bundled:
        model = f"the model in the folder `{BUNDLED_MODEL}/` of this Space"
    elif hub_model is not None:
        model = f"[`{hub_model}`](https://huggingface.co/{hub_model})"
    else:
        model = "the one the Space variable `LABELATTN_MODEL` names (none is set by the export)"
    body = CARD_BODY.format(model=model, version=metadata["Version"])
    return SpaceCard(f"---\n{data.to_yaml()}\n---\n{body}")
