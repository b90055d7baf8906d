"""Knowledge distillation (`labelattn train --distill-from`): the student learns from the labels and from the mean
probabilities that trained classifiers, its teachers, give each training text (Hinton et al., 2015):

    loss = (1 - w) x cross-entropy(labels, smoothed) + w x cross-entropy(the teachers' mean probabilities)

A teacher is any folder that `explainers.load_classifier` loads (a `labelattn train` model, or a transformers
sequence classifier) whose classes are the data's, in any order; it reads the texts with its own tokenizer. The
targets are computed once, before training, by `explainers.predict` (with each teacher's temperature) and kept as
two columns of the training split, so that every batch carries its rows' targets whatever the order, and a resumed
run computes the same ones again. transformers and Accelerate have no distillation loss; this module is its one
home.
"""

from typing import TYPE_CHECKING, Any, NamedTuple

from labelattn.training.settings import TrainingError, TrainSettings

if TYPE_CHECKING:  # torch loads when a run distils, so that --help stays fast
    import datasets
    import torch

# The classes kept of each text's target: the teachers' top classes, renormalised. On ICD-10-CM's 1,918 categories
# the top 32 of two MiniLM models hold 99.2% of their probability on average (the first alone 98.7%), and 32 numbers
# a row instead of 1,918 keep the split small.
TOP_CLASSES = 32
# The training split's columns that hold the targets, taken off each batch before the model sees it.
CLASSES, PROBABILITIES = "teacher_classes", "teacher_probabilities"
# Texts a teacher reads at a time (each teacher's `predict` batches them by length within it).
CHUNK = 4096


class Teacher(NamedTuple):
    folder: str
    model: Any  # a transformers sequence classifier
    tokenizer: Any
    order: list[int]  # the data's class of each of the model's outputs


def load_teachers(settings: TrainSettings, label_names: list[str], multi_label: bool) -> list[Teacher]:
    """The teachers of `--distill-from`, checked before any folder is written: a folder that does not load as a
    classifier, that scores each class on its own (multi-label), or whose classes are not the data's, is refused
    with its name."""
    from explainers import ExplainerError, load_classifier
    from explainers.loading import class_names
    from explainers.models import is_multi_label

    if multi_label:
        raise TrainingError(
            "--distill-from trains against the teachers' probabilities of one class per text, and this data has a "
            "set of labels per row: drop the option."
        )
    position = {name: index for index, name in enumerate(label_names)}
    teachers = []
    for folder in settings.distill_from:
        try:
            model, tokenizer = load_classifier(folder)
        except ExplainerError as error:
            raise TrainingError(f"--distill-from {folder}: {error}") from None
        if is_multi_label(model):
            raise TrainingError(
                f"--distill-from {folder}: a teacher must give one probability distribution over the classes, and "
                "this one scores each class on its own (multi-label): give a single-label classifier."
            )
        names = class_names(model.config)
        if set(names) != set(label_names):
            missing, extra = sorted(set(label_names) - set(names)), sorted(set(names) - set(label_names))
            raise TrainingError(
                f"--distill-from {folder}: a teacher must have the data's classes, and this one lacks "
                f"{missing[:5]} ({len(missing)}) and has {extra[:5]} ({len(extra)}) besides: give a model trained "
                "on this data's classes."
            )
        teachers.append(Teacher(folder, model, tokenizer, [position[name] for name in names]))
    return teachers


def teacher_targets(
    teachers: list[Teacher],
    texts: list[str],
    num_labels: int,
    device: "str | torch.device",
    batch_size: int = 64,
    bar: Any = None,
) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Each text's target: `(classes, probabilities)`, both `(texts, TOP_CLASSES)` (or fewer columns when there are
    fewer classes), the teachers' mean probabilities of their top classes, renormalised to sum to 1. The teachers
    are back on the CPU afterwards, their accelerator memory the student's."""
    import torch

    from explainers import ExplainerError, predict

    for teacher in teachers:
        teacher.model.to(device)
    classes, probabilities = [], []
    for start in range(0, len(texts), CHUNK):
        chunk = texts[start : start + CHUNK]
        mean = torch.zeros(len(chunk), num_labels)
        for teacher in teachers:
            try:
                given = predict(teacher.model, teacher.tokenizer, chunk, batch_size=batch_size).probabilities
            except ExplainerError as error:  # logits that are not finite, say: the message names the teacher
                raise TrainingError(f"--distill-from {teacher.folder}: {error}") from None
            mean[:, teacher.order] += given / len(teachers)
        top = mean.topk(min(TOP_CLASSES, num_labels), dim=-1)
        classes.append(top.indices)
        probabilities.append(top.values / top.values.sum(-1, keepdim=True))
        if bar is not None:
            bar.update(len(chunk))
    for teacher in teachers:
        teacher.model.to("cpu")
    return torch.cat(classes), torch.cat(probabilities)


def with_teacher_targets(
    split: "datasets.Dataset", teachers: list[Teacher], num_labels: int, device: "str | torch.device", show: bool
) -> "datasets.Dataset":
    """The training split with the teachers' targets as two columns (`CLASSES`, `PROBABILITIES`)."""
    from tqdm.auto import tqdm

    texts = split["text"][:]
    with tqdm(total=len(texts), desc="teachers' probabilities", unit="text", disable=not show) as bar:
        classes, probabilities = teacher_targets(teachers, texts, num_labels, device, bar=bar)
    return split.add_column(CLASSES, classes.tolist()).add_column(PROBABILITIES, probabilities.tolist())


def pop_targets(batch: dict) -> "tuple[torch.Tensor, torch.Tensor] | None":
    """The batch's teacher targets `(classes, probabilities)`, taken off it; None without `--distill-from`."""
    if CLASSES not in batch:
        return None
    return batch.pop(CLASSES), batch.pop(PROBABILITIES)


def distillation_loss(logits: "torch.Tensor", classes: "torch.Tensor", probabilities: "torch.Tensor") -> "torch.Tensor":
    """The cross-entropy of the student's softmax against the teachers' targets, averaged over the batch."""
    import torch

    log_probabilities = torch.log_softmax(logits.float(), dim=-1).gather(1, classes)
    return -(probabilities.to(log_probabilities.dtype) * log_probabilities).sum(-1).mean()
