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
from hypothesis import event, given, settings
from hypothesis import strategies as st

from eagle3_checks import engines
from eagle3_checks.basis import KNOWN
from eagle3_checks.cli import main
from eagle3_checks.convert import convert
from eagle3_checks.defects import CATALOGUE
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.example import EXAMPLE, target_config
from eagle3_checks.fix import MAX_ROUNDS, apply_patch, plan_fixes
from eagle3_checks.gate import gate_checkpoint, load_target, parse_options
from eagle3_checks.strategies import drafters
from helpers import assert_golden, run, write_defect

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
    # only what the checkpoint, an engine's own code or the data says is applied
    assert all(e.basis in KNOWN for e in done.edits + done.repairs), [(e.describe(), e.basis) for e in done.edits]
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
            "--reference", "none", "--trainer", "specforge@0.2.0"]
    assert main(["check", str(src), *args]) == 1
    capsys.readouterr()
    assert main(["fix", str(src), str(tmp_path / "fixed"), *args]) == 0
    said = capsys.readouterr().out.partition("\n\n")[0]  # what fix did (then the gate's report of the copy)
    fixed = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert fixed["eagle_aux_hidden_state_layer_ids"] == [2, 4, 6]
    assert fixed["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]
    assert json.loads((src / "config.json").read_text()) == d.config  # SRC untouched
    tail = (src / "model.safetensors").read_bytes()[-4096:]
    assert (tmp_path / "fixed" / "model.safetensors").read_bytes()[-4096:] == tail
    assert main(["check", str(tmp_path / "fixed"), *args]) == 0
    capsys.readouterr()
    assert main(["fix", str(tmp_path / "fixed"), str(tmp_path / "again"), *args]) == 0
    assert not (tmp_path / "again").exists()
    # the edit (1 in 1 round, vLLM's ids at the top level) and nothing left; then, of the fixed copy, nothing written
    said += "\n---\n" + capsys.readouterr().out.partition("\n\n")[0]
    assert_golden("test_fix/test_the_specforge_export_served_by_both_engines.txt", said, {"TMP": tmp_path})


def test_circular_case_two_lists_each_right_for_its_engine(drafter, target_path):
    """The vLLM fix written at the top level while eagle_config keeps SGLang's ids serves both: config.aux-layers
    no longer asks for one list in both places (which undid the fix)."""
    d = drafter("flat")
    d.config["eagle_aux_hidden_state_layer_ids"] = [2, 4, 6]
    converges(d.write(), engine=BOTH, aux_convention="sglang", target_config=str(target_path))
    assert run(d.root, engine=BOTH, aux_convention="sglang", target_config=str(target_path)).exit_code == 0


def test_circular_case_a_drafter_converted_from_speculators(drafter, target_path, tmp_path):
    """The flat copy convert writes serves both engines as trained (vLLM's ids at the top level, SGLang's [0, 2, 4]
    in eagle_config, the trained layers held in the provenance): nothing is left to fix, and a fix that rewrites
    eagle_config anyway still judges from the trained layers [0, 2, 4] (it once read [-1, 1, 3] back)."""
    flat = tmp_path / "flat"
    convert(drafter("speculators").write(), flat, "vllm", verify_level="header")
    options = dict(engine=BOTH, target_config=str(target_path))
    assert run(flat, **options).exit_code == 0
    converges(flat, **options)
    config, done = plan_fixes(open_checkpoint(flat), parse_options(reference="none", **options))
    assert done.rounds == 0 and done.result.exit_code == 0


def test_semantics_never_advises_what_the_config_already_states(tmp_path, drafter):
    """SGLang has no norm_before_residual: a config stating it true cannot be fixed by stating it again, and the
    trainer the provenance names is the one the finding names."""
    flat = tmp_path / "flat"
    convert(drafter("speculators", replace(EXAMPLE, norm_before_residual=True)).write(), flat, "vllm",
            verify_level="header")
    f = run(flat, engine="sglang", level="header").result("engine.semantics", "sglang").findings[0]
    assert f.patch is None
    # the fix says config.json already states it; the why names speculators (trainer), not SpecForge
    assert_golden("test_fix/test_semantics_never_advises_what_the_config_already_states.txt",
                  f"{f.code}\n{f.message}\nwhy: {f.why}\nfix: {f.fix}\n", {"TMP": tmp_path})


@pytest.mark.parametrize("layout", ["flat", "speculators"])
@pytest.mark.parametrize("engine", ["vllm", "sglang", "sglang@0.5.6", BOTH, "all"])
@pytest.mark.parametrize("convention", [None, "vllm", "sglang"])
def test_the_examples_converge(drafter, target_path, layout, engine, convention):
    converges(drafter(layout).write(), engine=engine, aux_convention=convention, target_config=str(target_path))


@settings(settings.get_profile("fix"))  # fewer examples than the profile's: conftest.py EXAMPLES
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


# the catalogue's layouts, and the flat one as convert and the embedded example write it: with the speculators
# config it was converted from kept beside it (config_speculators.json), from which its trainer reading is read
BESIDE = "flat-beside"


CATALOGUE_CASES = [(d, layout) for d in CATALOGUE
                   for layout in (*d.layouts, *((BESIDE,) if "flat" in d.layouts else ()))
                   if not d.in_options and not d.data and not d.replay]


@pytest.mark.parametrize("defect, layout", CATALOGUE_CASES, ids=[f"{d.name}-{layout}" for d, layout in CATALOGUE_CASES])
def test_the_catalogue_converges_and_breaks_no_verdict(drafter, target_path, defect, layout):
    """Every defect of the catalogue, gated for vLLM and SGLang with the example's target: following the fixes never
    fails a check that passed, applies only what rests on read, recorded or measured evidence, and a second fix
    changes nothing. The flat drafter with its speculators config beside it too: fix once wrote head_dim into a
    transformer_layer_config of the flat config.json (where the trainer's layout keeps it), and the drafter then read
    as speculators' layout (head-dim-missing: 7 errors of one cause before, 25 after)."""
    path = write_defect(drafter("flat", trained=True) if layout == BESIDE else drafter(layout), defect)
    options = {k: v for k, v in defect.options.items() if k in ("aux_convention", "trainer")}
    converges(path, engine=BOTH, target_config=str(target_path), **options)


def test_fix_refuses_what_convert_refuses(drafter, tmp_path, capsys):
    src = drafter("flat").write()
    assert main(["fix", str(src), str(src)]) == 2
    assert_golden("test_fix/test_fix_refuses_what_convert_refuses.txt", capsys.readouterr().err, {"TMP": tmp_path})
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


# ----- aux ids on every target family: the trained layers are held, never re-derived from an edited field --------

FAMILIES = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM", "deepseek-v3": "DeepseekV3ForCausalLM",
            "gpt-oss": "GptOssForCausalLM"}
