"""eagle3-checks fix: the gate's own config fixes, as data, applied; and the property that following them converges.

A finding whose remedy is a config edit carries it as JSON Patch operations (``Finding.patch``); ``fix`` applies
them, gates again, and writes a copy. Following the gate's advice must never go in circles: at most three rounds
end with the gate passing or with findings no config edit fixes, never with one a previous round's fix created,
and ``fix`` of its own output changes nothing.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eagle3_checks.cli import main
from eagle3_checks.convert import convert
from eagle3_checks.drafter.example import EXAMPLE, target_config
from eagle3_checks.fix import MAX_ROUNDS, apply_patch, plan_fixes
from eagle3_checks.gate import gate_checkpoint, parse_options
from eagle3_checks.storage.checkpoint import open_checkpoint
from eagle3_checks.strategies import drafters
from helpers import run

BOTH = "vllm,sglang"


def failing(result) -> set[str]:
    return {r.label for r in result.results if r.status in ("failed", "warned")}


def converges(path: Path, **options) -> None:
    """Applying the gate's fixes converges: nothing refused as circular or conflicting, nothing fixable left, no
    check failing that did not fail before, and a second pass changes nothing."""
    options = parse_options(reference="none", level="header", **options)
    src = open_checkpoint(path)
    before = failing(gate_checkpoint(src, options))
    config, done = plan_fixes(src, options)
    assert done.rounds <= MAX_ROUNDS and not done.refused, done.refused
    assert not [f for f in done.left if f.patch], [f"{f.check}: {f.message}" for f in done.left if f.patch]
    assert failing(done.result) <= before, failing(done.result) - before
    again_config, again = plan_fixes(src.with_config(config), options)
    assert not again.edits and again_config == config, [e.describe() for e in again.edits]


def test_apply_patch_adds_replaces_removes_and_creates_parents():
    config = {"a": 1, "eagle_config": {"x": [1]}}
    out = apply_patch(config, [{"op": "add", "path": "/eagle_config/x", "value": [2]},
                               {"op": "add", "path": "/p/q", "value": True}, {"op": "remove", "path": "/a"},
                               {"op": "remove", "path": "/nope/b"}])
    assert out == {"eagle_config": {"x": [2]}, "p": {"q": True}} and config == {"a": 1, "eagle_config": {"x": [1]}}


def test_findings_carry_their_config_fix_as_data(drafter, capsys):
    d = drafter("flat")
    del d.config["head_dim"]
    path = d.write()
    r = run(path, level="header").result("config.head-dim")
    assert r.findings[0].patch == ({"op": "add", "path": "/head_dim", "value": 24},)
    main(["check", str(path), "--level", "header", "--reference", "none", "--format", "json"])
    checks = json.loads(capsys.readouterr().out)["checkpoints"][0]["checks"]
    found = {c["id"]: c["findings"] for c in checks}
    assert found["config.head-dim"][0]["patch"] == [{"op": "add", "path": "/head_dim", "value": 24}]
    assert found["keys"] == [] or all("fixable_by_config" in f for f in found["keys"])
    main(["check", str(path), "--level", "header", "--reference", "none"])
    assert "patch:    head_dim = 24 (eagle3-checks fix applies it)" in capsys.readouterr().out
    missing = drafter("flat")
    del missing.tensors["norm.weight"]
    keys = run(missing.write(), level="header").result("keys").findings[0]
    assert keys.patch is None and keys.to_dict()["fixable_by_config"] is False


def test_the_specforge_export_served_by_both_engines(drafter, target_path, tmp_path, capsys):
    """Ids in eagle_config only (as SpecForge exports): SGLang reads them, vLLM 0.33 does not. fix writes the
    top-level ids that capture the same layers for vLLM (its convention is one apart), and both engines pass."""
    d = drafter("flat")
    del d.config["eagle_aux_hidden_state_layer_ids"]
    src = d.write()
    args = ["--engine", BOTH, "--aux-convention", "sglang", "--target-config", str(target_path), "--level", "header",
            "--reference", "none"]
    assert main(["check", str(src), *args]) == 1
    capsys.readouterr()
    assert main(["fix", str(src), str(tmp_path / "fixed"), *args]) == 0
    out = capsys.readouterr().out
    assert "1 config edit(s) in 1 round(s)" in out
    assert "engine.aux-layers[vllm@0.33.0]: eagle_aux_hidden_state_layer_ids = [2, 4, 6]" in out
    assert "left: nothing" in out
    fixed = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert fixed["eagle_aux_hidden_state_layer_ids"] == [2, 4, 6]
    assert fixed["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]
    assert json.loads((src / "config.json").read_text()) == d.config  # SRC untouched
    tail = (src / "model.safetensors").read_bytes()[-4096:]
    assert (tmp_path / "fixed" / "model.safetensors").read_bytes()[-4096:] == tail
    assert main(["check", str(tmp_path / "fixed"), *args]) == 0
    capsys.readouterr()
    assert main(["fix", str(tmp_path / "fixed"), str(tmp_path / "again"), *args]) == 0
    assert "0 config edit(s)" in capsys.readouterr().out


def test_circular_case_two_lists_each_right_for_its_engine(drafter, target_path):
    """The vLLM fix written at the top level while eagle_config keeps SGLang's ids serves both: config.aux-layers
    no longer asks for one list in both places (which undid the fix)."""
    d = drafter("flat")
    d.config["eagle_aux_hidden_state_layer_ids"] = [2, 4, 6]
    converges(d.write(), engine=BOTH, aux_convention="sglang", target_config=str(target_path))
    assert run(d.root, engine=BOTH, aux_convention="sglang", target_config=str(target_path)).exit_code == 0


def test_circular_case_a_drafter_converted_from_speculators(drafter, target_path, tmp_path):
    """The flat copy convert writes counts the vLLM way (its provenance says so): SGLang needs [0, 2, 4] in
    eagle_config, and once they are there the trained layers still come from the top level, where vLLM's ids stay:
    the advice does not chase itself ("trained on layers [-1, 1, 3]")."""
    flat = tmp_path / "flat"
    convert(drafter("speculators").write(), flat, "vllm", verify_level="header")
    options = dict(engine=BOTH, target_config=str(target_path))
    r = run(flat, **options).result("engine.aux-layers", "sglang")
    assert r.status == "failed" and r.findings[0].patch == (
        {"op": "add", "path": "/eagle_config/eagle_aux_hidden_state_layer_ids", "value": [0, 2, 4]},)
    converges(flat, **options)
    src = open_checkpoint(flat)
    config, done = plan_fixes(src, parse_options(reference="none", **options))
    assert done.rounds == 1 and done.result.exit_code == 0


def test_semantics_never_advises_what_the_config_already_states(tmp_path, drafter):
    """SGLang has no norm_before_residual: a config stating it true cannot be fixed by stating it again, and the
    trainer the provenance names is the one the finding names."""
    flat = tmp_path / "flat"
    convert(drafter("speculators", replace(EXAMPLE, norm_before_residual=True)).write(), flat, "vllm",
            verify_level="header")
    f = run(flat, engine="sglang", level="header").result("engine.semantics", "sglang").findings[0]
    assert f.patch is None and "config.json already states it" in f.fix
    assert "speculators (trainer)" in f.why and "specforge" not in f.why


@pytest.mark.parametrize("layout", ["flat", "speculators"])
@pytest.mark.parametrize("engine", ["vllm", "sglang", "sglang@0.5.6", BOTH, "all"])
@pytest.mark.parametrize("convention", [None, "vllm", "sglang"])
def test_the_examples_converge(drafter, target_path, layout, engine, convention):
    converges(drafter(layout).write(), engine=engine, aux_convention=convention, target_config=str(target_path))


@settings(max_examples=25, deadline=None)
@given(case=drafters(), engine=st.sampled_from(["vllm", "sglang", BOTH, "all", "vllm,sglang@0.5.6"]),
       convention=st.sampled_from([None, "vllm", "sglang"]), with_target=st.booleans())
def test_drawn_drafters_converge(tmp_path_factory, case, engine, convention, with_target):
    root = tmp_path_factory.mktemp("drawn")
    path = case.write(root / "drafter")
    target = None
    if with_target:
        target = root / "target.json"
        target.write_text(json.dumps(target_config(case.shape)))
    converges(path, engine=engine, aux_convention=convention, target_config=str(target) if target else None)


def test_fix_refuses_what_convert_refuses(drafter, tmp_path, capsys):
    src = drafter("flat").write()
    assert main(["fix", str(src), str(src)]) == 2
    assert "DST" in capsys.readouterr().err
    assert main(["fix", str(tmp_path / "nope"), str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


CORPUS = Path(__file__).parent / "corpus"


@pytest.mark.parametrize("case", json.loads((CORPUS / "cases.json").read_text())["cases"], ids=lambda c: c["name"])
def test_the_corpus_converges(drafter, case):
    """The fuzz corpus (broken configs and files the gate must survive): the gate's fixes converge there too."""
    d = drafter(case.get("layout") or "flat")
    path = d.write()
    (path / case["replaces"]).write_bytes((CORPUS / case["file"]).read_bytes())
    converges(path, engine=BOTH)
