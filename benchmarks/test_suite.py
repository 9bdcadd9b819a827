"""The README's test command, timed: its pytest part (the last command of the Quick start's second line) over the
test suite, on this machine's cores. Budget: 4 minutes (the suite trains a tiny target and three drafters with
speculators, about 90 CPU-seconds, and holds the profiles to four engine releases' recordings). The figure is written
by this benchmark's output, not by hand (docs/performance.md is generated from it)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from conftest import report

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 240


def readme_pytest() -> str:
    block = re.search(r"## Quick start\s+```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    second = [line for line in block.splitlines() if line.strip()][1]
    return second.split("&&")[-1].strip()


def test_the_readme_test_command_runs_in_four_minutes(benchmark):
    command = readme_pytest()
    assert command.startswith("pytest"), command
    outcome: dict = {}

    def once() -> None:
        start = time.perf_counter()
        proc = subprocess.run(["bash", "-c", command + " -q -p no:randomly -p no:cacheprovider"], cwd=ROOT,
                              capture_output=True, text=True)
        outcome.update(seconds=time.perf_counter() - start, rc=proc.returncode, tail=proc.stdout.strip()[-300:])

    benchmark.pedantic(once, rounds=1, iterations=1)
    summary = outcome["tail"].splitlines()[-1] if outcome["tail"] else ""
    report(benchmark, what=f"the README's test command's `{command}`, the whole suite", measured_s=outcome["seconds"],
           budget=f"{BUDGET_S // 60} minutes", notes=re.sub(r"=+", "", summary).strip())
    print(f"\n{command}: {outcome['seconds']:.0f} s: {summary}")
    assert outcome["rc"] == 0, outcome["tail"]
    assert outcome["seconds"] <= BUDGET_S
