"""The GPU check: what labelattn does on one GPU, in under 8 minutes, ready for the first time a GPU is at hand.

    .venv/bin/python bench/gpu_check.py                       # on a GPU; writes outputs/gpu_check.json
    .venv/bin/python bench/gpu_check.py --tiny --output x.json  # the same steps at toy size on a CPU (< 60 s)

The steps, each timed, with the peak GPU memory it reached:
1. `labelattn train` on TREC, both backbones (embedding; MiniLM, or a 2-layer BERT with --tiny), in bf16 and fp16
   mixed precision, a few hundred steps each: the loss falls (the final model's cross-entropy on training rows is
   below 0.9 × ln(classes), where an untrained model sits), and a checkpoint resumes identically (the run's folder
   copied, its last checkpoint and `finished` mark removed, `--resume` from the one before: the same final weights).
2. Integrated Gradients and SHAP on 200 TREC texts with each bf16-trained model, at GPU-sized batches: texts/s,
   passes per text, and the share of texts whose completeness gap is within 1% (`|delta| ≤ 0.01 · |F(x) − F(x′)|`).
3. `labelattn predict` (20,000 rows) and `labelattn explain --data` (label attention, 2,000 rows) rows/s on
   ICD-10-CM texts, with a model of its 1,918 classes (untrained: the cost does not depend on the weights).
It writes one JSON (every figure, the device, the versions) and prints a table; it exits 1 when a check fails. A
step that raises (out of GPU memory, say) is recorded as failed, with its error, and the later steps still run; the
JSON is rewritten after every step, so a killed run keeps the figures of the steps it finished. The suite runs
`--tiny` (tests/test_gpu_check.py), so the script cannot rot while no GPU is at hand.
"""

import argparse
import gc
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
BUDGET_SECONDS = {"full": 8 * 60, "tiny": 60}


@dataclass(frozen=True)
class Size:
    train_rows: int | None  # None: all of TREC
    epochs: int
    batch_size: int
    checkpoint_every: int
    model_options: tuple[str, ...]  # for `labelattn train`, beside --backbone
    explain_texts: int
    explain_batch: int
    shap_per_eval: int
    corpus_rows: int  # predicted
    explained_rows: int  # explained (label attention writes a row of words and scores per text: CPU-bound)
    corpus_hidden: int
    corpus_batch: int


SIZES = {
    # TREC's 4,305 training rows in batches of 32: 135 steps an epoch, 270 in all; checkpoints at 100, 200, 270.
    "full": Size(
        train_rows=None,
        epochs=2,
        batch_size=32,
        checkpoint_every=100,
        model_options=(),
        explain_texts=200,
        explain_batch=64,
        shap_per_eval=512,
        corpus_rows=20_000,
        explained_rows=2_000,
        corpus_hidden=128,
        corpus_batch=256,
    ),
    # 192 training rows in batches of 16: 12 steps an epoch, 60 in all; checkpoints at 10, ..., 50, 60.
    "tiny": Size(
        train_rows=240,
        epochs=5,
        batch_size=16,
        checkpoint_every=10,
        model_options=("--hidden-size", "32", "--embeddings", "random", "--learning-rate", "2e-2"),
        explain_texts=6,
        explain_batch=8,
        shap_per_eval=128,
        corpus_rows=64,
        explained_rows=64,
        corpus_hidden=32,
        corpus_batch=32,
    ),
}


@dataclass
class Step:
    name: str
    seconds: float
    peak_gpu_mb: float | None
    figures: dict
    ok: bool
    error: dict | None = None  # a step that raised: {"type", "message", "traceback": its last lines}


def error_of(exc: Exception) -> dict:
    lines = "".join(traceback.format_exception(exc)).splitlines()
    return {"type": type(exc).__name__, "message": str(exc), "traceback": lines[-10:]}


