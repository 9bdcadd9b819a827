"""The two on-disk layouts of an EAGLE-3 drafter and the canonical tensor roles both map to.

* **speculators** (``Eagle3DraftModel.save_pretrained``, speculators 0.9): tensors named
  ``layers.N.*``; config nested in ``speculators_config`` / ``transformer_layer_config``.
* **flat** (EAGLE, SpecForge, AQ-MedAI; read by vLLM and SGLang): ``midlayer.*`` for the first
  layer, config fields at the top level with an ``eagle_config`` block.

A *role* is the layout-independent name of a tensor: the speculators name, so that
``midlayer.self_attn.q_proj.weight`` and ``layers.0.self_attn.q_proj.weight`` are both the role
``layers.0.self_attn.q_proj.weight``. Checks and reference specs speak in roles only.
"""

from __future__ import annotations

import re

from ..fast_dataclass import dataclass

SPECULATORS = "speculators"
FLAT = "flat"
UNKNOWN = "unknown"
# How a trainer counted a drafter's aux-layer ids: vLLM's (id L = the input of layer L) or SGLang's (id X = the
# output of layer X). Which layers each engine release then captures: eagle3_checks.engines (profile.Capture).
AUX_CONVENTIONS = ("vllm", "sglang")

# Architectures each layout's config may name, and the engine that knows the name.
# speculators 0.9: Eagle3SpeculatorConfig default "Eagle3Speculator" (models/eagle3/config.py);
# save_pretrained of the model class writes "Eagle3DraftModel".
SPECULATORS_ARCHITECTURES = frozenset({"Eagle3DraftModel", "Eagle3Speculator"})
# The drafters a speculators config may be (speculators_model_type) and the architectures each saves: EAGLE-3, and
# from speculators 0.6.0 on P-EAGLE (models/peagle/config.py: "peagle", ["PEagleSpeculator"], a mask_token_id;
# models/peagle/core.py:44-53: a learned mask_hidden of (1, 1, num_aux x H)), an EAGLE-3 drafter plus the state it
# pads the positions it drafts in parallel with. The engines that build it and the ones that refuse it:
# eagle3_checks.engines (vLLM 0.33.0 builds it, 0.34.0 refuses the config).
PEAGLE = "peagle"
SPECULATORS_KINDS = {"eagle3": SPECULATORS_ARCHITECTURES, PEAGLE: frozenset({"PEagleSpeculator", "PEagleDraftModel"})}
PEAGLE_TENSORS = ("mask_hidden",)


def speculators_kind(config: object) -> str | None:
    """The drafter a speculators config says it is ("eagle3", "peagle"), or None when it names none of them."""
    kind = config.get("speculators_model_type") if isinstance(config, dict) else None
    return kind if isinstance(kind, str) and kind in SPECULATORS_KINDS else None
# vLLM 0.33 model_executor/models/registry.py: the names it maps to llama_eagle3 (Llama layers) or qwen3_eagle3
# (Qwen3 layers: q_norm/k_norm), and SGLang 0.5.6 models/llama_eagle3.py (EntryClass = LlamaForCausalLMEagle3).
# vLLM's Eagle3DeepseekV2/V3ForCausalLM are MLA drafters (MLA_ARCHITECTURES below, the family drafter/families/mla.py).
QWEN3_FLAT_ARCHITECTURES = frozenset({"Eagle3Qwen3ForCausalLM"})
FLAT_ARCHITECTURES = frozenset(
    {
        "LlamaForCausalLMEagle3",
        "Eagle3LlamaForCausalLM",
        "Eagle3Qwen2_5vlForCausalLM",
        "Eagle3Qwen3vlForCausalLM",
        "Eagle3MiniMaxM2ForCausalLM",
    }
    | QWEN3_FLAT_ARCHITECTURES
)

# The MLA drafter family (drafter/families/mla.py): DeepSeek multi-latent attention in the decoder layer, other
# attention tensors (q_a_proj, kv_a_proj_with_mqa, kv_b_proj, ...). vLLM 0.33 registers both names
# (model_executor/models/registry.py:698-713 -> deepseek_eagle3.py), SGLang 0.5.23 the first
# (srt/models/kimi_k25_eagle3.py:315, 523; the Kimi-K2.x drafters).
MLA_ARCHITECTURES = frozenset({"Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"})
_MLA_TENSOR = re.compile(r"(^|\.)self_attn\.(q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj)\.weight$")
# Config fields only an MLA drafter states (DeepseekV3Config's attention sizes).
MLA_CONFIG_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")

# The drafter families (drafter/families/): the decoder layer's kind, which decides its tensor roles.
LLAMA, MLA = "llama", "mla"

# Tensors outside the decoder layers.
GLOBAL_ROLES = ("embed_tokens.weight", "fc.weight", "fc.bias", "input_norm.weight", "norm.weight", "lm_head.weight",
                "d2t", "t2d")
_FC_NORM = re.compile(r"^fc_norm\.(\d+)\.weight$")

# Tensors inside decoder layer N (suffix after "layers.N.").
ATTN_PROJ = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_PROJ = ("gate_proj", "up_proj", "down_proj")
LAYER_SUFFIXES = (
    "input_layernorm.weight",
    "hidden_norm.weight",
    *(f"self_attn.{p}.weight" for p in ATTN_PROJ),
    *(f"self_attn.{p}.bias" for p in ATTN_PROJ),
    "self_attn.q_norm.weight",
    "self_attn.k_norm.weight",
    "post_attention_layernorm.weight",
    *(f"mlp.{p}.weight" for p in MLP_PROJ),
    *(f"mlp.{p}.bias" for p in MLP_PROJ),
)

