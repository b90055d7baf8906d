"""`labelattn evaluate-explanations MODEL DATA`: how faithful is each explanation method, on many texts?

MODEL is any text classifier (`explainers.load_classifier`); DATA's texts may be pairs (`--text-pair-column`).
Runs every method that the model supports (and the random baseline) on N texts, measures comprehensiveness,
sufficiency and τ-LOO (`explainers.evaluation.faithfulness`), and with `--rationale-column` the plausibility of the
scores against human rationales (token F1, token IOU, AUPRC), and writes `results.md`, `results.json` and `results.png`:
one row per method, with what each method explained (`Explanation.output`). Under `accelerate launch` the texts are
split across the processes (`split_between_processes`) and the rows gathered on the main process, so the same
command runs on one CPU or many GPUs.

The rationale column holds, per row, a list (in CSV, written as JSON): one 0/1 or soft value in [0, 1] per word of
the text as the tokenizer splits it, e.g. `[0, 1, 0]`, or the rationale's words, e.g. `["zebra"]`; `[]` for a text
without one (`explainers.evaluation.rationales`). Every row is checked against the words the model reads before
anything is explained, and the k of the top-k words (the mean rationale size, unless `--rationale-top-k`) is taken
over all the texts, so that it does not depend on the number of processes.
"""

import argparse
import json
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from labelattn.arguments import add_overwrite_argument, add_text_column_argument

DEFAULT_N_TEXTS = 100
COLUMNS = (
    ("comprehensiveness", "comprehensiveness ↑"),
    ("sufficiency", "sufficiency ↓"),
    ("tau_loo", "τ-LOO ↑"),
)
PLAUSIBILITY_COLUMNS = (
    ("token_f1", "token F1 ↑"),
    ("token_iou", "token IOU ↑"),
    ("auprc", "AUPRC ↑"),
)
BASELINE = "random"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="Any text classifier: a local folder or a cached Hub id.")
    parser.add_argument(
        "data",
        help="A built-in data set (trec, trec-fine, bbc-news, icd10-cm), or a CSV / JSONL file / datasets folder.",
    )
    parser.add_argument(
        "--methods",
        default="all",
        help="Comma-separated methods (default: every method that fits the model). The random baseline is always run.",
    )
    parser.add_argument("--n-texts", type=int, default=DEFAULT_N_TEXTS, help="Texts measured (the split's first N).")
    parser.add_argument(
        "--split",
        default="test",
        choices=["train", "validation", "test", "all"],
        help="Split of DATA (a file without splits has 10%% held out as test, stratified by its labels); "
        "'all' reads every row, and needs no label column.",
    )
    add_text_column_argument(parser)
    parser.add_argument(
        "--text-pair-column",
        default=None,
        metavar="NAME",
        help="Column of the second texts of pairs (NLI, paraphrase, question-passage): each text is explained as "
        "the pair (text, text pair), words of both segments.",
    )
    parser.add_argument("--label-column", default="label", help="Label column of a CSV/JSONL file.")
    parser.add_argument(
        "--rationale-column",
        default=None,
        metavar="NAME",
        help="Column of human rationales, to measure plausibility (token F1, token IOU, AUPRC): per row a list "
        "(in CSV, as JSON) of one 0/1 or soft value in [0, 1] per word, e.g. [0, 1, 0], or of the rationale's "
        'words, e.g. ["zebra"]; [] for none.',
    )
    parser.add_argument(
        "--rationale-top-k",
        type=int,
        default=None,
        metavar="K",
        help="Top words compared with the rationales (default: the mean rationale size, as ERASER).",
    )
    parser.add_argument("--output-dir", type=Path, default=None, help="Default: outputs/faithfulness/<model name>.")
    add_overwrite_argument(parser, "the results already in --output-dir")
    parser.add_argument(
        "--percentages",
        default="10,20,30,40,50,60,70,80,90,100",
        help="The k of 'top k%% of the words' averaged over (AOPC), comma-separated, each in (0, 100].",
    )
    parser.add_argument(
        "--removal",
        choices=["replace", "delete"],
        default="replace",
        help="Replace a removed word's tokens by the baseline (padding) token, or delete them.",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="METHOD.NAME=VALUE",
        help="An option of one method, e.g. shap.n_samples=10 or integrated_gradients.n_steps=50 (repeatable).",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="Perturbed inputs per forward pass.")
    parser.add_argument("--explain-batch-size", type=int, default=16, help="Texts per batch of the explainers.")


