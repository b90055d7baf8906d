"""The label-attention head's scorer choices (and its cost levers) on test accuracy over several seeds, in one run.

    python bench/head_scorers.py --data trec trec-fine --seeds 0 1 2
    python bench/head_scorers.py --data trec --variants shared per-class-r16 --seeds 0 1 2

Every run is `labelattn train --data D --seed S <the variant's options>` (the defaults otherwise; the variants are
`bench/train_quality.py`'s VARIANTS), scored on the data set's test split by the saved model, loaded as a user would.
Prints one line per run as it ends, then a table: mean ± sample standard deviation over the seeds of accuracy and
macro-F1, and the median wall-clock seconds of `labelattn train`. Seeds run in the outer loop, so that every variant
has a first result early and all see the same load on a shared machine.
"""

import argparse
import statistics

from train_quality import VARIANTS, train_and_score

from labelattn.data.reading import load_data

SCORER_VARIANTS = ["shared", "class-bias", "per-class", "per-class-r16", "normed"]


def spread(values: list[float]) -> str:
    deviation = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {deviation:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", nargs="+", default=["trec", "trec-fine"], help="Built-in data sets.")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=SCORER_VARIANTS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    cli = parser.parse_args()
    runs = {}
    data_sets = {name: load_data(name) for name in cli.data}
    for seed in cli.seeds:
        for name, data in data_sets.items():
            for variant in cli.variants:
                result, seconds = train_and_score(name, data, variant, "label_attention", seed)
                runs.setdefault((name, variant), []).append((result, seconds))
                print(f"{name} {variant} seed {seed}: {result}, {seconds:.0f} s", flush=True)
    print(f"\nTest scores over seeds {cli.seeds}: mean ± standard deviation; median seconds of `labelattn train`\n")
    print("| data | variant (`labelattn train` options) | accuracy | macro-F1 | train s |\n|---|---|---|---|---|")
    for (name, variant), results in runs.items():
        accuracy = spread([result["accuracy"] for result, _ in results])
        macro_f1 = spread([result["macro_f1"] for result, _ in results])
        seconds = statistics.median(seconds for _, seconds in results)
        options = " ".join(VARIANTS[variant]) or "the defaults"
        print(f"| {name} | {variant} (`{options}`) | {accuracy} | {macro_f1} | {seconds:.0f} |")


if __name__ == "__main__":
    main()
