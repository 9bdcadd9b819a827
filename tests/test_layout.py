"""The package's structure holds: no module imports a sibling inside a function (the way a hidden import cycle is
broken), and importing any module never imports torch (only a forward pass does)."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import eagle3_checks

PACKAGE = pathlib.Path(eagle3_checks.__file__).parent


def _modules() -> list[pathlib.Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_sibling_is_imported_inside_a_function():
    offenders = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
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
