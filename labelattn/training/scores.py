"""The scores a training run reports for a split: accuracy and macro-F1, micro-F1 for multi-label data, precision@k
and recall@k where a reader looks at the few most probable classes, and accuracy and macro-F1 at every upper level
of a class hierarchy; computed by the metric modules shipped in labelattn/metrics (offline)."""

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # labelattn.data.reading imports datasets: `labelattn --help` imports this module
    from labelattn.data.records import Hierarchy

METRICS_DIR = Path(__file__).parents[1] / "metrics"
# Ranking metrics (precision@k, recall@k): reported for multi-label data, and for single-label data from this many
# classes on.
MANY_CLASSES = 20
RANKING_CUTOFFS = (1, 5)


def load_metrics(multi_label: bool) -> dict:
    """The metric modules shipped in labelattn/metrics, loaded by path (offline)."""
    import evaluate

    config = "multilabel" if multi_label else None
    names = ("accuracy", "f1", "precision_at_k")
    return {name: evaluate.load(str(METRICS_DIR / name), config, keep_in_memory=True) for name in names}


def ranking_cutoffs(num_labels: int, multi_label: bool) -> list[int]:
    """The k of the precision@k and recall@k a run reports: for multi-label data, and for single-label data with many
    classes, where a reader looks at the few most probable classes."""
    if not multi_label and num_labels < MANY_CLASSES:
        return []
    return [k for k in RANKING_CUTOFFS if k < num_labels]


def predict_split(model, loader, accelerator, multi_label: bool):
    """Predicted and true labels and the logits `(rows, num_labels)` of every row of a split, gathered from every
    process, as CPU tensors."""
    import torch

    model.eval()
    predictions, references, logits = [], [], []
    with torch.no_grad():
        for batch in loader:
            batch.pop("id")
            labels = batch.pop("labels")
            scores = model(**batch).logits.float()  # (batch, num_labels)
            predicted = (scores > 0).long() if multi_label else scores.argmax(dim=-1)
            predicted, labels, scores = accelerator.gather_for_metrics((predicted, labels.long(), scores))
            predictions.append(predicted.cpu())
            references.append(labels.cpu())
            logits.append(scores.cpu())
    model.train()
    return torch.cat(predictions), torch.cat(references), torch.cat(logits)


def level_scores(
    metrics: dict, predictions: list, references: list, label_names: list[str], hierarchy: "Hierarchy"
) -> dict[str, float]:
    """`{level}_accuracy` and `{level}_macro_f1` for each upper level of a single-label hierarchy: the classes
    mapped to their groups (a predicted class implies its group, so a level's accuracy is at least the classes')."""
    scores = {}
    for level in hierarchy.levels[:-1]:
        group = hierarchy.level_indices(label_names, level)
        predicted, true = [group[p] for p in predictions], [group[r] for r in references]
        key = level.replace(" ", "_")  # "level 1" -> level_1_accuracy, printed as level-1-accuracy
        scores[f"{key}_accuracy"] = metrics["accuracy"].compute(predictions=predicted, references=true)["accuracy"]
        macro_f1 = metrics["f1"].compute(predictions=predicted, references=true, average="macro")["f1"]
        scores[f"{key}_macro_f1"] = macro_f1
    return scores


def split_scores(
    metrics: dict,
    predictions,
    references,
    logits,
    multi_label: bool,
    label_names: list[str],
    hierarchy: "Hierarchy | None" = None,
) -> dict[str, float]:
    """Accuracy and macro-F1 (and micro-F1 for multi-label; precision@k and recall@k for multi-label or many
    classes; both at each upper level of a single-label `hierarchy`) of `predict_split`'s tensors."""
    predictions, references = predictions.tolist(), references.tolist()
    f1 = metrics["f1"]
    scores = {
        "accuracy": metrics["accuracy"].compute(predictions=predictions, references=references)["accuracy"],
        "macro_f1": f1.compute(predictions=predictions, references=references, average="macro")["f1"],
    }
    if multi_label:
        scores["micro_f1"] = f1.compute(predictions=predictions, references=references, average="micro")["f1"]
    cutoffs = ranking_cutoffs(len(label_names), multi_label)
    if cutoffs:
        top = logits.topk(max(cutoffs), dim=-1).indices.numpy()  # each text's best classes, best first
        scores.update(metrics["precision_at_k"].compute(predictions=top, references=references, k=cutoffs))
    if hierarchy is not None and not multi_label:
        scores.update(level_scores(metrics, predictions, references, label_names, hierarchy))
    return scores


def format_scores(scores: dict[str, float]) -> str:
    return ", ".join(f"{name.replace('_', '-')} {value:.4f}" for name, value in scores.items())
