"""`labelattn average` end to end on tiny runs: the mean of the weights, calibrated again as `labelattn train` does
(a run averaged with its own copy is that run), and every refusal before anything is written."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_train import KEYS, TINY, planted_rows, run_cli, train, write_csv
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from labelattn.coding import CODING_FILE
from labelattn.training import checkpoints


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two runs that start from one head (--init-seed 0) and see the data in two orders, and (settings only) one that
    started apart."""
    root = tmp_path_factory.mktemp("runs")
    data = write_csv(root / "data.csv", planted_rows(120))
    folders = {}
    for name, seeds in {"a": ["--init-seed", "0"], "b": ["--seed", "2", "--init-seed", "0"]}.items():
        folders[name] = root / name
        result = train("--data", data, *TINY, *seeds, "--output-dir", folders[name])
        assert result.returncode == 0, result.stderr
    # Its weights are b's, never read: runs that started apart are refused on their settings alone.
    started_apart = lambda values: values.update(init_seed=None)  # noqa: E731
    folders["apart"] = edited_copy(folders["b"], root / "apart", "training_args.json", started_apart)
    return folders


def average(*args) -> tuple[int, str]:
    """`labelattn average ARGS` through the CLI: the exit code and what it printed to stderr."""
    return run_cli(*args, command="average")


def test_the_average_holds_the_mean_of_the_weights_and_predicts_as_the_runs_learnt(runs, tmp_path):
    out = tmp_path / "average"
    code, message = average(runs["a"], runs["b"], "--output-dir", out)
    assert code == 0, message
    a, b, mean = (load_file(folder / "model.safetensors") for folder in (runs["a"], runs["b"], out))
    assert mean.keys() == a.keys()
    for name in a:
        # Stored in float32: the mean is exact to float32's rounding of the larger of the two.
        tolerance = float(torch.finfo(a[name].dtype).eps) * max(a[name].abs().max(), b[name].abs().max(), 1e-30)
        assert torch.allclose(mean[name], (a[name] + b[name]) / 2, rtol=0, atol=float(tolerance)), name
    assert any(not torch.equal(a[name], b[name]) for name in a)  # two runs, not one twice
    model = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    rows = planted_rows(30, seed=7)
    with torch.no_grad():
        logits = model(**tokenizer([row["text"] for row in rows], padding=True, return_tensors="pt")).logits
    predicted = [model.config.id2label[i] for i in logits.argmax(-1).tolist()]
    assert sum(p == row["label"] for p, row in zip(predicted, rows, strict=True)) >= 27
    assert 0 < model.config.temperature < float("inf")
    record = json.loads((out / checkpoints.AVERAGED_FILE).read_text())
    assert [run["folder"] for run in record["runs"]] == [str(runs["a"]), str(runs["b"])]
    assert set(record["average"]) == {"validation", "test"}
    card = (out / "README.md").read_text()
    assert f"labelattn average {runs['a']} {runs['b']} --output-dir {out}" in card
    assert "initial values of seed 0" in card and "orders of seeds 1, 2" in card, card