PLACEMENTS = ("nested", "both", "top")


def _placed(drafter, ids: list[int], place: str) -> Path:
    d = drafter("flat")
    d.config.pop("eagle_aux_hidden_state_layer_ids")
    d.config["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")
    if place in ("nested", "both"):
        d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    if place in ("top", "both"):
        d.config["eagle_aux_hidden_state_layer_ids"] = ids
    return d.write()


def _deep_target(tmp_path: Path, arch: str) -> Path:
    path = tmp_path / f"{arch}.json"
    path.write_text(json.dumps({**target_config(EXAMPLE), "architectures": [arch], "num_hidden_layers": 61}))
    return path


@pytest.mark.parametrize("family", FAMILIES)
def test_aux_fixes_converge_on_every_target_family(drafter, tmp_path, family):
    """Every target family (SGLang 0.5.23 counts Llama/Qwen3 +1, DeepSeek-V3/Kimi raw unless the first id is 1,
    GPT-OSS raw when the largest id is N: SG23 models/llama.py:929-941, deepseek_v2.py:3458-3473,
    gpt_oss.py:1337-1352), both trainer conventions, ids nested, in both places or top-level only, Kimi-K2's own
    [2, 30, 58] (which is also the engines' default for 61 layers), ids that are not a default, a first id 0 (the
    embeddings' output under vLLM's counting, which no SGLang id reaches: no edit is proposed for it, where one used
    to be proposed round after round), a first id 1 (SGLang's switch to +1 on DeepSeek-style targets) and a last id
past the target's last layer (GPT-OSS counts it raw; no edit reaches a layer that is not there): one round,
    a second fix changes nothing, the layers held in the provenance are the trained ones, and every engine whose ids
    were written captures them (but a layer the target lacks)."""
    target = _deep_target(tmp_path, FAMILIES[family])
    for convention in ("vllm", "sglang"):
        for place in PLACEMENTS:
            for ids, engine in [(ids, engine) for ids in ([2, 30, 58], [4, 20, 40]) for engine in (BOTH, "all")] \
                    + [([0, 30, 59], BOTH), ([1, 30, 59], BOTH), ([2, 30, 61], BOTH)]:
                path = _placed(drafter, ids, place)
                converges(path, engine=engine, aux_convention=convention, target_config=str(target))
                options = parse_options(reference="none", level="header", engine=engine,
                                        aux_convention=convention, target_config=str(target))
                src = open_checkpoint(path)
                config, done = plan_fixes(src, options)
                assert done.rounds <= 1, (convention, place, ids)
                counted_by = engines.target_of(src, load_target(str(target)))
                trained = engines.trained_aux(src, convention, counted_by).layers
                held = config.get("eagle3_checks_provenance", {}).get("trained_aux")
                assert held is None or tuple(held["layers"]) == trained, (convention, place, ids, held)
                written = engines.ids_where_read(("vllm", "sglang"), trained, counted_by)
                aux = {r.engine.split("@")[0]: (r.status, {f.code for f in r.findings}) for r in done.result.results
                       if r.check.id == "engine.aux-layers"}
                for name in ("vllm", "sglang"):
                    status, codes = aux[name]
                    if written[engines.profile(name).ids_pointer] is None:
                        assert status == "failed", (convention, place, ids, name, aux)
                    else:  # captured as trained, unless a trained layer is not in the target at all
                        assert status == "passed" or codes <= {"engine.aux-layers/beyond-last-layer"}, \
                            (convention, place, ids, name, aux)


