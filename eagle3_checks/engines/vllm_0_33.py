"""vLLM 0.33.0's reading of an EAGLE-3 drafter (files below are ``vllm/`` in the 0.33.0 wheel from PyPI).

- ``transformers_utils/config.py:364-365``: a config with ``speculators_config`` is a speculators config;
  ``transformers_utils/configs/speculators/algos.py:15-50`` (``update_eagle3``) takes ``norm_before_residual`` with
  ``config_dict.get(..., True)`` (absent: True; an explicit null: None, i.e. False), ``norm_before_fc`` / ``fc_norm``
  / ``norm_output`` with a False default, ``target_hidden_size`` only when not null, the aux ids to the top level;
  only ``llama`` and ``qwen3`` layer types map to an architecture, others raise;
- ``transformers_utils/configs/eagle.py:55-64``: for method eagle3 every architecture not starting or ending with
  ``Eagle3`` gets the prefix ``Eagle3``; a flat config is parsed by its model_type's transformers class
  (``qwen3``: Qwen3Config, head_dim 128 and max_position_embeddings 32768 by default; ``kimi_k2``: DeepseekV3Config);
- ``model_executor/models/llama_eagle3.py``: ``midlayer.`` is renamed ``layers.0.`` (:290-303); ``t2d`` is skipped;
  ``d2t`` becomes ``draft_id_to_target_id``, which exists only when draft_vocab_size != the TARGET's vocabulary
  (:338-345); every other name but lm_head gets ``model.`` (so a ``model.``-prefixed checkpoint fails); missing
  tensors raise nothing (``load_weights`` returns None, so the strict check is skipped: norms stay ones, the rest
  uninitialised); ``input_norm`` is dropped unless ``norm_before_fc`` (eagle_config first), ``fc.`` unless
  ``eagle_config.use_aux_hidden_state`` (:179-183, :420-470); fc input = ``target_hidden_size`` x
  (``num_aux_hidden_states`` or len(``eagle_config`` ids) or 3) (:209-221), no bias; layers >= 1 are normed by
  ``input_layernorm`` (:131-138);
- ``model_executor/models/qwen3_eagle3.py:201-214``: Qwen3-layer drafters count aux states from ``num_aux_layers``,
  ``num_aux_hidden_states``, the top-level ids, then eagle_config's; ``qwen3.py:114-119``: o_proj has no bias;
- ``model_executor/models/llama.py:266-274``: o_proj's bias is ``attention_bias or bias``;
  ``model_executor/models/utils.py:431-436, 457-458``: any unexpected name ending ``.bias`` is skipped silently;
- ``v1/worker/gpu/spec_decode/eagle/utils.py:107-119``: a drafter without lm_head gets the TARGET's; with a draft
  vocabulary smaller than the target's its logits are cut to the first DV rows (``layers/logits_processor.py:196-198``)
  and then scattered by d2t: wrong tokens;
- ``v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150``: the V2 model runner (the default,
  ``config/vllm.py:731-767``) reads the top-level ``eagle_aux_hidden_state_layer_ids``, then ``eagle_config.layer_ids``,
  never ``eagle_config.eagle_aux_hidden_state_layer_ids``; the V1 runner, which parallel drafting (P-EAGLE) forces
  (``config/vllm.py:3053-3087``), also reads eagle_config's ids (``v1/worker/gpu_model_runner.py:5202-5224``). An id L
  is the residual stream entering target layer L, ids 0..N (``model_executor/models/interfaces.py:1640-1650``).
"""

from __future__ import annotations

from typing import Any

from ..drafter.checkpoint import Checkpoint
from ..drafter.config_values import class_defaults
from ..drafter.layout import FLAT, SPECULATORS, str_list
from . import launch as launching
from . import reading
from .profile import Capture, Limit, Profile, Release, Target, input_of
from .reading import Reading, is_int, lookup

