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
                + (f"({_md(result.reference_note)}) · " if result.reference_note else "· ") +
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
            out += _acceptance(r.data.get("acceptance"))
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


def _acceptance(data: dict | None) -> list[str]:
    """The acceptance level's readings: each one's acceptance length as a server counts it, its per-position rates,
    the trainers' per-start figure, and the per-position profiles as a chart (acceptance.served.profile_chart)."""
    if not data:
        return []
    shown = [r for r in data.get("readings", []) if not r.get("unservable")]
    rows = ["", "#### Acceptance, as a server counts it", "",
            "| reading | acceptance length | per position | per start (the trainers' metric) |", "|---|---|---|---|"]
    for r in data.get("readings", []):
        if r.get("unservable"):
            rows.append(f"| `{_md(r['reading'])}` | unservable: {_md(r.get('why'))} | | |")
            continue
        iv = (r.get("intervals") or {}).get("acceptance_length")
        rows.append(f"| `{_md(r['reading'])}` | {r['acceptance_length']:.3f}"
                    + (f" [{iv[0]:.3f}, {iv[1]:.3f}]" if iv else "") + " | "
                    + " ".join(f"{x:.3f}" for x in r.get("per_position") or []) + f" | "
                    f"{r.get('per_start_acceptance_length', 0):.3f} |")
    if shown:
        rows += ["", "Each reading's per-position profile, in the table's order:", "",
                 profile_chart([r.get("per_position") or [] for r in shown])]
    return rows


def _num(v) -> str:
    return f"{v:.3g}" if isinstance(v, (int, float)) else str(v)


def profile_chart(lines: list[list[float]], bars: list[float] | None = None) -> str:
    """Per-position acceptance profiles as a chart GitHub renders (a mermaid xychart-beta): ``bars`` (a server's
    rates) first, then one line per profile in the order given; the table beside it names them (the chart has no
    legend)."""
    k = max([len(x) for x in lines] + [len(bars or [])] + [1])
    out = ["```mermaid", "xychart-beta", '    title "Accepted at draft position i / verify steps"',
           f"    x-axis [{', '.join(f'pos {i}' for i in range(k))}]", '    y-axis "rate" 0 --> 1']
    if bars is not None:
        out.append(f"    bar [{', '.join(f'{r:.3f}' for r in bars)}]")
    out += [f"    line [{', '.join(f'{r:.3f}' for r in x)}]" for x in lines]
    out.append("```")
    return "\n".join(out)
