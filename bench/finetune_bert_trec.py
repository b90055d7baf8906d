"""A plain BERT-architecture TREC classifier for the benchmarks: the MiniLM encoder (all-MiniLM-L6-v2) under
transformers' own `BertForSequenceClassification` head, fine-tuned with `transformers.Trainer` on the TREC train
split of `labelattn.data.reading.load_data("trec")`, saved (safetensors, with its tokenizer) to `models/trec-bert`.

No labelattn code is in the model: it stands for "any Hub text classifier" in bench/ig_speed.py and the docs.
5 to 15 minutes on 2 CPU cores, depending on other load (2 epochs, max_length 64, one thread).

    .venv/bin/python bench/finetune_bert_trec.py [--output-dir models/trec-bert] [--epochs 2]
"""

import argparse
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from transformers import (
    AutoTokenizer,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)

from labelattn import minilm_path
from labelattn.data.reading import load_data

MAX_LENGTH = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", default="models/trec-bert")
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    # One thread: on 2 cores shared with other jobs, two threads spin-wait on each other and run slower.
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    data = load_data("trec")
    names = data.label_names
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    splits = data.splits.map(
        lambda rows: tokenizer(rows["text"], truncation=True, max_length=MAX_LENGTH),
        batched=True,
        remove_columns=["id", "text"],
    ).rename_column("label", "labels")
    model = BertForSequenceClassification.from_pretrained(
        minilm_path(),
        num_labels=len(names),
        id2label=dict(enumerate(names)),
        label2id={name: i for i, name in enumerate(names)},
    )
    with tempfile.TemporaryDirectory(prefix="trec-bert-trainer-") as scratch:
        trainer = Trainer(
            model=model,
            args=TrainingArguments(
                output_dir=scratch,  # Trainer wants one; nothing is saved there (save_strategy="no")
                num_train_epochs=args.epochs,
                learning_rate=args.learning_rate,
                warmup_steps=0.1,  # a fraction of the steps
                per_device_train_batch_size=32,
                per_device_eval_batch_size=64,
                train_sampling_strategy="group_by_length",  # little padding: the questions are 5 to 40 tokens
                save_strategy="no",
                eval_strategy="no",
                report_to="none",
                logging_steps=50,
                seed=args.seed,
                use_cpu=True,
            ),
            train_dataset=splits["train"],
            data_collator=DataCollatorWithPadding(tokenizer),
            compute_metrics=lambda p: {"accuracy": float(np.mean(np.argmax(p.predictions, -1) == p.label_ids))},
        )
        trainer.train()
        for split in ("validation", "test"):
            accuracy = trainer.evaluate(splits[split], metric_key_prefix=split)[f"{split}_accuracy"]
            print(f"{split} accuracy: {accuracy:.4f}")
    model.save_pretrained(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
    print(f"Saved {args.output_dir}")


if __name__ == "__main__":
    main()
