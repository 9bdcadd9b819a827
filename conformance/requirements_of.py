"""Print the requirements an installed distribution declares, without its extras' and without the names listed in
an exclusion file (``#`` comments allowed): ``python requirements_of.py DIST EXCLUDE_FILE``. Run by conformance/run.sh
with the engine venv's interpreter, after installing the engine with ``--no-deps``."""

from __future__ import annotations

import re
import sys
from importlib.metadata import requires
from pathlib import Path


def _name(requirement: str) -> str:
    """PEP 503's normalised project name of a requirement string."""
    head = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", head.group(1)).lower() if head else ""


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    excluded = {_name(line) for line in Path(argv[1]).read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")}
    for requirement in requires(argv[0]) or []:
        marker = requirement.partition(";")[2]
        if "extra" in marker or _name(requirement) in excluded:
            continue
        print(requirement)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
