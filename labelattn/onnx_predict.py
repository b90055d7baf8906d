"""Classify texts with a folder written by `labelattn export --format onnx`, without torch.

labelattn predict-onnx out/trec-onnx questions.jsonl --output predictions.jsonl
python -m labelattn.onnx_predict out/trec-onnx tickets.csv --text-column body --output p.csv

It imports only onnxruntime, tokenizers, numpy and the standard library, so that a serving image needs no PyTorch:
`pip install onnxruntime tokenizers numpy` and `pip install --no-deps labelattn` (or copy this one file). In Python:

    classifier = OnnxClassifier("out/trec-onnx")
    classifier.probabilities(["how many people live in tokyo ?"])   # (texts, classes), numpy
    classifier.predict(["how many people live in tokyo ?"])         # [{"predicted_label": ..., "prob_<label>": ...}]

DATA is a .jsonl (one JSON object a line), .csv (a header row) or .txt (one text a line; only a line feed ends a
line) file in UTF-8, with or without a byte-order mark. The output (.jsonl or .csv) has `row` (from 0), every input
column, then `predicted_label` (`predicted_labels`, a list, for a multi-label model), `probability`, one
`prob_<label>` per class (or `top_labels` and `top_probabilities` with `--top-k K`), `truncated` and `error`, the
columns `labelattn predict` writes. `error` is null, or says why a row was not classified ("row 7: the text is empty
or only whitespace", "... is an int, not a string", "... is missing"); that row's prediction columns are null and
the other rows are classified as usual. Refused, with no output written: an input column named like an output
column (`row`, `error`, `probability`, `prob_*`, ...), which would be overwritten, and a CSV row with more or fewer
fields than the header. Rows are read, classified in length-sorted batches and written a chunk at a time; the file
appears complete or not at all.
"""

import argparse
import csv
import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

CHUNK_ROWS = 4096  # rows read, classified and written at a time
# The longest CSV cell read: csv's own limit (131,072 characters) refuses a long document. sys.maxsize overflows a C
# long where that is 32 bits (Windows); 2**31 - 1 fits everywhere.
CSV_FIELD_LIMIT = min(sys.maxsize, 2**31 - 1)
# The columns the output adds (and `prob_<label>`): an input column of such a name would be overwritten.
RESULT_COLUMNS = (
    "row",
    "error",
    "predicted_label",
    "predicted_labels",
    "probability",
    "truncated",
    "top_labels",
    "top_probabilities",
)


class OnnxPredictError(ValueError):
    """An export folder, a data file or an option that the ONNX predictor cannot use."""


