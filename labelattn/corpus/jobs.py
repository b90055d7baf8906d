"""Predict and explain whole corpora: streamed in shards to Arrow files, resumable, split across processes.

```python
from labelattn.corpus.jobs import explain_dataset, predict_dataset
predictions = predict_dataset(model, tokenizer, dataset, output_dir="out/predictions")
explanations = explain_dataset(model, tokenizer, dataset, method="label_attention", output_dir="out/la")
```

The rows are cut into shards of `shard_size` rows (fixed by the row count alone, never by the number of
processes, so that any launch makes the same shards). Each shard is read from the input's Arrow table, its texts
predicted or explained together (the explainers batch them by length), and written as one Arrow file under a
temporary name, renamed when complete (`labelattn.corpus.shards`). The folder records the run's settings in `run.json`:
a run started again with the same settings skips the finished shards; other settings are refused. Every request is
checked before the folder is touched. Under `accelerate launch` the pending shards are split across the processes
(`PartialState.split_between_processes`); every process writes its own shards to the shared folder, and the result
is the shards read back in order, memory-mapped: the corpus is never held in memory as Python objects, only one
shard at a time.

A row whose text cannot be read (missing, empty, giving no token the model knows, or longer than `max_chars`)
becomes an error row that names it, and never stops the run: one bad or huge row costs only itself.
"""

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import torch
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from explainers import ExplainerInputError, Explanation, NonFiniteLogitsError, explain, get_explainer, predict
from explainers.checks import check_count, check_max_length, check_target_choice
from explainers.loading import class_names
from explainers.models import is_multi_label
from explainers.targets import resolve_targets
from explainers.windows import check_long_text
from explainers.words import TextInput, input_problem
from labelattn.coding import check_probability, fallback_codes, row_confidence
from labelattn.corpus.process_state import process_state
from labelattn.corpus.shards import CorpusError, ShardFolder

DEFAULT_SHARD_SIZE = 1000
# The longest text (characters, both segments of a pair together) a row may hold: about 1.6 million words, a few
# minutes of windows. A longer one is more often a file's mistake (a whole export in one cell) than a document, and
# would hold up its shard's other rows and its memory: it becomes an error row that says so.
DEFAULT_MAX_CHARS = 10_000_000
# Label attention's classes × words matrix would make every row as large as all its --all-targets rows together:
# the corpus files keep the method's scalar and per-word diagnostics only.
DROPPED_EXTRAS = ("class_scores", "labels")
# (text, class) pairs whose classes × words scores one `explain` call may hold (see `explain_job`): about 60 MB.
CLASS_ROWS_PER_CALL = 200_000
# How the explainers name the text they refuse, in a call on one text (see `compute_rows`).
FIRST_TEXT = "Text 0 "
# The column of an iterable's file (`write_iterable`) that says why an item cannot be read, or null.
ITEM_PROBLEM = "item_problem"

__all__ = ["CorpusError", "CorpusOptions", "explain_dataset", "predict_dataset"]


@dataclass(frozen=True)
class CorpusOptions:
    """Where a corpus run reads its texts and writes its results: the keyword arguments that `predict_dataset` and
    `explain_dataset` share, and the corpus commands' options.

    Attributes:
        output_dir: the folder of the shards and `run.json`; a run there with the same settings is resumed.
            Default: a new temporary folder (one process only).
        text_column: the column of the texts (a `datasets.Dataset`).
        text_pair_column: the column of the second texts of pairs, or None.
        id_column: a column that names each row: it comes right after `row` in the output, and in error messages.
        shard_size: rows per shard, the unit of work, of resuming and of the split across processes.
        overwrite: replace a folder's results of other settings (only its own files are deleted).
        progress: show a progress bar of every process's rows (on the main process).
        protected: files the run reads (the input file), which the output folder must neither hold nor replace.
        max_chars: the longest text a row may hold, in characters; a longer one becomes an error row.
    """

    output_dir: str | Path | None = None
    text_column: str = "text"
    text_pair_column: str | None = None
    id_column: str | None = None
    shard_size: int = DEFAULT_SHARD_SIZE
    overwrite: bool = False
    progress: bool = True
    protected: tuple[Path, ...] = ()
    max_chars: int = DEFAULT_MAX_CHARS


# --------------------------------------------------------------------------------------------------- the input


def check_columns(
    dataset: datasets.Dataset, text_column: str, text_pair_column: str | None, id_column: str | None
) -> None:
    """Refuse a column name that the data does not have (the commands call it before loading the model)."""
    for role, column in (("text", text_column), ("text pair", text_pair_column), ("id", id_column)):
        if column is not None and column not in dataset.column_names:
            raise CorpusError(
                f"The data has no {role} column {column!r}; its columns are {dataset.column_names}: "
                f"pass --{role.replace(' ', '-')}-column NAME."
            )


