"""DeepSeek multi-latent attention (MLA) for EAGLE-3 drafters, in plain torch, float32, CPU: the numeric core of the
MLA drafter family (Kimi-K2.5 / K2.6 ``Eagle3DeepseekV2ForCausalLM``).

torch is imported inside the functions only; importing this module costs nothing, and the header path never calls it.

Interface (everything here works on one sequence of T tokens, no batch dimension):

* :class:`MlaShape` - the MLA sizes and the rope/yarn numbers, plus the few knobs in which the readers differ
  (``rope_interleave``, ``latent_norm_eps``, ``softmax_mscale``, ``rope_attention_factor``,
  ``yarn_extrapolation_factor``, ``yarn_truncate``). :meth:`MlaShape.from_config` builds it from a plain config dict
  as one reader (:class:`MlaReader`) reads it: :data:`TRANSFORMERS` (5.19, ``DeepseekV3Attention``: what the config
  states, the reference), or an engine release's (``eagle3_checks.engines.vllm_0_33.MLA_READER``, 0.33.0;
  ``eagle3_checks.engines.sglang_0_5_23.MLA_READER``, 0.5.23).
* :func:`yarn_get_mscale`, :func:`yarn_softmax_scale`, :func:`rope_cos_sin_factor`, :func:`rope_inv_freq`,
  :func:`rope_tables`, :func:`apply_rope` - DeepSeek's yarn rope and softmax scale.
* :func:`expected_attention_shapes` - each ``self_attn.*`` weight's shape (the one source of truth for shape checks);
  :func:`check_attention_weights` raises :class:`ValueError` naming the key, the expected and the found shape.
* :func:`mla_qkv` (per-head q, k, v, rope applied), :func:`causal_attention`, :func:`mla_output` (o_proj) and
  :func:`mla_attention`, which composes them: causal self-attention over T tokens. A multi-step drafter pass (a
  cache of context keys plus each row's own drafts, as :mod:`.draft_steps` runs it) uses :func:`mla_qkv` and
  :func:`mla_output` around its own attention, with :func:`yarn_softmax_scale` in place of ``head_dim ** -0.5``.

Checked by tests/test_mla.py against transformers' ``DeepseekV3Attention`` (whole layer, float32 rounding) and
against the engines' own rotary embedding and softmax-scale code, recorded by conformance/record_mla_rope.py.

The computation, per token (``H`` = hidden size, ``in_dim`` = H, or 2H for the first EAGLE-3 layer whose input is
``concat(input_layernorm(embed), hidden_norm(h))``; only ``q_a_proj`` / ``q_proj`` and ``kv_a_proj_with_mqa`` read it)::

    c_q  = rms(q_a_proj(x), q_a_layernorm)          (q_lora_rank);  q = q_b_proj(c_q)   or   q = q_proj(x)
    q    -> (num_heads, qk_nope_head_dim + qk_rope_head_dim), each head split [nope | rope]
    kv_a = kv_a_proj_with_mqa(x)                    (kv_lora_rank + qk_rope_head_dim), split [latent | k_rope]
    c_kv = rms(latent, kv_a_layernorm)              the norm applies to the latent only, never to k_rope
    kv   = kv_b_proj(c_kv) -> (num_heads, qk_nope_head_dim + v_head_dim), each head split [k_nope | v]
    rope on q's rope part (per head) and on k_rope (one, shared by all heads); k = [k_nope | k_rope] per head
    out  = o_proj(softmax(q.k * yarn_softmax_scale, causal) v)

Engine sources this was checked against (``VL/`` = ``vllm/`` in vllm 0.33.0, ``SG23/`` = ``sglang/srt/`` in sglang
0.5.23, ``TF/`` = ``transformers/`` in transformers 5.19.0):

* split of ``kv_a_proj_with_mqa``'s output ``[kv_lora_rank | qk_rope_head_dim]``, kv_a_layernorm on the latent only:
  ``VL/model_executor/layers/mla.py:203, 217``; ``SG23/models/deepseek_common/attention_forward_methods/
  forward_mha.py:225-228``; ``TF/models/deepseek_v3/modeling_deepseek_v3.py:446-447``.
  Both engines fuse ``q_a_proj`` and ``kv_a_proj_with_mqa`` row-wise, q first (``VL/model_executor/models/
  deepseek_v2.py:1049-1055``, split back at ``VL/model_executor/layers/mla.py:184-187``; ``SG23/models/
  kimi_k25_eagle3.py:118-124, 480-483``), so the separate tensors are read unchanged.
* q per head ``[nope | rope]``: ``VL/model_executor/layers/mla.py:225-230``; ``SG23/.../forward_mha.py:224``;
  ``TF/.../modeling_deepseek_v3.py:443``. ``q_a_layernorm`` between q_a_proj and q_b_proj:
  ``VL/model_executor/layers/mla.py:190``; ``SG23/.../forward_mha.py:215-216``.
* kv_b_proj's output per head ``[k_nope | v]``: ``VL/model_executor/layers/attention/mla_attention.py:408-423,
  3043-3051``; ``SG23/.../forward_mha.py:288-291``, ``SG23/models/kimi_k25_eagle3.py:515-518``;
  ``TF/.../modeling_deepseek_v3.py:417-418``.
* softmax scale ``qk_head_dim ** -0.5 * m * m``, ``m = yarn_get_mscale(factor, mscale_all_dim)``:
  ``VL/model_executor/models/deepseek_v2.py:1044, 1129-1136`` (``mscale_all_dim`` default False = 0, so m = 1);
  ``SG23/models/deepseek_v2.py:2059, 2177-2178`` with ``SG23/configs/model_config.py:2623-2648``;
  ``TF/.../modeling_deepseek_v3.py:268-275, 406`` (only when ``mscale_all_dim`` is truthy: the same number).
* ``yarn_get_mscale(s, m) = 1 if s <= 1 else 0.1 * m * ln(s) + 1``: ``VL/model_executor/layers/rotary_embedding/
  deepseek_scaling_rope.py:20-23``; ``SG23/layers/rotary_embedding/yarn.py:60-63``.
* yarn cos/sin (``DeepseekScalingRotaryEmbedding``): inverse frequencies blended between ``1/(factor*base^(2i/d))``
  and ``1/base^(2i/d)`` by ``1 - ramp(low, high)`` with ``low, high = yarn_find_correction_range(beta_fast,
  beta_slow, d, base, original_max_position_embeddings)`` (floor/ceil, clamped to [0, d-1]); cos and sin multiplied by
  ``yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)`` (defaults mscale 1,
  mscale_all_dim 0): ``VL/model_executor/layers/rotary_embedding/deepseek_scaling_rope.py:52-55, 73-113``,
  ``common.py:34-70``, built with ``original_max_position_embeddings`` (``__init__.py:284-312``);
  ``SG23/layers/rotary_embedding/rope_variant.py:359-421``, ``factory.py:371-401``, ``yarn.py:15-51``;
  ``TF/modeling_rope_utils.py:345-483``.
* rope pairing: vLLM always interleaved (``is_neox_style=False``, ``VL/model_executor/models/deepseek_v2.py:
  1122-1127``; gptj rotation ``deepseek_scaling_rope.py:158-167``, ``common.py:25-29``); SGLang
  ``is_neox_style = not config.rope_interleave`` (default True, ``SG23/models/deepseek_v2.py:2166``);
  transformers interleaved when ``config.rope_interleave`` (default True), else rotate-half
  (``TF/.../modeling_deepseek_v3.py:453-456``; its interleaved path returns the pair members de-interleaved, the same
  permutation for q and k, so q.k and the attention output are unchanged).
* the 2H input of the first EAGLE-3 layer: ``VL/model_executor/models/deepseek_eagle3.py:82`` with
  ``deepseek_v2.py:1049-1064, 1090-1097`` (``q_proj`` too when ``q_lora_rank`` is null); ``SG23/models/
  kimi_k25_eagle3.py:113-124`` (raises when ``q_lora_rank`` is null), concat order ``[embeds, hidden]`` at ``:162``.

Where the readers differ numerically (each a field of :class:`MlaShape`, set by :meth:`MlaShape.from_config`):

* ``rope_interleave``: vLLM 0.33 always pairs interleaved dims and ignores ``config.rope_interleave``; SGLang 0.5.23 and
  transformers follow it (False: rotate-half / neox pairing).
* ``latent_norm_eps``: transformers builds ``q_a_layernorm`` and ``kv_a_layernorm`` with eps 1e-6 whatever the config
  (``TF/.../modeling_deepseek_v3.py:38, 381, 393``; DeepSeek's own code does the same); both engines use
  ``config.rms_norm_eps`` (``VL/model_executor/models/deepseek_v2.py:1082, 1098``; ``SG23/models/deepseek_v2.py:2077,
  2163``).
* ``softmax_mscale``: vLLM skips the ``m * m`` factor when ``rope_parameters["attention_factor"] == 1.0`` (it then
  builds ``deepseek_llama_scaling``, ``VL/model_executor/models/deepseek_v2.py:1115-1136``); SGLang skips it when
  ``apply_yarn_scaling`` or ``apply_scale`` is false (``SG23/models/deepseek_v2.py:2177``,
  ``SG23/configs/model_config.py:2636-2639``); transformers never skips it.
* ``rope_attention_factor``: transformers uses ``rope_parameters["attention_factor"]`` when given, and
  ``yarn_get_mscale(factor)`` unless both ``mscale`` and ``mscale_all_dim`` are truthy (``TF/modeling_rope_utils.py:
  435-439``), where DeepSeek's formula (both engines) uses defaults 1 and 0; SGLang multiplies the ratio by
  ``attn_factor`` (``SG23/layers/rotary_embedding/rope_variant.py:364-368``); vLLM ignores both keys for cos/sin.
* ``yarn_extrapolation_factor`` (SGLang only, ``rope_variant.py:394-399``), ``yarn_truncate`` (transformers only,
  ``TF/modeling_rope_utils.py:474-475``).
* any ``rope_type`` other than ``default`` is DeepSeek yarn in both engines (``VL/model_executor/models/
  deepseek_v2.py:1115-1120``, ``SG23/models/deepseek_v2.py:2065-2066``); transformers models only ``yarn`` here.
  Missing ``factor`` / ``original_max_position_embeddings``: vLLM raises (KeyError), SGLang uses 1.0 / the
  ``max_position_embeddings`` (``SG23/layers/rotary_embedding/factory.py:372-378``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..drafter.families.mla import (
    ATTENTION_KEYS,
    CONFIG_DEFAULTS,
    TRANSFORMERS,
    MlaReader,
    MlaShape,
    expected_attention_shapes,
    rope_cos_sin_factor,
    yarn_get_mscale,
    yarn_param,
    yarn_softmax_scale,
)
from .ops import Tensor, rms_norm


def rope_inv_freq(shape: MlaShape) -> Tensor:
    """Inverse frequencies, float32 tensor (qk_rope_head_dim // 2,), computed in float32 as both engines do:
    ``1 / base^(2i/d)``, under yarn blended with ``1 / (factor * base^(2i/d))`` by DeepSeek's correction ramp."""
    import torch

    d, base = shape.qk_rope_head_dim, float(shape.rope_theta)
    pos_freqs = base ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    if shape.rope_scaling is None:
        return 1.0 / pos_freqs
    factor, original = yarn_param(shape, "factor"), yarn_param(shape, "original_max_position_embeddings")

    def correction_dim(rotations: float) -> float:
        return (d * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(yarn_param(shape, "beta_fast")), correction_dim(yarn_param(shape, "beta_slow"))
    if shape.yarn_truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # against a zero-width ramp, as every implementation does
    ramp = ((torch.arange(d // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation = (1 - ramp) * shape.yarn_extrapolation_factor
    return (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation


def rope_tables(shape: MlaShape, positions: Tensor) -> tuple[Tensor, Tensor]:
    """``(cos, sin)``, each float32 (T, qk_rope_head_dim // 2): one angle per rotary pair at each integer position,
    times :func:`rope_cos_sin_factor`."""
    import torch

    angles = positions.to(torch.float32)[:, None] * rope_inv_freq(shape).to(positions.device)[None, :]
    factor = rope_cos_sin_factor(shape)
    return angles.cos() * factor, angles.sin() * factor


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, interleave: bool) -> Tensor:
    """Rotate ``x`` (..., T, d) by the per-pair tables (T, d/2). ``interleave``: pairs (2i, 2i+1) (GPT-J, DeepSeek);
    else pairs (i, i + d/2) (rotate-half, neox). The result keeps ``x``'s layout."""
    import torch

    if interleave:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def check_attention_weights(weights: Mapping[str, Tensor], shape: MlaShape, hidden_size: int, in_dim: int,
                            prefix: str = "") -> None:
    """Raise :class:`ValueError` for the first weight that is missing or mis-shaped, naming ``prefix + key``, the
    expected and the found shape. Extra keys are not this function's business."""
    for key, expected in expected_attention_shapes(shape, hidden_size, in_dim).items():
        if key not in weights:
            raise ValueError(f"{prefix}{key}: missing (expected shape {expected})")
        found = tuple(int(n) for n in weights[key].shape)
        if found != expected:
            raise ValueError(f"{prefix}{key}: expected shape {expected}, found {found}")


def _check_inputs(hidden: Tensor, positions: Tensor) -> None:
    if hidden.dim() != 2:
        raise ValueError(f"MLA hidden states must be (T, in_dim), found shape {tuple(hidden.shape)}")
    if positions.dim() != 1 or positions.shape[0] != hidden.shape[0]:
        raise ValueError(f"MLA positions must be (T,) with T = {hidden.shape[0]}, found shape {tuple(positions.shape)}")


def mla_qkv(hidden: Tensor, weights: Mapping[str, Tensor], shape: MlaShape,
            positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-head ``(q, k, v)`` for ``hidden`` (T, in_dim) at integer ``positions`` (T,): q and k float32
    (num_heads, T, qk_head_dim) laid out [nope | rope] with rope applied, v (num_heads, T, v_head_dim).
    Weights are read as given (any float dtype, upcast to float32); shapes are not checked here
    (:func:`mla_attention` does)."""
    import torch
    import torch.nn.functional as F

    _check_inputs(hidden, positions)
    x = hidden.float()
    t, nh = x.shape[0], shape.num_heads
    eps = shape.rms_norm_eps if shape.latent_norm_eps is None else shape.latent_norm_eps

    def W(key: str) -> Tensor:
        return weights[key].float()

    if shape.q_lora_rank is None:
        q = F.linear(x, W("q_proj.weight"))
    else:
        q = F.linear(rms_norm(F.linear(x, W("q_a_proj.weight")), W("q_a_layernorm.weight"), eps), W("q_b_proj.weight"))
    q = q.view(t, nh, shape.qk_head_dim).transpose(0, 1)
    kv_a = F.linear(x, W("kv_a_proj_with_mqa.weight"))
    latent, k_rope = torch.split(kv_a, [shape.kv_lora_rank, shape.qk_rope_head_dim], dim=-1)
    kv = F.linear(rms_norm(latent, W("kv_a_layernorm.weight"), eps), W("kv_b_proj.weight"))
    kv = kv.view(t, nh, shape.qk_nope_head_dim + shape.v_head_dim).transpose(0, 1)
    k_nope, v = torch.split(kv, [shape.qk_nope_head_dim, shape.v_head_dim], dim=-1)
    cos, sin = rope_tables(shape, positions.to(x.device))
    q_nope, q_rope = torch.split(q, [shape.qk_nope_head_dim, shape.qk_rope_head_dim], dim=-1)
    q_rope = apply_rope(q_rope, cos, sin, shape.rope_interleave)
    k_rope = apply_rope(k_rope, cos, sin, shape.rope_interleave).unsqueeze(0).expand(nh, -1, -1)
    return torch.cat((q_nope, q_rope), dim=-1), torch.cat((k_nope, k_rope), dim=-1), v.contiguous()


def causal_attention(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    """softmax(q k^T * scale) v with row t seeing keys 0..t: q, k (nh, T, dk), v (nh, T, dv) -> (nh, T, dv)."""
    import torch

    t = q.shape[1]
    scores = (q @ k.transpose(1, 2)) * scale
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    return probs @ v


def mla_output(attn: Tensor, weights: Mapping[str, Tensor]) -> Tensor:
    """``o_proj`` on per-head outputs (nh, T, v_head_dim), heads concatenated in order -> (T, hidden_size)."""
    import torch.nn.functional as F

    nh, t, dv = attn.shape
    return F.linear(attn.transpose(0, 1).reshape(t, nh * dv), weights["o_proj.weight"].float())


def mla_attention(hidden: Tensor, weights: Mapping[str, Tensor], shape: MlaShape, positions: Tensor, *,
                  hidden_size: int | None = None, prefix: str = "") -> Tensor:
    """Causal MLA self-attention over T tokens: ``hidden`` (T, in_dim) -> float32 (T, hidden_size).

    ``weights`` maps the keys of :data:`ATTENTION_KEYS` (relative to the layer's ``self_attn.``) to tensors;
    ``in_dim`` is ``hidden.shape[-1]`` (H, or 2H for the first EAGLE-3 layer). ``hidden_size`` defaults to
    ``o_proj.weight``'s output rows. Every weight's shape is checked first (:func:`check_attention_weights`, messages
    prefixed with ``prefix``): a bad one raises :class:`ValueError`, never a torch shape error."""
    _check_inputs(hidden, positions)
    if hidden_size is None:
        if "o_proj.weight" not in weights or weights["o_proj.weight"].dim() != 2:
            found = tuple(weights["o_proj.weight"].shape) if "o_proj.weight" in weights else None
            width = shape.num_heads * shape.v_head_dim
            raise ValueError(f"{prefix}o_proj.weight: expected a 2-d (hidden_size, {width}) weight, found "
                             f"{'missing' if found is None else found}")
        hidden_size = int(weights["o_proj.weight"].shape[0])
    check_attention_weights(weights, shape, hidden_size, int(hidden.shape[-1]), prefix)
    q, k, v = mla_qkv(hidden, weights, shape, positions)
    return mla_output(causal_attention(q, k, v, yarn_softmax_scale(shape)), weights)


__all__ = ["ATTENTION_KEYS", "CONFIG_DEFAULTS", "TRANSFORMERS", "MlaReader",
           "MlaShape", "apply_rope", "causal_attention",
           "check_attention_weights", "expected_attention_shapes", "mla_attention", "mla_output", "mla_qkv",
           "rope_cos_sin_factor", "rope_inv_freq", "rope_tables", "yarn_get_mscale", "yarn_softmax_scale"]
