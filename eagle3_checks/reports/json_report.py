"""The JSON report, for machines (``--format json``; its schema is versioned: :data:`SCHEMA_VERSION`)."""

from __future__ import annotations

import json
from typing import Any

from .. import __version__
from ..gate import GateResult
from ..registry import Finding, Severity
from .causes import Causes, group
from .summary import compatibility, summary_line

SCHEMA_VERSION = 1


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
        "trainer": r.trainer,
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