VERSION = "0.33.0"
NAME = "vllm"
# model_executor/models/registry.py:698-713: EAGLE-3 drafter classes with Llama layers (llama_eagle3.py), Qwen3
# layers (qwen3_eagle3.py) and MLA layers (Eagle3DeepseekV2/V3ForCausalLM, deepseek_eagle3.py: read_mla below).
# (PEagleDraftModel and Peagle*ForCausalLM are registered too, but for method eagle3 transformers_utils/configs/
# eagle.py:55-64 renames them Eagle3PEagle..., which is not.)
LLAMA_LAYER_ARCHS = {"LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3MiniMaxM2ForCausalLM",
                     "Eagle3Qwen2_5vlForCausalLM", "Eagle3Qwen3vlForCausalLM"}
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


# One flat walk, in the order vLLM's own loader reads the config (its file:line sources beside each step), so
# that it can be held to the engine's source line by line: not split for the complexity count.
def read(ckpt: Checkpoint, target: Any = None, *, aux_when_unused: bool = False,  # noqa: C901
         any_rope: bool = False) -> Reading:
    """vLLM 0.33's reading; ``target`` (a TargetConfig, optional) gives the target vocabulary d2t is sized against.
    ``aux_when_unused``: the model runner captures the aux states even when eagle_config.use_aux_hidden_state is
    false (0.32.0: :data:`RELEASES`)."""
    raw = ckpt.config_raw or {}
    speculators = ckpt.layout == SPECULATORS
    r = Reading(NAME, VERSION, ckpt.layout)
    where = "transformer_layer_config." if speculators else ""
    fields_ = reading.layer_fields(raw, speculators)
    if not speculators:  # an MLA drafter class: deepseek_eagle3.py builds another layer (read_mla)
        mla_arch, how = eagle3_architecture(raw.get("architectures"))
        if mla_arch in MLA_ARCHS:
            r.set("architecture", mla_arch, how)
            reading.model_type_of(r, fields_, "llama")
            return read_mla(ckpt, target, r, mla_arch)
    model_type = reading.model_type_of(r, fields_, "llama")
    if speculators and model_type not in ("llama", "qwen3"):
        r.refusals.append(f"vLLM raises \"Unsupported model_type {model_type} for Eagle3 speculator\" "
                          "(configs/speculators/algos.py:41-44)")
    hd, max_pos, cls = (None, 8192, "vLLM: a speculators config has no class default") if speculators else \
        class_defaults(model_type)
    # llama.py: getattr(config, "max_position_embeddings", 8192); a flat config's class has its own default.
    reading.read_layer(r, fields_, where, (hd, cls), max_pos)
    arch: str | None
    if speculators:
        arch = "Eagle3Qwen3ForCausalLM" if model_type == "qwen3" else "Eagle3LlamaForCausalLM"
        r.set("architecture", arch, f"update_eagle3: model_type {model_type!r}")
    else:
        arch, how = eagle3_architecture(raw.get("architectures"))
        r.set("architecture", arch, how)
        if arch is None:
            r.refuse_class(f"vLLM raises \"Model architectures ... are not supported\": {how} names no EAGLE-3 "
                           "drafter class it registers (model_executor/models/registry.py:698-713)")
    qwen3 = r.architecture in QWEN3_LAYER_ARCHS
    r.set("qk_norm", qwen3, r.sources["architecture"])
    if speculators and not is_int(fields_.get("num_hidden_layers")):
        # A speculators config is a plain PreTrainedConfig (configs/speculators/base.py:15-30): no class default;
        # the drafter builds range(config.num_hidden_layers) (llama_eagle3.py) and raises AttributeError.
        r.refuse("transformer_layer_config has no num_hidden_layers: vLLM's speculators config has no class "
                 "default and the drafter raises AttributeError building its layers "
                 "(configs/speculators/base.py:15-30)", at="transformer_layer_config.num_hidden_layers")
    if speculators and qwen3 and not is_int(fields_.get("max_position_embeddings")):
        # qwen3.py:205 reads config.max_position_embeddings with no default; a speculators config is a plain
        # PreTrainedConfig (configs/speculators/base.py:15-30) without that attribute.
        r.refuse("transformer_layer_config has no max_position_embeddings: vLLM's Qwen3 attention reads "
                 "config.max_position_embeddings without a default (qwen3.py:205) and raises AttributeError",
                 at="transformer_layer_config.max_position_embeddings")
    if r.hidden_act != "silu":  # llama.py LlamaMLP and qwen2.py Qwen2MLP (Qwen3's) raise for any other
        r.refusals.append(f"vLLM raises \"Unsupported activation: {r.hidden_act}. Only silu is supported for now.\" "
                          "(llama.py:112-114 LlamaMLP, qwen2.py Qwen2MLP)")
    # o_proj: llama.py:266-274 bias = attention_bias or bias; qwen3.py:114-119 never a bias.
    bias_key = raw.get("bias") is True and not speculators
    if qwen3:
        r.set("o_bias", False, "vLLM qwen3.py:114-119: o_proj is built with bias=False")
    elif bias_key and not r.attention_bias:
        r.set("o_bias", True, "config.json: bias (vLLM llama.py:266-274: o_proj bias = attention_bias or bias)")

    def top(name: str, default: Any, why: str) -> Any:
        found, value, key = lookup(raw, (name,))
        if found and value is not None:
            r.sources[name] = f"config.json: {key}"
            return value
        r.sources[name] = why
        return default

    if speculators:
        # update_eagle3 (algos.py:33-35): config_dict.get("norm_before_residual", True): absent -> True, but an
        # explicit null is None, which llama_eagle3.py:101-104 reads as False.
        found, value, _ = lookup(raw, ("norm_before_residual",))
        if found and value is None:
            r.set("norm_before_residual", False, "config.json: norm_before_residual null (vLLM update_eagle3 keeps "
                  "None, read as False)")
        else:
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
    found, use_aux, _ = lookup(raw, ("eagle_config", "use_aux_hidden_state"))
    uses_aux = not (found and use_aux is False)  # llama_eagle3.py:179-183

    reading.read_stated(r, raw, "draft_vocab_size", r.vocab_size, "vLLM default: vocab_size")

    if "target_hidden_size" in raw and raw["target_hidden_size"] is None and not speculators:
        r.refuse("config.json sets target_hidden_size to null: vLLM computes None x 3 for fc's input "
                 "(TypeError at load)", at="target_hidden_size")
        r.set("target_hidden_size", r.hidden_size, "config.json: target_hidden_size is null")
    else:
        reading.read_stated(r, raw, "target_hidden_size", r.hidden_size, "vLLM default: hidden_size")
    # The ids captured: the V2 model runner (the default) reads the top-level eagle_aux_hidden_state_layer_ids, then
    # eagle_config["layer_ids"]; never eagle_config["eagle_aux_hidden_state_layer_ids"]. The V1 runner
    # (VLLM_USE_V2_MODEL_RUNNER=0, no Triton, or parallel drafting) reads eagle_config's ids after the top level.
    # update_eagle3 puts a speculators config's ids at the top level.
    reading.read_aux_ids(r, raw, (("eagle_aux_hidden_state_layer_ids",), ("eagle_config", "layer_ids")),
                         "vLLM default: (2, N/2, N-3) of the target's N layers (0.33's default V2 runner reads the "
                         "top-level eagle_aux_hidden_state_layer_ids, not eagle_config's: eagle3_utils.py:113-150; "
                         "only the V1 runner, VLLM_USE_V2_MODEL_RUNNER=0, reads eagle_config's: "
                         "gpu_model_runner.py:5202-5224)")
    if not uses_aux and not aux_when_unused:
        r.set("aux_layer_ids", None, "eagle_config.use_aux_hidden_state is false: vLLM captures no aux states "
              "(eagle3_utils.py:15-22)")
    r.set("aux_convention", "vllm", "vLLM: id L is the residual stream entering layer L (interfaces.py:1640-1650)")
    count = raw.get("num_aux_hidden_states") if not speculators else None
    _, nested, _ = lookup(raw, ("eagle_config", "eagle_aux_hidden_state_layer_ids"))
    _, top_ids, _ = lookup(raw, ("eagle_aux_hidden_state_layer_ids",))
    aux_layers = raw.get("num_aux_layers")
    if qwen3 and is_int(aux_layers):  # qwen3_eagle3.py:201-214: num_aux_layers first
        r.set("num_aux", aux_layers, "config.json: num_aux_layers (qwen3_eagle3.py:201-214)")
    elif is_int(count):
        r.set("num_aux", count, key="num_aux_hidden_states")
    elif qwen3 and isinstance(top_ids, list) and top_ids:  # qwen3_eagle3.py also counts the top-level ids
        r.set("num_aux", len(top_ids), "config.json: eagle_aux_hidden_state_layer_ids (count, qwen3_eagle3.py)")
    elif isinstance(nested, list) and nested:
        r.set("num_aux", len(nested), "config.json: eagle_config.eagle_aux_hidden_state_layer_ids (count)")
    else:
        # llama_eagle3.py sizes fc from num_aux_hidden_states or eagle_config's ids only: a speculators config's
        # ids (at the top level) are not counted.
        r.set("num_aux", 3, "vLLM default: 3 (llama_eagle3.py:209-221 counts only num_aux_hidden_states or "
              "eagle_config ids)")

    # llama_eagle3.py:338-345: draft_id_to_target_id exists only when draft_vocab_size differs from the TARGET's
    # vocabulary (the drafter's vocab_size stands in for it without --target-config).
    target_vocab = getattr(target, "vocab_size", None) or r.vocab_size
    dv_differs = r.draft_vocab_size != target_vocab

    def accept(name: str, n) -> tuple[str | None, str]:
        if name == "t2d" or "t2d" in name:
            return None, "vLLM skips t2d"
        if "mask_hidden" in name:
            return None, "vLLM skips mask_hidden (parallel drafting only) with a warning"
        if name.endswith(("rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached")):
            return None, "vLLM drops rotary buffers (REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER)"
        if n.prefixed:
            r.refuse(f"{name}: vLLM prefixes `model.` itself and raises \"There is no module or parameter "
                     f"named 'model.model...'\"", at=name)
            return None, "refused: `model.` prefix"
        if n.role == "d2t":
            if not dv_differs:
                r.refuse("d2t: vLLM builds no draft_id_to_target_id when draft_vocab_size equals the "
                         "target vocabulary, and raises for the unexpected tensor (llama_eagle3.py:338-345)", at="d2t")
                return None, "refused: no draft_id_to_target_id"
            return "d2t", ""
        if n.role is not None and n.role.startswith("fc.") and not uses_aux:
            return None, "vLLM drops fc.* when eagle_config.use_aux_hidden_state is false (llama_eagle3.py:462-463)"
        if name.endswith(".bias") and (n.role is None or n.role == "fc.bias"):
            return None, "vLLM skips any unexpected *.bias silently (model_executor/models/utils.py:431-436)"
        if n.role is None:
            r.refuse(f"{name}: vLLM raises \"There is no module or parameter named ...\"", at=name)
            return None, "refused: unknown tensor"
        if n.role.endswith(".bias"):
            if n.role.endswith("o_proj.bias"):
                wanted = r.o_bias if r.o_bias is not None else r.attention_bias
            else:
                wanted = r.attention_bias if ".self_attn." in n.role else r.mlp_bias
            return (n.role, "") if wanted else (None, "vLLM skips a bias its config does not declare "
                                                      "(utils.py:431-436)")
        if n.role == "input_norm.weight" and not r.input_norm:
            return None, "vLLM drops input_norm unless norm_before_fc"
        if n.role.startswith("fc_norm.") and (not r.fc_norm or int(n.role.split(".")[1]) >= r.num_aux):
            r.refuse(f"{name}: vLLM builds no fc_norm here and raises for the tensor", at=name)
            return None, "refused: no fc_norm"
        if n.layer is not None and n.layer >= r.num_layers:
            r.refuse(f"{name}: vLLM builds {r.num_layers} layer(s) and raises for layer {n.layer}", at=name)
            return None, "refused: layer beyond num_hidden_layers"
        if n.role.endswith(("q_norm.weight", "k_norm.weight")) and not r.qk_norm:
            r.refuse(f"{name}: a Llama-layer drafter has no q/k norms; vLLM raises for the tensor", at=name)
            return None, "refused: no q/k norm"
        return n.role, ""

    context = getattr(target, "max_position_embeddings", None)
    kind = (r.rope_scaling or {}).get("rope_type", "default")
    if context and r.max_position_embeddings and context > r.max_position_embeddings and \
            (kind in CACHE_ONLY_ROPE_TYPES or any_rope):
        r.set("max_position_embeddings", context, f"raised from {r.max_position_embeddings} to the target's "
              f"max_model_len {context} (rope_type {kind}: "
              + ("0.30.0 config/speculative.py:1373-1380, 1659-1690, for every rope type)" if any_rope else
                 "config/speculative.py:100-113, 1807-1846)"))
    reading.map_roles(r, ckpt, accept)
    reading.finish(r, ckpt, "uninitialised memory (vLLM raises nothing for a missing tensor)", narrows=True)
    if not uses_aux:
        r.unfilled.pop("fc.weight", None)
        if not aux_when_unused:
            # no aux states and no fc: the drafter takes the target's last hidden state as it is
            # (llama_eagle3.py:209, 397-402; its own compute, recorded, shows it: tests/test_engine_compute.py)
            r.set("num_aux", 1, "eagle_config.use_aux_hidden_state is false: vLLM builds no fc and feeds the "
                  "target's last hidden state as it is (llama_eagle3.py:209, 397-402)")
    if "lm_head.weight" in r.unfilled and not r.lm_head_from_embed:
        # v1/worker/gpu/spec_decode/eagle/utils.py:107-119: the target's lm_head is shared; the logits processor
        # keeps its first DV rows (logits_processor.py:196-198) before the d2t scatter.
        if r.draft_vocab_size == target_vocab:
            r.unfilled["lm_head.weight"] = "shared from the target model (its lm_head: the same vocabulary)"
        else:
            r.unfilled["lm_head.weight"] = (f"the target's lm_head cut to its first {r.draft_vocab_size} rows "
                                            "(v1/worker/gpu/spec_decode/eagle/utils.py:107-119, "
                                            "logits_processor.py:196-198): every drafted token maps to a wrong one")
    return r


