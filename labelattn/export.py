"""`labelattn export MODEL OUT --format onnx`: a trained classifier as an ONNX graph that gives PyTorch's logits.

labelattn export models/trec-embedding out/trec-onnx --format onnx
python -m labelattn.onnx_predict out/trec-onnx questions.jsonl --output predictions.jsonl   # no torch needed

OUT receives `model.onnx` (inputs `input_ids`, `attention_mask` and, for an encoder that reads them,
`token_type_ids`, each `(batch, length)` int64 with both sizes dynamic; output `logits (batch, num_labels)`, already
divided by the model's calibration temperature when it has one), the tokenizer files, and `config.json` (the
model's labels, problem type and temperature, with an `onnx` entry the torch-free predictor reads). The graph goes
through `torch.export` (`torch.onnx.export(..., dynamo=True)`), never the TorchScript tracer, which freezes
data-dependent branches without a word.

Before OUT appears, ONNX Runtime runs the graph on a single text, a padded batch of texts of several lengths and a
row of only padding, and its logits must equal PyTorch's within 1e-4 of the logits' scale; otherwise the export is
refused (exit 2) with the gap, and nothing is left behind. The graph is written in a temporary folder beside OUT and
moved there only once verified: an existing OUT is never touched.
"""

import argparse
import contextlib
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labelattn.arguments import add_model_arguments

if TYPE_CHECKING:  # torch and transformers load when the command runs, so that `labelattn --help` stays fast
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

FORMATS = ("onnx",)
# ONNX Runtime's logits may differ from PyTorch's by this share of the logits' scale: float32 rounding of another
# kernel order is ~1e-6 of it; a wrong branch or weight moves logits by O(scale).
RELATIVE_TOLERANCE = 1e-4
# Below this the logits of an untrained model are all ~0 and their scale says nothing: the tolerance's floor.
SCALE_FLOOR = 1e-2
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# Texts of several lengths for the checks: the padded batch mixes them; the export traces the first two.
SAMPLE_TEXTS = (
    "how many people live in tokyo ?",
    "who wrote hamlet ?",
    "what is the name of the river that runs through the capital of france and where does it reach the sea ?",
    "define zebra",
)


class ExportError(ValueError):
    """The model cannot be exported exactly, or OUT cannot receive the export."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    parser.add_argument("model", help="a trained text classifier: a local folder or a Hub id in the cache")
    parser.add_argument("out", type=Path, help="a new folder for the export (refused if it exists and is not empty)")
    parser.add_argument("--format", choices=FORMATS, default="onnx", help="the export format (default: onnx)")
    parser.add_argument("--opset", type=int, default=None, help="the ONNX opset (default: torch's)")
    add_model_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from labelattn.arguments import classifier_from_arguments

    check_out(args.out)  # before loading anything
    model, tokenizer = classifier_from_arguments(args)
    report = export_onnx(model, tokenizer, args.out, opset=args.opset)
    print(f"labelattn export: {report.summary()}; wrote {args.out}", file=sys.stderr)
    return 0


@dataclass
class ExportReport:
    """What the verification measured: the largest gap between ONNX Runtime's and PyTorch's logits, the scale of
    the logits it is judged against, and the input shapes `(batch, length)` checked."""

    max_gap: float
    scale: float
    shapes: list[tuple[int, int]]

    @property
    def bound(self) -> float:
        return RELATIVE_TOLERANCE * self.scale

    def summary(self) -> str:
        shapes = ", ".join(f"{b}×{n}" for b, n in self.shapes)
        return (
            f"ONNX Runtime's logits equal PyTorch's within {self.max_gap:.2g} (allowed {self.bound:.2g}, "
            f"{RELATIVE_TOLERANCE:g} of the logits' scale {self.scale:.3g}) on inputs of {shapes} (batch×tokens)"
        )


def check_out(out: Path) -> None:
    """OUT must be new, or an empty folder."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty folder: choose a new folder for the export.")


