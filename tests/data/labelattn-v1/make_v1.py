"""Tiny checkpoints saved by the label-attention code of commit 90ce604 (before the fused/folded head), with the
logits that code gave, so that tests/test_modeling.py checks that today's code loads them to the same logits.

    cd <folder holding that commit's configuration_labelattn.py and modeling_labelattn.py>
    python make_v1.py OUTPUT_FOLDER
"""

import json
import sys
from pathlib import Path

import torch
from transformers import BertConfig

from configuration_labelattn import LabelAttnConfig
from modeling_labelattn import LabelAttnForSequenceClassification

INPUT_IDS = [[2, 17, 45, 9, 88, 3], [2, 60, 3, 0, 0, 0], [0, 0, 0, 0, 0, 0]]
ATTENTION_MASK = [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]]


def build(backbone: str) -> LabelAttnForSequenceClassification:
    torch.manual_seed(0)
    kwargs = dict(num_labels=5, hidden_size=16, num_attention_heads=4, vocab_size=100, max_seq_length=32)
    if backbone == "encoder":
        encoder = BertConfig(
            vocab_size=100,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=32,
        )
        kwargs = dict(num_labels=5, num_attention_heads=4, backbone="encoder", encoder_config=encoder)
    model = LabelAttnForSequenceClassification(LabelAttnConfig(**kwargs)).eval()
    with torch.no_grad():  # weights and biases of realistic scale, so that logits differ by O(1)
        for name, param in model.named_parameters():
            if "LayerNorm" in name:
                continue
            is_table = "embeddings" in name  # token, position and label embeddings: rows of unit scale
            param.normal_(0.0, 1.0 if is_table else 2.0 / param.shape[-1] ** 0.5 if param.dim() > 1 else 0.5)
    return model


for backbone in ("embedding", "encoder"):
    folder = Path(sys.argv[1]) / backbone
    model = build(backbone)
    model.save_pretrained(folder)
    for code in folder.glob("*.py"):
        code.unlink()
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(INPUT_IDS), attention_mask=torch.tensor(ATTENTION_MASK), output_attentions=True
        )
    record = dict(input_ids=INPUT_IDS, attention_mask=ATTENTION_MASK, logits=out.logits.tolist())
    (folder / "expected.json").write_text(json.dumps(record, indent=1) + "\n")
    print(backbone, out.logits)