MLA_FILE = "model_executor/models/deepseek_eagle3.py"


# One flat walk in the order deepseek_eagle3.py builds the drafter (file:line beside each step).
def read_mla(ckpt: Checkpoint, target: Any, r: Reading, arch: str) -> Reading:  # noqa: C901
    """vLLM 0.33's MLA drafter (Eagle3DeepseekV2ForCausalLM / Eagle3DeepseekV3ForCausalLM, both the class in
    ``model_executor/models/deepseek_eagle3.py``): DeepSeek-V2 MLA attention (``deepseek_v2.py``) in an EAGLE-3 layer.
    ``r`` already holds the architecture."""
    raw = ckpt.config_raw or {}
    reading.read_mla(r, raw, "vllm", f"vLLM 0.33 {MLA_FILE}:68-83 (DeepseekV2MLAAttention)")
    if "q_lora_rank" in raw and raw["q_lora_rank"] is None:
        r.sources["mla"] += ("; q_lora_rank null: q is one q_proj from the layer input (deepseek_eagle3.py:76, "
                             "deepseek_v2.py:1090-1097)")
        if any(n.endswith("self_attn.kv_a_proj_with_mqa.weight") for n in ckpt.tensors):
            # The attention builds a separate kv_a_proj_with_mqa without q_lora_rank (deepseek_v2.py:1051-1064), but
            # the drafter's name mapper stacks every .kv_a_proj_with_mqa into fused_qkv_a_proj (deepseek_eagle3.py:
            # 258-267; utils.py:126-129), which only the q_lora_rank attention has: the loader raises (utils.py:
            # 441-448). Recorded on vLLM 0.33.0 itself: tests/conformance/recorded/vllm-0.33.0/mla-q-proj-flat.json.
            r.refuse(
                "q_lora_rank is null: vLLM's MLA attention then has q_proj and a separate kv_a_proj_with_mqa "
                "(deepseek_v2.py:1051-1064, 1090-1097), but deepseek_eagle3.py:258-267 maps every "
                ".kv_a_proj_with_mqa into fused_qkv_a_proj, which only a q_lora_rank attention builds: the load raises "
                "\"There is no module or parameter named '...self_attn.fused_qkv_a_proj'\" (model_executor/models/"
                "utils.py:441-448)", at="q_lora_rank")
    if r.hidden_act != "silu":
        r.refuse(f"vLLM raises \"Unsupported activation: {r.hidden_act}. Only silu is supported for now.\" "
                          "(deepseek_v2.py:278-281 DeepseekV2MLP)")
    r.set("qk_norm", False, f"{arch}: MLA attention (no q/k norms)")
    r.set("attention_bias", False, "deepseek_v2.py: the MLA projections have no bias")
    r.set("o_bias", False, "deepseek_v2.py: o_proj has no bias")
    r.set("mlp_bias", False, "deepseek_v2.py:264, 272 DeepseekV2MLP: no bias")
    r.set("fc_bias", False, f"{MLA_FILE}:201-209: fc is built with bias=False")
    nbr = raw.get("norm_before_residual")
    r.set("norm_before_residual", bool(nbr), f"config.json: norm_before_residual ({MLA_FILE}:101-104)"
          if "norm_before_residual" in raw else f"vLLM default: False ({MLA_FILE}:101)")
    r.set("input_norm", False, f"{MLA_FILE} builds no input_norm (no norm_before_fc)")
    r.set("fc_norm", raw.get("fc_norm") is True, f"config.json: fc_norm ({MLA_FILE}:211-220)"
          if "fc_norm" in raw else f"vLLM default: no fc_norm ({MLA_FILE}:211)")
    normed = raw.get("norm_output") is True
    r.set("feedback", "normed" if normed else "prenorm", f"config.json: norm_output ({MLA_FILE}:222, 251-254)"
          if "norm_output" in raw else f"vLLM default: the pre-norm state is fed back ({MLA_FILE}:222, 254)")
    r.set("final_norm", True, f"{MLA_FILE}:251: the final norm before lm_head")
    r.set("lm_head_from_embed", False, f"{MLA_FILE}:299-303: its own lm_head (shared from the target if absent)")
    r.set("later_norm", "input_layernorm", f"{MLA_FILE}:132-134: layers >= 1 are normed by input_layernorm")
    reading.read_stated(r, raw, "draft_vocab_size", r.vocab_size, f"vLLM: vocab_size ({MLA_FILE}:283-285)")
    if "target_hidden_size" in raw and raw["target_hidden_size"] is None:
        r.refuse(f"config.json sets target_hidden_size to null: vLLM computes None x A for fc's input "
                          f"({MLA_FILE}:196-199, TypeError at load)", at="target_hidden_size")
        r.set("target_hidden_size", r.hidden_size, "config.json: target_hidden_size is null")
    else:
        reading.read_stated(r, raw, "target_hidden_size", r.hidden_size,
                            f"vLLM default: hidden_size ({MLA_FILE}:196-198)")
    # fc's width: num_aux_hidden_states, else the count of eagle_config's ids, else 3; the top-level ids are not
    # counted (deepseek_eagle3.py:189-194)
    count = raw.get("num_aux_hidden_states")
    _, nested, _ = lookup(raw, ("eagle_config", "eagle_aux_hidden_state_layer_ids"))
    if is_int(count):
        r.set("num_aux", count, f"config.json: num_aux_hidden_states ({MLA_FILE}:189)")
    elif isinstance(nested, list) and nested:
        r.set("num_aux", len(nested), f"config.json: eagle_config.eagle_aux_hidden_state_layer_ids (count, "
              f"{MLA_FILE}:190-193)")
    else:
        r.set("num_aux", 3, f"vLLM default: 3 ({MLA_FILE}:189-193 counts only num_aux_hidden_states or "
              "eagle_config's ids, never the top-level ones)")
    reading.read_aux_ids(r, raw, (("eagle_aux_hidden_state_layer_ids",), ("eagle_config", "layer_ids")),
                         "vLLM default: (2, N/2, N-3) of the target's N layers (0.33's default V2 runner reads the "
                         "top-level eagle_aux_hidden_state_layer_ids, not eagle_config's: eagle3_utils.py:113-150)")
    r.set("aux_convention", "vllm", "vLLM: id L is the residual stream entering layer L (interfaces.py:1640-1650)")
    target_vocab = getattr(target, "vocab_size", None) or r.vocab_size
    dv_differs = r.draft_vocab_size != target_vocab  # deepseek_eagle3.py:307-314
    q_proj = r.mla is not None and r.mla.q_lora_rank is None

    def accept(name: str, n) -> tuple[str | None, str]:
        if "t2d" in name:
            return None, f"vLLM skips t2d ({MLA_FILE}:376-377)"
        if n.prefixed:
            r.refuse(f"{name}: vLLM prefixes `model.` itself ({MLA_FILE}:381-382) and raises \"There is no "
                              "module or parameter named 'model.model...'\"", at=name)
            return None, "refused: `model.` prefix"
        if n.role == "d2t":
            if not dv_differs:
                r.refuse(f"d2t: vLLM builds no draft_id_to_target_id when draft_vocab_size equals the "
                                  f"target vocabulary ({MLA_FILE}:307-314), and raises for the unexpected tensor")
                return None, "refused: no draft_id_to_target_id"
            return "d2t", ""
        if name.endswith(".bias"):
            return None, "vLLM skips any unexpected *.bias silently (model_executor/models/utils.py:431-436)"
        if n.role is None:
            r.refuse(f"{name}: vLLM's MLA drafter has no such parameter and raises \"There is no module or "
                              "parameter named ...\" (AutoWeightsLoader, model_executor/models/utils.py)", at=name)
            return None, "refused: unknown tensor"
        suffix = n.role.split(".", 2)[2] if n.layer is not None else ""
        if suffix in ("self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight") \
                and q_proj or suffix == "self_attn.q_proj.weight" and not q_proj:
            why = "q_lora_rank is null: q is q_proj" if q_proj else "q_lora_rank is set: q is q_a_proj / q_b_proj"
            r.refuse(f"{name}: {why} (deepseek_v2.py:1047-1097); vLLM raises for the unexpected tensor", at=name)
            return None, "refused: no such q projection"
        if n.role == "input_norm.weight":
            r.refuse(f"{name}: vLLM's MLA drafter has no input_norm (no norm_before_fc in {MLA_FILE}) and "
                              "raises for the tensor", at=name)
            return None, "refused: no input_norm"
        if n.role.startswith("fc_norm.") and (not r.fc_norm or int(n.role.split(".")[1]) >= r.num_aux):
            r.refuse(f"{name}: vLLM builds no fc_norm here ({MLA_FILE}:211-220: fc_norm only) and raises "
                              "for the tensor", at=name)
            return None, "refused: no fc_norm"
        if n.layer is not None and n.layer >= r.num_layers:
            r.refuse(f"{name}: vLLM builds {r.num_layers} layer(s) ({MLA_FILE}:176-186) and raises for "
                              f"layer {n.layer}", at=name)
            return None, "refused: layer beyond num_hidden_layers"
        return n.role, ""

    reading.map_roles(r, ckpt, accept)
    reading.finish(r, ckpt, "uninitialised memory (vLLM raises nothing for a missing tensor: load_weights returns "
                            f"None, {MLA_FILE}:370-398)", narrows=True)
    if "lm_head.weight" in r.unfilled:
        r.unfilled["lm_head.weight"] = ("shared from the target model (its lm_head: the same vocabulary)"
                                        if r.draft_vocab_size == target_vocab else
                                        f"the target's lm_head cut to its first {r.draft_vocab_size} rows "
                                        "(v1/worker/gpu/spec_decode/eagle/utils.py:107-119): every drafted token "
                                        "maps to a wrong one")
    return r


