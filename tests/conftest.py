"""Shared helpers: build tiny drafters in tmp dirs, inject one defect, gate them."""

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

from eagle3_checks.drafter.example import EXAMPLE, DrafterShape, drafter_files, target_config, write_checkpoint
from eagle3_checks.gate import FAILED, GateResult, gate, parse_options

LAYOUTS = ("speculators", "flat")


class Drafter:
    """A drafter being prepared in a tmp dir: edit ``tensors`` / ``config``, then ``write()``."""

    def __init__(self, root: Path, layout: str = "speculators", shape: DrafterShape = EXAMPLE, seed: int = 0,
                 first_layer: str = "midlayer") -> None:
        self.root, self.layout, self.shape = root, layout, shape
        self.tensors, self.config = drafter_files(shape, layout, seed, first_layer)

    def name(self, role: str) -> str:
        """The on-disk name of a role in this drafter."""
        if self.layout == "flat" and role.startswith("layers.0.") and role not in self.tensors:
            return "midlayer." + role[len("layers.0."):]
        return role

    def layer_field(self) -> dict:
        """The dict holding decoder-layer fields (nested for speculators)."""
        return self.config["transformer_layer_config"] if self.layout == "speculators" else self.config

    def write(self, shards: int = 1) -> Path:
        return write_checkpoint(self.root, self.tensors, self.config, shards)


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


def run(path: Path, **options: Any) -> GateResult:
    options.setdefault("reference", "none")
    return gate(path, parse_options(**options))


def failing(result: GateResult) -> dict[str, list[str]]:
    """check id -> messages, for every failed check."""
    return {r.check.id: [f.message for f in r.findings] for r in result.results if r.status == FAILED}


def assert_fails(result: GateResult, check_id: str, *fragments: str) -> None:
    """``check_id`` failed and one of its error findings mentions every fragment."""
    r = result.result(check_id)
    texts = [f"{f.message} | {f.file} | {f.key} | {f.expected} | {f.found} | {f.fix}" for f in r.findings
             if f.severity.value == "error"]
    assert r.status == FAILED, f"{check_id} is {r.status}; failing: {failing(result)}"
    assert any(all(frag in t for frag in fragments) for t in texts), \
        f"{check_id} findings lack {fragments}:\n" + "\n".join(texts)


def assert_clean(result: GateResult) -> None:
    assert result.exit_code == 0, failing(result)
    assert not [f for f in result.findings() if f.severity.value == "warning"], \
        [f.message for f in result.findings()]


# ----- real peers: drafters built by speculators and SpecForge themselves, in subprocesses ------------------------

PEERS = Path(__file__).parent / "peers"


def _build_peer(tmp_path_factory, package: str, script: str) -> Path:
    if importlib.util.find_spec(package) is None:
        pytest.fail(f"{package} is not installed: install the test extras as the README's test command does")
    out = tmp_path_factory.mktemp(package)
    proc = subprocess.run([sys.executable, str(PEERS / script), str(out)], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


@pytest.fixture(scope="session")
def speculators_drafters(tmp_path_factory) -> Path:
    """Every variant of peers/variants.py SPECULATORS, saved by speculators 0.9.0 (torch stays out of this process)."""
    return _build_peer(tmp_path_factory, "speculators", "build_speculators.py")


@pytest.fixture(scope="session")
def specforge_drafters(tmp_path_factory) -> Path:
    """Every variant of peers/variants.py SPECFORGE, built by SpecForge 0.2.0 and written by its SGLang exporter."""
    return _build_peer(tmp_path_factory, "specforge", "build_specforge.py")
