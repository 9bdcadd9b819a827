"""Rendering gate results: text for people, JSON for machines, markdown for CI summaries."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from .. import __version__
from ..gate import FAILED, PASSED, SKIPPED, WAIVED, WARNED, CheckResult, GateResult
from ..registry import Finding, Severity, describe_op
from .causes import Causes, group

SCHEMA_VERSION = 1
_LABEL = {PASSED: "PASS", FAILED: "FAIL", WARNED: "WARN", SKIPPED: "SKIP", WAIVED: "WAIV", "n/a": "N/A"}


def summary_line(result: GateResult, causes: Causes | None = None) -> str:
    """``FAILED: 7 error(s) from 1 root cause, 0 warning(s), 2 note(s)``: findings, and the causes they follow from."""
    c = result.counts()
    causes = causes or group(result)
    verdict = "FAILED" if result.exit_code else "PASSED"
    strict = " (--strict: warnings fail)" if result.options.strict and c["warning"] and result.exit_code else ""
    n = causes.count(Severity.ERROR)
    errors = f"{c['error']} error(s)" + (f" from {n} root cause{'s' if n != 1 else ''}" if c["error"] else "")
    waived = f", {c['waived']} waived" if c.get("waived") else ""
    return f"{verdict}: {errors}, {c['warning']} warning(s), {c['info']} note(s){waived}{strict}"


class Style:
    """ANSI colour for a terminal; a no-op when off (pipes, files, CI logs, NO_COLOR)."""

    CODES = {"red": "31", "green": "32", "yellow": "33", "dim": "2", "bold": "1", "cyan": "36"}

    def __init__(self, on: bool = False) -> None:
        self.on = on

    def __call__(self, text: str, *names: str) -> str:
        if not self.on or not names:
            return text
        return f"\x1b[{';'.join(self.CODES[n] for n in names)}m{text}\x1b[0m"


PLAIN = Style(False)
_SEVERITY_STYLE = {Severity.ERROR: ("red", "bold"), Severity.WARNING: ("yellow",), Severity.INFO: ("cyan",)}
_STATUS_STYLE = {FAILED: ("red", "bold"), WARNED: ("yellow",), PASSED: ("green",), SKIPPED: ("dim",),
                 WAIVED: ("cyan",)}


def finding_lines(f: Finding, indent: str = "", previous: Finding | None = None, style: Style = PLAIN,
                  brief: bool = False) -> list[str]:
    """A finding as indented lines: the message, its code (and the waiver's reason), then expected / found / why /
    fix. A why or fix equal to the ``previous`` finding's is not repeated; ``brief``: the message and code only (its
    cause, stated elsewhere, has the rest)."""
    marker = style(("WAIVED " if f.waived is not None else "") + f.severity.value.upper() + ":",
                   *(_SEVERITY_STYLE[f.severity] if f.waived is None else ("cyan",)))
    out = [f"{indent}{marker} {f.message}"]
    if f.code:
        out.append(f"{indent}  {'code:':<10}{f.code}")
    if f.waived is not None:
        out.append(f"{indent}  {'waived:':<10}{f.waived} (--waive)")
    if brief:
        return out
    width = 100
    patch = "; ".join(describe_op(op) for op in f.patch) + " (eagle3-checks fix applies it)" if f.patch else None
    for label, value in (("file", f.file), ("key", f.key), ("expected", f.expected), ("found", f.found),
                         ("why", f.why), ("fix", f.fix), ("patch", patch)):
        if value is None or (label == "key" and value in f.message) or (label == "file" and value in f.message):
            continue
        if label in ("why", "fix") and previous is not None and getattr(previous, label) == value:
            out.append(f"{indent}  {label + ':':<10}(as above)")
            continue
        head = f"{indent}  {label + ':':<10}"
        wrapped = textwrap.wrap(value, width=max(40, width - len(head)), break_on_hyphens=False) or [""]
        out.append(head + wrapped[0])
        out.extend(" " * len(head) + w for w in wrapped[1:])
    return out


def cause_lines(causes: Causes, indent: str = "  ", style: Style = PLAIN) -> list[str]:
    """The root causes, each once with its fix, then the checks its dependent findings are in (a why or fix equal to
    the previous cause's is not repeated)."""
    out: list[str] = []
    previous = None
    for c in causes.groups:
        out.append(f"{indent}{style('ROOT CAUSE', 'bold')} {style(c.key, 'bold')} ({len(c.findings)} findings "
                   f"in {len({f.check for f in c.findings})} checks)")
        out.extend(finding_lines(c.finding, indent + "      ", previous, style=style))
        previous = c.finding
        wrapped = textwrap.wrap(f"also affects: {c.also_affects()}", width=100 - len(indent) - 8,
                                break_on_hyphens=False, break_long_words=False)
        out.extend(f"{indent}        {w}" if i else f"{indent}      {w}" for i, w in enumerate(wrapped))
    return out


def check_text(r: CheckResult) -> str:
    """One check's outcome and findings, as the pytest plugin prints a failure."""
    lines = [f"{r.label}: {r.check.title}"]
    if r.reason:
        lines.append(f"  skipped: {r.reason}")
    if r.status == WAIVED:
        lines.append("  waived: every error or warning it found is waived (--waive)")
    for prev, f in zip([None, *r.findings], r.findings, strict=False):
        lines.extend(finding_lines(f, "  ", prev))
    return "\n".join(lines)


def _header(result: GateResult) -> list[str]:
    ck = result.ckpt
    files = ", ".join(ck.weight_files) or "no readable weights"
    lines = [f"eagle3-checks {__version__} · {ck.display}",
             f"  layout: {ck.layout} ({ck.layout_source}) · {len(ck.tensors)} tensors in {files}",
             f"  reference: {result.reference_name or '-'} ({result.reference_note})"]
    if result.options.target_config:
        lines.append(f"  target config: {result.options.target_config}")
    lines += [f"  engine {spec}: {why}" for spec, why in zip(result.options.engines(), result.options.engine_notes,
                                                              strict=False)]
    return lines


def _reason(result: GateResult, r: CheckResult) -> str | None:
    """Why a check was skipped, unless that only repeats the header's reference line (said once, there)."""
    if r.reason and result.reference_name is None and r.reason == result.reference_note:
        return "no reference: see the reference line above"
    return r.reason


def render_text(results: list[GateResult], *, color: bool = False, quiet: bool = False) -> str:
    """The report for people. ``color``: ANSI colours (a terminal); ``quiet``: the failures and the verdict only."""
    style = Style(color)
    out: list[str] = []
    for result in results:
        causes = group(result)
        header = _header(result)
        out.extend(header[:1] if quiet else header)
        if causes.groups:
            out.extend(cause_lines(causes, "  ", style))
        shown = [r for r in result.results if not quiet or r.status in (FAILED, WARNED)]
        width = max(len(r.label) for r in shown) if shown else 10
        for r in shown:
            tail = f"  ({_reason(result, r)})" if r.reason else ""
            status = style(_LABEL[r.status], *_STATUS_STYLE[r.status])
            out.append(f"  {status}  {r.label:<{width}}  {r.check.title}{tail}")
            previous = None
            for f in r.findings:
                if f.severity is Severity.INFO and (r.status == PASSED or quiet):
                    if not quiet:
                        out.append(f"        note: {f.message} [{f.code}]" if f.code else f"        note: {f.message}")
                    continue
                cause = causes.cause_of(f)
                if cause is not None:
                    out.extend(finding_lines(f, "        ", style=style, brief=True))
                    where = "the root cause, above" if cause.finding is f else f"follows from {cause.key}, above"
                    out.append(f"          {'cause:':<10}{where}")
                    continue
                out.extend(finding_lines(f, "        ", previous, style))
                previous = f
            if not quiet:
                out.extend(stats_lines(r.data.get("tensors", {})))
        if not quiet:
            out.extend(matrix_lines(result))
        verdict = summary_line(result, causes)
        out.append("  " + style(verdict, *(("red", "bold") if result.exit_code else ("green", "bold"))))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def stats_lines(tensors: dict) -> list[str]:
    """Per-tensor statistics of a scan, as a compact table."""
    if not tensors:
        return []
    width = max(len(n) for n in tensors)
    out = [f"        {'tensor':<{width}}  dtype  {'mean':>10}  {'std':>10}  {'max |x|':>10}  nan/inf"]
    for name, st in tensors.items():
        out.append(f"        {name:<{width}}  {st.get('dtype', '?'):<5}  {_stat(st, 'mean')}  {_stat(st, 'std')}  "
                   f"{_stat(st, 'max_abs')}  {st.get('nan', 0)}/{st.get('inf', 0)}")
    return out


def _stat(st: dict, key: str) -> str:
    """One statistic of a tensor, right-aligned in 10 columns."""
    v = st.get(key, 0)
    return f"{v:>10.3g}" if isinstance(v, (int, float)) else f"{v!s:>10}"


NOT_APPLICABLE = "n/a"  # a release --engine all brought in that does not read the checkpoint's layout


def compatibility(result: GateResult) -> dict[str, dict[str, str]]:
    """engine -> per-engine check id -> status (or "n/a"), when the gate judged more than one engine."""
    table: dict[str, dict[str, str]] = {}
    for r in result.results:
        if r.engine:
            na = r.status == SKIPPED and (r.reason or "").startswith("not applicable")
            table.setdefault(r.engine, {})[r.check.id] = NOT_APPLICABLE if na else r.status
    return table if len(table) > 1 else {}


def matrix_lines(result: GateResult) -> list[str]:
    table = compatibility(result)
    if not table:
        return []
    ids = list(next(iter(table.values())))
    width = max(len(e) for e in table)
    out = ["", "  compatibility (engine x check):", "  " + " " * width + "  " + "  ".join(ids)]
    for engine, row in table.items():
        cells = "  ".join(f"{_LABEL[row.get(i, SKIPPED)]:<{len(i)}}" for i in ids)
        out.append(f"  {engine:<{width}}  {cells}".rstrip())
    out.append("")
    return out


def _finding_json(f: Finding, causes: Causes) -> dict[str, Any]:
    d = f.to_dict()
    cause = causes.cause_of(f)
    if cause is not None:
        d["cause"] = cause.key
    return d


def causes_json(causes: Causes) -> list[dict[str, Any]]:
    """Each root cause: its key, the finding that states it (with its fix), and the findings that follow from it."""
    return [{"key": c.key, "check": c.finding.check, "severity": c.finding.severity.value,
             "message": c.finding.message, **({"fix": c.finding.fix} if c.finding.fix else {}),
             "also_affects": [{"check": f.check, "severity": f.severity.value, "message": f.message}
                              for f in c.also]}
            for c in causes.groups]


def _checkpoint_json(r: GateResult) -> dict[str, Any]:
    causes = group(r)
    return {
        "path": r.ckpt.display,
        "layout": r.ckpt.layout,
        "layout_source": r.ckpt.layout_source,
        "reference": r.reference_name,
        "reference_note": r.reference_note,
        "target_config": r.options.target_config,
        "strict": r.options.strict,
        # GateOptions built without parse_options has no engine notes: then no engine is listed
        "engines": [{"engine": spec.split("@")[0], "version": spec.split("@")[1], "why": note}
                    for spec, note in zip(r.options.engines(), r.options.engine_notes, strict=False)],
        "exit_code": r.exit_code,
        "counts": {**r.counts(), "causes": causes.count(Severity.ERROR)},
        "summary": summary_line(r, causes),
        "causes": causes_json(causes),
        **({"compatibility": compatibility(r)} if compatibility(r) else {}),
        "checks": [
            {"id": c.check.id, **({"engine": c.engine} if c.engine else {}), "title": c.check.title,
             "level": c.check.level, "status": c.status, **({"reason": c.reason} if c.reason else {}),
             **({"data": c.data} if c.data else {}),
             "findings": [_finding_json(f, causes) for f in c.findings]}
            for c in r.results
        ],
    }


def to_json(results: list[GateResult]) -> dict[str, Any]:
    """Schema version 1; later additions (causes, counts.causes, summary, a finding's cause) only add fields."""
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "eagle3-checks", "version": __version__},
        "exit_code": max((r.exit_code for r in results), default=0),
        "checkpoints": [_checkpoint_json(r) for r in results],
    }