def capture(ids: list[int], target: Target | None) -> Capture:
    """Any target: id L is the residual stream entering layer L (the output of L-1), ids 0..N (the final output
    is captured after the last layer; model_executor/models/interfaces.py:1640-1650, llama.py:427-441)."""
    n = target.num_layers if target else None
    return Capture(input_of(sorted(set(ids))), "vLLM: id L = the input of layer L (interfaces.py:1640-1650; "
                   "sorted and de-duplicated, :1616-1620)", n)


def ids_for(layers: tuple[int, ...], target: Target | None) -> list[int] | None:
    return [x + 1 for x in layers]


def serving(r: Reading, want: int | None, target: Any = None, any_rope: bool = False) -> Limit | None:
    """--max-model-len against the draft (without it, the reading has already raised the draft to the target's
    max_model_len where vLLM does). ``any_rope``: 0.30.0, which raises it whatever the rope type."""
    have = r.max_position_embeddings
    raised = r.sources.get("max_position_embeddings", "")
    if want is not None and raised.startswith("raised"):  # the reading, served at this context, already raised it
        return Limit("info", f"raises the draft's max_position_embeddings to max_model_len {want} ({raised})")
    if want is None or not have or have >= want:
        return None
    kind = (r.rope_scaling or {}).get("rope_type", "default")
    if kind in CACHE_ONLY_ROPE_TYPES or any_rope:
        return Limit("info", f"raises the draft's max_position_embeddings {have} to max_model_len {want} (rope_type "
                     f"{kind}; " + ("0.30.0 config/speculative.py:1373-1380, 1659-1690: every rope type)" if any_rope
                                    else "config/speculative.py:100-113)"))
    return Limit("error", f"limits max_model_len to the draft's max_position_embeddings {have} (rope_type {kind}), "
                 f"below the planned {want}", "vLLM resizes the rotary cache only for plain RoPE types "
                 "(config/speculative.py:100-113, config/vllm.py:3025-3051); otherwise the whole server serves a "
                 "shorter context", f"state \"max_position_embeddings\": {want} or more", expected=f">= {want}",
                 found=f"{have} ({r.sources.get('max_position_embeddings', '?')})")


