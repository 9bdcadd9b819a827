"""accept on a Kimi-K2-sized drafter (the AQ-MedAI shapes: H 7168, 64 heads of 128, draft vocabulary 32000, target
vocabulary 163840), over 1,024 recorded positions with K 3 and the target's lm_head (the labels and alpha), against
the bare matmuls of the same shapes in torch, measured side by side in this run.

The drafter is ``kimi_block`` (4.7 GB of real bf16 data); the target is its final norm and lm_head alone (2.35 GB,
the same repeated random block); the data is 8 speculators-format samples of 131 tokens (random bf16 states), 128
positions each. The baseline is the floor: every matrix product the evaluation computes (each ``mm_blocks`` call's
input and weight shapes, the drafter's and the target head's), recorded in the measured run and done again as plain
float32 ``torch.mm`` on weights already in memory, in a fresh process with the same threads; the faster of the two
orientations counts (each measured once: a pass takes minutes on 2 cores). The evaluation's time runs from opening
the checkpoint to the result, in a fresh process.

Targets: wall time at most 1.5x the bare matmuls; peak RSS (VmHWM) at most the checkpoint plus the target's lm_head
plus 1 GB: the data is read a sample at a time, the weights memory-mapped and upcast a block at a time.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from conftest import PYTHON, report, write_block_checkpoint
from eagle3_checks.drafter.example import KIMI_K2
from eagle3_checks.storage.safetensors import RawTensor
from test_forward_check import bare_matmuls

SAMPLES, TOKENS, K = 8, 131, 3  # with the target's labels 8 x (131 - 3) = 1,024 positions

CHILD = """
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
import torch  # noqa: F401
from eagle3_checks.acceptance import evaluate, expect_of, load_head, readings, samples, target_head
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.numerics import draft_steps
shapes, mm = [], draft_steps.mm_blocks
def recording(x, w, device, buf=None):
    shapes.append([list(x.shape), list(w.shape)])
    return mm(x, w, device, buf)
draft_steps.mm_blocks = target_head.mm_blocks = recording
t1 = time.perf_counter()
ckpt = open_checkpoint(Path(sys.argv[1]))
named = readings(ckpt, [])
expect = expect_of(named[0][1])
head = load_head(Path(sys.argv[3]), expect.hidden, expect.vocab, "cpu")
result = evaluate(ckpt, named, samples(Path(sys.argv[2]), expect), int(sys.argv[4]), device="cpu", target=head)
t2 = time.perf_counter()
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"imports_s": t1 - t0, "accept_s": t2 - t1, "maxrss_bytes": hwm * 1024, "shapes": shapes,
                  "figures": result.readings[0].record()}))
"""


@pytest.fixture(scope="module")
def kimi_target_and_data(tmp_path_factory):
    """The target's final norm and lm_head (a block checkpoint) and the recorded states."""
    import numpy as np

    root = tmp_path_factory.mktemp("kimi-accept")
    h, v = KIMI_K2.hidden_size, KIMI_K2.vocab_size
    target = write_block_checkpoint(root / "target", {"model.norm.weight": RawTensor("BF16", (h,), None),
                                                      "lm_head.weight": RawTensor("BF16", (v, h), None)},
                                    {"hidden_size": h, "vocab_size": v, "rms_norm_eps": 1e-6,
                                     "architectures": ["DeepseekV3ForCausalLM"]}, seed=1)
    import torch
    from safetensors.torch import save_file

    data = root / "data"
    data.mkdir()
    g = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    for i in range(SAMPLES):
        states = torch.randn(TOKENS, len(KIMI_K2.aux_layer_ids) + 1, h, generator=g).to(torch.bfloat16)
        save_file({"hidden_states": states, "token_ids": torch.from_numpy(rng.integers(0, v, TOKENS))},
                  str(data / f"hs_{i}.safetensors"))
    yield target, data
    (target / "model.safetensors").unlink()


def test_accept_vs_bare_matmuls(benchmark, kimi_block, kimi_target_and_data):
    target, data = kimi_target_and_data
    size = (kimi_block / "model.safetensors").stat().st_size
    head_bytes = KIMI_K2.vocab_size * KIMI_K2.hidden_size * 2
    runs = []

    def once():
        start = time.perf_counter()
        out = subprocess.run([PYTHON, "-c", CHILD, str(kimi_block), str(data), str(target), str(K)],
                             capture_output=True, text=True, check=True).stdout
        runs.append({**json.loads(out.strip().splitlines()[-1]), "process_s": time.perf_counter() - start})

    benchmark.pedantic(once, rounds=1, iterations=1)
    run = runs[-1]
    print(f"\naccept {run['accept_s']:.2f}s, peak RSS {run['maxrss_bytes'] / 1e9:.2f} GB; the bare matmuls next")
    bare = bare_matmuls(run["shapes"], rounds=1)  # a pass takes minutes on 2 cores
    accept_s, matmul_s, rss = run["accept_s"], bare["matmul_s"], run["maxrss_bytes"]
    budget_rss = size + head_bytes + (1 << 30)
    benchmark.extra_info.update({
        "checkpoint_bytes": size, "target_head_bytes": head_bytes, "positions": run["figures"]["positions"],
        "accept_s": round(accept_s, 3), "matmuls": len(run["shapes"]), "matmul_gflop": round(bare["flops"] / 1e9, 1),
        "matmul_s": round(matmul_s, 3), "matmul_orientations_s": [round(t, 3) for t in bare["orientations_s"]],
        "ratio_to_matmuls": round(accept_s / matmul_s, 3), "peak_rss_bytes": rss,
        "rss_budget_bytes": budget_rss, "process_s": round(run["process_s"], 3),
        "imports_s": round(run["imports_s"], 3),
    })
    print(f"\naccept {accept_s:.2f}s vs the bare matmuls {matmul_s:.2f}s ({len(run['shapes'])} products, "
          f"{bare['flops'] / 1e9:.0f} GFLOP): ratio {accept_s / matmul_s:.3f}; peak RSS {rss / 1e9:.2f} GB, budget "
          f"{budget_rss / 1e9:.2f} GB (checkpoint {size / 1e9:.2f} + lm_head {head_bytes / 1e9:.2f} + 1 GiB)")
    report(benchmark, what=f"accept, Kimi-K2-sized drafter ({size / 1e9:.2f} GB) with the target's lm_head, "
           f"{run['figures']['positions']} positions, K {K}", measured_s=accept_s,
           budget="1.5x the bare matmuls; peak RSS the checkpoint + the target's lm_head + 1 GiB",
           baseline=f"the same {len(run['shapes'])} matrix products as float32 `torch.mm` on weights in memory",
           baseline_s=matmul_s, rss_bytes=rss)
    assert run["figures"]["positions"] == SAMPLES * (TOKENS - K)
    assert rss <= budget_rss
    assert accept_s <= 1.5 * matmul_s
