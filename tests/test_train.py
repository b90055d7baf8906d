"""`labelattn train` end to end on tiny files: what it saves, resume after SIGKILL, two processes, bad options."""

import argparse
import dataclasses
import functools
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import FILLER, make_model, tiny_encoder_config
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from configuration_labelattn import dropout_problem, token_context_width_problem
from labelattn import cli, minilm_path
from labelattn.training import arguments, build, calibration, card, checkpoints, run, settings, setup
from labelattn.training.arguments import DEFAULT_RESIDUAL_DROPOUT

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"animal": "zebra", "plant": "fern", "stone": "granite"}
# Small and quick, yet enough for the planted words to be learnt.
TINY = ["--hidden-size", "32", "--batch-size", "4", "--epochs", "3", "--seed", "1", "--learning-rate", "2e-2"]


def planted_rows(n: int, seed: int = 0, noise: float = 0.0) -> list[dict]:
    """Rows of filler words where one planted word decides the class; with `noise`, that share of the rows is
    labelled at random instead (the planted word stays)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = list(KEYS)[i % 3]
        words = rng.sample(FILLER, 6)
        words.insert(rng.randrange(7), KEYS[label])
        if noise and rng.random() < noise:
            label = rng.choice(list(KEYS))
        rows.append({"text": " ".join(words), "label": label})
    return rows


def write_csv(path: Path, rows: list[dict]) -> Path:
    path.write_text("text,label\n" + "".join(f"{r['text']},{r['label']}\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def tiny_csv(tmp_path_factory) -> Path:
    return write_csv(tmp_path_factory.mktemp("data") / "tiny.csv", planted_rows(120))


def train(*args: str, env: dict | None = None, launcher: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run the training module in a fresh process, as users do (one thread: the cores are shared)."""
    command = [*(launcher or [sys.executable]), "-m", "labelattn", "train", *map(str, args)]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "LABELATTN_DEBUG": "", **(env or {})}
    return subprocess.run(command, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=240)


def max_weight_difference(a: Path, b: Path) -> float:
    first, second = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert first.keys() == second.keys()
    return max((first[k] - second[k]).abs().max().item() for k in first)


def run_events(log: Path, name: str | None = None, rank: int = 0) -> list[dict]:
    """The events a run logged (LABELATTN_RUN_LOG), of one kind if `name` is given."""
    path = Path(f"{log}.rank{rank}")
    lines = path.read_text().splitlines() if path.is_file() else []
    return [e for e in map(json.loads, lines) if name is None or e["event"] == name]


def batches(log: Path, rank: int = 0) -> list[tuple]:
    """(epoch, step, row ids) of every batch a process trained on."""
    return [(e["epoch"], e["step"], e["ids"]) for e in run_events(log, "batch", rank)]


def kill_run_at(event: str, log: Path, *args) -> None:
    """Start a training run that pauses at `event` (LABELATTN_PAUSE_AT), and SIGKILL it there, from outside."""
    env = {"OMP_NUM_THREADS": "1", "LABELATTN_DEBUG": "", "LABELATTN_RUN_LOG": str(log), "LABELATTN_PAUSE_AT": event}
    command = [sys.executable, "-m", "labelattn", "train", *map(str, args)]
    stderr = Path(f"{log}.stderr")
    with stderr.open("w") as errors:  # a file, not a pipe: a full pipe would block the run before the event
        process = subprocess.Popen(
            command, cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=errors
        )
    deadline = time.monotonic() + 240
    while not run_events(log, "paused"):
        if process.poll() is not None:
            pytest.fail(f"the run ended (rc {process.returncode}) before {event}: {stderr.read_text()[-2000:]}")
        assert time.monotonic() < deadline, f"the run never reached {event}"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL


def test_trained_folder_loads_and_predicts(tiny_csv, tmp_path):
    out = tmp_path / "model"
    result = train("--data", tiny_csv, *TINY, "--output-dir", out)
    assert result.returncode == 0, result.stderr
    for name in ("model.safetensors", "config.json", "configuration_labelattn.py", "modeling_labelattn.py"):
        assert (out / name).is_file(), name
    assert (out / "README.md").is_file() and (out / "tokenizer.json").is_file()
    assert any((out / "checkpoints").iterdir())

    model = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(out, trust_remote_code=True)
    assert model.config.id2label == {0: "animal", 1: "plant", 2: "stone"}
    texts = ["the zebra of it", "a fern was here", "granite on the one", "his zebra and they"]
    with torch.no_grad():
        predicted = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits.argmax(-1).tolist()
    assert [model.config.id2label[p] for p in predicted] == ["animal", "plant", "stone", "animal"]

    # The printed test scores are the ones the card records.
    printed = next(line for line in result.stdout.splitlines() if line.startswith("test accuracy"))
    accuracy = float(printed.split()[2].rstrip(","))
    assert f"{accuracy:.4f}" in (out / "README.md").read_text()


