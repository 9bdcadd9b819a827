"""Benchmark fixtures. Benchmarks run outside the default test run: ``pytest benchmarks --benchmark-only``."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eagle3_checks.example import KIMI_K2, drafter_files, target_config, write_checkpoint


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
    (root / "target.json").write_text(json.dumps(target_config(KIMI_K2)))
    return path


def run_process(argv: list[str]) -> float:
    """Wall time of one whole process (start-up and imports included)."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def median_of(fn, rounds: int) -> float:
    return statistics.median(fn() for _ in range(rounds))


PYTHON = sys.executable
