"""Saved models load as remote code in a fresh process that cannot import this project: from a folder, from a
Hugging Face cache by repo id (offline, with and without a pinned revision), through AutoModel,
AutoModelForSequenceClassification and the text-classification pipeline, with identical results."""

import hashlib
import json
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import float32_rounding, make_model, save_model

pytestmark = pytest.mark.slow  # a second Python process

REPO_ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["the screen cracked", "fast delivery but the screen cracked after two days of use", "fine"]
CHECKPOINTS = {  # name -> make_model arguments: both backbones, both problem types, both poolings, many classes
    "embedding-single": dict(backbone="embedding"),
    "embedding-many": dict(backbone="embedding", num_labels=40),
    "embedding-multi": dict(backbone="embedding", multi_label=True),
    "encoder-single": dict(backbone="encoder"),
    "encoder-multi": dict(backbone="encoder", multi_label=True),
    "embedding-mean": dict(backbone="embedding", pooling="mean"),
}

# Runs with `python -I -S`: no current directory, no PYTHONPATH and no .pth files on sys.path, so the editable
# install of this project is inactive; only site-packages is added back. Every result is written as JSON
# (Python floats hold float32 values exactly).
CHILD = r"""
import importlib.util, json, sys, traceback
site_packages, jobs_file, results_file = sys.argv[1:]
sys.path.extend(site_packages.split("\n"))
project = [m for m in ("labelattn", "modeling_labelattn", "configuration_labelattn", "explainers")
           if importlib.util.find_spec(m) is not None]
assert not project, f"the project is importable: {project}"
import torch
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer, pipeline

results = []
for job in json.load(open(jobs_file)):
    options = dict(trust_remote_code=True, **job.get("options", {}))
    try:
        if job["kind"] == "pipeline":
            classify = pipeline("text-classification", model=job["source"], **options)
            rows = classify(job["texts"], top_k=None)
            results.append({"scores": [{r["label"]: r["score"] for r in row} for row in rows]})
            continue
        auto = AutoModelForSequenceClassification if job["kind"] == "classifier" else AutoModel
        model = auto.from_pretrained(job["source"], **options).eval()
        batch = AutoTokenizer.from_pretrained(job["source"], **job.get("options", {}))(
            job["texts"], padding=True, return_tensors="pt")
        with torch.no_grad():
            out = model(**batch, output_attentions=True)
            fast = model(**batch)  # no weights asked for: the folded or fused path
        main = out.logits if job["kind"] == "classifier" else out.pooler_output
        fast = fast.logits if job["kind"] == "classifier" else fast.pooler_output
        results.append({"module": type(model).__module__, "class": type(model).__name__,
                        "input_ids": batch["input_ids"].tolist(), "output": main.tolist(), "fast": fast.tolist(),
                        "label_attentions": None if out.label_attentions is None else out.label_attentions.tolist()})
    except Exception as error:
        results.append({"error": type(error).__name__, "message": str(error),
                        "is_value_error": isinstance(error, ValueError), "traceback": traceback.format_exc()})
json.dump(results, open(results_file, "w"))
"""


def cache_snapshot(hf_home: Path, repo_id: str, folder: Path) -> str:
    """Copy `folder` into the Hugging Face cache as the `main` revision of `repo_id`; return its commit hash."""
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    repo_dir = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(folder, repo_dir / "snapshots" / commit)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(commit)
    return commit


def run_child(jobs: list[dict], workdir: Path, hf_home: Path) -> list[dict]:
    """Run the jobs in one fresh interpreter: offline, in an empty directory, with a private HF_HOME."""
    (workdir / "jobs.json").write_text(json.dumps(jobs))
    env = {"PATH": "/usr/bin:/bin", "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-c", CHILD, "\n".join(site.getsitepackages()), "jobs.json", "results.json"],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads((workdir / "results.json").read_text())


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, tokenizer):
    """Save every checkpoint, put a copy in a Hub cache, load them all in one fresh process."""
    root = tmp_path_factory.mktemp("remote")
    hf_home, workdir = root / "hf_home", root / "work"
    workdir.mkdir()
    models, commits, jobs = {}, {}, []
    for name, spec in CHECKPOINTS.items():
        models[name] = make_model(**spec, seed=len(jobs))
        folder = save_model(models[name], tokenizer, root / name)
        repo_id = f"labelattn-tests/{name}"
        commits[name] = cache_snapshot(hf_home, repo_id, folder)
        pinned = {"revision": commits[name]}
        for kind, source, options in [
            ("classifier", str(folder), {}),
            ("classifier", repo_id, {}),
            ("classifier", repo_id, pinned),
            ("base", str(folder), {}),
            ("base", repo_id, pinned),
            ("pipeline", str(folder), {}),
            ("pipeline", repo_id, pinned),
            ("classifier", str(folder), {"num_labels": 5}),
        ]:
            jobs.append(dict(checkpoint=name, kind=kind, source=source, options=options, texts=TEXTS))
    results = run_child(jobs, workdir, hf_home)
    return root, models, commits, list(zip(jobs, results, strict=True))


