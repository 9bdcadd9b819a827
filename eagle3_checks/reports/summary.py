"""What every report of a gate result says alike: the status labels, the one-line verdict, why a check was
skipped, and the engine x check compatibility table."""

from __future__ import annotations

from ..gate import FAILED, PASSED, SKIPPED, WAIVED, WARNED, CheckResult, GateResult
from ..registry import Severity
from .causes import Causes, group

LABEL = {PASSED: "PASS", FAILED: "FAIL", WARNED: "WARN", SKIPPED: "SKIP", WAIVED: "WAIV", "n/a": "N/A"}


def summary_line(result: GateResult, causes: Causes | None = None) -> str:
    """``FAILED: 7 error(s) from 1 root cause, 0 warning(s), 2 note(s)``: findings, and the causes they follow from."""
    c = result.counts()
    causes = causes or group(result)
    verdict = "FAILED" if result.exit_code else "PASSED"
    strict = (" (--strict: warnings fail)" if result.options.strict else
              f" (--fail-on {','.join(result.options.fail_on)}: those warnings fail)" if result.options.fail_on else
              "") if c["warning"] and result.exit_code else ""
    n = causes.count(Severity.ERROR)
    errors = f"{c['error']} error(s)" + (f" from {n} root cause{'s' if n != 1 else ''}" if c["error"] else "")
    waived = f", {c['waived']} waived" if c.get("waived") else ""
    return f"{verdict}: {errors}, {c['warning']} warning(s), {c['info']} note(s){waived}{strict}"


def skip_reason(result: GateResult, r: CheckResult) -> str | None:
    """Why a check was skipped, unless that only repeats the header's reference line (said once, there)."""
    if r.reason and result.reference_name is None and r.reason == result.reference_note:
        return "no reference: see the reference line above"
    return r.reason


NOT_APPLICABLE = "n/a"  # a release --engine all brought in that does not read the checkpoint's layout


def compatibility(result: GateResult) -> dict[str, dict[str, str]]:
    """engine -> per-engine check id -> status (or "n/a"), when the gate judged more than one engine."""
    table: dict[str, dict[str, str]] = {}
    for r in result.results:
        if r.engine:
            na = r.status == SKIPPED and (r.reason or "").startswith("not applicable")
            table.setdefault(r.engine, {})[r.check.id] = NOT_APPLICABLE if na else r.status
    return table if len(table) > 1 else {}


def trainer_line(result: GateResult) -> str:
    """'speculators 0.9.0 (speculators_version in config.json; read); judged against speculators 0.9.0's reading'."""
    t = result.trainer
    shown = " ".join(x for x in (t["name"], t["version"]) if x) or "unknown"
    if t["name"] and not t["version"]:
        shown += ", release not stated"
    return f"{shown} ({t['how']}; {t['basis']}); judged against {t['reading']}'s reading"
