"""The model card and the folder `--push-to-hub` would upload: it parses, and loads back from a Hub cache offline."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

from labelattn.training.card import CardError, stage_for_hub

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A model trained by the CLI on a small two-class CSV."""
    folder = tmp_path_factory.mktemp("card")
    rows = [
        f"{'great lovely' if i % 2 else 'awful dreadful'} film number {i},{'pos' if i % 2 else 'neg'}"
        for i in range(60)
    ]
    (folder / "reviews.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
    command = [sys.executable, "-m", "labelattn", "train", "--data", folder / "reviews.csv", "--hidden-size", "32"]
    command += ["--epochs", "2", "--batch-size", "8", "--learning-rate", "2e-2", "--output-dir", folder / "model"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(list(map(str, command)), cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    return folder / "model"


def test_card_metadata_and_content(trained):
    card = ModelCard.load(trained / "README.md")
    meta = card.data.to_dict()
    assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == "text-classification"
    assert meta["license"] == "apache-2.0" and meta["datasets"] == ["reviews"]
    assert set(meta["metrics"]) == {"accuracy", "f1"}
    results = {(r.dataset_split, r.metric_name): r.metric_value for r in card.data.eval_results}
    assert set(results) == {(s, m) for s in ("validation", "test") for m in ("accuracy", "macro-f1")}
    assert all(0.0 <= value <= 1.0 for value in results.values())
    text = card.text
    assert "`0` neg, `1` pos" in text
    assert "labelattn train --data" in text and "--hidden-size 32" in text and "--output-dir" in text
    assert "trust_remote_code=True" in text
    # The defaults of the embedding backbone, as run: MiniLM's vectors, frozen, a width-5 token context.
    assert "starting from all-MiniLM-L6-v2's input embeddings" in text and "kept frozen" in text
    assert "residual convolution over 5 neighbouring tokens" in text
    settings = json.loads((trained / "training_args.json").read_text())
    assert settings["hidden_size"] == 32


def test_staged_folder_loads_from_a_hub_cache_offline(trained, tmp_path):
    """The folder push_to_hub uploads, put where `from_pretrained("org/name")` finds a downloaded repo."""
    repo_id = "someone/tiny-reviews"
    commit = hashlib.sha1(b"labelattn test").hexdigest()
    cache = tmp_path / "hf" / "hub" / f"models--{repo_id.replace('/', '--')}"
    staged = stage_for_hub(trained, cache / "snapshots" / commit)
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text(commit)
    assert not (staged / "checkpoints").exists() and (trained / "checkpoints").exists()
    ModelCard.load(staged / "README.md")

    # A fresh process, with the Hub unreachable: it must load by repo id from the cache alone and run the card's usage.
    usage = ModelCard.load(staged / "README.md").text.split("```python\n")[1].split("```")[0]
    script = usage.replace(str(trained), repo_id)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    probabilities = eval(result.stdout.strip().splitlines()[-1])  # the snippet prints {label: probability}
    assert set(probabilities) == {"neg", "pos"} and sum(probabilities.values()) == pytest.approx(1.0, abs=0.01)


def test_incomplete_folder_is_not_staged(trained, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    for path in trained.iterdir():
        if path.is_file() and path.name != "modeling_labelattn.py":
            (partial / path.name).write_bytes(path.read_bytes())
    with pytest.raises(CardError, match=r"modeling_labelattn\.py"):
        stage_for_hub(partial, tmp_path / "staged")
