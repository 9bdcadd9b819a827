"""Build tiny EAGLE-3 drafters with the real speculators package, save them with its own save_pretrained, and
record speculators' own step-0 logits on random inputs. Run as a script (it imports torch and transformers,
which the test process does not need): ``python build_speculators.py OUT_DIR`` (variants: variants.py).

For float32 variants,
OUT_DIR/NAME/inputs.safetensors holds the inputs (the layout ``eagle3-checks forward`` reads) and
OUT_DIR/NAME/peer_logits.safetensors the draft-vocabulary logits of speculators' Eagle3DraftModel.forward, captured
at its lm_head.
"""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from safetensors.torch import save_file
from speculators.config import SpeculatorsConfig, VerifierConfig
from speculators.models.eagle3 import Eagle3SpeculatorConfig
from speculators.models.eagle3.core import Eagle3DraftModel
from speculators.proposals.greedy import GreedyTokenProposalConfig
from transformers import LlamaConfig, Qwen3Config

TOKENS = 12


def build(out: str, v: dict) -> None:
    torch.manual_seed(0)
    layer_cls = Qwen3Config if v.get("model_type") == "qwen3" else LlamaConfig
    layer = layer_cls(hidden_size=v["hidden_size"], num_attention_heads=v["heads"], num_key_value_heads=v["kv_heads"],
                      head_dim=v["head_dim"], intermediate_size=v["intermediate"], vocab_size=v["vocab"],
                      num_hidden_layers=v["layers"], rms_norm_eps=1e-6, max_position_embeddings=4096,
                      attention_bias=v.get("attention_bias", False), mlp_bias=v.get("mlp_bias", False),
                      **({"rope_theta": v["rope_theta"]} if "rope_theta" in v else {}))
    layer._attn_implementation = "eager"
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer, draft_vocab_size=v["draft_vocab"],
        norm_before_residual=v["norm_before_residual"], norm_before_fc=v.get("norm_before_fc", False),
        fc_norm=v.get("fc_norm", False), norm_output=v.get("norm_output", False),
        eagle_aux_hidden_state_layer_ids=v["aux"],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3", default_proposal_method="greedy",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            verifier=VerifierConfig(name_or_path="example-org/example-verifier", architectures=["LlamaForCausalLM"])))
    model = Eagle3DraftModel(config).eval()
    with torch.no_grad():  # embed_tokens and lm_head start as NaN until verifier weights are loaded
        if v.get("keep_nan"):
            model.to(torch.bfloat16).save_pretrained(os.path.join(out, v["name"]))
            return
        model.embed_tokens.weight.normal_()
        model.lm_head.weight.normal_(std=0.2)
        for name, p in model.named_parameters():  # norms away from 1 (swaps show), biases away from 0
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):
                p.normal_(std=0.5)
    if v["draft_vocab"] < v["vocab"]:
        ids = torch.sort(torch.randperm(v["vocab"])[: v["draft_vocab"]]).values
        t2d = torch.zeros(v["vocab"], dtype=torch.bool)
        t2d[ids] = True
        model.load_vocab_mappings(t2d, ids - torch.arange(v["draft_vocab"]))
    path = os.path.join(out, v["name"])
    dtype = getattr(torch, v.get("dtype", "float32"))
    if dtype == torch.float32:
        aux = torch.randn(TOKENS, len(v["aux"]) * v["hidden_size"])
        input_ids = torch.randint(0, v["vocab"], (TOKENS,))
        positions = torch.arange(TOKENS) + 1  # speculators' own default (models/eagle3/core.py)
        captured = []
        model.lm_head.register_forward_hook(lambda m, i, o: captured.append(o.detach()))
        with torch.no_grad():  # two TTT steps; step 1 is teacher-forced with the inputs shifted by one
            model(hidden_states=aux[None], input_ids=input_ids[None],
                  document_ids=torch.zeros(1, TOKENS, dtype=torch.long), position_ids=positions[None], ttt_steps=2)
        os.makedirs(path, exist_ok=True)
        save_file({"aux_hidden_states": aux.contiguous(), "input_ids": input_ids, "position_ids": positions,
                   "step_1_input_ids": torch.cat([input_ids[1:], input_ids.new_zeros(1)])},
                  os.path.join(path, "inputs.safetensors"))
        save_file({"draft_logits": captured[0][0].contiguous(), "draft_logits_step_1": captured[1][0].contiguous()},
                  os.path.join(path, "peer_logits.safetensors"))
    model.to(dtype).save_pretrained(path)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from variants import SPECULATORS, SPECULATORS_UNLOADED

    for variant in [*SPECULATORS, SPECULATORS_UNLOADED]:
        build(sys.argv[1], variant)
