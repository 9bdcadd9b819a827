"""pytest plugin: ``pytest --eagle3-ckpt=PATH`` gates a drafter as one test item per check.

Options follow one rule: CLI ``--NAME`` is ``--eagle3-NAME`` here and ``eagle3_NAME`` (dashes as
underscores) in an ini file; the command line wins over the ini. When a checkpoint is given, the
plugin appends the package's ``gate.eagle3`` file to the collection arguments, and that file
collects ``<checkpoint>::<check id>`` items, so ``-k``, ``--junitxml``, ``--lf`` and ``-n`` work as for
any test. A failing item prints the finding, not a traceback into this package.

Fixtures for your own tests: ``eagle3_checkpoint`` (the normalized view) and ``eagle3_findings``
(every finding), parametrized over the ``--eagle3-ckpt`` checkpoints.

This module is what every pytest run in an environment with eagle3-checks installed imports (the ``pytest11``
entry point), so it imports nothing of the gate: its options, the fixtures and, only when an eagle3 option is
given (a checkpoint, or any ``--eagle3-*`` on the command line), the gate itself (:mod:`eagle3_checks.plugin_gate`),
registered as a plugin of its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from .plugin_options import FIXTURES, OLD_NAMES, OPTIONS, STATE, dest, pytest_addoption, value

__all__ = ["pytest_addoption", "pytest_configure", "OPTIONS"]


def _wanted(config: pytest.Config) -> bool:
    """Whether this run gates: a checkpoint (command line or ini), or any eagle3 option on the command line (so
    that a bad one is still a usage error)."""
    names = (*OPTIONS, *OLD_NAMES.values())
    return bool(value(config, "ckpt")) or any(config.getoption(dest(name)) is not None for name in names)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "eagle3: an eagle3-checks gate item")
    if not _wanted(config):
        return
    # The one import of a sibling inside a function (tests/test_layout.py allows exactly this one): the gate costs
    # about 0.4 s and 50 modules with numpy, which a pytest run that gates nothing must not pay.
    from . import plugin_gate

    config.pluginmanager.register(plugin_gate, "eagle3-checks-gate")
    plugin_gate.configure(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not FIXTURES & set(metafunc.fixturenames):
        return
    state = metafunc.config.stash.get(STATE, None)
    if state is None or not state.ckpts:
        metafunc.parametrize("eagle3_ckpt_path", [None], ids=["no-eagle3-ckpt"], scope="session")
    else:
        metafunc.parametrize("eagle3_ckpt_path", state.ckpts, ids=state.labels, scope="session")


@pytest.fixture(scope="session")
def eagle3_gate_result(request: pytest.FixtureRequest, eagle3_ckpt_path: str | None) -> Any:
    """The gate result (every check's status and findings) for one --eagle3-ckpt checkpoint."""
    if eagle3_ckpt_path is None:
        pytest.skip("no checkpoint given: pass --eagle3-ckpt=PATH")
    return request.config.stash[STATE].result(eagle3_ckpt_path)


@pytest.fixture(scope="session")
def eagle3_checkpoint(eagle3_gate_result: Any) -> Any:
    """The normalized view of the checkpoint (eagle3_checks.drafter.checkpoint.Checkpoint)."""
    return eagle3_gate_result.ckpt


@pytest.fixture(scope="session")
def eagle3_findings(eagle3_gate_result: Any) -> list:
    """Every finding of every check on the checkpoint (eagle3_checks.registry.Finding)."""
    return eagle3_gate_result.findings()


