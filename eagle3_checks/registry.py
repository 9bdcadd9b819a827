"""The one registry of checks, and the gate that runs it.

A check is a small function ``fn(ctx) -> Iterable[Finding]`` registered with :func:`check`. It
has a stable id, a title, a level (``header`` reads headers and the small vocabulary tensors;
``scan`` streams every tensor's bytes once; ``forward`` runs the drafter, with torch), and what it needs
beyond the checkpoint (``reference``, ``target``). The CLI, the pytest plugin and the converter's self-verification
all call :func:`run_gate`; none of them knows any check by name.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .engines import AUX_CONVENTIONS, ENGINE_NAMES
from .engines import resolve as resolve_engines
from .errors import UsageError

LEVELS = ("header", "scan", "forward")


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    """One thing a check found: where, expected vs found, why it matters, how to fix it."""

    severity: Severity
    message: str
    file: str | None = None
    key: str | None = None
    expected: str | None = None
    found: str | None = None
    why: str | None = None
    fix: str | None = None
    check: str = ""
    # The fix as data, when it is an edit of config.json: JSON Patch operations (RFC 6902: add, replace, remove;
    # "add" creates missing parent objects). None: no config edit fixes this (a missing tensor, say).
    patch: tuple[dict, ...] | None = None
    # the root cause this finding follows from, when the check knows it: "config.json: head_dim", "tensor: d2t"
    # (see causes.py; findings that share one are reported under it)
    cause: str | None = None
    code: str | None = None  # a stable short name of the kind of finding, within its check (SARIF rule ids)
    offset: int | None = None  # the byte offset in ``file`` the finding points at

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["severity"] = self.severity.value
        d["patch"] = list(self.patch) if self.patch else None
        if self.severity is not Severity.INFO:
            d["fixable_by_config"] = bool(self.patch)
        return {k: v for k, v in d.items() if v is not None}


def add(path: str, value: Any) -> dict:
    """A JSON Patch "add" of config.json (sets the value, creating parent objects)."""
    return {"op": "add", "path": path, "value": value}


def remove(path: str) -> dict:
    return {"op": "remove", "path": path}


def describe_op(op: dict) -> str:
    """A JSON Patch operation of config.json for people: ``eagle_config.norm_before_fc = true``."""
    key = op["path"].lstrip("/").replace("/", ".")
    return f"remove {key}" if op["op"] == "remove" else f"{key} = {json.dumps(op['value'])}"


def _finding(severity: Severity) -> Callable[..., Finding]:
    def make(message: str, patch: list[dict] | tuple[dict, ...] | None = None, **kw: Any) -> Finding:
        kw = {k: (None if v is None else v if k == "offset" else str(v)) for k, v in kw.items()}
        return Finding(severity, message, patch=tuple(patch) if patch else None, **kw)

    return make


error = _finding(Severity.ERROR)
warning = _finding(Severity.WARNING)
info = _finding(Severity.INFO)


class Data(dict):
    """Structured results a check attaches to its outcome (yield one): reports show them, JSON carries them."""


class NotApplicable(Exception):
    """Raised by a check that cannot run on this checkpoint; reported as skipped with the reason."""


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    level: str
    needs: tuple[str, ...]
    func: Callable[[Context], Iterable[Finding | Data]]  # Data: records for the report, not findings
    guards: str  # the failure it prevents, in a sentence
    evidence: tuple[str, ...] = ()  # where that failure was seen (issues, PRs, sources)
    per_engine: bool = False  # run once per --engine, reported as ID[engine]
    requires: Callable[[], str | None] | None = None  # returns why the check cannot run here (e.g. no torch)
    fix: str = ""  # the usual remedy, for `eagle3-checks explain`
    # assumes a drafter of the modelled family (Llama-shaped decoder layers): skipped, with the reason, for any
    # other (Checkpoint.not_modelled, which config.architectures reports once)
    modelled_only: bool = False


REGISTRY: dict[str, Check] = {}


def check(id: str, title: str, *, level: str = "header", needs: tuple[str, ...] = (), guards: str = "",
          evidence: tuple[str, ...] = (), per_engine: bool = False,
          requires: Callable[[], str | None] | None = None, fix: str = "", modelled_only: bool = False) -> Callable:
    """Register ``fn`` as check ``id``."""
    assert level in LEVELS, level

    def register(fn: Callable) -> Callable:
        if id in REGISTRY:
            raise ValueError(f"check {id!r} registered twice")
        REGISTRY[id] = Check(id, title, level, needs, fn, guards, evidence, per_engine, requires, fix, modelled_only)
        return fn

    return register


def modelled_only() -> list[str]:
    """The ids of the checks that skip a drafter of a family eagle3-checks does not model."""
    return [c.id for c in checks() if c.modelled_only]


def checks() -> list[Check]:
    """Every registered check, in registration order (the order reports use)."""
    from . import checks as _all  # noqa: F401  (importing the package registers them)

    return list(REGISTRY.values())


@dataclass
class Context:
    """What a check sees: the checkpoint, and the optional reference and target config."""

    ckpt: Any  # Checkpoint
    reference: Any = None  # Spec
    reference_note: str = ""
    target: Any = None  # TargetConfig
    options: GateOptions | None = None
    source: Any = None  # Checkpoint the candidate was converted from (--source)
    engine: str | None = None  # the engine a per-engine check judges
    cache: dict = field(default_factory=dict)  # shared by every check of one gate run (mapped files, logits)
    target_embedding: Any = None  # the target's embed_tokens (--target), read lazily: later draft steps embed with it


@dataclass(frozen=True)
class GateOptions:
    """Options every shell shares. Plain values only, so they serialize (pytest-xdist)."""

    reference: str = "auto"
    target_config: str | None = None
    target: str | None = None  # the target checkpoint (a folder or hf://): its config.json and embed_tokens
    revision: str | None = None  # for Hugging Face cache folders and hf:// names without @REVISION
    download: bool = False  # fetch a Hub checkpoint's weights into the Hugging Face cache (scan, forward levels)
    level: str | None = None  # None: every level the project has
    strict: bool = False
    skip: tuple[tuple[str, str], ...] = ()  # (check id, reason)
    # the engine releases per-engine checks judge ("vllm@0.33.0", ...; see engines.resolve) and why each version
    engine: tuple[str, ...] = ()
    engine_notes: tuple[str, ...] = ()
    # releases only `--engine all` brought in: a layout such a release does not read is not applicable to it, and
    # fails the gate only when no release in the set reads the checkpoint (or under --strict)
    optional_engines: tuple[str, ...] = ()
    source: str | None = None  # the checkpoint the candidate was converted from
    aux_convention: str | None = None  # how the drafter's trainer counted aux ids: vllm or sglang
    max_model_len: int | None = None  # the context the drafter will be served with
    progress: bool = False  # show progress on a terminal (long scans)

    @property
    def skipped(self) -> dict[str, str]:
        return dict(self.skip)

    def engines(self) -> tuple[str, ...]:
        return self.engine or resolve_engines(None)[0]

    def levels(self) -> tuple[str, ...]:
        if self.level is None:
            return LEVELS
        return LEVELS[: LEVELS.index(self.level) + 1]


def parse_options(*, reference: str | None = None, target_config: str | None = None, level: str | None = None,
                  strict: bool = False, skip: Iterable[str] = (), engine: str | Iterable[str] | None = None,
                  source: str | None = None, aux_convention: str | None = None,
                  max_model_len: int | str | None = None, target: str | None = None, revision: str | None = None,
                  download: bool = False) -> GateOptions:
    """Validate option strings the same way for the CLI and the plugin. Raises UsageError."""
    if level is not None:
        if level not in LEVELS:
            raise UsageError(f"--level {level!r}: choose one of {', '.join(LEVELS)}")
        for c in checks():
            why = c.requires() if c.requires and c.level == level else None
            if why:
                raise UsageError(f"--level {level}: {why}")
    specs, notes, optional = resolve_engines(engine)
    if aux_convention not in (None, *AUX_CONVENTIONS):
        raise UsageError(f"--aux-convention {aux_convention!r}: choose {' or '.join(AUX_CONVENTIONS)}")
    if max_model_len is not None:
        try:
            max_model_len = int(max_model_len)
        except (TypeError, ValueError):
            raise UsageError(f"--max-model-len {max_model_len!r}: a positive number of tokens") from None
        if max_model_len <= 0:
            raise UsageError(f"--max-model-len {max_model_len}: a positive number of tokens")
    waivers: list[tuple[str, str]] = []
    for item in skip:
        check_id, sep, reason = item.partition("=")
        check_id, reason = check_id.strip(), reason.strip()
        if not sep or not reason:
            raise UsageError(f"--skip {item!r}: write CHECK_ID=REASON (a waiver needs a reason)")
        waivers.append((_waiver_id(check_id, item), reason))
    return GateOptions(reference=reference or "auto", target_config=target_config, level=level,
                       strict=bool(strict), skip=tuple(waivers), engine=specs, engine_notes=notes,
                       optional_engines=optional, source=source,
                       aux_convention=aux_convention, max_model_len=max_model_len, target=target or None,
                       revision=revision or None, download=bool(download))


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean config.rope?`` for a mistyped or partial check id, or ``""``."""
    import difflib

    known = list(known)
    # a near-certain match alone (config.rop -> config.rope), else the plausible ones
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.85) or difflib.get_close_matches(name, known, n=3,
                                                                                                 cutoff=0.6)
    near += [k for k in known if k not in near and name and (name in k or k.startswith(name))]
    return f"; did you mean {', '.join(near[:3])}?" if near else ""