class OnnxClassifier:
    """An exported classifier: the ONNX graph in ONNX Runtime, the tokenizer, the labels.

    Args:
        folder: a folder written by `labelattn export --format onnx` (model.onnx, tokenizer.json, config.json).
        threads: ONNX Runtime's intra-op threads (default: ONNX Runtime's choice, the physical cores).
    """

    def __init__(self, folder: str | os.PathLike, threads: int | None = None):
        folder = Path(folder)
        config_path = folder / "config.json"
        if not config_path.is_file() or "onnx" not in (config := json.loads(config_path.read_text())):
            raise OnnxPredictError(
                f"{folder} is not a folder written by `labelattn export --format onnx` (no config.json with an "
                "`onnx` entry): export the model first."
            )
        entry = config["onnx"]
        self.labels = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
        self.multi_label = config.get("problem_type") == "multi_label_classification"
        self.inputs = list(entry["inputs"])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(int(entry["max_length"]))
        self.pad_token_id = int(entry["pad_token_id"])
        try:  # here, not at the top: `labelattn --help` lists this command without the onnx extra
            import onnxruntime
        except ImportError as error:
            raise OnnxPredictError("ONNX Runtime is not installed: pip install 'labelattn[onnx]'.") from error
        options = onnxruntime.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        self.session = onnxruntime.InferenceSession(
            str(folder / entry["file"]), options, providers=["CPUExecutionProvider"]
        )

    def logits(self, texts: list[str], batch_size: int = 32) -> tuple[np.ndarray, list[bool]]:
        """The logits `(texts, classes)` (float32, already divided by the model's temperature, if any) and whether
        each text was cut to the longest input the model reads; batches of similar lengths, so that little padding
        is computed."""
        check_batch_size(batch_size, "batch_size")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise OnnxPredictError(f"Text {i} is a {type(text).__name__}, not a string: {text!r:.80}.")
        encodings = self.tokenizer.encode_batch(texts)
        logits = np.empty((len(texts), len(self.labels)), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            logits[rows] = self.session.run(["logits"], self._batch([encodings[i] for i in rows]))[0]
        return logits, [bool(encodings[i].overflowing) for i in range(len(texts))]

    def _batch(self, encodings: list) -> dict[str, np.ndarray]:
        length = max(len(e.ids) for e in encodings)
        arrays = {name: np.zeros((len(encodings), length), dtype=np.int64) for name in self.inputs}
        arrays["input_ids"].fill(self.pad_token_id)
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            arrays["input_ids"][row, :n] = encoding.ids
            arrays["attention_mask"][row, :n] = 1
            if "token_type_ids" in arrays:
                arrays["token_type_ids"][row, :n] = encoding.type_ids
        return arrays

    def probabilities(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """`(texts, classes)`: the softmax of the logits (sigmoid for a multi-label model)."""
        return self._probabilities(self.logits(texts, batch_size)[0])

    def _probabilities(self, logits: np.ndarray) -> np.ndarray:
        if self.multi_label:
            return 1.0 / (1.0 + np.exp(-logits))
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)

    def check_top_k(self, top_k: int, name: str) -> None:
        """Refuse a number of top classes that is not a whole number from 1 to the classes' count."""
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= len(self.labels):
            raise OnnxPredictError(f"{name} {top_k}: give a number of classes from 1 to {len(self.labels)}.")

    def check_threshold(self, threshold: float | None, name: str) -> float:
        """The probability from which a multi-label model predicts a label (0.5 when None); refused for a
        single-label model, which predicts its most probable class whatever the threshold."""
        if threshold is None:
            return 0.5
        if not self.multi_label:
            raise OnnxPredictError(f"{name} applies to multi-label models; this model predicts one class per text.")
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold < 1:
            raise OnnxPredictError(f"{name} {threshold}: give a probability strictly between 0 and 1.")
        return threshold

    def columns(self, top_k: int | None = None) -> list[str]:
        """The names of the prediction columns, in `predict`'s order."""
        chosen = "predicted_labels" if self.multi_label else "predicted_label"
        by_class = ["top_labels", "top_probabilities"] if top_k is not None else [f"prob_{x}" for x in self.labels]
        return [chosen, "probability", *by_class, "truncated"]

    def predict(
        self, texts: list[str], batch_size: int = 32, threshold: float | None = None, top_k: int | None = None
    ) -> list[dict[str, Any]]:
        """One row per text: the predicted label (labels at or above `threshold`, default 0.5, for a multi-label
        model; a single-label model refuses a threshold), its probability, every class's probability (or with
        `top_k` the k most probable classes, as `labelattn predict --top-k` writes them) and whether the text was
        cut."""
        threshold = self.check_threshold(threshold, "threshold")
        if top_k is not None:
            self.check_top_k(top_k, "top_k")
        logits, truncated = self.logits(texts, batch_size)
        probabilities = self._probabilities(logits)
        best_first = np.argsort(-probabilities, axis=1, kind="stable")[:, :top_k] if top_k is not None else None
        rows = []
        for i, (probs, cut) in enumerate(zip(probabilities.tolist(), truncated, strict=True)):
            best = max(range(len(probs)), key=probs.__getitem__)
            if self.multi_label:
                chosen = {
                    "predicted_labels": [label for label, p in zip(self.labels, probs, strict=True) if p >= threshold]
                }
            else:
                chosen = {"predicted_label": self.labels[best]}
            if best_first is None:
                by_class = {f"prob_{label}": p for label, p in zip(self.labels, probs, strict=True)}
            else:
                top = best_first[i].tolist()
                by_class = {"top_labels": [self.labels[c] for c in top], "top_probabilities": [probs[c] for c in top]}
            rows.append({**chosen, "probability": probs[best], **by_class, "truncated": cut})
        return rows


def check_batch_size(batch_size: int, name: str) -> None:
    """Refuse a batch size that is not a whole number from 1."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise OnnxPredictError(f"{name} {batch_size}: give a number of texts from 1 up.")


def text_problem(text: Any) -> str | None:
    """Why `text` cannot be classified, as the end of "the text ...", in `labelattn predict`'s words; or None.
    `explainers.words.text_problem`'s rule, restated here because this module imports no torch."""
    if text is None:
        return "is missing"
    if not isinstance(text, str):
        kind = type(text).__name__
        return f"is {'an' if kind[0] in 'aeiou' else 'a'} {kind}, not a string"
    if not text.strip():
        return "is empty or only whitespace"
    return None


def read_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The rows of a .jsonl, .csv or .txt file in UTF-8 (a byte-order mark, as Excel writes, is skipped), one dict
    each (a .txt line is `{"text": line}`)."""
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv", ".txt"):
        raise OnnxPredictError(f"{path}: the ONNX predictor reads .jsonl, .csv or .txt files.")
    if suffix == ".csv":
        yield from read_csv(path)
        return
    # Only a line feed ends a line: a lone carriage return inside a text stays in it.
    with path.open(encoding="utf-8-sig", newline="\n") as handle:
        for number, line in enumerate(handle, start=1):
            if suffix == ".txt":
                yield {"text": line.removesuffix("\n").removesuffix("\r")}
                continue
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise OnnxPredictError(f"{path}, line {number}: not JSON ({error.msg}).") from error
            if not isinstance(row, dict):
                raise OnnxPredictError(f"{path}, line {number}: a JSON object is needed, got {type(row).__name__}.")
            yield row


def read_csv(path: Path) -> Iterator[dict[str, str]]:
    """The rows of a CSV file under its header; a row of more or fewer fields than the header, or one that csv
    cannot read, is refused with its line."""
    csv.field_size_limit(CSV_FIELD_LIMIT)
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        try:
            for row in reader:
                # DictReader puts a longer row's extra fields under the key None and fills a shorter one with None.
                if None in row or None in row.values():
                    fields = sum(v is not None for k, v in row.items() if k is not None) + len(row.get(None, ()))
                    raise OnnxPredictError(
                        f"{path}, line {reader.line_num}: {fields} fields where the header has "
                        f"{len(reader.fieldnames)}: quote a field that holds a comma, or fill in the missing ones."
                    )
                yield row
        except csv.Error as error:  # DictReader's line_num is the previous row's until a row is read
            raise OnnxPredictError(f"{path}, line {reader.reader.line_num}: {error}.") from None


def check_columns(data: Path, chunk: list[dict[str, Any]], text_column: str, first_row: int) -> None:
    """Refuse a chunk whose rows all lack the text column (a JSONL row without it is that row's error, "the text
    is missing", as in `labelattn predict`), or with a column that the predictions would overwrite."""
    if not any(text_column in row for row in chunk):
        raise OnnxPredictError(
            f"{data}: rows {first_row}-{first_row + len(chunk) - 1} have no column {text_column!r} (row {first_row} "
            f"has {sorted(chunk[0])}): name the column of the texts with --text-column."
        )
    clash = sorted(c for c in set().union(*chunk) if c in RESULT_COLUMNS or c.startswith("prob_"))
    if clash:
        raise OnnxPredictError(
            f"{data}: the column(s) {clash} would be overwritten by the predictions' columns of the same names: "
            "rename them in the data first."
        )


def chunks(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    chunk = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def predict_file(
    classifier: OnnxClassifier,
    data: str | os.PathLike,
    output: str | os.PathLike,
    *,
    text_column: str = "text",
    batch_size: int = 32,
    threshold: float | None = None,
    top_k: int | None = None,
) -> int:
    """Classify every row of `data` into `output` (.jsonl or .csv, written under a temporary name and renamed when
    complete); returns the number of rows. A row whose text is empty, missing or not a string gets an `error` and
    null predictions."""
    data, output = Path(data), Path(output)
    if output.suffix.lower() not in (".jsonl", ".csv"):
        raise OnnxPredictError(f"--output {output}: end the file name with .jsonl or .csv to pick the format.")
    if not output.parent.is_dir():
        raise OnnxPredictError(f"--output {output}: {output.parent} is not a folder; create it first.")
    if output.exists() and data.exists() and output.resolve() == data.resolve():
        raise OnnxPredictError(f"--output {output} is the input file: choose another output.")
    check_batch_size(batch_size, "batch_size")
    classifier.check_threshold(threshold, "threshold")
    if top_k is not None:
        classifier.check_top_k(top_k, "top_k")
    no_prediction = dict.fromkeys(classifier.columns(top_k))
    temporary = output.with_name(f"{output.name}.tmp-{os.getpid()}")
    count = 0
    try:
        with temporary.open("w", encoding="utf-8", newline="") as handle:
            writer = None
            for chunk in chunks(read_rows(data), CHUNK_ROWS):
                check_columns(data, chunk, text_column, count)
                problems = [text_problem(row.get(text_column)) for row in chunk]
                texts = [row[text_column] for row, problem in zip(chunk, problems, strict=True) if problem is None]
                predictions = iter(classifier.predict(texts, batch_size, threshold, top_k) if texts else [])
                for row, problem in zip(chunk, problems, strict=True):
                    prediction = no_prediction if problem else next(predictions)
                    error = f"row {count}: the text {problem}" if problem else None
                    row = {"row": count, text_column: None, **row, **prediction, "error": error}
                    count += 1
                    if output.suffix.lower() == ".jsonl":
                        handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                        continue
                    if writer is None:
                        writer = csv.DictWriter(handle, fieldnames=list(row))
                        writer.writeheader()
                    writer.writerow({k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in row.items()})
        temporary.replace(output)
    finally:
        temporary.unlink(missing_ok=True)
    return count


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    parser.add_argument("folder", type=Path, help="a folder written by `labelattn export --format onnx`")
    parser.add_argument("data", type=Path, help="a .jsonl, .csv or .txt file of texts")
    parser.add_argument("--output", type=Path, required=True, help="the output file, .jsonl or .csv")
    parser.add_argument("--text-column", default="text", help="column of the texts (default: text)")
    parser.add_argument("--batch-size", type=int, default=32, help="texts per ONNX Runtime call (default 32)")
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime's threads (default: the cores)")
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="multi-label models: the probability from which a label is predicted (default 0.5)",
    )
    parser.add_argument(
        "--top-k",
        type=int,
        metavar="K",
        help="write the K most probable classes (`top_labels`, `top_probabilities`) in place of one `prob_<label>` "
        "column per class, as `labelattn predict --top-k` does",
    )


def run(args: argparse.Namespace) -> int:
    check_batch_size(args.batch_size, "--batch-size")
    if not args.data.is_file():
        raise OnnxPredictError(f"{args.data}: no such file.")
    classifier = OnnxClassifier(args.folder, threads=args.threads)
    # Here, with the options' names; predict_file checks them again, before the output file is opened.
    classifier.check_threshold(args.threshold, "--threshold")
    if args.top_k is not None:
        classifier.check_top_k(args.top_k, "--top-k")
    count = predict_file(
        classifier,
        args.data,
        args.output,
        text_column=args.text_column,
        batch_size=args.batch_size,
        threshold=args.threshold,
        top_k=args.top_k,
    )
    print(f"labelattn predict-onnx: {count} rows; wrote {args.output}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m labelattn.onnx_predict`, for an image without the rest of labelattn's dependencies."""
    parser = argparse.ArgumentParser(prog="python -m labelattn.onnx_predict", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (ValueError, OSError) as error:
        print(f"labelattn predict-onnx: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
