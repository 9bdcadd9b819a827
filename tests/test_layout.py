"""The package's structure holds: no module imports a sibling inside a function (the way a hidden import cycle is
broken), and importing any module never imports torch (only a forward pass does)."""

from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys

import eagle3_checks

PACKAGE = pathlib.Path(eagle3_checks.__file__).parent


RECORDERS = PACKAGE / "live" / "recorders"  # scripts an engine's interpreter runs: never imported by the package


def _modules() -> list[pathlib.Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if RECORDERS not in p.parents)


# The ones allowed, each to keep a start-up light. The pytest plugin's entry point is imported by every pytest run
# where eagle3-checks is installed, and imports the gate only when an eagle3 option is given. The command imports the
# machinery of each command other than check when that command runs, the scan and forward checks their passes
# (numerics.value_stats, numerics.draft_steps) and the acceptance level its evaluation when they run, and a folder's
# reader the pytorch_model.bin reader when the folder has one: `check --level header` of a safetensors drafter
# imports none of them (tests/test_header_path.py).
LAZY = {("pytest_plugin.py", "pytest_configure", "plugin_gate")} | {
    (path, fn, name) for path, fn, names in (
        ("cli.py", "cmd_convert", ("ConvertRefused", "convert")),
        ("cli.py", "cmd_diff", ("compare", "render_diff_json", "render_diff_text")),
        ("cli.py", "cmd_list", ("table",)),
        ("cli.py", "_list_engines", ("releases_table", "catalogue")),
        ("cli.py", "cmd_fix", ("fix",)),
        ("cli.py", "cmd_recipe", ("recipe",)),
        ("cli.py", "_example_lines", ("EXAMPLES", "run_example")),
        ("cli.py", "cmd_demo", ("EXAMPLE_DIRS", "write_example")),
        ("cli.py", "cmd_forward", ("check_inputs_path", "run_forward_files")),
        ("cli.py", "_accept", ("AcceptanceError", "DataError", "LossMasks", "expect_of", "load_head",
                               "readings", "render_text", "samples")),
        ("cli.py", "_accept", ("render_answers",)),
        ("cli.py", "_accept", ("measure",)),
        ("cli.py", "_accept", ("evaluation",)),
        ("cli.py", "cmd_record", ("parse_layers", "rate", "record")),
        ("cli.py", "cmd_served", ("AcceptanceError", "DataError", "LossMasks", "expect_of", "load_head",
                                  "readings", "samples")),
        ("cli.py", "cmd_served", ("counters", "difference", "fetch", "judge", "predict")),
        ("cli.py", "_device", ("default_device",)),
        ("checks/scan.py", "values", ("scan", "supported")),
        ("checks/acceptance.py", "_evaluate", ("AcceptanceError", "DataError", "LossMasks", "expect_of",
                                               "load_head", "readings", "samples", "measure")),
        ("checks/acceptance.py", "trained_with", ("CONFIRMED", "CONTRADICTED", "value_text")),
        ("defects.py", "example_data", ("write_self_labelled",)),
        ("checks/_own.py", "_weights", ("Weights",)),
        ("checks/_own.py", "live_run", ("random_inputs",)),
        ("checks/_own.py", "_own_logits", ("compare",)),
        ("checks/acceptance.py", "own_logits", ("evaluated", "sample_inputs")),
        ("live/compute.py", "modelled", ("Inputs", "run")),
        ("live/compute.py", "hold", ("ForwardError",)),
        ("live/compute.py", "compare_live", ("ForwardError", "compare")),
        ("checks/forward.py", "_logits", ("run",)),
        ("checks/forward.py", "equivalence", ("ForwardError", "compare", "random_inputs")),
        ("checks/forward.py", "_other_releases", ("ForwardError", "compare")),
        ("storage/folder.py", "_read_weights", ("read_bin",)),
        ("options.py", "engines", ("resolve",)),  # the plugin reads options at every pytest start
    ) for name in names}


def test_no_sibling_is_imported_inside_a_function():
    offenders = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and any((str(path.relative_to(PACKAGE)), fn.name, a.name) in LAZY
                                                             for a in node.names):
                    continue
                if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith(
                        "eagle3_checks")):
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
                elif isinstance(node, ast.Import) and any(a.name.startswith("eagle3_checks") for a in node.names):
                    offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []


