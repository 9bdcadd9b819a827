"""The Llama family: Llama decoder layers (q/k/v/o projections, RoPE), and Qwen3 layers (the same plus per-head
q_norm / k_norm): the tensors and shapes. The attention in torch is
:func:`eagle3_checks.numerics.family_attention.llama_attention`."""

from __future__ import annotations

from typing import Any

from ..layout import ATTN_PROJ, LAYER_SUFFIXES, LLAMA
from .base import CONDITIONAL, Add, Family
from .base import product as _mul


def attention(d: Any, p: str, d_in: int | None, d_sym: str, add: Add) -> None:
    """q/k/v take the layer's input (2H on the first layer), o_proj returns H; biases and q/k norms per flags."""
    h, nh, nkv, hd = d.hidden_size, d.num_heads, d.num_kv_heads, d.head_dim
    add(p + "self_attn.q_proj.weight", (_mul(nh, hd), d_in), f"(nh·hd, {d_sym})")
    add(p + "self_attn.k_proj.weight", (_mul(nkv, hd), d_in), f"(nkv·hd, {d_sym})")
    add(p + "self_attn.v_proj.weight", (_mul(nkv, hd), d_in), f"(nkv·hd, {d_sym})")
    add(p + "self_attn.o_proj.weight", (h, _mul(nh, hd)), "(H, nh·hd)")
    o_bias = d.attention_bias if d.o_bias is None else d.o_bias
    for proj, rows, sym in zip(ATTN_PROJ, (_mul(nh, hd), _mul(nkv, hd), _mul(nkv, hd), h),
                               ("nh·hd", "nkv·hd", "nkv·hd", "H"), strict=True):
        if (o_bias if proj == "o_proj" else d.attention_bias):
            add(p + f"self_attn.{proj}.bias", (rows,), f"({sym},)", CONDITIONAL, "attention_bias is true")
    if d.qk_norm:
        add(p + "self_attn.q_norm.weight", (hd,), "(hd,)", CONDITIONAL, d.qk_reason)
        add(p + "self_attn.k_norm.weight", (hd,), "(hd,)", CONDITIONAL, d.qk_reason)


FAMILY = Family(LLAMA, "Llama (or Qwen3, q/k-normed) decoder layers", LAYER_SUFFIXES,
                ("num_attention_heads", "num_key_value_heads", "head_dim", "attention_bias", "rope_theta",
                 "rope_scaling"),
                attention,
                classes="LlamaForCausalLMEagle3, Eagle3LlamaForCausalLM, Eagle3Qwen3ForCausalLM, Eagle3DraftModel")
