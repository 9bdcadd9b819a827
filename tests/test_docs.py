"""The check documentation is generated from the registry (eagle3_checks/check_docs.py) and committed: the
pages docs/checks/*.md, the table in docs/checks.md and the Checks nav of mkdocs.yml must be what regenerating
gives, or these tests fail and ask for the command."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from eagle3_checks import check_docs as check_pages
from eagle3_checks import registry
from eagle3_checks.check_docs import (
    COMMAND,
    TABLE_BEGIN,
    TABLE_END,
    documented,
    example_doc,
    expected,
    stale,
    table,
    write,
)
from eagle3_checks.cli import main

ROOT = Path(__file__).resolve().parent.parent
STALE = f"the check docs are stale: run `{COMMAND}` from the project's root and commit what it writes"


@pytest.fixture(scope="module")
def examples():
    """Each documented check's example, gated once for the tests that only change metadata."""
    docs = {c.id: example_doc(c) for c in documented()}
    return lambda c: docs[c.id]


def regenerated(tmp: Path) -> Path:
    """A copy of the project's generated files' surroundings (docs/checks.md and mkdocs.yml, no page) in ``tmp``,
    regenerated there."""
    (tmp / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "checks.md", tmp / "docs" / "checks.md")
    shutil.copy(ROOT / "docs" / "engines.md", tmp / "docs" / "engines.md")
    shutil.copy(ROOT / "mkdocs.yml", tmp / "mkdocs.yml")
    shutil.copy(ROOT / "README.md", tmp / "README.md")
    write(tmp)
    return tmp


def differences(tmp: Path) -> list[str]:
    """The generated files in ``tmp`` that are not exactly the committed ones, and the pages on one side only."""
    made = {p.name for p in (tmp / "docs" / "checks").glob("*.md")}
    committed = {p.name for p in (ROOT / "docs" / "checks").glob("*.md")}
    names = sorted(f"docs/checks/{n}" for n in made | committed) + ["docs/checks.md", "docs/engines.md", "mkdocs.yml",
                                                                           "README.md"]
    return [n for n in names
            if not (tmp / n).is_file() or not (ROOT / n).is_file() or (tmp / n).read_text() != (ROOT / n).read_text()]


def test_the_committed_check_docs_are_current(tmp_path):
    """Regenerating in a temporary folder gives exactly the committed pages (none missing, none extra), the table of
    docs/checks.md and the nav."""
    out = regenerated(tmp_path)
    assert differences(out) == [], STALE
    assert sorted(p.name for p in (ROOT / "docs" / "checks").glob("*.md")) == sorted(
        f"{c.id}.md" for c in documented())
    assert stale(ROOT) == [], STALE


def test_a_changed_title_makes_the_docs_stale(tmp_path, monkeypatch):
    """A check's metadata changed without regenerating fails the comparison: its page differs."""
    c = registry.REGISTRY["files"]
    monkeypatch.setitem(registry.REGISTRY, "files", dataclasses.replace(c, title="Something else entirely"))
    assert differences(regenerated(tmp_path)) == ["docs/checks/files.md"]
    assert stale(ROOT) == ["docs/checks/files.md"]


def test_changed_guards_make_the_page_and_the_table_stale(monkeypatch, examples):
    c = registry.REGISTRY["vocab.d2t"]
    monkeypatch.setitem(registry.REGISTRY, "vocab.d2t", dataclasses.replace(c, guards="Nothing at all."))
    assert stale(ROOT, expected(ROOT, examples=examples)) == ["docs/checks.md", "docs/checks/vocab.d2t.md"]


def test_a_page_missing_or_extra_makes_the_docs_stale(monkeypatch, examples):
    """A check registered without its page, or a page left behind by a removed check, fails the comparison."""
    c = registry.REGISTRY["keys"]
    checks = dict(registry.REGISTRY)  # replaced whole, so that the registry's order is restored as it was
    monkeypatch.setattr(registry, "REGISTRY", {**checks, "keys.extra": dataclasses.replace(c, id="keys.extra")})
    added = expected(ROOT, examples=lambda c: None if c.id == "keys.extra" else examples(c))
    assert stale(ROOT, added) == ["docs/checks.md", "docs/checks/keys.extra.md", "mkdocs.yml"]
    monkeypatch.setattr(registry, "REGISTRY", {k: v for k, v in checks.items() if k != "keys"})
    assert stale(ROOT, expected(ROOT, examples=examples)) == ["docs/checks.md", "docs/checks/keys.md", "mkdocs.yml"]


def test_regenerating_removes_a_page_of_no_check(tmp_path):
    out = regenerated(tmp_path)
    (out / "docs" / "checks" / "gone.md").write_text("# gone\n")
    assert stale(out) == ["docs/checks/gone.md"]
    assert write(out) == ["docs/checks/gone.md"] and not (out / "docs" / "checks" / "gone.md").exists()
    assert differences(out) == []


def test_the_pages_are_the_same_without_torch(monkeypatch, examples):
    """A forward-level check's example is described, never gated: whether torch is installed changes nothing."""
    with_torch = expected(ROOT)
    for c in documented():
        if c.level == "forward":
            monkeypatch.setitem(registry.REGISTRY, c.id, dataclasses.replace(c, requires=lambda: "torch is missing"))
    assert expected(ROOT) == with_torch


def test_the_pages_are_generated_alike_where_torch_does_not_import():
    """The same, for real: a process in which ``import torch`` fails generates the same files."""
    code = ("import json, sys; sys.modules['torch'] = None; from pathlib import Path; "
            "from eagle3_checks.check_docs import expected; "
            f"print(json.dumps(expected(Path({str(ROOT)!r}))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == expected(ROOT)


def test_the_pages_are_deterministic_and_name_no_machine_path(examples):
    files = expected(ROOT)
    assert expected(ROOT) == files
    tmp = tempfile.gettempdir()
    for name, text in files.items():
        assert tmp not in text and str(ROOT) not in text and "eagle3-example-" not in text, name


def test_list_markdown_prints_the_table_of_the_checks_page(capsys):
    assert main(["list", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    page = (ROOT / "docs" / "checks.md").read_text()
    assert out == page.split(TABLE_BEGIN + "\n", 1)[1].split(TABLE_END, 1)[0]
    assert out == table(documented())


def test_each_page_says_what_the_registry_says(examples):
    """The failing example's codes are the check's own, and every declared code is on its page (about its wording:
    a page is text, and its heading, guards and code table must carry what the registry declares)."""
    for c in documented():
        text = check_pages.page(c, examples(c))
        assert f"# `{c.id}`" in text and check_pages._text(c.guards) in text
        for code, declared in c.declared.items():
            assert f"| `{code}` | {'note' if declared.is_note else ''}" in text
        doc = examples(c)
        if doc is not None and doc.failing is not None:
            assert doc.failing.status in ("failed", "warned") and doc.failing.codes
            assert all(code in c.declared for code, _ in doc.failing.codes)


def test_no_page_installs_from_a_package_index():
    """The project is on no package index: an install line naming ``eagle3-checks[EXTRA]`` fails for every reader
    (it did, in the Hub section of the gate page); installs are from the checkout, as errors.INSTALL says (about the
    pages' wording)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in pages for n, line in enumerate(p.read_text().splitlines(), 1)
             if "eagle3-checks[" in line]
    assert not found, found
