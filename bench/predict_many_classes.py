"""`labelattn predict` at ICD-10-CM's 1,918 classes: rows/s with one `prob_<label>` column per class and with
`--top-k 5`, for the head's scorers and mean pooling, and the model's forward pass alone beside them.

    .venv/bin/python bench/predict_many_classes.py                  # 5,000 rows, 2 rounds: about 5 minutes
    .venv/bin/python bench/predict_many_classes.py --rows 2000 --rounds 1

The models are untrained (the cost does not depend on the weights) and shaped as `labelattn train` made them for
ICD-10-CM before the many-class defaults (7 December 2026): the embedding backbone, 384 wide, token context 3, 4
heads with the label projections, MiniLM's tokenizer. The texts are every
k-th ICD-10-CM title (every chapter), as JSONL. Each figure is one `labelattn predict` in a fresh process, as a user
runs it (start-up included); the systems are interleaved (A, B, C, A, B, C) and the median of the rounds reported.
The forward pass alone is timed in this process (two threads, length-sorted batches of 32, as `predict` batches).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
MODELS = {
    "label attention, per_class scorer": dict(scorer="per_class"),
    "label attention, shared scorer": dict(scorer="shared"),
    "mean pooling": dict(pooling="mean"),
}


def build(work: Path, rows: int) -> tuple[Path, dict[str, Path]]:
    from transformers import AutoTokenizer

    from configuration_labelattn import LabelAttnConfig
    from labelattn import minilm_path
    from labelattn.data.builtin import BUILTIN
    from modeling_labelattn import LabelAttnForSequenceClassification

    raw = BUILTIN["icd10-cm"][0]()
    classes = sorted(set(raw.labels))
    data = work / "texts.jsonl"
    spread = raw.texts[:: max(1, len(raw.texts) // rows)][:rows]
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in spread))
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    folders = {}
    for name, options in MODELS.items():
        torch.manual_seed(0)
        config = LabelAttnConfig(
            id2label=dict(enumerate(classes)), hidden_size=384, num_attention_heads=4, token_context_width=3, **options
        )
        folders[name] = work / re.sub(r"\W+", "-", name)
        LabelAttnForSequenceClassification(config).save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    return data, folders


def predict_rows_per_s(folder: Path, data: Path, output: Path, options: list[str]) -> float:
    command = [sys.executable, "-m", "labelattn", "predict", str(folder), str(data), "--output", str(output)]
    done = subprocess.run(
        [*command, "--overwrite", "--no-progress", *options], env=ENV, capture_output=True, text=True, check=True
    )
    return float(re.search(r"\(([\d.]+) rows/s", done.stdout + done.stderr).group(1))


def forward_rows_per_s(folder: Path, data: Path) -> float:
    from transformers import AutoTokenizer

    from modeling_labelattn import LabelAttnForSequenceClassification

    texts = sorted((json.loads(line)["text"] for line in data.read_text().splitlines()), key=len)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    batches = [tokenizer(texts[i : i + 32], padding=True, return_tensors="pt") for i in range(0, len(texts), 32)]
    model = LabelAttnForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        start = time.perf_counter()
        for batch in batches:
            model(**batch)
    return len(texts) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(2)
    figures: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="predict_many_classes-") as work:
        data, folders = build(Path(work), args.rows)
        for _ in range(args.rounds):
            for name, folder in folders.items():
                output = Path(work) / "out.parquet"
                figures.setdefault((name, "forward pass alone"), []).append(forward_rows_per_s(folder, data))
                for mode, options in (("every class's column", []), ("--top-k 5", ["--top-k", "5"])):
                    figures.setdefault((name, mode), []).append(predict_rows_per_s(folder, data, output, options))
    base = statistics.median(figures["mean pooling", "--top-k 5"])
    print(f"{args.rows} ICD-10-CM titles, 1,918 classes, median of {args.rounds} round(s)\n")
    print("| model | what | rows/s | × mean pooling's `--top-k 5` |\n|---|---|---:|---:|")
    for (name, mode), values in figures.items():
        print(f"| {name} | {mode} | {statistics.median(values):,.0f} | {statistics.median(values) / base:.2f} |")


if __name__ == "__main__":
    main()
