"""Rendering gate results: text for people, JSON for machines, markdown for CI summaries."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from . import __version__
from .registry import FAILED, PASSED, SKIPPED, WARNED, CheckResult, Finding, GateResult, Severity, describe_op

SCHEMA_VERSION = 1
_LABEL = {PASSED: "PASS", FAILED: "FAIL", WARNED: "WARN", SKIPPED: "SKIP", "n/a": "N/A"}


def summary_line(result: GateResult) -> str:
    c = result.counts()
    verdict = "FAILED" if result.exit_code else "PASSED"
    strict = " (--strict: warnings fail)" if result.options.strict and c["warning"] and result.exit_code else ""
    return f"{verdict}: {c['error']} error(s), {c['warning']} warning(s), {c['info']} note(s){strict}"


def finding_lines(f: Finding, indent: str = "", previous: Finding | None = None) -> list[str]:
    """A finding as indented lines: the message, then expected / found / why / fix. A why or fix equal to the
    ``previous`` finding's is not repeated."""
    out = [f"{indent}{f.severity.value.upper()}: {f.message}"]
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


def check_text(r: CheckResult) -> str:
    """One check's outcome and findings, as the pytest plugin prints a failure."""
    lines = [f"{r.label}: {r.check.title}"]
    if r.reason:
        lines.append(f"  skipped: {r.reason}")
    for prev, f in zip([None, *r.findings], r.findings):
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
    lines += [f"  engine {note}" for note in result.options.engine_notes]
    return lines


def render_text(results: list[GateResult]) -> str:
    out: list[str] = []
    for result in results:
        out.extend(_header(result))
        width = max(len(r.label) for r in result.results) if result.results else 10
        for r in result.results:
            tail = f"  ({r.reason})" if r.reason else ""
            out.append(f"  {_LABEL[r.status]}  {r.label:<{width}}  {r.check.title}{tail}")
            for prev, f in zip([None, *r.findings], r.findings):
                if f.severity is Severity.INFO and r.status == PASSED:
                    out.append(f"        note: {f.message}")
                    continue
                out.extend(finding_lines(f, "        ", prev))
            out.extend(stats_lines(r.data.get("tensors", {})))
        out.extend(matrix_lines(result))
        out.append(f"  {summary_line(result)}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def stats_lines(tensors: dict) -> list[str]:
    """Per-tensor statistics of a scan, as a compact table."""
    if not tensors:
        return []
    width = max(len(n) for n in tensors)
    out = [f"        {'tensor':<{width}}  dtype  {'mean':>10}  {'std':>10}  {'max |x|':>10}  nan/inf"]
    for name, st in tensors.items():
        def num(key: str) -> str:
            v = st.get(key, 0)
            return f"{v:>10.3g}" if isinstance(v, (int, float)) else f"{v!s:>10}"
        out.append(f"        {name:<{width}}  {st.get('dtype', '?'):<5}  {num('mean')}  {num('std')}  {num('max_abs')}  "
                   f"{st.get('nan', 0)}/{st.get('inf', 0)}")
    return out


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


def to_json(results: list[GateResult]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "eagle3-checks", "version": __version__},
        "exit_code": max((r.exit_code for r in results), default=0),
        "checkpoints": [
            {
                "path": r.ckpt.display,
                "layout": r.ckpt.layout,
                "layout_source": r.ckpt.layout_source,
                "reference": r.reference_name,
                "reference_note": r.reference_note,
                "target_config": r.options.target_config,
                "strict": r.options.strict,
                "engines": [{"engine": spec.split("@")[0], "version": spec.split("@")[1], "why": note.split(": ", 1)[1]}
                            for spec, note in zip(r.options.engines(), r.options.engine_notes)],
                "exit_code": r.exit_code,
                "counts": r.counts(),
                **({"compatibility": compatibility(r)} if compatibility(r) else {}),
                "checks": [
                    {"id": c.check.id, **({"engine": c.engine} if c.engine else {}), "title": c.check.title,
                     "level": c.check.level, "status": c.status, **({"reason": c.reason} if c.reason else {}),
                     **({"data": c.data} if c.data else {}),
                     "findings": [f.to_dict() for f in c.findings]}
                    for c in r.results
                ],
            }
            for r in results
        ],
    }


def render_json(results: list[GateResult]) -> str:
    return json.dumps(to_json(results), indent=2) + "\n"


def render_json_error(message: str, exit_code: int = 2) -> str:
    """The JSON report of a run that gated nothing (a usage error), so that ``> report.json`` stays valid JSON."""
    return json.dumps({**to_json([]), "exit_code": exit_code, "error": message}, indent=2) + "\n"


def _md(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def render_markdown(results: list[GateResult]) -> str:
    out: list[str] = []
    for result in results:
        ck = result.ckpt
        out += [f"### eagle3-checks: `{ck.display}`", "",
                f"Layout **{ck.layout}** · reference **{result.reference_name or '-'}** ({_md(result.reference_note)}) · "
                f"**{summary_line(result)}**", ""]
        out += [f"Engine {_md(note)}  " for note in result.options.engine_notes]
        out += ["", "| status | check | title | findings |", "|---|---|---|---|"]
        for r in result.results:
            n = len(r.findings)
            note = _md(r.reason) if r.reason else (f"{n} finding(s)" if n else "")
            out.append(f"| {_LABEL[r.status]} | `{r.label}` | {_md(r.check.title)} | {note} |")
        table = compatibility(result)
        if table:
            ids = list(next(iter(table.values())))
            out += ["", "Compatibility (engine x check):", "", "| engine | " + " | ".join(f"`{i}`" for i in ids) + " |",
                    "|---|" + "---|" * len(ids)]
            out += [f"| {engine} | " + " | ".join(_LABEL[row.get(i, SKIPPED)] for i in ids) + " |"
                    for engine, row in table.items()]
        details = [(r, f) for r in result.results for f in r.findings]  # notes too: the table counts them
        if details:
            out += ["", "<details><summary>Findings</summary>", ""]
            for r, f in details:
                out.append(f"- **{f.severity.value}** `{r.label}`: {_md(f.message)}")
                patch = "; ".join(f"`{describe_op(op)}`" for op in f.patch) if f.patch else None
                for label, value in (("expected", f.expected), ("found", f.found), ("why", f.why), ("fix", f.fix),
                                     ("patch", patch)):
                    if value:
                        out.append(f"  - {label}: {_md(value)}")
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


RENDERERS = {"text": render_text, "json": render_json, "markdown": render_markdown}
