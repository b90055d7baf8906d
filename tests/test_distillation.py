"""The teachers' targets of `labelattn train --distill-from` (`labelattn.training.distillation`); the option's runs
and refusals are tested in test_train.py."""

import pytest
import torch
from conftest import make_model

from explainers import predict
from labelattn.training.distillation import Teacher, distillation_loss, teacher_targets
from labelattn.training.settings import TrainingError

TEXTS = ["a zebra in the fern", "granite and more granite", "the fern", "zebra", "a stone of granite by a fern"]


def test_the_targets_are_the_teachers_mean_probabilities_in_the_datas_class_order(tokenizer):
    """Two teachers, one with the data's classes in another order: each text's target is the mean of their
    probabilities with the classes matched by name, all 3 kept (fewer than the top 32), summing to 1."""
    first, second = make_model(seed=0), make_model(seed=1)
    order = [2, 0, 1]  # the second teacher's output j is the data's class order[j]
    classes, probabilities = teacher_targets(
        [Teacher("first", first, tokenizer, [0, 1, 2]), Teacher("second", second, tokenizer, order)],
        TEXTS,
        num_labels=3,
        device="cpu",
    )
    expected = predict(first, tokenizer, TEXTS).probabilities / 2
    expected[:, order] += predict(second, tokenizer, TEXTS).probabilities / 2
    assert classes.shape == probabilities.shape == (len(TEXTS), 3)
    torch.testing.assert_close(probabilities, expected.gather(1, classes))
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(len(TEXTS)))
    assert (probabilities[:, :-1] >= probabilities[:, 1:]).all()  # the most probable class first


def test_the_loss_is_the_cross_entropy_against_the_targets():
    """Against a one-class target the loss is cross-entropy's; against spread ones, -sum q log p over the kept
    classes, whatever their order."""
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 3.0, 1.0]])
    one_class = distillation_loss(logits, torch.tensor([[1], [2]]), torch.tensor([[1.0], [1.0]]))
    torch.testing.assert_close(one_class, torch.nn.functional.cross_entropy(logits, torch.tensor([1, 2])))
    spread = torch.tensor([[0.7, 0.2, 0.1], [0.5, 0.5, 0.0]])
    shuffled = torch.tensor([[2, 0, 1], [1, 0, 2]])
    full = torch.zeros(2, 3).scatter(1, shuffled, spread)
    expected = -(full * torch.log_softmax(logits, -1)).sum(-1).mean()
    torch.testing.assert_close(distillation_loss(logits, shuffled, spread), expected)


def test_a_teacher_whose_logits_are_not_finite_is_refused_by_its_folder(tokenizer):
    """A teacher that gives NaN logits (a diverged model) would turn every target into NaN: refused, named."""
    broken = make_model(seed=0)
    with torch.no_grad():
        for weight in broken.parameters():
            weight.fill_(float("nan"))
    teachers = [
        Teacher("good", make_model(seed=1), tokenizer, [0, 1, 2]),
        Teacher("broken", broken, tokenizer, [0, 1, 2]),
    ]
    with pytest.raises(TrainingError, match=r"^--distill-from broken: The model gives logits that are not finite"):
        teacher_targets(teachers, TEXTS, num_labels=3, device="cpu")
