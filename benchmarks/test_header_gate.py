"""The header-level gate on a Kimi-sized drafter, as a whole process, against a whole-process safetensors
``safe_open(..., "np")`` key/shape listing of the same file, measured side by side in this run.

Target: the gate takes at most 2x the listing, reads no weight byte, and passes against the AQ-MedAI spec that
``--reference auto`` picks. The same for a Kimi-K2.5-sized MLA drafter (the MLA family) judged for vLLM and
SGLang, against the shipped kimi-k2.5-mla-eagle3 spec.
"""

from __future__ import annotations

import json
import subprocess

from conftest import PYTHON, median_of, run_process
from eagle3_checks.storage.safetensors import read_header

ROUNDS = 7
LISTING = ("import sys\nfrom safetensors import safe_open\n"
           "with safe_open(sys.argv[1], 'np') as f:\n"
           "    print(len([(k, f.get_slice(k).get_shape()) for k in f.keys()]))\n")
IO_PROBE = ("import sys\nfrom eagle3_checks.cli import main\ncode = main(sys.argv[1:])\n"
            "print(dict(l.split(': ') for l in open('/proc/self/io').read().splitlines())['rchar'], file=sys.stderr)\n"
            "sys.exit(code)\n")


def against_listing(benchmark, gate: list[str], listing: list[str]) -> tuple[float, float, float]:
    """(gate median, listing baseline, ratio): the gate process benchmarked, the listing timed before and after it in
    the same run (the faster of the two medians, so that a busy moment does not flatter the gate)."""
    baseline_before = median_of(lambda: run_process(listing), ROUNDS)
    benchmark.pedantic(run_process, args=(gate,), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    baseline_after = median_of(lambda: run_process(listing), ROUNDS)
    baseline = min(baseline_before, baseline_after)
    gate_median = benchmark.stats.stats.median
    return gate_median, baseline, gate_median / baseline


def test_header_gate_vs_safetensors_listing(benchmark, kimi_sparse):
    weights = kimi_sparse / "model.safetensors"
    target = kimi_sparse.parent / "target.json"
    gate = [PYTHON, "-m", "eagle3_checks", "check", str(kimi_sparse), "--target-config", str(target),
            "--level", "header"]
    listing = [PYTHON, "-c", LISTING, str(weights)]

    # The gate passes, against the AQ-MedAI spec chosen by auto.
    proc = subprocess.run(gate + ["--format", "json"], capture_output=True, text=True)
    report = json.loads(proc.stdout)["checkpoints"][0]
    assert proc.returncode == 0, proc.stdout
    assert report["reference"] == "aq-medai-kimi-k2-eagle3" and report["reference_note"].startswith("auto:")
    assert {c["id"]: c["status"] for c in report["checks"]}["reference.diff"] == "passed"

    # Bytes read by the whole gate process (Python's own imports included) vs the file's size.
    probe = subprocess.run([PYTHON, "-c", IO_PROBE, "check", str(kimi_sparse), "--level", "header"],
                           capture_output=True, text=True)
    rchar = int(probe.stderr.strip().splitlines()[-1])
    header = read_header(weights, "model.safetensors")
    vocab_bytes = header.entries["d2t"].nbytes + header.entries["t2d"].nbytes
    file_size = weights.stat().st_size

    gate_median, baseline, ratio = against_listing(benchmark, gate, listing)
    benchmark.extra_info.update({
        "file_bytes": file_size, "gate_process_rchar": rchar, "d2t_t2d_bytes": vocab_bytes,
        "baseline_safe_open_listing_s": round(baseline, 4), "gate_s": round(gate_median, 4), "ratio": round(ratio, 3),
    })
    print(f"\nheader gate {gate_median:.3f}s vs safe_open listing {baseline:.3f}s: ratio {ratio:.2f}; "
          f"process read {rchar / 1e6:.1f} MB of which d2t+t2d {vocab_bytes / 1e6:.2f} MB; "
          f"file {file_size / 1e9:.2f} GB")
    assert ratio <= 2.0
    # Everything the process read, interpreter and libraries included, is a sliver of the smallest weight matrix.
    smallest_matrix = min(e.nbytes for e in header.entries.values() if len(e.shape) == 2)
    assert rchar < smallest_matrix / 2


def test_mla_header_gate_vs_safetensors_listing(benchmark, kimi_mla_sparse):
    weights = kimi_mla_sparse / "model.safetensors"
    gate = [PYTHON, "-m", "eagle3_checks", "check", str(kimi_mla_sparse), "--engine", "vllm,sglang",
            "--aux-convention", "sglang", "--level", "header"]
    listing = [PYTHON, "-c", LISTING, str(weights)]

    # The gate passes for both engines, against the shipped MLA spec chosen by auto.
    proc = subprocess.run(gate + ["--format", "json"], capture_output=True, text=True)
    report = json.loads(proc.stdout)["checkpoints"][0]
    assert proc.returncode == 0, proc.stdout
    assert report["reference"] == "kimi-k2.5-mla-eagle3" and report["reference_note"].startswith("auto:")
    statuses = {c["id"] + (f"[{c['engine']}]" if c.get("engine") else ""): c["status"] for c in report["checks"]}
    assert statuses["reference.diff"] == "passed" and statuses["keys"] == statuses["shapes"] == "passed"
    assert statuses["engine.loads[vllm@0.33.0]"] == statuses["engine.loads[sglang@0.5.23]"] == "passed"

    gate_median, baseline, ratio = against_listing(benchmark, gate, listing)
    file_size = weights.stat().st_size
    benchmark.extra_info.update({"file_bytes": file_size, "baseline_safe_open_listing_s": round(baseline, 4),
                                 "gate_s": round(gate_median, 4), "ratio": round(ratio, 3)})
    print(f"\nMLA header gate (vllm, sglang) {gate_median:.3f}s vs safe_open listing {baseline:.3f}s: ratio "
          f"{ratio:.2f}; file {file_size / 1e9:.2f} GB")
    assert ratio <= 2.0
