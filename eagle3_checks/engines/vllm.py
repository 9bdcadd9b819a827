"""vLLM 0.33.0's reading of an EAGLE-3 drafter.

Mirrors (vLLM 0.33.0 source release):
- ``transformers_utils/config.py``: a config with ``speculators_config`` is a speculators config;
- ``transformers_utils/configs/speculators/algos.py::update_eagle3``: the fields taken from a speculators config:
  ``norm_before_residual`` defaults to **True** when absent (speculators itself defaults to False),
  ``norm_before_fc``/``fc_norm``/``norm_output`` to False, ``target_hidden_size`` only when not null, aux ids to the
  top level; only ``llama`` and ``qwen3`` layer types map to an architecture, others raise;
- ``model_executor/models/llama_eagle3.py``: ``midlayer.`` is renamed ``layers.0.``; ``t2d`` is skipped; ``d2t``
  becomes ``draft_id_to_target_id``, which exists only when draft_vocab_size != the target vocab; every other name
  gets a ``model.`` prefix (so a ``model.``-prefixed checkpoint fails); missing tensors raise nothing (left
  uninitialised; norms stay ones); ``input_norm`` is dropped unless ``norm_before_fc`` (read from ``eagle_config``
  first, then the top level); fc input = ``target_hidden_size`` (getattr, default hidden_size) x
  (``num_aux_hidden_states`` or len(``eagle_config.eagle_aux_hidden_state_layer_ids``) or 3); the fed-back state is
  the normed output only with ``norm_output``; lm_head is the draft vocabulary (``draft_vocab_size``, default
  vocab_size), shared from the target when the checkpoint has none;
- ``model_executor/models/llama.py``: head_dim is the config's ``head_dim`` or hidden_size / heads; q/k/v and o
  carry a bias when ``attention_bias``, the MLP when ``mlp_bias``; an unexpected ``*.bias`` is skipped silently.
"""

from __future__ import annotations

from typing import Any

from ..layout import FLAT, SPECULATORS, str_list
from .reading import (Reading, finish, is_int, layer_fields, lookup, map_roles, model_type_of, read_aux_ids,
                      read_max_position, read_rope, read_sizes)

VERSION = "0.33.0"
NAME = "vllm"
# model_type -> head_dim default of the config class vLLM parses it with (kimi_k2: DeepseekV3Config).
_HEAD_DIM_DEFAULT = {"kimi_k2": (64, "DeepseekV3Config"), "deepseek_v3": (64, "DeepseekV3Config")}
# model_executor/models/registry.py: EAGLE-3 drafter classes with Llama layers (llama_eagle3.py) and Qwen3 layers
# (qwen3_eagle3.py). vLLM's Eagle3DeepseekV2/V3ForCausalLM are MLA drafters, which eagle3-checks does not model.
LLAMA_LAYER_ARCHS = {"LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3MiniMaxM2ForCausalLM",
                     "Eagle3Qwen2_5vlForCausalLM", "Eagle3Qwen3vlForCausalLM", "PeagleLlamaForCausalLM"}
QWEN3_LAYER_ARCHS = {"Eagle3Qwen3ForCausalLM", "PeagleQwen3ForCausalLM"}
MLA_ARCHS = {"Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"}
# config/speculative.py _CACHE_ONLY_ROPE_TYPES: a draft with these rope types gets its max_position_embeddings raised
# to the target's max_model_len; with others vLLM limits max_model_len to the draft's.
CACHE_ONLY_ROPE_TYPES = {"default", "linear", "llama3", "ntk", "proportional"}


def eagle3_architecture(architectures: Any) -> tuple[str | None, str]:
    """transformers_utils/configs/eagle.py (EAGLEConfig, method eagle3): each name not starting or ending with
    Eagle3 gets the prefix Eagle3; the first name the registry knows is built."""
    names = str_list(architectures) or []
    mapped = [a if a.startswith("Eagle3") or a.endswith("Eagle3") else f"Eagle3{a}" for a in names]
    for name in mapped:
        if name in LLAMA_LAYER_ARCHS | QWEN3_LAYER_ARCHS | MLA_ARCHS:
            return name, f"architectures {names} -> {name}"
    return None, f"architectures {names} -> {mapped}"


