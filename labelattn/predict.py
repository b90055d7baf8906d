"""`labelattn predict MODEL DATA`: the predicted label and every class probability of every row of a corpus.

labelattn predict models/trec-embedding trec --output out/trec.parquet
labelattn predict models/trec-embedding tickets.csv --text-column body --id-column ticket_id --output out/t.jsonl
accelerate launch --num_processes 8 -m labelattn predict MODEL tickets.parquet --output out/t.parquet

The rows are computed in shards written to `<output>.shards/` as they are made; the same command run again after
an interruption skips the finished shards.
"""

import argparse

from labelattn.arguments import add_model_arguments
from labelattn.corpus.command import DATA_HELP, add_corpus_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    parser.add_argument("model", help="a text classifier: a local folder or a Hub id in the cache (any architecture)")
    parser.add_argument("data", help=f"the rows to predict: {DATA_HELP}")
    add_corpus_arguments(parser, default_output="outputs/predictions/<data>.parquet")
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="multi-label models: the probability from which a label is predicted (default 0.5)",
    )
    parser.add_argument("--batch-size", type=int, default=32, help="texts per forward pass (default 32)")
    add_model_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from labelattn.corpus.command import open_corpus_run, run_to_file
    from labelattn.corpus.jobs import predict_job

    output, dataset, model, tokenizer = open_corpus_run(args, "predictions", "")
    job = predict_job(
        model,
        tokenizer,
        batch_size=args.batch_size,
        max_length=args.max_length,
        threshold=args.threshold,
        long_text=args.long_text,
    )
    run_to_file(job, dataset, output, args)
    return 0
