"""The markdown report, for CI job summaries and pull-request comments (``--format markdown``)."""

from __future__ import annotations

from ..gate import FAILED, SKIPPED, WAIVED, WARNED, GateResult
from ..registry import Finding, describe_op
from .causes import Causes, group
from .summary import LABEL, compatibility, skip_reason, summary_line, trainer_line


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
    for label, value in (("basis", f.basis), ("expected", f.expected), ("found", f.found),
                         ("rests on", f.rests_on), ("settle", f.settle), ("why", f.why), ("fix", f.fix),
                         ("patch", patch), ("repair", f.repair)):
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
        out.append(f"Trainer {_md(trainer_line(result))}  ")
        if causes.groups:
            out += ["", "#### Root causes", ""]
            for c in causes.groups:
                f = c.finding
                out.append(f"- **{f.severity.value}** `{_md(c.key)}` (`{f.code_label}`, {f.basis}): "
                           f"{_md(f.message)}")
                if f.fix:
                    out.append(f"  - fix: {_md(f.fix)}")
                out.append(f"  - also affects: {_md(c.also_affects())}")
        out += ["", "| status | check | title | findings |", "|---|---|---|---|"]
        for r in result.results:
            n = len(r.findings)
            note = _md(skip_reason(result, r)) if r.reason else (f"{n} finding(s)" if n else "")
            out.append(f"| {LABEL[r.status]} | `{r.label}` | {_md(r.check.title)} | {note} |")
        table = compatibility(result)
        if table:
            ids = list(next(iter(table.values())))
            out += ["", "Compatibility (engine x check):", "", "| engine | " + " | ".join(f"`{i}`" for i in ids) + " |",
                    "|---|" + "---|" * len(ids)]
            out += [f"| {engine} | " + " | ".join(LABEL[row.get(i, SKIPPED)] for i in ids) + " |"
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
