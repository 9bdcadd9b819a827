"""Print the requirements an installed distribution declares, without its extras' and without those an exclusion
file lists (``#`` comments allowed): ``python requirements_of.py DIST EXCLUDE_FILE``. A line ``NAME`` drops every
requirement on NAME; a line ``NAME==VERSION`` drops only a requirement pinning exactly that version (a release that
pins a version the index lacks), so the other releases still install NAME. Run by conformance/run.sh with the engine
venv's interpreter, after installing the engine with ``--no-deps``."""

from __future__ import annotations

import re
import sys
from importlib.metadata import requires
from pathlib import Path


def _name(requirement: str) -> str:
    """PEP 503's normalised project name of a requirement string."""
    head = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", head.group(1)).lower() if head else ""


def _pin(requirement: str) -> str | None:
    """The version a requirement pins exactly (``NAME==X``, markers aside), else None."""
    spec = requirement.partition(";")[0]
    pinned = re.fullmatch(r"\s*[A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?\s*==\s*([^\s,=<>!~]+)\s*", spec)
    return pinned.group(1) if pinned else None


def excluded(requirement: str, lines: list[str]) -> bool:
    """Whether an exclusion line drops the requirement: its name alone, or its name and the exact pin."""
    for line in lines:
        name, _, version = line.strip().partition("==")
        if _name(name) == _name(requirement) and (not version or _pin(requirement) == version.strip()):
            return True
    return False


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    lines = [line for line in Path(argv[1]).read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    for requirement in requires(argv[0]) or []:
        marker = requirement.partition(";")[2]
        if "extra" in marker or excluded(requirement, lines):
            continue
        print(requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
