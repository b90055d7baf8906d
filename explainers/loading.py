"""One loader for every command, the Space and the benchmarks: any transformers text classifier, from a local
folder or a Hub id already in the cache, with every way of failing said in one `LoadError`.

```python
from explainers import load_classifier
model, tokenizer = load_classifier("models/trec-embedding")
model, tokenizer = load_classifier("org/name", revision="<40-hex commit>")  # a Hub id, from the cache only
```

What it checks, in order, before anything runs: the folder (or the cached snapshot of the id) exists; its
`config.json` is JSON with a `model_type`; its weights are safetensors (pickle weights, `pytorch_model.bin`, are
refused before anything opens them, since unpickling runs arbitrary code); the tokenizer is a fast one (word
spans need character offsets); the label map names every class once (`class_names`); the weights fit the config
and hold a classification head.
"""

import json
import os
from collections import Counter
from pathlib import Path

import torch
from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
from huggingface_hub.utils import validate_repo_id
from safetensors import SafetensorError
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING

from configuration_labelattn import LabelAttnConfig
from modeling_labelattn import LabelAttnForSequenceClassification, LabelAttnModel

from .errors import ExplainerError

SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
# Formats that transformers reads with `torch.load` (pickle) or that PyTorch cannot read at all.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
OTHER_FRAMEWORK_WEIGHTS = ("tf_model.h5", "flax_model.msgpack")

CONVERT_HINT = (
    "In an environment you trust with this file, convert it once: "
    "model = AutoModelForSequenceClassification.from_pretrained(folder); "
    "model.save_pretrained(folder, safe_serialization=True)."
)


class LoadError(ExplainerError):
    """A model folder or Hub id that cannot be loaded as a text classifier; the message says why and what to do."""


def register_labelattn() -> None:
    """Make the Auto classes build labelattn models from the installed modules, so that a labelattn folder loads
    without `trust_remote_code` (the copies of the two modules saved in the folder are not run)."""
    AutoConfig.register(LabelAttnConfig.model_type, LabelAttnConfig, exist_ok=True)
    AutoModel.register(LabelAttnConfig, LabelAttnModel, exist_ok=True)
    AutoModelForSequenceClassification.register(LabelAttnConfig, LabelAttnForSequenceClassification, exist_ok=True)


