"""Build tiny EAGLE-3 drafters the way speculators 0.9.0's train CLI builds them, with the real package: the draft
layer's config from ``create_transformer_layer_config`` (speculators/train/cli.py:113-231: every draft layer a
sliding-window one unless --full-attention-indices says otherwise), the model from
``Eagle3DraftModel.from_training_args`` (models/eagle3/core.py:368-414, the verifier's weights loaded from a local
tiny verifier), saved with ``save_pretrained``. Run as a script (it imports torch and transformers, which the test
process does not need): ``python build_train_cli.py OUT_DIR`` (variants: variants.py TRAIN_CLI).

OUT_DIR/verifier is the tiny verifier (a LlamaForCausalLM of 8 layers, hidden 64); OUT_DIR/NAME each drafter, with
OUT_DIR/NAME/written.json: what speculators wrote (the config's top-level and layer fields, the files, the tensor
names), which the tests hold the project's record of what speculators writes (engines/trainers.py) to.
"""

import json
import os
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from safetensors import safe_open
from speculators.models.eagle3.core import Eagle3DraftModel
from speculators.train.cli import create_transformer_layer_config
from transformers import LlamaConfig, LlamaForCausalLM


def verifier(out: str) -> str:
    path = os.path.join(out, "verifier")
    if not os.path.exists(os.path.join(path, "config.json")):
        torch.manual_seed(0)
        config = LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                             intermediate_size=128, vocab_size=512, num_hidden_layers=8, rms_norm_eps=1e-5,
                             max_position_embeddings=4096, rope_theta=1e6)
        LlamaForCausalLM(config).save_pretrained(path)
    return path


def build(out: str, v: dict) -> None:
    torch.manual_seed(0)
    target = verifier(out)
    layer = create_transformer_layer_config(target, 1, "llama", None, 2048, v.get("full_attention", []))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the default target layer ids warning (models/utils.py:135-139)
        model = Eagle3DraftModel.from_training_args(
            layer, t2d=None, d2t=None, verifier_name_or_path=target, draft_vocab_size=512, ttt_steps=3,
            norm_before_residual=v["norm_before_residual"], norm_before_fc=v["norm_before_fc"],
            norm_output=v["norm_output"])
    with torch.no_grad():  # trained-looking values: norms away from 1, so that a swap or a lost norm shows
        for name, p in model.named_parameters():
            if "norm" in name and "verifier" not in name:
                p.uniform_(0.5, 1.5)
    path = os.path.join(out, v["name"])
    model.save_pretrained(path)
    raw = json.load(open(os.path.join(path, "config.json")))
    with safe_open(os.path.join(path, "model.safetensors"), "np") as f:
        tensors = sorted(f.keys())
    written = {"fields": sorted(raw), "layer_fields": sorted(raw["transformer_layer_config"]),
               "files": sorted(os.listdir(path)), "tensors": tensors}
    with open(os.path.join(path, "written.json"), "w") as fh:
        json.dump(written, fh, indent=1)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from variants import TRAIN_CLI

    for variant in TRAIN_CLI:
        build(sys.argv[1], variant)