def read(ckpt: Any) -> Reading:
    raw = ckpt.config_raw or {}
    speculators = ckpt.layout == SPECULATORS
    r = Reading(NAME, VERSION, ckpt.layout)
    where = "transformer_layer_config." if speculators else ""
    fields_ = layer_fields(raw, speculators)
    model_type = model_type_of(r, fields_, "llama")
    if speculators and model_type not in ("llama", "qwen3"):
        r.refusals.append(f"vLLM raises \"Unsupported model_type {model_type} for Eagle3 speculator\"")
    # A speculators config becomes a plain PreTrainedConfig (no class defaults: head_dim falls back to H/nh in the
    # attention layer); a flat one is parsed by its model_type's transformers class (kimi_k2: DeepseekV3Config).
    default = (None, "vLLM: a speculators config has no class default") if speculators else \
        _HEAD_DIM_DEFAULT.get(model_type, (None, "transformers LlamaConfig"))
    read_sizes(r, fields_, where, default)
    # llama.py: getattr(config, "max_position_embeddings", 8192); a flat config's class has its own default.
    read_max_position(r, fields_, where, 8192 if speculators else 4096 if model_type in _HEAD_DIM_DEFAULT else 2048)
    read_rope(r, fields_, where)
    if speculators:
        arch = "Eagle3Qwen3ForCausalLM" if model_type == "qwen3" else "Eagle3LlamaForCausalLM"
        r.set("architecture", arch, f"update_eagle3: model_type {model_type!r}")
    else:
        arch, how = eagle3_architecture(raw.get("architectures"))
        r.set("architecture", arch, how)
        if arch is None:
            r.refusals.append(f"vLLM raises \"Model architectures ... are not supported\": {how} names no EAGLE-3 "
                              "drafter class it registers")
        elif arch in MLA_ARCHS:
            r.refusals.append(f"{arch} is vLLM's MLA drafter (deepseek_eagle3.py), with other tensors than a "
                              "Llama-layer drafter: eagle3-checks does not model it")
    qwen3 = r.architecture in QWEN3_LAYER_ARCHS
    r.set("qk_norm", qwen3, r.sources["architecture"])
    if r.hidden_act != "silu":  # llama.py LlamaMLP and qwen2.py Qwen2MLP (Qwen3's) raise for any other
        r.refusals.append(f"vLLM raises \"Unsupported activation: {r.hidden_act}. Only silu is supported for now.\" "
                          "(llama.py LlamaMLP, qwen2.py Qwen2MLP)")

    def top(name: str, default: Any, why: str) -> Any:
        found, value, key = lookup(raw, (name,))
        if found and value is not None:
            r.sources[name] = f"config.json: {key}"
            return value
        r.sources[name] = why
        return default

    if speculators:
        r.set("norm_before_residual", bool(top("norm_before_residual", True,
                                                "vLLM default when absent: True (update_eagle3)")),
              r.sources["norm_before_residual"])
        r.set("input_norm", bool(top("norm_before_fc", False, "vLLM default: False")), r.sources["norm_before_fc"])
    else:
        r.set("norm_before_residual", bool(top("norm_before_residual", False, "vLLM default (flat config): False")),
              r.sources["norm_before_residual"])
        found, value, key = lookup(raw, ("eagle_config", "norm_before_fc"), ("norm_before_fc",))
        r.set("input_norm", bool(value) if found else False, f"config.json: {key}" if found else "vLLM default: False")
    r.set("fc_norm", bool(top("fc_norm", False, "vLLM default: False")), r.sources["fc_norm"])
    normed = bool(top("norm_output", False, "vLLM default: False"))
    r.set("feedback", "normed" if normed else "prenorm", r.sources["norm_output"])
    r.set("final_norm", True, "vLLM always applies the final norm before lm_head")
    r.set("lm_head_from_embed", False, "vLLM's EAGLE-3 drafter has its own lm_head (shared from the target if absent)")

    dv = raw.get("draft_vocab_size")
    r.set("draft_vocab_size", dv if is_int(dv) else r.vocab_size,
          "config.json: draft_vocab_size" if is_int(dv) else "vLLM default: vocab_size")

    if "target_hidden_size" in raw and raw["target_hidden_size"] is None and not speculators:
        r.refusals.append("config.json sets target_hidden_size to null: vLLM computes None x 3 for fc's input "
                          "(TypeError at load)")
        r.set("target_hidden_size", r.hidden_size, "config.json: target_hidden_size is null")
    else:
        ht = raw.get("target_hidden_size")
        r.set("target_hidden_size", ht if is_int(ht) else r.hidden_size,
              "config.json: target_hidden_size" if is_int(ht) else "vLLM default: hidden_size")
    # The ids captured: v1/worker/gpu/spec_decode/eagle/eagle3_utils.py get_eagle3_aux_layers_from_config (the V2
    # model runner, vLLM 0.33's default for EAGLE-3) reads the top-level eagle_aux_hidden_state_layer_ids, then
    # eagle_config["layer_ids"]; never eagle_config["eagle_aux_hidden_state_layer_ids"] (only the V1 runner did).
    # update_eagle3 puts a speculators config's ids at the top level.
    read_aux_ids(r, raw, (("eagle_aux_hidden_state_layer_ids",), ("eagle_config", "layer_ids")),
                 "vLLM default: (2, N/2, N-3) of the target's N layers (0.33's V2 runner reads top-level "
                 "eagle_aux_hidden_state_layer_ids, not eagle_config's)")
    r.set("aux_convention", "vllm", "vLLM: id L is the residual stream entering layer L")
    count = raw.get("num_aux_hidden_states") if not speculators else None
    _, nested, _ = lookup(raw, ("eagle_config", "eagle_aux_hidden_state_layer_ids"))
    _, top_ids, _ = lookup(raw, ("eagle_aux_hidden_state_layer_ids",))
    if is_int(count):
        r.set("num_aux", count, "config.json: num_aux_hidden_states")
    elif qwen3 and isinstance(top_ids, list) and top_ids:  # qwen3_eagle3.py also counts the top-level ids
        r.set("num_aux", len(top_ids), "config.json: eagle_aux_hidden_state_layer_ids (count, qwen3_eagle3.py)")
    elif isinstance(nested, list) and nested:
        r.set("num_aux", len(nested), "config.json: eagle_config.eagle_aux_hidden_state_layer_ids (count)")
    else:
        # llama_eagle3.py sizes fc from num_aux_hidden_states or eagle_config's ids only: a speculators config's
        # ids (at the top level) are not counted.
        r.set("num_aux", 3, "vLLM default: 3 (llama_eagle3.py counts only num_aux_hidden_states or eagle_config ids)")

    dv_differs = r.draft_vocab_size != r.vocab_size

    def accept(name: str, n) -> tuple[str | None, str]:
        if name == "t2d" or "t2d" in name:
            return None, "vLLM skips t2d"
        if "mask_hidden" in name:
            return None, "vLLM skips mask_hidden (parallel drafting only) with a warning"
        if name.endswith(("rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached")):
            return None, "vLLM drops rotary buffers (REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER)"
        if n.prefixed:
            r.refusals.append(f"{name}: vLLM prefixes `model.` itself and raises \"There is no module or parameter "
                              f"named 'model.model...'\"")
            return None, "refused: `model.` prefix"
        if n.role == "d2t":
            if not dv_differs:
                r.refusals.append("d2t: vLLM builds no draft_id_to_target_id when draft_vocab_size equals the "
                                  "target vocabulary, and raises for the unexpected tensor")
                return None, "refused: no draft_id_to_target_id"
            return "d2t", ""
        if n.role is None:
            r.refusals.append(f"{name}: vLLM raises \"There is no module or parameter named ...\"")
            return None, "refused: unknown tensor"
        if n.role.endswith(".bias"):
            wanted = r.attention_bias if ".self_attn." in n.role else r.mlp_bias
            return (n.role, "") if wanted else (None, "vLLM skips a bias its config does not declare")
        if n.role == "input_norm.weight" and not r.input_norm:
            return None, "vLLM drops input_norm unless norm_before_fc"
        if n.role.startswith("fc_norm.") and (not r.fc_norm or int(n.role.split(".")[1]) >= r.num_aux):
            r.refusals.append(f"{name}: vLLM builds no fc_norm here and raises for the tensor")
            return None, "refused: no fc_norm"
        if n.layer is not None and n.layer >= r.num_layers:
            r.refusals.append(f"{name}: vLLM builds {r.num_layers} layer(s) and raises for layer {n.layer}")
            return None, "refused: layer beyond num_hidden_layers"
        if n.role.endswith(("q_norm.weight", "k_norm.weight")) and not r.qk_norm:
            r.refusals.append(f"{name}: a Llama-layer drafter has no q/k norms; vLLM raises for the tensor")
            return None, "refused: no q/k norm"
        return n.role, ""

    map_roles(r, ckpt, accept)
    finish(r, ckpt, "uninitialised memory (vLLM raises nothing for a missing tensor)")
    return r


LAYOUTS = (SPECULATORS, FLAT)
