"""The scorer of label attention as a config choice: every choice checked, saved and reloaded with the same logits;
old checkpoints (config.json without the key) load as the shared scorer they were trained with, whatever the default;
the normed scorer refuses label contributions, with the reason and the scorers that keep them; and the choice
reaches `labelattn train`."""

import json
from pathlib import Path

import pytest
import torch
from conftest import make_model

from configuration_labelattn import LabelAttnConfig, LabelAttnConfigError
from modeling_labelattn import LabelAttnForSequenceClassification, LabelAttnInputError

TEXTS = ["the screen cracked", "fast delivery but the screen cracked after two days of use", ""]
V1_CHECKPOINTS = Path(__file__).parent / "data" / "labelattn-v1"
SCORERS = [("shared", None), ("class_bias", None), ("per_class", None), ("per_class", 3), ("normed", None)]
HEADS = [{"scorer": scorer, "scorer_rank": rank} for scorer, rank in SCORERS]
HEADS += [{"scorer": "per_class", "label_projections": False}, {"scorer": "normed", "label_projections": False}]


def padded_batch(tokenizer) -> dict[str, torch.Tensor]:
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    batch["attention_mask"][-1] = 0
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(scorer="mlp"), "Unknown scorer 'mlp': choose one of"),
        (dict(scorer="shared", scorer_rank=4), "scorer_rank=4 sets the rank of a per-class scorer.*scorer='per_class'"),
        (dict(scorer="per_class", scorer_rank=0), r"scorer_rank must be an integer in \[1, hidden_size=128\]"),
        (dict(scorer="per_class", scorer_rank=129), r"scorer_rank must be an integer in \[1, hidden_size=128\]"),
        (dict(label_projections="no"), r"label_projections must be True .* or False .*, got 'no'"),
    ],
)
def test_bad_scorers_are_refused(kwargs, message):
    with pytest.raises(LabelAttnConfigError, match=message):
        LabelAttnConfig(num_labels=3, **kwargs)


@pytest.mark.parametrize("head", HEADS, ids=lambda head: "-".join(map(str, head.values())))
@pytest.mark.parametrize("backbone", ["context", "encoder"])
@torch.no_grad()
def test_every_scorer_gives_the_same_logits_after_save_and_reload(backbone, head, tokenizer, tmp_path):
    model = make_model(backbone, num_labels=5, **head)
    batch = padded_batch(tokenizer)
    before = model(**batch).logits
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert {key: saved[key] for key in head} == head
    reloaded = LabelAttnForSequenceClassification.from_pretrained(tmp_path).eval()
    assert {key: getattr(reloaded.config, key) for key in head} == head
    assert before[:-1].std() > 0.1
    torch.testing.assert_close(reloaded(**batch).logits, before, rtol=1e-5, atol=1e-5 * float(before.abs().max()))


@pytest.mark.parametrize("backbone", ["embedding", "encoder"])
def test_a_config_saved_before_the_choice_loads_as_the_shared_scorer(backbone):
    """The first version's config.json has no `scorer`: it means the shared scorer, even where the class default is
    another choice (`from_dict` fills it before the defaults apply)."""
    saved = json.loads((V1_CHECKPOINTS / backbone / "config.json").read_text())
    assert "scorer" not in saved
    assert LabelAttnConfig.__dataclass_fields__["scorer"].default in ("shared", "per_class")  # the default may move
    config = LabelAttnConfig.from_pretrained(V1_CHECKPOINTS / backbone)
    assert (config.scorer, config.scorer_rank, config.label_projections) == ("shared", None, True)
    assert LabelAttnConfig.from_dict(saved, scorer="per_class").scorer == "per_class"  # an explicit choice wins
    model = LabelAttnForSequenceClassification.from_pretrained(V1_CHECKPOINTS / backbone).eval()
    expected = json.loads((V1_CHECKPOINTS / backbone / "expected.json").read_text())
    inputs = {name: torch.tensor(expected[name]) for name in ("input_ids", "attention_mask")}
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs).logits, torch.tensor(expected["logits"]), rtol=1e-5, atol=1e-5)


def test_the_normed_scorer_refuses_label_contributions_and_says_why():
    model = make_model("context", scorer="normed")
    with pytest.raises(LabelAttnInputError, match=r"scorer='normed' is not.*root mean square.*scorer='per_class'"):
        model(input_ids=torch.tensor([[101, 7592, 102]]), output_label_contributions=True)


@torch.no_grad()
def test_a_per_class_bias_is_each_classs_prior(tokenizer):
    """With the class bias, a text of only padding scores each class's own bias: a prior per class."""
    model = make_model("context", num_labels=4, scorer="class_bias")
    model.classifier.class_bias.copy_(torch.tensor([0.0, 1.0, -2.0, 3.0]))
    logits = model(**padded_batch(tokenizer)).logits
    torch.testing.assert_close(logits[-1], model.classifier.bias + torch.tensor([0.0, 1.0, -2.0, 3.0]))


def model_of_train_options(options: list[str]) -> tuple[LabelAttnForSequenceClassification, object]:
    """The model `labelattn train --data trec <options>` builds for three classes, and the run's settings."""
    import argparse

    from labelattn.training import arguments, build, settings

    parser = argparse.ArgumentParser()
    arguments.add_arguments(parser)
    train_settings = settings.TrainSettings.from_args(parser.parse_args(["--data", "trec", *options]))
    return build.build_model(train_settings, ["a", "b", "c"], False, 30522), train_settings


@pytest.mark.parametrize(
    ("options", "scorer", "rank"), [([], None, None), (["--scorer", "per_class", "--scorer-rank", "8"], "per_class", 8)]
)
def test_labelattn_train_builds_the_scorer_it_is_given(options, scorer, rank):
    model, train_settings = model_of_train_options(options)
    default = LabelAttnConfig.__dataclass_fields__["scorer"].default
    assert model.config.scorer == (scorer or default) == train_settings.scorer
    assert model.config.scorer_rank == rank


@pytest.mark.parametrize(
    ("options", "projections"),
    [
        ([], LabelAttnConfig.__dataclass_fields__["label_projections"].default),
        (["--no-label-projections"], False),
        (["--label-projections"], True),
    ],
)
def test_labelattn_train_builds_the_label_projections_it_is_given(options, projections):
    model, train_settings = model_of_train_options(options)
    assert model.config.label_projections == projections == train_settings.label_projections
    head = model.labelattn.label_attention
    assert (head.query is not None, head.output is not None) == (projections, projections)


def test_labelattn_train_refuses_a_rank_without_a_per_class_scorer():
    import argparse

    from labelattn.training import arguments, settings

    parser = argparse.ArgumentParser()
    arguments.add_arguments(parser)
    with pytest.raises(settings.TrainingError, match="--scorer-rank sets the rank of a per-class scorer"):
        settings.TrainSettings.from_args(
            parser.parse_args(["--data", "trec", "--scorer", "shared", "--scorer-rank", "8"])
        )
