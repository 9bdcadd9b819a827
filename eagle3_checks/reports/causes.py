"""Root causes: findings that follow from one cause, grouped under it.

One missing or wrong config field (a lost ``head_dim``), one missing tensor or one wrong layout makes several checks
fail: the config check that names the field, the shapes it no longer explains, the engine that cuts the tensors, the
diff against the reference. Every report format shows such a group once, led by the finding that states the cause
(with its fix), then "also affects: ..." with the findings that follow from it.

The grouping is data, decided here and nowhere else:

* a finding may name its cause (``Finding.cause``: ``config.json: head_dim``, ``tensor: d2t``), when its check knows
  it (shapes knows that a projection holds heads of another head_dim);
* otherwise a finding about a config field (in config.json, or keyed by a field the config has) has that field as
  its cause, and a finding keyed by a tensor has that tensor's role, unless another finding already tied that
  tensor to a cause (engine.loads' cut projections follow from head_dim because shapes said so);
* any other key is its own cause: findings that share it are about one thing (an engine's refusal of the layout,
  which its load and its forward pass both report).

Notes (info findings) and waived findings are never grouped: they are not failures.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING

from ..drafter.checkpoint import Checkpoint
from ..fast_dataclass import dataclass
from ..registry import CONFIG, Finding, Severity, config_cause, tensor_cause

if TYPE_CHECKING:  # the checks name causes (config_cause) and the gate imports the checks
    from ..gate import GateResult

_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
# which checks state a cause best, before those that see its consequences
_OWNER = ("files", "keys", "config.", "vocab.", "dtypes", "shapes", "target.", "engine.", "scan.", "reference.",
          "forward.", "acceptance.")


@dataclass
class Cause:
    """One root cause: the finding that states it, and the findings that follow from it."""

    key: str
    finding: Finding
    also: list[Finding] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return [self.finding, *self.also]

    def also_affects(self) -> str:
        """``shapes (4), engine.loads[vllm@0.33.0], reference.diff``: the checks of the dependent findings."""
        counts: dict[str, int] = {}
        for f in self.also:
            counts[f.check] = counts.get(f.check, 0) + 1
        return ", ".join(f"{c} ({n})" if n > 1 else c for c, n in counts.items())


@dataclass
class Causes:
    """The grouping of one gate result: ``of`` maps a grouped finding (by identity) to its cause."""

    groups: list[Cause]
    of: dict[int, Cause]

    def cause_of(self, f: Finding) -> Cause | None:
        return self.of.get(id(f))

    def is_dependent(self, f: Finding) -> bool:
        c = self.of.get(id(f))
        return c is not None and c.finding is not f

    def count(self, severity: Severity = Severity.ERROR) -> int:
        """Distinct causes among the findings of ``severity``: a group counts once, an ungrouped finding once."""
        keys = set()
        n = 0
        for f in self._all:
            if f.severity is not severity or f.waived is not None:
                continue
            c = self.of.get(id(f))
            if c is None:
                n += 1
            elif c.key not in keys:
                keys.add(c.key)
                n += 1
        return n

    _all: list[Finding] = field(default_factory=list)


def role_of(ckpt: Checkpoint, key: str) -> str | None:
    """The tensor role a finding's key names, or None when it names no tensor."""
    if key in ckpt.names:
        return ckpt.names[key].role or key
    if key in ckpt.roles:
        return key
    if key.startswith("midlayer."):
        return "layers.0." + key[len("midlayer."):]
    if key in ("d2t", "t2d") or key.endswith((".weight", ".bias")):
        return key
    return None


def _is_config_field(ckpt: Checkpoint, f: Finding) -> bool:
    if f.file == CONFIG:
        return True
    fields = ckpt.config.fields if ckpt.config is not None else {}
    return f.key in fields or config_cause(f.key or "")[len(CONFIG) + 2:] in fields


def cause_key(f: Finding, ckpt: Checkpoint, tensor_causes: dict[str, str] | None = None) -> str | None:
    """The root cause a finding follows from (see the module docstring), or None."""
    if f.cause:
        return f.cause
    if not f.key or f.severity is Severity.INFO:
        return None
    if f.file != CONFIG:
        role = role_of(ckpt, f.key)
        if role is not None:
            return (tensor_causes or {}).get(role) or tensor_cause(role)
    if _is_config_field(ckpt, f):
        return config_cause(f.key)
    # any other key names one thing (an engine's refusal of the layout, layers.*): findings that share it share a
    # cause (SGLang refuses a speculators config: it neither loads nor computes the drafter)
    return f.key


def _owner_rank(check: str) -> int:
    base = check.split("[")[0]
    for i, prefix in enumerate(_OWNER):
        if base == prefix or (prefix.endswith(".") and base.startswith(prefix)):
            return i
    return len(_OWNER)


def _states(f: Finding, key: str, ckpt: Checkpoint) -> bool:
    """Whether ``f`` is about the cause itself (the config field, the tensor) rather than a consequence of it."""
    if f.cause and f.cause != key:
        return False
    if key.startswith(f"{CONFIG}: "):
        return f.file == CONFIG and f.key is not None and f.key != "" and config_cause(f.key) == key
    if key.startswith("tensor: ") and f.key:
        return role_of(ckpt, f.key) == key[len("tensor: "):]
    return False


def group(result: GateResult) -> Causes:
    """Group the findings of one gate result by root cause (only causes with two findings or more form a group)."""
    return group_findings([f for r in result.results for f in r.findings], result.ckpt)


def group_findings(findings: list[Finding], ckpt: Checkpoint) -> Causes:
    """Group findings about checkpoint ``ckpt`` (None: a spec file, no tensor names to read) by root cause: the
    gate's, and the ``diff`` command's."""
    pairs = list(enumerate(findings))
    # tensors another finding already tied to a cause (shapes: q_proj holds heads of another head_dim)
    tensor_causes: dict[str, str] = {}
    for _, f in pairs:
        if f.cause and f.key:
            role = role_of(ckpt, f.key)
            if role is not None:
                tensor_causes.setdefault(role, f.cause)
    members: dict[str, list[tuple[int, Finding]]] = {}
    for order, f in pairs:
        if not f.failing:  # notes and waived findings are not failures: never grouped
            continue
        key = cause_key(f, ckpt, tensor_causes)
        if key:
            members.setdefault(key, []).append((order, f))
    groups: list[Cause] = []
    of: dict[int, Cause] = {}
    for key, items in members.items():
        if len(items) < 2:
            continue
        items.sort(key=lambda t: (_RANK[t[1].severity], not _states(t[1], key, ckpt), _owner_rank(t[1].check),
                                  t[0]))
        lead = items[0][1]
        also = [f for _, f in sorted(items[1:], key=lambda t: t[0])]
        cause = Cause(key, lead, also)
        groups.append(cause)
        for _, f in items:
            of[id(f)] = cause
    groups.sort(key=lambda c: (_RANK[c.finding.severity], -len(c.findings)))
    return Causes(groups, of, list(findings))
