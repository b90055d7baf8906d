"""`labelattn train --group-by-length`: batches of texts of like length, every row once an epoch, the order drawn
from the seed and the epoch alone (so that a resumed run replays it), built as `labelattn train` builds its loaders.
The end-to-end resume with it is `tests/test_train.py`'s."""

import argparse
import itertools
import random

import pytest
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration

from labelattn.data.reading import load_data
from labelattn.training import arguments, build, settings


def loader(path, *options: str, split: str = "train"):
    """The `split` loader of `labelattn train --data path <options>`, prepared by Accelerate as a run prepares it."""
    parser = argparse.ArgumentParser()
    arguments.add_arguments(parser)
    train_settings = settings.TrainSettings.from_args(
        parser.parse_args(["--data", str(path), "--output-dir", "unused", "--batch-size", "8", *options])
    )
    data = load_data(str(path))
    tokenizer = build.load_tokenizer("embedding")
    loaders = build.tokenized_loaders(data, tokenizer, train_settings, 64, train_settings.seed)
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=0))
    return accelerator, accelerator.prepare(loaders[split])


def epoch(prepared, number: int, skip: int = 0, accelerator=None) -> list[list[int]]:
    """Each batch's token counts per row (its attention mask's sums) and labels in epoch `number`, after `skip`
    batches."""
    prepared.set_epoch(number)
    batches = accelerator.skip_first_batches(prepared, skip) if skip else prepared
    return [batch["attention_mask"].sum(1).tolist() + batch["labels"].tolist() for batch in batches]


@pytest.fixture(scope="module")
def varied_csv(tmp_path_factory):
    """400 texts of 1 to 40 words, their label their length's parity (any label serves: only the order is tested)."""
    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "near", "one", "big", "red", "door"]
    rows = []
    for _ in range(400):
        n = rng.randint(1, 40)
        rows.append(f"{' '.join(rng.choice(words) for _ in range(n))},{'odd' if n % 2 else 'even'}")
    path = tmp_path_factory.mktemp("varied") / "varied.csv"
    path.write_text("text,label\n" + "\n".join(rows) + "\n")
    return path


def padded_tokens(batches: list) -> int:
    return sum(max(b["attention_mask"].sum(1)) * b["attention_mask"].shape[0] for b in batches)


def test_grouped_batches_pad_less_and_hold_every_row_once(varied_csv):
    _, shuffled = loader(varied_csv)
    _, grouped = loader(varied_csv, "--group-by-length")
    shuffled.set_epoch(0)
    grouped.set_epoch(0)
    plain, like = list(shuffled), list(grouped)
    real = sum(b["attention_mask"].sum().item() for b in plain)
    assert sum(b["attention_mask"].sum().item() for b in like) == real  # the same rows, every one once
    assert len(like) == len(plain)
    # Lengths of 1-40 words: a random batch of 8 is padded to near its longest; a grouped one to its rows' own.
    assert padded_tokens(like) <= 1.15 * real < padded_tokens(plain)
    # ... and the batches come in a random order of lengths, not swept from long to short: about half the steps
    # from one batch to the next go to longer texts (a sorted sweep: only where one mega-batch of 8 batches ends).
    longest = [b["attention_mask"].sum(1).max().item() for b in like]
    assert sum(b > a for a, b in itertools.pairwise(longest)) >= 0.3 * (len(longest) - 1)


def test_grouped_order_depends_on_the_seed_and_epoch_alone(varied_csv):
    accelerator, first = loader(varied_csv, "--group-by-length")
    _, again = loader(varied_csv, "--group-by-length")
    _, other_seed = loader(varied_csv, "--group-by-length", "--seed", "1")
    epochs = [epoch(first, n) for n in (0, 1)]
    assert epochs[0] != epochs[1]  # a new order each epoch
    assert epoch(again, 1) == epochs[1]  # a fresh loader (a resumed run) draws the same epoch
    assert epoch(other_seed, 0) != epochs[0]
    # Resuming after 5 batches of epoch 1 gives the rest of that epoch's batches.
    _, resumed = loader(varied_csv, "--group-by-length")
    assert epoch(resumed, 1, skip=5, accelerator=accelerator) == epochs[1][5:]


@pytest.mark.parametrize("split", ["validation", "test"])
def test_validation_and_test_are_read_shortest_first_every_row_once(varied_csv, split):
    """Less padding, whose cost the head pays at every class; the scores are the same in any order, so long as no row
    is lost or read twice."""
    _, prepared = loader(varied_csv, split=split)
    batches = list(prepared)
    lengths = [n for batch in batches for n in batch["attention_mask"].sum(1).tolist()]
    assert sorted(i for batch in batches for i in batch["id"].tolist()) == sorted(
        load_data(str(varied_csv)).splits[split]["id"][:]
    )
    assert lengths == sorted(lengths) and len(set(lengths)) > 5