def test_resume_after_sigkill_matches_uninterrupted_run(tiny_csv, tmp_path):
    """Bit-identical after a resume with batches of like length (their order, and their loader's base seed, come
    from generators of their own: drawn from the global random state, dropout's, they changed the weights) and the
    moving average of the weights that is saved (it is resumed from the checkpoint too). The random batch order is
    resumed in every phase of a run by tests/test_faults.py."""
    common = ["--data", tiny_csv, *TINY, "--checkpoint-every", "20", "--group-by-length", "--ema-decay", "0.9"]
    full = train(*common, "--output-dir", tmp_path / "full", env={"LABELATTN_RUN_LOG": str(tmp_path / "full.log")})
    assert full.returncode == 0, full.stderr
    # 90 batches of 4 in 3 epochs; killed before step 51, between the checkpoints of steps 40 and 60, in epoch 2.
    kill_run_at("batch@51", tmp_path / "killed.log", *common, "--output-dir", tmp_path / "run")
    assert not (tmp_path / "run" / "model.safetensors").exists()
    # A kill during a save leaves a checkpoint cut short (here: its weights only): resuming skips it.
    partial = checkpoints.checkpoint_dir(tmp_path / "run", 45)
    partial.mkdir()
    shutil.copy(checkpoints.checkpoint_dir(tmp_path / "run", 40) / "model.safetensors", partial)
    # Launched otherwise (bf16 from the environment, as `accelerate launch --mixed_precision` sets it): refused.
    other = train(*common, "--output-dir", tmp_path / "run", "--resume", env={"ACCELERATE_MIXED_PRECISION": "bf16"})
    assert other.returncode == 2 and "launched otherwise" in other.stderr and "mixed_precision" in other.stderr
    resumed = train(
        *common, "--output-dir", tmp_path / "run", "--resume", env={"LABELATTN_RUN_LOG": str(tmp_path / "resumed.log")}
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "Resumed at step 40" in resumed.stdout

    assert max_weight_difference(tmp_path / "full", tmp_path / "run") <= 1e-6
    # No step lost or repeated: the batches up to the checkpoint, then the resumed ones, are the uninterrupted run's.
    uninterrupted, before, after = (batches(tmp_path / name) for name in ("full.log", "killed.log", "resumed.log"))
    assert after[0][1] == 41
    assert [b for b in before if b[1] <= 40] + after == uninterrupted
    assert not partial.exists()


def test_the_saved_weights_are_the_moving_average_of_the_steps_weights(tiny_csv, tmp_path):
    """--ema-decay 0.25 over two optimizer steps (a checkpoint after each holds that step's weights): the saved
    model's weights are 0.25 x the first step's + 0.75 x the second's."""
    out = tmp_path / "model"
    # The 120 rows leave 96 to train on (80%): batches of 48, one epoch, two steps.
    result = train(
        "--data", tiny_csv, *TINY, "--batch-size", "48", "--epochs", "1", "--ema-decay", "0.25",
        "--checkpoint-every", "1", "--output-dir", out,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [checkpoints.step_of(p) for p in checkpoints.complete_checkpoints(out)] == [1, 2]
    first, second = (load_file(checkpoints.checkpoint_dir(out, step) / "model.safetensors") for step in (1, 2))
    saved = load_file(out / "model.safetensors")
    trained = [name for name in saved if not torch.equal(first[name], second[name])]
    assert trained, "no weight changed between the two steps"
    for name in saved:
        expected = 0.25 * first[name] + 0.75 * second[name]
        assert torch.allclose(saved[name], expected, rtol=1e-6, atol=1e-7 * expected.abs().max().item()), name
        assert not torch.equal(saved[name], second[name]) or name not in trained


@pytest.mark.parametrize(
    "launch, refused",
    [("MULTI_GPU", False), ("DEEPSPEED", False), ("DEEPSPEED", True), ("FSDP", True)],
    ids=["ddp", "zero-2", "zero-3", "fsdp"],
)
def test_the_moving_average_is_refused_only_where_the_weights_are_sharded(launch, refused):
    """FSDP and ZeRO-3 give each process a shard of the weights, so --ema-decay is refused there (the launch decides
    it, so this is checked on the Accelerator's state); DDP and ZeRO-1/2 hold the whole model and average it."""
    from accelerate.utils import DistributedType
    from torch.optim.swa_utils import AveragedModel

    from labelattn.training.setup import check_moving_average, moving_average

    zero_stage = 3 if refused else 2
    deepspeed = SimpleNamespace(zero_stage=zero_stage) if launch == "DEEPSPEED" else None
    accelerator = SimpleNamespace(
        distributed_type=DistributedType[launch],
        state=SimpleNamespace(deepspeed_plugin=deepspeed),
        unwrap_model=lambda model: model,
    )
    model = torch.nn.Linear(3, 2)
    if refused:
        with pytest.raises(settings.TrainingError, match="drop --ema-decay, or launch with DDP or ZeRO-1/2"):
            check_moving_average(accelerator)
        return
    check_moving_average(accelerator)
    average = moving_average(accelerator, model, 0.9)
    assert isinstance(average, AveragedModel)
    for mine, its in zip(model.parameters(), average.module.parameters(), strict=True):
        assert torch.equal(mine, its) and mine.data_ptr() != its.data_ptr()  # a copy, not the weights themselves


def test_the_moving_average_of_half_precision_weights_is_kept_in_float32():
    """DeepSpeed's bf16 module holds the weights in bf16, where the average's steps of (1 - decay) x the difference
    would mostly round away: the average is kept, and moved, in float32, and follows the exact one."""
    from torch.optim.swa_utils import AveragedModel

    from labelattn.training.setup import moving_average

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(torch.bfloat16)
    start = [weight.detach().float().clone() for weight in model.parameters()]
    average = moving_average(SimpleNamespace(unwrap_model=lambda model: model), model, 0.99)
    assert isinstance(average, AveragedModel)
    exact = None
    for step in range(300):
        with torch.no_grad():  # the weights drift by 1 over the steps, in bf16
            for weight, first in zip(model.parameters(), start, strict=True):
                weight.copy_(first + step / 300)
        average.update_parameters(model)
        weights = [weight.detach().double() for weight in model.parameters()]
        exact = weights if exact is None else [0.99 * e + 0.01 * w for e, w in zip(exact, weights, strict=True)]
    for mine, expected in zip(average.module.parameters(), exact, strict=True):
        assert mine.dtype == torch.float32
        torch.testing.assert_close(mine.double(), expected, rtol=0, atol=1e-5)


def test_runs_of_one_init_seed_start_from_the_same_weights_and_see_the_data_in_other_orders(tiny_csv, tmp_path):
    """--init-seed: the model's initial values from it, the data order from --seed (the condition for averaging two
    runs' weights); without it, both from --seed."""
    from labelattn.training.setup import load_training_data, make_accelerator, set_up

    def start(*options: str) -> tuple[dict, torch.Tensor]:
        given = ["--data", str(tiny_csv), *TINY, "--output-dir", str(tmp_path / "m"), *options]
        train_settings = settings.TrainSettings.from_args(train_parser().parse_args(given))
        data = load_training_data(train_settings)
        started = set_up(make_accelerator(train_settings), train_settings, data, build.load_tokenizer("embedding"))
        weights = {name: weight.detach().clone() for name, weight in started.model.named_parameters()}
        return weights, next(iter(started.loaders["train"]))["input_ids"]

    first, first_batch = start("--seed", "0")
    same_start, other_order = start("--seed", "1", "--init-seed", "0")
    other_start, _ = start("--seed", "1")
    assert all(torch.equal(first[name], same_start[name]) for name in first)
    assert not all(torch.equal(first[name], other_start[name]) for name in first)
    assert not torch.equal(first_batch, other_order)


def test_a_student_distilled_with_weight_1_learns_its_teachers_classes_not_the_labels(tiny_csv, tmp_path):
    """--distill-from TEACHER --distill-weight 1: the labels weigh nothing, so a student trained on the true rows
    predicts what a teacher trained on relabelled rows (each planted word's class moved on by one) predicts. The
    targets reach the shuffled batches through the rows' ids: misplaced, they would teach no consistent class."""
    moved = dict(zip(KEYS, list(KEYS)[1:] + list(KEYS)[:1], strict=True))
    relabelled = [{**row, "label": moved[row["label"]]} for row in planted_rows(120)]
    teacher, student = tmp_path / "teacher", tmp_path / "student"
    result = train("--data", write_csv(tmp_path / "moved.csv", relabelled), *TINY, "--output-dir", teacher)
    assert result.returncode == 0, result.stderr
    result = train(
        "--data", tiny_csv, *TINY, "--distill-from", teacher, "--distill-weight", "1", "--output-dir", student
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads((student / settings.SETTINGS_FILE).read_text())["distill_from"] == [str(teacher)]
    rows = planted_rows(30, seed=7)
    predicted = {}
    for folder in (teacher, student):
        model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        with torch.no_grad():
            logits = model(**tokenizer([row["text"] for row in rows], padding=True, return_tensors="pt")).logits
        predicted[folder] = [model.config.id2label[i] for i in logits.argmax(-1).tolist()]
    for folder in (teacher, student):  # the teacher learnt its classes, and the student learnt the teacher's
        assert sum(p == moved[row["label"]] for p, row in zip(predicted[folder], rows, strict=True)) >= 27, folder


def test_a_teacher_without_the_datas_classes_is_refused_before_any_folder(tmp_path):
    """A teacher must give a probability to each of the data's classes: one with other classes is refused by name,
    and so is a multi-label teacher; multi-label data, which has no one class per text to distil, is refused too."""
    from explainers.loading import register_labelattn

    register_labelattn()
    teacher = tmp_path / "teacher"
    make_model(num_labels=3).save_pretrained(teacher)
    AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(teacher)
    data = write_csv(tmp_path / "data.csv", planted_rows(60))
    code, message = run_cli("--data", data, "--distill-from", teacher, "--output-dir", tmp_path / "out")
    assert code == 2 and f"--distill-from {teacher}: a teacher must have the data's classes" in message, message
    assert "['animal', 'plant', 'stone'] (3)" in message, message
    multi = tmp_path / "multi.jsonl"
    multi.write_text("".join(json.dumps({"text": r["text"], "label": [r["label"]]}) + "\n" for r in planted_rows(60)))
    code, message = run_cli("--data", multi, "--distill-from", teacher, "--output-dir", tmp_path / "out")
    assert code == 2 and "--distill-from trains against the teachers' probabilities of one class" in message, message
    sigmoid = tmp_path / "sigmoid"  # the data's classes, each scored on its own: no distribution to learn from
    classes = {i: name for i, name in enumerate(["animal", "plant", "stone"])}
    make_model(multi_label=True, id2label=classes).save_pretrained(sigmoid)
    AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(sigmoid)
    code, message = run_cli("--data", data, "--distill-from", sigmoid, "--output-dir", tmp_path / "out")
    assert code == 2 and f"--distill-from {sigmoid}: a teacher must give one probability distribution" in message
    assert not (tmp_path / "out").exists()


def test_two_processes_see_disjoint_data_and_save_one_model(tiny_csv, tmp_path):
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launcher += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    launcher += ["--main_process_port", str(29500 + os.getpid() % 1000)]
    out = tmp_path / "model"
    result = train(
        "--data", tiny_csv, *TINY, "--epochs", "1", "--output-dir", out,
        env={"ACCELERATE_USE_CPU": "true", "LABELATTN_RUN_LOG": str(tmp_path / "log")},
        launcher=launcher,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 process(es)" in result.stdout
    ranks = [batches(tmp_path / "log", rank) for rank in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) > 0
    for batch0, batch1 in zip(*ranks, strict=True):
        assert batch0[1] == batch1[1] and not set(batch0[2]) & set(batch1[2])
    seen = [i for rank in ranks for batch in rank for i in batch[2]]
    assert len(set(seen)) == len(seen) == 96  # every training row once: 96 rows = 12 steps x 2 ranks x 4
    model = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True)
    assert model.config.num_labels == 3


def test_multi_label_jsonl_with_accumulation_and_bf16(tmp_path):
    rows = planted_rows(90)
    for i, row in enumerate(rows):  # every 4th row also carries a second planted word, and both labels
        if i % 4 == 0:
            other = list(KEYS)[(i + 1) % 3]
            row["text"] += f" {KEYS[other]}"
            row["label"] = [row["label"], other]
        else:
            row["label"] = [row["label"]]
    data = tmp_path / "multi.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "model"
    result = train(
        "--data", data, *TINY, "--gradient-accumulation-steps", "2", "--mixed-precision", "bf16", "--output-dir", out
    )
    assert result.returncode == 0, result.stderr
    assert "micro-f1" in result.stdout and "precision-at-1" in result.stdout  # a ranking metric for multi-label
    config = json.loads((out / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"
    # 72 training rows, batches of 4, 2 batches per step: 9 steps per epoch, 27 in all.
    assert "3 epochs of 9 steps" in result.stdout


def test_a_bf16_run_fits_its_temperature_on_the_float32_logits_of_the_model_it_saves(tmp_path):
    """Trained under bf16 autocast, the model is saved, and predicts, in float32: its temperature is the one that
    the saved model's float32 validation logits give, not the one of the bf16 logits the training computed."""
    rows = planted_rows(150, noise=0.3)  # mislabelled rows keep the temperature away from its bounds
    splits = {"train": rows[:90], "validation": rows[90:120], "test": rows[120:]}
    data = {name: write_csv(tmp_path / f"{name}.csv", part) for name, part in splits.items()}
    out = tmp_path / "model"
    result = train(
        "--data", data["train"], "--validation-data", data["validation"], "--test-data", data["test"], *TINY,
        "--mixed-precision", "bf16", "--output-dir", out,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    model = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(out, trust_remote_code=True)
    saved, model.config.temperature = model.config.temperature, None  # the logits before any temperature
    texts = [row["text"] for row in splits["validation"]]
    labels = torch.tensor([model.config.label2id[row["label"]] for row in splits["validation"]])
    with torch.no_grad():
        logits = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits
    refitted = calibration.fit_temperature(logits, labels, multi_label=False)
    # The same logits fit the same temperature to L-BFGS's tolerance; bf16's 8 bits move it by far more.
    assert calibration.MIN_TEMPERATURE < saved < calibration.MAX_TEMPERATURE
    assert refitted == pytest.approx(saved, rel=1e-4)


def test_label_smoothing_is_refused_for_multi_label_data_before_any_folder(tmp_path):
    rows = [{"text": row["text"], "label": [row["label"]]} for row in planted_rows(20)]
    data = tmp_path / "multi.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, message = run_cli("--data", data, "--label-smoothing", "0.1", "--output-dir", tmp_path / "out")
    assert code == 2 and "--label-smoothing spreads a single label's target" in message, message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_the_training_loss_spreads_the_label_smoothing_over_the_classes(smoothing, tokenizer):
    """With smoothing ε, a text's loss is (1 − ε)(−log p_y) + ε · mean over the classes of −log p_c; with none,
    the model's own loss."""
    model = make_model("embedding", num_labels=3)
    batch = dict(tokenizer(["how many", "who wrote it", "where is it ?"], padding=True, return_tensors="pt"))
    batch["labels"] = torch.tensor([0, 2, 1])
    loss = run.training_loss(SimpleNamespace(model=model, label_smoothing=smoothing), batch)
    log_p = model(**{k: v for k, v in batch.items() if k != "labels"}).logits.log_softmax(-1)
    by_hand = (1 - smoothing) * -log_p[torch.arange(3), batch["labels"]] + smoothing * -log_p.mean(-1)
    assert float(loss) == pytest.approx(float(by_hand.mean()), rel=1e-6)
    assert "labels" in batch  # the caller's batch is left whole


def test_a_hierarchy_is_saved_in_the_config_and_scored_at_its_upper_level(tmp_path):
    kingdom = {"animal": "living", "plant": "living", "stone": "mineral"}
    rows = [{"text": row["text"], "label": f"{kingdom[row['label']]}>{row['label']}"} for row in planted_rows(120)]
    data, out = write_csv(tmp_path / "paths.csv", rows), tmp_path / "model"
    options = ["--hierarchy-separator", ">", "--hierarchy-levels", "kingdom,class", "--epochs", "1"]
    result = train("--data", data, *TINY, *options, "--output-dir", out)
    assert result.returncode == 0, result.stderr
    hierarchy = json.loads((out / "config.json").read_text())["label_hierarchy"]
    assert hierarchy == {"levels": ["kingdom", "class"], "ancestors": {k: [v] for k, v in kingdom.items()}}
    printed = next(line for line in result.stdout.splitlines() if line.startswith("test accuracy"))
    scores = {k: float(v) for k, v in (part.rsplit(" ", 1) for part in printed.removeprefix("test ").split(", "))}
    # A predicted class implies its group: the coarse accuracy is never below the classes'.
    assert scores["kingdom-accuracy"] >= scores["accuracy"] and "kingdom-macro-f1" in scores
    assert "kingdom-accuracy" in (out / "README.md").read_text()


def test_label_descriptions_from_a_label_file_compute_the_queries(tmp_path, tokenizer):
    rows = planted_rows(120)
    data, out = write_csv(tmp_path / "rows.csv", rows), tmp_path / "model"
    names = sorted({row["label"] for row in rows})
    labels = tmp_path / "labels.csv"
    labels.write_text("label,description\n" + "".join(f"{name},texts about {name}s\n" for name in names))
    options = ["--label-file", labels, "--label-descriptions", "--epochs", "1"]
    result = train("--data", data, *TINY, *options, "--output-dir", out)
    assert result.returncode == 0, result.stderr
    settings = json.loads((out / "training_args.json").read_text())
    assert settings["label_descriptions"] is True and settings["label_residual_dropout"] == DEFAULT_RESIDUAL_DROPOUT
    config = json.loads((out / "config.json").read_text())
    assert config["label_description_size"] == 32 and config["label_residual_dropout"] == DEFAULT_RESIDUAL_DROPOUT
    # The saved model holds its description vectors: each the mean of its token table's rows over the description.
    model = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()
    stored = model.labelattn.label_attention.descriptions.vectors
    words = tokenizer(f"texts about {names[0]}s", add_special_tokens=False, return_tensors="pt")["input_ids"]
    assert torch.allclose(stored[model.config.label2id[names[0]]], model.get_input_embeddings()(words)[0].mean(0))


def test_a_described_class_without_training_rows_is_trained_from_its_description(tmp_path):
    rows = planted_rows(120)
    data, out = write_csv(tmp_path / "rows.csv", rows), tmp_path / "model"
    test = write_csv(tmp_path / "test.csv", [*rows[:6], {"text": "basalt pebbles of basalt", "label": "rock"}])
    labels = tmp_path / "labels.csv"
    labels.write_text("label,description\nanimal,a zebra\nrock,basalt\n")  # rock: in no training row
    options = ["--test-data", test, "--label-file", labels, "--label-descriptions", "--epochs", "1"]
    result = train("--data", data, *TINY, *options, "--untrained-class-offset", "3", "--output-dir", out)
    assert result.returncode == 0, result.stderr
    config = json.loads((out / "config.json").read_text())
    assert sorted(config["label2id"]) == ["animal", "plant", "rock", "stone"]
    assert config["untrained_class_offset"] == 3.0
    assert "No training row has the class(es) `rock`" in (out / "README.md").read_text()
    model = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True).eval()
    has_rows = model.labelattn.label_attention.descriptions.has_rows  # rock's query: its description's alone
    assert [name for name, index in config["label2id"].items() if not has_rows[index]] == ["rock"]


def train_parser() -> argparse.ArgumentParser:
    """The parser of `labelattn train`, for tests that build its settings without running it."""
    parser = argparse.ArgumentParser()
    arguments.add_arguments(parser)
    return parser


def run_cli(*args, command: str = "train") -> tuple[int, str]:
    """`labelattn COMMAND ARGS` in this process: the exit code and what it printed to stderr."""
    import contextlib
    import io

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        code = cli.main([command, *map(str, args)])
    return code, stderr.getvalue()


def test_occupied_output_dir_is_refused_before_training(tiny_csv, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "config.json").write_text("{}")
    code, message = run_cli("--data", tiny_csv, "--output-dir", out)
    assert code == 2 and str(out) in message and "--overwrite" in message
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]


@pytest.mark.parametrize("case", ["foreign files", "unfinished run", "resume without a checkpoint", "hub login"])
def test_folder_and_hub_refusals_come_before_the_data_is_read(tiny_csv, tmp_path, monkeypatch, case):
    """What no class count changes is refused at once: at ICD-10-CM reading the data takes seconds."""
    monkeypatch.setattr(run, "load_training_data", lambda settings: pytest.fail("the data was read"))
    monkeypatch.setattr(card.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(card, "get_token", lambda: None)
    out = tmp_path / "run"
    out.mkdir()
    options = []
    if case == "foreign files":
        (out / "notes.txt").write_text("my notes")
    elif case == "unfinished run":
        fake_checkpoint(out, 40)
    elif case == "resume without a checkpoint":
        options = ["--resume"]
    else:
        options = ["--push-to-hub", "me/model"]
    code, message = run_cli("--data", tiny_csv, "--output-dir", out, *options)
    expected = {"foreign files": "not a labelattn training run", "unfinished run": "of an unfinished run"}
    expected |= {"resume without a checkpoint": "--resume", "hub login": "not logged in"}
    assert code == 2 and expected[case] in message, message


def test_overwrite_replaces_the_whole_folder(tiny_csv, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "pytorch_model.bin").write_text("another model's weights")
    result = train("--data", tiny_csv, *TINY, "--epochs", "1", "--output-dir", out, "--overwrite")
    assert result.returncode == 0, result.stderr
    assert not (out / "pytorch_model.bin").exists()  # nothing of the old model is left to be pushed with the new
    assert (out / "model.safetensors").is_file() and (out / "coding.json").is_file()
    again = train("--data", tiny_csv, *TINY, "--epochs", "1", "--output-dir", out, "--overwrite")
    assert again.returncode == 0, again.stderr  # everything the first run wrote is its own: `make demo` twice


def test_resume_takes_a_path_however_it_is_spelt(tiny_csv, tmp_path, monkeypatch):
    monkeypatch.chdir(tiny_csv.parent)
    parser = train_parser()
    out = tmp_path / "run"
    first = settings.TrainSettings.from_args(parser.parse_args(["--data", tiny_csv.name, "--output-dir", str(out)]))
    fake_checkpoint(out, 10)
    (out / settings.SETTINGS_FILE).write_text(json.dumps(settings.settings_of(first)))
    again = ["--data", f"./{tiny_csv.name}", "--output-dir", f"{tmp_path}/./run", "--resume"]
    same = settings.TrainSettings.from_args(parser.parse_args(again))
    settings.check_output_dir(same)  # no error
    settings.check_saved_settings(same)
    other = settings.TrainSettings.from_args(parser.parse_args([*again, "--seed", "7"]))
    with pytest.raises(settings.TrainingError, match="other settings"):
        settings.check_saved_settings(other)


def test_a_many_class_run_recorded_with_other_defaults_resumes_with_its_own_command(tiny_csv, tmp_path):
    """Options not given take the resumed run's recorded values: a run of 1,000 classes started with the few-class
    defaults (before 7 December 2026) resumes as it started; an option given is still compared."""
    out = tmp_path / "run"
    command = ["--data", str(tiny_csv), "--output-dir", str(out)]
    few_class_values = ["--no-group-by-length", "--label-projections", "--token-context-width", "5", "--epochs", "5"]
    few_class_values += ["--batch-size", "32"]
    started = settings.TrainSettings.of_command([*command, *few_class_values], 1918)
    fake_checkpoint(out, 10)
    (out / settings.SETTINGS_FILE).write_text(json.dumps(settings.settings_of(started)))
    resumed = settings.TrainSettings.of_command([*command, "--resume"], 1918)
    settings.check_saved_settings(resumed)  # no error
    assert settings.settings_of(resumed) == settings.settings_of(started)
    # The card's command trains this run again, and the start's note claims no many-class default.
    again = settings.TrainSettings.of_command(shlex.split(resumed.command_line)[2:], 1918)
    assert settings.settings_of(again) == settings.settings_of(resumed)
    assert "defaults apply" not in (settings.many_classes_note(resumed, 1918) or "")
    fresh = settings.TrainSettings.of_command(command, 1918)  # without --resume: the many-class defaults
    assert (fresh.group_by_length, fresh.token_context_width) == (True, 3)
    for other in (["--epochs", "3"], ["--overwrite", "--seed", "7"]):  # an option given is compared, --overwrite too
        with pytest.raises(settings.TrainingError, match="other settings"):
            settings.check_saved_settings(settings.TrainSettings.of_command([*command, "--resume", *other], 1918))


def fake_checkpoint(out: Path, step: int) -> Path:
    """A complete checkpoint folder holding one file."""
    path = checkpoints.checkpoint_dir(out, step)
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"weights")
    checkpoints.mark_complete(path)
    return path


def test_overwrite_refuses_a_folder_holding_the_working_directory(tiny_csv, tmp_path, monkeypatch):
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    code, message = run_cli("--data", tiny_csv, "--output-dir", tmp_path, "--overwrite")
    assert code == 2 and "holds the working directory" in message
    assert (tmp_path / "project").is_dir()


@pytest.mark.slow
def test_a_run_of_1000_classes_records_the_many_class_defaults_and_resumes_with_the_same_command(tmp_path):
    """Through the command: 1,000 classes with no head or schedule options train with the many-class recipe, say so,
    record its values in training_args.json, and `--resume` with the same command finds its settings equal (the
    class count is known before they are compared)."""
    rng = random.Random(0)

    def rows(n: int) -> list[dict]:
        return [
            {"text": " ".join([*rng.sample(FILLER, 4), f"code{i % 1000}"]), "label": f"c{i % 1000}"} for i in range(n)
        ]

    files = {
        split: write_csv(tmp_path / f"{split}.csv", rows(n))
        for split, n in [("train", 2000), ("val", 1000), ("test", 1000)]
    }
    command = ["--data", files["train"], "--validation-data", files["val"], "--test-data", files["test"]]
    command += ["--hidden-size", "32", "--output-dir", tmp_path / "model"]
    result = train(*command)
    assert result.returncode == 0, result.stderr
    assert "note: 1,000 classes: the many-class defaults apply (" in result.stdout
    recorded = json.loads((tmp_path / "model" / settings.SETTINGS_FILE).read_text())
    assert {name: recorded[name] for name in settings.FEW_CLASS_DEFAULTS} == {
        "group_by_length": True, "label_projections": False, "token_context_width": 3, "epochs": 3, "batch_size": 64
    }  # fmt: skip
    resumed = train(*command, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "Resumed at step" in resumed.stdout


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--resume"], "holds no complete checkpoint"),
        (["--backbone", "/no/such/encoder"], "neither 'embedding', 'minilm' nor a folder"),
        (["--epochs", "0"], "--epochs must be at least 1"),
        (["--validation-data", "x.csv"], "has its own fixed split"),
        (["--learning-rate", "nan"], "--learning-rate must be a finite number above 0, got nan"),
        (["--learning-rate", "inf"], "--learning-rate must be a finite number above 0, got inf"),
        (["--learning-rate=-1e-3"], "--learning-rate must be a finite number above 0"),
        (["--head-learning-rate", "nan"], "--head-learning-rate must be a finite number above 0"),
        (["--max-grad-norm", "nan"], "--max-grad-norm must be a finite number above 0"),
        (["--max-grad-norm", "0"], "--max-grad-norm must be a finite number above 0"),
        (["--initializer-range", "inf"], "--initializer-range must be a finite number above 0"),
        (["--weight-decay", "nan"], "--weight-decay must be a finite number, 0 or above"),
        (["--warmup-ratio", "nan"], "--warmup-ratio must be in [0, 1)"),
        (["--label-smoothing", "1"], "--label-smoothing must be in [0, 1), got 1.0"),
        (["--label-smoothing", "nan"], "--label-smoothing must be in [0, 1), got nan"),
        (["--ema-decay", "1"], "--ema-decay must be in [0, 1), got 1.0"),
        (["--distill-weight", "0.5"], "--distill-weight weighs the teachers' targets: add --distill-from"),
        (["--distill-from", "x", "--distill-weight", "0"], "--distill-weight must be in (0, 1], got 0.0"),
        (["--distill-from", "/no/such/teacher"], "--distill-from /no/such/teacher: "),
        (["--distill-from", "/no/such/teacher,"], "--distill-from lists an empty name ('/no/such/teacher,')"),
        (["--hierarchy-levels", "chapter,,code"], "--hierarchy-levels lists an empty name ('chapter,,code')"),
        (["--hidden-size", "0"], "--hidden-size must be at least 1"),
        (["--attention-key-size", "0"], "--attention-key-size must be at least 1"),
        (["--classifier-dropout", "1"], "--classifier-dropout must be in [0, 1), got 1.0"),
        (["--token-context-width", "2"], "--token-context-width must be 0 (none) or an odd width such as 3, got 2"),
        (["--label-descriptions", "--pooling", "mean"], "--label-descriptions computes label-attention queries"),
        (["--label-residual-dropout", "0.5"], "--label-residual-dropout acts on queries computed from descriptions"),
        (["--label-descriptions", "--label-residual-dropout", "1"], "--label-residual-dropout must be in [0, 1)"),
        (["--untrained-class-offset", "3"], "--untrained-class-offset acts on classes known by their descriptions"),
        (["--label-descriptions", "--untrained-class-offset", "nan"], "--untrained-class-offset must be a finite"),
        (["--encoder-layers", "2"], "--encoder-layers keeps the first layers of an encoder, and --backbone embedding"),
        (["--backbone", "minilm", "--encoder-layers", "7"], "layers from 1 to the encoder's 6, got 7"),
        (["--backbone", "minilm", "--encoder-layers", "0"], "layers from 1 to the encoder's 6, got 0"),
        (["--push-to-hub", "not a repo id!"], "is not a Hub repository id"),
        (["--push-to-hub", "me/model"], "HF_HUB_OFFLINE=1"),  # the tests run offline: refused before training
    ],
)
def test_bad_options_are_clear_errors(tmp_path, options, expected):
    code, message = run_cli("--output-dir", tmp_path / "out", *options)
    assert code == 2 and expected in message, message
    assert not (tmp_path / "out").exists()


def test_max_length_too_short_for_the_special_tokens_is_refused_before_any_folder(tiny_csv, tmp_path):
    code, message = run_cli("--data", tiny_csv, "--max-length", "2", "--output-dir", tmp_path / "out")
    assert code == 2 and "--max-length must be at least 3" in message, message
    assert not (tmp_path / "out").exists()


def test_push_without_a_login_is_refused_before_training(tiny_csv, tmp_path, monkeypatch):
    monkeypatch.setattr(card.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(card, "get_token", lambda: None)
    code, message = run_cli("--data", tiny_csv, "--push-to-hub", "me/model", "--output-dir", tmp_path / "out")
    assert code == 2 and "not logged in" in message, message
    assert not (tmp_path / "out").exists()


def test_a_failed_push_keeps_the_local_model_and_says_how_to_push_it(tiny_csv, tmp_path, monkeypatch):
    monkeypatch.setattr(card, "check_can_push", lambda repo_id: None)

    def unreachable(*args, **kwargs):
        raise card.CardError("the upload to me/model failed (ConnectError: no route to host).")

    monkeypatch.setattr(card, "push_to_hub", unreachable)
    out = tmp_path / "out"
    code, message = run_cli(
        "--data", tiny_csv, *TINY, "--epochs", "1", "--push-to-hub", "me/model", "--output-dir", out
    )
    assert code == 2 and f"The model is saved in {out}" in message and "push_to_hub(" in message, message
    assert (out / "model.safetensors").is_file() and (out / "README.md").is_file()


def test_a_diverging_run_stops_naming_the_step_and_keeps_its_last_good_checkpoint(tiny_csv, tmp_path):
    out = tmp_path / "out"
    # With a learning rate of 1e30 the weights reach ~1e29 at step 2 (step 1 has a warm-up rate of 0), and the
    # logits overflow at step 3.
    result = train("--data", tiny_csv, *TINY, "--learning-rate", "1e30", "--checkpoint-every", "1", "--output-dir", out)
    assert result.returncode == 2, result.stderr
    assert "The loss is nan at step 3 (epoch 1): training diverged, and no model was saved" in result.stderr
    assert f"the last good checkpoint, {checkpoints.checkpoint_dir(out, 2)}, is kept" in result.stderr
    assert not (out / "model.safetensors").exists()
    assert [path.name for path in checkpoints.complete_checkpoints(out)] == ["checkpoint_1", "checkpoint_2"]
    assert checkpoints.damage(checkpoints.checkpoint_dir(out, 2)) is None


@pytest.mark.parametrize("where", ["data", "validation", "backbone"])
def test_overwrite_never_deletes_what_the_run_reads(tiny_csv, tmp_path, where):
    out = tmp_path / "d"
    out.mkdir()
    given = shutil.copy(tiny_csv, out / "good.csv")
    options = {"data": ["--data", given], "validation": ["--data", tiny_csv, "--validation-data", given]}
    options["backbone"] = ["--data", tiny_csv, "--backbone", out]
    if where == "backbone":  # training a model folder into itself
        (out / "config.json").write_text("{}")
    code, message = run_cli(*options[where], "--output-dir", out, "--overwrite", *TINY)
    assert code == 2 and "--overwrite would delete" in message and "which this run reads" in message, message
    assert str(out if where == "backbone" else given) in message
    assert (out / "good.csv").read_text() == tiny_csv.read_text()


def test_overwrite_refuses_a_folder_holding_other_files(tiny_csv, tmp_path):
    out = tmp_path / "d"
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / "notes.txt").write_text("my notes")
    code, message = run_cli("--data", tiny_csv, "--output-dir", out, "--overwrite")
    assert code == 2 and f"{out / 'notes.txt'}, which is not the output of a model folder" in message, message
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "notes.txt"]


def test_checkpoints_of_an_unfinished_run_are_not_thrown_away(tiny_csv, tmp_path):
    out = tmp_path / "run"
    fake_checkpoint(out, 40)
    code, message = run_cli("--data", tiny_csv, "--output-dir", out)
    expected = "this folder holds checkpoint 40 of an unfinished run: add --resume to continue or --overwrite to start"
    assert code == 2 and expected in message, message
    assert checkpoints.damage(checkpoints.checkpoint_dir(out, 40)) is None


def test_bad_data_error_reaches_the_user_with_file_and_row(tmp_path):
    data = write_csv(tmp_path / "bad.csv", [*planted_rows(6), {"text": "   ", "label": "animal"}])
    code, message = run_cli("--data", data, "--output-dir", tmp_path / "out")
    assert code == 2 and "bad.csv, row 7 (line 8" in message and "empty" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_default_trec_model_trains_and_records_its_split(tmp_path):
    """The default command, for real: TREC, embedding backbone, label attention."""
    from labelattn.data.reading import load_data

    out = tmp_path / "trec"
    result = train("--output-dir", out)
    assert result.returncode == 0, result.stderr
    printed = next(line for line in result.stdout.splitlines() if line.startswith("test accuracy"))
    assert float(printed.split()[2].rstrip(",")) > 0.7  # chance is 0.23 (the largest class)
    card = (out / "README.md").read_text()
    for split, digest in load_data("trec").split_record["ids_sha256"].items():
        assert f"| {split} |" in card and digest in card


@pytest.mark.slow
def test_hundreds_of_classes_are_learnt_and_ranked(tmp_path):
    """200 classes, each decided by its own planted word: the run reports precision@k and recall@k, and learns."""
    from labelattn import minilm_path

    vocabulary = (Path(minilm_path()) / "vocab.txt").read_text().splitlines()
    keywords = [word for word in vocabulary if word.isalpha() and word.isascii() and 6 <= len(word) <= 9][:200]
    rng = random.Random(0)
    rows = []
    for i in range(2000):  # 10 rows per class: 8 to train on, 1 for validation, 1 for test
        words = rng.sample(FILLER, 6)
        words.insert(rng.randrange(7), keywords[i % 200])
        rows.append({"text": " ".join(words), "label": f"class_{i % 200}"})
    data = write_csv(tmp_path / "many.csv", rows)
    options = ["--hidden-size", "32", "--batch-size", "32", "--epochs", "6", "--learning-rate", "2e-2"]
    result = train("--data", data, *options, "--output-dir", tmp_path / "model")
    assert result.returncode == 0, result.stderr
    printed = next(line for line in result.stdout.splitlines() if line.startswith("test accuracy"))
    scores = dict(part.rsplit(" ", 1) for part in printed.removeprefix("test ").split(", "))
    assert set(scores) == {"accuracy", "macro-f1", "precision-at-1", "recall-at-1", "precision-at-5", "recall-at-5"}
    assert float(scores["precision-at-1"]) == pytest.approx(float(scores["accuracy"]))
    assert float(scores["recall-at-5"]) > 0.8  # chance is 5 / 200
    assert "precision-at-5" in (tmp_path / "model" / "README.md").read_text()


@pytest.mark.parametrize(
    "options",
    [
        [],
        ["--no-freeze-embeddings", "--epochs", "5"],
        ["--freeze-embeddings", "--token-context-width", "0"],
        ["--hierarchy-separator", ">", "--hierarchy-levels", "chapter,block,category"],
    ],
)
def test_the_recorded_command_gives_the_same_settings(options):
    parser = train_parser()
    args = parser.parse_args(["--output-dir", "m", *options])
    again = parser.parse_args(shlex.split(arguments.command_line(args))[2:])
    assert vars(again) == vars(args)


def test_an_encoder_cut_to_its_first_layers_trains_and_saves_that_many(tiny_csv, tmp_path):
    """`--encoder-layers 1` on a 2-layer encoder folder, through the command line: the saved model has one layer
    and loads with it, the card says so, and the left-out layer is not reported as unexpected weights (it is what
    the option asked for). That the layer kept starts from the folder's first is `test_modeling`'s."""
    from transformers import BertModel

    encoder_dir = tmp_path / "encoder"
    torch.manual_seed(0)
    BertModel(tiny_encoder_config(), add_pooling_layer=False).save_pretrained(encoder_dir)
    out = tmp_path / "cut"
    options = ["--data", tiny_csv, "--backbone", encoder_dir, "--encoder-layers", "1", "--epochs", "1"]
    done = train(*options, "--batch-size", "8", "--output-dir", out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "UNEXPECTED" not in done.stderr
    model = AutoModelForSequenceClassification.from_pretrained(out, trust_remote_code=True)
    assert model.config.encoder_config.num_hidden_layers == 1
    assert len(model.labelattn.encoder.encoder.layer) == 1
    assert "cut to its first 1 layer," in (out / "README.md").read_text()
    assert json.loads((out / "training_args.json").read_text())["encoder_layers"] == 1


def test_the_settings_hold_every_option_typed_and_filled_once():
    """`TrainSettings` is what a run reads past the command line: one field per option (and the recorded command),
    the backbone's defaults filled in, frozen, and recorded in training_args.json as the options that decide the
    weights."""
    parser = train_parser()
    declared = {action.dest for action in arguments.add_arguments(argparse.ArgumentParser())}
    made = {"command_line", "by_class_count"}
    assert {field.name for field in dataclasses.fields(settings.TrainSettings)} == declared | made
    train_settings = settings.TrainSettings.from_args(parser.parse_args(["--output-dir", "m", "--epochs", "4"]))
    assert train_settings.learning_rate > 0 and train_settings.head_learning_rate == train_settings.learning_rate
    assert (
        train_settings.freeze_embeddings is True
        and train_settings.command_line == "labelattn train --epochs 4 --output-dir m"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        train_settings.epochs = 1
    recorded = settings.settings_of(train_settings)
    assert recorded["epochs"] == 4 and not set(recorded) & settings.NOT_SETTINGS
    assert json.loads(json.dumps(recorded)) == recorded  # what training_args.json holds compares equal to it


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [("--token-context-width", 2, token_context_width_problem), ("--classifier-dropout", 1.5, dropout_problem)],
)
def test_the_options_model_rules_are_the_configs(option, value, problem):
    """The token context's width and a dropout's range: the config's one rule, said with the option's name."""
    with pytest.raises(settings.TrainingError) as refused:
        settings.TrainSettings.from_args(train_parser().parse_args(["--output-dir", "m", option, str(value)]))
    assert str(refused.value) == f"{option} {problem(value)}."


@pytest.mark.parametrize(
    ("options", "frozen"),
    [([], True), (["--no-freeze-embeddings"], False), (["--embeddings", "random"], False)],
)
def test_a_frozen_token_table_is_left_out_of_the_optimizer(options, frozen):
    options = ["--output-dir", "m", "--hidden-size", "32", *options]
    train_settings = settings.TrainSettings.from_args(train_parser().parse_args(options))
    model = build.build_model(train_settings, ["a", "b"], multi_label=False, vocab_size=30522)
    table = model.get_input_embeddings().weight
    optimized = [p for group in build.optimizer_groups(model, train_settings) for p in group["params"]]
    assert table.requires_grad is not frozen
    assert any(p is table for p in optimized) is not frozen
    assert len(optimized) == sum(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize(
    ("options", "own"),
    [
        ([], []),
        (["--no-label-projections"], ["labelattn.label_attention.label_embeddings", "classifier.weight"]),
        (
            ["--no-label-projections", "--scorer-rank", "4"],
            ["labelattn.label_attention.label_embeddings", "classifier.weight"],
        ),
        (["--no-label-projections", "--scorer", "shared"], ["labelattn.label_attention.label_embeddings"]),
    ],
)
def test_a_classs_own_parameters_learn_faster_without_the_label_projections(options, own):
    """Without the shared maps, each class's query and scorer (full, or a rank-r scorer's code) are its own
    parameters: they learn at `OWN_CLASS_LEARNING_RATE_SCALE` times the head's rate; a shared scorer's `w`, a rank-r
    scorer's basis and the biases keep the head's; every trained parameter is in exactly one group."""
    options = ["--output-dir", "m", "--hidden-size", "32", "--learning-rate", "2e-3", *options]
    train_settings = settings.TrainSettings.from_args(train_parser().parse_args(options))
    model = build.build_model(train_settings, ["a", "b", "c"], multi_label=False, vocab_size=30522)
    names = {id(p): name for name, p in model.named_parameters()}
    rates = {
        names[id(p)]: group["lr"] for group in build.optimizer_groups(model, train_settings) for p in group["params"]
    }
    assert len(rates) == sum(len(group["params"]) for group in build.optimizer_groups(model, train_settings))
    assert set(rates) == {name for name, p in model.named_parameters() if p.requires_grad}
    faster = {name for name, rate in rates.items() if rate != 2e-3}
    assert faster == set(own)
    assert all(rates[name] == 2e-3 * build.OWN_CLASS_LEARNING_RATE_SCALE for name in own)


MANY_CLASS_RECIPE = ["--group-by-length", "--no-label-projections", "--token-context-width", "3", "--epochs", "3"]
MANY_CLASS_RECIPE += ["--batch-size", "64"]


def settings_for(options: list[str], num_classes: int) -> "settings.TrainSettings":
    return settings.TrainSettings.of_command(["--output-dir", "m", *options], num_classes)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ([], MANY_CLASS_RECIPE),
        (["--backbone", "minilm"], ["--group-by-length", "--no-label-projections"]),  # the accurate recipe's
        (
            ["--pooling", "mean"],
            ["--group-by-length", "--token-context-width", "3", "--epochs", "3", "--batch-size", "64"],
        ),
        # Given options are kept, a few-class default's value too.
        (
            ["--epochs", "5", "--label-projections"],
            ["--epochs", "5", "--group-by-length", "--token-context-width", "3", "--batch-size", "64"],
        ),
        (
            ["--no-group-by-length", "--token-context-width", "5", "--batch-size", "32"],
            ["--no-label-projections", "--epochs", "3"],
        ),
    ],
)
def test_from_1000_classes_the_options_not_given_take_the_many_class_recipe(options, expected):
    """The class count decides the defaults of `FEW_CLASS_DEFAULTS`' options only, and only where they were not
    given: below `MANY_CLASSES` they are the few-class defaults, from it the many-class recipe measured on
    ICD-10-CM (for the backbone and pooling it applies to); the settings are then those of the recipe's command."""
    few = settings_for(options, settings.MANY_CLASSES - 1)
    many = settings_for(options, settings.MANY_CLASSES)
    spelled_out = settings_for([*options, *expected], settings.MANY_CLASSES)
    assert settings.settings_of(many) == settings.settings_of(spelled_out)
    assert settings.settings_of(few) == settings.settings_of(settings_for(options, 6))
    given = {name for name in settings.FEW_CLASS_DEFAULTS if name not in few.by_class_count}
    assert all(getattr(few, name) == settings.FEW_CLASS_DEFAULTS[name] for name in few.by_class_count)
    assert all(getattr(many, name) == getattr(few, name) for name in given)


def test_icd10_cm_with_no_options_trains_the_many_class_recipe_and_is_told_the_fast_one():
    """`labelattn train --data icd10-cm`: the many-class recipe's settings, a note saying so and naming the fast
    recipe, whose options are ones `labelattn train` takes; a run that names its head, or has few classes, is not
    told of it."""
    icd = settings_for(["--data", "icd10-cm"], 1918)
    assert settings.settings_of(icd) == settings.settings_of(
        settings_for(["--data", "icd10-cm", *MANY_CLASS_RECIPE], 1918)
    )
    note = settings.many_classes_note(icd, 1918)
    assert note.startswith("note: 1,918 classes: the many-class defaults apply (") and settings.FAST_RECIPE in note
    applied = note.split("(", 1)[1].split(")", 1)[0].split()  # options that give these settings when typed
    assert settings.settings_of(settings_for(["--data", "icd10-cm", *applied], 1918)) == settings.settings_of(icd)
    fast = settings_for(["--data", "icd10-cm", *settings.FAST_RECIPE.split()], 1918)
    typed = settings_for(["--data", "icd10-cm", *MANY_CLASS_RECIPE, *settings.FAST_RECIPE.split()], 1918)
    assert settings.settings_of(fast) == settings.settings_of(typed)  # the fast recipe's short command, as measured
    assert fast.batch_size == 32  # its three seeds' batches, not the many-class recipe's 64
    assert settings.FAST_RECIPE not in settings.many_classes_note(fast, 1918)
    for chosen in (["--scorer", "shared"], ["--scorer-rank", "64"]):  # no advice the run would refuse, or has taken
        assert settings.FAST_RECIPE not in settings.many_classes_note(settings_for(chosen, 1918), 1918)
    assert settings.many_classes_note(settings_for(MANY_CLASS_RECIPE, 1918), 1918) is not None  # the fast one
    assert (
        settings.many_classes_note(settings_for([*MANY_CLASS_RECIPE, *settings.FAST_RECIPE.split()], 1918), 1918)
        is None
    )
    assert settings.many_classes_note(settings_for([], settings.MANY_CLASSES - 1), settings.MANY_CLASSES - 1) is None


@pytest.mark.parametrize(("warmup", "total"), [(0, 7), (3, 25), (25, 25), (1, 1)])
def test_the_schedule_is_transformers_linear_schedule_with_warmup_and_resumes_from_its_state(warmup, total):
    """`setup.linear_schedule` gives the learning rates of transformers' function at every step, past the last one
    too, and takes over the state a checkpoint of that function's scheduler saved (runs checkpointed before it)."""
    from transformers import get_linear_schedule_with_warmup

    def rates(scheduler, optimizer, steps: int) -> list[float]:
        seen = []
        for _ in range(steps):
            seen.append(scheduler.get_last_lr()[0])
            optimizer.step()
            scheduler.step()
        return seen

    def optimizer() -> torch.optim.Optimizer:
        return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.3)

    theirs_optimizer, ours_optimizer = optimizer(), optimizer()
    theirs = get_linear_schedule_with_warmup(theirs_optimizer, warmup, total)
    schedule = functools.partial(setup.linear_schedule, warmup_steps=warmup, total_steps=total)
    ours = torch.optim.lr_scheduler.LambdaLR(ours_optimizer, schedule)
    assert rates(ours, ours_optimizer, total + 2) == rates(theirs, theirs_optimizer, total + 2)

    halfway_optimizer, resumed_optimizer = optimizer(), optimizer()
    halfway = get_linear_schedule_with_warmup(halfway_optimizer, warmup, total)
    rates(halfway, halfway_optimizer, total // 2)
    resumed = torch.optim.lr_scheduler.LambdaLR(resumed_optimizer, schedule)
    resumed.load_state_dict(halfway.state_dict())
    resumed_optimizer.load_state_dict(halfway_optimizer.state_dict())
    assert rates(resumed, resumed_optimizer, 3) == rates(halfway, halfway_optimizer, 3)


def test_a_second_run_on_the_same_output_dir_is_refused_and_a_killed_ones_lock_is_not_stale(tiny_csv, tmp_path):
    """Issue 29.4: two runs (one of them --resume) wrote one folder together, without a word. The first holds
    `train.lock` (an flock); the second, started while the first trains, is refused at once naming its process."""
    out, log = tmp_path / "model", tmp_path / "log"
    options = ["--data", tiny_csv, *TINY, "--checkpoint-every", "5", "--output-dir", out]
    env = {
        "OMP_NUM_THREADS": "1",
        "LABELATTN_DEBUG": "",
        "LABELATTN_RUN_LOG": str(log),
        "LABELATTN_PAUSE_AT": "batch@8",
    }
    command = [sys.executable, "-m", "labelattn", "train", *map(str, options)]
    first = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not run_events(log, "paused"):  # past the checkpoint of step 5, training
            assert first.poll() is None and time.monotonic() < deadline, "the first run never got to batch 8"
            time.sleep(0.05)
        for again in ([], ["--resume"]):
            second = train(*options, *again)
            assert second.returncode == 2, second.stderr
            assert second.stderr.strip().splitlines()[-1] == (
                f"labelattn train: error: {out} is in use by another labelattn train run (process {first.pid}, which "
                f"holds {out / 'train.lock'}): wait for it to end, or train into another --output-dir."
            )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # The kernel dropped the killed run's lock: --resume goes on from its checkpoint, and leaves no lock behind.
    resumed = train(*options, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "Resumed at step 5" in resumed.stdout + resumed.stderr
    assert not (out / "train.lock").exists()
