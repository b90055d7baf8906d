"""`load_classifier`: labelattn and plain transformers classifiers from folders and the Hub cache, offline; every
way a folder can be wrong gives one `LoadError` that says which."""

import json
import pickle
import shutil
from pathlib import Path

import huggingface_hub
import pytest
import torch
from conftest import make_model, save_model, tiny_encoder_config
from transformers import AutoTokenizer, BertForSequenceClassification, BertModel

from explainers.errors import ExplainerError
from explainers.loading import LoadError, load_classifier
from labelattn import minilm_path
from modeling_labelattn import LabelAttnForSequenceClassification

TEXT = ["Who wrote Hamlet ?", "How far is the moon ?"]


def logits(model, tokenizer) -> torch.Tensor:
    with torch.no_grad():
        return model(**tokenizer(TEXT, padding=True, return_tensors="pt")).logits


def test_plain_bert_classifier_loads_in_eval_mode_with_a_fast_tokenizer(bert_folder):
    model, tokenizer = load_classifier(bert_folder)
    assert isinstance(model, BertForSequenceClassification)
    assert not any(module.training for module in model.modules())
    assert tokenizer.is_fast
    reference = BertForSequenceClassification.from_pretrained(bert_folder).eval()
    torch.testing.assert_close(logits(model, tokenizer), logits(reference, tokenizer))


def test_labelattn_folder_loads_through_the_installed_modules(tmp_path, tokenizer):
    original = make_model("encoder")
    folder = save_model(original, tokenizer, tmp_path / "labelattn")
    # Without its copies of the remote code: only the installed modules can build it, and no code is trusted.
    for module in folder.glob("*.py"):
        module.unlink()
    model, loaded_tokenizer = load_classifier(str(folder))
    assert type(model) is LabelAttnForSequenceClassification
    torch.testing.assert_close(logits(model, loaded_tokenizer), logits(original, tokenizer))