def run(args: argparse.Namespace) -> int:
    from accelerate.utils import gather_object

    from explainers import get_explainer, load_classifier
    from explainers.evaluation.faithfulness import check_settings
    from labelattn.corpus.process_state import process_state

    accelerator = process_state()
    percentages = list(check_settings(_percentages(args.percentages), args.removal, args.batch_size))
    if args.n_texts < 1:
        raise ValueError(f"--n-texts must be at least 1, got {args.n_texts}.")
    output_dir = args.output_dir or Path("outputs") / "faithfulness" / Path(args.model.rstrip("/")).name
    if (output_dir / "results.json").exists() and not args.overwrite:
        raise FileExistsError(f"{output_dir} already holds results: pass --overwrite or another --output-dir.")
    model, tokenizer = load_classifier(args.model, device=accelerator.device)
    texts = _texts(args)
    methods, skipped = _methods(model, args.methods)
    args.method_options = _method_options(args.option, methods)
    for method, options in args.method_options.items():  # refuse a wrong option before hours of explaining
        get_explainer(model, tokenizer, method).check_options(options)
    rationales = _rationales(args, model, tokenizer, texts)  # checked before any explaining, too

    rows = {"texts": texts, **({"rationales": rationales} if rationales is not None else {})}
    with accelerator.split_between_processes(rows) as shard:
        measured = (
            measure(model, tokenizer, shard["texts"], shard.get("rationales"), methods, percentages, args)
            if shard["texts"]
            else _empty()
        )
    # gather_object concatenates the processes' lists in rank order: the texts come back in their own order.
    gathered = {key: gather_object(value) for key, value in measured.items()}
    if accelerator.is_main_process:
        results = summarize(gathered, methods, skipped, model, _options(percentages, tokenizer, args))
        results.update(
            command="labelattn " + shlex.join(sys.argv[1:]),
            method_options=args.method_options,
            model=args.model,
            data=args.data,
            split=args.split,
            rationale_column=args.rationale_column,
            processes=accelerator.num_processes,
            texts=len(texts),
        )
        write(results, output_dir)
        print(markdown_table(results))
        print(f"Wrote {output_dir}/results.md, results.json and results.png.")
    accelerator.wait_for_everyone()
    return 0


def _options(percentages: list[float], tokenizer, args: argparse.Namespace) -> dict[str, Any]:
    """How the explanations were measured, as `evaluate_faithfulness` records it in its reports' options."""
    from explainers import baseline_token_id
    from explainers.evaluation.rationales import RATIONALE_THRESHOLD

    options = {"percentages": percentages, "removal": args.removal, "baseline_token_id": baseline_token_id(tokenizer)}
    if args.rationale_column is not None:
        options.update(rationale_top_k=args.rationale_top_k, rationale_threshold=RATIONALE_THRESHOLD)
    return options