def unknown_check(name: str) -> str:
    """The message for a check id no check has, with the nearest ids."""
    return f"no check named {name!r}{did_you_mean(name, [c.id for c in checks()])} (see `eagle3-checks list`)"


def _waiver_id(check_id: str, item: str) -> str:
    """A --skip target: a check id, or a per-engine check's id for one engine (``engine.loads[vllm]``) or one
    release (``engine.loads[vllm@0.33.0]``), as reports label it. Raises UsageError."""
    base, bracket, engine = check_id.partition("[")
    by_id = {c.id: c for c in checks()}
    if base not in by_id:
        raise UsageError(f"--skip {item!r}: {unknown_check(base)}")
    if not bracket:
        return check_id
    if not engine.endswith("]") or not engine[:-1]:
        raise UsageError(f"--skip {item!r}: write {base}[ENGINE] or {base}[ENGINE@VERSION]")
    engine = engine[:-1]
    if not by_id[base].per_engine:
        raise UsageError(f"--skip {item!r}: {base} is not a per-engine check; waive it as {base}")
    if "@" in engine:
        try:
            resolve_engines(engine)
        except UsageError as exc:
            raise UsageError(f"--skip {item!r}: {exc}") from None
    elif engine not in ENGINE_NAMES:
        raise UsageError(f"--skip {item!r}: no engine named {engine!r}; choose {', '.join(ENGINE_NAMES)}")
    return f"{base}[{engine}]"


