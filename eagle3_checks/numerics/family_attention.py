"""Each drafter family's attention in torch, float32: what the forward pass (:mod:`.draft_steps`) calls for a layer.

The family's tensors and shapes are torch-free in :mod:`eagle3_checks.drafter.families`; a new family adds its
attention here, in :data:`ATTENTION`. Each takes the layer's input ``x`` (T, in), the layer prefix ``layers.N.``, the
reading (its tensors by role and its sizes), the weights, the positions, the KV cache and the draft step, and
returns (T, num_heads * value width) before o_proj, which the caller applies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..drafter.families import LLAMA, MLA
from ..drafter.families.mla import yarn_softmax_scale
from .mla_attention import mla_qkv
from .ops import KVCache, Tensor, attention, linear, rms_norm, rope, size
from .ops import rope_tables as cos_sin

if TYPE_CHECKING:
    from ..engines.reading import Reading
    from .draft_steps import Weights


def window_of(reading: Reading, p: str) -> tuple[int, str] | None:
    """The sliding window of layer ``p`` (``layers.N.``) as the reading builds it: (W, where it is measured from)."""
    w = reading.window()
    if w is None:
        return None
    size, layers = w
    return (size, reading.window_from) if int(p.split(".")[1]) in layers else None


def llama_attention(x: Tensor, p: str, reading: Reading, weights: Weights, positions: Tensor, cache: KVCache,
                    step: int, rope_tables: tuple[Tensor, float]) -> Tensor:
    """Grouped-query attention with rotate-half RoPE (``rope_tables`` = (inverse frequencies, attention factor))
    and, for Qwen3 layers, per-head q/k RMSNorm."""
    nh, nkv = size(reading, "num_heads", reading.num_heads), size(reading, "num_kv_heads", reading.num_kv_heads)
    hd = size(reading, "head_dim", reading.head_dim)
    t = x.shape[0]
    q = linear(x, reading, weights, p + "self_attn.q_proj.weight")
    k = linear(x, reading, weights, p + "self_attn.k_proj.weight")
    v = linear(x, reading, weights, p + "self_attn.v_proj.weight")
    q, k, v = (y.view(t, n, hd).transpose(0, 1) for y, n in ((q, nh), (k, nkv), (v, nkv)))
    if reading.qk_norm:
        def W(role: str) -> Tensor:
            return weights.f32(reading.tensors[role])

        eps = reading.rms_norm_eps
        q = rms_norm(q, W(p + "self_attn.q_norm.weight"), eps)
        k = rms_norm(k, W(p + "self_attn.k_norm.weight"), eps)
    freqs, scale = rope_tables
    tables = cos_sin(positions, freqs, scale, q.device)
    q, k = rope(q, positions, freqs, scale, tables), rope(k, positions, freqs, scale, tables)
    out = attention(q, k, v, cache, step, positions=positions, window=window_of(reading, p))
    return out.transpose(0, 1).reshape(t, nh * hd)


def mla_family_attention(x: Tensor, p: str, reading: Reading, weights: Weights, positions: Tensor, cache: KVCache,
                         step: int, rope_tables: tuple[Tensor, float]) -> Tensor:
    """DeepSeek MLA (:mod:`.mla_attention`) with the reading's MlaShape (its reader's rope pairing, yarn factors and
    softmax scale), over the drafter's KV-cache pattern: the context keys of step 0 and each row's own drafts."""
    shape = reading.mla
    prefix = p + "self_attn."
    used = {role[len(prefix):]: weights.f32(name) for role, name in reading.tensors.items()
            if role.startswith(prefix) and role != prefix + "o_proj.weight"}
    q, k, v = mla_qkv(x, used, shape, positions)
    out = attention(q, k, v, cache, step, scale=yarn_softmax_scale(shape), positions=positions,
                    window=window_of(reading, p))
    return out.transpose(0, 1).reshape(x.shape[0], shape.num_heads * shape.v_head_dim)


ATTENTION: dict[str, Callable[..., Tensor]] = {LLAMA: llama_attention, MLA: mla_family_attention}
