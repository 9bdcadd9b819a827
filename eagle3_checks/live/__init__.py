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
from pathlib import Path
from typing import Any

from ..fast_dataclass import dataclass

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


# The releases asked in this process: (engine, interpreter path as given, its size and modification time) ->
# release. A gate run over many checkpoints asks once per interpreter, not once per checkpoint and engine check. The
# path is not resolved: each virtual environment's python links to the same base interpreter.
_VERSIONS: dict[tuple, str] = {}


def version(engine: str, python: str) -> str:
    """The release of ``engine`` installed for interpreter ``python``. Raises CannotJudge."""
    if engine not in LIVE_ENGINES:
        raise CannotJudge(f"{engine} has no live recorder (live judging runs {', '.join(LIVE_ENGINES)})")
    try:
        st = os.stat(python)
        key: tuple | None = (engine, os.path.abspath(python), st.st_size, st.st_mtime_ns)
    except OSError:
        key = None
    if key is not None and key in _VERSIONS:
        return _VERSIONS[key]
    found = _ask_version(engine, python)
    if key is not None:
        _VERSIONS[key] = found
    return found


def _ask_version(engine: str, python: str) -> str:
    import subprocess  # here, not at the top: the header gate imports this module and never runs an engine

    code = f"from importlib.metadata import version; print(version({engine!r}))"
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
                              env=_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CannotJudge(f"cannot run {python}: {exc}") from None
    if proc.returncode != 0:
        raise CannotJudge(f"{engine} is not installed for {python}")
    return proc.stdout.strip()


def _key(engine: str, python: str, checkpoint: Path, target_config: Path, context_length: int | None) -> tuple:
    """What a recording depends on: the interpreter's engine, the candidate folder and its files as they are now
    (names, sizes, modification times), the target config's content and the context the server is started with."""
    import hashlib

    folder = Path(checkpoint).resolve()
    files = tuple(sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in folder.iterdir() if f.is_file()))
    return (engine, python, str(folder), files, hashlib.sha256(Path(target_config).read_bytes()).hexdigest(),
            context_length or None)


# Recordings made by :func:`record_many` in this process, for :func:`record` to return instead of starting the
# engine again (a gate run over many checkpoints, such as the live conformance suite, imports the engine once).
_RECORDED: dict[tuple, Live | CannotJudge] = {}


def record(engine: str, python: str, checkpoint: Path, target_config: Path, context_length: int | None = None,
           timeout: float = TIMEOUT_S) -> Live:
    """Run the installed ``engine``'s recorder on ``checkpoint`` (a folder), served for the target whose config is
    ``target_config`` (``context_length``: the context the server is started with; None: the target's). Raises
    CannotJudge."""
    key = _key(engine, python, checkpoint, target_config, context_length)
    got = _RECORDED.get(key) or record_many(engine, python, [(checkpoint, target_config, context_length)], timeout)[0]
    if isinstance(got, CannotJudge):
        raise got
    return got


def record_many(engine: str, python: str, candidates: list[tuple[Path, Path, int | None]],
                timeout: float = TIMEOUT_S) -> list[Live | CannotJudge]:
    """One run of the installed ``engine``'s recorder over every (checkpoint folder, target config, context length)
    in ``candidates``: the engine is imported once. Each result is a :class:`Live` or the :class:`CannotJudge` that
    says why there is none, in order; :func:`record` returns them afterwards without running the engine again.
    Raises CannotJudge when the interpreter has no such engine or the run as a whole fails."""
    import shutil
    import subprocess
    import tempfile

    release = version(engine, python)
    out_of: list[Live | CannotJudge] = []
    with tempfile.TemporaryDirectory(prefix="eagle3-live-") as tmp:
        root = Path(tmp)
        manifest = []
        for i, (checkpoint, target_config, context_length) in enumerate(candidates):
            (root / f"target-{i}").mkdir()
            # the engine reads a folder's config.json
            shutil.copyfile(target_config, root / f"target-{i}" / "config.json")
            entry: dict[str, Any] = {"name": f"candidate-{i}", "dir": str(Path(checkpoint).resolve()),
                                     "target_config": f"target-{i}/config.json", "why": "the candidate, judged live",
                                     "source_hash": ""}
            if context_length:
                entry["context_length"] = context_length
            manifest.append(entry)
        (root / "manifest.json").write_text(json.dumps(manifest))
        out = root / "out"
        command = [python, str(RECORDERS / f"record_{engine}.py"), str(root / "manifest.json"), str(out)]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=tmp)
        except subprocess.TimeoutExpired:
            raise CannotJudge(f"{engine} {release}'s own loader ran past {timeout:.0f} s") from None
        except OSError as exc:
            raise CannotJudge(f"cannot run {python}: {exc}") from None
        index_path = out / "index.json"
        index = json.loads(index_path.read_text()) if index_path.is_file() else {}
        # the recorder times the whole run, imports included: each candidate is given its share
        seconds = float(index.get("run_seconds", 0.0)) / max(len(candidates), 1)
        for i, candidate in enumerate(candidates):
            path = out / f"candidate-{i}.json"
            got: Live | CannotJudge
            if not path.is_file():
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                got = CannotJudge(f"the recorder does not know {engine} {release}'s internals (it exited with "
                                  f"{proc.returncode}): {tail[0][:300]}")
                out_of.append(got)  # not kept: a run that stopped early (killed, out of memory) may be retried
                continue
            else:
                rec = json.loads(path.read_text())
                if "harness_error" in rec:
                    err = rec["harness_error"]
                    got = CannotJudge(f"the recorder does not know {engine} {release}'s internals: {err['type']}: "
                                      f"{err['message'][:300]}")
                else:
                    got = Live(engine, release, python, rec, seconds)
            _RECORDED[_key(engine, python, *candidate)] = got
            out_of.append(got)
    return out_of


__all__ = ["CannotJudge", "Live", "LIVE_ENGINES", "record", "record_many", "version"]
