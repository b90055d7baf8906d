"""What a corpus command writes, through the command line reading a file: one huge row costs only itself (read
whole in windows, in time linear in its length, or refused alone above `--max-chars`), and every value of every
column passed through is written as it was read, or its column refused before any work."""

import csv
import datetime
import decimal
import json
import random
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
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


# --- every value written as it was read -------------------------------------------------------------------------

# Rows whose passed-through columns mix types: a number among the texts, `n` of 1 and "two", a nested `meta.a` of
# both, and a list column; row 3's text is its error.
MIXED = [
    {"id": 0, "text": "Who wrote Hamlet ?", "n": "two", "meta": {"a": "x"}, "tags": ["a"]},
    {"id": 1, "text": "What is the capital of France ?", "n": 1, "meta": {"a": 1}, "tags": []},
    {"id": 2, "text": "How far is the moon ?", "n": None, "meta": {"a": [1, "b"]}, "tags": None},
    {"id": 3, "text": 1984, "n": 2.5, "meta": {"a": None}, "tags": ["b", "c"]},
]
COLUMNS = ("id", "text", "n", "meta", "tags")


def read_output(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def as_csv_cell(value) -> str:
    """A value as a CSV output writes it: a string as it is, nothing as an empty cell, a list or dict as JSON."""
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, list | dict) else str(value)


def write_input(folder: Path, suffix: str) -> tuple[Path, list[dict]]:
    """MIXED as a file of `suffix`, and the rows as that format gives them back (a CSV cell is a string)."""
    path = folder / f"input{suffix}"
    if suffix == ".jsonl":
        return write_jsonl(path, MIXED), MIXED
    if suffix == ".parquet":
        datasets.Dataset.from_list(MIXED, on_mixed_types="use_json").to_parquet(path)
        return path, MIXED
    rows = [{name: as_csv_cell(row[name]) for name in COLUMNS} for row in MIXED]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    # Every CSV cell is read as the string it is; an empty one is missing.
    return path, [{name: value or None for name, value in row.items()} for row in rows]


@pytest.mark.parametrize("source", [".jsonl", ".csv", ".parquet"])
@pytest.mark.parametrize("target", [".parquet", ".jsonl", ".csv"])
def test_every_passed_through_value_is_written_as_it_was_read(model_folder, tmp_path, capsys, source, target):
    data, given = write_input(tmp_path, source)
    out = tmp_path / f"out{target}"
    code = cli("predict", model_folder, data, "--id-column", "id", "--output", out, "--no-progress")
    mixed = source != ".csv"  # a CSV file holds strings only
    if mixed and target == ".parquet":
        # A Parquet column holds one type: refused before any work, naming the column, its types and rows.
        assert code == 2 and not out.exists() and not out.with_name(out.name + ".shards").exists()
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"labelattn predict: error: --output {out}: the column 'text' holds values of several types (str (row 0), "
            "int (row 3)), and a Parquet column holds one type, so they cannot be written as they were read: write "
            "the output as .jsonl (every value as it was read) or .csv, or give the column one type in the input."
        )
        return
    assert code == 0
    written = read_output(out)
    for row, expected in zip(written, given, strict=True):
        for name in COLUMNS:
            wanted = as_csv_cell(expected[name]) if target == ".csv" else expected[name]
            assert row[name] == wanted, (name, row[name], wanted)
    text_error = f"row 3 (id {given[3]['id']!r}): the text is an int, not a str" if mixed else None
    assert [row["error"] or None for row in written] == [None, None, None, text_error]