def leaves(value, path: str = "") -> dict[str, object]:
    """The values of a JSON document by their path."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in leaves(item, f"{path}/{key}").items()}
    return {path: value}


def test_a_run_averaged_with_its_own_copy_is_that_run_calibrated_alike(runs, tmp_path):
    """The mean of a run and its copy is the run: same weights, and the temperature and coding thresholds fitted again
    on its validation split are the ones its training fitted (one calibration, shared with `labelattn train`). The
    reloaded model's logits agree with the training's to float32's rounding, not to the bit (sums in other orders),
    and the temperature scales with them: within 1e-5, about a hundred float32 steps."""
    copy = edited_copy(runs["a"], tmp_path / "copy", "training_args.json", lambda v: v.update(seed=9))
    out = tmp_path / "average"
    code, message = average(runs["a"], copy, "--output-dir", out)
    assert code == 0, message
    original, averaged = load_file(runs["a"] / "model.safetensors"), load_file(out / "model.safetensors")
    assert all(torch.equal(original[name], averaged[name]) for name in original)
    configs = [json.loads((folder / "config.json").read_text()) for folder in (runs["a"], out)]
    assert configs[1]["temperature"] == pytest.approx(configs[0]["temperature"], rel=1e-5)
    trained, refitted = (leaves(json.loads((folder / CODING_FILE).read_text())) for folder in (runs["a"], out))
    assert trained.keys() == refitted.keys()
    for path, value in trained.items():
        assert refitted[path] == (pytest.approx(value, rel=1e-5, abs=1e-7) if isinstance(value, float) else value), path


def refusal(runs: dict[str, Path], tmp_path: Path, *given) -> str:
    """The message of a refused `labelattn average`, which must write no output folder."""
    out = tmp_path / "out"
    code, message = average(*given, "--output-dir", out)
    assert code == 2, message
    assert not out.exists()
    return message


def edited_copy(run: Path, folder: Path, name: str, edit) -> Path:
    """A copy of `run` whose JSON file `name` went through `edit`."""
    shutil.copytree(run, folder)
    values = json.loads((folder / name).read_text())
    edit(values)
    (folder / name).write_text(json.dumps(values))
    return folder


def test_runs_that_cannot_be_averaged_are_refused_before_anything_is_written(runs, tmp_path):
    assert "two runs or more, got 1" in refusal(runs, tmp_path, runs["a"])
    assert "listed twice" in refusal(runs, tmp_path, runs["a"], runs["a"])
    shutil.copytree(runs["a"], tmp_path / "copy")
    assert "one run twice (or a copy)" in refusal(runs, tmp_path, runs["a"], tmp_path / "copy")
    unfinished = tmp_path / "unfinished"
    shutil.copytree(runs["b"], unfinished)
    (unfinished / checkpoints.CHECKPOINTS / checkpoints.FINISHED).unlink()  # a new run started over it
    assert "has not finished" in refusal(runs, tmp_path, runs["a"], unfinished)
    data_folder = tmp_path / "not-a-run"
    data_folder.mkdir()
    assert "is not the folder of a finished `labelattn train` run" in refusal(runs, tmp_path, runs["a"], data_folder)
    message = refusal(runs, tmp_path, runs["a"], runs["apart"])
    assert "started from different initial weights (those of seeds 0 and 2)" in message
    assert "--init-seed" in message
    wider = edited_copy(runs["b"], tmp_path / "wider", "training_args.json", lambda v: v.update(hidden_size=64))
    message = refusal(runs, tmp_path, runs["a"], wider)
    assert "other data or models" in message and "'hidden_size': (32, 64)" in message
    other_model = edited_copy(runs["b"], tmp_path / "other", "config.json", lambda v: v.update(scorer_rank=2))
    assert "config.json differ" in refusal(runs, tmp_path, runs["a"], other_model)

    def rename_a_token(values: dict) -> None:
        vocab = values["model"]["vocab"]
        vocab["zebra-renamed"] = vocab.pop("zebra")

    other_tokens = edited_copy(runs["b"], tmp_path / "tokens", "tokenizer.json", rename_a_token)
    assert "tokenizer.json differ" in refusal(runs, tmp_path, runs["a"], other_tokens)


def test_the_output_folder_is_never_a_run_nor_the_users_files(runs, tmp_path):
    code, message = average(runs["a"], runs["b"], "--output-dir", runs["b"])
    assert code == 2 and "already holds files" in message, message
    code, message = average(runs["a"], runs["b"], "--output-dir", runs["b"], "--overwrite")
    assert code == 2 and f"--overwrite would delete {runs['b']}" in message, message
    assert (runs["b"] / "model.safetensors").is_file()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    code, message = average(runs["a"], runs["b"], "--output-dir", mine, "--overwrite")
    assert code == 2 and "notes.txt, which is not the output of a model folder" in message, message
    assert (mine / "notes.txt").read_text() == "keep"
    replaced = tmp_path / "replaced"
    shutil.copytree(runs["apart"], replaced)  # a model folder that is none of the runs: replaced with --overwrite
    code, message = average(runs["a"], runs["b"], "--output-dir", replaced, "--overwrite")
    assert code == 0, message
    assert not (replaced / checkpoints.CHECKPOINTS).exists() and (replaced / checkpoints.AVERAGED_FILE).is_file()
    assert set(KEYS) == set(json.loads((replaced / "config.json").read_text())["label2id"])


def test_data_that_changed_since_the_runs_is_refused(runs, tmp_path):
    """The runs' data is read again to score and calibrate the average: splits or classes that are no longer the ones
    they were trained on are refused (the split hashes of their cards, which hash the rows' ids, so a file with
    other rows; the classes of their config)."""

    def moved_to(data: Path):
        return lambda values: values.update(data=str(data))

    other_rows = write_csv(tmp_path / "other.csv", planted_rows(150, seed=5))
    a, b = (edited_copy(runs[n], tmp_path / n, "training_args.json", moved_to(other_rows)) for n in ("a", "b"))
    message = refusal(runs, tmp_path, a, b)
    assert "split(s) of the data read now are not those of" in message, message
    more_classes = write_csv(tmp_path / "more.csv", planted_rows(117) + [{"text": "basalt", "label": "rock"}] * 3)
    a, b = (edited_copy(runs[n], tmp_path / f"{n}2", "training_args.json", moved_to(more_classes)) for n in ("a", "b"))
    assert "The data's classes are not the runs' (4 now, 3 in their config)" in refusal(runs, tmp_path, a, b)


def test_a_failure_after_the_checks_keeps_what_overwrite_would_replace(runs, tmp_path, monkeypatch):
    """--overwrite empties the output folder only once the average is computed: damaged weights keep the old model."""
    damaged = tmp_path / "damaged"
    shutil.copytree(runs["b"], damaged)
    weights = damaged / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    old = tmp_path / "old"
    shutil.copytree(runs["apart"], old)
    code, message = average(runs["a"], damaged, "--output-dir", old, "--overwrite")
    assert code == 2 and "model.safetensors could not be read" in message and "damaged" in message, message
    assert (old / "model.safetensors").read_bytes() == (runs["apart"] / "model.safetensors").read_bytes()
    monkeypatch.setenv("WORLD_SIZE", "2")
    code, message = average(runs["a"], runs["b"], "--output-dir", tmp_path / "launched")
    assert code == 2 and "runs in one process" in message, message