def test_hub_id_loads_from_the_cache_offline(bert_folder, tmp_path, monkeypatch):
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--org--tiny-bert"
    shutil.copytree(bert_folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    expected = logits(*load_classifier(bert_folder))
    for revision in (None, commit):
        model, tokenizer = load_classifier("org/tiny-bert", revision=revision)
        torch.testing.assert_close(logits(model, tokenizer), expected)
    with pytest.raises(LoadError, match=r"nor a Hub id in the cache at revision 'v2'"):
        load_classifier("org/tiny-bert", revision="v2")
    with pytest.raises(LoadError, match=r"neither a folder here nor a Hub id in the cache"):
        load_classifier("org/absent")


def test_device(bert_folder):
    model, _ = load_classifier(bert_folder, device="cpu")
    assert next(model.parameters()).device.type == "cpu"
    with pytest.raises(LoadError, match=r"device='nowhere': .*Give a device this machine has"):
        load_classifier(bert_folder, device="nowhere")
    if not torch.cuda.is_available():
        with pytest.raises(LoadError, match="device='cuda'"):
            load_classifier(bert_folder, device="cuda")


def test_load_error_is_an_explainer_value_error():
    assert issubclass(LoadError, ExplainerError) and issubclass(LoadError, ValueError)


def test_no_such_folder(tmp_path):
    with pytest.raises(LoadError, match=r"No model folder at"):
        load_classifier(tmp_path / "missing" / "deeper" / "model")


def test_a_file_is_not_a_folder(bert_folder):
    with pytest.raises(LoadError, match=r"is a file"):
        load_classifier(bert_folder / "config.json")


def test_revision_of_a_local_folder_is_refused(bert_folder):
    with pytest.raises(LoadError, match=r"revision='main' applies to Hub ids"):
        load_classifier(bert_folder, revision="main")


def test_config_that_is_not_json(broken):
    (broken / "config.json").write_text('{"model_type": "bert",')
    with pytest.raises(LoadError, match=r"config.json is not valid JSON"):
        load_classifier(broken)


def test_config_without_model_type(broken):
    config = json.loads((broken / "config.json").read_text())
    del config["model_type"]
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(LoadError, match=r"names no model_type"):
        load_classifier(broken)


def test_folder_without_config(broken):
    (broken / "config.json").unlink()
    with pytest.raises(LoadError, match=r"has no config.json"):
        load_classifier(broken)


def test_missing_weights(broken):
    (broken / "model.safetensors").unlink()
    (broken / "training_args.bin").write_bytes(b"Trainer's arguments, not weights")
    with pytest.raises(LoadError, match=r"has no weights \(model.safetensors\)"):
        load_classifier(broken)


def test_truncated_weights(broken):
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(LoadError, match=r"weights .* cannot be read"):
        load_classifier(broken)


class _Planted:
    """Unpickling this creates a marker file: proof that the pickle was opened."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_pickle_only_weights_are_refused_unopened(broken, tmp_path, monkeypatch):
    (broken / "model.safetensors").unlink()
    marker = tmp_path / "unpickled"
    (broken / "pytorch_model.bin").write_bytes(pickle.dumps(_Planted(marker)))

    def no_unpickling(*args, **kwargs):
        raise AssertionError("torch.load was called on a refused pickle")

    monkeypatch.setattr(torch, "load", no_unpickling)
    with pytest.raises(LoadError, match=r"only as pickle \(pytorch_model.bin\).*safe_serialization=True"):
        load_classifier(broken)
    assert not marker.exists()


def test_weights_of_other_shapes(broken):
    config = json.loads((broken / "config.json").read_text())
    config["id2label"] = {str(i): f"L{i}" for i in range(4)}
    config["label2id"] = {f"L{i}": i for i in range(4)}
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(LoadError, match=r"do not fit .*classifier.bias: saved \(3,\), config gives \(4,\)"):
        load_classifier(broken)


def test_bare_encoder_is_not_a_sequence_classifier(tmp_path, tokenizer):
    folder = save_model(BertModel(tiny_encoder_config()), tokenizer, tmp_path / "bare")
    with pytest.raises(LoadError, match=r"holds a BertModel, not a complete sequence classifier.*classifier.weight"):
        load_classifier(folder)


def test_architecture_without_a_classifier_class(broken):
    config = json.loads((broken / "config.json").read_text())
    config.update(model_type="clip_vision_model", architectures=["CLIPVisionModel"])
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(LoadError, match=r"'clip_vision_model' model.*no sequence classification class"):
        load_classifier(broken)


def test_custom_code_is_not_run_unless_trusted(broken, tmp_path):
    marker = tmp_path / "ran"
    (broken / "modeling_custom.py").write_text(f"open({str(marker)!r}, 'w')\n")
    config = json.loads((broken / "config.json").read_text())
    config.update(model_type="custom-thing", auto_map={"AutoConfig": "modeling_custom.CustomConfig"})
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        LoadError,
        match=r"pass trust_remote_code=True \(labelattn commands: --trust-remote-code\), with revision=<commit>",
    ):
        load_classifier(broken)
    assert not marker.exists()


def test_slow_only_tokenizer(broken):
    for name in ("tokenizer.json", "vocab.txt", "special_tokens_map.json"):
        (broken / name).unlink(missing_ok=True)
    (broken / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "CanineTokenizer"}))
    assert not AutoTokenizer.from_pretrained(broken).is_fast
    with pytest.raises(LoadError, match=r"only a slow tokenizer \(CanineTokenizer\)"):
        load_classifier(broken)


def test_missing_tokenizer(broken):
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (broken / name).unlink(missing_ok=True)
    with pytest.raises(LoadError, match=r"has no tokenizer .its vocabulary is empty"):
        load_classifier(broken)


def test_minilm_tokenizer_is_what_the_folder_holds(bert_folder):
    _, tokenizer = load_classifier(bert_folder)
    reference = AutoTokenizer.from_pretrained(minilm_path())
    assert tokenizer(TEXT)["input_ids"] == reference(TEXT)["input_ids"]


def set_labels(folder: Path, id2label: dict) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["id2label"] = id2label
    config["label2id"] = {str(name): int(index) for index, name in id2label.items()}
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("id2label", "message"),
    [
        # Two classes named alike: every output would name them alike (issue 20.3).
        ({"0": "A", "1": "A", "2": "B"}, r"several classes one name \('A' for classes 0, 1\)"),
        # A class without a name, whatever the weights say (issue 20.7).
        ({"0": "L0", "1": "L1", "3": "L3"}, r"names the classes \[0, 1, 3\], so class 2 has no name"),
        ({"0": 0, "1": 1, "2": 2}, r"gives class 0 the name 0 \(int\): label names are strings"),
    ],
)
def test_a_label_map_that_would_mislabel_classes_is_refused(broken, id2label, message):
    set_labels(broken, id2label)
    with pytest.raises(LoadError, match=message):
        load_classifier(broken)


@pytest.mark.parametrize(
    ("num_labels", "problem_type", "message"),
    [
        (1, "regression", "problem_type is 'regression': the model predicts a number"),
        (1, None, r"has 1 output \(num_labels=1\)"),
        (3, "regression", "problem_type is 'regression'"),
    ],
)
def test_a_model_without_class_probabilities_is_refused(tmp_path, tokenizer, num_labels, problem_type, message):
    # Softmax over one output is 1 for every text: predicted "with probability 1.0", a wrong result.
    torch.manual_seed(0)
    config = tiny_encoder_config(num_labels=num_labels, problem_type=problem_type)
    folder = save_model(BertForSequenceClassification(config).eval(), tokenizer, tmp_path / "scorer")
    with pytest.raises(LoadError, match=message):
        load_classifier(folder)