def test_importing_every_module_leaves_torch_out():
    names = [".".join(("eagle3_checks", *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
             for p in _modules() if p.name != "__main__.py"]
    code = "import sys\n" + "".join(f"import {n}\n" for n in names) + "print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_plugin_imports_nothing_of_the_gate_until_a_checkpoint_is_given(pytester):
    """pytest with eagle3-checks installed and no eagle3 option: the plugin's entry point loads its options module,
    the option table and the usage error it raises (standard library only) only; with --eagle3-ckpt the gate comes
    in."""
    pytester.makepyfile(test_probe="""
        import sys

        def test_probe():
            loaded = sorted(m for m in sys.modules if m.startswith("eagle3_checks"))
            print("LOADED", loaded, "numpy" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "-p", "no:benchmark", str(pytester.path)], capture_output=True, text=True,
                         cwd=pytester.path).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("LOADED"))
    assert line == ("LOADED ['eagle3_checks', 'eagle3_checks.errors', 'eagle3_checks.fast_dataclass', "
                    "'eagle3_checks.options', 'eagle3_checks.plugin_options', 'eagle3_checks.pytest_plugin'] False")


def _contract_layers() -> list[set[str]]:
    import tomllib

    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    assert contract["containers"] == ["eagle3_checks"] and contract["exhaustive"] is True
    return [{m.strip() for m in layer.replace(":", "|").split("|")} for layer in contract["layers"]]


def test_the_layer_contract_lists_every_top_level_module():
    """exhaustive = true makes lint-imports fail on a module left out; this says so without import-linter installed."""
    modules = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
               if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file()}
    listed = set().union(*_contract_layers())
    assert listed == modules, (sorted(modules - listed), sorted(listed - modules))


def test_the_docs_layer_map_states_the_contracts_order():
    import re

    text = (PACKAGE.parent / "docs" / "development.md").read_text(encoding="utf-8")
    section = text.split("## Layer map", 1)[1].split("\n## ", 1)[0]
    items = re.findall(r"^\d+\. (.*?):", section, re.M)
    stated = [set(re.findall(r"`([a-z_]+)`", item)) for item in items]
    assert stated == _contract_layers()


# What the forward pass and the acceptance level compute with has its own type there: a field renamed in
# engines.reading.Reading, or a checkpoint's or an embedding table's attribute, fails mypy (the strict overrides of
# eagle3_checks.numerics and eagle3_checks.acceptance in pyproject.toml), not a run. A torch tensor is
# numerics.ops.Tensor (torch is optional where the types are checked).
TYPED = {"reading", "ckpt", "checkpoint", "target", "trained", "weights", "embedding", "target_embedding", "inputs"}


def _annotations(path: pathlib.Path) -> list[tuple[str, int, str, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        args = (node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else [])
        named = [(a.arg, a.annotation, a.lineno) for a in args]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            named.append((node.target.id, node.annotation, node.lineno))
        out += [(path.name, line, name, ast.unparse(ann) if ann is not None else "")
                for name, ann, line in named if name in TYPED]
    return out


def test_the_forward_pass_names_the_type_of_what_it_computes_with():
    found = [a for folder in ("numerics", "acceptance") for p in sorted((PACKAGE / folder).glob("*.py"))
             for a in _annotations(p)]
    wrong = [a for a in found if not a[3] or "Any" in re.findall(r"\w+", a[3])]
    assert len(found) >= 20 and not wrong, wrong


def test_an_untyped_reading_in_the_forward_pass_is_caught(tmp_path):
    """What the check above reads of a reading typed Any, or left untyped, as the code had it before."""
    bad = tmp_path / "bad.py"
    bad.write_text("from typing import Any\n\ndef run(reading: Any, weights, inputs: dict[str, Any]) -> None:\n"
                   "    pass\n")
    assert [(name, ann) for _, _, name, ann in _annotations(bad)] == [("reading", "Any"), ("weights", ""),
                                                                      ("inputs", "dict[str, Any]")]


def test_no_module_of_the_engines_package_imports_the_package_itself():
    """engines/__init__.py is the package's face: it imports the release records, and a module inside the package
    that imports the face back (as engines/recorded.py did, to find a reading's profile) is a hidden cycle."""
    wrong = []
    for path in sorted((PACKAGE / "engines").glob("*.py")):
        if path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module is None and \
                    any(a.name == "engines" for a in node.names):
                wrong.append(path.name)
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "eagle3_checks" and \
                    any(a.name == "engines" for a in node.names):
                wrong.append(path.name)
    assert not wrong, wrong
