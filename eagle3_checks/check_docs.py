"""The check documentation, generated from the registry: one page per check (``docs/checks/<id>.md``), the summary
table of ``docs/checks.md`` (what ``eagle3-checks list --format markdown`` prints) and the Checks section of
``mkdocs.yml``'s nav.

Everything a page says comes from the check's registration (``@check``: title, guards, level, needs, engines, fix,
codes, evidence) and its example (the failing and the passing one, gated here for that check only). The text is a
pure function of those: no timestamp, no path of the machine, the registry's order. A forward-level check's example
is described and never gated, so the pages are the same with or without torch.

Regenerate the committed files from the project's root with ``python -m eagle3_checks.check_docs``;
``tests/test_docs.py`` fails while they are stale.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from .defects import EXAMPLES, Draft, run_example
from .drafter.checkpoint import open_checkpoint
from .drafter.layout import FLAT, SPECULATORS
from .engines import PROFILES, catalogue
from .fast_dataclass import dataclass
from .gate import all_checks
from .registry import Check, Code, Severity

COMMAND = "python -m eagle3_checks.check_docs"
TABLE_BEGIN = "<!-- generated: eagle3-checks list --format markdown -->"
TABLE_END = "<!-- end generated -->"
RELEASES_BEGIN = "<!-- generated: eagle3-checks list --engines --format markdown -->"
RELEASES_END = TABLE_END
NAV_BEGIN = f"    # generated: {COMMAND}"
NAV_END = "    # end generated"
PAGES = "checks"  # the folder of the pages, under docs/
BUILTIN = "eagle3_checks.checks"  # the package of the built-in checks: the ones the committed docs describe
NEEDS = {"target": "--target-config", "reference": "--reference"}  # what a check needs -> the option giving it


@dataclass(frozen=True)
class Outcome:
    """What gating one example gave, as the pages show it: the status, the engine release it was judged for (a
    per-engine check), and each code it raised with its severity, in the order found (no message: those can name
    the temporary folder)."""

    status: str
    engine: str | None = None
    codes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ExampleDoc:
    """A check's example for its page: the defect in a line, what the passing drafter is, and what each gave when
    gated (None: described only)."""

    fails: str
    passes: str
    failing: Outcome | None = None
    passing: Outcome | None = None
    not_gated: str = ""  # why the example is described only


def builtin(c: Check) -> bool:
    """A check of eagle3-checks itself (not an installed plugin's): the committed docs describe these."""
    return getattr(c.func, "__module__", "").startswith(BUILTIN + ".")


def page_name(check_id: str) -> str:
    return f"{PAGES}/{check_id}.md"


# ----- markdown helpers ---------------------------------------------------------------------------------------------

def _text(s: str, cell: bool = False) -> str:
    """Prose from the registry as markdown: outside code spans, ``*`` and ``<`` are literal (``layers.N.*`` is no
    emphasis, ``<`` no tag); in a table cell, so is ``|``."""
    parts = re.split(r"(`[^`]*`)", " ".join(s.split()))
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            part = part.replace("\\", "\\\\").replace("*", "\\*").replace("<", "&lt;")
        if cell:
            part = part.replace("|", "\\|")
        out.append(part)
    return "".join(out)


def _sentence(s: str) -> str:
    """A registry phrase (``restore the reference's shapes``) as a sentence: a capital first letter, a full stop."""
    s = " ".join(s.split())
    return (s[:1].upper() + s[1:] + ("" if s.endswith((".", "!", "?")) else ".")) if s else s


def _kind(code: Code) -> str:
    if code.is_note:
        return "note"
    return code.severity.value if code.severity is not None else "error or warning"


def _needs(c: Check) -> str:
    return ", ".join(f"`{NEEDS.get(n, n)}`" for n in c.needs)


def _level_cell(c: Check) -> str:
    extra = (["per engine"] if c.per_engine else []) + ([f"needs {_needs(c)}"] if c.needs else [])
    return ", ".join([f"`{c.level}`", *extra])


# ----- the summary table --------------------------------------------------------------------------------------------

def table(checks: Iterable[Check], linked: Callable[[Check], bool] = builtin) -> str:
    """The summary table of ``checks``: id (linking to its page when ``linked``; a plugin's check has none), level,
    what it guards against, how many codes it declares. ``docs/checks.md`` carries it between its markers."""
    lines = ["| check | level | guards against | codes |", "|---|---|---|---|"]
    for c in checks:
        ident = f"[`{c.id}`]({page_name(c.id)})" if linked(c) else f"`{c.id}`"
        lines.append(f"| {ident} | {_level_cell(c)} | {_text(c.guards or c.title, cell=True)} | {len(c.codes)} |")
    return "\n".join(lines) + "\n"


# ----- one check's page ---------------------------------------------------------------------------------------------

def _outcome(o: Outcome) -> str:
    judged = f" for `{o.engine}`" if o.engine else ""
    if not o.codes:
        return f"`{o.status}`{judged}, no finding"
    raised = ", ".join(f"`{code}` ({'note' if sev == Severity.INFO.value else sev})" for code, sev in o.codes)
    return f"`{o.status}`{judged}, raising {raised}"


def _example_lines(c: Check, example: ExampleDoc | None) -> list[str]:
    lines = ["## Example", ""]
    if example is None:
        return lines + ["No example is registered for this check.", ""]
    lines += ["The embedded example drafter (`eagle3-checks demo` writes it), gated for this check only "
              f"(`eagle3-checks explain {c.id}` runs the same).", ""]
    for label, text, outcome in (("Fails", example.fails, example.failing),
                                 ("Passes", example.passes, example.passing)):
        lines.append(f"- **{label}:** {_text(text)}" + (f": {_outcome(outcome)}." if outcome is not None else "."))
    if example.not_gated:
        lines += ["", f"Not gated when these pages are generated: {_text(example.not_gated)}."]
    return lines + [""]


def page(c: Check, example: ExampleDoc | None) -> str:
    """The page of check ``c``: what, why, where it runs, its example, the fix, its codes, the field evidence."""
    lines = [f"# `{c.id}`", "",
             f"<!-- generated by {COMMAND} from the check's registration and its example: edit those, then "
             "regenerate -->", "",
             f"**{_text(c.title)}.**", "",
             "## Guards against", "", _text(c.guards) if c.guards else "Not stated.", "",
             "## Where it runs", "",
             f"- **Level:** `{c.level}`" + (" (it needs torch)" if c.requires or c.level == "forward" else "")
             + ": see [Levels](../checks.md#levels).",
             f"- **Needs:** {_needs(c)}." if c.needs else "- **Needs:** nothing beyond the checkpoint.",
             (f"- **Engines:** one result per `--engine` release, reported as `{c.id}[ENGINE]`: see "
              "[Engines](../engines.md).") if c.per_engine else "- **Engines:** engine-independent (one result).",
             ]
    if c.modelled_only:
        lines.append("- **Drafters:** the modelled families only; skipped, with the reason, for a drafter family "
                     "eagle3-checks does not model.")
    lines.append("")
    lines += _example_lines(c, example)
    lines += ["## Fix", "", _text(_sentence(c.fix)) if c.fix else "No usual remedy is recorded.", ""]
    lines += ["## Codes", "",
              "Each finding carries one (`--waive CODE=REASON` waives it; `eagle3-checks explain CODE` prints its "
              "meaning). A note is reported and never fails the gate.", "",
              "| code | severity | meaning |", "|---|---|---|"]
    lines += [f"| `{code}` | {_kind(d)} | {_text(d.meaning, cell=True)} |" for code, d in c.declared.items()]
    lines += ["", "## Seen in the field", ""]
    lines += [f"- {_text(e)}" for e in c.evidence] or ["No field evidence is recorded."]
    return "\n".join(lines) + "\n"


def nav(checks: Iterable[Check]) -> str:
    """The generated lines of mkdocs.yml's Checks section: one page per check, in the registry's order."""
    return "".join(f"    - {c.id}: {page_name(c.id)}\n" for c in checks)


# ----- the examples, gated ------------------------------------------------------------------------------------------

def example_doc(c: Check) -> ExampleDoc | None:
    """The check's example, both sides gated for it (described only for a check that needs torch: its outcome would
    depend on whether torch is installed)."""

    if c.id not in EXAMPLES:
        return None
    e = EXAMPLES[c.id]
    if c.requires is not None or c.level == "forward":
        return ExampleDoc(e.fails, e.passes, not_gated="the forward level runs the drafter with torch")

    def outcome(failing: bool) -> Outcome:
        r = run_example(c.id, failing)
        found = dict.fromkeys((f.code or c.id, f.severity.value) for f in r.findings)
        return Outcome(r.status, r.engine, tuple(found))

    return ExampleDoc(e.fails, e.passes, outcome(True), outcome(False))


def documented() -> list[Check]:
    """The checks the committed docs describe: the built-in ones, in the registry's order."""

    return [c for c in all_checks() if builtin(c)]


def pages(checks: Sequence[Check], examples: Callable[[Check], ExampleDoc | None] = example_doc) -> dict[str, str]:
    """``docs/``-relative path -> text of every check page."""
    return {page_name(c.id): page(c, examples(c)) for c in checks}


def releases_table(listed: Sequence[dict]) -> str:
    """The modelled releases (:func:`eagle3_checks.engines.catalogue`) as the table ``docs/engines.md`` carries
    between its markers: a row per release, with the profile that judges it."""
    rows = ["| release | released | judged by | how it is known | differs from the profile's own release |",
            "|---|---|---|---|---|"]
    for entry in listed:
        for r in entry["releases"]:
            how = r["how"]
            differs = "; ".join(f"`{k}={v!r}`" for k, v in r["differs"].items())
            why = f": {_text(r['why'], cell=True)}" if r["why"] else ""
            rows.append(f"| `{entry['name']}@{r['version']}` | {r['released'] or 'not released'} | `{entry['module']}` "
                        f"({entry['kind']}) | {how} | {differs + why if differs else ''} |")
    return "\n".join(rows) + "\n"


MATRIX_BEGIN = "<!-- generated: the engine profiles (python -m eagle3_checks.check_docs) -->"
MATRIX_END = "<!-- end generated -->"


def engine_matrix() -> str:
    """The README's engine matrix, from the profiles themselves: for each modelled release, which of the embedded
    example's layouts it builds a drafter from, where it reads the aux-layer ids, and how the release is known."""
    rows = ["| engine | release | loads the example (flat / speculators) | aux-layer ids read from | known by |",
            "|---|---|---|---|---|"]
    for p in PROFILES:
        loads = []
        for layout in (FLAT, SPECULATORS):
            r = _read_example(p, layout)
            loads.append("yes" if r.layout_ok and not r.class_refusal and not r.not_modelled else "no")
        how = ", ".join(sorted({r.how for r in p.holds_for}))
        rows.append(f"| {p.name} | {p.range} | {' / '.join(loads)} | {_text(p.reads_ids, cell=True)} | {how} |")
    return "\n".join(rows) + "\n"


def _read_example(p, layout: str):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return p.read(open_checkpoint(Draft.example(layout).save(Path(tmp) / layout)))


# ----- the committed files ------------------------------------------------------------------------------------------

def splice(text: str, begin: str, end: str, block: str, where: str) -> str:
    """``text`` with the lines between the ``begin`` and ``end`` marker lines replaced by ``block``."""
    lines = text.splitlines(keepends=True)
    try:
        start = next(i for i, ln in enumerate(lines) if ln.rstrip("\n") == begin)
        stop = next(i for i, ln in enumerate(lines) if i > start and ln.rstrip("\n") == end)
    except StopIteration:
        raise ValueError(f"{where}: no {begin!r} ... {end!r} markers") from None
    return "".join(lines[:start + 1]) + block + "".join(lines[stop:])


def expected(root: Path, checks: Sequence[Check] | None = None,
             examples: Callable[[Check], ExampleDoc | None] = example_doc) -> dict[str, str]:
    """Every generated file under ``root`` (the project: ``docs/`` and ``mkdocs.yml``), root-relative path -> the text
    it must hold. The tables are spliced into the current ``docs/checks.md`` and ``mkdocs.yml``."""
    checks = documented() if checks is None else list(checks)
    files = {f"docs/{name}": text for name, text in pages(checks, examples).items()}
    index = root / "docs" / "checks.md"
    files["docs/checks.md"] = splice(index.read_text(encoding="utf-8"), TABLE_BEGIN, TABLE_END,
                                     table(checks), "docs/checks.md")
    engines_page = root / "docs" / "engines.md"
    files["docs/engines.md"] = splice(engines_page.read_text(encoding="utf-8"), RELEASES_BEGIN, RELEASES_END,
                                      releases_table(catalogue()), "docs/engines.md")
    readme = root / "README.md"
    files["README.md"] = splice(readme.read_text(encoding="utf-8"), MATRIX_BEGIN, MATRIX_END, engine_matrix(),
                                "README.md")
    config = root / "mkdocs.yml"
    files["mkdocs.yml"] = splice(config.read_text(encoding="utf-8"), NAV_BEGIN, NAV_END, nav(checks), "mkdocs.yml")
    return files


def stale(root: Path, files: dict[str, str] | None = None) -> list[str]:
    """The root-relative paths that differ from what generation gives: a page missing, changed or extra (a page in
    ``docs/checks/`` of no check), ``docs/checks.md``'s table, the nav. Empty when the committed files are current."""
    files = expected(root) if files is None else files
    differ = [name for name, text in files.items()
              if not (root / name).is_file() or (root / name).read_text(encoding="utf-8") != text]
    extra = [f"docs/{PAGES}/{p.name}" for p in sorted((root / "docs" / PAGES).glob("*.md"))
             if f"docs/{PAGES}/{p.name}" not in files]
    return sorted(differ + extra)


def write(root: Path) -> list[str]:
    """Regenerate the files under ``root``; returns the paths written or removed."""
    files = expected(root)
    changed = stale(root, files)
    (root / "docs" / PAGES).mkdir(parents=True, exist_ok=True)
    for name in changed:
        path = root / name
        if name in files:
            path.write_text(files[name], encoding="utf-8")
        else:
            path.unlink()
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 1 or args[:1] in (["-h"], ["--help"]):
        print(f"usage: {COMMAND} [ROOT]\n\nregenerate the check pages (docs/checks/*.md), the table in "
              "docs/checks.md and the Checks nav of mkdocs.yml under ROOT (default: .)", file=sys.stderr)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    root = Path(args[0] if args else ".")
    changed = write(root)
    print("\n".join(f"wrote {name}" for name in changed) if changed else "the check docs are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
