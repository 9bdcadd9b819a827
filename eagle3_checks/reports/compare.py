"""The ``diff`` command's report: a candidate against a reference, with the codes ``check`` gives the same findings
(``files/...`` for a side's file problems, ``reference.diff/...`` for the differences), grouped by root cause as
``check`` groups them (causes.py): one cause stated once with its why and fix, then what else it affects."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from .. import engines
from ..basis import ASSUMED, READ
from ..checks.files import problem_finding
from ..checks.reference import diff, engine_computation, with_aux_layers
from ..drafter.spec import Spec
from ..fast_dataclass import dataclass
from ..registry import Finding, Severity
from .causes import Causes, group_findings
from .json_report import causes_json
from .text import cause_lines, finding_lines

SIDES = ("A", "B")
SHOWN = 5  # the tensors with no drafter role a verdict names, per side (a whole model given by mistake has hundreds)


@dataclass
class DiffReport:
    findings: list[Finding]
    causes: Causes
    # why the two were not compared (a side whose config.json or tensor list cannot be read), None when they were
    not_compared: str | None
    failed: bool
    # what differs outside the spec and was not compared (a tensor no drafter role names, architectures): said beside
    # the verdict, for ``check`` judges it
    outside: tuple[str, ...] = ()

    @property
    def errors(self) -> int:
        return sum(f.severity is Severity.ERROR for f in self.findings)


def _unreadable(ck: Any) -> str | None:
    """Why a checkpoint cannot be compared whole (as ``check`` skips reference.diff for it), or None."""
    if ck is None:  # a spec file: read whole, or refused before
        return None
    if ck.config is None:
        return "its config.json is missing or unreadable"
    if not ck.complete:
        return "its tensor list is incomplete (a header or shard could not be read)"
    return None


def compare(candidate: Spec, candidate_ck: Any, reference: Spec, reference_ck: Any, strict: bool = False,
            releases: tuple[str, ...] = ()) -> DiffReport:
    """Diff ``candidate`` against ``reference`` (each a spec, with the checkpoint it was taken from or None). Aux ids
    are compared by the target layers each side's ids select under its own counting (a checkpoint's as its trainer
    wrote them, a spec's by the convention it states); a semantic value says what each of ``releases`` computes with
    either side's value, when the candidate is a checkpoint.

    A side that cannot be read whole is reported by its file problems only: against it every field and tensor
    would "differ" (each config field as unknown, a d2t of another length as an error for want of its
    draft_vocab_size), and those findings would bury the one that says what to fix. ``check`` skips its
    reference.diff for the same reason."""
    findings = [dataclasses.replace(f, message=f"{side}: {f.message}", code=f"files/{f.code}", check="files")
                for side, ck in zip(SIDES, (candidate_ck, reference_ck), strict=True) if ck is not None
                for f in map(problem_finding, ck.problems)]
    unread = [f"{side} ({why})" for side, ck in zip(SIDES, (candidate_ck, reference_ck), strict=True)
              if (why := _unreadable(ck))]
    not_compared = None
    if unread:
        not_compared = f"{' and '.join(unread)} cannot be read whole: fix the files findings, then diff again"
    else:  # the codes the gate gives them
        sides = [with_aux_layers(spec, ck, None, engines.target_of(ck) if ck is not None else None)
                 for spec, ck in ((candidate, candidate_ck), (reference, reference_ck))]
        computes = engine_computation(candidate_ck, releases) if candidate_ck is not None and releases else None
        findings += [_true_basis(dataclasses.replace(f, code=f"reference.diff/{f.code}", check="reference.diff"),
                                 candidate_ck) for f in diff(sides[0], sides[1], computes)]
    failed = any(f.severity is Severity.ERROR or (strict and f.severity is Severity.WARNING) for f in findings)
    return DiffReport(findings, group_findings(findings, candidate_ck), not_compared, failed,
                      _outside(candidate_ck, reference_ck))


def _outside(candidate_ck: Any, reference_ck: Any) -> tuple[str, ...]:
    """What a diff of the two as specs leaves out where they differ: each side's tensors that no drafter role names
    (a checkpoint side only), and architectures when both sides are checkpoints and state it differently."""
    out = []
    for side, ck in zip(SIDES, (candidate_ck, reference_ck), strict=True):
        roleless = [name for name, parsed in ck.names.items() if parsed.role is None] if ck is not None else []
        out += [f"{side}'s {name} (no drafter role)" for name in roleless[:SHOWN]]
        if len(roleless) > SHOWN:
            out.append(f"{len(roleless) - SHOWN} more of {side}'s tensors with no drafter role")
    if candidate_ck is not None and reference_ck is not None:
        archs = [(ck.config_raw or {}).get("architectures") for ck in (candidate_ck, reference_ck)]
        if archs[0] != archs[1]:
            out.append(f"architectures ({archs[0]!r} against {archs[1]!r})")
    return tuple(out)


def _true_basis(f: Finding, ck: Any) -> Finding:
    """A semantic value the candidate does not state is its default, not something read: said so (basis assumed).
    A head_dim it does not state whose default its own q_proj contradicts is the error check gives it
    (config.head-dim/missing): its config does not size its tensors, whatever the reference says."""
    cfg = ck.config if ck is not None else None
    entry = cfg.entry(f.key) if cfg is not None and f.key and f.code == "reference.diff/semantic" else None
    if cfg is None or entry is None or entry.explicit:
        return f
    q = ck.shape("layers.0.self_attn.q_proj.weight") if f.key == "head_dim" else None
    heads = cfg["num_attention_heads"]
    if q and isinstance(heads, int) and heads and q[0] % heads == 0 and q[0] // heads != entry.value:
        implied = q[0] // heads
        return dataclasses.replace(
            f, severity=Severity.ERROR, code="reference.diff/config-field", basis=READ, expected=str(implied),
            message=f"{f.message}; the candidate does not state head_dim ({entry.source}) and its own q_proj holds "
            f"{heads} heads of {implied}", rests_on=None, settle=None,
            why="engines build attention with the default and cut the q/k/v weights to fit without an error (check: "
            "config.head-dim/missing, engine.loads)", fix=f'add "head_dim": {implied} to the candidate\'s config')
    return dataclasses.replace(f, basis=ASSUMED, message=f"{f.message} (not stated: {entry.source})",
                               rests_on=f"{f.key} is not stated in the candidate's config ({entry.source})")


# what a diff compares: the two sides as specs (drafter/spec.py). A tensor no drafter role names, and config fields
# outside the spec (architectures, by which SGLang 0.5.23 picks the drafter's class: engines/sglang_0_5_23.py
# _no_class, configs/model_config.py:1032-1036, model_loader/utils.py:224-231), are not compared: ``check`` judges
# them (keys/unknown-tensor, config.architectures).
COMPARED = "compared: tensors by drafter role, shapes, dtypes and the config's semantic fields"


def _verdict(report: DiffReport) -> str:
    """DIFFERENT when a finding fails the diff; SAME only with no finding and nothing differing outside the spec;
    NO ERROR in between (the sides differ, in nothing that fails). Each says what was compared, so that SAME never
    reads as "the same files"."""
    n = report.causes.count(Severity.ERROR)
    errors = f"{report.errors} error(s)" + (f" from {n} root cause{'s' if n != 1 else ''}" if report.errors else "")
    word = ("NOT COMPARED" if report.not_compared else "DIFFERENT" if report.failed else
            "NO ERROR" if report.findings or report.outside else "SAME")
    scope = "" if report.not_compared else f" ({COMPARED}" + (
        f"; not compared, and differing: {', '.join(report.outside)}" if report.outside else "") + ")"
    return f"{word}: {errors}, {len(report.findings) - report.errors} other{scope}"


def render_diff_text(report: DiffReport, candidate: str, reference: str) -> str:
    """Root causes first (each once, with its why and fix), then every finding: one that follows from a cause points
    at it, one whose why or fix is the previous one's says so instead of repeating it."""
    lines = [f"diff {candidate} against {reference}", *cause_lines(report.causes, "  ")]
    previous = report.causes.groups[-1].finding if report.causes.groups else None
    for f in report.findings:
        cause = report.causes.cause_of(f)
        if cause is not None:
            lines += finding_lines(f, "  ", brief=True)
            where = "the root cause, above" if cause.finding is f else f"follows from {cause.key}, above"
            lines.append(f"    {'cause:':<10}{where}")
            continue
        lines += finding_lines(f, "  ", previous)
        previous = f if f.why or f.fix else previous  # a note without either leaves "(as above)" meaning the same
    if report.not_compared:
        lines.append(f"  not compared: {report.not_compared}")
    lines.append(f"  {_verdict(report)}")
    return "\n".join(lines) + "\n"


def render_diff_json(report: DiffReport, candidate: str, reference: str) -> str:
    """Schema version 1 (candidate, reference, exit_code, findings); causes, a finding's cause, compared,
    not_compared and outside (what differs outside the spec, not compared) only add fields."""
    def finding(f: Finding) -> dict[str, Any]:
        cause = report.causes.cause_of(f)
        return {**f.to_dict(), **({"cause": cause.key} if cause is not None else {})}

    return json.dumps({"schema_version": 1, "candidate": candidate, "reference": reference,
                       "exit_code": int(report.failed), "compared": report.not_compared is None,
                       "outside": list(report.outside),
                       **({"not_compared": report.not_compared} if report.not_compared else {}),
                       "summary": _verdict(report), "causes": causes_json(report.causes),
                       "findings": [finding(f) for f in report.findings]}, indent=2) + "\n"