def export_onnx(
    model: "PreTrainedModel", tokenizer: "PreTrainedTokenizerBase", out: str | Path, *, opset: int | None = None
) -> ExportReport:
    """Export `model` (a sequence classifier, put in eval mode and in float32) to `out/model.onnx` with
    `tokenizer`'s files and the config, verified against PyTorch on a single text, a padded batch and a padding-only
    row. Raises `ExportError`, leaving nothing behind, when the graph cannot be traced or its logits differ from
    PyTorch's by more than the tolerance."""
    out = Path(out)
    check_out(out)
    if not getattr(tokenizer, "is_fast", False):
        raise ExportError(
            f"{type(tokenizer).__name__} is a slow tokenizer: the torch-free predictor reads tokenizer.json, which "
            "only a fast tokenizer writes. Load the model with a fast tokenizer (use_fast=True)."
        )
    model = model.float().eval()  # a model saved in fp16 or bf16: the predictor computes in float32
    names = input_names(model, tokenizer)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        write_graph(model, tokenizer, names, staging / "model.onnx", opset)
        report = verify(model, tokenizer, names, staging / "model.onnx")
        tokenizer.save_pretrained(staging)
        model.config.save_pretrained(staging)
        write_onnx_entry(staging / "config.json", model, tokenizer, names, report)
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # a folder's usual mode, not mkdtemp's private one
        if out.exists():
            out.rmdir()  # empty, checked above
        staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return report


def input_names(model, tokenizer) -> list[str]:
    """The inputs the graph takes: the tokenizer's, less `token_type_ids` where the model ignores them (the
    embedding backbone; a graph input that nothing reads would be dropped by the exporter)."""
    names = [n for n in MODEL_INPUTS if n in tokenizer.model_input_names]
    if "input_ids" not in names or "attention_mask" not in names:
        raise ExportError(
            f"The tokenizer gives {tokenizer.model_input_names}: an export needs input_ids and attention_mask."
        )
    if getattr(model.config, "backbone", "encoder") == "embedding" and "token_type_ids" in names:
        names.remove("token_type_ids")
    return names


def max_length(model, tokenizer) -> int:
    limits = [getattr(model.config, "max_seq_length", None), getattr(model.config, "max_position_embeddings", None)]
    limits.append(tokenizer.model_max_length if tokenizer.model_max_length < 1_000_000 else None)
    return min(limit for limit in limits if limit) if any(limits) else 512


def logits_module(model):
    """`model` as a module whose forward takes the graph's inputs by name and returns the logits alone."""
    import torch

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                inputs["token_type_ids"] = token_type_ids
            return self.model(**inputs, return_dict=True).logits

    return Logits().eval()


def sample_batch(tokenizer, names: list[str], texts=SAMPLE_TEXTS, limit: int | None = None) -> dict[str, Any]:
    """The tokenizer's int64 arrays for `texts`, padded to the longest, as numpy."""
    batch = tokenizer(list(texts), padding=True, truncation=limit is not None, max_length=limit, return_tensors="np")
    return {name: batch[name].astype("int64") for name in names}


def write_graph(model, tokenizer, names: list[str], path: Path, opset: int | None) -> None:
    """`torch.onnx.export(..., dynamo=True)` with the batch and the length dynamic; a model whose forward has a
    data-dependent branch is refused with torch's reason."""
    import torch
    from torch.export import Dim

    limit = max_length(model, tokenizer)
    # Cut to the model's limit, as the predictor cuts: a longer sample would break the length's bound below.
    batch = {k: torch.from_numpy(v) for k, v in sample_batch(tokenizer, names, SAMPLE_TEXTS[:2], limit).items()}
    sizes = {0: Dim("batch", min=1, max=1_000_000), 1: Dim("length", min=1, max=limit)}
    wrapper = logits_module(model)
    try:
        with torch.no_grad(), quiet_exporter():
            torch.onnx.export(
                wrapper,
                (),
                str(path),
                kwargs=batch,
                input_names=names,
                output_names=["logits"],
                dynamic_shapes={name: sizes for name in batch},
                opset_version=opset,
                dynamo=True,
                external_data=False,
                verbose=False,
            )
    except Exception as error:  # torch.export's and onnxscript's errors have no common base class
        reason = trace_failure(error)
        hint = " A Python branch on a tensor's values cannot be exported." if "data-dependent" in reason else ""
        raise ExportError(
            f"torch.onnx.export (dynamo=True) could not trace {type(model).__name__}: {reason}.{hint} The export "
            "is refused; nothing was written."
        ) from error


