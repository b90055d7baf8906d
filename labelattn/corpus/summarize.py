"""`labelattn summarize EXPLANATIONS`: across a corpus, the words that push texts towards each class.

labelattn summarize out/tickets.parquet                 # writes out/tickets.parquet.summary/
labelattn summarize out/tickets.jsonl --top 20 --min-texts 10

For each class, over the rows explained for it (its predicted texts, or every text with --all-targets), each
word (lower-cased; words without a letter or digit left out) gets:
  push     = the sum of its scores / the class's texts: how much it moves an average text towards the class;
             both how often the word occurs and how strongly it pushes (ranked by this, highest first)
  mean     = its mean signed score where it occurs (how strongly, when it is there)
  count    = its occurrences; texts = the class's texts holding it, and share = texts / the class's texts
Written as summary.md, summary.csv (every word of every class) and summary.png. However many classes there are,
both stay readable: the classes with the most texts get a table each in summary.md (--tables) and a bar chart in
summary.png (--plot-classes); every other class gets one line of its strongest words in summary.md.
"""

import argparse
import csv
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # datasets and matplotlib load in `run` only
    import datasets


# How much of a summary of many classes is shown in full (the CSV holds everything).
TABLES = 20
PLOT_CLASSES = 12
INLINE_WORDS = 5


@dataclass
class WordStat:
    word: str
    push: float
    mean: float
    count: int
    texts: int
    share: float


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    parser.add_argument(
        "explanations", type=Path, help="the output of `labelattn explain --data` (.parquet/.jsonl/.csv)"
    )
    parser.add_argument("--output-dir", type=Path, help="where to write (default: EXPLANATIONS.summary/)")
    parser.add_argument("--top", type=int, default=15, help="words per class in the Markdown tables and the plot")
    parser.add_argument(
        "--tables",
        type=int,
        default=TABLES,
        metavar="N",
        help=f"classes with a table of their own in summary.md, those with the most texts (default {TABLES}); "
        f"every other class gets one line of its {INLINE_WORDS} strongest words",
    )
    parser.add_argument(
        "--plot-classes",
        type=int,
        default=PLOT_CLASSES,
        metavar="N",
        help=f"classes in summary.png, those with the most texts (default {PLOT_CLASSES})",
    )
    parser.add_argument(
        "--min-texts",
        type=int,
        default=None,
        help="leave out words found in fewer texts of the class (default: "
        "3, or 1 when the class has fewer than 30 texts)",
    )


def word_key(word: str) -> str | None:
    """The form words are counted under: lower-case; None for punctuation and symbols alone."""
    return word.lower() if any(c.isalnum() for c in word) else None


class SummaryError(ValueError):
    """A file `labelattn summarize` cannot read as explanations: the message says what is wrong with it."""


NOT_OURS = "is this the output of `labelattn explain --data`?"


def not_an_explanation(index: int, what: str) -> SummaryError:
    return SummaryError(f"Row {index} of the file {what}; {NOT_OURS}")


def words_and_scores(row: dict, index: int) -> tuple[list, list]:
    """A row's `words` and `scores`, checked: lists (in a CSV, JSON lists) of strings and of numbers, one score
    per word."""
    values = []
    for name in ("words", "scores"):
        value = row[name]
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise not_an_explanation(index, f"has {name} that are not a JSON list ({value[:40]!r})") from None
        if not isinstance(value, list):
            raise not_an_explanation(index, f"has {name} that are a {type(value).__name__}, not a list")
        values.append(value)
    words, scores = values
    if len(words) != len(scores):
        raise not_an_explanation(
            index, f"has {len(words)} words and {len(scores)} scores, where an explanation has one score per word"
        )
    if not all(isinstance(w, str) for w in words) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in scores
    ):
        raise not_an_explanation(index, "has words that are not all strings or scores that are not all numbers")
    return words, scores


