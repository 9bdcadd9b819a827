"""Record how vLLM 0.33.0 or SGLang 0.5.23 rotates MLA's rope dims and scales its softmax, for tests/test_mla.py.

    $CONFORMANCE_VENVS/vllm/bin/python conformance/record_mla_rope.py vllm tests/data/mla_rope/vllm-0.33.0.json
    SGLANG_USE_CPU_ENGINE=1 $CONFORMANCE_VENVS/sglang/bin/python conformance/record_mla_rope.py \
        sglang tests/data/mla_rope/sglang-0.5.23.json

Runs in the engine's own environment (conformance/requirements-ENGINE.txt) and only calls the engine's code:

* vLLM: ``get_rope(rope_dim, max_position, is_neox_style, rope_parameters)`` with ``rope_type`` ``deepseek_yarn`` (or
  ``default``), as ``DeepseekV2MLAAttention`` does (vllm/model_executor/models/deepseek_v2.py:1115-1127), then
  ``forward_native``; the softmax scale as deepseek_v2.py:1044, 1129-1136 compose it from the module's own
  ``yarn_get_mscale``.
* SGLang: ``get_rope_wrapper(..., device="cpu")`` as ``DeepseekV2AttentionMLA`` calls it
  (sglang/srt/models/deepseek_v2.py:2164-2175; on cpu it is ``get_rope_cpu``, which builds the same
  ``DeepseekScalingRotaryEmbedding`` a GPU server gets from ``get_rope``), then ``forward_native``; the scale from
  ``compute_mla_mscale_scaling`` (sglang/srt/configs/model_config.py:2623-2648), as deepseek_v2.py:2177-2178 does.
  Plain RoPE (no scaling) is recorded from vLLM only: SGLang's cpu factory builds deepseek_yarn alone.

Each case's q (T, 1, d) and k (T, 1, d) are random, stored with the results as base64 float32 (little-endian), so the
test reads the engine's exact numbers without either engine installed.
"""

from __future__ import annotations

import base64
import json
import os
import sys

CASES = {
    # Kimi-K2.5: yarn factor 64 from 4096, mscale = mscale_all_dim = 1, theta 50000, rope dim 64, nope 128
    "kimi-k25": {"d": 64, "nope": 128, "neox": False, "max_position": 262144,
                 "positions": [0, 1, 7, 300, 4095, 4096, 100000, 262143],
                 "rope": {"rope_type": "deepseek_yarn", "rope_theta": 50000.0, "factor": 64.0,
                          "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
                          "mscale": 1.0, "mscale_all_dim": 1.0}},
    # the tests' tiny drafter: rope 8, nope 16; mscale 0.707 vs mscale_all_dim 1 (cos/sin factor below 1)
    "tiny-mscale-0.707": {"d": 8, "nope": 16, "neox": False, "max_position": 1280,
                          "positions": [0, 1, 7, 31, 32, 300, 1279],
                          "rope": {"rope_type": "deepseek_yarn", "rope_theta": 10000.0, "factor": 40.0,
                                   "original_max_position_embeddings": 32, "beta_fast": 32, "beta_slow": 1,
                                   "mscale": 0.707, "mscale_all_dim": 1.0}},
    # rotate-half pairing (SGLang with rope_interleave false; vLLM's MLA never asks for it, its class can)
    "tiny-neox": {"d": 8, "nope": 16, "neox": True, "max_position": 1280, "positions": [0, 3, 33, 1000],
                  "rope": {"rope_type": "deepseek_yarn", "rope_theta": 10000.0, "factor": 40.0,
                           "original_max_position_embeddings": 32, "mscale": 1.0, "mscale_all_dim": 1.0}},
    # mscale without mscale_all_dim: cos/sin scaled by yarn_get_mscale(40, 0.707), softmax not scaled
    "tiny-no-mscale-all-dim": {"d": 8, "nope": 16, "neox": False, "max_position": 1280, "positions": [0, 5, 700],
                               "rope": {"rope_type": "deepseek_yarn", "rope_theta": 10000.0, "factor": 40.0,
                                        "original_max_position_embeddings": 32, "mscale": 0.707}},
    "tiny-plain": {"d": 8, "nope": 16, "neox": False, "max_position": 4096, "positions": [0, 1, 100, 4000],
                   "rope": {"rope_type": "default", "rope_theta": 10000.0}, "engines": ["vllm"]},
}


def _b64(tensor) -> str:
    return base64.b64encode(tensor.detach().cpu().numpy().astype("<f4").tobytes()).decode()


def _vllm(case: dict):
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope
    from vllm.model_executor.models.deepseek_v2 import yarn_get_mscale

    rope = dict(case["rope"])
    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        emb = get_rope(case["d"], max_position=case["max_position"], rope_parameters=rope,
                       is_neox_style=case["neox"])
    scale = (case["nope"] + case["d"]) ** -0.5
    if rope["rope_type"] == "deepseek_yarn":
        m = yarn_get_mscale(rope["factor"], float(rope.get("mscale_all_dim", False)))
        scale = scale * m * m
    return emb, scale, type(emb).__name__


def _sglang(case: dict):
    from sglang.srt.configs.model_config import compute_mla_mscale_scaling
    from sglang.srt.layers.rotary_embedding import base as rope_base
    from sglang.srt.layers.rotary_embedding.factory import get_rope_wrapper

    rope_base._is_cpu = True  # as record_sglang.py: no CUDA/vllm fallback kernels on this host
    rope = dict(case["rope"])
    emb = get_rope_wrapper(case["d"], rotary_dim=case["d"], max_position=case["max_position"],
                           base=rope["rope_theta"], rope_scaling=rope, is_neox_style=case["neox"], device="cpu")
    scale = compute_mla_mscale_scaling(rope, (case["nope"] + case["d"]) ** -0.5)
    return emb, scale, type(emb).__name__


def main(engine: str, out_path: str) -> None:
    from importlib.metadata import version

    import torch

    build = {"vllm": _vllm, "sglang": _sglang}[engine]
    gen = torch.Generator().manual_seed(0)
    out: dict = {"engine": engine, "version": version(engine), "torch": torch.__version__, "cases": {}}
    for name, case in CASES.items():
        if engine not in case.get("engines", [engine]):
            continue
        t, d = len(case["positions"]), case["d"]
        q = torch.randn(t, 1, d, generator=gen)
        k = torch.randn(t, 1, d, generator=gen)
        emb, scale, cls = build(case)
        q_out, k_out = emb.forward_native(torch.tensor(case["positions"]), q.clone(), k.clone())
        out["cases"][name] = {**{k2: v for k2, v in case.items() if k2 != "engines"}, "class": cls,
                              "softmax_scale": scale, "q": _b64(q), "k": _b64(k),
                              "q_rotated": _b64(q_out), "k_rotated": _b64(k_out)}
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{engine} {out['version']}: {len(out['cases'])} cases -> {out_path}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
