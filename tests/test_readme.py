"""The README stays true: two Quick start commands, .ci/run runs the second, every check documented."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from eagle3_checks.gate import all_checks

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def quick_start() -> list[str]:
    block = re.search(r"## Quick start\s+```bash\n(.*?)```", README, re.S)
    assert block, "README has no Quick start bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_is_two_commands():
    lines = quick_start()
    assert len(lines) == 2
    assert "eagle3-checks demo" in lines[0]
    assert "pytest" in lines[1] and "constraints.txt" in lines[1]


def test_ci_runs_the_readme_test_command():
    script = (ROOT / ".ci" / "run").read_text()
    extract = re.search(r'cmd="\$\((.*)\)"', script).group(1)
    out = subprocess.run(["bash", "-c", extract], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == quick_start()[1]


def test_every_check_is_in_the_readme_table():
    for c in all_checks():
        assert f"| `{c.id}` |" in README, c.id


def test_every_subpackage_is_packaged():
    """pyproject.toml lists the packages by hand (reference_specs/ is mapped into the package): a new subpackage
    must be listed, or a wheel install lacks it while an editable one works."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "eagle3_checks").rglob("__init__.py")}
    assert found <= listed, found - listed


def test_the_fuzz_example_runs_as_written(tmp_path):
    """The README's converter-fuzzing example is a complete test: run it as a user would."""
    code = re.search(r"```python\n(# test_my_converter\.py\n.*?)```", README, re.S).group(1)
    (tmp_path / "test_my_converter.py").write_text(code.replace("max_examples=25", "max_examples=3"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "1 passed" in proc.stdout


def test_the_drafter_recipe_runs_as_written(tmp_path):
    """The README's recipe for building drafters (a tiny speculators one, a Kimi-sized sparse one, a shape of one's
    own) runs as written, and what it builds is what it says: the Kimi-sized file is sparse."""
    code = re.search(r"```python\n(# build_drafters\.py\n.*?)```", README, re.S).group(1)
    (tmp_path / "build_drafters.py").write_text(code)
    proc = subprocess.run([sys.executable, str(tmp_path / "build_drafters.py"), str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kimi = tmp_path / "out" / "kimi" / "model.safetensors"
    assert kimi.stat().st_size > 4 * 10**9 and kimi.stat().st_blocks * 512 < 64 * 2**20
    from eagle3_checks.gate import gate, parse_options

    broken = gate(tmp_path / "out" / "broken", parse_options(reference="none", level="header"))
    assert "config.head-dim/missing" in {f.code for f in broken.findings()}