@contextlib.contextmanager
def quiet_exporter():
    """Without the exporter's own chatter (torchvision ops it skips, renamed axes, deprecations inside torch): the
    command's one line says what came of the export."""
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        exporter_log.setLevel(level)


def trace_failure(error: BaseException) -> str:
    """The root cause of an export failure in one line, with the line of the model's code that raised it."""
    while error.__cause__ is not None:
        error = error.__cause__
    text = str(error).strip()
    reason = f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"[:300]
    where = re.search(r"The following call raised this error:\s*\n\s*(File .+?)\n\s*(.+)", text)
    return f"{reason} ({where[1].strip()}: {where[2].strip()})" if where else reason


def verification_batches(tokenizer, names: list[str], limit: int, pad_token_id: int) -> list[dict[str, Any]]:
    """A single text, a padded batch of texts of several lengths, and that batch with a row of only padding."""
    import numpy as np

    single = sample_batch(tokenizer, names, SAMPLE_TEXTS[1:2], limit)  # shorter than the batch: another length
    padded = sample_batch(tokenizer, names, SAMPLE_TEXTS, limit)
    with_empty = {name: np.concatenate([values, values[:1]]) for name, values in padded.items()}
    with_empty["input_ids"][-1] = pad_token_id
    with_empty["attention_mask"][-1] = 0
    if "token_type_ids" in with_empty:
        with_empty["token_type_ids"][-1] = 0
    return [single, padded, with_empty]


def verify(model, tokenizer, names: list[str], path: Path) -> ExportReport:
    """ONNX Runtime's logits against PyTorch's on the verification batches; raises `ExportError` on a gap above
    `RELATIVE_TOLERANCE` of the logits' scale, or when ONNX Runtime cannot run the graph."""
    import numpy as np
    import onnxruntime
    import torch

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    batches = verification_batches(tokenizer, names, max_length(model, tokenizer), pad)
    pairs = []
    for batch in batches:
        with torch.no_grad():
            expected = logits_module(model)(**{k: torch.from_numpy(v) for k, v in batch.items()}).float().numpy()
        try:
            (actual,) = session.run(["logits"], batch)
        except Exception as error:  # onnxruntime's errors have no public base class
            shape = tuple(batch["input_ids"].shape)
            raise ExportError(
                f"ONNX Runtime could not run the exported graph on inputs of shape {shape}: {trace_failure(error)}. "
                "The export is refused; nothing was written."
            ) from error
        pairs.append((expected, actual))
    scale = max(SCALE_FLOOR, max(float(np.abs(expected).max()) for expected, _ in pairs))
    gaps = [
        float(np.abs(actual - expected).max()) if actual.shape == expected.shape else np.inf
        for expected, actual in pairs
    ]
    report = ExportReport(max(gaps), scale, [tuple(b["input_ids"].shape) for b in batches])
    if not report.max_gap <= report.bound:
        worst = ["a single text", "a padded batch", "a padded batch with a row of only padding"][gaps.index(max(gaps))]
        raise ExportError(
            f"ONNX Runtime's logits differ from PyTorch's by {report.max_gap:.3g} on {worst}, above the allowed "
            f"{report.bound:.3g} ({RELATIVE_TOLERANCE:g} of the logits' scale {scale:.3g}): the graph does not "
            "compute what the model does, so the export is refused; nothing was written."
        )
    return report


def write_onnx_entry(config_path: Path, model, tokenizer, names: list[str], report: ExportReport) -> None:
    """Add to config.json what the torch-free predictor needs: the graph's file and inputs, the padding id, the
    longest input, and what the verification measured."""
    config = json.loads(config_path.read_text())
    config["onnx"] = {
        "file": "model.onnx",
        "inputs": names,
        "pad_token_id": tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
        "max_length": max_length(model, tokenizer),
        "verified_max_gap": report.max_gap,
        "verified_scale": report.scale,
    }
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
