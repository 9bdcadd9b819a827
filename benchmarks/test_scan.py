"""The scan level (every weight streamed once) against one sequential read of the same file (`cat`, warm page
cache), measured side by side in this run.

Targets, each a whole ``eagle3-checks check DRAFTER --level scan`` process (start-up included) against a whole
``cat`` process: on a Kimi-K2-sized drafter (4.7 GB) of real data (random bf16, a repeated 64 MB block), at most 2.5x
the read; on a ~1 GB bf16 drafter with random weights (Llama-3-8B-sized layer, 64,000-token draft vocabulary, no
embed_tokens), at most 4x, where start-up is a larger share. Peak RSS (the process's VmHWM: interpreter and numpy
included) stays under 300 MB whatever the checkpoint's size, shown on both and on the Kimi-sized sparse drafter.
Each scan round runs right after one ``cat`` of the same file, so both read a warm page cache and meet the same
moments of a shared machine; the baseline is the faster of two medians, those interleaved cats and five cats after.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time

import pytest

from conftest import PYTHON, report, run_process, sequential_read_s
from eagle3_checks.drafter.example import DrafterShape, drafter_files, write_random_checkpoint
from eagle3_checks.storage.safetensors import read_header

RSS_LIMIT = 300 * 1024 * 1024
ONE_GB_BUDGET = 4.0  # the scan process over the cat process, ~1 GB drafter
KIMI_BUDGET = 2.5  # the same, Kimi-sized drafter of real data
# ~1.1 GB in bf16: fc 4096x12288, q/k/v/o (GQA 32/8 heads of 128), MLP 14336, lm_head 64000x4096, no embed_tokens.
ONE_GB = DrafterShape(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                      intermediate_size=14336, vocab_size=128256, draft_vocab_size=64000, aux_layer_ids=(2, 16, 29),
                      target_layers=32, embed_tokens=False)
BASELINE = "`cat` of the weights file (process, warm page cache)"


# The command run as ``python -m eagle3_checks``, then the process's peak RSS (VmHWM, read at exit) on stderr. (The
# ru_maxrss that wait4 gives would count the forking pytest process's pages, inherited until the exec.)
RSS_PROBE = ("import atexit, runpy, sys\n"
             "atexit.register(lambda: print(next(l.split()[1] for l in open('/proc/self/status')\n"
             "                                   if l.startswith('VmHWM:')), file=sys.stderr))\n"
             "sys.argv[0] = 'eagle3-checks'\n"
             "runpy.run_module('eagle3_checks', run_name='__main__', alter_sys=True)\n")


def scan_process(path) -> dict:
    """One whole ``eagle3-checks check PATH --level scan --format json`` process: its wall time (start-up included),
    its peak RSS, and from its report the scan's status, bytes scanned and first errors."""
    argv = [PYTHON, "-c", RSS_PROBE, "check", str(path), "--level", "scan", "--reference", "none", "--format", "json"]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    assert proc.returncode in (0, 1), proc.stderr
    checked = json.loads(proc.stdout)["checkpoints"][0]
    [scan] = [c for c in checked["checks"] if c["id"] == "scan.values"]
    return {"wall_s": wall, "maxrss_bytes": int(proc.stderr.split()[-1]) * 1024, "status": scan["status"],
            "bytes_scanned": scan["data"]["bytes_scanned"],
            "errors": [f["message"] for f in scan["findings"] if f["severity"] == "error"][:3]}


def against_cat(benchmark, path, rounds: int) -> dict:
    """The scan process benchmarked, each round right after one ``cat`` of its weights (the benchmark's setup, timed
    here; the warm-up round's pair left out). The scan's median; the baseline, the faster of the interleaved cats'
    median and that of five cats after; the ratio; the largest peak RSS; every run."""
    weights = path / "model.safetensors"
    cats: list[float] = []
    runs: list[dict] = []
    benchmark.pedantic(lambda: runs.append(scan_process(path)),
                       setup=lambda: cats.append(run_process(["cat", str(weights)])),
                       rounds=rounds, iterations=1, warmup_rounds=1)
    cats, runs = cats[-rounds:], runs[-rounds:]
    after = sequential_read_s(weights)
    baseline = min(statistics.median(cats), after)
    scan_s = statistics.median(r["wall_s"] for r in runs)
    rss = max(r["maxrss_bytes"] for r in runs)
    size = weights.stat().st_size
    benchmark.extra_info.update({
        "checkpoint_bytes": size, "scan_s": round(scan_s, 4), "cat_interleaved_s": round(statistics.median(cats), 4),
        "cat_after_s": round(after, 4), "baseline_s": round(baseline, 4), "ratio_to_read": round(scan_s / baseline, 3),
        "peak_rss_bytes": rss, "scan_runs_s": [round(r["wall_s"], 4) for r in runs],
        "cat_runs_s": [round(c, 4) for c in cats],
    })
    print(f"\nscan {scan_s:.3f}s vs cat {baseline:.3f}s ({size / 1e9:.2f} GB; cats interleaved "
          f"{statistics.median(cats):.3f}s, after {after:.3f}s): ratio {scan_s / baseline:.2f}; "
          f"{size / scan_s / 1e9:.2f} GB/s; peak RSS {rss / 2**20:.0f} MB")
    return {"scan_s": scan_s, "baseline_s": baseline, "ratio": scan_s / baseline, "rss": rss, "runs": runs,
            "size": size}


