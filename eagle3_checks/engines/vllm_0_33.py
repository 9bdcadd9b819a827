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

from ..drafter.families.mla import YARN_DEFAULTS, MlaReader, number
from ..drafter.layout import FLAT, PEAGLE, SPECULATORS, Name, speculators_kind, str_list
from . import counting, reading
from . import launch as launching
from .capture import vllm_ids_for, vllm_input
from .profile import Limit, Profile, Release
from .reading import Reading, is_int, lookup
from .record import (
    Branch,
    Call,
    Count,
    Fact,
    Ids,
    Layer,
    Refuse,
    Rule,
    Source,
    Stop,
    Tensors,
    Value,
    Walk,
    all_of,
    also,
    any_of,
    both,
    const,
    fact_is,
    fc_norm_unbuilt,
    fmt,
    is_switch,
    is_true,
    layer_beyond,
    model_type_of,
    name_ends,
    name_has,
    no,
    normed,
    normed_if_true,
    prefixed,
    reading_of,
    role_ends,
    role_is,
    role_starts,
    stated,
    unknown,
)

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


def _mla_class(w: Walk) -> bool:
    """A flat config naming an MLA drafter class: deepseek_eagle3.py builds another layer (MLA_STEPS)."""
    return w.ckpt.layout != SPECULATORS and eagle3_architecture(w.raw.get("architectures"))[0] in MLA_ARCHS


def _mla_architecture(w: Walk) -> None:
    w.r.set("architecture", *eagle3_architecture(w.raw.get("architectures")))


def _architecture(w: Walk) -> None:
    """update_eagle3 maps a speculators config's layer model_type to its class (update_peagle to a Peagle* name the
    registry builds as the same class, model_executor/models/registry.py:698-706); a flat config's architectures get
    the Eagle3 prefix (transformers_utils/configs/eagle.py:55-64) and must name a registered drafter class."""
    r, model_type = w.r, w.facts["model_type"]
    arch: str | None
    if w.ckpt.layout == SPECULATORS:
        arch = "Eagle3Qwen3ForCausalLM" if model_type == "qwen3" else "Eagle3LlamaForCausalLM"
        if w.facts["peagle"]:
            peagle = "PeagleQwen3ForCausalLM" if model_type == "qwen3" else "PeagleLlamaForCausalLM"
            r.set("architecture", arch, f"update_peagle: model_type {model_type!r} -> {peagle}, built as {arch} "
                  "(algos.py:75-82, registry.py:698-706)")
            r.set("kind", PEAGLE, "speculators_model_type \"peagle\" (algos.py:53-87 update_peagle)")
        else:
            r.set("architecture", arch, f"update_eagle3: model_type {model_type!r}")
    else:
        arch, how = eagle3_architecture(w.raw.get("architectures"))
        r.set("architecture", arch, how)
        if arch is None:
            r.refuse_class(f"vLLM raises \"Model architectures ... are not supported\": {how} names no EAGLE-3 "
                           "drafter class it registers (model_executor/models/registry.py:698-713)")
    w.facts["qwen3"] = r.architecture in QWEN3_LAYER_ARCHS
    r.set("qk_norm", w.facts["qwen3"], r.sources["architecture"])


def _speculators(w: Walk) -> bool:
    return w.ckpt.layout == SPECULATORS


def _flat(w: Walk) -> bool:
    return w.ckpt.layout != SPECULATORS


def _o_bias(w: Walk) -> None:
    """o_proj: llama.py:266-274 bias = attention_bias or bias; qwen3.py:114-119 never a bias."""
    r = w.r
    if w.facts["qwen3"]:
        r.set("o_bias", False, "vLLM qwen3.py:114-119: o_proj is built with bias=False")
    elif w.raw.get("bias") is True and _flat(w) and not r.attention_bias:
        r.set("o_bias", True, "config.json: bias (vLLM llama.py:266-274: o_proj bias = attention_bias or bias)")


def _norm_before_residual(w: Walk) -> None:
    """update_eagle3 (algos.py:33-35): config_dict.get("norm_before_residual", True): absent -> True, but an explicit
    null is None, which llama_eagle3.py:101-104 reads as False; update_peagle's default is False (algos.py:70-72). A
    flat config: False unless stated."""
    found, value, key = lookup(w.raw, ("norm_before_residual",))
    if w.facts["peagle"] and not (found and value is not None):
        w.r.set("norm_before_residual", False, "vLLM default for a P-EAGLE config: False (update_peagle, "
                "algos.py:70-72)")
    elif _speculators(w) and found and value is None:
        w.r.set("norm_before_residual", False, "config.json: norm_before_residual null (vLLM update_eagle3 keeps "
                "None, read as False)")
    elif found and value is not None:
        w.r.set("norm_before_residual", bool(value), f"config.json: {key}")
    elif _speculators(w):
        w.r.set("norm_before_residual", True, "vLLM default when absent: True (update_eagle3)")
    else:
        w.r.set("norm_before_residual", False, "vLLM default (flat config): False")


