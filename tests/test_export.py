"""`labelattn export --format onnx` and the torch-free predictor: ONNX Runtime's logits equal PyTorch's (within 1e-4
of the logits' scale) for both backbones, on inputs the export never saw (other batch sizes and lengths, a row of
only padding); an export that would not be exact is refused with exit 2 and leaves nothing behind; the predictor
runs a corpus file with torch blocked."""

import argparse
import csv
import json
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import make_model, planted_texts, save_model

import configuration_labelattn
import modeling_labelattn
from labelattn import onnx_predict
from labelattn.cli import main
from labelattn.export import RELATIVE_TOLERANCE, ExportError, export_onnx
from labelattn.onnx_predict import OnnxClassifier, OnnxPredictError

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

REPO_ROOT = Path(__file__).resolve().parents[1]


def unseen_batches(tokenizer, pad_token_id: int) -> list[dict[str, np.ndarray]]:
    """Inputs of shapes the export did not trace or check: 7 texts of 4-12 words and 1 text, each plus a row of only
    padding, and a text cut at the model's longest input."""
    texts, _ = planted_texts(7, seed=5)
    batches = []
    for group in (texts, texts[:1]):
        batch = {k: v.astype(np.int64) for k, v in tokenizer(group, padding=True, return_tensors="np").items()}
        empty = {k: np.zeros_like(v[:1]) for k, v in batch.items()}
        empty["input_ids"][:] = pad_token_id
        batches.append({k: np.concatenate([v, empty[k]]) for k, v in batch.items()})
    long_text = " ".join(texts * 20)
    batches.append(
        {
            k: v.astype(np.int64)
            for k, v in tokenizer([long_text], truncation=True, max_length=128, return_tensors="np").items()
        }
    )
    return batches


def assert_onnx_equals_pytorch(model, tokenizer, folder: Path) -> None:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for batch in unseen_batches(tokenizer, tokenizer.pad_token_id):
        feed = {name: batch[name] for name in names}
        with torch.no_grad():
            expected = model(**{k: torch.from_numpy(v) for k, v in feed.items()}).logits.numpy()
        (actual,) = session.run(["logits"], feed)
        scale = float(np.abs(expected).max())
        assert scale > 0.1, "the model's logits are too small for the comparison to mean anything"
        gap = float(np.abs(actual - expected).max())
        assert gap <= RELATIVE_TOLERANCE * scale, f"shape {feed['input_ids'].shape}: gap {gap:.3g}, scale {scale:.3g}"


@pytest.fixture(scope="module")
def encoder_export(tokenizer, tmp_path_factory):
    """The tiny-encoder model, saved and exported through the command line."""
    model = make_model("encoder", num_labels=3)
    root = tmp_path_factory.mktemp("export")
    folder = save_model(model, tokenizer, root / "model")
    assert main(["export", str(folder), str(root / "onnx"), "--format", "onnx"]) == 0
    return model, root / "onnx"


def test_the_cli_exports_an_encoder_model_with_pytorchs_logits(encoder_export, tokenizer):
    model, out = encoder_export
    assert {"model.onnx", "tokenizer.json", "config.json"} <= {p.name for p in out.iterdir()}
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {str(i): label for i, label in model.config.id2label.items()}
    assert config["onnx"]["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert_onnx_equals_pytorch(model, tokenizer, out)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(backbone="context", temperature=2.5),
        dict(backbone="embedding", num_labels=40, multi_label=True),
        dict(backbone="embedding", pooling="mean"),
    ],
    ids=["context-temperature", "embedding-many-multi", "embedding-mean"],
)
def test_embedding_models_export_with_pytorchs_logits(kwargs, tokenizer, tmp_path):
    model = make_model(**kwargs)
    report = export_onnx(model, tokenizer, tmp_path / "onnx")
    assert report.max_gap <= report.bound
    config = json.loads((tmp_path / "onnx" / "config.json").read_text())
    assert config.get("temperature") == kwargs.get("temperature")
    assert config["onnx"]["inputs"] == ["input_ids", "attention_mask"]
    assert_onnx_equals_pytorch(model, tokenizer, tmp_path / "onnx")


