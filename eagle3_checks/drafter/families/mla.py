"""The MLA family: EAGLE-3 drafters whose decoder layer has DeepSeek multi-latent attention (Kimi-K2.5 / K2.6,
``Eagle3DeepseekV2ForCausalLM``: vLLM 0.33 ``model_executor/models/deepseek_eagle3.py``, also registered as
``Eagle3DeepseekV3ForCausalLM``; SGLang 0.5.23 ``srt/models/kimi_k25_eagle3.py``). The draft KV cache then has the
target's MLA layout.

Everything but the attention is the EAGLE-3 layer every family shares: fc over the aux states (with ``fc_norm`` per
state in the eagle3.1 variant), ``input_layernorm(embeds) ‖ hidden_norm(h)`` into the first layer, the MLP, the final
norm, lm_head and d2t. The attention's tensors (``layers.N.self_attn.`` +)::

    q_a_proj            (q_lora_rank, in)                   q_lora_rank stated
    q_a_layernorm       (q_lora_rank,)
    q_b_proj            (nh·(qk_nope + qk_rope), q_lora_rank)
    q_proj              (nh·(qk_nope + qk_rope), in)        q_lora_rank null (vLLM only: SGLang raises)
    kv_a_proj_with_mqa  (kv_lora_rank + qk_rope, in)
    kv_a_layernorm      (kv_lora_rank,)
    kv_b_proj           (nh·(qk_nope + v_head_dim), kv_lora_rank)
    o_proj              (H, nh·v_head_dim)

where ``in`` is 2H on the first layer (its input is the concatenation) and H on later ones. The shapes come from
:func:`eagle3_checks.numerics.mla.expected_attention_shapes`, the one source of truth; the attention itself from
:func:`eagle3_checks.numerics.mla.mla_qkv` (yarn rope and DeepSeek's softmax mscale as each reader computes them).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ...numerics.mla import expected_attention_shapes, mla_qkv, rope_cos_sin_factor, yarn_softmax_scale
from ...numerics.ops import _attention
from ..layout import MLA, MLA_CONFIG_FIELDS, MLA_LAYER_SUFFIXES
from .base import Add, Family

# How each attention tensor's shape reads, in symbols (``{in}``: the layer's input width).
SYMBOLS = {
    "q_a_proj.weight": "(q_lora_rank, {in})",
    "q_a_layernorm.weight": "(q_lora_rank,)",
    "q_b_proj.weight": "(nh·(qk_nope_head_dim + qk_rope_head_dim), q_lora_rank)",
    "q_proj.weight": "(nh·(qk_nope_head_dim + qk_rope_head_dim), {in})",
    "kv_a_proj_with_mqa.weight": "(kv_lora_rank + qk_rope_head_dim, {in})",
    "kv_a_layernorm.weight": "(kv_lora_rank,)",
    "kv_b_proj.weight": "(nh·(qk_nope_head_dim + v_head_dim), kv_lora_rank)",
    "o_proj.weight": "(H, nh·v_head_dim)",
}
# The config fields each attention tensor's shape depends on (besides the heads and H): for fixes and messages.
SIZED_BY = {
    "q_a_proj.weight": ("q_lora_rank",), "q_a_layernorm.weight": ("q_lora_rank",),
    "q_b_proj.weight": ("qk_nope_head_dim", "qk_rope_head_dim", "q_lora_rank"),
    "q_proj.weight": ("qk_nope_head_dim", "qk_rope_head_dim"),
    "kv_a_proj_with_mqa.weight": ("kv_lora_rank", "qk_rope_head_dim"), "kv_a_layernorm.weight": ("kv_lora_rank",),
    "kv_b_proj.weight": ("qk_nope_head_dim", "v_head_dim", "kv_lora_rank"), "o_proj.weight": ("v_head_dim",),
}


class _Unknown:
    """A size the config does not state: any arithmetic with it is unknown too (a shape dimension None)."""

    def __add__(self, other: Any) -> _Unknown:
        return self

    __radd__ = __mul__ = __rmul__ = __add__


_UNKNOWN = _Unknown()


def _known(v: int | None) -> Any:
    return _UNKNOWN if v is None else v


def attention(d: Any, p: str, d_in: int | None, d_sym: str, add: Add) -> None:
    """The layer's MLA attention tensors, sized by numerics.mla.expected_attention_shapes."""
    m = d.mla
    if m is None:  # the reading could not build the attention (its refusals say why): sizes unknown
        m = SimpleNamespace(q_lora_rank=None, kv_lora_rank=None, qk_nope_head_dim=None, qk_rope_head_dim=None,
                            v_head_dim=None, q_proj=False)
    nope, rope = _known(m.qk_nope_head_dim), _known(m.qk_rope_head_dim)
    shape = SimpleNamespace(num_heads=_known(d.num_heads), q_lora_rank=None if m.q_proj else _known(m.q_lora_rank),
                            kv_lora_rank=_known(m.kv_lora_rank), qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                            v_head_dim=_known(m.v_head_dim), qk_head_dim=nope + rope)
    shapes = expected_attention_shapes(shape, _known(d.hidden_size), _known(d_in))  # type: ignore[arg-type]
    for key, dims in shapes.items():
        add(p + "self_attn." + key, tuple(None if isinstance(x, _Unknown) else x for x in dims),
            SYMBOLS[key].replace("{in}", d_sym))


