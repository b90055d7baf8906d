"""`bench/gpu_check.py --tiny`: every step of the GPU check runs at toy size on a CPU and passes its checks, within
the CPU time the suite allows, so that the check is ready (and has not rotted) when a GPU is at hand."""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a second process that trains eight toy runs

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_check_runs_every_step_at_toy_size(tmp_path):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    output = tmp_path / "gpu_check.json"
    command = [sys.executable, str(REPO_ROOT / "bench" / "gpu_check.py"), "--tiny", "--output", str(output)]
    # This checkout's modules, whatever the environment's editable install points at.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    report = json.loads(output.read_text())
    assert report["mode"] == "tiny" and report["ok"]
    names = [step["name"] for step in report["steps"]]
    for backbone in ("embedding", "tiny-bert"):
        for precision in ("bf16", "fp16"):
            assert f"train {backbone} {precision}" in names and f"train {backbone} {precision}: resume" in names
        assert f"integrated_gradients {backbone}" in names and f"shap {backbone}" in names
    assert "predict icd10-cm" in names and "explain --data label_attention icd10-cm" in names
    for step in report["steps"]:
        figures = step["figures"]
        if step["name"].endswith("resume"):
            assert figures["max_weight_gap"] == 0.0, step  # bit-identical on a CPU
        elif step["name"].startswith("train"):
            assert figures["train_loss"] < 0.9 * figures["ln_classes"], step
        elif "share_within_1pct" in figures:
            assert figures["share_within_1pct"] == 1.0 and figures["passes_per_text"] >= 1, step
        else:
            assert figures["rows_per_s"] > 0, step
    assert "every check ok: True" in done.stdout
    # The budget in CPU time, which other jobs on a shared machine do not inflate as they do wall time.
    cpu_seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu_seconds <= 60, f"gpu_check --tiny used {cpu_seconds:.0f} s of CPU"
