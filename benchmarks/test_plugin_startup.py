"""What the pytest plugin costs a pytest run that gates nothing: every pytest run in an environment where eagle3-checks
is installed loads its ``pytest11`` entry point. Measured as whole pytest processes on a folder of one trivial test,
with the plugin (no ``--eagle3-ckpt``) and without it (``-p no:eagle3``), interleaved so both meet the same load.

Budget: at most 10 ms more than without the plugin (the median of each, over the rounds).
"""

from __future__ import annotations

import statistics
import subprocess

from conftest import PYTHON, report, run_process

ROUNDS = 15
BUDGET_S = 0.010


def test_the_plugin_costs_nothing_when_unused(benchmark, tmp_path):
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not this repository's ini (its -p pytester)
    base = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_one.py")]
    loaded = subprocess.run([*base, "--trace-config"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert "eagle3_checks.pytest_plugin" in loaded.stdout, "the plugin is not installed in this environment"
    run_process(base)  # warm the byte-code and the page cache
    with_plugin: list[float] = []
    without: list[float] = []

    def one_round() -> None:
        with_plugin.append(run_process(base))
        without.append(run_process([*base, "-p", "no:eagle3"]))

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    plugin_s, bare_s = statistics.median(with_plugin), statistics.median(without)
    extra = plugin_s - bare_s
    print(f"\npytest with the plugin {plugin_s * 1e3:.0f} ms, with -p no:eagle3 {bare_s * 1e3:.0f} ms: "
          f"{extra * 1e3:+.1f} ms")
    report(benchmark, what="a pytest run of one trivial test with the plugin installed and no `--eagle3-ckpt`",
           measured_s=plugin_s, budget="10 ms over the baseline", baseline="the same run with `-p no:eagle3`",
           baseline_s=bare_s, notes=f"{extra * 1e3:+.1f} ms")
    assert extra <= BUDGET_S
