"""The header-level gate of a Kimi-sized drafter on the Hub (``hf://ORG/NAME``), served by the stand-in Hub of the
tests (tests/hub_server.py, 127.0.0.1), counting every request and byte.

Target: the first run fetches config.json, the index-less single file's header and d2t/t2d only (no byte of any
other tensor), under 0.1% of the checkpoint; a second run fetches no byte (one HEAD resolves the branch); the
verdict is the same as on the folder itself. The README's "On the Hugging Face Hub" figures come from this test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import PYTHON, report
from eagle3_checks.storage.safetensors import read_header

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from hub_server import HubServer, running

REPO = "aq-medai/kimi-k2-eagle3-sparse"


def test_hub_header_gate_fetches_headers_only(benchmark, kimi_sparse, tmp_path):
    target = kimi_sparse.parent / "target.json"
    hub = HubServer()
    hub.add(REPO, kimi_sparse)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update({"HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
    with running(hub) as url:
        env["HF_ENDPOINT"] = url
        argv = [PYTHON, "-m", "eagle3_checks", "check", f"hf://{REPO}", "--target-config", str(target), "--level",
                "header", "--format", "json"]
        first = subprocess.run(argv, env=env, capture_output=True, text=True)
        assert first.returncode == 0, first.stderr
        fetched = [r for r in hub.requests if "/resolve/" in r.path]
        first_bytes = sum(r.sent for r in fetched)
        hub.clear()
        second = subprocess.run(argv, env=env, capture_output=True, text=True)
        again = [r for r in hub.requests if "/resolve/" in r.path]
        hub.clear()
        # the cached run, as a whole process (one HEAD request)
        benchmark.pedantic(lambda: subprocess.run(argv[:-2] + ["-q"], env=env, check=True, stdout=subprocess.DEVNULL),
                           rounds=3, iterations=1)

    local = subprocess.run([PYTHON, "-m", "eagle3_checks", "check", str(kimi_sparse), "--target-config", str(target),
                            "--level", "header", "--format", "json"], capture_output=True, text=True)
    verdict = {c["id"] + c.get("engine", ""): c["status"] for c in json.loads(first.stdout)["checkpoints"][0]["checks"]}
    assert verdict == {c["id"] + c.get("engine", ""): c["status"]
                       for c in json.loads(local.stdout)["checkpoints"][0]["checks"]}

    weights = kimi_sparse / "model.safetensors"
    header = read_header(weights, "model.safetensors")
    size = weights.stat().st_size + (kimi_sparse / "config.json").stat().st_size
    allowed = [(0, header.data_start)] + [(e.offset, e.offset + e.nbytes) for e in header.entries.values()
                                          if e.name in ("d2t", "t2d")]
    for r in fetched:
        if r.path.endswith(".safetensors") and r.method == "GET":
            first_byte, last_byte = (int(x) for x in r.range.removeprefix("bytes=").split("-"))
            assert any(a <= first_byte and last_byte < b for a, b in allowed), r
    vocab = sum(e.nbytes for e in header.entries.values() if e.name in ("d2t", "t2d"))
    benchmark.extra_info.update({"checkpoint_bytes": size, "first_run_bytes": first_bytes,
                                 "first_run_requests": len(fetched), "second_run_bytes": sum(r.sent for r in again),
                                 "second_run_requests": len(again), "header_bytes": header.data_start,
                                 "d2t_t2d_bytes": vocab})
    print(f"\nhf://{REPO} at the header level: {len(fetched)} requests, {first_bytes / 1e6:.2f} MB fetched of a "
          f"{size / 1e9:.2f} GB checkpoint ({100 * first_bytes / size:.4f}%): the {header.data_start / 1e3:.1f} kB "
          f"header, d2t + t2d {vocab / 1e6:.2f} MB, config.json; second run: {len(again)} request(s) "
          f"({', '.join(r.method for r in again)}), {sum(r.sent for r in again)} bytes")
    report(benchmark, what="header gate of hf://ORG/kimi-k2-eagle3 (the stand-in Hub), the cached second run",
           measured_s=benchmark.stats.stats.median, budget="under 0.1% of the checkpoint fetched; 0 bytes again",
           notes=f"first run: {len(fetched)} requests, {first_bytes:,} bytes of {size:,}; second run: {len(again)} "
                 f"request(s), {sum(r.sent for r in again)} bytes")
    assert first_bytes < size / 1000
    assert sum(r.sent for r in again) == 0 and [r.method for r in again] == ["HEAD"]
    assert second.returncode == 0