def _uses_aux(w: Walk) -> bool:
    """llama_eagle3.py:179-183: eagle_config.use_aux_hidden_state false builds no fc and captures nothing."""
    found, use_aux, _ = lookup(w.raw, ("eagle_config", "use_aux_hidden_state"))
    return not (found and use_aux is False)


def _target_hidden_size(null_says: str, default_says: str) -> tuple:
    null = Refuse(lambda w: _flat(w) and "target_hidden_size" in w.raw and w.raw["target_hidden_size"] is None,
                  null_says, at="target_hidden_size")
    return (null, Call(lambda w: _read_target_hidden_size(w, default_says)))


def _read_target_hidden_size(w: Walk, default_says: str) -> None:
    if _flat(w) and "target_hidden_size" in w.raw and w.raw["target_hidden_size"] is None:
        w.r.set("target_hidden_size", w.r.hidden_size, "config.json: target_hidden_size is null")
    else:
        reading.read_stated(w.r, w.raw, "target_hidden_size", w.r.hidden_size, default_says)


def _no_aux_captured(w: Walk) -> None:
    if not w.facts["uses_aux"] and not w.switch("aux_when_unused"):
        w.r.set("aux_layer_ids", None, "eagle_config.use_aux_hidden_state is false: vLLM captures no aux states "
                "(eagle3_utils.py:15-22)")


def _target_vocab(w: Walk) -> None:
    """llama_eagle3.py:338-345: draft_id_to_target_id exists only when draft_vocab_size differs from the TARGET's
    vocabulary (the drafter's vocab_size stands in for it without --target-config)."""
    w.facts["target_vocab"] = getattr(w.target, "vocab_size", None) or w.r.vocab_size
    w.facts["dv_differs"] = w.r.draft_vocab_size != w.facts["target_vocab"]


def _raise_context(w: Walk) -> None:
    """config/speculative.py:100-113, 1807-1846: a cache-only rope type gets the draft's max_position_embeddings raised
    to the target's max_model_len (0.30.0: every rope type)."""
    r, any_rope = w.r, w.switch("any_rope")
    context = getattr(w.target, "max_position_embeddings", None)
    kind = (r.rope_scaling or {}).get("rope_type", "default")
    if context and r.max_position_embeddings and context > r.max_position_embeddings and \
            (kind in CACHE_ONLY_ROPE_TYPES or any_rope):
        r.set("max_position_embeddings", context, f"raised from {r.max_position_embeddings} to the target's "
              f"max_model_len {context} (rope_type {kind}: "
              + ("0.30.0 config/speculative.py:1373-1380, 1659-1690, for every rope type)" if any_rope else
                 "config/speculative.py:100-113, 1807-1846)"))


def _target_head(w: Walk, cite: str) -> None:
    """A drafter without lm_head gets the target's (v1/worker/gpu/spec_decode/eagle/utils.py:107-119); with a smaller
    draft vocabulary the logits processor keeps its first DV rows (logits_processor.py:196-198) before the d2t
    scatter."""
    r = w.r
    if "lm_head.weight" not in r.unfilled or r.lm_head_from_embed:
        return
    r.unfilled["lm_head.weight"] = ("shared from the target model (its lm_head: the same vocabulary)"
                                    if r.draft_vocab_size == w.facts["target_vocab"] else
                                    f"the target's lm_head cut to its first {r.draft_vocab_size} rows ({cite}): every "
                                    "drafted token maps to a wrong one")


def _after_load(w: Walk) -> None:
    if not w.facts["uses_aux"]:
        w.r.unfilled.pop("fc.weight", None)
        if not w.switch("aux_when_unused"):
            # no aux states and no fc: the drafter takes the target's last hidden state as it is
            # (llama_eagle3.py:209, 397-402; its own compute, recorded, shows it: tests/test_engine_compute.py)
            w.r.set("num_aux", 1, "eagle_config.use_aux_hidden_state is false: vLLM builds no fc and feeds the "
                    "target's last hidden state as it is (llama_eagle3.py:209, 397-402)")
    _target_head(w, "v1/worker/gpu/spec_decode/eagle/utils.py:107-119, logits_processor.py:196-198")


def _bias_wanted(w: Walk, name: str, n: Name) -> bool:
    """A layer bias the config declares: o_proj's (o_bias, else attention_bias), q/k/v's (attention_bias), the MLP's
    (mlp_bias)."""
    r, role = w.r, n.role or ""
    if role.endswith("o_proj.bias"):
        return bool(r.o_bias if r.o_bias is not None else r.attention_bias)
    return bool(r.attention_bias if ".self_attn." in role else r.mlp_bias)


_D2T_REFUSED = also(lambda w: not w.facts["dv_differs"])
_PREFIX = fmt("{name}: vLLM prefixes `model.` itself and raises \"There is no module or parameter named "
              "'model.model...'\"")