def waiver(c: Check, engine: str | None, waived: dict[str, str]) -> str | None:
    """The reason ``c`` is waived for ``engine``: by its id, its engine name, or its engine release."""
    keys = [f"{c.id}[{engine}]", f"{c.id}[{engine.split('@')[0]}]"] if engine else []
    return next((waived[k] for k in (*keys, c.id) if k in waived), None)


PASSED, FAILED, WARNED, SKIPPED = "passed", "failed", "warned", "skipped"


@dataclass
class CheckResult:
    check: Check
    status: str
    findings: list[Finding] = field(default_factory=list)
    reason: str | None = None  # why it was skipped
    engine: str | None = None  # for a per-engine check
    data: dict = field(default_factory=dict)  # what the check measured (e.g. per-tensor statistics)

    @property
    def label(self) -> str:
        """The check id, with the engine for a per-engine check: forward.equivalence[vllm]."""
        return f"{self.check.id}[{self.engine}]" if self.engine else self.check.id

    def failed(self, strict: bool) -> bool:
        return self.status == FAILED or (strict and self.status == WARNED)


@dataclass
class GateResult:
    ckpt: Any
    options: GateOptions
    results: list[CheckResult]
    reference_name: str | None
    reference_note: str

    @property
    def exit_code(self) -> int:
        return 1 if any(r.failed(self.options.strict) for r in self.results) else 0

    def result(self, check_id: str, engine: str | None = None) -> CheckResult:
        """The result of one check; ``engine`` is a release (``sglang@0.5.23``) or an engine name (its first result)."""
        return next(r for r in self.results if r.check.id == check_id and (
            engine is None or r.engine == engine or (r.engine or "").split("@")[0] == engine))

    def by_label(self, label: str) -> CheckResult:
        return next(r for r in self.results if r.label == label)

    def findings(self) -> list[Finding]:
        return [f for r in self.results for f in r.findings]

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Severity}
        for f in self.findings():
            out[f.severity.value] += 1
        return out


