"""Fixtures: tiny drafters in tmp dirs, a target config, and the real speculators and SpecForge peers (the helpers
they use live in helpers.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# What the suite keeps between sessions: the peers' builds (below) and bytecode. Where the environment says not to
# write bytecode (PYTHONDONTWRITEBYTECODE, as container images often set it), every process of the suite (the
# workers, and the CLI, plugin and peer subprocesses the tests start) would compile this package and its tests (and
# pytest would rewrite each test's asserts) from source again: 12 s of collection per worker instead of 7 s on 2
# cores. The suite writes it, in the __pycache__ folders git ignores (a prefix folder would not do: with
# PYTHONPYCACHEPREFIX every fresh virtual environment's installed bytecode is ignored and compiled again there).
# EAGLE3_PEER_CACHE=off keeps nothing: no build kept, the environment's bytecode setting left as it is.
CACHE_OFF = ("off", "0", "no", "false")


def _cache_root() -> str | None:
    """Where the suite keeps its builds between sessions (EAGLE3_PEER_CACHE; None: off, nothing kept)."""
    setting = os.environ.get("EAGLE3_PEER_CACHE", "")
    if setting.lower() in CACHE_OFF:
        return None
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.expanduser(setting) if setting else os.path.join(home, "eagle3-checks", "peers")


if os.environ.get("PYTHONDONTWRITEBYTECODE") and _cache_root():
    os.environ.pop("PYTHONDONTWRITEBYTECODE")
    sys.dont_write_bytecode = False

# Under pytest-xdist each worker runs torch's tiny forward passes; torch's default of one OpenMP thread per core in
# every worker oversubscribes the cores, and spinning threads made the converter's property tests about 15x slower
# (76 s instead of 5 s on 2 cores). One thread per worker: the workers are the parallelism. Set before torch is
# imported (by a test module or a peer subprocess, which inherits it).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)

from eagle3_checks.drafter.example import EXAMPLE, DrafterShape, target_config  # noqa: E402 (bytecode kept first)
from helpers import Drafter  # noqa: E402


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


# Peer builds are kept between sessions: each is a pure function of the peer scripts' bytes and the versions of what
# they run on one machine (the world is bit-for-bit deterministic there; another machine's kernels sum in another
# order, so the served recording keeps the world it served), so a session reuses what an earlier one built and builds
# anew when either changes. EAGLE3_PEER_CACHE=DIR keeps them in DIR; EAGLE3_PEER_CACHE=off builds them in the
# session's temporary folder, as a first run on a machine does.
PEER_PACKAGES = ("torch", "transformers", "speculators", "specforge", "numpy", "safetensors")
KEEP_DAYS = 14  # a cached build not used for this long is removed when another is made


def _peer_root(tmp_path_factory) -> Path:
    root = _cache_root()
    if root is None:
        base = tmp_path_factory.getbasetemp()
        return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: basetemp is .../popen-gwN
    Path(root).mkdir(parents=True, exist_ok=True)
    return Path(root)


def _peer_key() -> str:
    """The scripts' bytes and the versions of the packages they run, the interpreter and the machine."""
    import hashlib
    import importlib.metadata
    import platform

    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(PEERS.glob("*.py"))))
    for name in PEER_PACKAGES:
        try:
            digest.update(f"{name}=={importlib.metadata.version(name)}\n".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{name} absent\n".encode())
    digest.update(f"{sys.version} {platform.machine()}".encode())
    return digest.hexdigest()[:16]


def _peer_paths(tmp_path_factory, name: str) -> tuple[Path, Path, Path]:
    """(output folder, done marker, lock file) of a peer build, shared by the session's workers (and, cached, by
    later sessions)."""
    stem = _peer_root(tmp_path_factory) / f"peer-{name}-{_peer_key()}"
    return stem, stem.with_name(stem.name + ".done"), stem.with_name(stem.name + ".lock")


def _manifest(out: Path) -> str:
    """The sha256 of every file of a build, in path order: a cached build that a test (or anything) changed is
    built again, never used."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(out)}\0".encode())
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def _reusable(out: Path, done: Path) -> bool:
    """Under the build's lock: whether a finished build may be used as it is (its files as the build left them).
    One that was changed is removed, with its markers, so that the caller builds it again."""
    import time

    if not done.exists():
        return False
    stated = done.read_text().strip()
    now = _manifest(out)
    if not stated:  # the world's first use after its build (the build only touches the marker): what it left
        done.write_text(now + "\n")
    elif stated != now:
        _remove_build(out)
        return False
    os.utime(done)
    cutoff = time.time() - KEEP_DAYS * 86400
    for old in out.parent.glob("peer-*.done"):  # builds of other keys, unused for long: gone
        if old != done and old.stat().st_mtime < cutoff:
            _remove_build(old.with_suffix(""))
    return True


def _remove_build(out: Path) -> None:
    """A build and its markers (but its lock, which the caller may hold): the next session, or this one, builds
    it again."""
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    for marker in (".done", ".started", ".failed", ".log"):
        Path(f"{out}{marker}").unlink(missing_ok=True)


def _build_peer(tmp_path_factory, package: str, script: str) -> Path:
    """The peer's drafters, built once and kept (:func:`_peer_root`): under pytest-xdist the workers share one build
    (the first to take the lock builds it, the others wait and read it)."""
    import fcntl

    if importlib.util.find_spec(package) is None:
        pytest.fail(f"{package} is not installed: install the test extras as the README's test command does")
    out, done, lock_path = _peer_paths(tmp_path_factory, Path(script).stem)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, whoever holds it
        if not _reusable(out, done):
            out.mkdir(exist_ok=True)
            proc = subprocess.run([sys.executable, str(PEERS / script), str(out)], capture_output=True, text=True,
                                  env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=900)
            assert proc.returncode == 0, proc.stderr[-4000:]
            done.write_text(_manifest(out) + "\n")  # what the build left, before any test reads it
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


# ----- the trained world: a target and drafters trained on CPU (peers/train_world.py, about 100-165 s) ------------
#
# Built in the background from collection on, where no earlier session's build can be used (the first worker to take
# the lock starts it), and its tests moved to the end of the run: the rest of the suite runs meanwhile, and no worker
# sits waiting for it.

WORLD = "trained_world"


def _session() -> str:
    """This test session, as every worker of it names it."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
    return pid > 0


def _start_world(factory) -> None:
    """Start the world's build unless a finished one can be used, or one is under way (this session's, or another's
    still running); a build left unfinished by a session that ended, or failed in one, is started again."""
    import fcntl
    import shutil

    out, done, lock_path = _peer_paths(factory, WORLD)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = out.with_name(out.name + ".started")
        if _reusable(out, done):
            return
        if started.exists():
            session, _, pid = started.read_text().strip().partition(" ")
            if session == _session() or (pid.isdigit() and _alive(int(pid))):
                return
        shutil.rmtree(out, ignore_errors=True)
        Path(f"{out}.failed").unlink(missing_ok=True)
        out.mkdir()
        log = out.with_name(out.name + ".log")
        script = (f'"$0" "{PEERS / "train_world.py"}" "{out}" > "{log}" 2>&1 && touch "{done}" '
                  f'|| touch "{out}.failed"')
        proc = subprocess.Popen(["/bin/sh", "-c", script, sys.executable], start_new_session=True,
                                env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
        started.write_text(f"{_session()} {proc.pid}\n")


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
    import fcntl

    _start_world(tmp_path_factory)  # a no-op when collection started it, or a build can be used
    out, done, lock_path = _peer_paths(tmp_path_factory, WORLD)
    failed = out.with_name(out.name + ".failed")
    deadline = time.monotonic() + 1200
    while True:
        if done.exists():
            with open(lock_path, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if _reusable(out, done):
                    return out
            _start_world(tmp_path_factory)  # changed since it was built: built again
        if failed.exists() or time.monotonic() > deadline:
            log = out.with_name(out.name + ".log")
            pytest.fail("peers/train_world.py failed: " + (log.read_text()[-4000:] if log.exists() else "no log"))
        time.sleep(0.5)


# ----- every declared finding code is produced by a test ------------------------------------------------------------
# The gate stamps each finding's code where it runs a check (gate.run_check, which `accept` runs too, and
# gate.finding_code for the waivers' own findings); wrapped here, every code a test makes the gate produce is recorded.
# Each xdist worker writes its codes beside the others; when the whole suite has run (no -k, -m, --lf or chosen
# paths), the session fails on any declared code (gate.all_codes) no test produced, and lists them.
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


def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite tests/golden/ from this run instead of comparing with it (review the diff)")


def pytest_configure(config):
    import helpers

    helpers.UPDATE_GOLDENS = bool(config.getoption("update_goldens"))


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
