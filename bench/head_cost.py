"""The label-attention head's cost by scorer, heads and key width: one training step (forward and backward) and one
eval forward of the whole model, against mean pooling, interleaved in one process.

    python bench/head_cost.py 6 50 1918
    python bench/head_cost.py 6 --old-revision 8a67e09      # also a git revision's head, with its default config

The model is the embedding backbone as `labelattn train` builds it (384 wide, the table frozen, no dropout; below
1,000 classes a token context of 5 and label projections, from 1,000 a context of 3 and each class's own query), on
random token ids: 32 texts × 24 tokens, every other text half padding. One torch thread and the CPU time of that
thread (a shared machine deschedules it), 3 interleaved rounds of 2 steps, medians, in ms.
"""

import argparse
import subprocess
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import configuration_labelattn  # noqa: E402
import modeling_labelattn  # noqa: E402
from labelattn.training.settings import TrainSettings  # noqa: E402

SYSTEMS = {
    "4 heads, keys 96, shared": dict(scorer="shared"),
    "4 heads, keys 96, per_class r16": dict(scorer="per_class", scorer_rank=16),
    "4 heads, keys 96, per_class": dict(scorer="per_class"),
    "4 heads, keys 96, normed": dict(scorer="normed"),
    "1 head, keys 32, shared": dict(num_attention_heads=1, attention_key_size=32, scorer="shared"),
    "1 head, keys 32, per_class r16": dict(
        num_attention_heads=1, attention_key_size=32, scorer="per_class", scorer_rank=16
    ),
    "1 head, keys 32, per_class r64": dict(
        num_attention_heads=1, attention_key_size=32, scorer="per_class", scorer_rank=64
    ),
    "1 head, keys 32, per_class": dict(num_attention_heads=1, attention_key_size=32, scorer="per_class"),
    "mean pooling": dict(pooling="mean"),
}


def config_kwargs(num_labels: int, **kwargs) -> dict:
    train = TrainSettings.of_command([], num_labels)  # labelattn train's defaults for this class count
    base = dict(num_labels=num_labels, hidden_size=384, token_context_width=train.token_context_width)
    base |= {"label_projections": train.label_projections, "embedding_dropout": 0.0}
    return {**base, "classifier_dropout": 0.0, "max_seq_length": 128, **kwargs}


def old_head(revision: str) -> types.ModuleType:
    """`modeling_labelattn` as it was at `revision`, with that revision's config."""
    sources = {}
    for name in ("configuration_labelattn", "modeling_labelattn"):
        sources[name] = subprocess.run(
            ["git", "show", f"{revision}:{name}.py"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout
    config = types.ModuleType("old_configuration_labelattn")
    exec(compile(sources["configuration_labelattn"], "old_configuration", "exec"), config.__dict__)
    sys.modules["old_configuration_labelattn"] = config
    model = types.ModuleType("old_modeling_labelattn")
    code = sources["modeling_labelattn"].replace(
        "from configuration_labelattn import", "from old_configuration_labelattn import"
    )
    exec(compile(code, "old_modeling", "exec"), model.__dict__)
    model.LabelAttnConfig = config.LabelAttnConfig
    return model


def stepper(model, train: bool):
    torch.manual_seed(0)
    ids = torch.randint(1000, 30000, (32, 24))
    mask = torch.ones(32, 24, dtype=torch.long)
    mask[::2, 12:] = 0
    labels = torch.randint(0, model.config.num_labels, (32,))
    model.train(train)
    model.get_input_embeddings().weight.requires_grad_(False)

    def step():
        if train:
            model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
            model.zero_grad()
        else:
            with torch.no_grad():
                model(input_ids=ids, attention_mask=mask)

    return step


def timed(systems: dict, steps: int = 2, rounds: int = 3) -> dict[str, float]:
    for step in systems.values():
        step()
    times = {name: [] for name in systems}
    for _ in range(rounds):
        for name, step in systems.items():
            start = time.process_time()
            for _ in range(steps):
                step()
            times[name].append((time.process_time() - start) / steps * 1000)
    return {name: sorted(values)[len(values) // 2] for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("classes", nargs="+", type=int)
    parser.add_argument("--old-revision", help="Also time the head of this git revision, with its default config.")
    cli = parser.parse_args()
    torch.set_num_threads(1)
    print("| classes | system | train step ms | eval forward ms | train against mean pooling |\n|---|---|---|---|---|")
    for classes in cli.classes:
        models = {}
        for name, kwargs in SYSTEMS.items():
            config = configuration_labelattn.LabelAttnConfig(**config_kwargs(classes, **kwargs))
            models[name] = modeling_labelattn.LabelAttnForSequenceClassification(config)
        if cli.old_revision:
            old = old_head(cli.old_revision)
            models[f"{cli.old_revision}, its default"] = old.LabelAttnForSequenceClassification(
                old.LabelAttnConfig(**config_kwargs(classes))
            )
        train = timed({name: stepper(model, True) for name, model in models.items()})
        evaluate = timed({name: stepper(model, False) for name, model in models.items()})
        for name in models:
            ratio = train["mean pooling"] / train[name]
            print(f"| {classes:,} | {name} | {train[name]:.1f} | {evaluate[name]:.1f} | {ratio:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
