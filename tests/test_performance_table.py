"""The performance table of docs/performance.md is generated from benchmark output (benchmarks/summarize.py, from
benchmarks/results.json), never written by hand: the committed table is what the committed results give, and every
benchmark reports a row."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

from helpers import assert_golden

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("summarize", ROOT / "benchmarks" / "summarize.py")
summarize = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summarize)  # type: ignore[union-attr]


def _benchmarks() -> dict[str, ast.FunctionDef]:
    out = {}
    for path in sorted((ROOT / "benchmarks").glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                out[f"benchmarks/{path.name}::{node.name}"] = node
    return out


def test_the_committed_table_is_the_committed_results():
    results = json.loads(summarize.RESULTS.read_text())
    page = summarize.PAGE.read_text()
    assert summarize.splice(page, summarize.table(results)) == page, \
        "docs/performance.md differs from benchmarks/results.json: run `python benchmarks/summarize.py run`"


def test_every_benchmark_reports_a_row_and_has_one_in_the_results():
    results = json.loads(summarize.RESULTS.read_text())["benchmarks"]
    for name, node in _benchmarks().items():
        calls = [n for n in ast.walk(node) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "report"]
        assert calls, f"{name} reports no row (conftest.report)"
        assert name in results, f"{name} is not in benchmarks/results.json: run `python benchmarks/summarize.py run`"
    assert set(results) <= set(_benchmarks()), set(results) - set(_benchmarks())


def test_a_row_is_the_median_of_the_runs(tmp_path):
    def run(measured, baseline, rss):
        rep = {"what": "w", "budget": "2x", "baseline": "cat", "notes": "", "measured_s": measured,
               "baseline_s": baseline, "ratio": round(measured / baseline, 3), "rss_bytes": rss, "held": measured < 3}
        return {"benchmarks": [{"fullname": "benchmarks/test_x.py::test_y", "extra_info": {"report": rep}}],
                "machine_info": {"python_version": "3.11.7"}}

    page = tmp_path / "performance.md"
    page.write_text(f"intro\n{summarize.BEGIN}\nold\n{summarize.END}\nafter\n")
    results = summarize.write([run(3.0, 1.0, 10), run(1.0, 1.0, 30), run(2.0, 1.0, 20)], tmp_path / "r.json", page)
    row = results["benchmarks"]["benchmarks/test_x.py::test_y"]
    assert (row["measured_s"], row["ratio"], row["rss_bytes"]) == (2.0, 2.0, 20)
    assert row["measured_s_runs"] == [3.0, 1.0, 2.0]
    # the page whole: its text kept around the markers, the old table replaced by the row of the medians (2.000 s
    # against 1.000 s, 2.00x; held in 2 of 3 runs); the date and the machine (cores, torch) are this run's: not recorded
    machine = results["machine"]
    text = page.read_text().replace(results["date"], "<DATE>").replace(
        f"{machine['cores']} cores, Python {machine['python']}, torch {machine['torch']}", "<MACHINE>")
    assert_golden("test_performance_table/test_a_row_is_the_median_of_the_runs.md", text)