# The tensors of an MLA decoder layer: the same norms and MLP, DeepSeek's attention (keys as
# numerics/mla_attention.py reads them, relative to self_attn.; q_proj replaces q_a_proj / q_a_layernorm /
# q_b_proj when q_lora_rank is null).
MLA_ATTENTION = ("q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight", "q_proj.weight",
                 "kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight", "kv_b_proj.weight", "o_proj.weight")
MLA_LAYER_SUFFIXES = (
    "input_layernorm.weight",
    "hidden_norm.weight",
    *(f"self_attn.{k}" for k in MLA_ATTENTION),
    "post_attention_layernorm.weight",
    *(f"mlp.{p}.weight" for p in MLP_PROJ),
)
_SUFFIXES = {LLAMA: frozenset(LAYER_SUFFIXES), MLA: frozenset(MLA_LAYER_SUFFIXES)}

# Drafters have one decoder layer, a few at most; an index beyond this is not a drafter's (and bounds the work).
MAX_LAYERS = 64

_NAME = re.compile(r"^(?P<prefix>model\.)?(?:(?P<mid>midlayer)|layers\.(?P<idx>\d+))\.(?P<suffix>.+)$")


@dataclass(frozen=True)
class Name:
    """What an on-disk tensor name says about itself."""

    name: str
    role: str | None  # canonical role, None when the name means nothing to an EAGLE-3 drafter
    layer: int | None  # decoder layer index, None for global tensors
    style: str | None  # "midlayer" or "layers" for layer tensors
    prefixed: bool  # carried a leading "model."


def parse_name(name: str, family: str = LLAMA) -> Name:
    """Map an on-disk tensor name to its canonical role, for a decoder layer of ``family`` (its tensors differ)."""
    match = _NAME.match(name)
    if match and (match["mid"] or (len(match["idx"]) <= 3 and int(match["idx"]) < MAX_LAYERS)):
        suffix = match["suffix"]
        layer = 0 if match["mid"] else int(match["idx"])
        style = "midlayer" if match["mid"] else "layers"
        role = f"layers.{layer}.{suffix}" if suffix in _SUFFIXES[family] else None
        return Name(name, role, layer, style, bool(match["prefix"]))
    if match:  # a layer index no drafter has: not a drafter tensor
        return Name(name, None, None, None, bool(match["prefix"]))
    prefixed = name.startswith("model.")
    bare = name[len("model."):] if prefixed else name
    if bare in GLOBAL_ROLES or _FC_NORM.match(bare):
        return Name(name, bare, None, None, prefixed)
    return Name(name, None, None, None, prefixed)


def is_norm(role: str | None) -> bool:
    """An RMSNorm scale: the layer norms, q/k norms, the final norm, fc_norm.N."""
    if not role:
        return False
    return role.endswith("norm.weight") or bool(_FC_NORM.match(role))

def on_disk_name(role: str, layout: str, style: str = "midlayer") -> str:
    """The name a role has in a layout. Flat drafters name their first layer ``midlayer.``
    (``style='layers'`` keeps ``layers.0.``, which vLLM also maps)."""
    if layout == FLAT and style == "midlayer" and role.startswith("layers.0."):
        return "midlayer." + role[len("layers.0."):]
    return role


def str_list(value: object) -> list[str] | None:
    """``value`` when it is a list of strings (architectures, say), else None: a config holds anything."""
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def has_qk_norm(layout: str, model_type: str | None, architectures: list | None) -> bool:
    """Whether the decoder layers carry q_norm/k_norm (Qwen3 layers): a speculators config says so with its layer
    model_type; a flat config with its architecture (vLLM builds Llama layers for LlamaForCausalLMEagle3 whatever
    the model_type)."""
    if layout == SPECULATORS:
        return model_type == "qwen3"
    return any(a in QWEN3_FLAT_ARCHITECTURES for a in str_list(architectures) or [])


def eagle3_class(name: str) -> str:
    """The class vLLM builds for an architecture name under method eagle3: every name not starting or ending with
    Eagle3 gets the prefix Eagle3 (vLLM 0.33 transformers_utils/configs/eagle.py:55-64)."""
    return name if name.startswith("Eagle3") or name.endswith("Eagle3") else f"Eagle3{name}"


def drafter_family(config: dict | None, layout: str, names: list[str] | tuple[str, ...] = ()) -> str:
    """The one place that decides a drafter's family (the kind of its decoder layer): MLA for a flat config naming an
    MLA drafter class (directly, or a name vLLM prefixes into one), stating MLA attention sizes (kv_lora_rank), or
    with MLA attention tensors in the file; else Llama (Llama or Qwen3 layers). The speculators layout has no MLA
    drafter (speculators 0.9: llama and qwen3 layers only)."""
    if layout != FLAT or not isinstance(config, dict):
        return LLAMA
    if any(eagle3_class(a) in MLA_ARCHITECTURES for a in str_list(config.get("architectures")) or []):
        return MLA
    if "kv_lora_rank" in config or any(_MLA_TENSOR.search(n) for n in names):
        return MLA
    return LLAMA


def unmodelled_drafter(config: dict | None, layout: str,
                       names: list[str] | tuple[str, ...] = ()) -> tuple[str, str] | None:
    """(class, what it is) for a drafter of a family eagle3-checks does not model, whose checks assuming a modelled
    layer then skip (registry ``modelled_only``); None when it is modelled. Every family :func:`drafter_family`
    detects is modelled (Llama/Qwen3 layers, MLA), so this is None until a family is recognised but not modelled."""
    return None


def detect_layout(config: dict | None) -> str:
    """The layout a config.json describes, from its structure (not from its architectures)."""
    if not isinstance(config, dict):
        return UNKNOWN
    if any(k in config for k in ("speculators_config", "speculators_model_type", "transformer_layer_config")):
        return SPECULATORS
    return FLAT
