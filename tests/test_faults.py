"""Fault injection: a small run killed with SIGKILL in every phase and resumed, and checkpoints damaged file by file
and resumed. Whatever happens, `--resume` either ends with the uninterrupted run's weights and batches, or refuses
with a clear message: never exit 0 with other weights.

The run pauses at a named event (LABELATTN_PAUSE_AT, see `labelattn.training.events`) and this process kills it there,
so each kill lands at the same point every time; the run's event log (LABELATTN_RUN_LOG) records every batch's rows.
"""

import itertools
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from test_train import batches, kill_run_at, max_weight_difference, planted_rows, run_cli, run_events, train, write_csv

from labelattn.training import checkpoints

pytestmark = pytest.mark.slow

# 120 rows: 96 to train on, in batches of 8: 12 steps per epoch, 24 in all; checkpoints after steps 5, 10, 15, 20, 24.
OPTIONS = ["--hidden-size", "32", "--batch-size", "8", "--epochs", "2", "--seed", "1", "--learning-rate", "2e-2"]
OPTIONS += ["--checkpoint-every", "5"]
# One run killed in every phase in turn: each process, the first started afresh and every other with --resume, is
# killed at the event named (its N-th in that process: a resumed one counts from its checkpoint), and the kill may
# leave a file half written. (event, file left half written or None, the checkpoint it resumes from, phase)
KILL_CHAIN = [
    ("batch@8", None, None, "between steps, 3 steps after the checkpoint of step 5"),
    ("save_state@1", None, 5, "during save_state: checkpoint 10's folder made, nothing in it yet"),
    ("checkpoint_written@1", None, 5, "during save_state: checkpoint 10 written, not yet marked complete"),
    ("evaluate@1", None, 5, "after the last step of epoch 1, before its validation"),
    ("batch@3", None, 10, "between steps: the first batch of epoch 2 (step 13)"),
    ("checkpoint_complete@1", None, 10, "between steps: just after checkpoint 15 is marked complete"),
    ("checkpoint_written@2", None, 15, "during the final save_state (step 24), not yet marked complete"),
    ("tokenizer@1", "model.safetensors", 20, "during the final save_pretrained: its weights file half written"),
    ("card@1", None, 24, "after the final weights and tokenizer, before the model card"),
    ("finish@1", "README.md", 24, "during the model card: README.md half written"),
]
DAMAGES = ("truncated", "zeroed", "garbage")
# Every file of a checkpoint of a one-process run: what Accelerate writes, and the checksums.
CHECKPOINT_FILES = ["complete", "custom_checkpoint_0.pkl", "model.safetensors", "optimizer.bin"]
CHECKPOINT_FILES += ["random_states_0.pkl", "scheduler.bin"]
# The damage each file gets in the end-to-end resumes (all of them are checked against the fallback rule).
END_TO_END_DAMAGE = {"complete": "garbage", "custom_checkpoint_0.pkl": "zeroed", "model.safetensors": "truncated"}
END_TO_END_DAMAGE |= {"optimizer.bin": "zeroed", "random_states_0.pkl": "garbage", "scheduler.bin": "truncated"}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return write_csv(tmp_path_factory.mktemp("faults") / "rows.csv", planted_rows(120))


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory) -> tuple[Path, list[tuple]]:
    """The uninterrupted run: its folder and its batch sequence."""
    folder = tmp_path_factory.mktemp("reference")
    result = train(
        "--data", data, *OPTIONS, "--output-dir", folder / "model", env={"LABELATTN_RUN_LOG": str(folder / "log")}
    )
    assert result.returncode == 0, result.stderr
    return folder / "model", batches(folder / "log")


def kill_at(data: Path, out: Path, log: Path, event: str, *more_options) -> None:
    """Start a run that pauses at `event`, and SIGKILL it there."""
    kill_run_at(event, log, "--data", data, *OPTIONS, *more_options, "--output-dir", out)


def resume(data: Path, out: Path, log: Path, *more_options) -> subprocess.CompletedProcess:
    options = [*OPTIONS, *more_options, "--output-dir", out, "--resume"]
    return train("--data", data, *options, env={"LABELATTN_RUN_LOG": str(log)})


def assert_same_as_reference(reference, out: Path, *logs: Path) -> None:
    """The uninterrupted run's weights in `out`, and its batches trained by the processes of `logs` in turn (each
    killed but the last), none lost or repeated: each one's up to the checkpoint the next resumed from, then the
    last one's."""
    reference_model, reference_batches = reference
    assert max_weight_difference(reference_model, out) <= 1e-6
    trained = []
    for log, next_log in itertools.pairwise(logs):
        resumed_at = run_events(next_log, "resumed")[0]["step"]
        trained += [b for b in batches(log) if b[1] <= resumed_at]
    assert trained + batches(logs[-1]) == reference_batches