_AUX_WHY = ("vLLM default: (2, N/2, N-3) of the target's N layers (its default Model Runner V2 reads the top-level "
            "eagle_aux_hidden_state_layer_ids, not eagle_config's: eagle3_utils.py:113-150")
_CONVENTION = "vLLM: id L is the residual stream entering layer L (interfaces.py:1640-1650)"
MLA_FILE = "model_executor/models/deepseek_eagle3.py"


def _mla_yarn(params: dict[str, Any], rope_type: str, max_pos: int) -> tuple[dict[str, float], dict]:
    """vLLM 0.33.0: VL/model_executor/models/deepseek_v2.py:1115-1136, rotary_embedding/__init__.py:284-312."""
    who = "vLLM 0.33 (deepseek_yarn)"
    for key in ("factor", "original_max_position_embeddings"):
        if key not in params:
            raise ValueError(f"rope {key} missing: {who} reads rope_parameters[{key!r}] and fails (KeyError)")
    scaling = {"factor": number(params, "factor", None, who),
               "original_max_position_embeddings": number(params, "original_max_position_embeddings", None, who)}
    for key, default in YARN_DEFAULTS.items():
        scaling[key] = number(params, key, default, who)
    return scaling, {"softmax_mscale": params.get("attention_factor") != 1.0}


# How 0.33.0 builds the MLA attention: its own yarn reading, rope dimensions always paired interleaved
# (is_neox_style=False, deepseek_v2.py), the latent norms at rms_norm_eps.
_LATENT = fmt("vLLM {release} norms the latent with rms_norm_eps ({lines}model_executor/models/deepseek_v2.py:1082, "
              "1098: RMSNorm(..., eps=config.rms_norm_eps))")
MLA_READER = MlaReader("vllm", _mla_yarn, interleave=True, latent_source=_LATENT)


def _read_mla(w: Walk) -> None:
    reading.read_mla(w.r, w.raw, MLA_READER, f"vLLM {w.release} ({w.lines}{MLA_FILE}:68-83, DeepseekV2MLAAttention)")
    w.r.sources["latent_norm_eps"] = w.say(_LATENT)


def _q_lora_null(w: Walk) -> None:
    """q_lora_rank null: q is one q_proj from the layer input (deepseek_eagle3.py:76, deepseek_v2.py:1090-1097)."""
    if not ("q_lora_rank" in w.raw and w.raw["q_lora_rank"] is None):
        return
    r = w.r
    r.sources["mla"] += ("; q_lora_rank null: q is one q_proj from the layer input (deepseek_eagle3.py:76, "
                         "deepseek_v2.py:1090-1097)")
    if any(n.endswith("self_attn.kv_a_proj_with_mqa.weight") for n in w.ckpt.tensors):
        # The attention builds a separate kv_a_proj_with_mqa without q_lora_rank (deepseek_v2.py:1051-1064), but the
        # drafter's name mapper stacks every .kv_a_proj_with_mqa into fused_qkv_a_proj (deepseek_eagle3.py:258-267;
        # utils.py:126-129), which only the q_lora_rank attention has: the loader raises (utils.py:441-448). Recorded
        # on vLLM 0.33.0 itself: tests/conformance/recorded/vllm-0.33.0/mla-q-proj-flat.json.
        r.refuse(
            "q_lora_rank is null: vLLM's MLA attention then has q_proj and a separate kv_a_proj_with_mqa "
            "(deepseek_v2.py:1051-1064, 1090-1097), but deepseek_eagle3.py:258-267 maps every "
            ".kv_a_proj_with_mqa into fused_qkv_a_proj, which only a q_lora_rank attention builds: the load raises "
            "\"There is no module or parameter named '...self_attn.fused_qkv_a_proj'\" (model_executor/models/"
            "utils.py:441-448)", at="q_lora_rank")


def _q_proj(w: Walk) -> bool:
    """The attention builds one q_proj (q_lora_rank null), not q_a_proj / q_b_proj."""
    return w.r.mla is not None and w.r.mla.q_lora_rank is None


def _q_why(w: Walk) -> str:
    return "q_lora_rank is null: q is q_proj" if w.facts["q_proj"] else "q_lora_rank is set: q is q_a_proj / q_b_proj"


def _other_q_projection(w: Walk, name: str, n: Name) -> bool:
    """A q projection the attention does not build: q_a/q_b with a null q_lora_rank, q_proj with one."""
    suffix = n.role.split(".", 2)[2] if n.role and n.layer is not None else ""
    q_proj = w.facts["q_proj"]
    return (suffix in ("self_attn.q_a_proj.weight", "self_attn.q_a_layernorm.weight", "self_attn.q_b_proj.weight")
            and q_proj) or (suffix == "self_attn.q_proj.weight" and not q_proj)


def _read_mla_target_hidden_size(w: Walk) -> None:
    if "target_hidden_size" in w.raw and w.raw["target_hidden_size"] is None:
        w.r.set("target_hidden_size", w.r.hidden_size, "config.json: target_hidden_size is null")
    else:
        reading.read_stated(w.r, w.raw, "target_hidden_size", w.r.hidden_size,
                            f"vLLM default: hidden_size ({MLA_FILE}:196-198)")


