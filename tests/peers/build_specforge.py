"""Build tiny flat EAGLE-3 drafters with SpecForge's own model class (0.2.0, installed --no-deps), record its
step-0 logits on random inputs, and export each with SpecForge's SGLang exporter. Run as a script:
``python build_specforge.py OUT_DIR`` (variants: variants.py).

SpecForge's package __init__ modules import its training stack, so they are replaced by empty package objects
(the model module itself is imported unchanged). The sizes are the embedded example's
(GQA 4/2 heads of 24, hidden 64, draft vocabulary 128 of 512). OUT_DIR/NAME gets SpecForge's export (config.json,
model.safetensors without embed_tokens), inputs.safetensors (with inputs_embeds) and peer_logits.safetensors.
"""

import importlib.util
import os
import sys
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")

_root = os.path.dirname(importlib.util.find_spec("specforge").origin)
for _name in ("specforge", "specforge.modeling", "specforge.modeling.draft", "specforge.export"):
    _module = types.ModuleType(_name)
    _module.__path__ = [os.path.join(_root, *_name.split(".")[1:])]
    sys.modules[_name] = _module

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from specforge.export.checkpoint_io import apply_legacy_rope_scaling  # noqa: E402
from specforge.export.to_sglang import _serving_state  # noqa: E402
from specforge.modeling.draft.llama3_eagle import LlamaForCausalLMEagle3  # noqa: E402
from transformers import LlamaConfig  # noqa: E402

TOKENS = 12
H, V, DV = 64, 512, 128


def build(out: str, v: dict) -> None:
    torch.manual_seed(0)
    extra = {"rope_scaling": v["rope"]} if v.get("rope") else {}
    config = LlamaConfig(hidden_size=H, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                         intermediate_size=160, vocab_size=V, num_hidden_layers=1, rms_norm_eps=1e-6,
                         max_position_embeddings=8192, rope_theta=v.get("rope_theta", 1e6),
                         architectures=["LlamaForCausalLMEagle3"], **extra)
    config.draft_vocab_size = DV
    config.fc_norm = v.get("fc_norm", False)
    if v.get("target_hidden_size"):
        config.target_hidden_size = v["target_hidden_size"]
    model = LlamaForCausalLMEagle3(config, attention_backend="sdpa").eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(std=0.1)
        ids = torch.sort(torch.randperm(V)[:DV]).values
        model.t2d.zero_()
        model.t2d[ids] = True
        model.d2t.copy_(ids - torch.arange(DV))
        ht = getattr(config, "target_hidden_size", H)
        aux = torch.randn(TOKENS, 3 * ht)
        embeds = torch.randn(TOKENS, H)
        normed = model(hidden_states=aux[None], inputs_embeds=embeds[None])
        logits = model.lm_head(normed)[0]
    path = os.path.join(out, v["name"])
    full = {k: t for k, t in model.state_dict().items() if "embed" not in k.lower()}
    model.save_pretrained(path, state_dict=_serving_state(full, {}))
    apply_legacy_rope_scaling(path)
    save_file({"aux_hidden_states": aux.contiguous(), "input_ids": torch.zeros(TOKENS, dtype=torch.long),
               "position_ids": torch.arange(TOKENS), "inputs_embeds": embeds.contiguous()},
              os.path.join(path, "inputs.safetensors"))
    save_file({"draft_logits": logits.contiguous()}, os.path.join(path, "peer_logits.safetensors"))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from variants import SPECFORGE

    for variant in SPECFORGE:
        build(sys.argv[1], variant)
