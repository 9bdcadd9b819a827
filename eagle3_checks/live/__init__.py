"""The installed engine as the judge: its own config parsing and weight loading, run on the candidate on CPU.

``--engine vllm@installed`` (or ``sglang@installed``; ``--engine-python PATH`` for another environment's interpreter,
such as the serving image's) runs one of the conformance recorders (``recorders/``, scripts this package ships and
never imports) under that interpreter, in a subprocess, on the candidate alone: the same instrumentation the
committed recordings are made with (every parameter sentinel-filled, the weight loaders tapped), the same kernel
stubs and nothing else patched. No GPU is initialised: the subprocess sees no CUDA device and selects the engine's
CPU platform.

:func:`version` asks the interpreter which release it has (importlib.metadata, no engine import); :func:`record`
runs the recorder and returns the recording (``conformance/README.md`` describes its fields). A recorder that does
not know the release's internals, an interpreter without the engine, or a run past the time limit raises
:class:`CannotJudge` with the reason: the gate then says it cannot judge that release live, never a verdict.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORDERS = Path(__file__).resolve().parent / "recorders"
LIVE_ENGINES = ("vllm", "sglang")
TIMEOUT_S = 1800  # a Kimi-sized drafter built and loaded on CPU takes minutes
VERSION_TIMEOUT_S = 60


class CannotJudge(Exception):
    """The installed release cannot judge this checkpoint live; the message says why."""


@dataclass(frozen=True)
class Live:
    """One live recording: the release that made it, where its interpreter is, the record itself, run time."""

    engine: str
    version: str
    python: str
    record: dict[str, Any]
    seconds: float


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # Engine error messages print Python sets: a fixed seed keeps them (and the recordings) reproducible. No CUDA
    # device is visible, and vLLM selects its CPU platform (vllm/platforms/__init__.py).
    env.update(PYTHONHASHSEED="0", CUDA_VISIBLE_DEVICES="", VLLM_TARGET_DEVICE="cpu")
    env.pop("PYTHONPATH", None)
    return env


def version(engine: str, python: str) -> str:
    """The release of ``engine`` installed for interpreter ``python``. Raises CannotJudge."""
    import subprocess  # here, not at the top: the header gate imports this module and never runs an engine

    if engine not in LIVE_ENGINES:
        raise CannotJudge(f"{engine} has no live recorder (live judging runs {', '.join(LIVE_ENGINES)})")
    code = f"from importlib.metadata import version; print(version({engine!r}))"
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
                              env=_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CannotJudge(f"cannot run {python}: {exc}") from None
    if proc.returncode != 0:
        raise CannotJudge(f"{engine} is not installed for {python}")
    return proc.stdout.strip()


def record(engine: str, python: str, checkpoint: Path, target_config: Path, context_length: int | None = None,
           timeout: float = TIMEOUT_S) -> Live:
    """Run the installed ``engine``'s recorder on ``checkpoint`` (a folder), served for the target whose config is
    ``target_config`` (``context_length``: the context the server is started with; None: the target's). Raises
    CannotJudge."""
    import shutil
    import subprocess
    import tempfile

    release = version(engine, python)
    with tempfile.TemporaryDirectory(prefix="eagle3-live-") as tmp:
        root = Path(tmp)
        (root / "target").mkdir()
        # the engine reads a folder's config.json
        shutil.copyfile(target_config, root / "target" / "config.json")
        entry: dict[str, Any] = {"name": "candidate", "dir": str(checkpoint.resolve()),
                                 "target_config": "target/config.json", "why": "the candidate, judged live",
                                 "source_hash": ""}
        if context_length:
            entry["context_length"] = context_length
        (root / "manifest.json").write_text(json.dumps([entry]))
        out = root / "out"
        command = [python, str(RECORDERS / f"record_{engine}.py"), str(root / "manifest.json"), str(out)]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=tmp)
        except subprocess.TimeoutExpired:
            raise CannotJudge(f"{engine} {release}'s own loader ran past {timeout:.0f} s") from None
        except OSError as exc:
            raise CannotJudge(f"cannot run {python}: {exc}") from None
        path = out / "candidate.json"
        if not path.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise CannotJudge(f"the recorder does not know {engine} {release}'s internals: {tail[0][:300]}")
        rec = json.loads(path.read_text())
        index = json.loads((out / "index.json").read_text())
    if "harness_error" in rec:
        err = rec["harness_error"]
        raise CannotJudge(f"the recorder does not know {engine} {release}'s internals: {err['type']}: "
                          f"{err['message'][:300]}")
    return Live(engine, release, python, rec, float(index.get("run_seconds", 0.0)))


__all__ = ["CannotJudge", "Live", "LIVE_ENGINES", "record", "version"]