def test_the_kimi_k2_drafter_on_its_deepseek_target(drafter, tmp_path, capsys):
    """The case of this project's story: trained the SGLang way on [2, 30, 58] (the outputs of layers 2, 30, 58),
    ids in eagle_config only, a DeepSeek-V3 target of 61 layers. SGLang 0.5.23 uses these ids raw (SG23
    models/deepseek_v2.py:3458-3473) and vLLM reads the top level as inputs: both need [3, 31, 59]. The fix writes
    them in both places and holds the trained layers in the provenance, so the gate on the fixed copy does not ask
    for [4, 32, 60] (it did: the trained layers were re-read from the rewritten eagle_config)."""
    src = _placed(drafter, [2, 30, 58], "nested")
    target = _deep_target(tmp_path, "DeepseekV3ForCausalLM")
    args = ["--engine", BOTH, "--aux-convention", "sglang", "--target-config", str(target), "--level", "header",
            "--reference", "none"]
    assert main(["fix", str(src), str(tmp_path / "fixed"), *args]) == 0
    capsys.readouterr()
    fixed = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert fixed["eagle_aux_hidden_state_layer_ids"] == [3, 31, 59]
    assert fixed["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [3, 31, 59]
    assert fixed["eagle3_checks_provenance"]["trained_aux"] == {
        "ids": [2, 30, 58], "field": "eagle_config.eagle_aux_hidden_state_layer_ids", "convention": "sglang",
        "layers": [2, 30, 58]}
    assert main(["check", str(tmp_path / "fixed"), *args]) == 0
    capsys.readouterr()
    assert main(["fix", str(tmp_path / "fixed"), str(tmp_path / "again"), *args]) == 0
    assert not (tmp_path / "again").exists()  # nothing left to fix: nothing written
    assert_golden("test_fix/test_the_kimi_k2_drafter_on_its_deepseek_target.txt",
                  capsys.readouterr().out.partition("\n\n")[0], {"TMP": tmp_path})


def test_an_inferred_specforge_convention_on_a_deepseek_target_is_undecided(drafter, tmp_path):
    """SpecForge 0.2.0 captures through SGLang 0.5.14 (offline_capture/sglang_backend/capture.py:86-87; METADATA
    Requires-Dist sglang==0.5.14), which already counts DeepSeek-style targets raw (sglang 0.5.14
    srt/models/deepseek_v2.py:2799-2814), while SpecForge on an SGLang before PR #25454 counted +1: a convention
    SpecForge-trained drafter of unknown release does not say which, so neither engine is judged wrong or right, and no
    fix is advised until --aux-convention says."""
    d = drafter("flat")
    d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [4, 20, 40]
    d.config["eagle_aux_hidden_state_layer_ids"] = [4, 20, 40]
    target = _deep_target(tmp_path, "DeepseekV3ForCausalLM")
    result = run(d.write(), engine=BOTH, target_config=str(target), level="header", trainer="specforge")
    r = result.result("engine.aux-layers", "vllm")
    assert [f.code for f in r.findings] == ["engine.aux-layers/undecided"] and r.findings[0].basis == "assumed"
    assert not any(f.patch for f in r.findings)
    f = r.findings[0]  # it names SpecForge 0.2.0's counting beside the older one's
    assert_golden("test_fix/test_an_inferred_specforge_convention_on_a_deepseek_target_is_undecided.txt",
                  f"{f.message}\nwhy: {f.why}\nfix: {f.fix}\n", {"TMP": tmp_path})
    pinned = run(d.root, engine=BOTH, target_config=str(target), level="header", trainer="specforge@0.2.0")
    assert pinned.result("engine.aux-layers", "vllm").status == "passed", pinned.result("engine.aux-layers", "vllm")
    llama = _deep_target(tmp_path, "LlamaForCausalLM")
    r = run(d.root, engine=BOTH, target_config=str(llama), level="header", trainer="specforge").result(
        "engine.aux-layers", "vllm")
    assert [f.code for f in r.findings] == ["engine.aux-layers/wrong-layers"]  # +1 on Llama in every release


@pytest.mark.parametrize("layout", ["dense", "holes", "empty", "hole-at-end"])
def test_the_files_fix_copies_keep_their_bytes_and_their_holes(tmp_path, layout):
    """fix copies what it does not edit byte for byte; a sparse file (a benchmark's zero-filled Kimi-sized drafter)
    stays sparse, so a config-only fix costs what the data costs, not what the file's length does."""
    import os

    from eagle3_checks.storage.output import copy_file

    src = tmp_path / "src.bin"
    size = 64 << 20
    with open(src, "wb") as fh:
        if layout == "dense":
            fh.write(os.urandom(1 << 20))
        elif layout in ("holes", "hole-at-end"):
            fh.write(b"header")
            fh.seek(32 << 20)
            fh.write(b"\x01" * 4096)
        if layout != "dense":
            fh.truncate(size if layout != "holes" else (32 << 20) + 8192)
    copy_file(src, tmp_path / "dst.bin")
    assert (tmp_path / "dst.bin").read_bytes() == src.read_bytes()
    if layout == "hole-at-end":  # where the filesystem keeps holes, so does the copy
        assert os.stat(tmp_path / "dst.bin").st_blocks <= max(os.stat(src).st_blocks * 2, 64)


# ----- what holds under every reading is known ---------------------------------------------------------------------
# The trained layers of a drafter whose trainer is not stated are not known; its ids are. Under each counting the
# evidence leaves possible they name other layers; what a release captures from the file is one set. The verdict is
# the same under every reading -> known (an error where none is served, nothing to say where all are); different ->
# a warning naming them. fix writes only what every reading asks for.

STATEMENTS = {"unknown": {}, "vllm": {"aux_convention": "vllm"}, "sglang": {"aux_convention": "sglang"},
              "speculators": {"trainer": "speculators@0.9.0"}, "specforge": {"trainer": "specforge"},
              "specforge@0.2.0": {"trainer": "specforge@0.2.0"}}


@settings(settings.get_profile("every"))
@given(ids=st.lists(st.integers(1, 7), min_size=3, max_size=3, unique=True).map(sorted),
       place=st.sampled_from(PLACEMENTS + ("none",)), statement=st.sampled_from(list(STATEMENTS)),
       arch=st.sampled_from(["LlamaForCausalLM", "DeepseekV3ForCausalLM"]),
       engine=st.sampled_from(["vllm", "sglang", "llamacpp"]))
def test_a_verdict_on_the_aux_layers_is_an_error_only_under_every_reading(tmp_path_factory, ids, place, statement,
                                                                          arch, engine):
    from eagle3_checks.drafter.example import write_drafter
    from eagle3_checks.engines.profile import Target

    root = tmp_path_factory.mktemp("every")
    src = write_drafter(root / "d", layout="flat")
    cfg = json.loads((src / "config.json").read_text())
    cfg.pop("eagle_aux_hidden_state_layer_ids", None)
    cfg["eagle_config"].pop("eagle_aux_hidden_state_layer_ids", None)
    if place in ("nested", "both"):
        cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    if place in ("top", "both"):
        cfg["eagle_aux_hidden_state_layer_ids"] = ids
    (src / "config.json").write_text(json.dumps(cfg))
    target = root / "target.json"
    target.write_text(json.dumps({**target_config(EXAMPLE), "architectures": [arch], "num_hidden_layers": 8}))
    options = dict(engine=engine, target_config=str(target), level="header", **STATEMENTS[statement])
    result = run(src, **options)
    r = next(x for x in result.results if x.check.id == "engine.aux-layers")
    ckpt = open_checkpoint(src)
    tgt = Target(arch, 8)
    trained = engines.trained_aux(ckpt, options.get("aux_convention"), tgt,
                                  engines.identify(ckpt, None, options.get("trainer")))
    possible = trained.possible()
    verdicts = {f.code.split("/")[1] for f in r.findings}
    layer_verdicts = verdicts - {"count-mismatch", "beyond-last-layer"}
    errors = {f.code for f in r.findings if f.severity.value == "error"}
    if possible and len(set(possible.values())) > 1:  # the readings differ on which layers were trained
        # an error names every reading and rests on what was read or recorded; a warning says what settles it
        for f in r.findings:
            if f.code.endswith(("/ids-not-read", "/wrong-layers")):
                assert f.severity.value == "error" and f.basis in KNOWN and all(
                    str(list(layers)) in f.message for layers in possible.values()), f
                assert f.patch is None  # the readings ask for different ids: nothing is right under all of them
            if f.code.endswith(("/undecided", "/default-undecided")):
                assert f.severity.value == "warning" and f.settle, f
    else:  # one reading: the verdict rests on it
        assert not layer_verdicts & {"undecided", "default-undecided"} or not possible, (verdicts, possible)
    # fix never breaks a reading: under each counting, a drafter served as trained before it is served so after it
    dst = root / "fixed"
    assert main(["fix", str(src), str(dst), "--engine", engine, "--target-config", str(target), "--level", "header",
                 *[x for k, v in STATEMENTS[statement].items() for x in (f"--{k.replace('_', '-')}", v)]]) in (0, 1)
    dst = dst if dst.exists() else src  # nothing known to write: the drafter as it was
    # the countings the evidence leaves possible (a stated trainer or counting settles it; unknown leaves both)
    countings = [c for c in ("vllm", "sglang") if trained.ids and
                 engines.trainer_capture(trained.ids, c, tgt).layers in possible.values()]
    for counting in countings:
        before = {f.code for f in run(src, **{**options, "aux_convention": counting}).findings()
                  if f.severity.value == "error" and f.check.startswith("engine.aux-layers")}
        after = {f.code for f in run(dst, **{**options, "aux_convention": counting}).findings()
                 if f.severity.value == "error" and f.check.startswith("engine.aux-layers")}
        assert after == set() or before, (counting, before, after, errors)


AUX_CHECK = "engine.aux-layers"


def aux_verdict(result, engine: str) -> str | None:
    """engine.aux-layers' verdict (error, warning or pass; an id the release cannot capture or a count fc does not
    take is an error under every reading); None where the check did not judge."""
    r = result.result(AUX_CHECK, engine)
    if r is None or r.status not in ("passed", "warned", "failed"):
        return None
    kinds = {f.severity.value for f in r.findings}
    return "error" if "error" in kinds else "warning" if "warning" in kinds else "pass"


@settings(settings.get_profile("every"))
@given(defect=st.sampled_from([d for d in CATALOGUE if d.replay is None]), data=st.data(),
       statement=st.one_of(st.just("unknown"), st.sampled_from(list(STATEMENTS))),
       arch=st.sampled_from(["LlamaForCausalLM", "DeepseekV3ForCausalLM"]),
       engine=st.sampled_from(["vllm", "sglang", "llamacpp"]))
def test_over_the_defect_catalogue_the_verdict_is_the_one_every_reading_gives(tmp_path_factory, defect, data,
                                                                            statement, arch, engine):
    """Each defect of the catalogue, under each statement of who trained it (the trainer matrix) and each engine:
    the aux-layer verdict equals what gating under each counting the evidence leaves possible gives, combined: an
    error iff every counting's verdict is an error, a pass iff every one passes, a warning iff they differ. fix then
    never turns a counting's pass into an error. (Who trained it is left open half the time, and flat drafters drawn
    first: where the readings stay open.)"""
    from eagle3_checks.engines.profile import Target
    from helpers import Drafter

    layout = data.draw(st.sampled_from(sorted(defect.layouts, key=lambda x: x != "flat")))
    root = tmp_path_factory.mktemp("catalogue")
    target = root / "target.json"
    target.write_text(json.dumps({**target_config(EXAMPLE), "architectures": [arch], "num_hidden_layers": 8}))
    src = write_defect(Drafter(root / "d", layout), defect)
    told = {k: v for k, v in defect.options.items() if k not in ("aux_convention", "trainer", "target_config",
                                                                   "level", "engine")}
    options = dict(told, engine=engine, target_config=str(target), level="header", **STATEMENTS[statement])
    verdict = aux_verdict(run(src, **options), engine)
    event(f"verdict {verdict}")
    if verdict is None:  # the drafter cannot be read as far as its aux ids: nothing to combine
        return
    ckpt = open_checkpoint(src)
    tgt = Target(arch, 8)
    trained = engines.trained_aux(ckpt, options.get("aux_convention"), tgt,
                                  engines.identify(ckpt, None, options.get("trainer")))
    possible = trained.possible()
    countings = [c for c in ("vllm", "sglang") if trained.ids and
                 engines.trainer_capture(trained.ids, c, tgt).layers in possible.values()]
    each = {c: aux_verdict(run(src, **{**options, "aux_convention": c}), engine) for c in countings}
    if countings:
        kinds = set(each.values())
        expected = kinds.pop() if len(kinds) == 1 else "warning" if kinds == {"error", "pass"} else None
        event(f"readings {len(set(possible.values()))}, combined {expected}")
        if expected is not None:
            assert verdict == expected, (defect.name, statement, engine, arch, possible, each, verdict)
    # fix: no counting served as trained before it is broken by it; ids written by it serve every counting
    dst = root / "fixed"
    args = [x for k, v in STATEMENTS[statement].items() for x in (f"--{k.replace('_', '-')}", v)]
    assert main(["fix", str(src), str(dst), "--engine", engine, "--target-config", str(target), "--level", "header",
                 *args]) in (0, 1)
    if not dst.exists():
        return
    for c in countings:
        after = aux_verdict(run(dst, **{**options, "aux_convention": c}), engine)
        assert after != "error" or each[c] == "error", (defect.name, statement, engine, arch, c, each, after)
