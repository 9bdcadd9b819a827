"""GitHub workflow commands: one annotation per finding or root cause (``--format github``)."""

from __future__ import annotations

import re
from typing import Any

from ..gate import GateResult
from ..registry import Severity
from .causes import group
from .locations import Locator, annotation_text, reported
from .summary import summary_line, trainer_line

_GH_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _gh_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(s: str) -> str:
    return _gh_data(s).replace(":", "%3A").replace(",", "%2C")


def github_command(level: str, message: str, **props: Any) -> str:
    """``::error file=F,line=N,title=T::message``, escaped as the runner unescapes it."""
    shown = ",".join(f"{k}={_gh_prop(str(v))}" for k, v in props.items() if v is not None)
    return f"::{level}{' ' + shown if shown else ''}::{_gh_data(message)}"


def render_github(results: list[GateResult]) -> str:
    """One annotation per error and warning (a root cause once, naming what else it affects), then each
    checkpoint's verdict as a notice (an error when it failed)."""
    out: list[str] = []
    for result in results:
        causes = group(result)
        where = Locator(result)
        for f in reported(result, causes, notes=False):
            cause = causes.cause_of(f)
            title = f"eagle3-checks {'waived ' if f.waived is not None else ''}{f.code_label}" + \
                (f": {cause.key}" if cause is not None else "")
            level = _GH_LEVEL[f.severity] if f.waived is None else "notice"  # a waived finding fails nothing
            name, region = where.place(f)
            out.append(github_command(level, annotation_text(f, causes), file=where.path(name),
                                      line=region.get("startLine"), title=title))
        verdict = f"{result.ckpt.display}: {summary_line(result, causes)} (trainer: {trainer_line(result)})"
        out.append(github_command("error" if result.exit_code else "notice", verdict, title="eagle3-checks verdict"))
    return "\n".join(out) + "\n"


_GH_LINE = re.compile(r"^::(?P<level>[a-z]+)(?: (?P<props>[^:]*))?::(?P<message>.*)$")


def parse_github(text: str) -> list[dict[str, Any]]:
    """Workflow commands back into dicts (level, message, and the properties), unescaped as the runner does: what
    the tests hold the renderer to."""
    def unescape(s: str) -> str:
        return (s.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",")
                .replace("%25", "%"))

    out = []
    for raw in text.splitlines():
        m = _GH_LINE.match(raw)
        if m is None:
            raise ValueError(f"not a workflow command: {raw!r}")
        props = {}
        for item in filter(None, (m["props"] or "").split(",")):
            k, _, v = item.partition("=")
            props[k] = unescape(v)
        out.append({"level": m["level"], "message": unescape(m["message"]), **props})
    return out
