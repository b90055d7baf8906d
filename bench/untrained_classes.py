"""Classes that no training row shows, predicted from their descriptions alone (`labelattn train --label-descriptions`).

    python bench/untrained_classes.py                                   # ten ICD-10-CM chapters; 10% held out
    python bench/untrained_classes.py --chapters A00-B99 --share 0.2 --seed 1
    python bench/untrained_classes.py --no-train --offsets 0 4 12     # the same model, other offsets

From the built-in `icd10-cm` data (its split, its category, block and chapter descriptions), the categories of the
chosen chapters only (so that a run takes minutes, not a full ICD-10-CM training); `--share` of those categories
with two or more test rows (seeded) lose every training and validation row. The test file keeps the chapters'
whole test split and adds the held-out categories' training and validation rows (never trained on either way).
Written to models/bench/untrained/ as CSV files and a label file (label, parent, description), the default model is
trained there with `labelattn train ... --label-descriptions --hierarchy-levels chapter,block,category` (a
subprocess), and its predictions of the test file are scored (with the offset its config has for the classes without
rows, `untrained_class_offset`, and with each of `--offsets`): top-1 and top-5 accuracy and the block accuracy on
the held-out categories' rows and on the trained categories' rows, against chance (one class in all) and against two
zero-shot baselines that need no training row either: the category whose description is nearest the text in TF-IDF
space (word 1-2-grams, fitted on the descriptions and the training texts), and in the space of MiniLM's sentence
embeddings (all-MiniLM-L6-v2 mean-pooled, the offline copy `labelattn.minilm_path()`). Prints one markdown table.
"""

import argparse
import csv
import json
import os
import random
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from label_descriptions import top_classes  # the same scoring of a saved folder
from sklearn.feature_extraction.text import TfidfVectorizer
from transformers import AutoModel, AutoTokenizer

from labelattn import minilm_path
from labelattn.data.reading import load_data
from modeling_labelattn import masked_mean

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "models" / "bench" / "untrained"
# Ten chapters of diseases by organ system (infections, neoplasms, endocrine, mental, nervous, circulatory,
# respiratory, digestive, skin, genitourinary): about 12,000 training texts and 900 categories.
DISEASE_CHAPTERS = [
    "A00-B99",
    "C00-D49",
    "E00-E89",
    "F01-F99",
    "G00-G99",
    "I00-I99",
    "J00-J99",
    "K00-K95",
    "L00-L99",
    "N00-N99",
]


def write_rows(path: Path, rows: list[tuple[str, str]]) -> Path:
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return path


def build_files(
    chapters: list[str], share: float, seed: int, folder: Path = FOLDER
) -> tuple[dict[str, Path], list[str], dict]:
    """The CSV files of the chosen chapters with `share` of their categories held out of training, in `folder`; the
    files, the held-out categories and the data's descriptions (category -> text)."""
    data = load_data("icd10-cm")
    names, hierarchy = data.label_names, data.hierarchy
    kept = {name for name in names if hierarchy.ancestors[name][0] in chapters}
    rows = {
        split: [(row["text"], names[row["label"]]) for row in data.splits[split] if names[row["label"]] in kept]
        for split in ("train", "validation", "test")
    }
    test_counts: dict[str, int] = {}
    for _, label in rows["test"]:
        test_counts[label] = test_counts.get(label, 0) + 1
    candidates = sorted(name for name, count in test_counts.items() if count >= 2)
    held = set(random.Random(seed).sample(candidates, round(share * len(candidates))))
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "train": write_rows(folder / "train.csv", [r for r in rows["train"] if r[1] not in held]),
        "validation": write_rows(folder / "validation.csv", [r for r in rows["validation"] if r[1] not in held]),
        "test": write_rows(
            folder / "test.csv", rows["test"] + [r for s in ("train", "validation") for r in rows[s] if r[1] in held]
        ),
    }
    groups = hierarchy.group_descriptions
    chapter_of = {hierarchy.ancestors[name][1]: hierarchy.ancestors[name][0] for name in kept}
    # A label file names each class and group once: a block of one category is named like it (B10 > B10).
    block_name = "block {}".format
    with (folder / "labels.csv").open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["label", "parent", "description"])
        for name in sorted(kept):
            writer.writerow([name, block_name(hierarchy.ancestors[name][1]), data.descriptions.get(name, "")])
        for block, chapter in chapter_of.items():
            writer.writerow([block_name(block), chapter, groups.get("block", {}).get(block, "")])
        for chapter in chapters:
            writer.writerow([chapter, "", groups.get("chapter", {}).get(chapter, "")])
    files["labels"] = folder / "labels.csv"
    return files, sorted(held), {name: data.descriptions.get(name, name) for name in kept}


