"""Checks from other packages: a module named by an ``eagle3_checks.checks`` entry point registers its checks, and
the gate, the CLI and the reports run it beside the built-in ones; a plugin that cannot be imported is a usage
error naming it, not a silent gap in the gate."""

from __future__ import annotations

import sys
import textwrap

import pytest

from eagle3_checks import gate, registry
from eagle3_checks.cli import main
from eagle3_checks.errors import UsageError

PLUGIN = '''
from eagle3_checks.registry import check, error

@check("team.no-bias", "the team forbids attention biases", guards="our serving stack has no bias kernels")
def no_bias(ctx):
    for name in ctx.ckpt.tensors:
        if name.endswith("self_attn.q_proj.bias"):
            yield error(f"{name}: our stack has no attention bias", key=name, fix="retrain without bias")
'''


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Install a distribution declaring ``module`` as a check plugin (dist-info on sys.path), undone afterwards."""
    before = dict(registry.REGISTRY)

    def install(module: str, source: str | None) -> None:
        site = tmp_path / "site"
        dist = site / "team_checks-1.0.dist-info"
        dist.mkdir(parents=True)
        (dist / "entry_points.txt").write_text(f"[eagle3_checks.checks]\nteam = {module}\n")
        if source is not None:
            (site / f"{module}.py").write_text(textwrap.dedent(source))
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.setattr(gate, "_plugins", None)

    yield install
    registry.REGISTRY.clear()
    registry.REGISTRY.update(before)
    for name in [m for m in sys.modules if m.startswith("team_checks_")]:
        del sys.modules[name]


def test_a_plugin_check_runs_in_the_gate(installed, drafter):
    installed("team_checks_ok", PLUGIN)
    assert "team.no-bias" in [c.id for c in gate.all_checks()]
    assert gate.plugin_modules()[-1] == "team_checks_ok"
    clean = drafter("flat").write()
    assert gate.gate(clean, gate.parse_options(reference="none")).result("team.no-bias").status == "passed"
    d = drafter("flat")
    q = d.tensors["midlayer.self_attn.q_proj.weight"]
    d.tensors["midlayer.self_attn.q_proj.bias"] = type(q)(q.dtype, (q.shape[0],), q.data[: q.shape[0] * 2])
    result = gate.gate(d.write(), gate.parse_options(reference="none"))
    assert result.result("team.no-bias").status == "failed"


def test_a_plugin_is_listed_by_the_cli(installed, capsys):
    installed("team_checks_listed", PLUGIN)
    assert main(["list"]) == 0
    assert "team.no-bias" in capsys.readouterr().out


def test_a_broken_plugin_is_a_usage_error_naming_it(installed, drafter, capsys):
    installed("team_checks_missing", None)
    with pytest.raises(UsageError, match="team_checks_missing"):
        gate.all_checks()
    gate._plugins = None
    assert main(["check", str(drafter("flat").write())]) == 2
    assert "check plugin 'team_checks_missing'" in capsys.readouterr().err
