"""The gate: its options, the run of every check over an opened checkpoint, and its result.

Every shell (CLI, pytest plugin, converter self-verification, ``fix``) goes through :func:`gate` or
:func:`run_gate`. The checks come from :mod:`eagle3_checks.checks` (the built-in ones, imported here) and from any
installed package that declares an entry point in the ``eagle3_checks.checks`` group: the entry point names a
module, and importing it registers its checks with :func:`eagle3_checks.registry.check`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from typing import Any

from . import checks as _builtin_checks  # noqa: F401  (importing the package registers the built-in checks)
from .basis import ASSUMED, BASES, KNOWN, MEASURED, READ, RECORDED
from .checks.acceptance import measured as seed_measured
from .drafter.checkpoint import Checkpoint, open_any
from .drafter.config_values import TargetConfig
from .drafter.spec import Spec, resolve_reference
from .drafter.target import DRAFTER_KEYS, load_target, load_target_checkpoint, open_target  # noqa: F401 (shared)
from .engines import (
    AUX_CONVENTIONS,
    ENGINE_NAMES,
    TRAINERS,
    identify,
    known_by,
    named_verifier,
    trainer_said,
    version_key,
)
from .engines import resolve as resolve_engines
from .errors import UsageError
from .fast_dataclass import dataclass
from .live import CannotJudge
from .live import version as live_version
from .options import ACCEPT_STEPS, FAIL_SHARE, GATE_ROWS, LEVELS, GateOptions, Option, gate_fields
from .registry import (
    CRASHED,
    SLUG,
    Check,
    Context,
    Data,
    Finding,
    NotApplicable,
    Severity,
    error,
    info,
    registered,
    warning,
)
from .storage.target_weights import TargetEmbedding

ENTRY_POINT_GROUP = "eagle3_checks.checks"
_plugins: list[str] | None = None  # the plugin modules loaded, once per process


def plugin_modules() -> list[str]:
    """The modules named by ``eagle3_checks.checks`` entry points of the installed distributions, read from their
    ``entry_points.txt`` as importlib.metadata would, without its import (40 ms on every run); only a file that names
    the group is parsed."""
    found: list[str] = []
    header = f"[{ENTRY_POINT_GROUP}]"
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for folder in names:
            if not folder.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(entry or ".", folder, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError):
                continue
            if header not in text:
                continue
            import configparser  # the standard library's; only for the rare file that names the group

            parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
            parser.optionxform = str  # type: ignore[assignment,method-assign]
            try:
                parser.read_string(text)
            except configparser.Error:
                continue
            if parser.has_section(ENTRY_POINT_GROUP):
                found += [value.split(":")[0].strip() for _, value in parser.items(ENTRY_POINT_GROUP)]
    return list(dict.fromkeys(found))


def all_checks() -> list[Check]:
    """Every check, in report order: the built-in ones, then those of installed plugins (loaded once). A plugin
    that cannot be imported is a usage error naming it, not a silent gap in the gate."""
    global _plugins
    if _plugins is None:
        import importlib

        _plugins = plugin_modules()
        for name in _plugins:
            try:
                importlib.import_module(name)
            except Exception as exc:
                raise UsageError(f"the check plugin {name!r} (entry point group {ENTRY_POINT_GROUP}) cannot be "
                                 f"imported: {type(exc).__name__}: {exc}") from None
    return registered()


def reference_for(option: str, ckpt: Checkpoint, target: TargetConfig | None) -> tuple[Spec | None, str]:
    """``--reference`` as a spec (see :func:`resolve_reference`): auto picks a published drafter's spec for the
    candidate's own target family only, known from ``target`` or from the verifier the drafter's config names."""
    return resolve_reference(option, ckpt, target, named_verifier(ckpt.config_raw))


def load_source(path: str | os.PathLike, revision: str | None = None, download: bool = False) -> Checkpoint:
    """The checkpoint a candidate was converted from (--source). Raises UsageError."""
    try:
        source = open_any(path, revision=revision, download=download)
    except UsageError as exc:
        raise UsageError(f"--source {exc}") from exc
    if source.problems:
        raise UsageError(f"--source {path}: the source checkpoint has integrity problems "
                         f"({source.problems[0].file}: {source.problems[0].message})")
    return source


def gate_checkpoint(ckpt: Checkpoint, options: GateOptions) -> GateResult:
    target, embedding = open_target(options.target_config, options.target)
    reference, note = reference_for(options.reference, ckpt, target)
    source = load_source(options.source, download=options.download) if options.source else None
    return run_gate(ckpt, options, reference=reference, reference_note=note, target=target, source=source,
                    target_embedding=embedding)


def gate(path: str | os.PathLike, options: GateOptions | None = None) -> GateResult:
    """Gate the checkpoint at ``path`` (a folder, a Hugging Face cache folder, or hf://ORG/NAME[@REVISION]).
    Raises UsageError (exit 2) for unusable paths or options."""
    options = options or GateOptions()
    return gate_checkpoint(open_any(path, revision=options.revision, download=options.download), options)


def options_from(values: Mapping[str, Any]) -> GateOptions:
    """The gate's options from their values as a shell read them (``options.GATE_ROWS``: a value absent, None or
    empty takes the row's default), validated the same way for the CLI, the plugin and the library. Each value is
    converted by its row (a number with its minimum, a vocabulary, a flag, a list) or, where an option says more, by
    its converter in ``_CONVERTERS``; then what options say together (``--level`` and ``--data``, ``--engine`` and
    ``--engine-python``, ``--max-drop`` and ``--min-acceptance``, ``--loss-mask`` and ``--data``). Raises UsageError;
    a name that is no option of the table raises TypeError."""
    unknown = set(values) - set(gate_fields())
    if unknown:
        raise TypeError(f"not a gate option: {', '.join(sorted(unknown))} (eagle3_checks.options.GATE_ROWS)")
    got = {name: _convert(o, values.get(o.field)) for name, o in GATE_ROWS}
    level, data = got["level"], got["data"]
    if level == "acceptance" and not data:
        raise UsageError("--level acceptance: the acceptance level runs on recorded target states: give --data DIR")
    if level is not None:
        for c in all_checks():
            why = c.requires() if c.requires and c.level == level else None
            if why:
                raise UsageError(f"--level {level}: {why}")
    if got["loss_mask"] and not data:
        raise UsageError("--loss-mask: the loss masks of recorded states: give --data DIR too")
    got["max_drop"], got["min_acceptance"] = acceptance_thresholds(got["max_drop"], got["min_acceptance"],
                                                                   ACCEPT_STEPS)
    engine, live = _installed(got["engine"], got["engine_python"])
    specs, notes, optional = resolve_engines(engine or None)
    judged_live = dict(live)
    notes = tuple(f"{note}; judged live by the {spec.replace('@', ' ')} installed for {judged_live[spec]} "
                  "(engine.live)" if spec in judged_live else note for spec, note in zip(specs, notes, strict=True))
    return GateOptions(**{**got, "engine": specs, "engine_notes": notes, "optional_engines": optional,
                          "live": live})


def _convert(o: Option, value: Any) -> Any:
    """One option's value as the gate holds it: the row's default when not given; else its converter's, or the
    row's own conversion. Raises UsageError naming the option."""
    if value is None or value == "" or (o.kind == "list" and not value):
        return o.default
    special = _CONVERTERS.get(o.name)
    if special is not None:
        return special(value)
    if o.kind == "flag":
        if isinstance(value, str):  # as an ini file or the library may give it
            word = value.strip().lower()
            if word not in _FLAG_WORDS:
                raise UsageError(f"--{o.name} {value!r}: true or false")
            return _FLAG_WORDS[word]
        return bool(value)
    if o.kind == "list":
        return tuple(str(v) for v in ([value] if isinstance(value, str) else value))
    if o.type is not None:
        return o.number(value)
    if o.choices is not None:
        vocabulary = VOCABULARIES[o.choices]
        if value not in vocabulary:
            raise UsageError(f"--{o.name} {value!r}: choose one of {', '.join(vocabulary)}")
    return value


def _directory(flag: str, what: str) -> Callable[[Any], str]:
    def converted(value: Any) -> str:
        if not os.path.isdir(value):
            raise UsageError(f"{flag} {value}: not a directory ({what})")
        return str(value)
    return converted


def parse_options(**values: Any) -> GateOptions:
    """:func:`options_from` with the values as keywords (the library's form: ``parse_options(level="header")``)."""
    return options_from(values)


def _fail_on(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """--fail-on CODES: comma-separated finding codes or prefixes of them (a check id, ``engine``), each matching a
    declared code. Raises UsageError."""
    items = [value] if isinstance(value, str) else list(value or ())
    out = tuple(p.strip() for item in items for p in str(item).split(",") if p.strip())
    codes = all_codes()
    for p in out:
        if not any(code.startswith(p) for code in codes):
            raise UsageError(f"--fail-on {p!r}: no finding code starts with it{did_you_mean(p, codes)} (`eagle3-checks "
                             "list` lists the codes)")
    return out


def _trainer(value: str | None) -> str | None:
    """--trainer NAME[@VERSION]: a modelled trainer, and a release number. Raises UsageError."""
    if not value:
        return None
    name, at, version = str(value).partition("@")
    if name not in TRAINERS:
        raise UsageError(f"--trainer {value!r}: choose {' or '.join(TRAINERS)}, with @VERSION when known "
                         "(speculators@0.9.0)")
    if at and not version_key(version):
        raise UsageError(f"--trainer {value!r}: {version!r} is no release number (such as 0.9.0)")
    return f"{name}@{version}" if at else name


def _waivers(values: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """--waive CHECK_OR_CODE=REASON (repeatable) as (the check id or code, the reason). Raises UsageError."""
    waivers: list[tuple[str, str]] = []
    for item in [values] if isinstance(values, str) else values:
        waived, sep, reason = str(item).partition("=")
        waived, reason = waived.strip(), reason.strip()
        if not sep or not reason:
            raise UsageError(f"--waive {item!r}: write CHECK_ID=REASON or CODE=REASON (a waiver needs a reason)")
        waivers.append((_waiver_id(waived, item), reason))
    return tuple(waivers)


def _launch(values: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """``--launch NAME=FILE`` (repeatable): the launch settings of engine NAME, a JSON object (the file eagle3-checks
    recipe writes; TensorRT-LLM's --extra_llm_api_options file when written as JSON), as (NAME, JSON text)."""
    out: dict[str, str] = {}
    for item in values or ():
        name, sep, path = str(item).partition("=")
        name, path = name.strip(), path.strip()
        if not sep or not path:
            raise UsageError(f"--launch {item!r}: write NAME=FILE (the launch settings of engine NAME, as JSON)")
        if name not in ENGINE_NAMES:
            raise UsageError(f"--launch {item!r}: no engine {name!r}; choose {', '.join(ENGINE_NAMES)}")
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except OSError as exc:
            raise UsageError(f"--launch {item!r}: cannot read {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise UsageError(f"--launch {item!r}: {path} is not JSON ({exc}); write the launch settings as JSON "
                             "(eagle3-checks recipe --format json writes them)") from None
        if not isinstance(doc, dict):
            raise UsageError(f"--launch {item!r}: {path} holds a JSON {type(doc).__name__}, not an object")
        out[name] = json.dumps(doc.get("launch", doc) if isinstance(doc.get("launch"), dict) else doc)
    return tuple(out.items())


def _installed(engine: str | Iterable[str] | None, python: str | None) -> tuple[Any, tuple[tuple[str, str], ...]]:
    """``--engine NAME@installed`` -> NAME@VERSION of the release installed for ``python`` (--engine-python; else
    this interpreter), to be judged live. Raises UsageError when that interpreter has no such engine."""
    if python and not engine:
        raise UsageError("--engine-python: name the engine to judge with it, as --engine vllm@installed")
    values = [engine] if isinstance(engine, str) else list(engine or [])
    if not any("@installed" in str(v) for v in values):
        if python:
            raise UsageError("--engine-python: judge live with --engine NAME@installed (vllm or sglang)")
        return engine, ()
    interpreter = python or sys.executable
    out, live = [], []
    for value in values:
        items = []
        for item in str(value).split(","):
            name, _, version = item.strip().partition("@")
            if version == "installed":
                try:
                    found = live_version(name, interpreter)
                except CannotJudge as exc:
                    raise UsageError(f"--engine {item.strip()}: cannot judge this release live: {exc}") from None
                item = f"{name}@{found}"
                live.append((item, interpreter))
            items.append(item.strip())
        out.append(",".join(items))
    return out, tuple(live)


# The options whose value says more than its row: each one's converter (the rest are converted by their row).
_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "fail-on": _fail_on, "waive": _waivers, "trainer": _trainer, "launch": _launch,
    "engine": lambda value: [value] if isinstance(value, str) else list(value),  # resolved with --engine-python
    "data": _directory("--data", "the recorded target states' folder"),
    "loss-mask": _directory("--loss-mask", "speculators' prepared-data folder"),
}
# a flag given as text (pytest's ini booleans read these words: _pytest/config/__init__.py's _strtobool)
_FLAG_WORDS = {**dict.fromkeys(("1", "true", "yes", "on", "y", "t"), True),
               **dict.fromkeys(("0", "false", "no", "off", "n", "f"), False)}
# the vocabularies an option row names (Option.choices), for the gate and the CLI's parsers
VOCABULARIES = {"levels": LEVELS, "aux_conventions": AUX_CONVENTIONS}


def acceptance_thresholds(max_drop: float | str | None, min_acceptance: float | str | None,
                          steps: int) -> tuple[float, float | None]:
    """--max-drop (default FAIL_SHARE) and --min-acceptance, validated for K = ``steps``. Raises UsageError."""
    try:
        drop = FAIL_SHARE if max_drop is None else float(max_drop)
        minimum = None if min_acceptance is None else float(min_acceptance)
    except (TypeError, ValueError):
        raise UsageError(f"--max-drop {max_drop!r} / --min-acceptance {min_acceptance!r}: numbers") from None
    if not 0 <= drop < 1:
        raise UsageError(f"--max-drop must be a share from 0 to below 1 (0.1 is 10%), not {drop:g}")
    if minimum is not None and not 1 <= minimum <= steps + 1:
        raise UsageError(f"--min-acceptance must be an acceptance length from 1 to {steps + 1} (K+1 with "
                         f"--steps {steps}), not {minimum:g}")
    return drop, minimum


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean config.rope?`` for a mistyped or partial check id or finding code, or ``""``."""
    import difflib

    known = list(known)
    # a near-certain match alone (config.rop -> config.rope), else the plausible ones
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.85) or difflib.get_close_matches(name, known, n=3,
                                                                                                 cutoff=0.6)
    near += [k for k in known if k not in near and name and (name in k or k.startswith(name))]
    return f"; did you mean {', '.join(near[:3])}?" if near else ""


def all_codes() -> list[str]:
    """Every declared finding code (``vocab.d2t/absolute-ids``), in check order."""
    return [code for c in all_checks() for code in c.meanings]


def unknown_check(name: str, code: str | None = None) -> str:
    """The message for a check id no check has, with the nearest ids and codes (a bare slug finds its code);
    ``code``: the finding code it was the check id of (``vocab.d2tt/absolute-ids``), matched as a whole."""
    ids = [c.id for c in all_checks()]
    near = did_you_mean(code, all_codes()) if code else did_you_mean(name, ids) or did_you_mean(name, all_codes())
    return f"no check named {name!r}{near} (see `eagle3-checks list`)"


def unknown_code(c: Check, slug: str) -> str | None:
    """Why ``slug`` is no finding code of ``c`` (with the nearest codes), or None when it is one. A check that
    declares no codes (a plugin's) takes any kebab-case slug."""
    if not SLUG.match(slug):
        return f"{slug!r} is not a finding code's slug (kebab-case: {c.id}/absolute-ids)"
    if not c.codes or c.code(slug) in c.meanings:
        return None
    return (f"{c.id} has no finding code {c.code(slug)!r}{did_you_mean(c.code(slug), c.meanings)} (its codes: "
            f"{', '.join(c.meanings)}; see `eagle3-checks explain {c.id}`)")


def split_target(target: str) -> tuple[str, str | None, str | None]:
    """A waiver target as (check id, slug or None, engine or None): ``engine.loads/narrowed[vllm]`` (or
    ``engine.loads[vllm]/narrowed``) -> ("engine.loads", "narrowed", "vllm"). Raises ValueError."""
    engine = None
    if "[" in target or "]" in target:
        head, _, rest = target.partition("[")
        engine, close, tail = rest.partition("]")
        if not close or not engine or "[" in tail or "]" in tail or "[" in engine:
            raise ValueError(head.split("/")[0])
        target = head + tail
    base, slash, slug = target.partition("/")
    return base, (slug if slash else None), engine


def _waiver_id(target: str, item: str) -> str:
    """A --waive target: a check id, or a finding code (``vocab.d2t/absolute-ids``), either for one engine
    (``engine.loads[vllm]``) or one release (``engine.loads/narrowed[vllm@0.33.0]``) of a per-engine check. Returns
    it normalized: ``CHECK_ID[/SLUG][[ENGINE]]``. Raises UsageError."""
    try:
        base, slug, engine = split_target(target)
    except ValueError as exc:
        raise UsageError(f"--waive {item!r}: write {exc}[ENGINE] or {exc}[ENGINE@VERSION]") from None
    by_id = {c.id: c for c in all_checks()}
    if base not in by_id:
        raise UsageError(f"--waive {item!r}: {unknown_check(base, f'{base}/{slug}' if slug else None)}")
    if slug is not None:
        why = unknown_code(by_id[base], slug)
        if why:
            raise UsageError(f"--waive {item!r}: {why}")
        base = by_id[base].code(slug)
    if engine is None:
        return base
    if not by_id[base.split("/")[0]].per_engine:
        raise UsageError(f"--waive {item!r}: {base.split('/')[0]} is not a per-engine check; waive it as {base}")
    if "@" in engine:
        try:
            resolve_engines(engine)
        except UsageError as exc:
            raise UsageError(f"--waive {item!r}: {exc}") from None
    elif engine not in ENGINE_NAMES:
        raise UsageError(f"--waive {item!r}: no engine named {engine!r}; choose {', '.join(ENGINE_NAMES)}")
    return f"{base}[{engine}]"


def waivers_of(f: Finding, c: Check, engine: str | None, waived: dict[str, str]) -> list[str]:
    """The waiver targets that match finding ``f`` of check ``c`` (judging ``engine``), the most specific first:
    its code for the release, for the engine, for any engine; then the check's id likewise."""
    engines = [engine, engine.split("@")[0]] if engine else []
    names = [f.code] if f.code else []
    ordered = [k for n in (*names, c.id) for k in ([f"{n}[{e}]" for e in engines] + [n])]
    return [k for k in dict.fromkeys(ordered) if k in waived]


PASSED, FAILED, WARNED, SKIPPED, WAIVED = "passed", "failed", "warned", "skipped", "waived"


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

    def failed(self, options: GateOptions) -> bool:
        """An error, or a warning the options fail (--strict, --fail-on)."""
        return self.status == FAILED or (self.status == WARNED and any(
            options.fails(f.code or self.check.id) for f in self.findings
            if f.severity is Severity.WARNING and f.waived is None))


@dataclass
class GateResult:
    ckpt: Checkpoint
    options: GateOptions
    results: list[CheckResult]
    reference_name: str | None
    reference_note: str

    @property
    def exit_code(self) -> int:
        return 1 if any(r.failed(self.options) for r in self.results) else 0

    def result(self, check_id: str, engine: str | None = None) -> CheckResult:
        """The result of one check; ``engine`` is a release (``sglang@0.5.23``) or an engine name (its first result)."""
        return next(r for r in self.results if r.check.id == check_id and (
            engine is None or r.engine == engine or (r.engine or "").split("@")[0] == engine))

    identity: Any = None  # who trained it (engines.trainers.Identity), from the evidence this run had
    trained: Any = None  # what it was trained to compute (engines.trainers.Trained), where the run's checks read it

    @property
    def trainer(self) -> dict[str, str | None]:
        """Who trained the drafter as far as the evidence goes, how that was known and on what basis, and the trainer
        reading it is judged against (every report states them)."""
        if self.trained is not None and self.identity is not None:  # the readings the checks judged against
            found, reading = self.identity, self.trained.label
        else:
            found, reading = trainer_said(self.ckpt, self.identity)
        return {"name": found.name, "version": found.version, "how": found.how, "basis": found.basis,
                "reading": reading}

    def by_label(self, label: str) -> CheckResult:
        return next(r for r in self.results if r.label == label)

    def findings(self) -> list[Finding]:
        return [f for r in self.results for f in r.findings]

    def counts(self) -> dict[str, int]:
        """Findings per severity, waived ones apart (``waived``: they do not fail the gate)."""
        out = {s.value: 0 for s in Severity}
        waived = 0
        for f in self.findings():
            if f.waived is not None:
                waived += 1
            else:
                out[f.severity.value] += 1
        return {**out, "waived": waived} if waived else out


def finding_code(c: Check, slug: str | None) -> str:
    """The stable code of a finding of ``c`` made with ``code=slug``: ``vocab.d2t/absolute-ids`` (the check id alone
    when a check, a plugin's, gave none; the built-in checks' tests require one)."""
    return c.code(slug) if slug else c.id


def why_skipped(c: Check, ctx: Context) -> str | None:
    """Why ``c`` does not run on ``ctx`` (omitted, not modelled, a missing reference or target, no weight bytes here,
    no torch), or None when it runs."""
    omitted = dict(ctx.options.omit if ctx.options else ()).get(c.id)
    if omitted is not None:
        return omitted
    if c.modelled_only:
        if "not_modelled" not in ctx.cache:
            ctx.cache["not_modelled"] = ctx.ckpt.not_modelled
        if ctx.cache["not_modelled"]:
            return f"not modelled: {ctx.cache['not_modelled'][0]}, this check skipped (see config.architectures)"
    if "reference" in c.needs and ctx.reference is None:
        return ctx.reference_note or "no reference given"
    if "target" in c.needs and ctx.target is None:
        return "needs --target-config (the verifier's config.json)"
    if c.level != "header" and ctx.ckpt is not None and (
            not ctx.ckpt.complete or any(p.kind != "truncated" for p in ctx.ckpt.problems)):
        # the header level failed on the files (a header no reader takes, a file missing): nothing past it runs, nor
        # imports torch to read what cannot be read (a truncated file is scanned for what it holds: scan.values)
        return f"the checkpoint's files cannot be read (see files): the {c.level} level needs their tensors"
    if c.level != "header":  # a Hub checkpoint opened from its headers: no weight bytes here (nor torch needed)
        elsewhere = [getattr(x, "weights_elsewhere", None)  # the source counts where it is run: the forward level
                     for x in (ctx.ckpt, ctx.source if c.level == "forward" else None)]
        if any(elsewhere):
            return next(w for w in elsewhere if w)
    return c.requires() if c.requires else None


def default_basis(c: Check, ctx: Context) -> str:
    """What a finding that states no basis rests on: the acceptance level's, the user's data (measured); a per-engine
    check's, the judged release's own code (recorded, when a recording covers the release or it is judged live; else
    its released source, read); every other check's, the checkpoint's files (read)."""
    if c.level == "acceptance":
        return MEASURED
    if ctx.engine is not None:
        live = ctx.options is not None and ctx.engine in dict(ctx.options.live)
        return RECORDED if live else known_by(ctx.engine)
    return READ


def based(f: Finding, c: Check, ctx: Context) -> Finding:
    """The finding with its basis (the check's default when it states none). An error needs a read, recorded or
    measured basis: one whose premise is inferred or assumed is reported as a warning (the checks say so
    themselves; this keeps the rule whatever a check, a plugin's included, reports)."""
    basis = f.basis or default_basis(c, ctx)
    if basis not in BASES:
        basis = ASSUMED
    severity = Severity.WARNING if f.severity is Severity.ERROR and basis not in KNOWN else f.severity
    return dataclasses.replace(f, basis=basis, severity=severity)


def status_of(found: list[Finding]) -> str:
    """A check's status from its findings: failed on a failing error, warned on a failing warning, waived when all
    it found that fails is waived, else passed."""
    if any(f.failing and f.severity is Severity.ERROR for f in found):
        return FAILED
    if any(f.failing for f in found):
        return WARNED
    if any(f.waived is not None for f in found):
        return WAIVED
    return PASSED


def run_check(c: Check, ctx: Context, waived: dict[str, str], used: set[str] | None = None) -> CheckResult:
    """Run one check (for ``ctx.engine``): its findings stamped with the result label and their code, those a
    waiver in ``waived`` matches marked waived (the targets that matched are added to ``used``)."""
    def result(status: str, findings: list[Finding] | None = None, reason: str | None = None) -> CheckResult:
        return CheckResult(c, status, findings or [], reason, ctx.engine)

    why = why_skipped(c, ctx)
    if why is not None:
        return result(SKIPPED, reason=why)
    label = f"{c.id}[{ctx.engine}]" if ctx.engine else c.id
    data: dict = {}
    try:
        found = []
        for item in c.func(ctx):
            if isinstance(item, Data):
                data.update(item)
            else:
                found.append(dataclasses.replace(item, check=label, code=finding_code(c, item.code)))
    except NotApplicable as exc:
        return result(SKIPPED, reason=str(exc))
    except Exception as exc:  # a bug in a check must not hide the others, nor pass silently
        found = [Finding(Severity.ERROR, f"check crashed ({type(exc).__name__}: {exc}); the checkpoint is "
                         "unverified for this check. Please report this.", check=label, code=c.code(CRASHED))]
    found = [based(f, c, ctx) for f in found]
    for i, f in enumerate(found):
        targets = waivers_of(f, c, ctx.engine, waived) if f.severity is not Severity.INFO else []
        if targets:  # the check ran and found it; the waiver says it is known and accepted
            found[i] = dataclasses.replace(f, waived=waived[targets[0]])
            if used is not None:
                used.update(targets)
    out = result(status_of(found), found)
    out.data = data
    return out


def run_gate(ckpt: Checkpoint, options: GateOptions | None = None, *, reference: Spec | None = None,
             reference_note: str = "", target: TargetConfig | None = None, source: Checkpoint | None = None,
             target_embedding: TargetEmbedding | None = None, chosen: Callable[[Check], bool] | None = None,
             measured: dict[str, Any] | None = None) -> GateResult:
    """Run every registered check of the selected levels on an opened checkpoint (per-engine checks once per
    engine). ``reference``, ``target`` and ``source`` are already resolved (see :mod:`eagle3_checks.gate`).
    ``chosen``: the checks to run instead of the levels' (``accept``'s); ``measured``: the acceptance level's figures,
    already measured (``checks.acceptance.evaluation``), which its checks then judge instead of measuring."""
    options = options or GateOptions()
    ctx = Context(ckpt, reference, reference_note, target, options, source, target_embedding=target_embedding)
    if measured is not None:
        seed_measured(ctx, measured)
    identity = identify(ckpt, source, options.trainer)
    ctx.cache["identity"] = identity
    levels = options.levels()
    waived = options.waivers
    used: set[str] = set()
    results = []
    for c in all_checks():
        if not (chosen(c) if chosen is not None else c.level in levels):
            continue
        for engine in c.engines(options):
            results.append(run_check(c, dataclasses.replace(ctx, engine=engine), waived, used))
    if options.waive:
        results.append(_waivers_result(options, results, used))
    ref_name = reference.name if reference is not None else None
    return GateResult(ckpt, options, results, ref_name, reference_note, identity, ctx.cache.get("trained"))


# What `accept` runs beside the acceptance level: the vocabulary checks, which say why a reading cannot serve the
# drafter's d2t (absolute ids) where the acceptance level only says that it cannot
ACCEPT_ALSO = ("vocab.d2t", "vocab.t2d")


def judge_measured(ckpt: Checkpoint, options: GateOptions, measured: dict[str, Any],
                   target_embedding: TargetEmbedding | None = None) -> GateResult:
    """``accept``'s findings: the acceptance level's checks (and :data:`ACCEPT_ALSO`) run by :func:`run_check` on
    figures already measured (``checks.acceptance.evaluation``), so that `accept` and `check` state one finding
    alike, with its code, basis and cause, rendered by the same reports and exiting by the same rule."""
    return run_gate(ckpt, options, target_embedding=target_embedding, measured=measured,
                    chosen=lambda c: c.level == "acceptance" or c.id in ACCEPT_ALSO)


def _judge_waivers(ctx: Context) -> Iterable[Finding]:  # pragma: no cover  (the gate builds this result itself)
    return ()


# Not a check of the checkpoint: the gate's own result about the --waive waivers, added after the checks whenever a
# waiver was given (every report shows it; the pytest plugin collects it as an item). As scikit-learn's expected
# failed checks: a waiver that matches nothing is stale, a warning (an error under --strict), so that a waiver no
# longer needed is noticed and removed before it hides the next failure of its kind.
WAIVERS = Check(
    "gate.waivers", "Every --waive waiver matches a finding", "header", (), _judge_waivers,
    guards="A waiver left in place after the finding it waived was fixed: it would hide the next finding of its kind.",
    fix="remove the stale --waive waiver (or the eagle3_waive line of the ini file)",
    codes=(("stale", "a waiver matched no finding of a check that ran (an error under --strict)"),
           ("not-exercised", "a waiver's check did not run here (level, engine, or the check skipped): not judged")),
)


def _waivers_result(options: GateOptions, results: list[CheckResult], used: set[str]) -> CheckResult:
    """The gate's result about its waivers: a stale one (it matched nothing in a check that ran) is a warning, an
    error under --strict; one whose check did not run here is a note."""
    stale = error if options.strict else warning
    findings = []
    for target, reason in options.waive:
        if target in used:
            continue
        base, slug, engine = split_target(target)
        judged = [r for r in results if r.check.id == base and r.status != SKIPPED
                  and (engine is None or r.engine == engine or (r.engine or "").split("@")[0] == engine)]
        what = f"--waive {target}={reason}"
        if judged:
            labels = ", ".join(r.label for r in judged)
            findings.append(stale(
                f"stale waiver: {what} matched no finding ({labels} ran"
                + (f" and reported no {base}/{slug}" if slug else " and found nothing to waive") + ")",
                key=target, expected="a finding for the waiver to waive", found="none",
                why="the waived problem is gone (fixed, or the check changed): a waiver left in place would hide the "
                "next finding of its kind",
                fix=f"remove the waiver --waive {target}", code="stale"))
        else:
            findings.append(info(f"waiver not exercised: {what}: {base}"
                                 + (f"[{engine}]" if engine else "") + " did not run here (its level, engine or "
                                 "inputs were not selected, or it skipped)", key=target, code="not-exercised"))
    findings = [dataclasses.replace(f, check=WAIVERS.id, code=finding_code(WAIVERS, f.code)) for f in findings]
    return CheckResult(WAIVERS, status_of(findings), findings)
