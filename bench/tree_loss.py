"""Whether the model should also learn the upper levels of a class hierarchy: a loss over the tree, measured.

    python bench/tree_loss.py                                   # trec-fine (coarse > fine), weights 0 0.5 1, seeds 0 1
    python bench/tree_loss.py --data icd10-cm --weights 0.5 --seeds 0

The shipped model learns the classes only; a predicted class implies its groups. The alternative measured here
adds, for every upper level, the cross-entropy of the true group, whose probability is the sum of its classes'
(`loss = CE(class) + weight × Σ_levels −log Σ_{c in the true group} p_c`): no new parameter, so the predictions
stay consistent with the tree. It replaces `labelattn.training.run.training_loss` (the loss a run trains on, label
smoothing included) for this process only, and the default model is trained by `labelattn train` in this process
(defaults but for `--data`, `--seed`, `--epochs`) into models/bench/; each saved model is scored on the test split
at every level. Prints one markdown table of means over the seeds. Weight 0 is the shipped loss.
"""

import argparse
import statistics
from pathlib import Path

import numpy as np
import torch
from label_descriptions import predictions  # the same scoring of a saved folder

from labelattn import cli
from labelattn.data.reading import load_data
from labelattn.training import run as training_run

ROOT = Path(__file__).resolve().parents[1]
shipped_loss = training_run.training_loss


def group_loss(logits: torch.Tensor, labels: torch.Tensor, config) -> torch.Tensor:
    """Each upper level's cross-entropy of the true group (its probability: the sum of its classes'), summed."""
    hierarchy = config.label_hierarchy
    names = [config.id2label[i] for i in range(len(config.id2label))]
    probabilities = logits.float().softmax(-1)
    total = logits.new_zeros((), dtype=torch.float32)
    for depth in range(len(hierarchy["levels"]) - 1):
        groups = [hierarchy["ancestors"][name][depth] for name in names]
        index = {group: i for i, group in enumerate(dict.fromkeys(groups))}
        group_of = torch.tensor([index[g] for g in groups], device=logits.device)
        same_group = group_of[None, :] == group_of[labels][:, None]  # (batch, labels)
        total = total - (probabilities * same_group).sum(-1).clamp_min(1e-30).log().mean()
    return total


def tree_loss(weight: float):
    """The run's training loss (cross-entropy, smoothed as the run says) plus `weight` times `group_loss`."""

    def loss(run, batch: dict) -> torch.Tensor:
        logits = run.model(**{name: value for name, value in batch.items() if name != "labels"}).logits
        labels = batch["labels"]
        cross_entropy = torch.nn.functional.cross_entropy(logits.float(), labels, label_smoothing=run.label_smoothing)
        return cross_entropy + weight * group_loss(logits, labels, run.model.config)

    return loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="trec-fine")
    parser.add_argument("--weights", type=float, nargs="+", default=[0.0, 0.5, 1.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--epochs", type=int, default=None, help="default: labelattn train's")
    args = parser.parse_args()

    data = load_data(args.data)
    test = data.splits["test"]
    truth = np.array(test["label"])
    class_index = {name: i for i, name in enumerate(data.label_names)}
    levels = data.hierarchy.levels
    maps = {level: np.array(data.hierarchy.level_indices(data.label_names, level)) for level in levels}
    rows = []
    for weight in args.weights:
        training_run.training_loss = tree_loss(weight) if weight else shipped_loss
        scores = {level: [] for level in levels}
        for seed in args.seeds:
            folder = ROOT / "models" / "bench" / f"{args.data}-tree-{weight:g}-{seed}"
            options = ["train", "--data", args.data, "--seed", str(seed), "--output-dir", str(folder), "--overwrite"]
            if cli.main(options + (["--epochs", str(args.epochs)] if args.epochs else [])):
                raise SystemExit(f"labelattn {' '.join(options)} failed")
            predicted = np.array([class_index[name] for name in predictions(folder, test["text"])])
            for level, index in maps.items():
                scores[level].append(float((index[predicted] == index[truth]).mean()))
        rows.append((weight, {level: statistics.mean(values) for level, values in scores.items()}))
    print(f"\n{args.data}: test accuracy at each level, mean of seeds {args.seeds}\n")
    print("| tree-loss weight | " + " | ".join(levels) + " |\n|---|" + "---|" * len(levels))
    for weight, means in rows:
        print(f"| {weight:g} | " + " | ".join(f"{means[level]:.4f}" for level in levels) + " |")


if __name__ == "__main__":
    main()