def corpus_statistics(
    dataset: "datasets.Dataset", batch_rows: int = 1000
) -> tuple[dict[str, list[WordStat]], dict[str, int]]:
    """For each class (target label), every word's `WordStat`, highest push first, and the class's number of
    texts; read `batch_rows` rows at a time. Rows with an error are skipped, and so are rows without one finite
    score. The columns `words` and `scores` may be lists or JSON strings (CSV). Raises `SummaryError` for a row
    that is not an explanation, or when no row is left to summarize."""
    totals: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0, 0]))
    class_texts: dict[str, int] = defaultdict(int)
    errors = unscored = 0
    table = dataset.with_format("arrow")
    columns = ["target_label", "words", "scores", "error"]
    for start in range(0, len(dataset), batch_rows):
        for index, row in enumerate(table[start : start + batch_rows].select(columns).to_pylist(), start=start):
            if row["error"] is not None:
                errors += 1
                continue
            words, scores = words_and_scores(row, index)
            label = row["target_label"]
            if not isinstance(label, str):
                raise not_an_explanation(index, f"has neither an error nor a target_label (it is {label!r})")
            if not any(math.isfinite(score) for score in scores):
                unscored += 1
                continue
            class_texts[label] += 1
            seen = set()
            for word, score in zip(words, scores, strict=True):
                key = word_key(word)
                if key is None or not math.isfinite(score):
                    continue
                entry = totals[label][key]
                entry[0] += score
                entry[1] += 1
                if key not in seen:
                    entry[2] += 1
                    seen.add(key)
    if not class_texts:
        raise SummaryError(
            f"No explained row to summarize: of {len(dataset)} row(s), {errors} have an error and {unscored} no "
            "finite score (NaN or infinite)."
        )
    stats = {
        label: sorted(
            (
                WordStat(word, total / class_texts[label], total / count, count, texts, texts / class_texts[label])
                for word, (total, count, texts) in words.items()
            ),
            key=lambda stat: (-stat.push, stat.word),
        )
        for label, words in sorted(totals.items())
    }
    # A class whose texts hold only punctuation has no word: it is still one of the classes.
    return {label: stats.get(label, []) for label in sorted(class_texts)}, dict(class_texts)


def top_words(stats: list[WordStat], top: int, min_texts: int | None, class_texts: int) -> list[WordStat]:
    """The `top` words that push most towards the class (push > 0), among those in at least `min_texts` of its
    `class_texts` texts (default 3, or 1 for a class of fewer than 30 texts)."""
    if min_texts is None:
        min_texts = 3 if class_texts >= 30 else 1
    return [s for s in stats if s.texts >= min_texts and s.push > 0][:top]


def ranked_classes(texts: dict[str, int]) -> list[str]:
    """The classes, those with the most texts first (then by name): the order in which a summary shows them."""
    return sorted(texts, key=lambda label: (-texts[label], label))


def markdown(
    stats: dict[str, list[WordStat]], top: int, min_texts: int | None, texts: dict[str, int], tables: int = TABLES
) -> str:
    """A table per class for the `tables` classes with the most texts, then one line for each other class."""
    classes = ranked_classes(texts)
    lines = [
        "# What pushes texts towards each class",
        "",
        f"{len(classes):,} classes, {sum(texts.values()):,} explained rows; the classes with the most texts first.",
        "",
    ]
    for label in classes[:tables]:
        lines += [f"## {label} ({texts[label]} texts)", "", "| word | push | mean score | count | share of texts |"]
        lines.append("|---|---:|---:|---:|---:|")
        lines += [
            f"| {s.word} | {s.push:+.4f} | {s.mean:+.4f} | {s.count} | {s.share:.1%} |"
            for s in top_words(stats[label], top, min_texts, texts[label])
        ]
        lines.append("")
    others = classes[tables:]
    if others:
        lines += [
            f"## The other {len(others):,} classes",
            "",
            f"Their {INLINE_WORDS} words that push most (push per text); every word of every class is in summary.csv.",
            "",
            "| class | texts | words |",
            "|---|---:|---|",
        ]
        for label in others:
            shown = top_words(stats[label], INLINE_WORDS, min_texts, texts[label])
            lines.append(f"| {label} | {texts[label]} | {', '.join(f'{s.word} ({s.push:+.3f})' for s in shown)} |")
        lines.append("")
    return "\n".join(lines)