def _mla_after_load(w: Walk) -> None:
    _target_head(w, "v1/worker/gpu/spec_decode/eagle/utils.py:107-119")


# vLLM 0.33's MLA drafter (Eagle3DeepseekV2ForCausalLM / Eagle3DeepseekV3ForCausalLM, both the class in
# model_executor/models/deepseek_eagle3.py): DeepSeek-V2 MLA attention (deepseek_v2.py) in an EAGLE-3 layer. One walk
# in the order deepseek_eagle3.py builds the drafter (file:line beside each step).
MLA_STEPS = (
    Call(_mla_architecture),
    model_type_of("llama"),
    Call(_read_mla),
    Call(_q_lora_null),
    Refuse(lambda w: w.r.hidden_act != "silu", fmt("vLLM raises \"Unsupported activation: {r.hidden_act}. Only silu "
                                                   "is supported for now.\" (deepseek_v2.py:278-281 DeepseekV2MLP)")),
    Value("qk_norm", (), False, fmt("{r.architecture}: MLA attention (no q/k norms)")),
    const("attention_bias", False, "deepseek_v2.py: the MLA projections have no bias"),
    const("o_bias", False, "deepseek_v2.py: o_proj has no bias"),
    const("mlp_bias", False, "deepseek_v2.py:264, 272 DeepseekV2MLP: no bias"),
    const("fc_bias", False, f"{MLA_FILE}:201-209: fc is built with bias=False"),
    Value("norm_before_residual", ("norm_before_residual",), False, f"vLLM default: False ({MLA_FILE}:101)",
          says=f"config.json: norm_before_residual ({MLA_FILE}:101-104)"),
    const("input_norm", False, f"{MLA_FILE} builds no input_norm (no norm_before_fc)"),
    Value("fc_norm", ("fc_norm",), False, f"vLLM default: no fc_norm ({MLA_FILE}:211)", take=is_true,
          says=f"config.json: fc_norm ({MLA_FILE}:211-220)"),
    Value("feedback", ("norm_output",), "prenorm", f"vLLM default: the pre-norm state is fed back ({MLA_FILE}:222, "
          "254)", take=normed_if_true, says=f"config.json: norm_output ({MLA_FILE}:222, 251-254)"),
    const("final_norm", True, f"{MLA_FILE}:251: the final norm before lm_head"),
    const("lm_head_from_embed", False, f"{MLA_FILE}:299-303: its own lm_head (shared from the target if absent)"),
    const("later_norm", "input_layernorm", f"{MLA_FILE}:132-134: layers >= 1 are normed by input_layernorm"),
    stated("draft_vocab_size", reading_of("vocab_size"), f"vLLM: vocab_size ({MLA_FILE}:283-285)"),
    Refuse(lambda w: "target_hidden_size" in w.raw and w.raw["target_hidden_size"] is None,
           f"config.json sets target_hidden_size to null: vLLM computes None x A for fc's input ({MLA_FILE}:196-199, "
           "TypeError at load)", at="target_hidden_size"),
    Call(_read_mla_target_hidden_size),
    # fc's width: num_aux_hidden_states, else the count of eagle_config's ids, else 3; the top-level ids are not
    # counted (deepseek_eagle3.py:189-194)
    Count((Source("int", "num_aux_hidden_states", f"config.json: num_aux_hidden_states ({MLA_FILE}:189)"),
           Source("len", "eagle_config.eagle_aux_hidden_state_layer_ids", "config.json: eagle_config."
                  f"eagle_aux_hidden_state_layer_ids (count, {MLA_FILE}:190-193)")),
          3, f"vLLM default: 3 ({MLA_FILE}:189-193 counts only num_aux_hidden_states or eagle_config's ids, never the "
          "top-level ones)"),
    Ids(("eagle_aux_hidden_state_layer_ids", "eagle_config.layer_ids"), _AUX_WHY + ")"),
    const("aux_convention", "vllm", _CONVENTION),
    Call(_target_vocab),  # deepseek_eagle3.py:307-314
    Fact("q_proj", _q_proj),
    Fact("q_why", _q_why),
    Tensors((
        Rule(name_has("t2d"), f"vLLM skips t2d ({MLA_FILE}:376-377)"),
        Rule(prefixed, "refused: `model.` prefix",
             refuse=fmt("{name}: vLLM prefixes `model.` itself (" + MLA_FILE + ":381-382) and raises \"There is no "
                        "module or parameter named 'model.model...'\"")),
        Rule(all_of(role_is("d2t"), _D2T_REFUSED), "refused: no draft_id_to_target_id",
             refuse=f"d2t: vLLM builds no draft_id_to_target_id when draft_vocab_size equals the target vocabulary "
                    f"({MLA_FILE}:307-314), and raises for the unexpected tensor"),
        Rule(role_is("d2t"), load=True),
        Rule(name_ends(".bias"), "vLLM skips any unexpected *.bias silently (model_executor/models/utils.py:431-436)"),
        Rule(unknown, "refused: unknown tensor",
             refuse=fmt("{name}: vLLM's MLA drafter has no such parameter and raises \"There is no module or "
                        "parameter named ...\" (AutoWeightsLoader, model_executor/models/utils.py)")),
        Rule(_other_q_projection, "refused: no such q projection",
             refuse=fmt("{name}: {q_why} (deepseek_v2.py:1047-1097); vLLM raises for the unexpected tensor")),
        Rule(role_is("input_norm.weight"), "refused: no input_norm",
             refuse=fmt("{name}: vLLM's MLA drafter has no input_norm (no norm_before_fc in " + MLA_FILE + ") and "
                        "raises for the tensor")),
        Rule(fc_norm_unbuilt, "refused: no fc_norm",
             refuse=fmt("{name}: vLLM builds no fc_norm here (" + MLA_FILE + ":211-220: fc_norm only) and raises for "
                        "the tensor")),
        Rule(layer_beyond, "refused: layer beyond num_hidden_layers",
             refuse=fmt("{name}: vLLM builds {r.num_layers} layer(s) (" + MLA_FILE + ":176-186) and raises for layer "
                        "{n.layer}")),
    ), "uninitialised memory (vLLM raises nothing for a missing tensor: load_weights returns "
       f"None, {MLA_FILE}:370-398)", narrows=True),
    Call(_mla_after_load),
)


