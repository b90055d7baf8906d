"""`bench/gpu_check.py --tiny`: every step of the GPU check runs at toy size on a CPU and passes its checks, within
the CPU time the suite allows, so that the check is ready (and has not rotted) when a GPU is at hand. And a step
that raises is recorded while the later ones run, with the JSON rewritten after every step, so that one paid GPU
session never loses the figures it already has."""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import bench_script

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # a second process that trains eight toy runs
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
    assert report["mode"] == "tiny" and report["ok"] and report["complete"] and report["failed"] == []
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


@pytest.fixture(scope="module")
def gpu_check():
    return bench_script("gpu_check")


def out_of_memory():
    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_a_step_that_raises_is_recorded_and_the_next_still_runs(gpu_check, tmp_path):
    checker = gpu_check.Checker("tiny", tmp_path, tmp_path / "gpu_check.json")
    checker.step("first", lambda: ({"rows_per_s": 1.0}, True))
    checker.step("raises", out_of_memory)
    checker.step("after", lambda: ({"rows_per_s": 2.0}, True))

    assert [(step.name, step.ok) for step in checker.steps] == [("first", True), ("raises", False), ("after", True)]
    error = checker.steps[1].error
    assert error["type"] == "RuntimeError" and error["message"].startswith("CUDA out of memory")
    assert "out of memory" in error["traceback"][-1] and "out_of_memory" in "\n".join(error["traceback"])
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert not report["ok"] and report["failed"] == ["raises"] and not report["complete"]
    assert report["steps"][2]["figures"] == {"rows_per_s": 2.0}


def test_the_json_on_disk_holds_every_finished_step_when_the_run_is_killed(gpu_check, tmp_path):
    output = tmp_path / "out" / "gpu_check.json"  # a folder that does not exist yet
    checker = gpu_check.Checker("tiny", tmp_path, output)
    seen = []  # the step names on disk as each step starts

    def step(figure):
        def run():
            seen.append([s["name"] for s in json.loads(output.read_text())["steps"]] if output.exists() else [])
            return {"figure": figure}, True

        return run

    def killed():
        raise KeyboardInterrupt  # what a time limit's signal looks like in Python: not caught as a failed step

    checker.step("a", step(1))
    checker.step("b", out_of_memory)
    checker.step("c", step(3))
    with pytest.raises(KeyboardInterrupt):
        checker.step("killed", killed)

    assert seen == [[], ["a", "b"]]
    report = json.loads(output.read_text())
    assert [s["name"] for s in report["steps"]] == ["a", "b", "c"] and report["steps"][2]["figures"] == {"figure": 3}
    assert [path.name for path in output.parent.iterdir()] == ["gpu_check.json"]  # no temporary file left behind


def test_a_failed_step_makes_the_exit_status_non_zero_and_the_summary_names_it(
    gpu_check, tmp_path, monkeypatch, capsys
):
    """`main` with its stages replaced by instant steps: the corpus step, the last, runs out of memory."""
    monkeypatch.setattr(gpu_check.torch, "set_num_threads", lambda threads: None)  # keep this process's threads
    monkeypatch.setattr(gpu_check, "trec_data", lambda checker: "trec")
    monkeypatch.setattr(gpu_check, "tiny_encoder", lambda checker: "tiny-bert")

    def train_and_resume(checker, backbone, precision, data):
        checker.step(f"train {backbone} {precision}", lambda: ({"train_loss": 0.1}, True))

    monkeypatch.setattr(gpu_check, "train_and_resume", train_and_resume)
    monkeypatch.setattr(gpu_check, "explain_speed", lambda checker, folder, name: None)
    monkeypatch.setattr(gpu_check, "corpus_speed", lambda checker: checker.step("predict icd10-cm", out_of_memory))
    output = tmp_path / "gpu_check.json"

    assert gpu_check.main(["--tiny", "--output", str(output)]) == 1
    report = json.loads(output.read_text())
    assert report["complete"] and not report["ok"] and report["failed"] == ["predict icd10-cm"]
    assert len(report["steps"]) == 5 and all(step["ok"] for step in report["steps"][:4])
    summary = capsys.readouterr().out
    assert "every check ok: False" in summary and "failed: predict icd10-cm" in summary
    assert "predict icd10-cm raised RuntimeError: CUDA out of memory" in summary
