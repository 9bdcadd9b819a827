"""The pytest plugin's options and shared names: standard library and pytest only, so that the plugin's entry
point costs nothing when no checkpoint is given (see :mod:`eagle3_checks.pytest_plugin`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest

from .options import PLUGIN, Option, help_text, taken_by

GATE_FILE = Path(__file__).resolve().with_name("gate.eagle3")
GATE_NODEID = "eagle3-checks"

# The plugin's options: the rows of options.OPTIONS it takes, --eagle3-NAME and the ini key eagle3_NAME.
OPTIONS: dict[str, Option] = {o.name: o for o in taken_by(PLUGIN)}
INI_TYPES: dict[str, Literal["string", "linelist", "bool"]] = {"value": "string", "list": "linelist", "flag": "bool"}

STATE = pytest.StashKey[Any]()  # plugin_gate._Eagle3State: the options and one gate result per checkpoint


# Old option names still read, for the option that replaced them: --eagle3-skip / eagle3_skip waive.
OLD_NAMES = {name: o.old for name, o in OPTIONS.items() if o.old}


def dest(name: str) -> str:
    return "eagle3_" + name.replace("-", "_")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("eagle3", "EAGLE-3 drafter checkpoint gate (eagle3-checks)")
    for name, o in OPTIONS.items():
        help_ = help_text(o)
        if o.kind == "list":
            group.addoption(f"--eagle3-{name}", dest=dest(name), action="append", default=None, help=help_)
        elif o.kind == "flag":
            group.addoption(f"--eagle3-{name}", dest=dest(name), action="store_true", default=None, help=help_)
        else:
            group.addoption(f"--eagle3-{name}", dest=dest(name), default=None, help=help_)
        parser.addini(dest(name), help_, type=INI_TYPES[o.kind], default=[] if o.kind == "list" else
                      False if o.kind == "flag" else None)
    for name, old in OLD_NAMES.items():
        group.addoption(f"--eagle3-{old}", dest=dest(old), action="append", default=None,
                        help=f"the old name of --eagle3-{name}")
        parser.addini(dest(old), f"the old name of {dest(name)}", type="linelist", default=[])


REMOVED_IN = "0.2.0"  # the release that removes the old names (CHANGELOG.md)


def value(config: pytest.Config, name: str) -> Any:
    """An option's value: the command line's, else the ini file's (a list option joins its old name's too, with a
    deprecation warning)."""
    names = [name] + ([OLD_NAMES[name]] if name in OLD_NAMES else [])
    for old in names[1:]:
        if config.getoption(dest(old)) or config.getini(dest(old)):
            config.issue_config_time_warning(pytest.PytestDeprecationWarning(
                f"--eagle3-{old} / {dest(old)} is deprecated and will be removed in {REMOVED_IN}: use "
                f"--eagle3-{name} / {dest(name)}"), stacklevel=2)
    if OPTIONS[name].kind == "list":
        got = [v for n in names for v in (config.getoption(dest(n)) or [])]
        got = got or [v for n in names for v in (config.getini(dest(n)) or [])]
        return got or None
    cli = config.getoption(dest(name))
    if cli is not None:
        return cli
    ini = config.getini(dest(name))
    return ini if ini not in ("", None) else None


# The plugin's fixtures: a test using one is parametrized over the --eagle3-ckpt checkpoints.
FIXTURES = {"eagle3_checkpoint", "eagle3_findings", "eagle3_gate_result"}