_PEAGLE_PASSES = ("update_peagle passes no fc_norm and no norm_output to the drafter's config (algos.py:53-87): "
                  "vLLM builds neither")
_V1_RUNNER = (_AUX_WHY + "; vLLM 0.28.0 to 0.33.0 only: their V1 runner, VLLM_USE_V2_MODEL_RUNNER=0, reads "
              "eagle_config's: gpu_model_runner.py:5202-5224)")
# config/speculative.py SpeculativeConfig's fields in 0.33.0 (read from its wheel, :407-): the keys a
# --speculative-config may hold; the config forbids any other (config/utils.py:72, extra="forbid")
SPECULATIVE_FIELDS_0_33 = frozenset((
    "enforce_eager", "num_speculative_tokens", "model", "method", "draft_tensor_parallel_size", "tensor_parallel_size",
    "quantization", "moe_backend", "attention_backend", "kv_cache_dtype", "max_model_len", "revision",
    "code_revision", "index_share_for_mtp_iteration", "disable_padded_drafter_batch", "disable_eagle_block_drop",
    "disable_lookahead_block_hashes", "draft_lm_head_quantization", "use_local_argmax_reduction",
    "use_heterogeneous_vocab", "prompt_lookup_max", "prompt_lookup_min", "parallel_drafting", "target_model_config",
    "target_parallel_config", "num_speculative_tokens_per_batch_size", "draft_model_config", "draft_parallel_config",
    "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob", "draft_load_config", "rejection_sample_method", "synthetic_acceptance_rates",
    "synthetic_acceptance_length", "enable_adaptive_verification", "draft_sample_method", "dspark_draft_topk",
    "xpress_topc", "fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k"))
# 0.34.0's (config/speculative.py:449-, recorded against its own parser: tests/conformance/recipes/vllm-0.34.0.json):
# disable_padded_drafter_batch and use_heterogeneous_vocab removed, four added
SPECULATIVE_FIELDS_0_34 = (SPECULATIVE_FIELDS_0_33 - {"disable_padded_drafter_batch", "use_heterogeneous_vocab"}) | {
    "custom_method", "draft_decode_context_parallel_size", "suffix_decoding_corpus_tokens", "speculator_options"}
# 0.30.0 to 0.32.0's (config/speculative.py:375-, :388-, :387-, read from their wheels): 0.33.0's but six it added
SPECULATIVE_FIELDS_0_30 = SPECULATIVE_FIELDS_0_33 - {
    "disable_lookahead_block_hashes", "draft_lm_head_quantization", "fly_entropy_threshold", "fly_entropy_top_k",
    "fly_window_size", "xpress_topc"}
# the switch "speculative_fields" names the release whose SpeculativeConfig a launch is held to
SPECULATIVE_FIELDS = {"0.30.0": SPECULATIVE_FIELDS_0_30, "0.33.0": SPECULATIVE_FIELDS_0_33,
                      "0.34.0": SPECULATIVE_FIELDS_0_34}


def _peagle(w: Walk) -> bool:
    return w.ckpt.layout == SPECULATORS and speculators_kind(w.raw) == PEAGLE


def _speculative_config(w: Walk) -> dict:
    """The launch's speculative config (--launch vllm=FILE: the recipe's JSON, or {"speculative_config": {...}})."""
    launch = w.launch if isinstance(w.launch, dict) else {}
    spec = launch.get("speculative_config", launch)
    return spec if isinstance(spec, dict) else {}


