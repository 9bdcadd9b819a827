"""SARIF 2.1.0 for code scanning (``--format sarif``): one rule per finding code, every result located."""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from .. import __version__
from ..gate import WAIVERS, GateResult, all_checks
from ..registry import Check, Finding, Severity
from .causes import group
from .locations import Locator, annotation_text, reported
from .summary import summary_line

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


_SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _slug(rid: str) -> str:
    """``config.head-dim`` -> ``ConfigHeadDim``: a rule's short name."""
    return "".join(w[:1].upper() + w[1:] for w in re.findall(r"[A-Za-z0-9]+", rid))


def rule_id(f: Finding) -> str:
    """One rule per finding code (``vocab.d2t/absolute-ids``), or the check id for a finding without one."""
    return f.code or f.check.split("[")[0]


def _rule(rid: str, c: Check | None) -> dict[str, Any]:
    declared = c.declared.get(rid) if c else None
    title = declared.meaning if declared else c.title if c else rid
    rule: dict[str, Any] = {"id": rid, "name": _slug(rid), "shortDescription": {"text": title}}
    if declared is not None and declared.is_note:
        rule["defaultConfiguration"] = {"level": "note"}
    if c is not None and c.guards:
        rule["fullDescription"] = {"text": c.guards}
    if c is not None and c.fix:
        rule["help"] = {"text": f"Fix: {c.fix} (eagle3-checks explain {rid})"}
    rule["properties"] = {"check": c.id if c else rid.split("/")[0], "level": c.level if c else "header",
                          "tags": ["eagle3", "checkpoint"]}
    return rule


def _uri(path: str) -> str:
    p = Path(path)
    if p.is_absolute():
        return p.as_uri()
    return quote(PurePosixPath(p).as_posix())


def to_sarif(results: list[GateResult]) -> dict[str, Any]:
    """One run; one result per finding not folded into a root cause (notes as level note), each located (see
    Locator): code scanning rejects a file with one result that has no location."""
    by_id = {c.id: c for c in [*all_checks(), WAIVERS]}
    rules: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    sarif_results = []
    for result in results:
        causes = group(result)
        where = Locator(result)
        for f in reported(result, causes, notes=True):
            rid = rule_id(f)
            if rid not in index:
                index[rid] = len(rules)
                rules.append(_rule(rid, by_id.get(f.check.split("[")[0])))
            item: dict[str, Any] = {"ruleId": rid, "ruleIndex": index[rid], "level": _SARIF_LEVEL[f.severity],
                                    "message": {"text": annotation_text(f, causes)}}
            if f.waived is not None:  # SARIF's own word for it: code scanning shows the result as dismissed
                item["suppressions"] = [{"kind": "external", "status": "accepted",
                                         "justification": f"--waive: {f.waived}"}]
            name, region = where.place(f)
            loc: dict[str, Any] = {"artifactLocation": {"uri": _uri(where.path(name))}}
            # GitHub shows a result only with a line (sarif-sdk's GitHub rule GH1003: region.startLine at minimum);
            # a weight file's bytes are located on its line 1, the safetensors header, beside the byte range.
            loc["region"] = {"startLine": 1, **region} if "startLine" not in region else region
            item["locations"] = [{"physicalLocation": loc}]
            props: dict[str, Any] = {"check": f.check, "code": rid, "checkpoint": result.ckpt.display}
            for k in ("key", "expected", "found", "basis", "rests_on", "settle", "why", "fix", "repair"):
                if getattr(f, k) is not None:
                    props[k] = getattr(f, k)
            cause = causes.cause_of(f)
            if cause is not None:
                props["cause"] = cause.key
                props["alsoAffects"] = [{"check": g.check, "message": g.message} for g in cause.also]
            item["properties"] = props
            sarif_results.append(item)
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "eagle3-checks", "version": __version__, "rules": rules}},
            "results": sarif_results,
            "invocations": [{"executionSuccessful": True,
                             "exitCode": max((r.exit_code for r in results), default=0)}],
            "properties": {"verdicts": [{"checkpoint": r.ckpt.display, "summary": summary_line(r),
                                         "trainer": r.trainer} for r in results]},
        }],
    }


def render_sarif(results: list[GateResult]) -> str:
    return json.dumps(to_sarif(results), indent=2) + "\n"


def render_sarif_error(message: str, exit_code: int = 2) -> str:
    """The SARIF log of a run that gated nothing (a usage error): no results, and the notification saying why."""
    log = to_sarif([])
    log["runs"][0]["invocations"] = [{"executionSuccessful": False, "exitCode": exit_code,
                                      "toolExecutionNotifications": [{"level": "error", "message": {"text": message}}]}]
    return json.dumps(log, indent=2) + "\n"