@pytest.mark.parametrize("target", [".jsonl", ".csv"])
def test_dates_and_decimals_are_written_as_the_text_that_reads_back_to_them(model_folder, tmp_path, target):
    """JSON has no date or decimal type, and CSV only text: ISO 8601 and the exact decimal text. (JSONL once failed
    with `Object of type datetime is not JSON serializable` after all the work.)"""
    when = datetime.datetime(2024, 5, 1, 9, 30, 15, 250000)
    columns = {
        "text": ["who wrote hamlet ?", "how far is the moon ?"],
        "when": pa.array([when, None], pa.timestamp("us")),
        "day": pa.array([when.date(), datetime.date(1999, 12, 31)]),
        "amount": pa.array([decimal.Decimal("1.100"), decimal.Decimal("-0.005")], pa.decimal128(6, 3)),
        "waited": pa.array([datetime.timedelta(seconds=90), None], pa.duration("s")),
        "tags": pa.array([[when.date()], []]),
    }
    pq.write_table(pa.table(columns), data := tmp_path / "dated.parquet")
    out = tmp_path / f"p{target}"
    assert cli("predict", model_folder, data, "--output", out, "--no-progress") == 0
    written = read_output(out)
    assert [datetime.datetime.fromisoformat(r["when"]) for r in written[:1]] == [when]
    assert [datetime.date.fromisoformat(r["day"]) for r in written] == [when.date(), datetime.date(1999, 12, 31)]
    assert [decimal.Decimal(r["amount"]) for r in written] == [decimal.Decimal("1.100"), decimal.Decimal("-0.005")]
    assert [r["amount"] for r in written] == ["1.100", "-0.005"]  # every digit kept
    assert written[0]["waited"] == "0:01:30"
    tags = [json.loads(r["tags"]) if target == ".csv" else r["tags"] for r in written]
    assert tags == [["2024-05-01"], []]
    assert [r["error"] or None for r in written] == [None, None]


@pytest.mark.parametrize("target", [".jsonl", ".csv"])
def test_a_column_of_bytes_is_refused_for_a_text_output_before_any_work(model_folder, tmp_path, capsys, target):
    """Bytes have no text (Python's `b'\\x00'` in a CSV cell was a different value): refused, naming the column."""
    table = pa.table({"text": ["who wrote hamlet ?"], "blob": pa.array([b"\x00\x01"], pa.binary())})
    pq.write_table(table, data := tmp_path / "blob.parquet")
    out = tmp_path / f"p{target}"
    assert cli("predict", model_folder, data, "--output", out, "--no-progress") == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"labelattn predict: error: --output {out}: the column 'blob' holds bytes, which have no text that JSONL or "
        "CSV could hold: write the output as .parquet, or drop the column from the input."
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob.parquet"]


def test_a_text_whose_logits_overflow_costs_only_its_row_and_a_broken_model_stops_the_run(tokenizer, tmp_path, capsys):
    """One word's embedding past float32's range (as an fp16 overflow would be) makes the logits of the texts that
    hold it NaN: those rows get an error, the others are computed as `predict` gives them. A model whose logits are
    NaN for every text is refused, not written as a file of error rows."""
    model = make_model("embedding", num_labels=3)
    zebra = tokenizer.convert_tokens_to_ids("zebra")
    with torch.no_grad():
        model.labelattn.embeddings.weight[zebra] = float("inf")
    folder = save_model(model, tokenizer, tmp_path / "model")
    texts = ["who wrote hamlet ?", "a zebra in the fern", "how far is the moon ?", "zebra"]
    data = write_jsonl(tmp_path / "z.jsonl", [{"text": text} for text in texts])
    out = tmp_path / "p.jsonl"
    assert cli("predict", folder, data, "--output", out, "--no-progress") == 0
    written = read_output(out)
    overflow = "the text gives logits that are not finite numbers: it overflows the model's precision"
    assert [bool(r["error"]) for r in written] == [False, True, False, True]
    assert all(r["error"].startswith(f"row {i}: {overflow}") for i, r in enumerate(written) if r["error"])
    fine = [texts[0], texts[2]]
    direct = predict(*load_classifier(folder), fine).probabilities.max(-1).values
    assert [written[i]["probability"] for i in (0, 2)] == pytest.approx(direct.tolist(), abs=1e-6)
    with torch.no_grad():
        for weight in model.parameters():
            weight.fill_(float("nan"))
    broken = save_model(model, tokenizer, tmp_path / "broken")
    assert cli("predict", broken, data, "--output", tmp_path / "b.jsonl", "--no-progress") == 2
    assert "logits that are not finite numbers for every text (4): its weights are broken" in capsys.readouterr().err
    assert not (tmp_path / "b.jsonl").exists()