def attention_forward(x, p: str, reading: Any, weights: Any, positions, cache: Any, step: int, rope: Any):
    """DeepSeek MLA (numerics/mla.py) with the reading's MlaShape (its reader's rope pairing, yarn factors and softmax
    scale), over the drafter's KV-cache pattern: the context keys of step 0 and each row's own drafts."""
    shape = reading.mla
    prefix = p + "self_attn."
    used = {role[len(prefix):]: weights.f32(name) for role, name in reading.tensors.items()
            if role.startswith(prefix) and role != prefix + "o_proj.weight"}
    q, k, v = mla_qkv(x, used, shape, positions)
    out = _attention(q, k, v, cache, step, scale=yarn_softmax_scale(shape))
    return out.transpose(0, 1).reshape(x.shape[0], shape.num_heads * shape.v_head_dim)


def effective(shape: Any) -> dict[str, Any] | None:
    """What an MLA reading computes with, as numbers (no torch): two readers that agree here compute the same
    attention, however they arrived at it (an eps left to the config's vs stated, a cos/sin factor of 1 given or
    derived). The engine semantics compare this."""
    if shape is None:
        return None
    scaling = shape.rope_scaling
    return {
        "num_heads": shape.num_heads, "q_lora_rank": shape.q_lora_rank, "kv_lora_rank": shape.kv_lora_rank,
        "qk_nope_head_dim": shape.qk_nope_head_dim, "qk_rope_head_dim": shape.qk_rope_head_dim,
        "v_head_dim": shape.v_head_dim,
        "latent_norm_eps": float(shape.rms_norm_eps if shape.latent_norm_eps is None else shape.latent_norm_eps),
        "rope_theta": float(shape.rope_theta), "rope_interleave": shape.rope_interleave,
        "yarn": None if scaling is None else {k: float(v) for k, v in sorted(scaling.items()) if k != "mscale"
                                              and k != "mscale_all_dim"},
        "yarn_extrapolation_factor": float(shape.yarn_extrapolation_factor) if scaling else None,
        "yarn_truncate": shape.yarn_truncate if scaling else None,
        "rope_cos_sin_factor": round(rope_cos_sin_factor(shape), 12),
        "softmax_scale": round(yarn_softmax_scale(shape), 12),
    }


FAMILY = Family(MLA, "DeepSeek multi-latent attention (MLA) decoder layers", MLA_LAYER_SUFFIXES,
                ("num_attention_heads", *MLA_CONFIG_FIELDS, "rope_theta", "rope_scaling", "rope_interleave",
                 "rms_norm_eps", "max_position_embeddings"),
                attention, attention_forward, classes="Eagle3DeepseekV2ForCausalLM, Eagle3DeepseekV3ForCausalLM")
