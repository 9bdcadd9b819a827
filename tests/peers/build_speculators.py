"""Build tiny EAGLE-3 drafters with the real speculators package and save them with its own
save_pretrained. Run as a script (it imports torch and transformers, which the test process does
not need): ``python build_speculators.py OUT_DIR VARIANTS.json``.

Each variant: {"name", "hidden_size", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "draft_vocab",
"layers", "aux", "norm_before_residual", "norm_before_fc", "model_type", "dtype"}.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import LlamaConfig, Qwen3Config  # noqa: E402

from speculators.config import SpeculatorsConfig, VerifierConfig  # noqa: E402
from speculators.models.eagle3 import Eagle3SpeculatorConfig  # noqa: E402
from speculators.models.eagle3.core import Eagle3DraftModel  # noqa: E402
from speculators.proposals.greedy import GreedyTokenProposalConfig  # noqa: E402


def build(out: str, v: dict) -> None:
    torch.manual_seed(0)
    layer_cls = Qwen3Config if v.get("model_type") == "qwen3" else LlamaConfig
    layer = layer_cls(hidden_size=v["hidden_size"], num_attention_heads=v["heads"], num_key_value_heads=v["kv_heads"],
                      head_dim=v["head_dim"], intermediate_size=v["intermediate"], vocab_size=v["vocab"],
                      num_hidden_layers=v["layers"], rms_norm_eps=1e-6, max_position_embeddings=4096)
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer, draft_vocab_size=v["draft_vocab"],
        norm_before_residual=v["norm_before_residual"], norm_before_fc=v.get("norm_before_fc", False),
        eagle_aux_hidden_state_layer_ids=v["aux"],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3", default_proposal_method="greedy",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            verifier=VerifierConfig(name_or_path=None, architectures=["LlamaForCausalLM"])))
    model = Eagle3DraftModel(config)
    with torch.no_grad():  # embed_tokens and lm_head start as NaN until verifier weights are loaded
        model.embed_tokens.weight.normal_()
        model.lm_head.weight.normal_()
    if v["draft_vocab"] < v["vocab"]:
        ids = torch.sort(torch.randperm(v["vocab"])[: v["draft_vocab"]]).values
        t2d = torch.zeros(v["vocab"], dtype=torch.bool)
        t2d[ids] = True
        model.load_vocab_mappings(t2d, ids - torch.arange(v["draft_vocab"]))
    model.to(getattr(torch, v.get("dtype", "float32"))).save_pretrained(os.path.join(out, v["name"]))


if __name__ == "__main__":
    out_dir, variants = sys.argv[1], json.loads(open(sys.argv[2]).read())
    for variant in variants:
        build(out_dir, variant)