def test_a_number_among_texts_past_the_readers_first_block_is_read_as_a_number(model_folder, tmp_path):
    """`datasets` reads a JSONL file in blocks of 10 MB and types every block like the first: the texts after a
    first row of 10 MB were read with their JSON quotes, and the number 1984 as the text "1984"."""
    rows = [{"id": 0, "text": "word " * (2 << 20)}] + [{"id": i, "text": f"who wrote play {i} ?"} for i in (1, 2)]
    data = write_jsonl(tmp_path / "big.jsonl", [*rows, {"id": 3, "text": 1984}])
    out = tmp_path / "p.jsonl"
    assert cli("predict", model_folder, data, "--output", out, "--no-progress") == 0
    written = read_output(out)
    assert [r["text"] for r in written[1:]] == ["who wrote play 1 ?", "who wrote play 2 ?", 1984]
    assert written[3]["error"] == "row 3: the text is an int, not a str"
    direct = predict(*load_classifier(model_folder), [r["text"] for r in rows[1:]]).probabilities.max(-1).values
    assert [r["probability"] for r in written[1:3]] == pytest.approx(direct.tolist(), abs=1e-6)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        # Once pyarrow's "The surrogate pair in string is invalid. in row 0", without the file's line.
        (
            ['{"id": 0, "text": "fine"}', '{"id": 1, "text": "abc\\ud800"}'],
            "line 2, 'text': the string holds a lone surrogate (U+D800 at character 3), which is not Unicode text: "
            "remove it, or decode the source with errors='replace'.",
        ),
        # Once "could not be read (ValueError: Value is too big! at position 8)".
        (
            ['{"id": 0, "text": "fine"}', '{"id": 1, "text": "x", "n": 100000000000000000000000}'],
            "line 2, 'n': the integer 100000000000000000000000 is beyond a signed 64-bit integer, which would turn the "
            'whole column into rounded floats: write it as a string ("...").',
        ),
        # Once read: the whole column became float64, 9007199254740993 written as 9007199254740992.0.
        (
            ['{"id": 9007199254740993, "text": "fine"}', '{"id": 12345678901234567890, "text": "x"}'],
            "line 2, 'id': the integer 12345678901234567890 is beyond a signed 64-bit integer, which would turn the "
            'whole column into rounded floats: write it as a string ("...").',
        ),
    ],
)
def test_a_file_datasets_cannot_read_is_named_by_its_line(model_folder, tmp_path, capsys, lines, message):
    data = tmp_path / "bad.jsonl"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "p.jsonl"
    assert cli("predict", model_folder, data, "--output", out, "--no-progress") == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"labelattn predict: error: {data}, {message}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


def test_texts_that_mix_numbers_and_lists_are_each_their_rows_error(model_folder, tmp_path):
    rows = [{"id": 0, "text": 5}, {"id": 1, "text": [1, 2]}, {"id": 2, "text": "who wrote it ?"}, {"id": 3, "text": []}]
    out = tmp_path / "p.jsonl"
    assert cli("predict", model_folder, write_jsonl(tmp_path / "m.jsonl", rows), "--output", out) == 0
    written = read_output(out)
    assert [r["text"] for r in written] == [r["text"] for r in rows]
    assert [r["error"] for r in written] == [
        "row 0: the text is an int, not a str",
        "row 1: the text is a list, not a str",
        None,
        "row 3: the text is a list, not a str",
    ]
