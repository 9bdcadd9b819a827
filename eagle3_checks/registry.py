"""The one registry of checks: what a check is, what it reports, and what it sees.

A check is a small function ``fn(ctx) -> Iterable[Finding]`` registered with :func:`check`. It
has a stable id, a title, a level (``header`` reads headers and the small vocabulary tensors;
``scan`` streams every tensor's bytes once; ``forward`` runs the drafter, with torch), and what it needs
beyond the checkpoint (``reference``, ``target``). The CLI, the pytest plugin and the converter's self-verification
all run them through :func:`eagle3_checks.gate.run_gate`; none of them knows any check by name.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import field
from enum import Enum
from typing import TYPE_CHECKING, Any

from .drafter.checkpoint import Checkpoint
from .drafter.config_values import TargetConfig
from .drafter.spec import Spec
from .fast_dataclass import dataclass
from .options import LEVELS, GateOptions
from .storage.target_weights import TargetEmbedding

if TYPE_CHECKING:
    from .drafter.defect_kit import Defect  # an example declared with its check (numpy: not on the header path)

# a finding code's slug: kebab-case, as ``absolute-ids``; the whole code is ``CHECK_ID/SLUG``
SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
CRASHED = "crashed"  # the code slug of a finding that says its check raised (the gate makes it)


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


# What a finding rests on: eagle3_checks.basis (read, recorded, measured, inferred, assumed).


CONFIG = "config.json"
NESTED = ("transformer_layer_config.",)  # speculators nests the decoder fields here; engines read them as one


def config_cause(name: str) -> str:
    """The cause key of a config field (``transformer_layer_config.head_dim`` and ``head_dim`` are one field)."""
    for prefix in NESTED:
        if name.startswith(prefix):
            name = name[len(prefix):]
    return f"{CONFIG}: {name}"


def refusal_cause(refusal: str) -> str:
    """The cause key of an engine's refusal that names no config field or tensor (a layout the engine does not
    read): the findings it causes (the engine loads nothing, computes nothing) share it."""
    return f"refusal: {refusal}"


def tensor_cause(role: str) -> str:
    return f"tensor: {role}"


# the cause of every finding a `model.` prefix on the tensor names makes (keys names it; each engine then refuses
# or leaves unfilled the tensors it cannot find): one defect, one root cause
PREFIX_CAUSE = "tensor names: a `model.` prefix"


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
    # the kind of finding: a check passes its slug (``absolute-ids``), declared in its ``@check(codes=...)``; the
    # gate makes it the stable code ``vocab.d2t/absolute-ids`` (reports, SARIF rule ids, ``--waive``, ``explain``)
    code: str | None = None
    offset: int | None = None  # the byte offset in ``file`` the finding points at
    waived: str | None = None  # the reason of the --waive waiver that matched this finding: reported, not failing
    # what it rests on (one of BASES; the gate gives a finding that states none its check's basis) and, for an
    # inferred or assumed one, the evidence it was drawn from and what would settle it (``--source``, ``--data``)
    basis: str | None = None
    rests_on: str | None = None
    settle: str | None = None
    # a repair of a tensor the gate knows how to make from the tensor itself (fix applies it, verified by the gate on
    # what it wrote): "d2t-offsets" (absolute target ids in d2t, made offsets: d2t - arange(DV))
    repair: str | None = None

    @property
    def code_label(self) -> str:
        """The code with the engine its result judged, as reports show it: ``engine.loads/narrowed[vllm@0.33.0]``
        (the code itself has no engine: waive it for every engine as ``engine.loads/narrowed``)."""
        base, _, engine = self.check.partition("[")
        return (self.code or base) + (f"[{engine}" if engine else "")

    @property
    def failing(self) -> bool:
        """An error or warning no waiver matched (a warning fails the gate only under --strict)."""
        return self.severity is not Severity.INFO and self.waived is None

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
class Code:
    """A kind of finding a check declares: its meaning in one line, and whether it is a note (its findings are
    always :attr:`Severity.INFO`: reported, never failing). Declared as ``codes={"slug": "meaning"}`` or
    ``codes={"slug": note("meaning")}``."""

    meaning: str
    severity: Severity | None = None  # Severity.INFO for a note; None: an error or a warning, as the check reports

    @property
    def is_note(self) -> bool:
        return self.severity is Severity.INFO


def note(meaning: str) -> Code:
    """A code whose findings are notes (:attr:`Severity.INFO`)."""
    return Code(meaning, Severity.INFO)


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
    # the kinds of finding it reports: slug -> its meaning and severity (``explain``, ``list --format json``, SARIF)
    codes: tuple[tuple[str, Code | str], ...] = ()
    # the defect that fails it, its example for `eagle3-checks explain`: a defect of the catalogue by name
    # (eagle3_checks/defects.py), or one declared here (drafter.defect_kit.Defect), which the catalogue then holds
    example: str | Defect = ""
    # per engine, but only for the releases judged live (--engine NAME@installed): no result for the others
    live_only: bool = False

    def engines(self, options: GateOptions) -> tuple[str | None, ...]:
        """The releases this check judges under ``options`` (``(None,)``: an engine-independent check, run once)."""
        if not self.per_engine:
            return (None,)
        return tuple(spec for spec, _ in options.live) if self.live_only else options.engines()

    def __post_init__(self) -> None:  # codes given as plain meanings (a plugin's, the gate's own) are Codes too
        codes = tuple((slug, c if isinstance(c, Code) else Code(c)) for slug, c in self.codes)
        object.__setattr__(self, "codes", codes)

    def code(self, slug: str) -> str:
        """The stable code of one of its kinds of finding: ``vocab.d2t/absolute-ids``."""
        return f"{self.id}/{slug}"

    @property
    def meanings(self) -> dict[str, str]:
        """Each declared code (``vocab.d2t/absolute-ids``) and its meaning, and the code every check has when it
        raises (``vocab.d2t/crashed``)."""
        return {code: c.meaning for code, c in self.declared.items()}

    @property
    def declared(self) -> dict[str, Code]:
        """Each declared code (``vocab.d2t/absolute-ids``) as declared, and the code every check has when it raises."""
        return {**{self.code(slug): c if isinstance(c, Code) else Code(c) for slug, c in self.codes},
                self.code(CRASHED): Code("the check raised: the checkpoint is unverified for it (a bug, please report "
                                         "it)", Severity.ERROR)}


REGISTRY: dict[str, Check] = {}


def check(id: str, title: str, *, level: str = "header", needs: tuple[str, ...] = (), guards: str = "",
          evidence: tuple[str, ...] = (), per_engine: bool = False,
          requires: Callable[[], str | None] | None = None, fix: str = "", modelled_only: bool = False,
          codes: dict[str, str | Code] | None = None, example: str | Defect = "", live_only: bool = False) -> Callable:
    """Register ``fn`` as check ``id``. ``codes``: the slug of each kind of finding it reports (kebab-case, passed as
    ``code=`` where the finding is made) and its meaning in one line, or :func:`note` (meaning) for a code whose
    findings are notes. ``example``: the defect that fails it, by its name in :mod:`eagle3_checks.defects` or declared
    here (a :class:`~eagle3_checks.drafter.defect_kit.Defect`: adding a check is then this one registration)."""
    assert level in LEVELS, level
    for slug in codes or {}:
        if not SLUG.match(slug):
            raise ValueError(f"check {id!r}: finding code {slug!r} is not kebab-case (a-z, 0-9, single dashes)")

    def register(fn: Callable) -> Callable:
        if id in REGISTRY:
            raise ValueError(f"check {id!r} registered twice")
        REGISTRY[id] = Check(id, title, level, needs, fn, guards, evidence, per_engine, requires, fix, modelled_only,
                             tuple((codes or {}).items()), example, live_only)
        return fn

    return register


def modelled_only() -> list[str]:
    """The ids of the checks that skip a drafter of a family eagle3-checks does not model."""
    return [c.id for c in registered() if c.modelled_only]


def registered() -> list[Check]:
    """The checks registered so far, in registration order (the order reports use). The gate loads the built-in
    checks and the installed plugins' (:func:`eagle3_checks.gate.all_checks`); this module imports none of them."""
    return list(REGISTRY.values())


@dataclass
class Context:
    """What a check sees: the checkpoint, and the optional reference and target config."""

    ckpt: Checkpoint
    reference: Spec | None = None
    reference_note: str = ""
    target: TargetConfig | None = None
    options: GateOptions = field(default_factory=GateOptions)
    source: Checkpoint | None = None  # the checkpoint the candidate was converted from (--source)
    engine: str | None = None  # the engine a per-engine check judges
    cache: dict[Any, Any] = field(default_factory=dict)  # shared by every check of one gate run (mapped files)
    # the target's embed_tokens (--target), read lazily: later draft steps embed with it
    target_embedding: TargetEmbedding | None = None
