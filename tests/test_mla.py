"""DeepSeek multi-latent attention (eagle3_checks.numerics.mla_attention, drafter.families.mla) against
transformers' own modules, and its readings.

The reference is transformers 5's ``DeepseekV3Attention`` (with ``DeepseekV3RMSNorm`` inside it) fed by its own
``DeepseekV3RotaryEmbedding`` and eager attention: an implementation written independently of ours (interleaved rope
by even/odd slices with de-interleaved output, yarn through ``_compute_yarn_parameters``, the softmax mscale through
``yarn_apply_mscale``). The first EAGLE-3 layer reads a 2H input: transformers' module is built with
``hidden_size = 2H``, so its own q/kv projections take the 2H input, and only ``o_proj`` (a plain ``nn.Linear``) is
swapped for one with H outputs - every MLA-specific step still runs in transformers' code.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from eagle3_checks.drafter.families import mla  # noqa: E402
from eagle3_checks.engines.sglang_0_5_23 import MLA_READER as SGLANG  # noqa: E402
from eagle3_checks.engines.vllm_0_33 import MLA_READER as VLLM  # noqa: E402
from eagle3_checks.numerics import mla_attention, ops  # noqa: E402

H, HEADS, Q_RANK, KV_RANK, NOPE, ROPE, V = 64, 4, 48, 32, 16, 8, 16
T = 7


def _config(rope: dict | None, q_lora_rank: int | None = Q_RANK, interleave: bool = True,
            hidden: int = H, max_pos: int | None = None, eps: float = 1e-6) -> dict:
    if max_pos is None:  # a consistent yarn config: max = factor * original (transformers warns otherwise)
        max_pos = int(rope["factor"] * rope["original_max_position_embeddings"]) if rope and "factor" in rope else 4096
    cfg = {"hidden_size": hidden, "num_attention_heads": HEADS, "num_key_value_heads": HEADS,
           "q_lora_rank": q_lora_rank, "kv_lora_rank": KV_RANK, "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE,
           "v_head_dim": V, "rms_norm_eps": eps, "max_position_embeddings": max_pos, "rope_interleave": interleave,
           "rope_parameters": rope or {"rope_type": "default", "rope_theta": 10000.0}}
    return cfg


def _yarn(factor: float, original: int, mscale: float, mscale_all_dim: float, theta: float = 50000.0) -> dict:
    return {"rope_type": "yarn", "rope_theta": theta, "factor": factor, "original_max_position_embeddings": original,
            "beta_fast": 32, "beta_slow": 1, "mscale": mscale, "mscale_all_dim": mscale_all_dim}


def _reference(cfg: dict, in_dim: int, seed: int):
    """transformers' DeepseekV3Attention (input width in_dim, output width H) with random weights and norms."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as m

    conf = transformers.DeepseekV3Config(**{**cfg, "hidden_size": in_dim})
    conf._attn_implementation = "eager"
    torch.manual_seed(seed)
    attn = m.DeepseekV3Attention(conf, layer_idx=0).float().eval()
    attn.o_proj = torch.nn.Linear(HEADS * V, H, bias=False)  # H outputs for a 2H input (see the module docstring)
    assert isinstance(attn.kv_a_layernorm, m.DeepseekV3RMSNorm)
    with torch.no_grad():
        for name, p in attn.named_parameters():
            p.copy_(1 + 0.2 * torch.randn_like(p) if "layernorm" in name else torch.randn_like(p) * 0.15)
    return attn, m.DeepseekV3RotaryEmbedding(conf)


