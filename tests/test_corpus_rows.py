"""What a corpus command writes, through the command line reading a file: one huge row costs only itself (read
whole in windows, in time linear in its length, or refused alone above `--max-chars`), and every value of every
column passed through is written as it was read, or its column refused before any work."""

import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import FILLER, make_model, save_model

from explainers import load_classifier, predict
from labelattn.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model_folder(tokenizer, tmp_path_factory) -> Path:
    return save_model(make_model("embedding", num_labels=3), tokenizer, tmp_path_factory.mktemp("model"))


def cli(*args) -> int:
    return main([str(a) for a in args])


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def words(count: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(FILLER) for _ in range(count))


def test_a_row_of_100000_words_costs_only_itself(model_folder, tokenizer, tmp_path, capsys):
    rows = [{"id": f"r{i}", "text": words(6 + i, i)} for i in range(8)]
    rows.insert(4, {"id": "book", "text": words(100_000, 99)})
    data = write_jsonl(tmp_path / "corpus.jsonl", rows)
    out = tmp_path / "p.parquet"
    assert cli("predict", model_folder, data, "--long-text", "windows", "--id-column", "id", "--output", out) == 0
    written = pq.read_table(out).to_pylist()
    assert [r["id"] for r in written] == [r["id"] for r in rows]
    assert all(r["error"] is None and r["truncated"] is False for r in written)
    short = [r["text"] for i, r in enumerate(rows) if i != 4]
    direct = predict(*load_classifier(model_folder), short, long_text="windows").probabilities.max(-1).values
    assert [r["probability"] for i, r in enumerate(written) if i != 4] == pytest.approx(direct.tolist(), abs=1e-6)
    # Above --max-chars, the huge row alone becomes an error row that says why and what to do; the others are kept.
    bounded = tmp_path / "b.jsonl"
    assert cli("predict", model_folder, data, "--id-column", "id", "--max-chars", "100000", "--output", bounded) == 0
    kept = [json.loads(line) for line in bounded.read_text().splitlines()]
    size = len(rows[4]["text"])
    assert kept[4]["error"] == (
        f"row 4 (id 'book'): the text has {size:,} characters, more than the 100,000 a row may hold: split it into "
        "several rows, or raise the bound (--max-chars, max_chars=)"
    )
    assert kept[4]["predicted_label"] is None
    assert [r["probability"] for i, r in enumerate(kept) if i != 4] == pytest.approx(
        [r["probability"] for i, r in enumerate(written) if i != 4], abs=1e-6
    )
    assert "1 row(s) kept with the reason in their error column" in capsys.readouterr().err