def plot(
    stats: dict[str, list[WordStat]],
    top: int,
    min_texts: int | None,
    texts: dict[str, int],
    path: Path,
    plot_classes: int = PLOT_CLASSES,
) -> None:
    """One horizontal bar chart for each of the `plot_classes` classes with the most texts: the words that push
    most, the bar's label its share of texts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    classes = ranked_classes(texts)
    shown_by_class = {label: top_words(stats[label], top, min_texts, texts[label]) for label in classes[:plot_classes]}
    slots = max(1, *(len(shown) for shown in shown_by_class.values()))
    columns = min(3, len(shown_by_class))
    rows = math.ceil(len(shown_by_class) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, (0.3 * slots + 1.1) * rows + 0.4), squeeze=False)
    for ax in axes.flat[len(shown_by_class) :]:
        ax.set_visible(False)
    for ax, (label, shown) in zip(axes.flat, shown_by_class.items(), strict=False):
        bars = ax.barh(range(len(shown)), [s.push for s in shown], height=0.7, color="#16a34a")
        ax.bar_label(bars, labels=[f"{s.share:.0%}" for s in shown], padding=2, fontsize=7, color="#4b5563")
        ax.set_yticks(range(len(shown)), [s.word for s in shown], fontsize=8)
        ax.set_ylim(slots - 0.5, -0.5)  # the same bar height in every panel, the strongest word on top
        ax.margins(x=0.18)
        ax.spines[["top", "right"]].set_visible(False)
        ax.set_title(f"{label} ({texts[label]} text{'s' if texts[label] != 1 else ''})", fontsize=10)
        ax.set_xlabel("push per text", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    which = (
        "each class"
        if len(shown_by_class) == len(classes)
        else (f"the {len(shown_by_class)} classes with the most texts (of {len(classes):,})")
    )
    figure.suptitle(
        f"Words that push texts towards {which} (bar: push per text; label: share of the class's texts)", fontsize=10
    )
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_summary(
    dataset: "datasets.Dataset",
    folder: Path,
    top: int = 15,
    min_texts: int | None = None,
    tables: int = TABLES,
    plot_classes: int = PLOT_CLASSES,
) -> Path:
    """Write summary.md, summary.csv and summary.png of an explanations data set to `folder`."""
    stats, texts = corpus_statistics(dataset)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.md").write_text(markdown(stats, top, min_texts, texts, tables), encoding="utf-8")
    with (folder / "summary.csv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["class", "word", "push", "mean_score", "count", "texts", "share_of_texts"])
        for label in ranked_classes(texts):
            for s in stats[label]:
                writer.writerow([label, s.word, f"{s.push:.6g}", f"{s.mean:.6g}", s.count, s.texts, f"{s.share:.6g}"])
    plot(stats, top, min_texts, texts, folder / "summary.png", plot_classes)
    return folder


def load_explanations(path: Path) -> "datasets.Dataset":
    """The explanations file written by `labelattn explain --data`, memory-mapped, with its columns checked."""
    import datasets

    formats = {".parquet": "parquet", ".jsonl": "json", ".csv": "csv"}
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: pass the output of `labelattn explain --data`.")
    if path.suffix.lower() not in formats:
        raise SummaryError(f"{path}: expected a .parquet, .jsonl or .csv file written by `labelattn explain --data`.")
    if path.stat().st_size == 0:
        raise SummaryError(f"{path} is empty: pass the output of `labelattn explain --data`.")
    try:
        dataset = datasets.load_dataset(formats[path.suffix.lower()], data_files=str(path), split="train")
    except datasets.exceptions.DatasetGenerationError as error:
        cause = error.__cause__ or error
        raise SummaryError(
            f"{path} cannot be read as {formats[path.suffix.lower()].upper()} ({str(cause).splitlines()[0][:200]}); "
            f"{NOT_OURS}"
        ) from None
    missing = {"target_label", "words", "scores", "error"} - set(dataset.column_names)
    if missing:
        raise SummaryError(f"{path} has no column(s) {sorted(missing)}: {NOT_OURS}")
    return dataset


def run(args: argparse.Namespace) -> int:
    from explainers.checks import check_count
    from labelattn.corpus.shards import check_writable

    check_count(args.top, "--top", "words")
    check_count(args.tables, "--tables", "classes", minimum=0)
    check_count(args.plot_classes, "--plot-classes", "classes")
    if args.min_texts is not None:
        check_count(args.min_texts, "--min-texts", "texts")

    folder = args.output_dir or args.explanations.with_name(args.explanations.name + ".summary")
    check_writable(folder)
    write_summary(
        load_explanations(args.explanations), folder, args.top, args.min_texts, args.tables, args.plot_classes
    )
    print(f"Wrote {folder}/summary.md, summary.csv and summary.png", file=sys.stderr)
    return 0
