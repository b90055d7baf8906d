"""How much comprehensiveness could any word ranking reach? The ceiling for the methods measured by
`labelattn evaluate-explanations`, on the same texts, targets and removals.

    labelattn evaluate-explanations models/trec-embedding trec --n-texts 200 --output-dir outputs/faithfulness/trec
    python bench/faithfulness_bound.py outputs/faithfulness/trec

Comprehensiveness averages, over the percentages k, the drop `p(y|x) − p(y|x without its top k% words)`. A method's
top words at each k come from one ranking; the ceiling here takes, at each k separately, the word subset of that size
whose removal drops p(y|x) the most, so no ranking can beat it. The subsets are searched exhaustively for texts of at
most `--exact-words` words (every subset of every size in one pool of inputs) and by beam search above (the best
`--beam` subsets of each size grown by one word): for those texts the subset found may miss the best one, so the
ceiling printed is a lower estimate of the true one. Written here because no library computes it: ERASER and ferret
report a method's comprehensiveness, not the best one attainable.
"""

import argparse
import itertools
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from explainers import load_classifier  # noqa: E402
from explainers.evaluation.faithfulness import ProbabilityPool  # noqa: E402
from explainers.models import baseline_token_id, token_limit  # noqa: E402
from explainers.words import TokenizedText, tokenize  # noqa: E402


class Probabilities:
    """p(target | item without the words removed) of many perturbed inputs, through the pool that
    `evaluate_faithfulness` uses (each distinct input computed once, in length-sorted batches)."""

    def __init__(self, model, removal: str, baseline_id: int, batch_size: int) -> None:
        self.settings = (model, removal, baseline_id, batch_size)

    def __call__(self, asked: list[tuple[TokenizedText, frozenset[int], int]]) -> list[float]:
        pool = ProbabilityPool(*self.settings)
        rows = [pool.add(item, removed) for item, removed, _ in asked]
        with torch.no_grad():
            probs = pool.run()
        return [float(probs[row, target]) for row, (_, _, target) in zip(rows, asked, strict=True)]


def lowest_by_size(
    items: list[TokenizedText], targets: list[int], p_of: Probabilities, exact_words: int, beam: int
) -> list[dict[int, float]]:
    """Per text, the lowest p(target) found after removing n words, for every n from 1 to its word count."""
    lowest: list[dict[int, float]] = [{} for _ in items]
    exact = {i for i, item in enumerate(items) if len(item.words) <= exact_words}
    owners, asked = [], []
    for i in sorted(exact):
        for size in range(1, len(items[i].words) + 1):
            for subset in itertools.combinations(range(len(items[i].words)), size):
                owners.append(i)
                asked.append((items[i], frozenset(subset), targets[i]))
    for i, (_, removed, _), p in zip(owners, asked, p_of(asked), strict=True):
        lowest[i][len(removed)] = min(lowest[i].get(len(removed), 1.0), p)
    for i, item in enumerate(items):
        if i in exact:
            continue
        kept = [frozenset()]
        for size in range(1, len(item.words) + 1):
            grown = list({subset | {w} for subset in kept for w in range(len(item.words)) if w not in subset})
            ranked = sorted(zip(p_of([(item, s, targets[i]) for s in grown]), grown, strict=True), key=lambda x: x[0])
            lowest[i][size] = ranked[0][0]
            kept = [subset for _, subset in ranked[:beam]]
    return lowest


def ceiling(
    results: dict, model, tokenizer, exact_words: int = 12, beam: int = 32, batch_size: int = 256
) -> tuple[float, dict[str, float], int]:
    """The ceiling of comprehensiveness on the texts of `results` (a `labelattn evaluate-explanations` results.json),
    each method's mean comprehensiveness there, and how many texts were searched exhaustively."""
    per_text = results["per_text"]
    rows = next(iter(per_text.values()))
    texts = [(row["text"], row["text_pair"]) if row.get("text_pair") is not None else row["text"] for row in rows]
    items = tokenize(tokenizer, texts, token_limit(model, tokenizer))
    for item, row in zip(items, rows, strict=True):
        if len(item.words) != row["num_words"]:
            raise SystemExit(f"{row['text']!r}: {len(item.words)} words here, {row['num_words']} in the results.")
    p_of = Probabilities(model, results["options"]["removal"], baseline_token_id(tokenizer), batch_size)
    lowest = lowest_by_size(items, [row["target"] for row in rows], p_of, exact_words, beam)
    bound = sum(
        sum(row["probability"] - low[n] for n in row["words_per_percentage"]) / len(row["words_per_percentage"])
        for row, low in zip(rows, lowest, strict=True)
    ) / len(rows)
    methods = {row["method"]: row["comprehensiveness"] for row in results["rows"]}  # the report's own means
    return bound, methods, sum(len(item.words) <= exact_words for item in items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="An output folder of `labelattn evaluate-explanations`.")
    parser.add_argument("--model", help="The model measured (default: the one named in results.json).")
    parser.add_argument("--exact-words", type=int, default=12, help="Longest text searched exhaustively.")
    parser.add_argument("--beam", type=int, default=32, help="Subsets kept per size for longer texts.")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()

    results = json.loads((args.results / "results.json").read_text())
    model, tokenizer = load_classifier(args.model or results["model"])
    bound, methods, exact = ceiling(results, model, tokenizer, args.exact_words, args.beam, args.batch_size)
    random = methods["random"]
    texts = len(next(iter(results["per_text"].values())))
    print(f"{texts} texts, {exact} searched exhaustively, {texts - exact} by beam search ({args.beam})\n")
    print("| method | comprehensiveness | × random | share of the ceiling |\n|---|---|---|---|")
    print(f"| **ceiling** (best subset at each k) | {bound:.3f} | {bound / random:.3f} | 1.000 |")
    for method, value in sorted(methods.items(), key=lambda pair: pair[1], reverse=True):
        print(f"| {method} | {value:.3f} | {value / random:.3f} | {value / bound:.3f} |")


if __name__ == "__main__":
    main()
