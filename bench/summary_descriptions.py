"""Whether the per-class summary of explanations names words of each class's own description.

    labelattn explain models/icd10-cm-embedding --data icd10-cm --split test --method label_attention --top-k 3 \
        --output out/icd-test.parquet
    labelattn summarize out/icd-test.parquet                       # writes out/icd-test.parquet.summary/
    python bench/summary_descriptions.py out/icd-test.parquet.summary/summary.csv --data icd10-cm

For every class in summary.csv with at least `--min-texts` explained texts: whether one of its `--top` strongest
words (by push) is a word of its description in the data (ICD-10-CM: the category's title, "Fracture of femur"),
leaving out words of three letters or fewer ("of", "and", "with"). Prints the share of classes, and the classes
with the most texts with their top words and description, so that a reader can judge the matches.
"""

import argparse
import csv
import re
from collections import defaultdict

from labelattn.data.reading import load_data


def content_words(text: str) -> set[str]:
    return {word for word in re.findall(r"\w+", text.lower()) if len(word) > 3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("summary", help="summary.csv written by `labelattn summarize`")
    parser.add_argument("--data", default="icd10-cm", help="built-in data set whose class descriptions are used")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--min-texts", type=int, default=5)
    parser.add_argument("--show", type=int, default=10)
    args = parser.parse_args()

    descriptions = load_data(args.data).descriptions or {}
    words, texts = defaultdict(list), {}
    with open(args.summary, newline="") as file:
        for row in csv.DictReader(file):
            words[row["class"]].append((float(row["push"]), row["word"]))
            if float(row["share_of_texts"]) > 0:  # the texts holding the word over the class's share of them
                texts[row["class"]] = round(int(row["texts"]) / float(row["share_of_texts"]))
    classes = [c for c in words if texts.get(c, 0) >= args.min_texts and c in descriptions]
    classes.sort(key=lambda c: -texts[c])
    top = {c: [w for _, w in sorted(words[c], reverse=True)[: args.top]] for c in classes}
    named = [c for c in classes if content_words(" ".join(top[c])) & content_words(descriptions[c])]
    print(
        f"{len(named)} of {len(classes)} classes ({len(named) / max(len(classes), 1):.1%}) with >= {args.min_texts} "
        f"texts have a word of their description among their {args.top} strongest words\n"
    )
    print("| class | texts | strongest words | description |\n|---|---|---|---|")
    for c in classes[: args.show]:
        print(f"| {c} | {texts[c]} | {', '.join(top[c])} | {descriptions[c]} |")


if __name__ == "__main__":
    main()
