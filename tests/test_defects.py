"""One defect of the catalogue (eagle3_checks/defects.py) at a time, injected into an otherwise clean tiny drafter of
each layout it applies to: the gate fails with every finding code the catalogue says the defect must raise. What those
findings say is held by the golden file tests/golden/defects.txt. Clean drafters of every shape pass."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from eagle3_checks.defects import CATALOGUE, DEFECTS, example_data
from eagle3_checks.gate import all_checks
from helpers import CLEAN, LAYOUTS, assert_clean, assert_fails, assert_golden, run, write_defect

CASES = [pytest.param(defect, layout, id=f"{defect.name}-{layout}") for defect in CATALOGUE
         for layout in defect.layouts]
BY_ID = {c.id: c for c in all_checks()}
DATA = Path(tempfile.mkdtemp(prefix="eagle3-example-data-"))  # the defects' recorded states, per worker
atexit.register(shutil.rmtree, DATA, True)  # removed when the worker ends


def runnable(code: str) -> bool:
    """Whether the check of ``code`` can run here (forward.equivalence needs torch)."""
    c = BY_ID[code.partition("/")[0]]
    return not (c.requires and c.requires())


def gate_defect(drafter, target_path, defect, layout):
    """The gate (every level; --strict, so that a defect whose code is a warning fails it) on the defect; one gated
    on recorded states gets the clean example's own (written once per session and layout)."""
    data = example_data(layout, DATA) if defect.data and runnable(defect.code) else None
    if defect.data and data is None:  # no torch here: the defect's acceptance-level codes cannot be judged
        return run(write_defect(drafter(layout), defect), strict=True,
                   **{k: v for k, v in defect.gate_options(target_path, "-").items() if k != "data"})
    return run(write_defect(drafter(layout), defect), strict=True, **defect.gate_options(target_path, data))


@pytest.mark.parametrize("defect, layout", CASES)
def test_defect_raises_its_codes(drafter, target_path, defect, layout):
    result = gate_defect(drafter, target_path, defect, layout)
    assert result.exit_code == 1
    for code in defect.codes:
        if runnable(code):
            assert_fails(result, code)


def test_the_catalogue_names_codes_its_checks_declare():
    for defect in CATALOGUE:
        assert defect.name == defect.name.lower() and " " not in defect.name and "_" not in defect.name, defect.name
        assert defect.layouts and set(defect.layouts) <= set(LAYOUTS), defect.name
        for code in defect.codes:
            check_id = code.partition("/")[0]
            assert check_id in BY_ID and code in BY_ID[check_id].meanings, (defect.name, code)
    assert len(DEFECTS) == len(CATALOGUE)


def said(f) -> str:
    """A finding as the golden file holds it: its code (with the engine), its basis, message and fix."""
    return f"{f.code_label} ({f.basis}): {f.message}" + (f"\n    fix: {f.fix}" if f.fix else "")


def test_what_the_defects_findings_say_is_the_golden_file(drafter, target_path):
    """Each defect's findings of its codes, message and fix (regenerate with pytest --update-goldens). Not the
    forward and acceptance levels': they need torch, and the figures they state depend on its build."""
    lines = []
    for defect in CATALOGUE:
        for layout in defect.layouts:
            result = gate_defect(drafter, target_path, defect, layout)
            lines += sorted({f"{defect.name} [{layout}] {said(f)}" for f in result.findings()
                             if f.code in defect.codes and f.severity.value != "info"
                             and BY_ID[f.code.partition("/")[0]].level not in ("forward", "acceptance")})
    text = "\n".join(lines) + "\n"
    assert_golden("defects.txt", text)


def test_every_finding_of_the_defects_has_its_checks_declared_code(drafter, target_path):
    """The gate over every defect of the catalogue (both layouts, header and scan levels, every engine): each
    finding's code is CHECK_ID/SLUG of its own check, declared there (tests/test_codes.py holds every site to it
    statically)."""
    seen = set()
    for defect in CATALOGUE:
        for layout in defect.layouts:
            path = write_defect(drafter(layout), defect)
            result = run(path, level="scan", engine="all", target_config=str(target_path),
                         reference=defect.options.get("reference", "auto"))
            for r in result.results:
                for f in r.findings:
                    check_id, _, slug = (f.code or "").partition("/")
                    assert check_id == r.check.id and f.code in r.check.meanings, (r.label, f.code, f.message)
                    seen.add(f.code)
    assert {"vocab.d2t/arange", "vocab.t2d/absolute-ids", "config.head-dim/missing", "engine.loads/narrowed",
            "files/truncated", "keys/missing-tensor"} <= seen


# A speculators config cannot tell vLLM 0.33 about 4 aux states of a wider target (fc is sized from eagle_config
# only): that drafter is clean in the flat layout only (see test_forward.test_wider_target_four_aux_layers).
CLEAN_CASES = [pytest.param(layout, case, id=f"{case[0]}-{layout}") for case in CLEAN for layout in LAYOUTS
               if not (layout == "speculators" and case[0].startswith("fc_norm, 4 aux"))]


@pytest.mark.parametrize("layout, case", CLEAN_CASES)
def test_clean_drafters_pass(drafter, tmp_path, layout, case):
    _, shape, shards = case
    # a flat one names its trainer: speculators' config beside it, or (a wider target, which speculators cannot
    # train) --trainer and the convention its top-level ids are written in
    d = drafter(layout, shape, trained=not shape.target_hidden_size)
    stated = {"trainer": "specforge@0.2.0", "aux_convention": "vllm"} if shape.target_hidden_size else {}
    if shape.target_hidden_size:
        d.config["num_aux_hidden_states"] = len(shape.aux_layer_ids)  # what vLLM sizes a flat drafter's fc from
    path = d.write(shards)
    target = tmp_path / f"target-{layout}.json"
    target.write_text(json.dumps({"num_hidden_layers": shape.target_layers, "hidden_size": shape.ht,
                                  "vocab_size": shape.vocab_size}))
    result = run(path, target_config=str(target), level="header", **stated)
    assert_clean(result)
    skipped = {r.check.id for r in result.results if r.status == "skipped"}
    assert skipped <= {"reference.diff", "vocab.d2t", "vocab.t2d"}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_example_passes_its_shipped_spec_under_auto(drafter, layout):
    result = run(drafter(layout, trained=True).write(), reference="auto", strict=True)
    assert result.reference_name == "tiny-example"
    assert result.result("reference.diff").status == "passed"
    assert result.exit_code == 0