def _launch(w: Walk) -> None:
    """What the launch's speculative config asks of this release: a key its SpeculativeConfig does not have fails
    validation at startup; parallel drafting builds P-EAGLE's mask_hidden (0.33.0 llama_eagle3.py:347-355) and, from
    0.34.0, is refused for eagle3 (config/speculative.py:1688-1693)."""
    spec, r = _speculative_config(w), w.r
    fields = SPECULATIVE_FIELDS[w.switch("speculative_fields")]
    for key in sorted(k for k in spec if k not in fields):
        r.refuse(f"the launch's speculative_config has {key!r}, which vLLM {w.release}'s SpeculativeConfig does not "
                 f"have: it forbids unknown fields ({w.lines}config/utils.py:72, extra=\"forbid\") and startup fails "
                 "validation",
                 at=f"launch: speculative_config.{key}")
    parallel = spec.get("parallel_drafting") is True
    if parallel and not w.switch("peagle"):
        r.refuse(f"the launch's speculative_config sets parallel_drafting true: vLLM {w.release} raises "
                 "\"parallel_drafting is only supported by the dflash and dspark methods\" (0.34.0's "
                 "config/speculative.py:1688-1693)",
                 at="launch: speculative_config.parallel_drafting")
    w.facts["parallel"] = parallel and bool(w.switch("peagle"))


def _mask_hidden(w: Walk, name: str, n: Name) -> str:
    return "mask_hidden"


def _parallel_without_mask(w: Walk) -> bool:
    return bool(w.facts["parallel"]) and not any("mask_hidden" in n for n in w.ckpt.tensors)


_SPECULATORS_LAYER = (None, 8192, "vLLM: a speculators config has no class default")

# One walk, in the order vLLM's own loader reads the config (its file:line sources beside each step), then
# llama_eagle3.py's load_weights.
def _window(w: Walk) -> None:
    """vLLM 0.33.0 builds drafter layer i with a sliding window of ``sliding_window`` tokens when ``layer_types[i]``
    is "sliding_attention" (model_executor/models/llama.py:185-205, the index made draft-relative through
    target_layer_count, llama_eagle3.py:318-321; qwen3_eagle3.py:46-61 alike); a window of 0 is none
    (config/model.py:815-821); flash-attention attends (W - 1, 0) around the query's position
    (v1/attention/backends/flash_attn.py:166)."""
    reading.read_window(w.r, w.fields, w.where, f"vLLM {w.release}: {w.lines}model_executor/models/llama.py:185-205, "
                        "qwen3_eagle3.py:46-61", zero_disables=True)


