"""``eagle3-checks fix SRC DST``: apply the gate's own fixes of what is known, and gate the result.

A finding whose remedy is an edit of config.json carries it as data (``Finding.patch``: JSON Patch operations).
``fix`` gates SRC, applies every such patch of an error or warning whose basis is read, recorded or measured (what
the checkpoint, an engine's own code or the user's data says), gates the patched config again (the same tensors:
nothing is written yet), and repeats until nothing more is fixable, at most :data:`MAX_ROUNDS` times. A patch whose
premise is inferred or assumed is not applied: it is listed with what would settle it (``--trainer``, ``--source``,
``--aux-convention``, ``--data``), and is applied once the user states that premise. A patch that would undo or
contradict one applied before is not applied either: following the gate's advice must never go in circles. A tensor
the gate can repair from the tensor itself (``Finding.repair``: a d2t written as absolute target ids) is repaired.

DST is written only when something was applied, once, to a temporary sibling moved into place atomically: the
patched config.json, the original beside it, and every other file of SRC copied byte for byte (a config-only fix
leaves the weight files identical: the same sha256, which a Hub upload deduplicates); with a repair, the weights are
written as ``convert`` writes them, the repaired tensor replaced. SRC is never modified.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
from dataclasses import field
from pathlib import Path
from typing import Any

from .basis import KNOWN
from .checks.acceptance import FC_ORDER
from .convert import Plan, write
from .drafter.checkpoint import Checkpoint, open_checkpoint
from .drafter.config_values import PROVENANCE
from .errors import UsageError
from .fast_dataclass import dataclass
from .gate import GateOptions, GateResult, gate_checkpoint
from .registry import Finding, describe_op
from .storage.folder import INDEX
from .storage.output import check_paths, copy_file, move_into_place, remove_stale, signals_raise, temporary_sibling
from .storage.safetensors import RawTensor, from_numpy, read_bytes

MAX_ROUNDS = 3
BEFORE = "config.before-fix.json"  # SRC's config.json, kept beside DST's


@dataclass(frozen=True)
class Edit:
    """One applied operation, and the finding that asked for it."""

    check: str  # the result label: engine.aux-layers[vllm@0.33.0]
    op: dict
    basis: str = ""  # what the finding that asked for it rests on (read, recorded or measured: fix applies no other)

    def describe(self) -> str:
        return describe_op(self.op)


@dataclass
class FixResult:
    dst: Path | None
    edits: list[Edit] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # patches not applied, and why
    needs: list[str] = field(default_factory=list)  # patches not applied until a premise is stated: what it needs
    repairs: list[Edit] = field(default_factory=list)  # tensors repaired (op: {"op": "repair", "path": NAME, ...})
    rounds: int = 0
    result: GateResult | None = None  # the gate on the fixed checkpoint (on SRC when nothing was written)

    @property
    def applied(self) -> bool:
        return bool(self.edits or self.repairs)

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


def _patches(result: GateResult) -> tuple[list[Edit], list[str]]:
    """The patches to apply (of failing findings whose basis is known: a waived finding is accepted as it is), and
    the others, with what each needs before it is applied."""
    edits, needs = [], []
    for r in result.results:
        for f in r.findings:
            if not f.failing or not f.patch:
                continue
            if f.basis in KNOWN:
                edits += [Edit(r.label, op, f.basis or "") for op in f.patch]
                continue
            ops = ", ".join(describe_op(op) for op in f.patch)
            needs.append(f"{r.label} ({f.code}): {ops}: it rests on {f.rests_on or f'a {f.basis} premise'} "
                         f"({f.basis}); state it to apply: {f.settle or 'nothing in this run settles it'}")
    return edits, needs


def _repairs(result: GateResult) -> list[Edit]:
    """The tensor repairs of failing findings whose basis is known, one per tensor."""
    out: dict[str, Edit] = {}
    for r in result.results:
        for f in r.findings:
            if f.failing and f.repair and f.basis in KNOWN and f.key and f.key not in out:
                out[f.key] = Edit(r.label, {"op": "repair", "path": f.key, "value": f.repair}, f.basis or "")
    return list(out.values())


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
    outcome.repairs = _repairs(result)
    while outcome.rounds < MAX_ROUNDS:
        edits, needs = _patches(result)
        outcome.needs += [n for n in needs if n not in outcome.needs]
        chosen, refused = _choose(edits, applied)
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
        # what is left after the last round, as the gate sees it: patches that still need a premise stated
        outcome.needs = [n for n in outcome.needs if n in _patches(outcome.result)[1]] if outcome.result else []
        if not outcome.applied:  # nothing known to fix: no DST (the findings say why)
            return outcome
        _state_premise(source, config, options)
        remove_stale(dst_path)
        tmp = temporary_sibling(dst_path)
        try:
            _write_fixed(source, config, outcome.repairs, tmp)
            outcome.result = gate_checkpoint(open_checkpoint(tmp), options)
            # a repair is kept only where the gate, measuring again, no longer finds what it repaired (a reordered
            # fc reaches the acceptance the data measured for that order): otherwise written again without it
            failed = [e for e in outcome.repairs if _still(outcome.result, e)]
            if failed:
                shutil.rmtree(tmp, ignore_errors=True)
                outcome.repairs = [e for e in outcome.repairs if e not in failed]
                outcome.refused += [f"{e.op['path']}: the repair {e.op['value']} did not remove the finding it was "
                                    "for when measured again: not kept" for e in failed]
                if not outcome.applied:
                    return outcome
                _write_fixed(source, config, outcome.repairs, tmp)
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
    assert outcome.result is not None
    outcome.result.ckpt.display = str(dst_path)
    return outcome


def _state_premise(source: Checkpoint, config: dict, options: GateOptions) -> None:
    """Who trained the drafter, when this fix rests on the user's word for it (--trainer): written into the
    provenance block of what it writes, so that a later gate without the flag sees the premise the fix assumed
    (engines.trainers reads it back, naming where it came from)."""
    if not options.trainer:
        return
    name, _, version = options.trainer.partition("@")
    held = config.get(PROVENANCE)
    provenance: dict = held if isinstance(held, dict) else {}
    config[PROVENANCE] = {**provenance, "trainer": name, **({"trainer_version": version} if version else {}),
                          "trainer_from": f"--trainer {options.trainer} (stated to eagle3-checks fix)"}


def _write_fixed(source: Checkpoint, config: dict, repairs: list[Edit], out: Path) -> None:
    """DST: the fixed config.json and the original beside it; every other file of SRC copied byte for byte, or, with
    a tensor repaired, the weights written as convert writes them with that tensor replaced."""
    if repairs:
        names = {name: name for name in source.tensors if name not in {e.op["path"] for e in repairs}}
        replaced = {e.op["path"]: repair(e.op["value"])(source, e.op["path"]) for e in repairs}
        plan = Plan(source, "fix", source.layout, config, names, replaced)
        write(plan, out, original=None)
        skip = {"config.json", *source.weight_files, INDEX}
    else:
        out.mkdir(parents=True)
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        skip = {"config.json"}
    # the config as it was, under a name no reader takes for the trainer's own (config_speculators.json beside a
    # checkpoint is evidence of who trained it; the config before a fix is not)
    (out / BEFORE).write_text(json.dumps(source.config_raw, indent=2) + "\n")
    skip.add(BEFORE)
    for child in sorted(source.path.iterdir()):
        if child.name not in skip and child.is_file() and not (out / child.name).exists():
            copy_file(child, out / child.name)


def _d2t_offsets(source: Checkpoint, name: str):
    """d2t written as absolute target ids, made offsets: d2t - arange(DV) (the tensor's own values)."""
    import numpy as np

    ids = np.asarray(source.values("d2t"), dtype=np.int64)
    return from_numpy(ids - np.arange(len(ids), dtype=np.int64))


def _fc_order(order: tuple[int, ...]) -> Any:
    """fc.weight's input blocks reordered: its weights for the aux state j were trained in block order[j]'s place
    (acceptance.trained-with/aux-order: "fc blocks fed aux ORDER"), so new block order[j] = old block j. A byte-level
    permutation of each row's blocks: exact in any dtype."""
    import numpy as np

    def repair(source: Checkpoint, name: str) -> RawTensor:
        e = source.entry(name)
        data = (source.load_bytes(e) or read_bytes(e)) if e is not None else None
        if e is None or data is None or len(e.shape) != 2 or e.shape[1] % len(order):
            raise UsageError(f"{name}: cannot reorder its input blocks (not a readable 2-D tensor of "
                             f"{len(order)} equal blocks)")
        rows = np.frombuffer(data, dtype=np.uint8).reshape(e.shape[0], len(order), -1)
        out = np.empty_like(rows)
        for j, i in enumerate(order):
            out[:, i, :] = rows[:, j, :]
        return RawTensor(e.dtype, e.shape, out.tobytes())
    return repair


REPAIRS = {"d2t-offsets": _d2t_offsets}


def repair(value: str) -> Any:
    """The repair a finding names (Finding.repair)."""
    if value.startswith(FC_ORDER):
        return _fc_order(tuple(int(x) for x in value[len(FC_ORDER):].split(",")))
    return REPAIRS[value]


def _still(result: GateResult | None, edit: Edit) -> bool:
    """The gate still finds what ``edit`` repaired (a failing finding naming that repair of that tensor)."""
    return result is not None and any(f.failing and f.repair == edit.op["value"] and f.key == edit.op["path"]
                                      for f in result.findings())