def head_choices() -> list[dict]:
    """Every way the config lets label attention score a class vector (`scorer`, and a low-rank per-class scorer),
    read from the config module, so that a choice added there is exported here too."""
    scorers = getattr(configuration_labelattn, "SCORERS", None)
    if scorers is None:
        return [{}]
    choices = [{"scorer": scorer} for scorer in scorers]
    if "per_class" in scorers:
        choices.append({"scorer": "per_class", "scorer_rank": 4})
    if "label_projections" in configuration_labelattn.LabelAttnConfig.__dataclass_fields__:
        choices.append({"scorer": "per_class", "label_projections": False})
    return choices


@pytest.mark.parametrize("choice", head_choices(), ids=lambda c: "-".join(map(str, c.values())) or "default")
def test_every_head_choice_exports_with_pytorchs_logits(choice, tokenizer, tmp_path):
    model = make_model("context", num_labels=40, **choice)  # many classes: the head's blocked routes
    export_onnx(model, tokenizer, tmp_path / "onnx")
    assert_onnx_equals_pytorch(model, tokenizer, tmp_path / "onnx")


def scaled_when_exported(monkeypatch) -> None:
    """A model whose traced graph differs from its eager forward: logits 1.1x larger under torch.export (the way
    the TorchScript exporter once froze a data-dependent branch)."""
    forward = modeling_labelattn.LabelAttnForSequenceClassification.forward

    def forward_scaled(self, *args, **kwargs):
        output = forward(self, *args, **kwargs)
        if torch.compiler.is_exporting():
            output.logits = output.logits * 1.1
        return output

    monkeypatch.setattr(modeling_labelattn.LabelAttnForSequenceClassification, "forward", forward_scaled)


def with_a_value_branch(monkeypatch) -> None:
    """A model whose forward branches on a tensor's value, which torch.export cannot trace."""
    forward = modeling_labelattn.LabelAttnForSequenceClassification.forward

    def forward_branching(self, *args, **kwargs):
        output = forward(self, *args, **kwargs)
        if output.logits.sum() > 1e9:
            output.logits = output.logits.clamp(max=1e9)
        return output

    monkeypatch.setattr(modeling_labelattn.LabelAttnForSequenceClassification, "forward", forward_branching)


@pytest.mark.parametrize(
    ("break_model", "message"),
    [(scaled_when_exported, "differ from PyTorch's by"), (with_a_value_branch, "Python branch on a tensor's values")],
    ids=["inexact", "untraceable"],
)
def test_an_export_that_would_not_be_exact_is_refused_and_leaves_nothing(
    break_model, message, tokenizer, tmp_path, monkeypatch, capsys
):
    folder = save_model(make_model("embedding", num_labels=3), tokenizer, tmp_path / "model")
    (tmp_path / "exports").mkdir()
    out = tmp_path / "exports" / "onnx"
    out.mkdir()  # an empty folder of the user's: it stays, empty
    break_model(monkeypatch)
    assert main(["export", str(folder), str(out)]) == 2
    error = capsys.readouterr().err
    assert message in error and "nothing was written" in error, error
    assert [p.name for p in (tmp_path / "exports").iterdir()] == ["onnx"] and not any(out.iterdir())


def test_an_existing_folder_is_refused_before_any_work(tokenizer, tmp_path, capsys):
    out = tmp_path / "onnx"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["export", str(tmp_path / "no-model"), str(out)]) == 2
    assert "is not an empty folder" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"


def test_a_slow_tokenizer_is_refused(tmp_path):
    slow = SimpleNamespace(is_fast=False)  # transformers 5 loads BERT's tokenizer fast; a Python-only one is not
    with pytest.raises(ExportError, match="slow tokenizer"):
        export_onnx(make_model("embedding"), slow, tmp_path / "onnx")
    assert not (tmp_path / "onnx").exists()


# Runs with torch (and transformers) made unimportable: the predictor must not need them.
TORCH_FREE = r"""
import sys
sys.modules["torch"] = None
sys.modules["transformers"] = None
from labelattn.cli import main
from labelattn.onnx_predict import OnnxClassifier
assert OnnxClassifier  # imported without torch
sys.exit(main(["predict-onnx", *sys.argv[1:]]))
"""