def run_check(c: Check, ctx: Context, waived: dict[str, str]) -> CheckResult:
    def result(status: str, findings: list[Finding] | None = None, reason: str | None = None) -> CheckResult:
        return CheckResult(c, status, findings or [], reason, ctx.engine)

    reason = waiver(c, ctx.engine, waived)
    if reason is not None:
        return result(SKIPPED, reason=f"waived: {reason}")
    if c.modelled_only:
        if "not_modelled" not in ctx.cache:
            ctx.cache["not_modelled"] = getattr(ctx.ckpt, "not_modelled", None)
        if ctx.cache["not_modelled"]:
            return result(SKIPPED, reason=f"not modelled: {ctx.cache['not_modelled'][0]}, this check skipped (see "
                          "config.architectures)")
    if "reference" in c.needs and ctx.reference is None:
        return result(SKIPPED, reason=ctx.reference_note or "no reference given")
    if "target" in c.needs and ctx.target is None:
        return result(SKIPPED, reason="needs --target-config (the verifier's config.json)")
    why = c.requires() if c.requires else None
    if why:
        return result(SKIPPED, reason=why)
    if c.level != "header":  # a Hub checkpoint opened from its headers: no weight bytes here
        elsewhere = [getattr(x, "weights_elsewhere", None) for x in (ctx.ckpt, ctx.source)]
        if any(elsewhere):
            return result(SKIPPED, reason=next(w for w in elsewhere if w))
    label = f"{c.id}[{ctx.engine}]" if ctx.engine else c.id
    data: dict = {}
    try:
        found = []
        for item in c.func(ctx):
            if isinstance(item, Data):
                data.update(item)
            else:
                found.append(dataclasses.replace(item, check=label))
    except NotApplicable as exc:
        return result(SKIPPED, reason=str(exc))
    except Exception as exc:  # a bug in a check must not hide the others, nor pass silently
        found = [Finding(Severity.ERROR, f"check crashed ({type(exc).__name__}: {exc}); the checkpoint is "
                         "unverified for this check. Please report this.", check=label)]
    if any(f.severity is Severity.ERROR for f in found):
        status = FAILED
    elif any(f.severity is Severity.WARNING for f in found):
        status = WARNED
    else:
        status = PASSED
    out = result(status, found)
    out.data = data
    return out


def run_gate(ckpt: Any, options: GateOptions | None = None, *, reference: Any = None, reference_note: str = "",
             target: Any = None, source: Any = None, target_embedding: Any = None) -> GateResult:
    """Run every registered check of the selected levels on an opened checkpoint (per-engine checks once per
    engine). ``reference``, ``target`` and ``source`` are already resolved (see :mod:`eagle3_checks.gate`)."""
    options = options or GateOptions()
    ctx = Context(ckpt, reference, reference_note, target, options, source, target_embedding=target_embedding)
    levels = options.levels()
    waived = options.skipped
    results = []
    for c in checks():
        if c.level not in levels:
            continue
        for engine in options.engines() if c.per_engine else (None,):
            results.append(run_check(c, dataclasses.replace(ctx, engine=engine), waived))
    ref_name = getattr(reference, "name", None)
    return GateResult(ckpt, options, results, ref_name, reference_note)