def load_classifier(
    name_or_path: str | os.PathLike,
    revision: str | None = None,
    trust_remote_code: bool = False,
    device: str | torch.device | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A sequence-classification model in eval mode and its fast tokenizer.

    Args:
        name_or_path: a local model folder, or a Hub id (`org/name`) whose snapshot is in the Hugging Face cache
            (`$HF_HOME/hub`); nothing is downloaded.
        revision: for a Hub id, the branch, tag or commit to read (default `main`). Pin a commit when the model
            brings its own code.
        trust_remote_code: run the model's own Python code from its folder (`auto_map`), for architectures that
            transformers does not know. Not needed for labelattn models, which load through the installed modules.
        device: where to put the model (default: where it loads, the CPU).

    Raises:
        LoadError: no such folder or cached id, a broken `config.json`, a label map that leaves a class without
            a name or gives two classes one name, missing, pickle-only or ill-fitting weights, a model without a
            classification head, custom code not trusted, a tokenizer that is missing or slow.
    """
    register_labelattn()
    folder = _resolve_folder(name_or_path, revision)
    config_dict = _read_config(folder)
    _check_weight_files(folder)
    config = _load_config(folder, config_dict, trust_remote_code)
    class_names(config, where=f"{folder}/config.json")
    tokenizer = _load_tokenizer(folder, trust_remote_code)
    model = _load_model(folder, config, trust_remote_code)
    if device is not None:
        try:
            model = model.to(device)
        # torch says an unknown device with RuntimeError, a backend it was not built with with AssertionError.
        except (RuntimeError, TypeError, AssertionError) as error:
            raise LoadError(f"device={device!r}: {error}. Give a device this machine has, e.g. 'cpu'.") from None
    return model.eval(), tokenizer


def _resolve_folder(name_or_path: str | os.PathLike, revision: str | None) -> Path:
    """The local folder of a path or of a cached Hub id's snapshot."""
    if not isinstance(name_or_path, str | os.PathLike):
        raise LoadError(f"name_or_path is a {type(name_or_path).__name__}: give a model folder or a Hub id (str).")
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if revision is not None:
            raise LoadError(
                f"revision={revision!r} applies to Hub ids, and {str(name_or_path)!r} is a local folder (it has "
                "one version): leave revision out."
            )
        return path
    if path.exists():
        raise LoadError(f"{path} is a file: give the model's folder (the one holding config.json), or a Hub id.")
    repo_id = str(name_or_path)
    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise LoadError(f"No model folder at {path}: check the path, or give a Hub id such as org/name.") from None
    try:
        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except LocalEntryNotFoundError:
        at = f" at revision {revision!r}" if revision else ""
        raise LoadError(
            f"{repo_id!r} is neither a folder here nor a Hub id in the cache{at} ({constants.HF_HUB_CACHE}). "
            f"Models are read offline: download it once where the Hub is reachable (`hf download {repo_id}"
            f"{f' --revision {revision}' if revision else ''}`), or give the path of its folder."
        ) from None


def _read_config(folder: Path) -> dict:
    """`config.json` as a dict, checked for what every loader needs before transformers reads it."""
    path = folder / "config.json"
    if not path.is_file():
        raise LoadError(
            f"{folder} has no config.json, so it is not a transformers model folder: give the folder that "
            "save_pretrained wrote."
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise LoadError(f"{path} is not valid JSON ({error}): repair it or save the model again.") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise LoadError(
            f'{path} names no model_type (e.g. "bert"), so the architecture is unknown: repair it or save the '
            "model again with save_pretrained."
        )
    return config


def _check_weight_files(folder: Path) -> None:
    """Refuse a folder without safetensors weights, before any file is opened."""
    if any((folder / name).is_file() for name in SAFE_WEIGHTS):
        return
    # training_args.bin is Trainer's record of its arguments, not weights.
    pickles = sorted(
        p.name
        for p in folder.iterdir()
        if p.suffix in PICKLE_SUFFIXES and p.name != "training_args.bin" and p.is_file()
    )
    if pickles:
        raise LoadError(
            f"{folder} holds its weights only as pickle ({', '.join(pickles)}), and loading a pickle can run any "
            f"code, so it is refused. {CONVERT_HINT} Then the folder has model.safetensors."
        )
    others = [name for name in OTHER_FRAMEWORK_WEIGHTS if (folder / name).is_file()]
    if others:
        raise LoadError(
            f"{folder} holds only {', '.join(others)} (TensorFlow/Flax): transformers 5 reads PyTorch weights. "
            "Convert them to model.safetensors with a transformers 4 release that still reads them."
        )
    raise LoadError(f"{folder} has no weights (model.safetensors): the folder is incomplete, save the model again.")


def _load_config(folder: Path, config_dict: dict, trust_remote_code: bool) -> PretrainedConfig:
    """The model's config, refusing architectures without a sequence-classification class."""
    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise LoadError(f"{folder}/config.json cannot be read: {_first_line(error)}{_remote_hint(error)}") from None
    has_own_class = "AutoModelForSequenceClassification" in config_dict.get("auto_map", {})
    if type(config) not in MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING and not has_own_class:
        raise LoadError(
            f"{folder} holds a {config_dict['model_type']!r} model, and that architecture has no sequence "
            "classification class: give a text classifier (a *ForSequenceClassification model)."
        )
    return config


def class_names(config: PretrainedConfig, where: str = "The model's config") -> list[str]:
    """The name of each class, by index (`config.id2label`): what every output calls the classes (predicted
    labels, `prob_<label>` columns, targets, corpus summaries).

    Raises `LoadError` for a map that would mislabel them: a class without a name (the indexes must run from 0 to
    `num_labels - 1`), a name that is not a string, or one name for several classes. Refused rather than made
    unique (`A`, `A_1`): a duplicated name would stay ambiguous in every predicted label, target and summary.
    Refused too: a model with fewer than two outputs (a regression model, or a single logit read through a
    sigmoid), whose one "class" the softmax of the explainers would give a probability of 1 for every text.
    """
    if getattr(config, "problem_type", None) == "regression":
        raise LoadError(
            f"{where}: problem_type is 'regression': the model predicts a number, not one of several classes, so "
            "there are no class probabilities to predict or explain. Give a text classifier (num_labels ≥ 2)."
        )
    if len(config.id2label) < 2:
        raise LoadError(
            f"{where}: the model has {len(config.id2label)} output (num_labels={len(config.id2label)}): a "
            "regression model, or a binary classifier with a single logit, which the explainers would read as "
            "one class of probability 1 for every text. Give a classifier with one output per class "
            "(num_labels ≥ 2)."
        )
    return label_names(config, where)


def label_names(config: PretrainedConfig, where: str = "The model's config") -> list[str]:
    """The name of each output, by index, refused as in `class_names` for a map that would mislabel them, but
    for any number of outputs: what a classifier built in Python is checked by (a zero-shot classifier over one
    candidate label has one output, its yes/no)."""
    try:
        id2label = {int(index): name for index, name in config.id2label.items()}
    except (TypeError, ValueError):
        raise LoadError(
            f"{where}: id2label's keys {list(config.id2label)[:8]} are not all class indexes: number the classes "
            "0, 1, 2, ... in id2label (and label2id)."
        ) from None
    missing = sorted(set(range(len(id2label))) - set(id2label))
    if missing:
        raise LoadError(
            f"{where}: id2label names the classes {sorted(id2label)}, so class {missing[0]} has no name: every class, "
            f"numbered from 0, needs one. Name the missing classes, or number the names 0 to {len(id2label) - 1}, in "
            "id2label (and label2id) of config.json."
        )
    names = [id2label[i] for i in range(len(id2label))]
    not_text = [(i, name) for i, name in enumerate(names) if not isinstance(name, str)]
    if not_text:
        i, name = not_text[0]
        raise LoadError(
            f"{where}: id2label gives class {i} the name {name!r} ({type(name).__name__}): label names are strings; "
            f'write them quoted in id2label (and label2id) of config.json, e.g. "{i}": "{name}".'
        )
    repeated = [name for name, count in Counter(names).items() if count > 1]  # not names.count: 37 ms a call at 1,918
    shared = {name: [i for i, other in enumerate(names) if other == name] for name in repeated}
    if shared:
        which = "; ".join(f"{name!r} for classes {', '.join(map(str, classes))}" for name, classes in shared.items())
        raise LoadError(
            f"{where}: id2label gives several classes one name ({which}), so outputs could not tell them apart: "
            "give each class its own name in id2label (and label2id) of config.json (for a cached Hub model, in a "
            "copy of its folder)."
        )
    return names


def _load_tokenizer(folder: Path, trust_remote_code: bool) -> PreTrainedTokenizerBase:
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise LoadError(
            f"{folder} has no tokenizer that loads ({_first_line(error)}): save the model's tokenizer beside it "
            f"with tokenizer.save_pretrained(folder).{_remote_hint(error)}"
        ) from None
    # transformers builds a tokenizer with no vocabulary, which reads every word as [UNK], when the files are missing.
    if len(tokenizer.get_vocab()) <= len(tokenizer.all_special_tokens):
        raise LoadError(
            f"{folder} has no tokenizer (its vocabulary is empty: no tokenizer.json, vocab.txt, ...): save the "
            "model's tokenizer beside it with tokenizer.save_pretrained(folder)."
        )
    if not isinstance(tokenizer, PreTrainedTokenizerBase) or not getattr(tokenizer, "is_fast", False):
        raise LoadError(
            f"{folder} has only a slow tokenizer ({type(tokenizer).__name__}): words and their character spans need "
            "a fast one (tokenizer.json). Convert it where a fast version exists: "
            "AutoTokenizer.from_pretrained(folder, use_fast=True).save_pretrained(folder)."
        )
    return tokenizer


def _load_model(folder: Path, config: PretrainedConfig, trust_remote_code: bool) -> PreTrainedModel:
    """The model, with its weights checked against the config: all present, all of the right shape."""
    try:
        # use_safetensors: never fall back to a pickle; ignore_mismatched_sizes: report the shapes ourselves.
        model, info = AutoModelForSequenceClassification.from_pretrained(
            folder,
            config=config,
            trust_remote_code=trust_remote_code,
            use_safetensors=True,
            ignore_mismatched_sizes=True,
            output_loading_info=True,
        )
    except (OSError, ValueError, RuntimeError, KeyError, SafetensorError) as error:
        if "trust_remote_code" in str(error):
            raise LoadError(f"{folder} cannot be loaded: {_first_line(error)}{_remote_hint(error)}") from None
        raise LoadError(
            f"The weights in {folder} cannot be read ({_first_line(error)}): the file is damaged or incomplete, "
            "save the model again."
        ) from None
    if info["mismatched_keys"]:
        shapes = "; ".join(
            f"{name}: saved {tuple(saved)}, config gives {tuple(expected)}"
            for name, saved, expected in sorted(info["mismatched_keys"])[:3]
        )
        raise LoadError(
            f"The weights in {folder} do not fit its config.json ({shapes}): the config (e.g. num_labels, "
            "id2label, hidden_size, vocab_size) belongs to another model. Save the model and its config together."
        )
    if info["missing_keys"]:
        architecture = ", ".join(getattr(config, "architectures", None) or []) or "model"
        missing = ", ".join(sorted(info["missing_keys"])[:4])
        raise LoadError(
            f"{folder} holds a {architecture}, not a complete sequence classifier: its weights lack {missing}, "
            "which would start at random. Give a fine-tuned text classifier (a *ForSequenceClassification model)."
        )
    return model


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _remote_hint(error: BaseException) -> str:
    """What to do when transformers refused to run the model's own code."""
    if "trust_remote_code" not in str(error):
        return ""
    return (
        " The model brings its own code: read it, then pass trust_remote_code=True (labelattn commands: "
        "--trust-remote-code), with revision=<commit> (--revision COMMIT) for a Hub id, so that the code you read "
        "is the code that runs."
    )
