"""``eagle3-checks fix SRC DST``: apply the gate's own config fixes, and gate the result.

A finding whose remedy is an edit of config.json carries it as data (``Finding.patch``: JSON Patch operations).
``fix`` gates SRC, applies every such patch of an error or warning, gates the patched config again (the same
tensors: nothing is written yet), and repeats until nothing more is fixable, at most :data:`MAX_ROUNDS` times. A
patch that would undo or contradict one applied before is not applied: it is reported, since following the gate's
advice must never go in circles (the convergence property the test suite holds every drafter to). Then DST is
written once: the patched config.json, the original beside it, and the tensors copied byte-exact as ``convert``
copies them, to a temporary sibling moved into place atomically. SRC is never modified.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .convert import Plan, write
from .drafter.checkpoint import Checkpoint, open_checkpoint
from .errors import UsageError
from .gate import GateOptions, GateResult, gate_checkpoint
from .registry import Finding, describe_op
from .storage.output import check_paths, move_into_place, remove_stale, signals_raise, temporary_sibling

MAX_ROUNDS = 3


@dataclass(frozen=True)
class Edit:
    """One applied operation, and the finding that asked for it."""

    check: str  # the result label: engine.aux-layers[vllm@0.33.0]
    op: dict

    def describe(self) -> str:
        return describe_op(self.op)


@dataclass
class FixResult:
    dst: Path | None
    edits: list[Edit] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # patches not applied, and why
    rounds: int = 0
    result: GateResult | None = None  # the gate on the fixed checkpoint

    @property
    def left(self) -> list[Finding]:
        """What is still wrong after the fixes (errors and warnings)."""
        return [f for f in self.result.findings() if f.failing] if self.result else []


def _tokens(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        raise ValueError(f"not a JSON pointer: {pointer!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def apply_patch(config: dict, ops: list[dict]) -> dict:
    """``config`` with JSON Patch ``ops`` applied (a copy). ``add`` creates missing parent objects and replaces a
    present value, as a config edit needs; ``remove`` of an absent key does nothing."""
    out = copy.deepcopy(config)
    for op in ops:
        *parents, last = _tokens(op["path"])
        node = out
        for key in parents:
            if not isinstance(node.get(key), dict):
                if op["op"] == "remove":
                    break
                node[key] = {}
            node = node[key]
        else:
            if op["op"] == "remove":
                node.pop(last, None)
            else:
                node[last] = copy.deepcopy(op["value"])
    return out


def _patches(result: GateResult) -> list[Edit]:
    return [Edit(r.label, op) for r in result.results for f in r.findings
            if f.failing and f.patch for op in f.patch]  # a waived finding is accepted as it is: not edited


def _choose(edits: list[Edit], applied: dict[str, Any]) -> tuple[list[Edit], list[str]]:
    """The edits to apply this round, and why the others are not: two findings asking for different values of one
    key, or a finding asking to change a key an earlier round set (the advice would chase itself)."""
    by_path: dict[str, list[Edit]] = {}
    for e in edits:
        by_path.setdefault(e.op["path"], []).append(e)
    chosen, refused = [], []
    for path, asks in by_path.items():
        values = {json.dumps(e.op.get("value"), sort_keys=True) + e.op["op"] for e in asks}
        if len(values) > 1:
            refused.append(f"{path}: " + "; ".join(f"{e.check} asks {e.describe()}" for e in asks)
                           + ": no one value serves them all")
        elif path in applied and json.dumps(applied[path], sort_keys=True) == json.dumps(asks[0].op.get("value"),
                                                                                     sort_keys=True):
            continue  # already so: the finding stands for another reason, and stays in what is left
        elif path in applied:
            refused.append(f"{path}: {asks[0].check} asks {asks[0].describe()} after an earlier fix set "
                           f"{json.dumps(applied[path])}: not applied (the advice would go in circles)")
        else:
            chosen.append(asks[0])
    return chosen, refused


def plan_fixes(src: Checkpoint, options: GateOptions) -> tuple[dict | None, FixResult]:
    """The fixed config of ``src`` (nothing written) and what was done: rounds of gate, patch, gate again."""
    # fixes are config edits: the header level finds them, and with recorded states (--data) the acceptance level's
    # resolver (what the weights were trained with), which needs the levels before it
    options = dataclasses.replace(options, level=options.level if options.data else "header")
    config, outcome = copy.deepcopy(src.config_raw), FixResult(None)
    applied: dict[str, Any] = {}
    result = gate_checkpoint(src, options)
    while outcome.rounds < MAX_ROUNDS:
        chosen, refused = _choose(_patches(result), applied)
        outcome.refused += [r for r in refused if r not in outcome.refused]
        if not chosen:
            break
        outcome.rounds += 1
        assert config is not None  # config edits are found only in a config.json that was read
        config = apply_patch(config, [e.op for e in chosen])
        for e in chosen:
            applied[e.op["path"]] = e.op.get("value")
        outcome.edits += chosen
        result = gate_checkpoint(src.with_config(config), options)
    outcome.result = result
    return config, outcome


def fix(src: str | os.PathLike, dst: str | os.PathLike, options: GateOptions, *, force: bool = False) -> FixResult:
    """Write SRC with the gate's config fixes applied to DST, and gate DST. Raises UsageError (exit 2)."""
    src_path, dst_path = Path(src), Path(dst)
    check_paths(src_path, dst_path, force)
    with signals_raise():
        source = open_checkpoint(src_path)
        if source.config_raw is None or not source.complete or source.problems:
            raise UsageError(f"{src_path}: its files or config.json cannot be read as a checkpoint (run "
                             "`eagle3-checks check` on it): fix edits config.json only")
        config, outcome = plan_fixes(source, options)
        assert config is not None  # source.config_raw was read (above)
        names = {name: name for name in source.tensors}
        remove_stale(dst_path)
        tmp = temporary_sibling(dst_path)
        try:
            write(Plan(source, "fix", source.layout, config, names), tmp)
            outcome.result = gate_checkpoint(open_checkpoint(tmp), options)
            move_into_place(tmp, dst_path)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise UsageError(f"DST {dst_path}: cannot write the fixed checkpoint: {exc.strerror or exc}; nothing "
                             "was written") from exc
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    outcome.dst = dst_path
    outcome.result.ckpt.display = str(dst_path)
    return outcome