@torch.no_grad()
def expected_outputs(model, tokenizer) -> dict:
    """What the saved model gives here, in the parent process, for each kind of job."""
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    out = model(**batch, output_attentions=True)
    multi_label = model.config.problem_type == "multi_label_classification"
    probabilities = out.logits.sigmoid() if multi_label else out.logits.softmax(-1)
    return {
        "input_ids": batch["input_ids"].tolist(),
        "classifier": out.logits,
        "base": model.labelattn(**batch).pooler_output,
        "label_attentions": out.label_attentions,
        "pipeline": [{model.config.id2label[i]: float(p) for i, p in enumerate(row)} for row in probabilities],
    }


def assert_same(model, result: list, expected: torch.Tensor, where: str) -> None:
    """Equal up to float32 rounding (`conftest.float32_rounding`: the same weights in another process give results
    that differ by about 1e-6), while any wrong weight or code path moves O(1) logits by far more."""
    assert expected.abs().max() > 0.1
    tolerance = float32_rounding(model, expected)
    torch.testing.assert_close(torch.tensor(result), expected, rtol=0, atol=tolerance, msg=lambda m: f"{where}: {m}")


@pytest.mark.parametrize("checkpoint", list(CHECKPOINTS))
def test_a_fresh_process_gets_identical_results(loaded, tokenizer, checkpoint):
    _, models, _, runs = loaded
    expected = expected_outputs(models[checkpoint], tokenizer)
    for job, result in runs:
        if job["checkpoint"] != checkpoint or "num_labels" in job["options"]:
            continue
        where = f"{job['kind']} from {job['source']} {job['options']}"
        assert "error" not in result, f"{where}: {result.get('traceback')}"
        if job["kind"] == "pipeline":  # every label name, with its softmax or sigmoid score
            assert [row.keys() for row in result["scores"]] == [row.keys() for row in expected["pipeline"]], where
            # A probability moves by at most a quarter of its logit's rounding (the softmax's and sigmoid's slope).
            tolerance = float32_rounding(models[checkpoint], expected["classifier"]) / 4
            for got, want in zip(result["scores"], expected["pipeline"], strict=True):
                assert got == pytest.approx(want, abs=tolerance), where
            continue
        assert result["module"].startswith("transformers_modules."), f"{where} did not run as remote code"
        assert result["class"] == (
            "LabelAttnForSequenceClassification" if job["kind"] == "classifier" else "LabelAttnModel"
        )
        assert result["input_ids"] == expected["input_ids"], f"{where}: the saved tokenizer differs"
        model = models[checkpoint]
        assert_same(model, result["output"], expected[job["kind"]], where)
        assert_same(model, result["fast"], expected[job["kind"]], f"{where}, without weights")
        if expected["label_attentions"] is not None:
            assert_same(model, result["label_attentions"], expected["label_attentions"], where)


@pytest.mark.parametrize("checkpoint", list(CHECKPOINTS))
def test_another_label_count_is_refused_through_the_auto_class(loaded, checkpoint):
    _, _, _, runs = loaded
    [result] = [r for job, r in runs if job["checkpoint"] == checkpoint and "num_labels" in job["options"]]
    assert result.get("error") == "LabelAttnConfigError", result
    assert result["is_value_error"]
    num_labels = CHECKPOINTS[checkpoint].get("num_labels", 3)
    assert f"trained for {num_labels} labels ['class_0', 'class_1', 'class_2'" in result["message"]
    assert "but 5 were asked for" in result["message"]


def test_a_saved_folder_holds_safetensors_both_code_files_and_the_full_auto_map(loaded):
    root, _, _, _ = loaded
    for name in CHECKPOINTS:
        files = {path.name for path in (root / name).iterdir()}
        assert {"model.safetensors", "configuration_labelattn.py", "modeling_labelattn.py", "tokenizer.json"} <= files
        assert not any(file.endswith(".bin") for file in files)
        config = json.loads((root / name / "config.json").read_text())
        assert config["auto_map"] == {
            "AutoConfig": "configuration_labelattn.LabelAttnConfig",
            "AutoModel": "modeling_labelattn.LabelAttnModel",
            "AutoModelForSequenceClassification": "modeling_labelattn.LabelAttnForSequenceClassification",
        }
        assert str(root) not in json.dumps(config) and str(REPO_ROOT) not in json.dumps(config)
        for code in ("configuration_labelattn.py", "modeling_labelattn.py"):
            assert (root / name / code).read_text() == (REPO_ROOT / code).read_text()
