"""The performance table, generated from benchmark output: never written by hand.

    python benchmarks/summarize.py run [N]        run the benchmarks N times (default 3), then summarize them
                                                  (the rows of benchmarks that skipped keep their measurement)
    python benchmarks/summarize.py RUN.json ...   summarize pytest-benchmark JSON files already written
    python benchmarks/summarize.py add RUN.json   replace (or add) the rows of the benchmarks in RUN.json only,
                                                  keeping every other row as it was measured

Each benchmark states its row with ``conftest.report`` (``extra_info["report"]``: what it measures, the time, the
baseline measured in the same run, the budget, the peak RSS). Summarizing keeps, per benchmark, the median over the
runs of each figure, writes them to ``benchmarks/results.json`` (with the date and the machine: cores, Python,
torch), and rewrites the table of ``docs/performance.md`` between its ``generated`` markers from that file.
``tests/test_performance_table.py`` holds the committed table to the committed results.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results.json"
PAGE = ROOT / "docs" / "performance.md"
BEGIN = "<!-- generated: python benchmarks/summarize.py (from benchmarks/results.json) -->"
END = "<!-- end generated -->"
FIGURES = ("measured_s", "baseline_s", "ratio", "rss_bytes")


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(runs: list[dict]) -> dict:
    """The benchmarks' reports across pytest-benchmark runs: per benchmark, each figure's median and every run's."""
    by_name: dict[str, list[dict]] = {}
    for run in runs:
        for b in run.get("benchmarks", []):
            rep = (b.get("extra_info") or {}).get("report")
            if rep is not None:
                by_name.setdefault(b["fullname"], []).append(rep)
    rows = {}
    for name, reps in sorted(by_name.items()):
        last = reps[-1]
        row = {k: last[k] for k in ("what", "budget", "baseline", "notes")}
        row["held"] = [r.get("held") for r in reps]  # each run: whether the benchmark's budget held
        for k in FIGURES:
            median = _median([r.get(k) for r in reps])
            row[k] = None if median is None else (int(median) if k == "rss_bytes" else round(median, 4))
            row[k + "_runs"] = [r.get(k) for r in reps]
        rows[name] = row
    return rows


def machine(runs: list[dict]) -> dict:
    info = (runs[-1].get("machine_info") or {}) if runs else {}
    from importlib import metadata

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    return {"cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "python": info.get("python_version") or platform.python_version(), "torch": torch_version}


def _seconds(v: float | None) -> str:
    return "" if v is None else f"{v:.3f} s" if v < 10 else f"{v:.1f} s"


def table(results: dict) -> str:
    """The markdown table of docs/performance.md, from results.json."""
    dates = sorted({r.get("date", results["date"]) for r in results["benchmarks"].values()})
    lines = [f"Medians of each benchmark's runs of `pytest benchmarks --benchmark-only` (the held column counts them) "
             f"on {', '.join(dates) or results['date']} ({results['machine']['cores']} cores, Python "
             f"{results['machine']['python']}, torch {results['machine']['torch']}); each baseline measured in the "
             "same run.", "",
             "| benchmark | budget | held | measured | baseline | ratio | peak RSS | notes |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in results["benchmarks"].items():
        baseline = f"{_seconds(r['baseline_s'])} ({r['baseline']})" if r["baseline"] else ""
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else ""
        rss = f"{r['rss_bytes'] / 1e6:,.0f} MB" if r["rss_bytes"] else ""
        held = f"{sum(1 for h in r['held'] if h)} of {len(r['held'])} runs"
        lines.append(f"| {r['what']} (`{name.split('::')[-1]}`) | {r['budget']} | {held} | "
                     f"{_seconds(r['measured_s'])} | {baseline} | {ratio} | {rss} | {r['notes']} |")
    return "\n".join(lines) + "\n"


def splice(page: str, block: str) -> str:
    try:
        head, rest = page.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
    except ValueError:
        raise SystemExit(f"{PAGE.name}: no {BEGIN!r} ... {END!r} markers") from None
    return f"{head}{BEGIN}\n{block}{END}{tail}"


def write(runs: list[dict], results_path: Path = RESULTS, page_path: Path = PAGE, add: bool = False) -> dict:
    """Summarize ``runs`` into results.json and the page; ``add``: only their benchmarks' rows change (each row
    keeps the date it was measured on)."""
    today = datetime.date.today().isoformat()
    rows = {name: {**row, "date": today} for name, row in summarize(runs).items()}
    old = json.loads(results_path.read_text(encoding="utf-8")) if results_path.is_file() else None
    if old is not None:
        # the row of every benchmark that did not run here stays as it was measured: with ``add`` every other one;
        # otherwise those that skip without what they need (an engine's environment: benchmarks/test_live.py)
        kept = {name: {**row, "date": row.get("date", old["date"])} for name, row in old["benchmarks"].items()
                if name not in rows and name in _benchmark_names()}
        rows = dict(sorted({**kept, **rows}.items()))
    elif add:
        raise SystemExit(f"{results_path}: no results to add to")
    results = {"date": today, "runs": old["runs"] if add and old else len(runs), "machine": machine(runs),
               "benchmarks": rows}
    results_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    page_path.write_text(splice(page_path.read_text(encoding="utf-8"), table(results)), encoding="utf-8")
    return results


def _benchmark_names() -> set[str]:
    """benchmarks/test_*.py::test_* as they are now (a row of a benchmark renamed or removed is not kept)."""
    import ast

    return {f"benchmarks/{path.name}::{node.name}" for path in (ROOT / "benchmarks").glob("test_*.py")
            for node in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def run(n: int) -> list[dict]:
    runs = []
    with tempfile.TemporaryDirectory(prefix="eagle3-bench-") as tmp:
        for i in range(n):
            out = Path(tmp) / f"run-{i}.json"
            # a benchmark over its budget fails its run; its row is still written, saying so (the held column)
            subprocess.run([sys.executable, "-m", "pytest", "benchmarks", "--benchmark-only", "-p", "no:randomly",
                            "-q", f"--benchmark-json={out}"], cwd=ROOT)
            runs.append(json.loads(out.read_text()))
    return runs


def main(argv: list[str]) -> int:
    add = argv[:1] == ["add"]
    if add:
        argv = argv[1:]
    if argv[:1] == ["run"]:
        runs = run(int(argv[1]) if len(argv) > 1 else 3)
    elif argv:
        runs = [json.loads(Path(a).read_text()) for a in argv]
    else:
        print(__doc__)
        return 2
    results = write(runs, add=add)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