# The releases this reading holds for, each recorded (conformance/run.sh) and held to it by the default test run.
_AUX_WHEN_UNUSED = (("aux_when_unused", True),)
RELEASES = (
    Release("0.30.0", "2026-09-22", recorded="2026-12-03", differs=(*_AUX_WHEN_UNUSED, ("any_rope", True)),
            why="as 0.31.0, except that it raises an EAGLE draft's max_position_embeddings to the target's "
            "max_model_len for every rope type (config/speculative.py:1373-1380, 1659-1690: no rope-type check), "
            "where 0.31.0 on raise it for the cache-only rope types only and otherwise limit max_model_len to the "
            "draft's"),
    Release("0.31.0", "2026-10-05", recorded="2026-12-03", differs=_AUX_WHEN_UNUSED, why="as 0.32.0"),
    Release("0.32.0", "2026-10-18", recorded="2026-12-03", differs=_AUX_WHEN_UNUSED,
            why="0.32.0's V2 model runner sets the target's aux layers for every eagle3 drafter "
            "(v1/worker/gpu/model_runner.py:299-307, 405-407), whatever eagle_config.use_aux_hidden_state says; "
            "0.33.0 asks the drafter first (eagle3_utils.py: requires_aux_hidden_states). Its loader is 0.33.0's "
            "(llama_eagle3.py:179-183, 459-463 in 0.32.0)"),
    Release(VERSION, "2026-11-02", recorded="2026-12-01"),
)

PROFILE = Profile(
    NAME, VERSION, read, capture, ids_for,
    releases=RELEASES,
    narrows_at="model_executor/layers/linear.py:598, 863, 1780 (narrow, no size check)",
    families=("llama", "mla"),
    sources=("model_executor/models/llama_eagle3.py", "model_executor/models/qwen3_eagle3.py", MLA_FILE,
             "model_executor/models/llama.py", "model_executor/models/utils.py",
             "transformers_utils/configs/speculators/algos.py", "transformers_utils/configs/eagle.py",
             "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py", "v1/worker/gpu/spec_decode/eagle/utils.py"),
    reads_ids="the top-level eagle_aux_hidden_state_layer_ids",
    ids_path=("eagle_aux_hidden_state_layer_ids",),
    serving=serving,
    launch=launching.vllm,
    converts_to=FLAT,
)