def train(files: dict[str, Path], seed: int, options: list[str], out: Path) -> Path:
    command = [sys.executable, "-m", "labelattn", "train", "--data", str(files["train"]), "--seed", str(seed)]
    command += ["--validation-data", str(files["validation"]), "--test-data", str(files["test"])]
    command += ["--label-file", str(files["labels"]), "--label-descriptions"]
    command += ["--hierarchy-levels", "chapter,block,category", "--output-dir", str(out), "--overwrite", *options]
    subprocess.run(command, check=True, env={**os.environ})
    return out


def nearest_description_top5(texts: list[str], names: list[str], descriptions: dict, train_texts: list[str]):
    """The 5 categories whose descriptions are nearest each text in TF-IDF space (cosine)."""
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit(train_texts + list(descriptions.values()))
    similarity = vectorizer.transform(texts) @ vectorizer.transform([descriptions[n] for n in names]).T
    return np.argsort(-similarity.toarray(), axis=1)[:, :5]


@torch.no_grad()
def sentence_vectors(texts: list[str], batch_size: int = 128) -> torch.Tensor:
    """all-MiniLM-L6-v2's sentence embeddings (the mean of its last layer over the real tokens, at unit length,
    as sentence-transformers computes them), from the offline MiniLM folder."""
    tokenizer, encoder = AutoTokenizer.from_pretrained(minilm_path()), AutoModel.from_pretrained(minilm_path()).eval()
    rows = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(texts[start : start + batch_size], padding=True, truncation=True, return_tensors="pt")
        rows.append(masked_mean(encoder(**batch).last_hidden_state, batch["attention_mask"]))
    return torch.nn.functional.normalize(torch.cat(rows), dim=-1)


def nearest_description_minilm_top5(texts: list[str], names: list[str], descriptions: dict):
    """The 5 categories whose descriptions are nearest each text in MiniLM's sentence-embedding space (cosine)."""
    similarity = sentence_vectors(texts) @ sentence_vectors([descriptions[n] for n in names]).T
    return similarity.topk(5, dim=-1).indices.numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chapters", nargs="+", default=DISEASE_CHAPTERS)
    parser.add_argument("--share", type=float, default=0.1, help="share of the categories held out (default 0.1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--train", default="", help="more `labelattn train` options, e.g. --train='--label-residual-dropout 0.25'"
    )
    parser.add_argument("--model-dir", type=Path, default=FOLDER / "model", help="where the model is trained")
    parser.add_argument(
        "--offsets",
        type=float,
        nargs="*",
        default=[],
        help="also score the trained model with these untrained_class_offset values (the config's is always scored)",
    )
    parser.add_argument("--no-train", action="store_true", help="score the model already in --model-dir")
    args = parser.parse_args()

    files, held, descriptions = build_files(args.chapters, args.share, args.seed)
    with files["test"].open() as file:
        test = list(csv.DictReader(file))
    with files["train"].open() as file:
        train_texts = [row["text"] for row in csv.DictReader(file)]
    texts, labels = [row["text"] for row in test], [row["label"] for row in test]
    folder = args.model_dir if args.no_train else train(files, args.seed, shlex.split(args.train), args.model_dir)
    top, names = top_classes(folder, texts, k=5)
    offset = json.loads((folder / "config.json").read_text()).get("untrained_class_offset", 0.0)
    systems = {f"labelattn, `--label-descriptions` (offset {offset:g})": np.array(top)}
    for other in args.offsets:
        other_top = top_classes(folder, texts, k=5, untrained_class_offset=other)[0]
        systems[f"labelattn, `--label-descriptions` (offset {other:g})"] = np.array(other_top)
    systems |= {
        "nearest description (TF-IDF)": nearest_description_top5(texts, names, descriptions, train_texts),
        "nearest description (MiniLM sentence embeddings)": nearest_description_minilm_top5(texts, names, descriptions),
    }
    block_of = {row[0]: row[1] for row in csv.reader(files["labels"].open()) if row[0] in descriptions}
    truth = np.array([names.index(label) for label in labels])
    is_held = np.array([label in set(held) for label in labels])
    print(f"{len(names)} categories, {len(held)} held out of training; test rows: {is_held.sum()} of those, ", end="")
    print(f"{(~is_held).sum()} of the trained ones")
    print("\n| rows | system | top-1 | top-5 | block |\n|---|---|---|---|---|")
    for rows_name, rows in (("held-out categories", is_held), ("trained categories", ~is_held)):
        for system, ranked in systems.items():
            first = ranked[rows, 0]
            top1 = (first == truth[rows]).mean()
            top5 = (ranked[rows] == truth[rows, None]).any(1).mean()
            block = np.mean([block_of[names[p]] == block_of[names[t]] for p, t in zip(first, truth[rows], strict=True)])
            print(f"| {rows_name} | {system} | {top1:.3f} | {top5:.3f} | {block:.3f} |")
    print(f"\nchance: top-1 {1 / len(names):.4f}, top-5 {5 / len(names):.4f}")


if __name__ == "__main__":
    main()
