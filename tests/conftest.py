"""Fixtures: tiny drafters in tmp dirs, a target config, and the real speculators and SpecForge peers (the helpers
they use live in helpers.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

# Under pytest-xdist each worker runs torch's tiny forward passes; torch's default of one OpenMP thread per core in
# every worker oversubscribes the cores, and spinning threads made the converter's property tests about 15x slower
# (76 s instead of 5 s on 2 cores). One thread per worker: the workers are the parallelism. Set before torch is
# imported (by a test module or a peer subprocess, which inherits it).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eagle3_checks.drafter.example import EXAMPLE, DrafterShape, target_config
from helpers import Drafter


@pytest.fixture
def drafter(tmp_path: Path) -> Callable[..., Drafter]:
    counter = iter(range(1000))

    def make(layout: str = "speculators", shape: DrafterShape = EXAMPLE, **kw: Any) -> Drafter:
        return Drafter(tmp_path / f"{layout}-{next(counter)}", layout, shape, **kw)

    return make


@pytest.fixture
def target_path(tmp_path: Path) -> Path:
    p = tmp_path / "target" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(target_config(EXAMPLE)))
    return p


# ----- real peers: drafters built by speculators and SpecForge themselves, in subprocesses ------------------------

PEERS = Path(__file__).parent / "peers"


def _peer_paths(tmp_path_factory, name: str) -> tuple[Path, Path, Path]:
    """(output folder, done marker, lock file) of a peer build, in the session's common temporary folder."""
    import hashlib

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: basetemp is .../popen-gwN
    key = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(PEERS.glob("*.py")))).hexdigest()[:12]
    stem = shared / f"peer-{name}-{key}"
    return stem, stem.with_name(stem.name + ".done"), stem.with_name(stem.name + ".lock")


def _build_peer(tmp_path_factory, package: str, script: str) -> Path:
    """The peer's drafters, built once per test session: under pytest-xdist the workers share one build (the first
    to take the lock builds it into the session's common temporary folder, the others wait and read it)."""
    import fcntl

    if importlib.util.find_spec(package) is None:
        pytest.fail(f"{package} is not installed: install the test extras as the README's test command does")
    out, done, lock_path = _peer_paths(tmp_path_factory, Path(script).stem)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, whoever holds it
        if not done.exists():
            out.mkdir(exist_ok=True)
            proc = subprocess.run([sys.executable, str(PEERS / script), str(out)], capture_output=True, text=True,
                                  env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=900)
            assert proc.returncode == 0, proc.stderr[-4000:]
            done.write_text("built\n")
    return out


@pytest.fixture(scope="session")
def speculators_drafters(tmp_path_factory) -> Path:
    """Every variant of peers/variants.py SPECULATORS, saved by speculators 0.9.0 (torch stays out of this process)."""
    return _build_peer(tmp_path_factory, "speculators", "build_speculators.py")


@pytest.fixture(scope="session")
def specforge_drafters(tmp_path_factory) -> Path:
    """Every variant of peers/variants.py SPECFORGE, built by SpecForge 0.2.0 and written by its SGLang exporter."""
    return _build_peer(tmp_path_factory, "specforge", "build_specforge.py")


@pytest.fixture(scope="session")
def train_cli_drafters(tmp_path_factory) -> Path:
    """Every variant of peers/variants.py TRAIN_CLI, built as speculators 0.9.0's train CLI builds a drafter and saved
    by it (with written.json: what it wrote)."""
    return _build_peer(tmp_path_factory, "speculators", "build_train_cli.py")


# ----- the trained world: a target and drafters trained on CPU (peers/train_world.py, about 100 s) ----------------
#
# Built in the background from collection on, once per session (the first worker to take the lock starts it), and
# its tests moved to the end of the run: the rest of the suite runs meanwhile, and no worker sits waiting for it.

WORLD = "trained_world"


def _start_world(factory) -> None:
    import fcntl

    out, done, lock_path = _peer_paths(factory, WORLD)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = out.with_name(out.name + ".started")
        if done.exists() or started.exists():
            return
        out.mkdir(exist_ok=True)
        started.write_text("")
        log = out.with_name(out.name + ".log")
        script = (f'"$0" "{PEERS / "train_world.py"}" "{out}" > "{log}" 2>&1 && touch "{done}" '
                  f'|| touch "{out}.failed"')
        subprocess.Popen(["/bin/sh", "-c", script, sys.executable], start_new_session=True,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})