@pytest.mark.filterwarnings("ignore:Text 9 is longer than")  # PyTorch's side of the comparison says it cut text 9
def test_the_predictor_runs_a_corpus_file_without_torch(encoder_export, tokenizer, tmp_path):
    from explainers import predict

    model, out = encoder_export
    texts, _ = planted_texts(9, seed=7)
    texts.append("zebra " * 600)  # longer than the model reads: cut alike
    data = tmp_path / "corpus.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    output = tmp_path / "predictions.jsonl"
    command = [sys.executable, "-c", TORCH_FREE, str(out), str(data), "--output", str(output), "--batch-size", "4"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert [(r["row"], r["id"], r["text"]) for r in rows] == [(i, f"r{i}", t) for i, t in enumerate(texts)]
    expected = predict(model, tokenizer, texts).probabilities.numpy()
    labels = list(model.config.id2label.values())
    actual = np.array([[r[f"prob_{label}"] for label in labels] for r in rows])
    assert np.abs(actual - expected).max() <= 1e-5
    assert [r["predicted_label"] for r in rows] == [labels[i] for i in expected.argmax(1)]
    assert [r["truncated"] for r in rows] == [False] * 9 + [True]


def test_the_predictor_reads_csv_and_refuses_a_missing_column(encoder_export, tmp_path, capsys):
    _, out = encoder_export
    data = tmp_path / "tickets.csv"
    data.write_text('ticket,body\n7,"where is lima , peru ?"\n8,who wrote hamlet\n')
    output = tmp_path / "predicted.csv"
    assert main(["predict-onnx", str(out), str(data), "--text-column", "body", "--output", str(output)]) == 0
    rows = list(csv.DictReader(output.open()))
    assert [(r["row"], r["ticket"], r["body"]) for r in rows] == [
        ("0", "7", "where is lima , peru ?"),
        ("1", "8", "who wrote hamlet"),
    ]
    assert all(abs(sum(float(v) for k, v in r.items() if k.startswith("prob_")) - 1) < 1e-5 for r in rows)
    top = tmp_path / "top.csv"  # --top-k: the two best of the same probabilities, best first
    assert (
        main(["predict-onnx", str(out), str(data), "--text-column", "body", "--top-k", "2", "--output", str(top)]) == 0
    )
    for full, best in zip(rows, csv.DictReader(top.open()), strict=True):
        ranked = sorted((k for k in full if k.startswith("prob_")), key=lambda k: float(full[k]), reverse=True)
        assert json.loads(best["top_labels"]) == [k.removeprefix("prob_") for k in ranked[:2]]
        assert json.loads(best["top_probabilities"]) == pytest.approx([float(full[k]) for k in ranked[:2]], abs=1e-6)
        assert not any(k.startswith("prob_") for k in best)
    too_many = tmp_path / "too-many.csv"
    assert (
        main(["predict-onnx", str(out), str(data), "--text-column", "body", "--top-k", "99", "--output", str(too_many)])
        == 2
    )
    assert "--top-k 99: give a number of classes from 1 to" in capsys.readouterr().err and not too_many.exists()
    with pytest.raises(OnnxPredictError, match="top_k 0: give a number of classes from 1 to"):
        OnnxClassifier(out).predict(["who wrote hamlet"], top_k=0)  # the Python API: no empty lists

    missing = tmp_path / "missing.csv"
    assert main(["predict-onnx", str(out), str(data), "--output", str(missing)]) == 2
    assert "rows 0-1 have no column 'text' (row 0 has ['body', 'ticket'])" in capsys.readouterr().err
    assert not missing.exists() and not list(tmp_path.glob("missing.csv.tmp-*"))


def predict_onnx(folder: Path, data: Path, output: Path, *options: str) -> int:
    return main(["predict-onnx", str(folder), str(data), "--output", str(output), *options])


def test_a_huge_csv_cell_is_read_and_a_csv_error_is_refused_by_line(encoder_export, tmp_path, monkeypatch, capsys):
    _, out = encoder_export
    data = tmp_path / "long.csv"
    data.write_text("id,text\n1,who wrote hamlet\n2," + "zebra " * 30_000 + "\n")  # 180,000 characters
    assert predict_onnx(out, data, tmp_path / "long.jsonl") == 0
    rows = [json.loads(line) for line in (tmp_path / "long.jsonl").read_text().splitlines()]
    assert [(r["id"], r["truncated"]) for r in rows] == [("1", False), ("2", True)]

    previous = csv.field_size_limit()
    monkeypatch.setattr(onnx_predict, "CSV_FIELD_LIMIT", 1000)  # any csv.Error: the same one-line refusal
    try:
        assert predict_onnx(out, data, tmp_path / "refused.jsonl") == 2
    finally:
        csv.field_size_limit(previous)
    assert f"{data}, line 3: field larger than field limit" in capsys.readouterr().err
    assert not (tmp_path / "refused.jsonl").exists()


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".txt"])
def test_a_file_with_a_byte_order_mark_is_read(suffix, encoder_export, tmp_path):
    _, out = encoder_export
    content = {
        ".csv": "text\nwho wrote hamlet\n",
        ".jsonl": '{"text": "who wrote hamlet"}\n',
        ".txt": "who wrote hamlet\n",
    }[suffix]
    data = tmp_path / f"bom{suffix}"
    data.write_text(content, encoding="utf-8-sig")  # Excel's "CSV UTF-8"
    assert predict_onnx(out, data, tmp_path / "out.jsonl") == 0
    (row,) = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert row["text"] == "who wrote hamlet" and row["error"] is None


