"""Rendering a gate result: text, JSON and markdown for people, GitHub and SARIF for CI, root causes."""

from __future__ import annotations

from collections.abc import Callable

from ..gate import GateResult
from .github import render_github
from .json_report import render_json
from .markdown import render_markdown
from .sarif import render_sarif
from .text import render_text

# --format NAME -> the renderer of a list of gate results (one per checkpoint)
RENDERERS: dict[str, Callable[[list[GateResult]], str]] = {
    "text": render_text, "json": render_json, "markdown": render_markdown, "github": render_github,
    "sarif": render_sarif}