def assert_scanned_every_weight(m: dict, weights) -> None:
    assert all(r["status"] in ("passed", "warned") and not r["errors"] for r in m["runs"]), m["runs"][-1]
    floating = sum(e.nbytes for e in read_header(weights, "m").entries.values() if e.dtype == "BF16")
    assert all(r["bytes_scanned"] == floating for r in m["runs"]) and floating > 0.99 * m["size"]


@pytest.fixture(scope="module")
def one_gb(tmp_path_factory):
    tensors, config = drafter_files(ONE_GB, "flat", sparse=True)
    path = write_random_checkpoint(tmp_path_factory.mktemp("scan") / "drafter", tensors, config)
    yield path
    (path / "model.safetensors").unlink()


def test_scan_vs_sequential_read(benchmark, one_gb):
    m = against_cat(benchmark, one_gb, rounds=7)
    report(benchmark, what=f"scan level of a ~1 GB bf16 drafter with random weights ({m['size'] / 1e9:.2f} GB, "
           "process)", measured_s=m["scan_s"], budget=f"{ONE_GB_BUDGET:g}x the read; peak RSS < 300 MB",
           baseline=BASELINE, baseline_s=m["baseline_s"], rss_bytes=m["rss"])
    assert_scanned_every_weight(m, one_gb / "model.safetensors")
    assert m["rss"] < RSS_LIMIT
    assert m["ratio"] <= ONE_GB_BUDGET


def test_scan_vs_sequential_read_on_a_kimi_sized_drafter(benchmark, kimi_block):
    """4.7 GB of real (random, non-zero) bf16: every weight read and tested, at most 2.5x the read."""
    m = against_cat(benchmark, kimi_block, rounds=5)
    report(benchmark, what=f"scan level of a Kimi-K2-sized drafter of random bf16 ({m['size'] / 1e9:.2f} GB, "
           "process)", measured_s=m["scan_s"], budget=f"{KIMI_BUDGET:g}x the read; peak RSS < 300 MB",
           baseline=BASELINE, baseline_s=m["baseline_s"], rss_bytes=m["rss"])
    assert_scanned_every_weight(m, kimi_block / "model.safetensors")
    assert m["rss"] < RSS_LIMIT
    assert m["ratio"] <= KIMI_BUDGET


def test_scan_memory_on_a_kimi_sized_drafter(benchmark, kimi_sparse):
    """4.7 GB of (sparse, zero) weights: every one is read, and flagged all-zero; RSS stays bounded."""
    weights = kimi_sparse / "model.safetensors"
    runs = []
    benchmark.pedantic(lambda: runs.append(scan_process(kimi_sparse)), rounds=1, iterations=1)
    r = runs[0]
    size = weights.stat().st_size
    benchmark.extra_info.update({"checkpoint_bytes": size, "bytes_scanned": r["bytes_scanned"],
                                 "scan_s": round(r["wall_s"], 3), "peak_rss_bytes": r["maxrss_bytes"]})
    report(benchmark, what=f"scan level of a Kimi-K2-sized sparse (all-zero) drafter ({size / 1e9:.2f} GB, process)",
           measured_s=r["wall_s"], budget="peak RSS < 300 MB", rss_bytes=r["maxrss_bytes"])
    print(f"\nKimi-sized sparse scan: {r['bytes_scanned'] / 1e9:.2f} of {size / 1e9:.2f} GB in {r['wall_s']:.2f}s, "
          f"peak RSS {r['maxrss_bytes'] / 2**20:.0f} MB")
    assert r["bytes_scanned"] > 0.99 * size
    assert r["status"] == "failed" and "every value is zero" in r["errors"][0]
    assert r["maxrss_bytes"] < RSS_LIMIT