def test_only_a_newline_ends_a_txt_line(encoder_export, tmp_path):
    _, out = encoder_export
    data = tmp_path / "lines.txt"
    data.write_bytes(b"who wrote\rhamlet\nwhere is lima\r\nthe last line")
    assert predict_onnx(out, data, tmp_path / "out.jsonl") == 0
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows] == ["who wrote\rhamlet", "where is lima", "the last line"]


def csv_cell(value: str):
    try:
        return json.loads(value) if value else None
    except json.JSONDecodeError:
        return value


@pytest.mark.parametrize("output_suffix", [".jsonl", ".csv"])
def test_a_row_without_a_text_gets_an_error_and_the_others_are_predicted(output_suffix, encoder_export, tmp_path):
    _, out = encoder_export
    texts = ["who wrote hamlet", "", "   ", 42, None, "where is lima , peru ?"]
    data = tmp_path / "mixed.jsonl"
    rows = [{"id": i, "text": t} if i != 4 else {"id": i} for i, t in enumerate(texts)]  # row 4: no text at all
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    output = tmp_path / f"out{output_suffix}"
    assert predict_onnx(out, data, output, "--batch-size", "1") == 0
    if output_suffix == ".jsonl":
        rows = [json.loads(line) for line in output.read_text().splitlines()]
    else:  # a CSV cell is a string: an empty one stands for null, a number or a list is written as JSON
        rows = [{k: csv_cell(v) for k, v in r.items()} for r in csv.DictReader(output.open())]
    assert [r["error"] for r in rows] == [
        None,
        "row 1: the text is empty or only whitespace",
        "row 2: the text is empty or only whitespace",
        "row 3: the text is an int, not a string",
        "row 4: the text is missing",
        None,
    ]
    predicted = OnnxClassifier(out).predict([texts[0], texts[5]])
    for row, expected in zip([rows[0], rows[5]], predicted, strict=True):
        assert row["predicted_label"] == expected["predicted_label"]
        assert [row[k] for k in expected if k.startswith("prob_")] == pytest.approx(
            [v for k, v in expected.items() if k.startswith("prob_")], abs=1e-6
        )
    for row in rows[1:5]:
        assert set(row) == set(rows[0]) and all(row[k] is None for k in predicted[0])


@pytest.mark.parametrize("column", ["probability", "error", "row", "prob_class_0", "prob_other", "top_labels"])
def test_an_input_column_the_predictions_would_overwrite_is_refused(column, encoder_export, tmp_path, capsys):
    _, out = encoder_export
    data = tmp_path / "clash.jsonl"
    data.write_text(json.dumps({"text": "who wrote hamlet", column: 1}) + "\n")
    output = tmp_path / "out.csv"
    assert predict_onnx(out, data, output) == 2
    error = capsys.readouterr().err
    assert repr(column) in error and "rename" in error, error
    assert not output.exists() and not list(tmp_path.glob("out.csv.tmp-*"))


