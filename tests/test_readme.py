"""The README and the docs/ pages stay true: two Quick start commands, .ci/run runs the second, every check
documented, the examples run as written, every relative link resolves, every page is in mkdocs.yml's nav."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from eagle3_checks.gate import all_checks

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def doc(name: str) -> str:
    return (DOCS / name).read_text()


def quick_start() -> list[str]:
    block = re.search(r"## Quick start\s+```bash\n(.*?)```", README, re.S)
    assert block, "README has no Quick start bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_is_two_commands():
    """The README's Quick start: the demo, then the test command (about its wording: the README is the text)."""
    lines = quick_start()
    assert len(lines) == 2
    assert "eagle3-checks demo" in lines[0]
    assert "pytest" in lines[1] and "constraints.txt" in lines[1]


def test_ci_runs_the_readme_test_command():
    script = (ROOT / ".ci" / "run").read_text()
    extract = re.search(r'cmd="\$\((.*)\)"', script).group(1)
    out = subprocess.run(["bash", "-c", extract], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == quick_start()[1]


def test_every_check_is_in_the_checks_table():
    checks = doc("checks.md")
    for c in all_checks():
        assert f"| [`{c.id}`](checks/{c.id}.md) |" in checks, c.id


def test_every_subpackage_is_packaged():
    """pyproject.toml lists the packages by hand (reference_specs/ is mapped into the package): a new subpackage
    must be listed, or a wheel install lacks it while an editable one works."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "eagle3_checks").rglob("__init__.py")}
    assert found <= listed, found - listed


def test_the_fuzz_example_runs_as_written(tmp_path):
    """The docs' converter-fuzzing example is a complete test: run it as a user would."""
    code = re.search(r"```python\n(# test_my_converter\.py\n.*?)```", doc("convert-and-fix.md"), re.S).group(1)
    (tmp_path / "test_my_converter.py").write_text(code.replace("max_examples=25", "max_examples=3"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "1 passed" in proc.stdout


def test_the_drafter_recipe_runs_as_written(tmp_path):
    """The docs' recipe for building drafters (a tiny speculators one, a Kimi-sized sparse one, a shape of one's
    own) runs as written, and what it builds is what it says: the Kimi-sized file is sparse."""
    code = re.search(r"```python\n(# build_drafters\.py\n.*?)```", doc("convert-and-fix.md"), re.S).group(1)
    (tmp_path / "build_drafters.py").write_text(code)
    proc = subprocess.run([sys.executable, str(tmp_path / "build_drafters.py"), str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kimi = tmp_path / "out" / "kimi" / "model.safetensors"
    assert kimi.stat().st_size > 4 * 10**9 and kimi.stat().st_blocks * 512 < 64 * 2**20
    from eagle3_checks.gate import gate, parse_options

    broken = gate(tmp_path / "out" / "broken", parse_options(reference="none", level="header"))
    assert "config.head-dim/missing" in {f.code for f in broken.findings()}


# ----- the README is short; the manual is the docs/ site ------------------------------------------------------------

def test_the_readme_is_short():
    """The README says what the tool is, the Quick start and the three common commands; the rest is under docs/."""
    assert len((ROOT / "README.md").read_bytes()) < 12 * 1024


def test_the_docs_quick_start_is_the_readmes():
    """docs/index.md repeats the Quick start block for the site: it must be the README's, which CI runs."""
    block = re.search(r"## Quick start\s+```bash\n(.*?)```", doc("index.md"), re.S)
    assert block and [line for line in block.group(1).splitlines() if line.strip()] == quick_start()


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _slug(heading: str) -> str:
    """An anchor as mkdocs (python-markdown's toc) makes it from a heading."""
    text = re.sub(r"`([^`]*)`", r"\1", heading).strip()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def _links(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)  # code blocks hold no links
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", [ROOT / "README.md", *_pages()], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    """Every relative link in the README and the docs points at a file that exists, and at a heading there when it
    names one (as `mkdocs build --strict` requires for the pages it builds)."""
    for link in _links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", link):  # https:, mailto:
            continue
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        assert path.is_file(), f"{page.relative_to(ROOT)}: {link} points at nothing"
        if anchor and path.suffix == ".md":
            assert anchor in _anchors(path), f"{page.relative_to(ROOT)}: {link}: no such heading"
    if page.name == "README.md":
        linked = {(ROOT / link.partition("#")[0]).resolve() for link in _links(page)}
        top = {p.resolve() for p in _pages() if p.parent == DOCS}  # the check pages are linked from checks.md
        assert top <= linked, "the README links every docs page"


def test_every_docs_page_is_in_the_nav():
    """mkdocs.yml's nav lists every page under docs/, and only pages that exist (read without a YAML parser: the
    test extras do not install one)."""
    config = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^docs_dir: docs$", config, re.M) and re.search(r"^site_name: eagle3-checks$", config, re.M)
    nav = config.split("\nnav:\n", 1)[1]
    listed = re.findall(r"^\s+- (?:[^:\n]+: )?(\S+\.md)$", nav, re.M)
    assert len(listed) == len(set(listed))
    assert set(listed) == {str(p.relative_to(DOCS)) for p in _pages()}


def test_ci_builds_the_docs_strictly():
    script = (ROOT / ".ci" / "run").read_text()
    assert 'mkdocs build --strict --site-dir "$work/site"' in script
    assert re.search(r"^mkdocs==\d", (ROOT / "requirements-lint.txt").read_text(), re.M)
