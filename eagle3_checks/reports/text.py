"""The text report, for people at a terminal (``--format text``, the default)."""

from __future__ import annotations

import textwrap

from .. import __version__
from ..basis import KNOWN
from ..gate import FAILED, PASSED, SKIPPED, WAIVED, WARNED, CheckResult, GateResult
from ..registry import Finding, Severity, describe_op
from .causes import Causes, group
from .summary import LABEL, compatibility, skip_reason, summary_line, trainer_line


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
    if f.basis:
        out.append(f"{indent}  {'basis:':<10}{f.basis}")
    if f.waived is not None:
        out.append(f"{indent}  {'waived:':<10}{f.waived} (--waive)")
    if brief:
        return out
    width = 100
    applies = "eagle3-checks fix applies it" if f.basis in KNOWN else "not applied by eagle3-checks fix until the " \
        "premise is stated"
    patch = "; ".join(describe_op(op) for op in f.patch) + f" ({applies})" if f.patch else None
    repair = f"{f.repair} ({applies})" if f.repair else None
    for label, value in (("file", f.file), ("key", f.key), ("expected", f.expected), ("found", f.found),
                         ("rests on", f.rests_on), ("settle", f.settle), ("why", f.why), ("fix", f.fix),
                         ("patch", patch), ("repair", repair)):
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
        n, checks = len(c.findings), len({f.check for f in c.findings})
        out.append(f"{indent}{style('ROOT CAUSE', 'bold')} {style(c.key, 'bold')} ({n} finding{'s' if n != 1 else ''} "
                   f"in {checks} check{'s' if checks != 1 else ''})")
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
             f"  reference: {result.reference_name or '-'}" + (f" ({result.reference_note})" if result.reference_note
                                                                else "")]
    if result.options.target_config:
        lines.append(f"  target config: {result.options.target_config}")
    lines += [f"  engine {spec}: {why}" for spec, why in zip(result.options.engines(), result.options.engine_notes,
                                                              strict=False)]
    lines.append(f"  trainer: {trainer_line(result)}")
    return lines



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
            tail = f"  ({skip_reason(result, r)})" if r.reason else ""
            status = style(LABEL[r.status], *_STATUS_STYLE[r.status])
            out.append(f"  {status}  {r.label:<{width}}  {r.check.title}{tail}")
            previous = None
            alike = _repeated(r.findings, causes) if quiet else {}
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
                same = alike.get((f.severity, f.code))
                if same is not None and same[0] is not f:
                    continue  # said once, with the count, at the first of them
                out.extend(finding_lines(f, "        ", previous, style))
                if same is not None:
                    out.extend(_more_like_it(same))
                previous = f
            if not quiet:
                out.extend(stats_lines(r.data.get("tensors", {})))
        if not quiet:
            out.extend(matrix_lines(result))
        verdict = summary_line(result, causes)
        out.append("  " + style(verdict, *(("red", "bold") if result.exit_code else ("green", "bold"))))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _repeated(findings: list[Finding], causes: Causes) -> dict[tuple, list[Finding]]:
    """--quiet: the findings of one check that repeat one kind (severity and code) for several tensors or keys, by
    kind, where there are two or more (findings grouped under a root cause are shown with it instead)."""
    kinds: dict[tuple, list[Finding]] = {}
    for f in findings:
        if f.severity is not Severity.INFO and f.code and causes.cause_of(f) is None:
            kinds.setdefault((f.severity, f.code), []).append(f)
    return {k: v for k, v in kinds.items() if len(v) > 1}


def _more_like_it(same: list[Finding]) -> list[str]:
    """The line that stands for the other findings of one kind under --quiet: how many, and where."""
    rest = same[1:]
    where = [f.key or f.file or f.message for f in rest]
    listing = ", ".join(where[:4]) + (f", ... ({len(where) - 4} more)" if len(where) > 4 else "")
    kind = f"{same[0].severity.value}{'s' if len(rest) > 1 else ''}"
    return [f"          {'and:':<10}{len(rest)} more {same[0].code} {kind} like it ({len(same)} in all): {listing}; "
            "without --quiet, each in full"]


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


def matrix_lines(result: GateResult) -> list[str]:
    table = compatibility(result)
    if not table:
        return []
    ids = list(next(iter(table.values())))
    width = max(len(e) for e in table)
    out = ["", "  compatibility (engine x check):", "  " + " " * width + "  " + "  ".join(ids)]
    for engine, row in table.items():
        cells = "  ".join(f"{LABEL[row.get(i, SKIPPED)]:<{len(i)}}" for i in ids)
        out.append(f"  {engine:<{width}}  {cells}".rstrip())
    out.append("")
    return out