def _run_reference(attn, rotary, hidden, positions):
    x = hidden[None]
    cos, sin = rotary(x, positions[None])
    t = hidden.shape[0]
    mask = torch.full((t, t), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        out, _ = attn(x, (cos, sin), mask)
    return out[0]


CASES = {
    "plain-rope": (None, Q_RANK, True, H),
    "yarn-40x32-mscale1": (_yarn(40, 32, 1.0, 1.0), Q_RANK, True, H),
    "yarn-64x4096-mscale.707": (_yarn(64, 4096, 0.707, 1.0), Q_RANK, True, H),
    "yarn-40x32-mscale.707": (_yarn(40, 32, 0.707, 1.0, theta=10000.0), Q_RANK, True, H),
    "q_proj": (_yarn(64, 4096, 1.0, 1.0), None, True, H),
    "in-2H": (_yarn(64, 4096, 1.0, 1.0), Q_RANK, True, 2 * H),
    "in-2H-q_proj": (_yarn(40, 32, 0.707, 1.0), None, True, 2 * H),
    "neox-pairing": (_yarn(40, 32, 1.0, 1.0), Q_RANK, False, H),
}


@pytest.mark.parametrize("case", list(CASES))
def test_forward_matches_transformers_deepseek_v3_attention(case):
    rope, q_rank, interleave, in_dim = CASES[case]
    cfg = _config(rope, q_rank, interleave)
    attn, rotary = _reference(cfg, in_dim, seed=1)
    gen = torch.Generator().manual_seed(2)
    hidden = torch.randn(T, in_dim, generator=gen)
    positions = torch.tensor([0, 1, 2, 5, 37, 300, 5000])  # past original_max_position_embeddings = 32
    expected = _run_reference(attn, rotary, hidden, positions)

    weights = {k: v.detach().clone() for k, v in attn.state_dict().items()}
    shape = mla.MlaShape.from_config(cfg, reader=mla.TRANSFORMERS)
    got = mla_attention.mla_attention(hidden, weights, shape, positions)

    assert got.shape == (T, H) and got.dtype == torch.float32
    err = (got - expected).abs().max().item()
    scale = expected.abs().max().item()
    assert scale > 0.1
    assert err <= 1e-5 * scale, f"{case}: max abs error {err:.3g} at output scale {scale:.3g}"


def test_rope_pairing_and_latent_eps_matter():
    """The knobs the readers differ in change the output (so the comparisons above would catch them)."""
    cfg = _config(_yarn(40, 32, 1.0, 1.0), eps=1e-2)
    attn, rotary = _reference(cfg, H, seed=3)
    hidden = torch.randn(T, H, generator=torch.Generator().manual_seed(4))
    positions = torch.arange(T) * 11
    expected = _run_reference(attn, rotary, hidden, positions)
    weights = dict(attn.state_dict())
    reference = mla.MlaShape.from_config(cfg, reader=mla.TRANSFORMERS)
    assert (mla_attention.mla_attention(hidden, weights, reference, positions) - expected).abs().max() < 1e-5
    for variant in (
        mla.MlaShape.from_config(cfg, reader=VLLM),  # latent norms at config eps 1e-2, not 1e-6
        mla.MlaShape(**{**reference.__dict__, "rope_interleave": False}),
        mla.MlaShape(**{**reference.__dict__, "softmax_mscale": False}),
    ):
        assert (mla_attention.mla_attention(hidden, weights, variant, positions) - expected).abs().max() > 1e-3


def test_the_eps_bound_is_where_the_normed_latents_reach_the_tolerance():
    """eps_mean_square_bound: for inputs of mean square m at or above it, an RMSNorm's output with eps a and with eps b
    differ by at most the tolerance (relative), measured on torch's own arithmetic; below it, by more."""
    a, b, tol = 1e-5, 1e-6, 1e-5
    m = mla.eps_mean_square_bound(a, b, tol)
    assert abs(m - 0.45) < 1e-3 and mla.eps_mean_square_bound(b, a, tol) == m
    assert mla.eps_scale_change(a, b, m) == pytest.approx(tol, rel=1e-6) and mla.eps_mean_square_bound(a, a, tol) == 0
    x = torch.randn(64, 512, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    w = torch.ones(512, dtype=torch.float64)
    for scale, within in ((1.0, True), (math.sqrt(m) * 1.01, True), (math.sqrt(m) * 0.5, False)):
        v = x / x.pow(2).mean(-1, keepdim=True).sqrt() * scale  # mean square scale**2 in every row
        ya, yb = ops.rms_norm(v, w, a), ops.rms_norm(v, w, b)
        change = float(((ya - yb).norm(dim=-1) / yb.norm(dim=-1)).max())
        assert (change <= tol) is within, (scale, change)
        assert change == pytest.approx(mla.eps_scale_change(a, b, scale ** 2), rel=1e-3)


def test_rope_tables_match_transformers_yarn():
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as m

    cfg = _config(_yarn(64, 4096, 0.707, 1.0))
    rotary = m.DeepseekV3RotaryEmbedding(transformers.DeepseekV3Config(**cfg))
    positions = torch.tensor([0, 3, 4095, 4096, 100_000])
    cos_ref, sin_ref = rotary(torch.zeros(1), positions[None])
    cos, sin = mla_attention.rope_tables(mla.MlaShape.from_config(cfg), positions)
    assert torch.allclose(cos, cos_ref[0, :, : ROPE // 2], atol=2e-6)
    assert torch.allclose(sin, sin_ref[0, :, : ROPE // 2], atol=2e-6)


def test_kimi_k25_scale_and_factors():
    """Kimi-K2.5: yarn factor 64, original 4096, mscale = mscale_all_dim = 1, theta 50000, qk_head_dim 192."""
    cfg = {"num_attention_heads": 64, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
           "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 262144,
           "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096,
                            "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
           "rope_theta": 50000.0}
    m = 0.1 * math.log(64) + 1
    for reader in (mla.TRANSFORMERS, VLLM, SGLANG):
        shape = mla.MlaShape.from_config(cfg, reader=reader)
        assert shape.rope_theta == 50000.0 and shape.rope_interleave
        assert mla.yarn_softmax_scale(shape) == pytest.approx(192 ** -0.5 * m * m, rel=1e-12)
        assert mla.rope_cos_sin_factor(shape) == pytest.approx(1.0)
    assert mla.expected_attention_shapes(mla.MlaShape.from_config(cfg), 7168, 2 * 7168) == {
        "q_a_proj.weight": (1536, 14336), "q_a_layernorm.weight": (1536,), "q_b_proj.weight": (64 * 192, 1536),
        "kv_a_proj_with_mqa.weight": (576, 14336), "kv_a_layernorm.weight": (512,),
        "kv_b_proj.weight": (64 * 256, 512), "o_proj.weight": (7168, 64 * 128)}


def test_softmax_scale_without_mscale_all_dim_and_without_yarn():
    shape = mla.MlaShape.from_config(_config(_yarn(40, 32, 0.707, 0.0)), reader=VLLM)
    assert mla.yarn_softmax_scale(shape) == pytest.approx(24 ** -0.5)
    assert mla.rope_cos_sin_factor(shape) == pytest.approx(0.1 * 0.707 * math.log(40) + 1)
    plain = mla.MlaShape.from_config(_config(None))
    assert plain.rope_scaling is None and mla.yarn_softmax_scale(plain) == 24 ** -0.5
    assert mla.rope_cos_sin_factor(plain) == 1.0


def test_readings_differ_where_the_engines_do():
    neox = _config(_yarn(40, 32, 1.0, 1.0), interleave=False)
    assert mla.MlaShape.from_config(neox, reader=VLLM).rope_interleave is True  # is_neox_style=False always
    assert mla.MlaShape.from_config(neox, reader=SGLANG).rope_interleave is False
    assert mla.MlaShape.from_config(neox, reader=mla.TRANSFORMERS).rope_interleave is False

    eps = _config(None, eps=1e-5)
    assert mla.MlaShape.from_config(eps, reader=mla.TRANSFORMERS).latent_norm_eps == 1e-6
    assert mla.MlaShape.from_config(eps, reader=VLLM).latent_norm_eps is None
    assert mla.MlaShape.from_config(eps, reader=SGLANG).latent_norm_eps is None

    af1 = _config({**_yarn(40, 32, 1.0, 1.0), "attention_factor": 1.0})
    assert mla.MlaShape.from_config(af1, reader=VLLM).softmax_mscale is False  # deepseek_llama_scaling
    assert mla.MlaShape.from_config(af1, reader=SGLANG).softmax_mscale is True
    no_scale = _config({**_yarn(40, 32, 1.0, 1.0), "apply_yarn_scaling": False})
    assert mla.MlaShape.from_config(no_scale, reader=SGLANG).softmax_mscale is False
    assert mla.MlaShape.from_config(no_scale, reader=VLLM).softmax_mscale is True

    only_all_dim = _config({k: v for k, v in _yarn(40, 32, 1.0, 1.0).items() if k != "mscale"})
    assert mla.rope_cos_sin_factor(mla.MlaShape.from_config(only_all_dim, reader=VLLM)) == pytest.approx(1.0)
    assert mla.rope_cos_sin_factor(mla.MlaShape.from_config(only_all_dim, reader=mla.TRANSFORMERS)) == (
        pytest.approx(0.1 * math.log(40) + 1))

    no_original = _config({k: v for k, v in _yarn(40, 32, 1.0, 1.0).items()
                           if k != "original_max_position_embeddings"} | {"rope_type": "deepseek_yarn"}, max_pos=99)
    with pytest.raises(ValueError, match="original_max_position_embeddings missing: vLLM 0.33"):
        mla.MlaShape.from_config(no_original, reader=VLLM)
    sg = mla.MlaShape.from_config(no_original, reader=SGLANG)
    assert sg.rope_scaling is not None and sg.rope_scaling["original_max_position_embeddings"] == 99
    with pytest.raises(ValueError, match="only 'yarn' is modelled"):
        mla.MlaShape.from_config(no_original, reader=mla.TRANSFORMERS)


def test_from_config_defaults_and_null_q_lora_rank():
    shape = mla.MlaShape.from_config({})
    assert (shape.num_heads, shape.q_lora_rank, shape.kv_lora_rank, shape.qk_head_dim, shape.v_head_dim) == (
        128, 1536, 512, 192, 128)
    assert shape.rope_scaling is None and shape.rope_theta == 10000.0
    assert mla.MlaShape.from_config({"q_lora_rank": None}).q_lora_rank is None
    with pytest.raises(ValueError, match="qk_rope_head_dim must be even"):
        mla.MlaShape.from_config({"qk_rope_head_dim": 7})


def _tiny(q_lora_rank: int | None, in_dim: int):
    shape = mla.MlaShape.from_config(_config(_yarn(40, 32, 1.0, 1.0), q_lora_rank))
    gen = torch.Generator().manual_seed(5)
    weights = {k: torch.randn(s, generator=gen) for k, s in mla.expected_attention_shapes(shape, H, in_dim).items()}
    return shape, weights, torch.randn(3, in_dim, generator=gen), torch.arange(3)


@pytest.mark.parametrize("q_lora_rank,in_dim", [(Q_RANK, H), (Q_RANK, 2 * H), (None, 2 * H)])
def test_each_mis_shaped_or_missing_weight_is_a_clear_value_error(q_lora_rank, in_dim):
    shape, weights, hidden, positions = _tiny(q_lora_rank, in_dim)
    assert mla_attention.mla_attention(hidden, weights, shape, positions, hidden_size=H).shape == (3, H)
    for key, good in weights.items():
        bad = torch.zeros(*good.shape[:-1], good.shape[-1] + 1)
        expected, found = tuple(good.shape), tuple(bad.shape)
        with pytest.raises(ValueError) as info:
            mla_attention.mla_attention(hidden, {**weights, key: bad}, shape, positions, hidden_size=H,
                              prefix="layers.0.self_attn.")
        assert str(info.value) == f"layers.0.self_attn.{key}: expected shape {expected}, found {found}"
        with pytest.raises(ValueError, match=f"^{key.replace('.', '[.]')}: missing"):
            mla_attention.mla_attention(hidden, {k: v for k, v in weights.items() if k != key}, shape, positions,
                              hidden_size=H)


def test_o_proj_rows_set_hidden_size_and_bad_inputs():
    shape, weights, hidden, positions = _tiny(Q_RANK, H)
    weights["o_proj.weight"] = torch.randn(40, HEADS * V)  # hidden_size read from o_proj
    assert mla_attention.mla_attention(hidden, weights, shape, positions).shape == (3, 40)
    with pytest.raises(ValueError, match=r"o_proj.weight: expected shape \(64, 64\), found \(40, 64\)"):
        mla_attention.mla_attention(hidden, weights, shape, positions, hidden_size=H)
    with pytest.raises(ValueError, match="positions must be"):
        mla_attention.mla_attention(hidden, weights, shape, torch.arange(4))
    with pytest.raises(ValueError, match=r"^q_a_proj.weight: expected shape \(48, 65\), found \(48, 64\)"):
        mla_attention.mla_attention(torch.randn(3, H + 1), weights, shape, positions)


RECORDINGS = sorted((__import__("pathlib").Path(__file__).parent / "data" / "mla_rope").glob("*.json"))


@pytest.mark.parametrize("path", RECORDINGS, ids=[p.stem for p in RECORDINGS])
def test_rope_and_softmax_scale_match_the_engines_own_code(path):
    """conformance/record_mla_rope.py ran each engine's own rotary embedding (get_rope / get_rope_wrapper, then
    forward_native) and softmax-scale code on random q/k; our reading of the same config reproduces them."""
    import base64
    import json

    import numpy as np

    recording = json.loads(path.read_text())
    engine = recording["engine"]
    assert len(recording["cases"]) >= 4
    for name, case in recording["cases"].items():
        rope = dict(case["rope"])
        if rope["rope_type"] == "deepseek_yarn":
            rope["rope_type"] = "yarn"  # what a config states; both engines rename any non-default type
        cfg = {"qk_rope_head_dim": case["d"], "qk_nope_head_dim": case["nope"], "rope_parameters": rope,
               "max_position_embeddings": case["max_position"], "rope_interleave": not case["neox"]}
        shape = mla.MlaShape.from_config(cfg, reader={"vllm": VLLM, "sglang": SGLANG}[engine])
        if engine == "vllm" and case["neox"]:  # vLLM's MLA always interleaves; the recording exercises its class
            shape = dataclasses.replace(shape, rope_interleave=False)
        t, d = len(case["positions"]), case["d"]
        vec = {key: torch.from_numpy(np.frombuffer(base64.b64decode(case[key]), dtype="<f4").copy()).view(t, 1, d)
               for key in ("q", "k", "q_rotated", "k_rotated")}
        cos, sin = mla_attention.rope_tables(shape, torch.tensor(case["positions"]))
        for key in ("q", "k"):
            got = mla_attention.apply_rope(vec[key].transpose(0, 1), cos, sin, shape.rope_interleave).transpose(0, 1)
            err = (got - vec[key + "_rotated"]).abs().max().item()
            assert err <= 2e-6, f"{engine} {name} {key}: max abs error {err:.3g}"
        assert mla.yarn_softmax_scale(shape) == pytest.approx(case["softmax_scale"], rel=1e-12), (engine, name)


def test_causal_rows_ignore_later_tokens_and_shift_with_positions():
    shape, weights, hidden, positions = _tiny(Q_RANK, 2 * H)
    out = mla_attention.mla_attention(hidden, weights, shape, positions)
    changed = hidden.clone()
    changed[2:] += 1.0
    again = mla_attention.mla_attention(changed, weights, shape, positions)
    assert torch.allclose(out[:2], again[:2], atol=1e-6, rtol=0) and not torch.allclose(out[2], again[2])
    # RoPE sees only relative positions: the same tokens 1000 positions later attend the same way
    unscaled = dataclasses.replace(shape, rope_scaling=None)
    shifted = mla_attention.mla_attention(hidden, weights, unscaled, positions + 1000)
    plain = mla_attention.mla_attention(hidden, weights, dataclasses.replace(shape, rope_scaling=None), positions)
    assert (shifted - plain).abs().max() < 1e-4 * plain.abs().max()