def check_iterable(data: Any) -> None:
    """Refuse what is neither a `datasets.Dataset` nor an iterable of texts, before anything is read."""
    if isinstance(data, datasets.DatasetDict):
        raise CorpusError(f"The data holds the splits {list(data)}: pass one of them, e.g. data['test'].")
    if isinstance(data, str | bytes | dict) or not isinstance(data, Iterable):
        raise CorpusError(
            f"data is a {type(data).__name__}: pass a datasets.Dataset, or a list (any iterable) of texts or of "
            "(text, text_pair) tuples."
        )


def write_iterable(items: Iterable[TextInput], path: Path) -> None:
    """Stream `items` (texts or `(text, text_pair)` tuples) into the Arrow file `path`, 10,000 at a time, as the
    columns `text`, `text_pair` (null where an item is a single text) and `ITEM_PROBLEM`: why an item cannot be
    read (not a text or a pair of texts, a lone surrogate, which Arrow cannot store), with its texts null, so that
    it becomes its row's error in its own words."""
    names = ("text", "text_pair", ITEM_PROBLEM)
    schema = pa.schema([(name, pa.large_string()) for name in names])
    path.parent.mkdir(parents=True, exist_ok=True)
    columns: dict[str, list[str | None]] = {name: [] for name in names}
    temporary = f"{path}.tmp-{os.getpid()}"  # of this process: two runs never write into one file
    with pa.OSFile(temporary, "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for item in items:
            problem = input_problem(item)
            pair = problem is None and isinstance(item, tuple)
            columns["text"].append(None if problem else item[0] if pair else item)
            columns["text_pair"].append(item[1] if pair else None)
            columns[ITEM_PROBLEM].append(f"{subject(item)} {problem}" if problem else None)
            if len(columns["text"]) == 10_000:
                writer.write_table(pa.table(columns, schema=schema))
                columns = {name: [] for name in names}
        writer.write_table(pa.table(columns, schema=schema))
    os.replace(temporary, path)


def read_iterable(path: Path) -> datasets.Dataset:
    """The file of `write_iterable`, memory-mapped; without its `text_pair` column when no item was a pair."""
    dataset = datasets.Dataset.from_file(str(path))
    if dataset.data.column("text_pair").null_count == len(dataset):
        dataset = dataset.remove_columns("text_pair")
    return dataset


def fingerprint(dataset: datasets.Dataset) -> str:
    """A digest of every value of every column, read in slices: equal exactly when the rows are equal."""
    digest = hashlib.sha256(json.dumps(dataset.column_names).encode())
    table = dataset.with_format("arrow")
    for start in range(0, len(dataset), 10_000):
        for column in table[start : start + 10_000].columns:
            digest.update(json.dumps(column.to_pylist(), default=str, ensure_ascii=False).encode())
    return digest.hexdigest()[:32]


def model_identity(model: torch.nn.Module) -> dict[str, Any]:
    """What names the model in `run.json`: its folder (resolved) or Hub id, a digest of its config, and a digest of
    up to 4,096 evenly spaced values of every weight (a model retrained in the same folder differs; reading a
    sample keeps this fast for large models, and the values are copied, not computed, so any device agrees)."""
    config = model.config.to_dict()
    source = str(config.pop("_name_or_path", "") or "")
    config.pop("transformers_version", None)
    weights = hashlib.sha256()
    for name, param in sorted(model.state_dict().items()):
        values = param.detach().flatten()
        sample = values[:: max(1, values.numel() // 4096)]
        weights.update(name.encode() + str(tuple(param.shape)).encode() + sample.float().cpu().numpy().tobytes())
    return {
        "name_or_path": str(Path(source).resolve()) if source and Path(source).exists() else source,
        "config_sha256": hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16],
        "weights_sha256": weights.hexdigest()[:16],
    }


def read_texts(table: pa.Table, text_column: str, text_pair_column: str | None) -> list[Any]:
    """The texts of a shard: values of the text column, or `(text, text_pair)` tuples, decoded by their
    `datasets` feature: a column of mixed types (`datasets.Json`, stored as JSON texts) gives each value as it was
    written, so that a number among texts is that row's error, and no text is read with its JSON quotes."""
    features = datasets.Features.from_arrow_schema(table.schema)

    def values(name: str) -> list[Any]:
        return features.decode_column(table.column(name).to_pylist(), name)

    if text_pair_column is None:
        return values(text_column)
    return list(zip(values(text_column), values(text_pair_column), strict=True))


def subject(text: Any) -> str:
    """What an error row's message is about: "the text", or "the pair" for `(text, text_pair)`."""
    return "the pair" if isinstance(text, tuple) else "the text"


# --------------------------------------------------------------------------------------------------- the jobs


@dataclass
class Job:
    """What a corpus run computes for each shard, with which model.

    Attributes:
        model, tokenizer: the classifier.
        max_length: the longest input in tokens asked for (None: all the model reads), checked again for pairs
            once the data is known (a pair keeps a word of each segment).
        settings: what must be equal for a folder's shards to be reused (recorded in `run.json`).
        features: the result columns and their types (every shard has exactly these, whatever its rows).
        compute: the result rows of a list of valid texts: one list of rows (dicts) per text.
    """

    model: torch.nn.Module
    tokenizer: Any
    max_length: int | None
    settings: dict[str, Any]
    features: datasets.Features
    compute: Callable[[list[TextInput]], list[list[dict[str, Any]]]]
    long_text: str = "truncate"

    def check_length(self, pairs: bool) -> None:
        check_max_length(self.max_length, self.model, self.tokenizer, pairs, error=CorpusError)
        if pairs and self.long_text == "windows":
            raise CorpusError("long_text='windows' reads single texts: pairs cannot be cut apart; use 'truncate'.")


def upper_levels(config: PretrainedConfig, labels: list[str]) -> dict[str, list[str]]:
    """For a model trained on hierarchical labels (`config.label_hierarchy`, see configuration_labelattn.py), each
    upper level's group of every class, by class index: a predicted class implies them. Empty otherwise."""
    hierarchy = getattr(config, "label_hierarchy", None)
    if not hierarchy:
        return {}
    levels, ancestors = hierarchy["levels"][:-1], hierarchy["ancestors"]
    return {level: [ancestors[label][depth] for label in labels] for depth, level in enumerate(levels)}


def fallback_coder(
    config: PretrainedConfig, labels: list[str], fallback: list[tuple[str, float | None]]
) -> Callable[[torch.Tensor], list[dict[str, Any]]]:
    """For a model trained on hierarchical labels and `fallback`, its levels from the classes up each with its
    threshold (`labelattn.coding.stored_fallback`): the function that gives each text of a batch of probabilities
    where it is coded (`coding.fallback_codes`): `manual` (no level reaches its threshold), `coded_level`,
    `coded_label` and `coded_probability` (the group's probability, the sum of its classes')."""
    levels = (getattr(config, "label_hierarchy", None) or {}).get("levels", [])
    expected, given = levels[::-1], [name for name, _ in fallback]
    if len(levels) < 2 or given != expected:
        has = f"its levels, the classes' first, are {expected}" if len(levels) > 1 else "it has no coarser level"
        raise CorpusError(f"fallback levels {given} do not fit this model: {has}.")
    upper, codes, names = upper_levels(config, labels), [], []
    for level, threshold in fallback:
        if threshold is not None:
            check_probability(threshold, f"the fallback threshold of level {level!r}")
        of_class = upper.get(level)  # each class's group at this level; None at the classes' own level
        groups = list(dict.fromkeys(of_class)) if of_class else labels
        position = {group: index for index, group in enumerate(groups)}
        codes.append(([position[group] for group in of_class] if of_class else None, threshold))
        names.append(groups)

    def code(probabilities: torch.Tensor) -> list[dict[str, Any]]:
        level, group, probability = fallback_codes(probabilities.numpy(), codes)
        rows = []
        for i, g, p in zip(level.tolist(), group.tolist(), probability.tolist(), strict=True):
            coded = i >= 0  # else a person codes the text
            at = {"coded_level": fallback[i][0], "coded_label": names[i][g], "coded_probability": p} if coded else {}
            rows.append({"manual": not coded, "coded_level": None, "coded_label": None, "coded_probability": None} | at)
        return rows

    return code


def predict_job(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    *,
    batch_size: int = 32,
    max_length: int | None = None,
    threshold: float | None = None,
    long_text: str = "truncate",
    manual_below: float | None = None,
    top_k: int | None = None,
    fallback: list[tuple[str, float | None]] | None = None,
    mixed_precision: str = "no",
) -> Job:
    """The predicted label(s) and every class's probability (`prob_<label>` columns), or with `top_k` the k most
    probable classes (`top_labels`, `top_probabilities`: lists, most probable first) in place of those columns; a
    text longer than the model reads is cut (`long_text="truncate"`) or read in windows (`"windows"`, see
    `explainers.windows`). With `manual_below`, a `manual` column says which rows a person should code: those whose
    confidence (the top probability; for a multi-label model the least sure yes/no decision, see
    `labelattn.coding`) is below it; with `fallback` instead, a text may be coded at a coarser level of the classes'
    hierarchy, and `manual` marks the texts no level codes (`fallback_coder`).

    `top_k` is for models of many classes: ICD-10-CM's 1,918 `prob_<label>` columns cost more to build and write
    than the model takes to compute them (docs/corpus.md, "Many classes"). `mixed_precision` `"bf16"` or `"fp16"`
    runs the forward passes under `torch.autocast` in that precision (the weights stay as loaded): faster where the
    hardware multiplies in it, the probabilities within its rounding of float32's."""
    labels = class_names(model.config)
    multi_label = is_multi_label(model)
    if threshold is not None and not multi_label:
        raise CorpusError("--threshold applies to multi-label models; this model predicts one class per text.")
    threshold = 0.5 if threshold is None else check_probability(threshold, "threshold")
    check_count(batch_size, "batch_size", "texts", error=CorpusError)
    check_max_length(max_length, model, tokenizer, error=CorpusError)
    check_long_text(long_text, [])
    if manual_below is not None:
        check_probability(manual_below, "manual_below")
    if fallback is not None and (manual_below is not None or multi_label):
        why = "this model predicts a set of labels per text" if multi_label else "give it without manual_below"
        raise CorpusError(f"fallback codes one class per text, with the classes' threshold first: {why}.")
    coder = fallback_coder(model.config, labels, fallback) if fallback is not None else None
    autocast = autocast_context(model, mixed_precision)
    if top_k is not None and check_count(top_k, "top_k", "classes", error=CorpusError) > len(labels):
        raise CorpusError(f"top_k={top_k}: the model has {len(labels)} classes; give at most that many.")
    predicted = "predicted_labels" if multi_label else "predicted_label"
    groups = upper_levels(model.config, labels)
    features = prediction_features(predicted, groups, labels, top_k, manual_below is not None, coder is not None)

    def compute(texts: list[TextInput]) -> list[list[dict[str, Any]]]:
        with autocast():
            result = predict(model, tokenizer, texts, batch_size=batch_size, max_length=max_length, long_text=long_text)
        probabilities = result.probabilities
        bests = probabilities.argmax(-1).tolist()
        codes = coder(probabilities) if coder else [{}] * len(bests)
        if top_k is not None:
            top = probabilities.topk(top_k, dim=-1)
            tops = zip(top.indices.tolist(), top.values.tolist(), strict=True)
        rows = []
        for probs, best, truncated, coded in zip(probabilities.tolist(), bests, result.truncated, codes, strict=True):
            if multi_label:
                chosen = [i for i, p in enumerate(probs) if p >= threshold]
                label = [labels[i] for i in chosen]
                levels = {
                    f"{predicted}_{level}": list(dict.fromkeys(of[i] for i in chosen)) for level, of in groups.items()
                }
            else:
                label = labels[best]
                levels = {f"{predicted}_{level}": of[best] for level, of in groups.items()}
            if top_k is None:
                by_class = {f"prob_{name}": p for name, p in zip(labels, probs, strict=True)}
            else:
                indices, values = next(tops)
                by_class = {"top_labels": [labels[i] for i in indices], "top_probabilities": values}
            row = {predicted: label, **levels, "probability": probs[best], **by_class, "truncated": truncated}
            if manual_below is not None:
                row["manual"] = row_confidence(probs, multi_label) < manual_below
            rows.append([row | coded])
        return rows

    settings = {"task": "predict", "max_length": max_length, "threshold": threshold if multi_label else None}
    settings |= {"long_text": long_text} if long_text != "truncate" else {}  # (the folders of older runs have none)
    settings |= {"manual_below": manual_below} if manual_below is not None else {}
    settings |= {"top_k": top_k} if top_k is not None else {}
    settings |= {"fallback": [list(level) for level in fallback]} if fallback is not None else {}
    settings |= {"mixed_precision": mixed_precision} if mixed_precision != "no" else {}
    return Job(model, tokenizer, max_length, settings, features, compute, long_text)


# `mixed_precision` values, as `labelattn train` and Accelerate name them, and the dtype each computes in.
AUTOCAST_DTYPES = {"no": None, "fp16": torch.float16, "bf16": torch.bfloat16}


def autocast_context(model: torch.nn.Module, mixed_precision: str) -> Callable[[], contextlib.AbstractContextManager]:
    """What `predict_job` computes under: `torch.autocast` on the model's device in the precision `mixed_precision`
    names, or nothing for `"no"`; refused with `CorpusError` for another name or a device autocast does not run on."""
    if mixed_precision not in AUTOCAST_DTYPES:
        raise CorpusError(f"mixed_precision={mixed_precision!r}: give one of {list(AUTOCAST_DTYPES)}.")
    dtype, device = AUTOCAST_DTYPES[mixed_precision], next(model.parameters()).device
    if dtype is None:
        return contextlib.nullcontext
    if not torch.amp.is_autocast_available(device.type):
        raise CorpusError(f"mixed_precision={mixed_precision!r}: torch has no autocast on {device.type}; give 'no'.")
    return lambda: torch.autocast(device.type, dtype=dtype)


def prediction_features(
    predicted: str, groups: dict[str, list[str]], labels: list[str], top_k: int | None, manual: bool, fallback: bool
) -> datasets.Features:
    """The columns `predict_job` writes: the predicted label(s) as `predicted` names them, their probability, their
    upper levels, one probability per class or the `top_k` best, `truncated`, `manual` when asked, and with the
    fallback where each text is coded."""
    kind = datasets.List(datasets.Value("string")) if predicted == "predicted_labels" else datasets.Value("string")
    if top_k is None:
        by_class = {f"prob_{label}": datasets.Value("float32") for label in labels}
    else:
        by_class = {
            "top_labels": datasets.List(datasets.Value("string")),
            "top_probabilities": datasets.List(datasets.Value("float32")),
        }
    return datasets.Features(
        {
            predicted: kind,
            "probability": datasets.Value("float32"),
            **{f"{predicted}_{level}": kind for level in groups},
            **by_class,
            "truncated": datasets.Value("bool"),
            **({"manual": datasets.Value("bool")} if manual or fallback else {}),
            **({name: datasets.Value("string") for name in ("coded_level", "coded_label")} if fallback else {}),
            **({"coded_probability": datasets.Value("float32")} if fallback else {}),
        }
    )


EXPLANATION_FEATURES = {
    "target": datasets.Value("int64"),
    "target_label": datasets.Value("string"),
    "probability": datasets.Value("float64"),
    "words": datasets.List(datasets.Value("string")),
    "spans": datasets.List(datasets.List(datasets.Value("int64"))),
    "scores": datasets.List(datasets.Value("float64")),
    # What the scores explain ("centered_logit", "log_probability", ...; null for attention weights).
    "output": datasets.Value("string"),
    "score": datasets.Value("float64"),
    "baseline_score": datasets.Value("float64"),
    "delta": datasets.Value("float64"),
    # For a pair: 0 or 1 per word, the segment (text, text_pair) whose span it is; null for single texts.
    "word_segments": datasets.List(datasets.Value("int8")),
    "extras": datasets.Value("string"),
    "truncated": datasets.Value("bool"),
}


def explain_job(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    method: str,
    *,
    target: Any = None,
    all_targets: bool = False,
    top_k: int | None = None,
    options: dict[str, Any] | None = None,
    batch_size: int = 16,
    max_length: int | None = None,
    long_text: str = "truncate",
) -> Job:
    """Word scores of each text by `method`: one row per text, or per class with `all_targets` / `top_k`; a text
    longer than the model reads is cut or read in windows (`long_text`, as in `predict_job`)."""
    options = dict(options or {})
    # Every choice a user can get wrong is checked here, by the explainers' own rules, before the first shard.
    explainer = get_explainer(model, tokenizer, method)
    explainer.check_options(dict(options))
    labels = class_names(model.config)
    check_target_choice(target, "all" if all_targets else None, top_k, len(labels), error=CorpusError)
    if target is not None:
        # Resolved once against a stand-in prediction: unknown labels, a pair for a method that takes none, ...
        resolve_targets(
            target, torch.zeros(1, dtype=torch.long), dict(enumerate(labels)), explainer.allows_contrast, method
        )
    check_count(batch_size, "batch_size", "rows", error=CorpusError)
    check_max_length(max_length, model, tokenizer, error=CorpusError)
    check_long_text(long_text, [])
    features = dict(EXPLANATION_FEATURES)
    if isinstance(target, tuple):
        features["contrast_label"] = datasets.Value("string")
    if all_targets or top_k is not None:
        features["rank"] = datasets.Value("int64")
    request = {
        "method": method,
        "target": target,
        "targets": "all" if all_targets else None,
        "top_k": top_k,
        "batch_size": batch_size,
        "max_length": max_length,
        "long_text": long_text,
        **options,
    }

    # A method that scores every class (label attention) keeps a classes × words matrix in each explanation until
    # `explanation_row` drops it: texts go to `explain` in chunks of at most CLASS_ROWS_PER_CALL (text, class)
    # pairs, so that a shard's memory does not grow with its rows × classes (1,918 classes, top 3: 1.2 GB for 400
    # texts at once). A model with few classes explains a whole shard in one call.
    per_text = len(labels) if all_targets else (top_k or 1)
    chunk = max(batch_size, CLASS_ROWS_PER_CALL // (per_text * len(labels)))

    def compute(texts: list[TextInput]) -> list[list[dict[str, Any]]]:
        return [
            rows(result)
            for start in range(0, len(texts), chunk)
            for result in explain(model, tokenizer, texts[start : start + chunk], **request)
        ]

    def rows(result) -> list[dict[str, Any]]:
        if not isinstance(result, list):
            return [explanation_row(result, features)]
        if all_targets:
            # Every class, in class order; its rank by probability says which were likely.
            order = sorted(range(len(result)), key=lambda i: -result[i].probability)
            ranks = {i: rank for rank, i in enumerate(order, start=1)}
            return [{**explanation_row(exp, features), "rank": ranks[i]} for i, exp in enumerate(result)]
        return [{**explanation_row(exp, features), "rank": rank} for rank, exp in enumerate(result, start=1)]

    settings = {
        "task": "explain",
        "method": method,
        "options": options,
        "target": list(target) if isinstance(target, tuple) else target,
        "all_targets": all_targets,
        "top_k": top_k,
        "max_length": max_length,
    }
    settings |= {"long_text": long_text} if long_text != "truncate" else {}  # (the folders of older runs have none)
    return Job(model, tokenizer, max_length, settings, datasets.Features(features), compute, long_text)


def explanation_row(exp: Explanation, features: dict[str, Any]) -> dict[str, Any]:
    """One `Explanation` as a row of the corpus file: the columns of `features` it has."""
    extras = {k: v for k, v in exp.extras.items() if k not in DROPPED_EXTRAS}
    # Without the dropped extras before `to_dict` copies the rest: label attention's class × word table is, at
    # 1,918 classes, most of the copying (measured: 90% of an ICD-10-CM explanation run went to it).
    record = dataclasses.replace(exp, extras={}).to_dict()
    record["extras"] = json.dumps(extras)
    return {name: record.get(name) for name in features}


# --------------------------------------------------------------------------------------------------- the run


@dataclass
class CorpusReport:
    """What a corpus run did: the rows, the error rows, the shards computed here and skipped as already finished,
    the time."""

    dataset: datasets.Dataset
    folder: Path
    rows: int
    shards_computed: int
    shards_skipped: int
    seconds: float
    processes: int

    def errors(self) -> tuple[int, str | None]:
        """The number of output rows with an error, and the first one's message (which names its row)."""
        column = self.dataset.data.column("error")
        count = len(column) - column.null_count
        return count, column.filter(pc.is_valid(column))[0].as_py() if count else None

    def summary(self) -> str:
        rate = self.rows / self.seconds if self.seconds > 0 else float("inf")
        skipped = f", {self.shards_skipped} already done" if self.shards_skipped else ""
        return (
            f"{self.rows} rows in {self.seconds:.1f} s ({rate:.1f} rows/s, {self.processes} process(es), "
            f"{self.shards_computed} shard(s) computed{skipped}) -> {self.folder}"
        )


def run_job(job: Job, data: datasets.Dataset | Iterable[TextInput], options: CorpusOptions) -> CorpusReport:
    """Run `job` over `data` shard by shard, in the processes of `accelerate launch` (or this one alone). Every
    check is made before the output folder is touched (but for an iterable's copy there, which is read back)."""
    state = process_state()
    check_count(options.shard_size, "shard_size", "rows", error=CorpusError)
    check_count(options.max_chars, "max_chars", "characters", error=CorpusError)
    output_dir = options.output_dir
    if output_dir is None:
        if state.num_processes > 1:
            raise CorpusError("Several processes need one output folder they all write to: pass output_dir.")
        output_dir = tempfile.mkdtemp(prefix="labelattn-corpus-")
    folder = ShardFolder(Path(output_dir))
    folder.check_usable(list(options.protected))
    text_column, text_pair_column = options.text_column, options.text_pair_column
    problem_column = None
    if isinstance(data, datasets.Dataset):
        dataset = data
    else:
        # An iterable is read once, by the main process, into the folder; every process maps that file.
        check_iterable(data)
        if state.is_main_process:
            write_iterable(data, folder.input_file)
        state.wait_for_everyone()
        dataset = read_iterable(folder.input_file)
        text_column, text_pair_column = "text", "text_pair" if "text_pair" in dataset.column_names else None
        problem_column = ITEM_PROBLEM
    check_columns(dataset, text_column, text_pair_column, options.id_column)
    check_result_columns(dataset, job)
    job.check_length(pairs=text_pair_column is not None)
    if not len(dataset):
        raise CorpusError("The data holds no rows.")
    settings = {
        **job.settings,
        "model": model_identity(job.model),
        "text_column": text_column,
        "text_pair_column": text_pair_column,
        "shard_size": options.shard_size,
        "input": {"rows": len(dataset), "fingerprint": fingerprint(dataset)},
    }
    if options.max_chars != DEFAULT_MAX_CHARS:  # (the folders of older runs have none)
        settings["max_chars"] = options.max_chars
    if options.id_column is not None:  # it orders the columns and names the rows of error messages
        settings["id_column"] = options.id_column
    shard_size = options.shard_size
    folder.num_shards = math.ceil(len(dataset) / shard_size)
    folder.check_settings(settings, options.overwrite)  # every process: all refuse together, before any write
    state.wait_for_everyone()
    if state.is_main_process:
        folder.prepare(settings, options.overwrite)
    state.wait_for_everyone()
    pending = folder.pending()
    state.wait_for_everyone()  # every process has listed the shards before any is written

    start = time.perf_counter()
    bar = None
    if options.progress and state.is_main_process:
        from tqdm.auto import tqdm

        done = (folder.num_shards - len(pending)) * shard_size
        bar = tqdm(total=len(dataset), initial=min(done, len(dataset)), unit="rows", dynamic_ncols=True)
    table = dataset.with_format("arrow")
    with state.split_between_processes(pending) as mine:
        for index in mine:
            rows = table[index * shard_size : (index + 1) * shard_size]
            columns = ShardColumns(text_column, text_pair_column, options.id_column, problem_column)
            shard = shard_table(job, rows, index * shard_size, columns, options.max_chars)
            folder.write(index, shard)
            if bar is not None:
                # The shards finished in the shared folder: the progress of every process, not only this one.
                bar.update(min(folder.finished() * shard_size, len(dataset)) - bar.n)
    state.wait_for_everyone()
    if bar is not None:
        bar.update(len(dataset) - bar.n)
        bar.close()
    return CorpusReport(
        dataset=folder.dataset(),
        folder=folder.path,
        rows=len(dataset),
        shards_computed=len(pending),
        shards_skipped=folder.num_shards - len(pending),
        seconds=time.perf_counter() - start,
        processes=state.num_processes,
    )


def check_result_columns(dataset: datasets.Dataset, job: Job) -> None:
    clash = sorted(set(dataset.column_names) & ({"row", "error"} | set(job.features)))
    if clash:
        raise CorpusError(
            f"The data's column(s) {clash} would be overwritten by the results: rename them first "
            "(dataset.rename_column) or drop them."
        )


@dataclass
class ShardColumns:
    """The input's columns a shard reads: the texts, the pairs' second texts, the ids, and for an iterable's file
    why each item cannot be read (`ITEM_PROBLEM`, not written out)."""

    text: str
    text_pair: str | None = None
    id: str | None = None
    problem: str | None = None


def shard_table(
    job: Job, rows: pa.Table, first_row: int, columns: ShardColumns, max_chars: int = DEFAULT_MAX_CHARS
) -> pa.Table:
    """One shard's output: `row` (the input's row number), the id column, the input's other columns, the results,
    and `error` (null unless the row could not be read: why, naming the row and its id). A row with several
    results (one per class) repeats its input columns."""
    texts = read_texts(rows, columns.text, columns.text_pair)
    ids = rows.column(columns.id).to_pylist() if columns.id else None
    given = [None] * len(texts)
    if columns.problem:
        given = rows.column(columns.problem).to_pylist()
        rows = rows.drop_columns([columns.problem])
        # An iterable's single text among pairs has no second text: it is read alone, as `explain` reads it.
        texts = [text[0] if isinstance(text, tuple) and text[1] is None else text for text in texts]

    def row_name(i: int) -> str:
        return f"row {first_row + i}" + (f" ({columns.id} {ids[i]!r})" if ids is not None else "")

    def reason(text: Any, known: str | None) -> str | None:
        """Why the row is not computed (the iterable's own reason first), or None."""
        if known is not None:
            return known
        problem = row_problem(text, max_chars)
        return None if problem is None else f"{subject(text)} {problem}"

    reasons = [reason(text, known) for text, known in zip(texts, given, strict=True)]
    valid = [i for i, why in enumerate(reasons) if why is None]
    with warnings.catch_warnings():
        # Truncation is a column of the output, not a warning per row.
        warnings.filterwarnings("ignore", message=".*longer than .* tokens")
        computed = iter(compute_rows(job, [texts[i] for i in valid]) if valid else [])
    take, results = [], []
    for i, why in enumerate(reasons):
        outcome = why if why is not None else next(computed)
        for result in [{"error": f"{row_name(i)}: {outcome}"}] if isinstance(outcome, str) else outcome:
            take.append(i)
            results.append(result)
    features = datasets.Features({**job.features, "error": datasets.Value("string")})
    result_table = pa.Table.from_pylist(
        [{name: r.get(name) for name in features} for r in results], schema=features.arrow_schema
    )
    inputs = rows.take(pa.array(take, type=pa.int64()))
    output = {"row": pa.array([first_row + i for i in take], type=pa.int64())}
    order = ([columns.id] if columns.id else []) + [c for c in inputs.column_names if c != columns.id]
    output.update({name: inputs.column(name) for name in order})
    output.update({name: result_table.column(name) for name in result_table.column_names})
    return pa.table(output)


def row_problem(text: Any, max_chars: int) -> str | None:
    """What keeps a row's text from being computed (`input_problem`, or more than `max_chars` characters), or None."""
    problem = input_problem(text)
    if problem is not None:
        return problem
    size = sum(map(len, text)) if isinstance(text, tuple) else len(text)
    if size > max_chars:
        return (
            f"has {size:,} characters, more than the {max_chars:,} a row may hold: split it into several rows, or "
            "raise the bound (--max-chars, max_chars=)"
        )
    return None


def compute_rows(job: Job, texts: list[TextInput], whole: bool = True) -> list[list[dict[str, Any]] | str]:
    """`job.compute(texts)`, with each text the explainers refuse (say, one that gives no token the model knows),
    and each text whose logits are not finite (an overflow in float16, say), replaced by the reason: the texts are
    halved until each refused one is alone, so that one bad text costs a few passes over its shard, and every other
    text is computed.

    A refusal that is not about its text is raised: one about the model or the tokenizer, or logits that are not
    finite for every text of a `whole` shard of several (the model's weights): it would refuse every row.
    """
    try:
        return job.compute(texts)
    except ExplainerInputError as error:
        if len(texts) > 1:
            return compute_halves(job, texts)
        message = str(error)
        if not message.startswith(FIRST_TEXT):
            raise
        return [f"{subject(texts[0])} {message[len(FIRST_TEXT) :]}"]
    except NonFiniteLogitsError as error:
        if error.every_text and whole and len(texts) > 1:
            raise
        if len(texts) > 1:
            return compute_halves(job, texts)
        return [
            f"{subject(texts[0])} gives logits that are not finite numbers: it overflows the model's precision "
            "(under --mixed-precision fp16, use bf16 or no), or the weights are broken"
        ]


def compute_halves(job: Job, texts: list[TextInput]) -> list[list[dict[str, Any]] | str]:
    half = len(texts) // 2
    return compute_rows(job, texts[:half], whole=False) + compute_rows(job, texts[half:], whole=False)


# --------------------------------------------------------------------------------------------------- public API


def predict_dataset(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    data: datasets.Dataset | Iterable[TextInput],
    **arguments: Any,
) -> datasets.Dataset:
    """The predicted label and every class probability of each row of `data`, in its order, its columns kept.

    Args:
        data: a `datasets.Dataset` (its `text_column`, and `text_pair_column` for pairs), or an iterable of texts
            or `(text, text_pair)` tuples.
        arguments: by keyword, what to compute (`predict_job`'s): `threshold` (multi-label models only: the
            probability from which a label is predicted, default 0.5), `batch_size` (default 32), `max_length`
            (longest input in tokens, default all the model reads; longer texts are marked `truncated`), `long_text`
            ("windows" reads them whole, see `explainers.windows`), `top_k` (the k most probable classes in place
            of one column per class), `manual_below` or `fallback`, `mixed_precision` ("bf16" or "fp16": the
            forward passes under `torch.autocast`); and
            where the texts are read and the results written (`CorpusOptions`'s): `output_dir`, `text_column`,
            `text_pair_column`, `id_column`, `shard_size`, `overwrite`, `progress`, `max_chars`.

    Returns:
        A memory-mapped `datasets.Dataset`: `row`, the input's columns, `predicted_label` (`predicted_labels`,
        a list, for a multi-label model), `predicted_label_<level>` for each upper level of a model trained on
        hierarchical labels, `probability` of the predicted class, `prob_<label>` for every class (or with `top_k`
        `top_labels` and `top_probabilities`), `truncated`, `manual` with `manual_below` or `fallback`,
        `coded_level`, `coded_label` and `coded_probability` with `fallback`, and `error` (why a row's text could
        not be read, naming the row, else None).
    """
    options, request = split_arguments(arguments)
    return run_job(predict_job(model, tokenizer, **request), data, options).dataset


def explain_dataset(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    data: datasets.Dataset | Iterable[TextInput],
    method: str = "integrated_gradients",
    **arguments: Any,
) -> datasets.Dataset:
    """The explanation of each row of `data` by `method`, in its order, its columns kept.

    Args:
        arguments: by keyword, what to explain (`explain_job`'s): `target` (None, the predicted class; a class
            index or label name; or a pair `(a, b)`, "a rather than b"), `all_targets` (one row per class of each
            text, with its `rank` by probability), `top_k` (one row for each of the k most probable classes, `rank`
            1 the most probable), `options` (the method's, e.g. `{"n_steps": 64}`), `batch_size` (default 16),
            `max_length`; and `CorpusOptions`'s, as in `predict_dataset`.

    Returns:
        A memory-mapped `datasets.Dataset`: `row`, the input's columns, `target`, `target_label`, `probability`,
        `words`, `spans`, `scores`, `score` / `baseline_score` / `delta` (Integrated Gradients and SHAP),
        `extras` (the method's other diagnostics as JSON, e.g. IG's `n_steps`), `truncated`, `error`; and
        `word_segments` for pairs, `contrast_label` for a pair target, `rank` with `all_targets` / `top_k`.
    """
    options, request = split_arguments(arguments)
    return run_job(explain_job(model, tokenizer, method, **request), data, options).dataset


def split_arguments(arguments: dict[str, Any]) -> tuple[CorpusOptions, dict[str, Any]]:
    """Keyword arguments split into the corpus options (the fields of `CorpusOptions`) and the job's own."""
    names = {field.name for field in dataclasses.fields(CorpusOptions)}
    corpus = {name: value for name, value in arguments.items() if name in names}
    return CorpusOptions(**corpus), {name: value for name, value in arguments.items() if name not in names}