STEPS = (
    Branch(_mla_class, MLA_STEPS),
    Fact("peagle", _peagle),
    # 0.34.0: transformers_utils/configs/speculators/algos.py:53-55 update_peagle raises (base.py:133-134 likewise)
    Stop(both(fact_is("peagle"), no(is_switch("peagle"))),
         fmt("vLLM {release} raises ValueError(\"P-EAGLE (parallel drafting EAGLE-3) is not supported.\") parsing a "
             "speculators config with speculators_model_type \"peagle\" (0.34.0's transformers_utils/configs/"
             "speculators/algos.py:53-55)")),
    Refuse(lambda w: w.facts["peagle"] and "mask_token_id" not in w.raw,
           "config.json has no mask_token_id: vLLM's update_peagle reads config_dict[\"mask_token_id\"] and raises "
           "KeyError (algos.py:83)", at="mask_token_id"),
    Call(_launch),
    Refuse(_parallel_without_mask, "the launch enables parallel drafting and the checkpoint has no mask_hidden: vLLM "
           "raises \"mask_hidden not found in weights but model is configured for parallel drafting\" "
           "(llama_eagle3.py:450-455)", at="mask_hidden"),
    model_type_of("llama"),
    Refuse(lambda w: _speculators(w) and w.facts["model_type"] not in ("llama", "qwen3"),
           fmt("vLLM raises \"Unsupported model_type {model_type} for Eagle3 speculator\" "
               "(configs/speculators/algos.py:41-44)")),
    # llama.py: getattr(config, "max_position_embeddings", 8192); a flat config's class has its own default.
    Layer(nested_defaults=_SPECULATORS_LAYER),
    Call(_window),
    Call(_architecture),
    # A speculators config is a plain PreTrainedConfig (configs/speculators/base.py:15-30): no class default; the
    # drafter builds range(config.num_hidden_layers) (llama_eagle3.py) and raises AttributeError.
    Refuse(lambda w: _speculators(w) and not is_int(w.fields.get("num_hidden_layers")),
           "transformer_layer_config has no num_hidden_layers: vLLM's speculators config has no class default and the "
           "drafter raises AttributeError building its layers (configs/speculators/base.py:15-30)",
           at="transformer_layer_config.num_hidden_layers"),
    # qwen3.py:205 reads config.max_position_embeddings with no default
    Refuse(lambda w: _speculators(w) and w.facts["qwen3"] and not is_int(w.fields.get("max_position_embeddings")),
           "transformer_layer_config has no max_position_embeddings: vLLM's Qwen3 attention reads "
           "config.max_position_embeddings without a default (qwen3.py:205) and raises AttributeError",
           at="transformer_layer_config.max_position_embeddings"),
    # llama.py LlamaMLP and qwen2.py Qwen2MLP (Qwen3's) raise for any other activation than silu
    Refuse(lambda w: w.r.hidden_act != "silu", fmt("vLLM raises \"Unsupported activation: {r.hidden_act}. Only silu "
                                                   "is supported for now.\" (llama.py:112-114 LlamaMLP, qwen2.py "
                                                   "Qwen2MLP)")),
    Call(_o_bias),
    Call(_norm_before_residual),
    Value("input_norm", ("norm_before_fc",), False, "vLLM default: False", null_absent=True, when=_speculators),
    Value("input_norm", ("eagle_config.norm_before_fc", "norm_before_fc"), False, "vLLM default: False", when=_flat),
    Value("fc_norm", ("fc_norm",), False, "vLLM default: False", null_absent=True, when=no(fact_is("peagle"))),
    Value("feedback", ("norm_output",), "prenorm", "vLLM default: False", take=normed, null_absent=True,
          when=no(fact_is("peagle"))),
    const("fc_norm", False, _PEAGLE_PASSES, when=fact_is("peagle")),
    const("feedback", "prenorm", _PEAGLE_PASSES, when=fact_is("peagle")),
    const("final_norm", True, "vLLM always applies the final norm before lm_head"),
    const("lm_head_from_embed", False, "vLLM's EAGLE-3 drafter has its own lm_head (shared from the target if absent)"),
    Fact("uses_aux", _uses_aux),
    stated("draft_vocab_size", reading_of("vocab_size"), "vLLM default: vocab_size"),
    *_target_hidden_size("config.json sets target_hidden_size to null: vLLM computes None x 3 for fc's input "
                         "(TypeError at load)", "vLLM default: hidden_size"),
    # The ids captured: the V2 model runner (the default) reads the top-level eagle_aux_hidden_state_layer_ids, then
    # eagle_config["layer_ids"]; never eagle_config["eagle_aux_hidden_state_layer_ids"]. The V1 runner
    # (VLLM_USE_V2_MODEL_RUNNER=0, no Triton, or parallel drafting) reads eagle_config's ids after the top level.
    # update_eagle3 puts a speculators config's ids at the top level.
    Ids(("eagle_aux_hidden_state_layer_ids", "eagle_config.layer_ids"), _V1_RUNNER, when=is_switch("v1_runner")),
    Ids(("eagle_aux_hidden_state_layer_ids", "eagle_config.layer_ids"), _AUX_WHY + "; 0.34.0 has Model Runner V2 "
        "only: no release from 0.34.0 on reads eagle_config's)", when=no(is_switch("v1_runner"))),
    Call(_no_aux_captured),
    const("aux_convention", "vllm", _CONVENTION),
    Count((Source("int", "num_aux_layers", "config.json: num_aux_layers (qwen3_eagle3.py:201-214)",
                  when=lambda w: w.facts["qwen3"]),  # qwen3_eagle3.py:201-214: num_aux_layers first
           Source("int", "num_aux_hidden_states", when=_flat, key=True),
           Source("len", "eagle_aux_hidden_state_layer_ids", "config.json: eagle_aux_hidden_state_layer_ids (count, "
                  "qwen3_eagle3.py)", when=lambda w: w.facts["qwen3"]),  # qwen3_eagle3.py also counts the top level
           Source("len", "eagle_config.eagle_aux_hidden_state_layer_ids",
                  "config.json: eagle_config.eagle_aux_hidden_state_layer_ids (count)")),
          # llama_eagle3.py sizes fc from num_aux_hidden_states or eagle_config's ids only: a speculators config's
          # ids (at the top level) are not counted.
          3, "vLLM default: 3 (llama_eagle3.py:209-221 counts only num_aux_hidden_states or eagle_config ids)"),
    Call(_target_vocab),
    Call(_raise_context),
    Tensors((
        Rule(name_has("t2d"), "vLLM skips t2d"),
        Rule(all_of(name_has("mask_hidden"), also(no(is_switch("peagle")))),
             fmt("vLLM {release} skips mask_hidden with a warning: \"parallel drafting is not supported for EAGLE-3\" "
                 "(0.34.0's llama_eagle3.py:421-426)")),
        Rule(all_of(name_has("mask_hidden"), also(fact_is("parallel"))), load=True, role=_mask_hidden),
        Rule(name_has("mask_hidden"), "vLLM skips mask_hidden with a warning unless the launch enables parallel "
             "drafting (llama_eagle3.py:431-439): `vllm serve DRAFTER` does for a P-EAGLE config (transformers_utils/"
             "configs/speculators/base.py:133-134), a --speculative-config needs \"parallel_drafting\": true"),
        Rule(name_ends("rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached"),
             "vLLM drops rotary buffers (REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER)"),
        Rule(prefixed, "refused: `model.` prefix", refuse=_PREFIX),
        Rule(all_of(role_is("d2t"), _D2T_REFUSED), "refused: no draft_id_to_target_id",
             refuse="d2t: vLLM builds no draft_id_to_target_id when draft_vocab_size equals the target vocabulary, "
                    "and raises for the unexpected tensor (llama_eagle3.py:338-345)"),
        Rule(role_is("d2t"), load=True),
        Rule(all_of(role_starts("fc."), also(lambda w: not w.facts["uses_aux"])),
             "vLLM drops fc.* when eagle_config.use_aux_hidden_state is false (llama_eagle3.py:462-463)"),
        Rule(all_of(name_ends(".bias"), any_of(unknown, role_is("fc.bias"))),
             "vLLM skips any unexpected *.bias silently (model_executor/models/utils.py:431-436)"),
        Rule(unknown, "refused: unknown tensor", refuse=fmt("{name}: vLLM raises \"There is no module or parameter "
                                                            "named ...\"")),
        Rule(all_of(role_ends(".bias"), _bias_wanted), load=True),
        Rule(role_ends(".bias"), "vLLM skips a bias its config does not declare (utils.py:431-436)"),
        Rule(all_of(role_is("input_norm.weight"), also(lambda w: not w.r.input_norm)),
             "vLLM drops input_norm unless norm_before_fc"),
        Rule(fc_norm_unbuilt, "refused: no fc_norm", refuse=fmt("{name}: vLLM builds no fc_norm here and raises for "
                                                                "the tensor")),
        Rule(layer_beyond, "refused: layer beyond num_hidden_layers",
             refuse=fmt("{name}: vLLM builds {r.num_layers} layer(s) and raises for layer {n.layer}")),
        Rule(all_of(role_ends("q_norm.weight", "k_norm.weight"), also(lambda w: not w.r.qk_norm)),
             "refused: no q/k norm", refuse=fmt("{name}: a Llama-layer drafter has no q/k norms; vLLM raises for the "
                                                "tensor")),
    ), "uninitialised memory (vLLM raises nothing for a missing tensor)", narrows=True),
    Call(_after_load),
)


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
_AUX_WHEN_UNUSED = (("aux_when_unused", True), ("speculative_fields", "0.30.0"))
# what 0.34.0 reads otherwise than 0.33.0, each stated by its switch (diffed wheel against wheel, 2026-12-06)
_0_34 = (("peagle", False), ("v1_runner", False), ("speculative_fields", "0.34.0"))
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
            "(llama_eagle3.py:179-183, 459-463 in 0.32.0). 0.30.0 to 0.32.0's SpeculativeConfig lacks six fields "
            "0.33.0 added (config/speculative.py:375-, 388-, 387-): a launch naming one fails their validation"),
    Release(VERSION, "2026-11-02", recorded="2026-12-01"),
    Release("0.34.0", "2026-11-16", recorded="2026-12-06", differs=_0_34,
            why="P-EAGLE dropped: a speculators config with speculators_model_type \"peagle\" raises ValueError "
            "(transformers_utils/configs/speculators/algos.py:53-55, base.py:133-134) and a mask_hidden tensor is "
            "skipped with a warning whatever the launch (llama_eagle3.py:421-426, qwen3_eagle3.py:399-404); the V1 "
            "model runner is gone (no v1/worker/gpu_model_runner.py: Model Runner V2 only, which never reads "
            "eagle_config's ids); SpeculativeConfig lost disable_padded_drafter_batch and use_heterogeneous_vocab "
            "and still forbids unknown keys (config/speculative.py:449-, config/utils.py:72), and parallel_drafting "
            "true with eagle3 raises (config/speculative.py:1688-1693). Read from the wheel, not modelled: a "
            "drafter's own quantized lm_head (packed weights, no plain weight) is kept instead of compared with the "
            "target's (v1/worker/gpu/spec_decode/eagle/utils.py:30-36), where 0.33.0 read draft.weight (utils.py:31); "
            "the EAGLE-3 drafter classes set has_own_lm_head only for a weight named lm_head* (model_executor/models/"
            "utils.py:1194-1196), and the gate reads no quantized drafter"),
)

PROFILE = Profile(
    NAME, VERSION, STEPS, vllm_input, vllm_ids_for,
    recorded_config=("norm_before_residual",),
    module=__name__, takes=(("aux_when_unused", False), ("any_rope", False), ("peagle", True), ("v1_runner", True),
                            ("speculative_fields", "0.33.0")),
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
    d2t_past_vocab="vLLM {release} indexes the draft logits with arange + d2t (0.33.0's model_executor/models/"
    "llama_eagle3.py:385-394: logits_new[:, targets] = logits, no range check): an index past the target "
    "vocabulary, a device-side error at the first draft",
    drafter_launch=launching.vllm_drafter,
    converts_to=FLAT,
    counting=counting.VLLM,
)