def render_json(results: list[GateResult]) -> str:
    return json.dumps(to_json(results), indent=2) + "\n"


def render_json_error(message: str, exit_code: int = 2) -> str:
    """The JSON report of a run that gated nothing (a usage error), so that ``> report.json`` stays valid JSON."""
    return json.dumps({**to_json([]), "exit_code": exit_code, "error": message}, indent=2) + "\n"


def _md(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def _md_finding(f: Finding, causes: Causes) -> list[str]:
    out = [f"- **{'waived ' if f.waived is not None else ''}{f.severity.value}** `{f.code_label}`: {_md(f.message)}"]
    if f.waived is not None:
        out.append(f"  - waived: {_md(f.waived)}")
    cause = causes.cause_of(f)
    if cause is not None and cause.finding is not f:
        return out + [f"  - follows from: `{_md(cause.key)}` (root cause, above)"]
    patch = "; ".join(f"`{describe_op(op)}`" for op in f.patch) if f.patch else None
    for label, value in (("expected", f.expected), ("found", f.found), ("why", f.why), ("fix", f.fix),
                         ("patch", patch)):
        if value:
            out.append(f"  - {label}: {_md(value)}")
    return out


def render_markdown(results: list[GateResult]) -> str:
    """For CI summaries and PR comments: root causes and failing checks' findings in view, the rest collapsed."""
    out: list[str] = []
    for result in results:
        ck = result.ckpt
        causes = group(result)
        out += [f"### eagle3-checks: `{ck.display}`", "",
                f"Layout **{ck.layout}** · reference **{result.reference_name or '-'}** "
                f"({_md(result.reference_note)}) · "
                f"**{summary_line(result, causes)}**", ""]
        out += [f"Engine {_md(f'{spec}: {why}')}  " for spec, why in zip(result.options.engines(),
                                                                      result.options.engine_notes, strict=False)]
        if causes.groups:
            out += ["", "#### Root causes", ""]
            for c in causes.groups:
                f = c.finding
                out.append(f"- **{f.severity.value}** `{_md(c.key)}` (`{f.code_label}`): {_md(f.message)}")
                if f.fix:
                    out.append(f"  - fix: {_md(f.fix)}")
                out.append(f"  - also affects: {_md(c.also_affects())}")
        out += ["", "| status | check | title | findings |", "|---|---|---|---|"]
        for r in result.results:
            n = len(r.findings)
            note = _md(_reason(result, r)) if r.reason else (f"{n} finding(s)" if n else "")
            out.append(f"| {_LABEL[r.status]} | `{r.label}` | {_md(r.check.title)} | {note} |")
        table = compatibility(result)
        if table:
            ids = list(next(iter(table.values())))
            out += ["", "Compatibility (engine x check):", "", "| engine | " + " | ".join(f"`{i}`" for i in ids) + " |",
                    "|---|" + "---|" * len(ids)]
            out += [f"| {engine} | " + " | ".join(_LABEL[row.get(i, SKIPPED)] for i in ids) + " |"
                    for engine, row in table.items()]
        failing = [f for r in result.results if r.status in (FAILED, WARNED) for f in r.findings
                   if f.waived is None]
        waived = [f for r in result.results for f in r.findings if f.waived is not None]
        passing = [f for r in result.results if r.status not in (FAILED, WARNED, WAIVED) for f in r.findings]
        if failing:  # in view: what a reviewer must act on
            out += ["", "#### Findings of failing checks", ""]
            for f in failing:
                out += _md_finding(f, causes)
        if waived:  # in view too: what was accepted, and why
            out += ["", "#### Waived findings (--waive)", ""]
            for f in waived:
                out += _md_finding(f, causes)
        if passing:  # notes of passing checks: collapsed (the table counts them)
            out += ["", "<details><summary>Notes from passing checks</summary>", ""]
            for f in passing:
                out += _md_finding(f, causes)
            out += ["", "</details>"]
        for r in result.results:
            tensors = r.data.get("tensors")
            if tensors:
                out += ["", "<details><summary>Weight statistics (scan)</summary>", "",
                        "| tensor | dtype | mean | std | max \\|x\\| | NaN | Inf |", "|---|---|---|---|---|---|---|"]
                out += [f"| {_md(name)} | {st.get('dtype')} | {_num(st.get('mean', 0))} | {_num(st.get('std', 0))} | "
                        f"{_num(st.get('max_abs', 0))} | {st.get('nan', 0)} | {st.get('inf', 0)} |"
                        for name, st in tensors.items()]
                out += ["", "</details>"]
        out.append("")
    return "\n".join(out)


def _num(v) -> str:
    return f"{v:.3g}" if isinstance(v, (int, float)) else str(v)