def write_atomically(path: Path, text: str) -> None:
    """A temporary file in the same folder, renamed over `path`: a kill mid-write leaves the previous JSON whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as file:
        file.write(text)
    os.replace(file.name, path)


class Checker:
    """Runs the steps in this process, times them, records the peak GPU memory of each, and rewrites the JSON at
    `output` after each: the GPU session is paid for once; a late failure or a kill must not lose earlier figures."""

    def __init__(self, mode: str, work: Path, output: Path):
        self.mode, self.size, self.work, self.output = mode, SIZES[mode], work, output
        self.cuda = torch.cuda.is_available()
        self.steps: list[Step] = []
        self.start = time.perf_counter()

    def step(self, name: str, run: Callable[[], tuple[dict, bool]]) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        error = None
        try:
            figures, ok = run()
        except Exception as exc:  # recorded, so that the later steps still run (KeyboardInterrupt still stops them)
            figures, ok, error = {}, False, error_of(exc)
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() / 2**20 if self.cuda else None
        if error is not None and self.cuda:
            # Outside the `except`, where the traceback's frames (and the tensors they hold) are gone: hand the
            # failed step's cached blocks back, so that an out-of-memory error does not starve the next step.
            gc.collect()
            torch.cuda.empty_cache()
        self.steps.append(Step(name, seconds, peak, figures, ok, error))
        self.write(complete=False)
        outcome = "ok" if ok else "FAILED" + (f" ({error['type']}: {error['message']})" if error else "")
        print(f"gpu_check: {name}: {outcome} in {seconds:.1f} s {figures}", file=sys.stderr)

    def report(self, complete: bool) -> dict:
        seconds = time.perf_counter() - self.start
        report = {
            "mode": self.mode,
            "complete": complete,  # False: the run stopped (or is still going) before its last step
            "device": torch.cuda.get_device_name() if self.cuda else platform.processor() or platform.machine(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "bf16_supported": torch.cuda.is_bf16_supported() if self.cuda else None,
            "seconds": round(seconds, 1),
            "budget_seconds": BUDGET_SECONDS[self.mode],
            "sizes": asdict(self.size),
            "steps": [asdict(step) for step in self.steps],
        }
        report["within_budget"] = seconds <= report["budget_seconds"]  # wall time: a shared CPU may miss it, a GPU not
        report["failed"] = [step.name for step in self.steps if not step.ok]
        report["ok"] = not report["failed"]
        return report

    def write(self, complete: bool) -> dict:
        report = self.report(complete)
        write_atomically(self.output, json.dumps(report, indent=2) + "\n")
        return report


def cli(*argv) -> None:
    """One `labelattn` command in this process, with Accelerate's state reset first (each run sets its own mixed
    precision); raises on a non-zero exit."""
    from accelerate.state import AcceleratorState

    from labelattn.cli import main

    AcceleratorState._reset_state(reset_partial_state=True)
    code = main([str(a) for a in argv])
    if code != 0:
        raise RuntimeError(f"labelattn {argv[0]} exited with {code}")


def trec_data(checker: Checker) -> str:
    """`trec`, or a CSV of its first rows at toy size."""
    if checker.size.train_rows is None:
        return "trec"
    from labelattn.data.builtin import BUILTIN

    raw = BUILTIN["trec"][0]()
    path = checker.work / "trec.csv"
    rows = [json.dumps(t) + "," + json.dumps(str(label)) for t, label in zip(raw.texts, raw.labels, strict=True)]
    path.write_text("text,label\n" + "\n".join(rows[: checker.size.train_rows]) + "\n")
    return str(path)


def tiny_encoder(checker: Checker) -> str:
    """A 2-layer BERT of width 32 with the MiniLM tokenizer, saved as a local encoder folder."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from labelattn import minilm_path

    folder = checker.work / "tiny-bert"
    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    BertModel(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(folder)
    return str(folder)


def training_loss(folder: Path, data: str, rows: int = 512) -> tuple[float, int]:
    """Mean cross-entropy of the saved model on the first `rows` training rows, and the number of classes."""
    from explainers import load_classifier, predict
    from labelattn.data.reading import load_data

    model, tokenizer = load_classifier(folder, device="cuda" if torch.cuda.is_available() else None)
    train = load_data(data).splits["train"]
    texts, labels = train["text"][:rows], train["label"][:rows]
    labels = [model.config.label2id[label] if isinstance(label, str) else label for label in labels]
    probabilities = predict(model, tokenizer, texts, batch_size=128).probabilities
    picked = probabilities[torch.arange(len(labels)), torch.tensor(labels)]
    return float(-picked.clamp_min(1e-12).log().mean()), model.config.num_labels


def max_weight_gap(a: Path, b: Path) -> tuple[float, float]:
    """The largest absolute difference between two saved models' weights, and the largest weight."""
    from safetensors.torch import load_file

    first, second = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    gap = max(float((first[k].float() - second[k].float()).abs().max()) for k in first)
    return gap, max(float(v.float().abs().max()) for v in first.values())


def train_and_resume(checker: Checker, backbone: str, precision: str, data: str) -> Path:
    size = checker.size
    out = checker.work / f"{Path(backbone).name}-{precision}"
    common = ["--data", data, "--backbone", backbone, "--mixed-precision", precision, "--seed", "0"]
    common += ["--epochs", size.epochs, "--batch-size", size.batch_size, "--checkpoint-every", size.checkpoint_every]
    common += list(size.model_options)

    def train():
        start = time.perf_counter()
        cli("train", *common, "--output-dir", out)
        seconds = time.perf_counter() - start
        loss, classes = training_loss(out, data)
        figures = {
            "seconds": round(seconds, 1),
            "train_loss": round(loss, 4),
            "ln_classes": round(math.log(classes), 4),
        }
        return figures, loss < 0.9 * math.log(classes)

    def resume():
        copy = checker.work / f"{out.name}-resumed"
        shutil.copytree(out, copy)
        kept = sorted((copy / "checkpoints").glob("checkpoint_*"), key=lambda p: int(p.name.split("_")[1]))
        shutil.rmtree(kept[-1])  # the final state: the resumed run must make it again
        (copy / "checkpoints" / "finished").unlink()
        cli("train", *common, "--output-dir", copy, "--resume")
        gap, scale = max_weight_gap(out, copy)
        # Bit-identical on a CPU; a GPU's reductions may differ in the last bits.
        bound = 0.0 if not checker.cuda else 1e-4 * scale
        return {"resumed_from_step": int(kept[-2].name.split("_")[1]), "max_weight_gap": gap}, gap <= bound

    label = f"train {Path(backbone).name} {precision}"
    checker.step(label, train)
    checker.step(f"{label}: resume", resume)
    return out


def passes_of(explanation) -> int:
    """Forward passes the method spent on a text: Integrated Gradients reports them; SHAP's orderings each cost one
    pass per word, less one (the all-absent text is shared)."""
    if "passes" in explanation.extras:
        return explanation.extras["passes"]
    return explanation.extras["n_samples"] * max(len(explanation.words) - 1, 1)


def completeness_gap(explanation) -> float:
    """`Σ scores − (F(x) − F(x′))`: Integrated Gradients' delta; computed for SHAP, exact by construction."""
    if explanation.delta is not None:
        return explanation.delta
    return sum(explanation.scores) - (explanation.score - explanation.baseline_score)


def explain_speed(checker: Checker, folder: Path, name: str) -> None:
    from explainers import explain, load_classifier
    from labelattn.data.builtin import BUILTIN

    texts = BUILTIN["trec"][0]().texts[-checker.size.explain_texts :]
    runs = {
        "integrated_gradients": dict(batch_size=checker.size.explain_batch),
        "shap": dict(batch_size=checker.size.explain_batch, perturbations_per_eval=checker.size.shap_per_eval),
    }
    for method, options in runs.items():

        def run(method=method, options=options):
            # Loaded in the step, untimed: a training that failed fails these steps, not the whole check.
            model, tokenizer = load_classifier(folder, device="cuda" if checker.cuda else None)
            start = time.perf_counter()
            explanations = explain(model, tokenizer, texts, method=method, **options)
            seconds = time.perf_counter() - start
            passes = [passes_of(e) for e in explanations]
            within = [abs(completeness_gap(e)) <= 0.01 * abs(e.score - e.baseline_score) + 1e-6 for e in explanations]
            figures = {
                "texts_per_s": round(len(texts) / seconds, 1),
                "passes_per_text": round(sum(passes) / len(passes), 1),
                "share_within_1pct": sum(within) / len(within),
            }
            return figures, all(within)

        checker.step(f"{method} {name}", run)


def corpus_speed(checker: Checker) -> None:
    """`labelattn predict` and `explain --data` rows/s on ICD-10-CM texts, with a model of all its classes."""
    from transformers import AutoTokenizer

    from configuration_labelattn import LabelAttnConfig
    from labelattn import minilm_path
    from labelattn.data.builtin import BUILTIN
    from modeling_labelattn import LabelAttnForSequenceClassification

    raw = BUILTIN["icd10-cm"][0]()
    classes = sorted(set(raw.labels))
    torch.manual_seed(0)
    config = LabelAttnConfig(
        id2label=dict(enumerate(classes)), hidden_size=checker.size.corpus_hidden, token_context_width=3
    )
    folder = checker.work / "icd10-cm-model"
    LabelAttnForSequenceClassification(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(folder)
    batch = str(checker.size.corpus_batch)
    commands = {
        "predict": (["predict", folder], checker.size.corpus_rows, ["--batch-size", batch]),
        "explain --data label_attention": (
            ["explain", folder, "--data"],
            checker.size.explained_rows,
            ["--method", "label_attention"],
        ),
    }
    for name, (argv, rows, options) in commands.items():
        data = checker.work / f"icd10-cm-{rows}.jsonl"
        spread = raw.texts[:: max(1, len(raw.texts) // rows)][:rows]  # every chapter, not the first codes only
        data.write_text("".join(json.dumps({"text": t}) + "\n" for t in spread))

        def run(argv=argv, data=data, options=options, rows=rows, name=name):
            output = checker.work / f"{name.split()[0]}.parquet"
            start = time.perf_counter()
            cli(*argv, data, *options, "--output", output, "--no-progress")
            seconds = time.perf_counter() - start
            return {"rows": rows, "classes": len(classes), "rows_per_s": round(rows / seconds, 1)}, output.exists()

        checker.step(f"{name} icd10-cm", run)


def table(report: dict) -> str:
    lines = [f"{'step':<42} {'ok':<4} {'s':>7} {'peak MB':>8}  figures"]
    for step in report["steps"]:
        peak = f"{step['peak_gpu_mb']:.0f}" if step["peak_gpu_mb"] is not None else "-"
        ok = "yes" if step["ok"] else "NO"
        lines.append(f"{step['name']:<42} {ok:<4} {step['seconds']:>7.1f} {peak:>8}  {step['figures']}")
    budget = f"budget {report['budget_seconds']} s: {'met' if report['within_budget'] else 'MISSED'}"
    lines.append(f"total {report['seconds']:.0f} s ({budget}); every check ok: {report['ok']}")
    for step in report["steps"]:
        if step["error"] is not None:
            lines.append(f"{step['name']} raised {step['error']['type']}: {step['error']['message']}")
    if report["failed"]:
        lines.append(f"failed: {', '.join(report['failed'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="toy sizes, on a CPU: the suite's run")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "outputs" / "gpu_check.json")
    args = parser.parse_args(argv)
    mode = "tiny" if args.tiny else "full"
    if mode == "full" and not torch.cuda.is_available():
        parser.error("no GPU is visible (torch.cuda.is_available() is False): run with --tiny on a CPU.")
    if mode == "tiny":
        torch.set_num_threads(1)  # toy models: one thread is faster than two on a shared machine
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as work:
        checker = Checker(mode, Path(work), args.output)
        data = trec_data(checker)
        encoder = "minilm" if mode == "full" else tiny_encoder(checker)
        trained = {}
        for backbone in ("embedding", encoder):
            for precision in ("bf16", "fp16"):
                trained[backbone, precision] = train_and_resume(checker, backbone, precision, data)
        for backbone in ("embedding", encoder):
            explain_speed(checker, trained[backbone, "bf16"], Path(backbone).name)
        corpus_speed(checker)
    report = checker.write(complete=True)
    print(table(report))
    print(f"wrote {args.output}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
