"""The pytest plugin's options and shared names: standard library and pytest only, so that the plugin's entry
point costs nothing when no checkpoint is given (see :mod:`eagle3_checks.pytest_plugin`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest

GATE_FILE = Path(__file__).resolve().with_name("gate.eagle3")
GATE_NODEID = "eagle3-checks"

# name -> (ini type, default, help). CLI: --eagle3-NAME; ini: eagle3_NAME with dashes as underscores.
IniType = Literal["string", "linelist", "bool"]
OPTIONS: dict[str, tuple[IniType, Any, str]] = {
    "ckpt": ("linelist", [], "drafter checkpoint to gate (repeatable): a directory, a Hugging Face cache folder "
             "(models--ORG--NAME) or hf://ORG/NAME[@REVISION]"),
    "reference": ("string", "auto", "reference: auto, a shipped spec name, SPEC.json, CKPT_DIR, hf://ORG/NAME or none"),
    "target-config": ("string", None, "the verifier's config.json (or its directory, or hf://ORG/NAME)"),
    "target": ("string", None, "the verifier's checkpoint (a directory or hf://ORG/NAME): its config.json, and its "
               "embed_tokens for the later draft steps of a drafter without one"),
    "revision": ("string", None, "the revision of Hugging Face cache folders and hf:// names without @REVISION"),
    "download": ("bool", False, "download hf:// checkpoints' weights into the Hugging Face cache (scan, forward)"),
    "level": ("string", None, "run checks up to this level: header, scan, forward or acceptance (default: every "
              "level, acceptance with --eagle3-data)"),
    "strict": ("bool", False, "warnings fail too"),
    "fail-on": ("linelist", [], "warnings of these finding codes (or prefixes: a check id, engine) fail too, as the "
                "CLI's --fail-on (comma-separated or one per line)"),
    "waive": ("linelist", [], "waive a check or a finding code, still run: CHECK_ID=REASON or CODE=REASON "
              "(repeatable); a waived check is reported xfailed, a waiver matching nothing fails gate.waivers under "
              "--eagle3-strict (--eagle3-skip, eagle3_skip: the old name)"),
    "engine": ("linelist", [], "engine releases to judge, as the CLI's --engine (repeatable; default: the CLI's; "
               "`eagle3-checks check --help` lists the modelled releases)"),
    "engine-python": ("string", None, "the interpreter whose engine --eagle3-engine NAME@installed means"),
    "source": ("string", None, "the checkpoint the candidate was converted from (forward-level comparison)"),
    "aux-convention": ("string", None, "how the drafter's trainer counted aux-layer ids: vllm or sglang"),
    "trainer": ("string", None, "who trained the drafter, when the checkpoint does not say: NAME[@VERSION] "
                "(speculators or specforge)"),
    "max-model-len": ("string", None, "the context length the drafter will be served with"),
    "tp": ("string", None, "the tensor-parallel size the drafter is served with (engine.serving)"),
    "pp": ("string", None, "the pipeline-parallel size (engine.serving)"),
    "launch": ("linelist", [], "the launch settings of an engine, NAME=FILE (JSON, as eagle3-checks recipe --format "
               "json writes them; repeatable)"),
    "data": ("string", None, "recorded target states: runs the acceptance level"),
    "loss-mask": ("string", None, "speculators' prepared-data folder: its loss masks for --eagle3-data"),
    "loss-mask-start": ("string", None, "the hs_<i> index of the loss-mask folder's first row (default 0)"),
    "max-drop": ("string", None, "the share of the trainer reading's acceptance length an engine reading may lose"),
    "min-acceptance": ("string", None, "warn about a reading whose acceptance length is below this"),
    "report": ("linelist", [], "write the report of every checkpoint gated, as the CLI's --format writes it: "
               "FORMAT=PATH, FORMAT one of text, json, markdown, github, sarif (repeatable; sarif=eagle3.sarif for "
               "code scanning)"),
}

STATE = pytest.StashKey[Any]()  # plugin_gate._Eagle3State: the options and one gate result per checkpoint


# Old option names still read, for the option that replaced them: --eagle3-skip / eagle3_skip waive.
OLD_NAMES = {"waive": "skip"}


def dest(name: str) -> str:
    return "eagle3_" + name.replace("-", "_")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("eagle3", "EAGLE-3 drafter checkpoint gate (eagle3-checks)")
    for name, (kind, default, help_) in OPTIONS.items():
        if kind == "linelist":
            group.addoption(f"--eagle3-{name}", dest=dest(name), action="append", default=None, help=help_)
        elif kind == "bool":
            group.addoption(f"--eagle3-{name}", dest=dest(name), action="store_true", default=None, help=help_)
        else:
            group.addoption(f"--eagle3-{name}", dest=dest(name), default=None, help=help_)
        parser.addini(dest(name), help_, type=kind, default=default)
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
    if OPTIONS[name][0] == "linelist":
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
