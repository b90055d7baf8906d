"""`labelattn explain` for a few texts: any text classifier, pairs, JSON options, and one clear line (exit code 2,
no traceback) for every way a model folder can be broken."""

import json
from pathlib import Path

import pytest

from labelattn.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_plain_bert_classifier_is_explained(bert_folder, capsys):
    assert main(["explain", str(bert_folder), "who wrote hamlet ?", "--method", "integrated_gradients"]) == 0
    out = capsys.readouterr().out
    assert "integrated_gradients · LABEL_" in out and "hamlet" in out and "delta=" in out


def test_options_are_json_values(bert_folder, capsys):
    argv = ["explain", str(bert_folder), "who wrote hamlet ?", "--option", "tolerance=null", "--option", "n_steps=8"]
    assert main(argv) == 0
    assert "delta=" in capsys.readouterr().out
    # A Python literal is not JSON: it stays a string, which the method refuses by type.
    assert main(["explain", str(bert_folder), "hi there", "--option", "tolerance=None"]) == 2
    assert "tolerance='None' has the wrong type" in capsys.readouterr().err


def test_a_pair_is_explained_over_both_texts(bert_folder, capsys):
    argv = [
        "explain",
        str(bert_folder),
        "a man plays a guitar",
        "--pair",
        "someone makes music",
        "--method",
        "saliency",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "guitar" in out and "music" in out
    assert main(["explain", str(bert_folder), "one", "two", "--pair", "only one"]) == 2
    assert "one --pair per TEXT" in capsys.readouterr().err


def damage(folder: Path, how: str) -> None:
    if how == "broken config.json":
        (folder / "config.json").write_text("{not json")
    elif how == "missing weights":
        (folder / "model.safetensors").unlink()
    else:  # pickle weights only: refused before anything opens them
        (folder / "model.safetensors").unlink()
        (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("broken config.json", "config.json is not valid JSON"),
        ("missing weights", "has no weights"),
        ("pickle weights", "only as pickle (pytorch_model.bin)"),
    ],
)
def test_a_broken_model_folder_is_one_clear_line(broken, how, message, capsys):
    damage(broken, how)
    assert main(["explain", str(broken), "hello"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.startswith("labelattn explain: error:")
    # The corpus mode loads the same way.
    assert main(["explain", str(broken), "--data", "trec", "--output", str(broken.parent / "o.parquet")]) == 2
    assert message in capsys.readouterr().err


CUSTOM_CONFIG = """from transformers import BertConfig


class CustomConfig(BertConfig):
    model_type = "custom-bert"
"""
CUSTOM_MODEL = """from transformers import BertForSequenceClassification

from .configuration_custom import CustomConfig


class CustomClassifier(BertForSequenceClassification):
    config_class = CustomConfig
"""


def test_a_model_with_its_own_code_loads_with_trust_remote_code(broken, tmp_path, capsys):
    (broken / "configuration_custom.py").write_text(CUSTOM_CONFIG)
    (broken / "modeling_custom.py").write_text(CUSTOM_MODEL)
    config = json.loads((broken / "config.json").read_text())
    config.update(
        model_type="custom-bert",
        architectures=["CustomClassifier"],
        auto_map={
            "AutoConfig": "configuration_custom.CustomConfig",
            "AutoModelForSequenceClassification": "modeling_custom.CustomClassifier",
        },
    )
    (broken / "config.json").write_text(json.dumps(config))
    data = tmp_path / "data.csv"
    data.write_text("text\nwho wrote hamlet ?\nwhere is the moon ?\n")
    predict = ["predict", str(broken), str(data), "--output", str(tmp_path / "p.jsonl"), "--no-progress"]
    assert main(predict) == 2
    err = capsys.readouterr().err
    # Advice the command line can follow: its own flags.
    assert "--trust-remote-code" in err and "--revision COMMIT" in err and "Traceback" not in err
    assert main([*predict, "--trust-remote-code"]) == 0
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 2
    assert main(["explain", str(broken), "who wrote hamlet ?", "--method", "saliency", "--trust-remote-code"]) == 0
    assert "hamlet" in capsys.readouterr().out
