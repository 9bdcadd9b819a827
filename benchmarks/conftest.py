"""Benchmark fixtures. Benchmarks run outside the default test run: ``pytest benchmarks --benchmark-only``."""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eagle3_checks.drafter.example import (
    KIMI_K2,
    KIMI_K25_MLA,
    drafter_files,
    mla_drafter_files,
    mla_target_config,
    target_config,
    write_checkpoint,
    write_random_checkpoint,
)
from eagle3_checks.storage.safetensors import RawTensor, encode_header, from_numpy


@pytest.fixture(scope="session", autouse=True)
def compiled_package() -> None:
    """Byte-compile the package first, as pip does when it installs a wheel: an editable install run with
    PYTHONDONTWRITEBYTECODE would otherwise compile every module in every process, which users never pay."""
    import compileall

    import eagle3_checks

    compileall.compile_dir(str(Path(eagle3_checks.__file__).parent), quiet=1)


@pytest.fixture(scope="session")
def kimi_sparse(tmp_path_factory) -> Path:
    """A Kimi-K2-sized drafter in the flat layout (the AQ-MedAI shapes, ~4.7 GB apparent size): real header
    and d2t/t2d bytes, every weight a zero-filled sparse hole. Removed with the tmp dir."""
    root = tmp_path_factory.mktemp("kimi")
    tensors, config = drafter_files(KIMI_K2, "flat", sparse=True)
    path = write_checkpoint(root / "kimi-k2-drafter", tensors, config)
    # Kimi-K2's class (a DeepSeek-V3 model): --reference auto picks the AQ-MedAI spec for that target family only
    kimi_k2 = {**target_config(KIMI_K2), "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2"}
    (root / "target.json").write_text(json.dumps(kimi_k2))
    return path


@pytest.fixture(scope="session")
def kimi_mla_sparse(tmp_path_factory) -> Path:
    """A Kimi-K2.5-sized MLA drafter (Eagle3DeepseekV2ForCausalLM, reference_specs/kimi-k2.5-mla-eagle3.json; ~6.0 GB
    apparent size): a real header, every weight a zero-filled sparse hole. Removed with the tmp dir."""
    root = tmp_path_factory.mktemp("kimi-mla")
    tensors, config = mla_drafter_files(KIMI_K25_MLA, sparse=True)
    path = write_checkpoint(root / "kimi-k2.5-mla-drafter", tensors, config)
    (root / "target.json").write_text(json.dumps(mla_target_config(KIMI_K25_MLA)))
    return path


@pytest.fixture(scope="session")
def kimi_random(tmp_path_factory):
    """A Kimi-K2-sized flat drafter with random bf16 weights (4.7 GB), written once, removed after. Also the same
    weights (a symlink) under a config that vLLM and SpecForge read differently (norm_output), for the worst case
    of the forward check, where both readings run."""
    root = tmp_path_factory.mktemp("kimi-random")
    tensors, config = drafter_files(KIMI_K2, "flat", sparse=True)
    path = write_random_checkpoint(root / "drafter", tensors, config)
    worst = root / "drafter-norm-output"
    worst.mkdir()
    os.symlink(path / "model.safetensors", worst / "model.safetensors")
    (worst / "config.json").write_text(json.dumps({**config, "norm_output": True}))
    yield path, worst
    for p in (worst / "model.safetensors", path / "model.safetensors"):
        p.unlink()


BLOCK = 1 << 26  # bytes of random bf16 repeated through each weight of write_block_checkpoint's drafters (64 MB)


def write_block_checkpoint(path: Path, tensors: dict[str, RawTensor], config: dict, seed: int = 0) -> Path:
    """Like ``write_random_checkpoint``, in seconds instead of minutes: every sparse weight matrix is one random block
    of bf16 values (normal, std 0.05: no initialiser's) repeated end to end, every vector (the norms) 1 + normal noise.
    Real, non-zero data at any size, for the benchmarks of passes that read every byte."""
    import numpy as np

    rng = np.random.default_rng(seed)
    block = memoryview(from_numpy(rng.standard_normal(BLOCK // 2, dtype=np.float32) * np.float32(0.05), "BF16").data)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    at = 0  # where in the block the next weight starts: the bytes run on across tensors
    with open(path / "model.safetensors", "wb") as fh:
        fh.write(encode_header(tensors))
        for t in tensors.values():
            if t.data is not None:
                fh.write(t.data)
            elif len(t.shape) == 1:
                fh.write(from_numpy(rng.standard_normal(t.shape, dtype=np.float32) + np.float32(1.0), t.dtype).data)
            else:
                assert t.dtype == "BF16"
                left = math.prod(t.shape) * 2
                while left:
                    n = min(left, BLOCK - at)
                    fh.write(block[at:at + n])
                    left, at = left - n, (at + n) % BLOCK
    return path


@pytest.fixture(scope="session")
def kimi_block(tmp_path_factory):
    """A Kimi-K2-sized flat drafter (4.7 GB) whose weights are real data: write_block_checkpoint's repeated random
    block. Skipped without twice its size of free disk; its weights removed at the session's end."""
    root = tmp_path_factory.mktemp("kimi-block")
    tensors, config = drafter_files(KIMI_K2, "flat", sparse=True)
    size = sum(t.nbytes for t in tensors.values())
    free = shutil.disk_usage(root).free
    if free < 2 * size:
        pytest.skip(f"{size / 1e9:.1f} GB drafter: only {free / 1e9:.1f} GB free on {root}")
    path = write_block_checkpoint(root / "kimi-k2-drafter", tensors, config)
    yield path
    (path / "model.safetensors").unlink()


def run_process(argv: list[str]) -> float:
    """Wall time of one whole process (start-up and imports included)."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def median_of(fn, rounds: int) -> float:
    return statistics.median(fn() for _ in range(rounds))


def sequential_read_s(path: Path, rounds: int = 5) -> float:
    """Median wall time of `cat FILE > /dev/null` from a warm page cache (the file is read once first)."""
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
    return median_of(lambda: run_process(["cat", str(path)]), rounds)


PYTHON = sys.executable


def report(benchmark, *, what: str, measured_s: float, budget: str, baseline: str | None = None,
           baseline_s: float | None = None, rss_bytes: int | None = None, notes: str = "") -> None:
    """What this benchmark's row of the performance table says (docs/performance.md is generated from it by
    benchmarks/summarize.py, as the median of the runs): the measured time, its baseline measured in the same run,
    the budget it is held to, and the peak RSS where it matters."""
    benchmark.extra_info["report"] = {
        "what": what, "measured_s": round(measured_s, 4), "budget": budget, "baseline": baseline,
        "baseline_s": None if baseline_s is None else round(baseline_s, 4),
        "ratio": None if not baseline_s else round(measured_s / baseline_s, 3),
        "rss_bytes": rss_bytes, "notes": notes,
    }


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A benchmark's row says whether it held its budget (its asserts passed), as the run reported it."""
    outcome = yield
    result = outcome.get_result()
    bench = getattr(item, "funcargs", {}).get("benchmark")
    if result.when == "call" and bench is not None and "report" in bench.extra_info:
        bench.extra_info["report"]["held"] = result.passed