def _percentages(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--percentages {text!r}: give numbers separated by commas, e.g. 10,20,50.") from None
    return [int(v) if v.is_integer() else v for v in values]


def _texts(args: argparse.Namespace) -> list[str] | list[tuple[str, str]]:
    """The first --n-texts texts (or pairs) of the split; `all` reads every row of DATA, unsplit and without its
    labels."""
    texts = _column(args, args.text_column)
    if args.text_pair_column is not None:
        texts = list(zip(texts, _column(args, args.text_pair_column), strict=True))
    if len(texts) < args.n_texts:
        print(f"{args.data} ({args.split}) holds {len(texts)} texts: measuring all of them.", file=sys.stderr)
    return texts[: args.n_texts]


def _column(args: argparse.Namespace, column: str) -> list[str]:
    """The texts of `column` in the split, checked as the training data's are. A split held out of a file is
    chosen by the rows' ids and labels alone, so the text and the text-pair columns give the same rows, in order."""
    from labelattn.data.reading import load_data, load_texts

    if args.split == "all":
        return load_texts(args.data, text_column=column)
    return list(load_data(args.data, text_column=column, label_column=args.label_column).splits[args.split]["text"])


def _rationales(args: argparse.Namespace, model, tokenizer, texts: list) -> list[list[bool]] | None:
    """The rationale mask of each text measured (None without --rationale-column), checked against the words the
    model reads; sets `args.rationale_top_k` to the k of all the texts when it is not given."""
    from explainers import token_limit
    from explainers.checks import check_count
    from explainers.evaluation.rationales import default_top_k, rationale_mask
    from explainers.words import tokenize

    if args.rationale_column is None:
        if args.rationale_top_k is not None:
            raise ValueError("--rationale-top-k is the k of the plausibility measures: give a --rationale-column too.")
        return None
    if args.rationale_top_k is not None:
        check_count(args.rationale_top_k, "--rationale-top-k", "top words", error=ValueError)
    rows = _rationale_rows(args)[: len(texts)]
    items = tokenize(tokenizer, texts, token_limit(model, tokenizer))
    masks = [
        rationale_mask(_parsed_rationale(where, value), item.words, where, item.truncated)
        for (where, value), item in zip(rows, items, strict=True)
    ]
    if args.rationale_top_k is None:
        args.rationale_top_k = default_top_k(masks)
    return masks


def _rationale_rows(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """`(where, value)` of the rationale column for the rows that `_texts` reads, in its order: every row for
    `all` (the splits of a datasets folder in their order), else the split's rows, by their ids in the part of DATA
    that `labelattn.data.reading.load_data` took them from (the split itself, or the training rows it was held out
    of)."""
    import datasets

    from labelattn.data.builtin import builtin_named
    from labelattn.data.reading import load_data
    from labelattn.data.records import SPLITS
    from labelattn.data.tables import load_table, require_column

    if builtin_named(args.data) is not None:
        raise ValueError(
            f"The built-in data set {args.data!r} has no rationales: --rationale-column needs a CSV / JSONL file or "
            "a datasets folder with such a column."
        )
    table, row_name = load_table(Path(args.data))
    whole = isinstance(table, datasets.Dataset)
    parts = {"train": table} if whole else {name: table[name] for name in SPLITS if name in table}
    if args.split == "all":
        chosen = [(name, range(len(part))) for name, part in parts.items()]
    else:
        split = load_data(args.data, text_column=args.text_column, label_column=args.label_column).splits[args.split]
        chosen = [(args.split if args.split in parts else "train", split["id"])]
    rows = []
    for name, ids in chosen:
        origin = args.data if whole else f"{args.data} [{name}]"
        require_column(parts[name], origin, "rationale", args.rationale_column)
        values = parts[name][args.rationale_column]
        rows += [(f"{origin}, {row_name(i)}", values[i]) for i in ids]
    return rows


def _parsed_rationale(where: str, value: Any) -> Any:
    """A rationale cell as a list: CSV holds it as JSON text, JSONL and datasets folders as a list already."""
    from explainers.evaluation.rationales import RationaleError

    if value is None:
        raise RationaleError(f"{where}: the rationale is missing; write [] for a text without rationale words.")
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise RationaleError(
            f"{where}: the rationale {value!r} is not a JSON list: write e.g. [0, 1, 0] (one value per word) or "
            '["zebra"] (the rationale\'s words).'
        ) from None


def _methods(model, asked: str) -> tuple[list[str], dict[str, str]]:
    """The methods to run (the random baseline last) and, for those the model cannot use, why."""
    from explainers import supported_methods

    supported = supported_methods(model)
    if BASELINE not in supported:
        raise ValueError("The random baseline is not registered in explainers.METHODS: the table needs it.")
    if asked == "all":
        names = [name for name in supported if name != BASELINE]
    else:
        names = [name.strip() for name in asked.split(",") if name.strip() and name.strip() != BASELINE]
        unknown = [name for name in names if name not in supported]
        if unknown:
            raise ValueError(f"Unknown method(s) {unknown}: choose among {sorted(supported)}.")
    skipped = {name: supported[name] for name in names if supported[name] is not None}
    if asked != "all" and skipped:
        raise ValueError(f"Method(s) that this model cannot use: {skipped}")
    return [*(name for name in names if name not in skipped), BASELINE], skipped


def _method_options(given: list[str], methods: list[str]) -> dict[str, dict[str, Any]]:
    """`["shap.n_samples=10", ...]` as `{"shap": {"n_samples": 10}}`: the method split off the key, the value
    parsed as every command parses options (`explainers.parse_options`)."""
    from explainers import parse_options

    options: dict[str, dict[str, Any]] = {}
    for item in given:
        method, dot, name = item.partition("=")[0].partition(".")
        if not (dot and name and "=" in item):
            raise ValueError(f"--option {item!r}: write METHOD.NAME=VALUE, e.g. shap.n_samples=10.")
        if method not in methods:
            raise ValueError(f"--option {item!r}: {method!r} is not among the methods run {methods}.")
        options.setdefault(method, {}).update(parse_options([item.partition(".")[2]]))
    return options


def _empty() -> dict[str, list]:
    return {"per_text": [], "timings": [], "agreement": []}


def measure(
    model, tokenizer, texts: list, rationales: list[list[bool]] | None, methods: list[str], percentages, args
) -> dict[str, list]:
    """Explain `texts` by every method and measure the explanations (against `rationales` too, if any); lists of
    plain records, ready to gather."""
    from explainers import explain
    from explainers.evaluation.faithfulness import evaluate_faithfulness, rank_agreement

    explanations, timings = {}, []
    for method in methods:
        start = time.perf_counter()
        options = args.method_options.get(method, {})
        explanations[method] = explain(
            model, tokenizer, texts, method=method, batch_size=args.explain_batch_size, **options
        )
        timings.append({"method": method, "seconds": time.perf_counter() - start, "texts": len(texts)})
    reports = evaluate_faithfulness(
        model,
        tokenizer,
        explanations,
        percentages=percentages,
        removal=args.removal,
        batch_size=args.batch_size,
        rationales=rationales,
        rationale_top_k=args.rationale_top_k if rationales is not None else None,
    )
    per_text = [row for report in reports.values() for row in report.per_text]
    agreement = []
    for i, first in enumerate(methods):
        for second in methods[i + 1 :]:
            for row in rank_agreement(explanations[first], explanations[second])["per_text"]:
                agreement.append({"first": first, "second": second, **row})
    return {"per_text": per_text, "timings": timings, "agreement": agreement}


def summarize(gathered: dict[str, list], methods: list[str], skipped: dict[str, str], model, options) -> dict[str, Any]:
    """The table (one row per method), the same by predicted class, and the methods' mean rank agreement."""
    from explainers.evaluation.faithfulness import FaithfulnessReport, explained_output, mean_defined
    from explainers.loading import label_names

    labels = label_names(model.config)
    by_method = defaultdict(list)
    for row in gathered["per_text"]:
        by_method[row.method].append(row)
    seconds, counted = defaultdict(float), defaultdict(int)
    for timing in gathered["timings"]:
        seconds[timing["method"]] += timing["seconds"]
        counted[timing["method"]] += timing["texts"]
    rows, by_class, per_text = [], {}, {}
    for method in methods:
        report = FaithfulnessReport(method, by_method[method], {**options, **explained_output(by_method[method])})
        rows.append(
            {
                "method": method,
                "output": report.options.get("output"),
                **report.summary(),
                "seconds_per_text": seconds[method] / counted[method] if counted[method] else None,
            }
        )
        by_class[method] = report.by_class(labels)
        per_text[method] = report.to_dict()["per_text"]
    agreement: dict[str, dict[str, dict[str, float | None]]] = {"spearman": {}, "kendall": {}}
    for kind, table in agreement.items():
        for first in methods:
            table[first] = {}
            for second in methods:
                pair = {(first, second), (second, first)}
                values = [row[kind] for row in gathered["agreement"] if (row["first"], row["second"]) in pair]
                table[first][second] = 1.0 if first == second else mean_defined(values)
    return {
        "options": options,
        "methods": methods,
        "skipped": skipped,
        "labels": labels,
        "rows": rows,
        "by_class": by_class,
        "agreement": agreement,
        "per_text": per_text,
    }


def _cell(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _name(method: str) -> str:
    return f"{method} (baseline)" if method == BASELINE else method


def _measured_columns(results: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The measures of the results: faithfulness, and plausibility when rationales were given."""
    return COLUMNS + (PLAUSIBILITY_COLUMNS if "rationale_top_k" in results["options"] else ())


def markdown_table(results: dict[str, Any]) -> str:
    """The main table: one row per method, the random baseline marked, with the number each method explained."""
    header = ["method", "explains", *(title for _, title in COLUMNS), "seconds / text", "texts"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in results["rows"]:
        output = row["output"] if isinstance(row["output"], str | None) else ", ".join(row["output"])
        cells = [_name(row["method"]), output or "—", *(_cell(row[key]) for key, _ in COLUMNS)]
        cells += [_cell(row["seconds_per_text"], 4), str(row["texts"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plausibility_table(results: dict[str, Any]) -> str:
    """One row per method: token F1, token IOU and AUPRC against the rationales, and the texts that had one."""
    header = ["method", *(title for _, title in PLAUSIBILITY_COLUMNS), "texts with a rationale", "with AUPRC"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in results["rows"]:
        cells = [_name(row["method"]), *(_cell(row[key]) for key, _ in PLAUSIBILITY_COLUMNS)]
        cells += [str(row["rationale_texts"]), str(row["auprc_texts"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    options = results["options"]
    ks = ", ".join(f"{k}" for k in options["percentages"])
    parts = [
        f"# Faithfulness of the explanations of {results['model']}",
        "",
        f"Made by `{results['command']}` ({results['processes']} process(es)).",
        "",
        f"{results['texts']} texts of {results['data']} ({results['split']} split); top-k% words with "
        f"k ∈ {{{ks}}}%, removed by {options['removal']} (baseline token id {options['baseline_token_id']}). "
        "Each method explains the predicted class; *explains* is the number of the model its scores explain "
        "(`Explanation.output`, — where the method does not say), while the measures are on the probability of "
        "that class, as ERASER's. Seconds / text is explaining time, summed over processes.",
        "",
        markdown_table(results),
        "",
    ]
    if "rationale_top_k" in options:
        parts += [
            f"## Plausibility against the human rationales of `{results['rationale_column']}`",
            "",
            f"The top k = {options['rationale_top_k']} words of each text (the mean rationale size, unless "
            f"--rationale-top-k) against its rationale (soft values ≥ {options['rationale_threshold']} count); a text "
            "without a rationale word is left out, and AUPRC also leaves out the texts whose every word is in it.",
            "",
            plausibility_table(results),
            "",
        ]
    if results["method_options"]:
        parts += [f"Options other than the defaults: {json.dumps(results['method_options'])}.", ""]
    if results["skipped"]:
        parts += ["Not applicable to this model:", ""]
        parts += [f"- {name}: {why}" for name, why in results["skipped"].items()]
        parts.append("")
    parts += ["## Comprehensiveness by predicted class (texts)", ""]
    header = ["method", *results["labels"]]
    parts += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method, classes in results["by_class"].items():
        cells = [f"{_cell(c['comprehensiveness'])} ({c['texts']})" for c in classes.values()]
        parts.append("| " + " | ".join([method, *cells]) + " |")
    parts += ["", "## Rank agreement between methods (mean Spearman ρ of the word scores)", ""]
    methods = results["methods"]
    parts += ["| | " + " | ".join(methods) + " |", "|" + "---|" * (len(methods) + 1)]
    for first in methods:
        cells = [_cell(results["agreement"]["spearman"][first][second], 2) for second in methods]
        parts.append("| " + " | ".join([first, *cells]) + " |")
    return "\n".join(parts) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    """One horizontal bar per method for each metric; the random baseline grey, with a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, columns = results["rows"], _measured_columns(results)
    names = [row["method"] for row in rows]
    figure, axes = plt.subplots(1, len(columns), figsize=(4 * len(columns), 0.45 * len(rows) + 1.6), sharey=True)
    for ax, (key, title) in zip(axes, columns, strict=True):
        values = [row[key] if row[key] is not None else 0.0 for row in rows]
        colours = ["#9ca3af" if name == BASELINE else "#2563eb" for name in names]
        bars = ax.barh(range(len(rows)), values, color=colours)
        ax.bar_label(bars, labels=[_cell(row[key]) for row in rows], padding=2, fontsize=8)
        ax.margins(x=0.2)
        baseline = next(row[key] for row in rows if row["method"] == BASELINE)
        if baseline is not None:
            ax.axvline(baseline, color="#6b7280", linestyle="--", linewidth=1)
        ax.axvline(0, color="black", linewidth=0.6)
        ax.set_title(title)
    axes[0].set_yticks(range(len(rows)), names)
    axes[0].invert_yaxis()
    figure.suptitle(f"{Path(str(results['model'])).name}: {results['texts']} texts of {results['data']}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write(results: dict[str, Any], output_dir: Path) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
    (output_dir / "results.md").write_text(markdown(results), encoding="utf-8")
    plot(results, output_dir / "results.png")