def test_sigkill_in_every_phase_then_resume_gives_the_uninterrupted_model(data, reference, tmp_path):
    """One run killed in each phase of `KILL_CHAIN` in turn, each time resumed by the next process, which resumes from
    the checkpoint expected and is killed in the next phase; the last one finishes with the uninterrupted run's
    weights, having trained its batches, none lost or repeated."""
    out = tmp_path / "model"
    logs = [tmp_path / f"process{i}" for i in range(len(KILL_CHAIN) + 1)]
    for (event, half_written, resumes_from, phase), log in zip(KILL_CHAIN, logs, strict=False):
        resuming = resumes_from is not None
        kill_at(data, out, log, event, *(["--resume"] if resuming else []))
        assert [e["step"] for e in run_events(log, "resumed")] == ([resumes_from] if resuming else []), phase
        if half_written:  # what a kill in the middle of writing that file leaves
            path = out / half_written
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    resumed = resume(data, out, logs[-1])
    assert resumed.returncode == 0, resumed.stderr
    assert "Resumed at step 24" in resumed.stdout
    assert_same_as_reference(reference, out, *logs)
    assert (out / "README.md").read_text().startswith("---")


@pytest.fixture(scope="module")
def teacher(data, tmp_path_factory) -> Path:
    """A smaller model trained one epoch on the same rows: its probabilities are not the labels' one-hot."""
    folder = tmp_path_factory.mktemp("teacher") / "model"
    result = train("--data", data, "--hidden-size", "16", "--epochs", "1", "--seed", "2", "--output-dir", folder)
    assert result.returncode == 0, result.stderr
    return folder


def test_a_distilled_run_killed_between_steps_resumes_to_the_uninterrupted_model(data, reference, teacher, tmp_path):
    """--distill-from: the teacher's targets are computed again on resume and reach the resumed batches' own rows.
    Without them, or with them on other rows, the resumed run would end with other weights."""
    distill = ["--distill-from", teacher]
    uninterrupted, out = tmp_path / "uninterrupted", tmp_path / "model"
    result = train(
        "--data", data, *OPTIONS, *distill, "--output-dir", uninterrupted,
        env={"LABELATTN_RUN_LOG": str(tmp_path / "log")},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert max_weight_difference(reference[0], uninterrupted) > 1e-3  # the teacher changed what was learnt
    kill_at(data, out, tmp_path / "killed", "batch@8", *distill)
    resumed = resume(data, out, tmp_path / "resumed", *distill)
    assert resumed.returncode == 0, resumed.stderr
    assert "Resumed at step 5" in resumed.stdout
    reference_batches = batches(tmp_path / "log")
    assert_same_as_reference((uninterrupted, reference_batches), out, tmp_path / "killed", tmp_path / "resumed")


def damage(path: Path, how: str) -> None:
    size = path.stat().st_size
    if how == "truncated":
        path.write_bytes(path.read_bytes()[: size // 2])
    elif how == "zeroed":
        path.write_bytes(bytes(size))
    else:
        path.write_bytes(random.Random(size).randbytes(size))


@pytest.fixture(scope="module")
def killed_with_two_checkpoints(data, tmp_path_factory) -> tuple[Path, Path]:
    """A run killed at step 23: complete checkpoints 15 and 20."""
    folder = tmp_path_factory.mktemp("damaged")
    kill_at(data, folder / "model", folder / "log", "batch@23")
    assert [checkpoints.step_of(p) for p in checkpoints.complete_checkpoints(folder / "model")] == [15, 20]
    return folder / "model", folder / "log"


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("name", CHECKPOINT_FILES)
def test_a_damaged_checkpoint_is_passed_over_with_a_warning(killed_with_two_checkpoints, tmp_path, name, how):
    model, _ = killed_with_two_checkpoints
    out = shutil.copytree(model, tmp_path / "model")
    assert sorted(p.name for p in (out / "checkpoints" / "checkpoint_20").iterdir()) == CHECKPOINT_FILES
    damage(out / "checkpoints" / "checkpoint_20" / name, how)
    warnings = []
    chosen = checkpoints.resumable_checkpoint(out, warn=warnings.append)
    assert chosen.name == "checkpoint_15"
    assert len(warnings) == 1 and "checkpoint_20 is damaged" in warnings[0]
    assert name in warnings[0] or name == "complete"


@pytest.mark.parametrize("name", CHECKPOINT_FILES)
def test_resume_from_a_damaged_checkpoint_falls_back_and_ends_identical(
    data, reference, killed_with_two_checkpoints, tmp_path, name
):
    """End to end, one damage per file (each kind twice): the run falls back to checkpoint 15 and ends identical."""
    model, killed_log = killed_with_two_checkpoints
    out = shutil.copytree(model, tmp_path / "model")
    damage(out / "checkpoints" / "checkpoint_20" / name, END_TO_END_DAMAGE[name])
    resumed = resume(data, out, tmp_path / "resumed")
    assert resumed.returncode == 0, resumed.stderr
    assert "warning: " in resumed.stdout and "checkpoint_20 is damaged" in resumed.stdout
    assert "Resumed at step 15" in resumed.stdout
    assert_same_as_reference(reference, out, killed_log, tmp_path / "resumed")


def test_resume_refuses_when_no_checkpoint_verifies(data, killed_with_two_checkpoints, tmp_path):
    model, _ = killed_with_two_checkpoints
    out = shutil.copytree(model, tmp_path / "model")
    for step in (15, 20):
        damage(out / "checkpoints" / f"checkpoint_{step}" / "model.safetensors", "truncated")
    code, message = run_cli("--data", data, *OPTIONS, "--output-dir", out, "--resume")
    assert code == 2 and "no checkpoint" in message and "verifies" in message
    assert "checkpoint_20: model.safetensors does not match its checksum" in message
    assert not (out / "model.safetensors").exists()