def pytest_collection_modifyitems(session, config, items):
    world = [item for item in items if WORLD in getattr(item, "fixturenames", ())]
    if not world:
        return
    ids = {id(item) for item in world}
    items[:] = [item for item in items if id(item) not in ids] + world
    if importlib.util.find_spec("speculators") is not None and not os.environ.get("EAGLE3_TRAINED_WORLD"):
        _start_world(config._tmp_path_factory)


@pytest.fixture(scope="session")
def trained_world(tmp_path_factory) -> Path:
    """peers/train_world.py's output: target/, train/, test/, drafters/NAME/, metrics.json. EAGLE3_TRAINED_WORLD=DIR
    uses one built before (``python tests/peers/train_world.py DIR``), when working on these tests."""
    import time

    if os.environ.get("EAGLE3_TRAINED_WORLD"):
        return Path(os.environ["EAGLE3_TRAINED_WORLD"])
    if importlib.util.find_spec("speculators") is None:
        pytest.fail("speculators is not installed: install the test extras as the README's test command does")
    _start_world(tmp_path_factory)  # a no-op when collection started it
    out, done, _ = _peer_paths(tmp_path_factory, WORLD)
    failed = out.with_name(out.name + ".failed")
    deadline = time.monotonic() + 1200
    while not done.exists():
        if failed.exists() or time.monotonic() > deadline:
            log = out.with_name(out.name + ".log")
            pytest.fail("peers/train_world.py failed: " + (log.read_text()[-4000:] if log.exists() else "no log"))
        time.sleep(0.5)
    return out


# ----- every declared finding code is produced by a test ------------------------------------------------------------
# The gate stamps each finding's code where it runs a check (gate.run_check, and gate.finding_code for the waivers'
# own findings); wrapped here, every code a test makes the gate produce is recorded. Each xdist worker writes its codes
# beside the others; when the whole suite has run (no -k, -m, --lf or chosen paths), the session fails on any declared
# code (gate.all_codes) no test produced, and lists them.
PRODUCED: set[str] = set()


def _track_codes() -> None:
    from eagle3_checks import gate

    made, ran = gate.finding_code, gate.run_check

    def finding_code(c, slug):
        code = made(c, slug)
        PRODUCED.add(code)
        return code

    def run_check(*args, **kwargs):
        result = ran(*args, **kwargs)
        PRODUCED.update(f.code for f in result.findings if f.code)
        return result

    gate.finding_code, gate.run_check = finding_code, run_check
    from eagle3_checks import defects  # runs checks itself (the catalogue's examples)

    defects.run_check = run_check


_track_codes()


def _codes_dir(config) -> Path:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return Path(workerinput["eagle3_codes_dir"])
    return Path(config._tmp_path_factory.getbasetemp()) / "codes-produced"


def pytest_configure_node(node):  # xdist: the controller tells each worker where to write its codes
    node.workerinput["eagle3_codes_dir"] = str(_codes_dir(node.config))


def _whole_suite(config) -> bool:
    option = config.option
    return not (option.keyword or option.markexpr or getattr(option, "lf", False) or getattr(option, "deselect", None)
                or config.args and [Path(a).resolve() for a in config.args] != [Path(config.rootpath, "tests")])


def pytest_sessionfinish(session, exitstatus):
    folder = _codes_dir(session.config)
    folder.mkdir(parents=True, exist_ok=True)
    worker = getattr(session.config, "workerinput", {}).get("workerid", "main")
    (folder / f"{worker}.txt").write_text("\n".join(sorted(PRODUCED)))
    if hasattr(session.config, "workerinput") or not _whole_suite(session.config) or exitstatus not in (0, 1):
        return
    from eagle3_checks.gate import all_codes

    produced = set().union(*(set(p.read_text().split()) for p in folder.glob("*.txt")))
    missing = [code for code in all_codes() if code not in produced]
    if missing:
        session.config._eagle3_unproduced = missing
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, config):
    missing = getattr(config, "_eagle3_unproduced", None)
    if missing:
        terminalreporter.section("declared finding codes no test produces")
        terminalreporter.write_line(f"{len(missing)} of the declared codes were produced by no test "
                                    "(tests/conftest.py records every code the gate makes):")
        for code in missing:
            terminalreporter.write_line(f"  {code}")