@pytest.mark.parametrize("bad_line", ["3,a third,field", "3"], ids=["longer", "shorter"])
def test_a_ragged_csv_row_is_refused_with_its_line(bad_line, encoder_export, tmp_path, capsys):
    _, out = encoder_export
    data = tmp_path / "ragged.csv"
    data.write_text(f"id,text\n1,who wrote hamlet\n{bad_line}\n4,define zebra\n")
    output = tmp_path / "out.csv"
    assert predict_onnx(out, data, output) == 2
    error = capsys.readouterr().err
    assert f"{data}, line 3: " in error and "header" in error, error
    assert not output.exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--batch-size", "0"], "--batch-size 0: give a number of texts from 1"),
        (["--threshold", "0.3"], "--threshold applies to multi-label models"),
    ],
    ids=["batch-size-0", "threshold-single-label"],
)
def test_a_bad_option_is_refused_up_front(options, message, encoder_export, tmp_path, capsys):
    _, out = encoder_export
    data = tmp_path / "data.txt"
    data.write_text("who wrote hamlet\n")
    assert predict_onnx(out, data, tmp_path / "out.jsonl", *options) == 2
    error = capsys.readouterr().err
    assert message in error and "rows 0-" not in error, error
    assert not (tmp_path / "out.jsonl").exists()


def test_a_missing_output_folder_is_named(encoder_export, tmp_path, capsys):
    _, out = encoder_export
    data = tmp_path / "data.txt"
    data.write_text("who wrote hamlet\n")
    assert predict_onnx(out, data, tmp_path / "no-folder" / "out.jsonl") == 2
    error = capsys.readouterr().err
    assert f"{tmp_path / 'no-folder'} is not a folder" in error and ".tmp-" not in error, error


def test_the_documented_predict_onnx_commands_parse():
    parser = argparse.ArgumentParser()
    onnx_predict.add_arguments(parser)
    prefixes = ("labelattn predict-onnx ", "python -m labelattn.onnx_predict ")
    documents = [onnx_predict.__doc__, (REPO_ROOT / "docs" / "production.md").read_text()]
    lines = [line.split("  #")[0] for doc in documents for line in doc.splitlines() if line.startswith(prefixes)]
    assert len(lines) >= 3
    for line in lines:
        parser.parse_args(shlex.split(line)[3 if line.startswith("python") else 2 :])  # SystemExit on a bad option


def test_a_model_with_a_short_input_limit_exports(tokenizer, tmp_path):
    model = make_model("embedding", max_seq_length=6)  # the sample texts are longer
    report = export_onnx(model, tokenizer, tmp_path / "onnx")
    assert report.max_gap <= report.bound and max(n for _, n in report.shapes) == 6
    classifier = OnnxClassifier(tmp_path / "onnx")
    assert classifier.predict(["who wrote hamlet ? " * 10])[0]["truncated"]


def test_a_model_saved_in_fp16_exports_in_float32(tokenizer, tmp_path):
    folder = save_model(make_model("embedding").half(), tokenizer, tmp_path / "model")
    assert json.loads((folder / "config.json").read_text()).get("dtype", "float16") == "float16"
    assert main(["export", str(folder), str(tmp_path / "onnx")]) == 0
    assert_onnx_equals_pytorch(make_model("embedding").half().float(), tokenizer, tmp_path / "onnx")


def test_a_tracing_failure_is_reported_with_its_cause(tokenizer, tmp_path, monkeypatch):
    def forward_failing(self, *args, **kwargs):
        raise NotImplementedError("no kernel for this op\nmore detail")

    monkeypatch.setattr(modeling_labelattn.LabelAttnForSequenceClassification, "forward", forward_failing)
    with pytest.raises(ExportError) as refused:
        export_onnx(make_model("embedding"), tokenizer, tmp_path / "onnx")
    message = str(refused.value)
    assert "NotImplementedError: no kernel for this op" in message and "more detail" not in message, message
    assert "Python branch" not in message and "nothing was written" in message
    assert not (tmp_path / "onnx").exists()
