"""Engine releases: one tiny checkpoint per behaviour of the engines' loaders (rows S1-S19 for SGLang, V1-V12 for vLLM,
each citing the released wheel's file and line), passing or failing as the release's own source says, under every
release where the behaviour differs.

Citations are to the released wheels: ``SG23/`` is ``sglang/srt/`` in sglang 0.5.23, ``SG06/`` in sglang 0.5.6, ``VL/``
is ``vllm/`` in vllm 0.33.0.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial

import pytest

import helpers
from eagle3_checks import engines
from eagle3_checks.cli import main
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.config_values import read_target_config
from eagle3_checks.drafter.example import EXAMPLE, target_config
from eagle3_checks.engines.profile import Target
from eagle3_checks.errors import UsageError
from helpers import SGLANG as SGLANG_NEW
from helpers import VLLM as VLLM_NEW
from helpers import codes, goldens, run, status

golden = goldens("test_engine_releases")  # tests/golden/test_engine_releases/TEST.txt

FAILED, PASSED, SKIPPED, WARNED = "failed", "passed", "skipped", "warned"
# VLLM: the release --engine vllm means (the newest a profile holds for); the 0.33.0 profile's own is "vllm@0.33.0".
# The newest releases come from the records (engines.newest): a release added is its record and its recordings.
SG23, SG06, VLLM = f"sglang@{SGLANG_NEW}", "sglang@0.5.6", f"vllm@{VLLM_NEW}"
VLLM_RANGE = engines.profile("vllm@0.33.0").range  # "0.30.0 to" the newest release the 0.33.0 profile holds for
EVERY = f"{VLLM},{SG23},{SG06}"


gate = partial(helpers.gate, engine=EVERY)


def text(result, check, spec):
    return " | ".join(f"{f.message} {f.expected} {f.found} {f.why} {f.fix}"
                      for f in result.result(check, spec).findings)


def findings_of(result, check, *specs):
    """What ``check`` said of each release of ``specs``, for a golden file: its status, and each finding's code,
    severity, key and text."""
    lines = []
    for spec in specs:
        r = result.result(check, spec)
        lines.append(f"{check}[{spec}]: {r.status}")
        for f in r.findings:
            lines.append(f"  {f.code} ({f.severity.value}, key {f.key})")
            lines += [f"    {name}: {value}" for name in ("message", "expected", "found", "why", "fix")
                      if (value := getattr(f, name))]
    return "\n".join(lines) + "\n"


def keyed(result, check, spec):
    """code -> key of each finding of ``check`` for ``spec`` (a check reports one finding per code)."""
    return {f.code: f.key for f in result.result(check, spec).findings}


def reading(path, spec, target=None):
    return engines.read(open_checkpoint(path), spec, target)


def target_file(tmp_path, **fields):
    p = tmp_path / f"target-{len(list(tmp_path.glob('target-*')))}" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps({**target_config(EXAMPLE), **fields}))
    return p


# ----- choosing releases -------------------------------------------------------------------------------------------

def test_a_bare_name_is_the_newest_modelled_release_and_says_so(monkeypatch):
    monkeypatch.setattr(engines, "installed_version", lambda name: None)
    specs, notes, optional = engines.resolve("sglang")
    assert specs == (SG23,) and optional == ()
    assert notes == (f"sglang is not installed here: the newest modelled release, {SGLANG_NEW}",)


def test_an_installed_release_is_judged_by_its_own_profile_or_the_nearest_older(monkeypatch):
    monkeypatch.setattr(engines, "installed_version", lambda name: {"sglang": "0.5.6"}.get(name))
    assert engines.resolve("sglang")[0] == (SG06,)
    monkeypatch.setattr(engines, "installed_version", lambda name: {"sglang": "0.5.10"}.get(name))
    specs, notes, _ = engines.resolve("sglang")
    assert specs == ("sglang@0.5.10",)
    assert engines.profile("sglang@0.5.10").judged_by == "0.5.6"
    monkeypatch.setattr(engines, "installed_version", lambda name: {"sglang": "0.5.18"}.get(name))
    notes += engines.resolve("sglang")[1]
    assert engines.profile("sglang@0.5.18").judged_by == "0.5.23"
    # between two recorded releases that read drafters differently: judged as the older, with a warning
    for version, judged_as in (("0.5.10", "0.5.6"), ("0.5.18", "0.5.14")):
        judged = engines.judge("sglang", version)
        assert judged.release == judged_as and judged.warning
    # the notes: "between 0.5.6 and 0.5.14, which read drafters differently: judged as 0.5.6", and 0.5.14's
    golden("test_an_installed_release_is_judged_by_its_own_profile_or_the_nearest_older", "\n".join(notes) + "\n")
    monkeypatch.setattr(engines, "installed_version", lambda name: {"sglang": "0.6.1"}.get(name))
    assert engines.resolve("sglang")[0] == ("sglang@0.6.1",)
    assert engines.profile("sglang@0.6.1").judged_by == "0.5.23"


# ----- release ranges -----------------------------------------------------------------------------------------------

def test_a_profile_holds_for_its_recorded_releases_and_states_how_they_differ():
    """vLLM 0.30.0 to 0.32.0 are judged by the 0.33.0 profile (recorded 2026-12-03): one stated difference, their
    model runner capturing aux states for a drafter that says use_aux_hidden_state false (VL 0.32.0
    v1/worker/gpu/model_runner.py:299-307); 0.30.0 also raises the draft's max_position_embeddings for every rope
    type (0.30.0 config/speculative.py:1373-1380, 1659-1690)."""
    judged = engines.judge("vllm", "0.32.0")
    assert judged.warning is None and judged.profile.judged_by == "0.33.0" and judged.release == "0.32.0"
    assert engines.profile("vllm@0.33.0").release("0.32.0").recorded == "2026-12-03"
    assert VLLM_RANGE == f"0.30.0 to {VLLM_NEW}"
    # the note: "recorded 2026-12-03", the profile that judges it and the range it holds for
    golden("test_a_profile_holds_for_its_recorded_releases_and_states_how_they_differ", judged.note + "\n")
    assert dict(engines.profile("vllm@0.33.0").release("0.30.0").differs) == {
        "aux_when_unused": True, "any_rope": True, "speculative_fields": "0.30.0"}
    for release in ("0.31.0", "0.32.0"):
        assert dict(engines.profile("vllm@0.33.0").release(release).differs) == {"aux_when_unused": True,
                                                                                 "speculative_fields": "0.30.0"}
    assert engines.profile("vllm@0.33.0").release("0.33.0").differs == ()
    assert dict(engines.profile("vllm@0.33.0").release("0.34.0").differs) == {
        "peagle": False, "v1_runner": False, "speculative_fields": "0.34.0"}


def test_the_stated_difference_is_what_the_release_reads(drafter):
    d = drafter("flat")
    d.config["eagle_config"]["use_aux_hidden_state"] = False
    ckpt = open_checkpoint(d.write())
    assert engines.read(ckpt, "vllm@0.33.0").aux_layer_ids is None
    r = engines.read(ckpt, "vllm@0.32.0")
    assert r.aux_layer_ids == [1, 3, 5] and r.version == "0.32.0"


def test_sglang_0_5_14_is_held_by_the_0_5_23_profile_with_its_stated_differences(drafter):
    """SGLang 0.5.14 (recorded 2026-12-03; the release SpecForge 0.2.0 pins): no norm_before_fc (llama_eagle3.py:141-183
    builds no input_norm, the tensor is dropped), and GPT-OSS targets always add 1 (gpt_oss.py:1273-1285) with no
    capture after the last layer (:692-697)."""
    assert engines.judge("sglang", "0.5.14").warning is None
    assert engines.profile(SG23).range == f"0.5.14 to {SGLANG_NEW}"
    d = drafter("flat")
    d.config["norm_before_fc"] = True
    d.add("input_norm.weight", (3 * EXAMPLE.ht,))
    ckpt = open_checkpoint(d.write())
    new, old = engines.read(ckpt, SG23), engines.read(ckpt, "sglang@0.5.14")
    assert new.input_norm and "input_norm.weight" not in new.ignored
    assert not old.input_norm and "input_norm.weight" in old.ignored and old.version == "0.5.14"
    result = run(ckpt.source.path, engine="sglang@0.5.14", level="header", reference="none")
    assert "engine.loads/dropped" in {f.code for f in result.result("engine.loads", "sglang@0.5.14").findings}
    assert run(ckpt.source.path, engine=SG23, level="header", reference="none").result(
        "engine.loads", SG23).status == "passed"
    gpt_oss = Target("GptOssForCausalLM", 8)
    assert engines.profile(SG23).capture([2, 4, 8], gpt_oss).layers == (1, 3, 7)  # raw: max id == N
    got = engines.profile("sglang@0.5.14").capture([2, 4, 8], gpt_oss)
    assert got.layers == (2, 4, 8) and got.last_id == 6  # +1, and id 8 captures nothing on 8 layers


def test_vllm_0_30_0_raises_the_draft_for_every_rope_type(drafter, tmp_path):
    """A yarn drafter (4096) beside a 32768-token target: 0.31.0 on limit max_model_len to the draft's (rope_type yarn
    is not cache-only, config/speculative.py:100-113); 0.30.0 raises the draft to the target's (:1373-1380, 1659-1690
    have no rope-type check)."""
    d = drafter("flat")
    d.config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
    target = target_file(tmp_path, max_position_embeddings=32768)
    found = {spec: [f.code for f in run(d.write(), engine=spec, level="header", reference="none", max_model_len=32768,
                                        target_config=str(target)).result("engine.serving", spec).findings]
             for spec in ("vllm@0.30.0", "vllm@0.31.0")}
    assert "engine.serving/context-too-short" in found["vllm@0.31.0"], found
    assert found["vllm@0.30.0"] == ["engine.serving/context-raised"], found


def test_a_release_inside_a_range_whose_neighbours_agree_is_judged_without_a_warning(monkeypatch):
    from eagle3_checks.engines.profile import Release

    judged = engines.judge("vllm", "0.31.1")  # between 0.31.0 and 0.32.0, which read drafters alike
    assert judged.warning is None and judged.release == "0.31.0"
    said = [judged.note]  # "inside the vllm 0.33.0 profile's range (0.30.0 to NEWEST)"
    assert dict(judged.profile.release("0.31.0").differs) == {"aux_when_unused": True, "speculative_fields": "0.30.0"}
    p = engines.profile("vllm@0.33.0")
    older = Release("0.29.0", "2026-09-09", recorded="2026-12-03")  # a record without 0.30.0's differences
    monkeypatch.setattr(engines, "PROFILES", (replace(p, releases=(older, *p.releases)), *engines.PROFILES[1:]))
    judged = engines.judge("vllm", "0.29.5")
    assert judged.warning and judged.release == "0.29.0"
    said.append(judged.warning)  # "between 0.29.0 and 0.30.0, which read drafters differently"
    golden("test_a_release_inside_a_range_whose_neighbours_agree_is_judged_without_a_warning", "\n".join(said) + "\n")


@pytest.mark.parametrize("where, spec, judged_as", [
    ("between", "vllm@0.32.5", "0.32.0"),  # between 0.32.0 and 0.33.0, which read drafters differently
    ("older", "vllm@0.20.0", "0.30.0"),  # older than every recorded release
    ("newer", "vllm@0.99.0", VLLM_NEW),  # newer than every recorded release
])
def test_a_release_no_recording_covers_is_judged_as_the_nearest_with_a_warning(drafter, where, spec, judged_as):
    result = run(drafter("flat").write(), engine=spec, level="header", reference="none")
    found = [f for f in result.result("engine.release", spec).findings]
    assert [f.code for f in found] == ["engine.release/nearest"]
    assert engines.judge(*spec.split("@")).release == judged_as and found[0].found == spec.replace("@", " ")
    # the verdict rests on a recording of another release: inferred, with what would settle it
    assert found[0].basis == "inferred" and found[0].settle == f"a recording of {spec} (conformance/run.sh {spec})"
    assert found[0].rests_on
    # the message: where the release lies, "judged as" the nearest, and "conformance/run.sh SPEC"
    golden(f"test_a_release_no_recording_covers_is_judged_as_the_nearest_with_a_warning-{where}",
           found[0].message + "\n")
    covered = run(drafter("flat").write(), engine="vllm@0.32.0", level="header", reference="none")
    assert covered.result("engine.release", "vllm@0.32.0").findings == []


def test_the_installed_version_is_read_from_package_metadata():
    """Installed with the test extras, speculators is found by its dist-info folder; vLLM is not installed here."""
    from importlib.metadata import version

    assert engines.installed_version("speculators") == version("speculators")
    assert engines.installed_version("vllm") is None
    installed = (f"the installed speculators {version('speculators')}: judged as speculators 0.9.0 (run in the default "
                 "tests)")
    assert engines.resolve("speculators") == (("speculators@0.9.0",), (installed,), ())


def test_lists_repeats_and_all(monkeypatch):
    monkeypatch.setattr(engines, "installed_version", lambda name: None)
    assert engines.resolve("vllm,sglang")[0] == (VLLM, SG23)
    assert engines.resolve(["vllm", "sglang@0.5.6", "vllm"])[0] == (VLLM, SG06)
    others = ("trtllm@1.4.0rc1", "llamacpp@0.3.36", "lmdeploy@0.18.0", "mlx@0.7.10")
    assert engines.resolve("all")[0] == (VLLM, SG23, *others, "speculators@0.9.0")
    assert engines.resolve("all,sglang").optional == (VLLM, *others, "speculators@0.9.0")  # sglang: named


@pytest.mark.parametrize("case, value", [("latest", "sglang@latest"),  # 'latest' is no release number (such as ...)
                                         ("release-of-no-engine", "tgi@1.0"),  # no engine 'tgi'
                                         ("no-engine", "tgi"),  # choose vllm, sglang, trtllm, ...
                                         ("empty-name", "vllm,")])  # an empty name
def test_an_unknown_release_is_a_usage_error(case, value):
    with pytest.raises(UsageError) as raised:
        engines.resolve(value)
    golden(f"test_an_unknown_release_is_a_usage_error-{case}", f"{raised.value}\n")


def test_every_surface_takes_the_engines_from_the_profiles(capsys):
    """The engine list is defined once (engines.PROFILES): the CLI help, --version, explain and convert's targets
    name every modelled release and nothing else."""
    from eagle3_checks import convert
    from eagle3_checks.cli import build_parser
    from eagle3_checks.options import help_text as option_help
    from eagle3_checks.pytest_plugin import OPTIONS

    specs = [p.spec for p in engines.PROFILES]
    help_text = build_parser()._subparsers._group_actions[0].choices["check"].format_help()
    assert all(f"{p.name} {p.range}" in " ".join(help_text.split()) for p in engines.PROFILES)
    assert "eagle3-checks check --help" in option_help(OPTIONS["engine"])  # the plugin imports no engine list
    assert {"vllm", "sglang", "speculators"} <= set(convert.TARGETS) <= set(engines.ENGINE_NAMES)
    with pytest.raises(SystemExit):
        main(["--version"])
    version = capsys.readouterr().out
    assert all(f"{p.name} {p.range}" in " ".join(version.split()) for p in engines.PROFILES)
    assert main(["explain", "engine.loads"]) == 0
    explained = capsys.readouterr().out
    assert all(s in explained for s in specs)


def test_the_report_names_the_release_of_every_verdict(drafter, capsys, tmp_path):
    path = drafter("flat").write()
    assert main(["check", str(path), "--engine", "sglang", "--engine", "vllm", "--level", "header",
                 "--reference", "none", "--format", "json"]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)["checkpoints"][0]
    assert [(e["engine"], e["version"]) for e in doc["engines"]] == [("sglang", SGLANG_NEW), ("vllm", VLLM_NEW)]
    assert {c["engine"] for c in doc["checks"] if "engine" in c} == {SG23, VLLM}
    main(["check", str(path), "--engine", "sglang@0.5.6,sglang", "--level", "header", "--reference", "none"])
    out = capsys.readouterr().out
    # the text report: each release's line ("engine sglang@0.5.6: named"), each verdict's label, the compatibility table
    golden("test_the_report_names_the_release_of_every_verdict", out, tmp_path)


# ----- SGLang 0.5.23 against 0.5.6 (table 5.1) ----------------------------------------------------------------------

def test_s1_s3_more_than_one_layer(drafter):
    """S1/S3: SG23/models/llama_eagle3.py:198-204 builds num_hidden_layers layers and :103-105 norms layers >= 1
    with hidden_norm (layernorm.py:481: an unloaded norm is ones); SG06/models/llama_eagle3.py:198-199 raises
    "EAGLE3 currently only supports 1 layer". A speculators-style second layer (input_layernorm, no hidden_norm)
    therefore fails 0.5.23: hidden_norm of layer 1 stays at ones and its input_layernorm is never used."""
    result = gate(drafter("flat", replace(EXAMPLE, num_layers=2)).write())
    assert "engine.loads/refused" in codes(result, "engine.loads", SG06)  # "EAGLE3 currently only supports 1 layer"
    assert status(result, "engine.loads", SG23) == FAILED
    found = keyed(result, "engine.loads", SG23)
    assert found["engine.loads/no-tensor"] == "layers.1.hidden_norm.weight"
    assert found["engine.loads/dropped"] == "layers.1.input_layernorm.weight"
    assert "engine.loads/refused" not in found
    assert status(result, "engine.loads", VLLM) == PASSED
    golden("test_s1_s3_more_than_one_layer", findings_of(result, "engine.loads", SG06, SG23))


def test_s1_a_second_layer_normed_by_hidden_norm_loads_on_sglang_0_5_23(drafter):
    """SG23/models/llama_eagle3.py:103-105: a checkpoint whose layer 1 carries hidden_norm is what 0.5.23 computes."""
    d = drafter("flat", replace(EXAMPLE, num_layers=2))
    d.tensors["layers.1.hidden_norm.weight"] = d.tensors.pop("layers.1.input_layernorm.weight")
    r = reading(d.write(), SG23)
    assert not r.refusals and r.tensors["layers.1.hidden_norm.weight"] == "layers.1.hidden_norm.weight"
    assert not r.unfilled.get("layers.1.hidden_norm.weight")
    assert r.later_norm == "hidden_norm"


def test_s2_a_config_without_num_hidden_layers(drafter):
    """S2: LlamaConfig's default of 32 layers: SG23 builds 32 (llama_eagle3.py:198-204), 31 unfilled; SG06 raises."""
    d = drafter("flat")
    del d.config["num_hidden_layers"]
    result = gate(d.write())
    assert "engine.loads/no-tensor" in codes(result, "engine.loads", SG23)
    assert len(reading(d.root, SG23).unfilled) == 279  # layers 1 to 31 (31 x 9)
    assert "engine.loads/refused" in codes(result, "engine.loads", SG06)  # "only supports 1 layer" (32 of them)
    golden("test_s2_a_config_without_num_hidden_layers", findings_of(result, "engine.loads", SG23, SG06))


@pytest.mark.parametrize("layout", ["flat", "speculators"])
def test_a_layer_count_above_the_file_leaves_layers_uninitialised_and_fails_engine_loads(drafter, layout):
    """num_hidden_layers 3 over a one-layer file. vLLM 0.33 builds range(num_hidden_layers) layers
    and raises nothing for the missing tensors (llama_eagle3.py:466-470 load_weights returns None, so the strict
    check is skipped: default_loader.py:503, 512-523); SGLang 0.5.23 builds them too (llama_eagle3.py:198-204).
    Layers 1 and 2 serve uninitialised: engine.loads fails, naming them."""
    d = drafter(layout)
    d.layer_config["num_hidden_layers"] = 3
    result = gate(d.write())
    assert status(result, "engine.loads", VLLM) == FAILED
    assert keyed(result, "engine.loads", VLLM)["engine.loads/no-tensor"] == "layers.1.input_layernorm.weight"
    assert len(reading(d.root, VLLM).unfilled) == 18  # layers 1 and 2
    if layout == "flat":
        assert keyed(result, "engine.loads", SG23)["engine.loads/no-tensor"] == "layers.1.hidden_norm.weight"
        assert len(reading(d.root, SG23).unfilled) == 18
    # the messages: "vllm VERSION builds 18 parameter(s) that no tensor fills: layers.1...."
    golden(f"test_a_layer_count_above_the_file_leaves_layers_uninitialised_and_fails_engine_loads-{layout}",
           findings_of(result, "engine.loads", VLLM, SG23))


def test_s4_layers0_names(drafter):
    """S4: SG23/models/llama_eagle3.py:337-348, 358-378 loads layers.N.* (midlayer is the legacy name);
    SG06 looks up model.midlayer.* only and drops layers.0.* silently."""
    result = gate(drafter("flat", first_layer="layers").write())
    assert status(result, "engine.loads", SG23) == PASSED
    assert status(result, "engine.loads", SG06) == FAILED
    assert keyed(result, "engine.loads", SG06)["engine.loads/unfilled"] == "layers.0.hidden_norm.weight"  # 10 of them
    golden("test_s4_layers0_names", findings_of(result, "engine.loads", SG06))


def test_s5_fc_norm_and_the_legacy_use_aux_norm(drafter):
    """S5: SG23/models/llama_eagle3.py:184-196 builds one norm per aux state for fc_norm or use_aux_norm and renames
    aux_norm_low/mid/high to fc_norm.0/1/2 (:338-343); SG06 has no fc_norm."""
    result = gate(drafter("flat", replace(EXAMPLE, fc_norm=True)).write())
    assert status(result, "engine.loads", SG23) == PASSED
    assert keyed(result, "engine.loads", SG06)["engine.loads/dropped"] == "fc_norm.0.weight"  # and .1, .2
    golden("test_s5_fc_norm_and_the_legacy_use_aux_norm", findings_of(result, "engine.loads", SG06))
    d = drafter("flat", replace(EXAMPLE, fc_norm=True))
    del d.config["fc_norm"]
    d.config["use_aux_norm"] = True
    for i, legacy in enumerate(("low", "mid", "high")):
        d.tensors[f"aux_norm_{legacy}.weight"] = d.tensors.pop(f"fc_norm.{i}.weight")
    r = reading(d.write(), SG23)
    assert r.fc_norm and r.tensors["fc_norm.2.weight"] == "aux_norm_high.weight"


def test_s6_norm_before_fc(drafter):
    """S6: SG23/models/llama_eagle3.py:169-182 reads norm_before_fc (eagle_config first) and loads input_norm;
    SG06 has no input_norm and drops the tensor."""
    result = gate(drafter("flat", replace(EXAMPLE, norm_before_fc=True)).write())
    assert status(result, "engine.loads", SG23) == PASSED
    assert status(result, "engine.semantics", SG23) == PASSED
    assert keyed(result, "engine.loads", SG06)["engine.loads/dropped"] == "input_norm.weight"
    golden("test_s6_norm_before_fc", findings_of(result, "engine.loads", SG06))


def test_s7_norm_output_means_the_fed_back_state_in_sglang_0_5_23(drafter):
    """S7: SG23/models/llama_eagle3.py:207, 267-269: norm_output true feeds the normed state back; SpecForge means
    "final norm" by it (its own default True), so a SpecForge config stating it is read differently; SG06 ignores
    the field (pre-norm feedback)."""
    d = drafter("flat")
    d.config["norm_output"] = True
    result = gate(d.write())
    assert keyed(result, "engine.semantics", SG23) == {"engine.semantics/feedback": "feedback"}  # 'normed' read
    golden("test_s7_norm_output_means_the_fed_back_state_in_sglang_0_5_23",
           findings_of(result, "engine.semantics", SG23))
    assert status(result, "engine.semantics", SG06) == PASSED


def test_s8_four_aux_states(drafter):
    """S8: SG23/models/llama_eagle3.py:156-167 sizes fc from num_aux_hidden_states, else eagle_config's ids;
    SG06/models/llama_eagle3.py:135-139 always builds 3 x hidden_size_in."""
    d = drafter("flat", replace(EXAMPLE, aux_layer_ids=(1, 2, 3, 5)))
    d.config["num_aux_hidden_states"] = 4
    result = gate(d.write())
    assert status(result, "engine.loads", SG23) == PASSED
    assert keyed(result, "engine.loads", SG06)["engine.loads/refused"] == "fc.weight"  # (64, 256), it builds (64, 192)
    golden("test_s8_four_aux_states", findings_of(result, "engine.loads", SG06))


def test_s9_theta_only_in_rope_parameters(drafter):
    """S9: SG23/models/llama.py:322-328 takes rope_theta from rope_parameters (transformers 5.19 fills it);
    SG06/models/llama.py:212-213 getattr(config, "rope_theta", 10000) with transformers 4.57.1."""
    d = drafter("flat")
    d.config["rope_parameters"] = {"rope_type": "default", "rope_theta": d.config.pop("rope_theta")}
    result = gate(d.write())
    assert status(result, "engine.semantics", SG23) == PASSED
    assert keyed(result, "engine.semantics", SG06) == {"engine.semantics/rope-theta": "rope_theta"}  # 10000.0 read
    golden("test_s9_theta_only_in_rope_parameters", findings_of(result, "engine.semantics", SG06))


def test_s10_s11_yarn(drafter):
    """S10: SG23/layers/rotary_embedding/factory.py:36-53, 311-318 only warns without
    original_max_position_embeddings (transformers 5.19 fills it from max_position_embeddings); SG06 raises
    KeyError. S11: SG23 factory.py:319-332 and yarn.py:108-131 honour mscale / mscale_all_dim; SG06 computes
    0.1 ln(factor) + 1 and drops them."""
    d = drafter("flat")
    d.config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 1.0}
    result = gate(d.write())
    assert "engine.loads/refused" in codes(result, "engine.loads", SG06)  # KeyError: original_max_position_embeddings
    golden("test_s10_s11_yarn", findings_of(result, "engine.loads", SG06))
    assert status(result, "engine.loads", SG23) == PASSED
    assert status(result, "engine.semantics", SG23) == PASSED
    assert reading(d.root, SG23).rope_scaling["original_max_position_embeddings"] == EXAMPLE.max_position_embeddings


def test_s12_kimi_k2_ids_counted_by_the_target(drafter, tmp_path):
    """S12: SG23/models/deepseek_v2.py:3458-3473 (DeepseekV3ForCausalLM, the Kimi-K2 target) adds 1 only when the
    first id is 1, else uses the ids raw; SG06/models/deepseek_v2.py:4097-4101 always adds 1. A drafter trained on
    [2, 30, 58] the SGLang 0.5.6 way (outputs of 2, 30, 58) is fed the outputs of 1, 29, 57 by 0.5.23."""
    d = drafter("flat", replace(EXAMPLE, aux_layer_ids=(2, 30, 58), target_layers=61))
    target = target_file(tmp_path, architectures=["DeepseekV3ForCausalLM"], num_hidden_layers=61)
    result = gate(d.write(), target_config=str(target), aux_convention="sglang")
    assert status(result, "engine.aux-layers", SG23) == FAILED
    assert engines.profile(SG23).capture([2, 30, 58], Target("DeepseekV3ForCausalLM", 61)).layers == (1, 29, 57)
    [f] = result.result("engine.aux-layers", SG23).findings
    assert (f.code, f.found, f.expected) == ("engine.aux-layers/wrong-layers", "[2, 30, 58]", "[3, 31, 59]")
    assert f.patch[0] == {"op": "add", "path": "/eagle_config/eagle_aux_hidden_state_layer_ids", "value": [3, 31, 59]}
    assert f.patch[1]["value"]["layers"] == [2, 30, 58]  # the layers it was trained on
    # the message: the layers captured, from which ids, the trained ones, and its source (deepseek_v2.py:3458-3473)
    golden("test_s12_kimi_k2_ids_counted_by_the_target", findings_of(result, "engine.aux-layers", SG23), tmp_path)
    assert status(result, "engine.aux-layers", SG06) == PASSED
    # following the advice converges: [3, 31, 59] in eagle_config passes 0.5.23 (and moves 0.5.6 off)
    d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [3, 31, 59]
    d.config["eagle_aux_hidden_state_layer_ids"] = [3, 31, 59]
    after = gate(d.write(), target_config=str(target), aux_convention="vllm")
    assert status(after, "engine.aux-layers", SG23) == PASSED


def test_s12_without_a_target_both_outcomes_are_named(drafter):
    """S12: without --target-config the 0.5.23 capture depends on the target's class: a warning names both."""
    d = drafter("flat", replace(EXAMPLE, aux_layer_ids=(2, 4, 6)))
    result = gate(d.write(), aux_convention="sglang")
    assert status(result, "engine.aux-layers", SG23) == WARNED
    assert codes(result, "engine.aux-layers", SG23) == {"engine.aux-layers/target-dependent"}
    # the two outcomes the message names (layers [2, 4, 6] and [1, 3, 5]), and its fix: --target-config
    for target, layers in (("LlamaForCausalLM", (2, 4, 6)), ("DeepseekV3ForCausalLM", (1, 3, 5))):
        assert engines.profile(SG23).capture([2, 4, 6], Target(target, 8)).layers == layers
    golden("test_s12_without_a_target_both_outcomes_are_named", findings_of(result, "engine.aux-layers", SG23))
    assert status(result, "engine.aux-layers", SG06) == PASSED


def test_s12_gpt_oss_uses_raw_ids_when_the_largest_is_the_layer_count(tmp_path):
    """S12: SG23/models/gpt_oss.py:1337-1352: raw ids when max(ids) == N (it also captures after the last layer)."""
    gpt = Target("GptOssForCausalLM", 24)
    assert engines.profile(SG23).capture([2, 12, 24], gpt).layers == (1, 11, 23)
    assert engines.profile(SG23).capture([2, 12, 22], gpt).layers == (2, 12, 22)
    assert engines.profile(SG06).capture([2, 12, 22], gpt).layers == (2, 12, 22)


def test_s13_the_last_id_sglang_can_capture(drafter, tmp_path):
    """S13: the +1 rule captures the input of layer X+1 only while X+1 < N (SG23/models/llama.py:485-494, 941;
    SG06/models/llama.py:337-347, 742): the last id is N-2, not N-1 (wrong for 0.5.6 too). vLLM takes ids up to N."""
    d = drafter("flat", replace(EXAMPLE, aux_layer_ids=(1, 3, 7)))
    # the top-level ids counted vLLM's way (their trainer's), so that vLLM's own capture is right
    result = gate(d.write(), target_config=str(target_file(tmp_path)), trainer="speculators@0.9.0")
    for spec in (SG23, SG06):
        [beyond] = [f for f in result.result("engine.aux-layers", spec).findings
                    if f.code == "engine.aux-layers/beyond-last-layer"]
        assert (beyond.expected, beyond.found) == ("ids <= 6", "[1, 3, 7]")  # "captures nothing for ids [7]"
        assert engines.profile(spec).capture([1, 3, 7], Target("LlamaForCausalLM", 8)).last_id == 6
    golden("test_s13_the_last_id_sglang_can_capture", findings_of(result, "engine.aux-layers", SG23, SG06), tmp_path)
    assert status(result, "engine.aux-layers", VLLM) != FAILED


def test_s14_draft_vocab_size_absent(drafter):
    """S14: SG23/models/llama_eagle3.py:306 reads config.draft_vocab_size directly: absent raises AttributeError under
    transformers 5.19; an explicit null takes the target's lm_head (:306-308)."""
    d = drafter("flat", replace(EXAMPLE, draft_vocab_size=EXAMPLE.vocab_size))
    del d.config["draft_vocab_size"]
    refused = reading(d.write(), SG23)
    assert list(refused.refused_at.values()) == ["draft_vocab_size"]
    golden("test_s14_draft_vocab_size_absent", "\n".join(refused.refusals) + "\n")  # AttributeError
    assert not reading(d.root, SG06).refusals
    d.config["draft_vocab_size"] = None
    assert not reading(d.write(), SG23).refusals


def test_s15_the_mla_drafter_is_read_by_sglang_0_5_23_and_refused_by_0_5_6(drafter):
    """S15: SG23/models/kimi_k25_eagle3.py:315, 523 registers Eagle3DeepseekV2ForCausalLM (registry.py:134-148), as
    vLLM 0.33 does (deepseek_eagle3.py): both releases read the MLA drafter (tests/test_mla_family.py). SG06
    has no such class: its refusal is the one finding, citing that."""
    from helpers import mla_drafter

    d = mla_drafter(drafter("flat"))
    result = gate(d.write())
    assert status(result, "engine.loads", SG23) == PASSED
    assert status(result, "engine.loads", VLLM) == PASSED
    assert status(result, "engine.loads", SG06) == FAILED
    assert keyed(result, "engine.loads", SG06) == {"engine.loads/class-refused": "architectures"}  # the one finding
    golden("test_s15_the_mla_drafter_is_read_by_sglang_0_5_23_and_refused_by_0_5_6",
           findings_of(result, "engine.loads", SG06))
    assert status(result, "engine.semantics", SG06) == SKIPPED
    reading = engines.read(open_checkpoint(d.write()), SG23)
    assert reading.family == "mla" and reading.mla is not None and not reading.not_modelled


def test_s16_a_served_context_beyond_the_draft_stops_sglang(drafter):
    """S16: SG23/configs/model_config.py:1291-1316 (SG06 :286-311) raise ValueError at startup when the served context
    (--context-length, which --max-model-len stands for) exceeds the draft's, unless
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1."""
    result = gate(drafter("flat").write(), max_model_len=8192)
    for spec in (SG23, SG06):
        assert [f.code for f in result.result("engine.serving", spec).findings] == ["engine.serving/context-too-short"]
    assert status(gate(drafter("flat").write(), max_model_len=4096), "engine.serving", SG23) == PASSED


# ----- SGLang's context refusal is a serving limit, stated once, with its config edit -------------------------------

def test_sglangs_context_refusal_is_engine_servings_verdict_and_a_config_edit_lifts_it(drafter, tmp_path):
    """A target context of 8192 over a drafter's max_position_embeddings 2048: SGLang's draft worker builds the
    drafter's ModelConfig with the target's context_len (SG23/speculative/eagle_worker_v2.py:222-232; SG06/speculative/
    eagle_worker.py:100-101) and _derive_context_length raises (SG23/configs/model_config.py:1291-1316; SG06 :286-311).
    engine.serving states it (engine.loads has nothing to say: the tensors load), with the edit that lifts it as a
    patch; the conformance recordings target-longer-context-{flat,raised-flat} show SGLang 0.5.23 refusing, then
    loading once max_position_embeddings is raised."""
    d = drafter("flat")
    d.config["max_position_embeddings"] = 2048
    target = target_file(tmp_path, max_position_embeddings=8192)
    result = gate(d.write(), target_config=str(target), engine=f"{SG23},{SG06}", level="forward")
    for spec in (SG23, SG06):
        assert status(result, "engine.loads", spec) == PASSED, text(result, "engine.loads", spec)
        [finding] = result.result("engine.serving", spec).findings
        assert finding.code == "engine.serving/context-too-short" and finding.key == "max_position_embeddings"
        assert finding.patch == ({"op": "add", "path": "/max_position_embeddings", "value": 8192},)
        assert finding.to_dict()["fixable_by_config"] is True
    # forward.equivalence computes the drafter (the layout is right): no "would not compute", no convert advice
    assert status(result, "forward.equivalence", SG23) == PASSED, text(result, "forward.equivalence", SG23)
    # SGLang's own way out: --context-length 2048 (SG23/arg_groups/fields/model.py:110-117), which --max-model-len
    # stands for; above the draft's context it refuses the same way
    assert status(gate(d.write(), target_config=str(target), engine=SG23, max_model_len=2048), "engine.serving", SG23) \
        == PASSED
    assert status(gate(d.write(), target_config=str(target), engine=SG23, max_model_len=4096), "engine.serving", SG23) \
        == FAILED
    d.config["max_position_embeddings"] = 8192  # the patch applied
    fixed = gate(d.write(), target_config=str(target), engine=f"{SG23},{SG06}")
    assert [status(fixed, "engine.serving", spec) for spec in (SG23, SG06)] == [PASSED, PASSED]


def test_sglangs_derived_context_follows_its_context_keys_and_rope_factor(drafter, tmp_path):
    """get_context_length (SG23/utils/hf_transformers/common.py:668-695, SG06/utils/hf_transformers_utils.py:327-353)
    reads the first of max_sequence_length, seq_length, max_seq_len, model_max_length, max_position_embeddings, times
    rope_scaling's factor unless the dict holds original_max_position_embeddings or is llama3. transformers 5.19 (which
    0.5.23 pins) fills original_max_position_embeddings into yarn parameters (modeling_rope_utils.py:812-820): a yarn
    factor counts for 0.5.6 (transformers 4.57.1) only; the recording target-longer-context-yarn-flat shows 0.5.23
    refusing such a drafter (derived context 4096)."""
    target = target_file(tmp_path, max_position_embeddings=8192)
    d = drafter("flat")
    d.config["seq_length"] = 2048  # read before max_position_embeddings (4096): the edit goes there
    [finding] = gate(d.write(), target_config=str(target), engine=SG23).result("engine.serving", SG23).findings
    assert finding.key == "seq_length" and finding.patch == ({"op": "add", "path": "/seq_length", "value": 8192},)
    d = drafter("flat")
    d.config["rope_scaling"] = {"rope_type": "linear", "factor": 4.0}  # 4 x 1500 = 6000 < 8192: needs 2048
    d.config["max_position_embeddings"] = 1500
    [finding] = gate(d.write(), target_config=str(target), engine=SG23).result("engine.serving", SG23).findings
    assert finding.patch == ({"op": "add", "path": "/max_position_embeddings", "value": 2048},)
    d = drafter("flat")
    d.config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
    yarn = gate(d.write(), target_config=str(target), engine=f"{SG23},{SG06}")
    assert status(yarn, "engine.serving", SG23) == FAILED and status(yarn, "engine.serving", SG06) == PASSED


# ----- what SGLang 0.5.23's own loader does with an unknown tensor and a short embedding ----------------------------

def test_sglang_skipping_an_unknown_layer_tensor_fails_engine_loads(drafter):
    """SG23/models/llama_eagle3.py:358-378 (SG06 the same) loads a name only when it is a parameter and drops any
    other without a word: the recording unknown-layer-tensor-flat lists midlayer.mlp.extra_proj.weight as ignored and
    the load as successful. engine.loads says SGLang serves without it (keys says what it is); vLLM refuses it."""
    import numpy as np

    from eagle3_checks.storage.safetensors import from_numpy

    d = drafter("flat")
    d.tensors["midlayer.mlp.extra_proj.weight"] = from_numpy(np.zeros((64, 64), np.float32), "BF16")
    result = gate(d.write())
    for spec in (SG23, SG06):
        codes = [f.code for f in result.result("engine.loads", spec).findings if f.severity.value == "error"]
        assert codes == ["engine.loads/ignored-unknown"], (spec, text(result, "engine.loads", spec))
    assert [f.code for f in result.result("engine.loads", VLLM).findings] == ["engine.loads/refused"]
    assert [f.code for f in result.result("keys").findings] == ["keys/unknown-tensor"]


def test_sglang_refuses_an_embedding_one_row_short_even_though_the_target_replaces_it(drafter):
    """The worker replaces the drafter's embedding with the target's after load (SG23/speculative/eagle_worker_v2.py:
    353-363), but the load reads it first: VocabParallelEmbedding.weight_loader asserts vocab_size rows
    (SG23/layers/vocab_parallel_embedding.py:436-441; SG06 :446-455). The recording embed-tokens-short-flat is that
    AssertionError at load."""
    import numpy as np

    from eagle3_checks.storage.safetensors import from_numpy

    d = drafter("flat")
    d.tensors["embed_tokens.weight"] = from_numpy(np.zeros((EXAMPLE.vocab_size - 1, 64), np.float32), "BF16")
    result = gate(d.write())
    for spec in (SG23, SG06, VLLM):
        [finding] = [f for f in result.result("engine.loads", spec).findings if f.severity.value == "error"]
        assert finding.code == "engine.loads/refused" and finding.key == "embed_tokens.weight", spec
    assert "embed_tokens.weight" in reading(d.write(), SG23).refused_at.values()


def test_s17_v5_a_flat_qwen3_config_without_head_dim(drafter):
    """S17/V5: a flat model_type qwen3 is parsed by Qwen3Config (TF/models/qwen3/configuration_qwen3.py:68:
    head_dim 128, max_position_embeddings 32768): SG23/models/llama.py:196-198 and VL/model_executor/models/
    qwen3.py:100, 209 build heads of 128, which the example's q_proj (4 x 24) does not fit."""
    d = drafter("flat")
    d.config["model_type"] = "qwen3"
    del d.config["head_dim"], d.config["max_position_embeddings"]
    path = d.write()
    refusals = []
    for spec in (VLLM, SG23):
        r = reading(path, spec)
        assert (r.head_dim, r.max_position_embeddings) == (128, 32768)
        assert set(r.refused_at.values()) == {f"midlayer.self_attn.{x}_proj.weight" for x in "qkvo"}
        refusals += r.refusals
    golden("test_s17_v5_a_flat_qwen3_config_without_head_dim", "\n".join(refusals) + "\n")  # q_proj (96, 128)


def test_s18_fc_bias_is_loaded_by_sglang_and_skipped_by_vllm(drafter):
    """S18: SG23/models/llama_eagle3.py:163-167 (SG06 :135-139) build fc with bias=config.bias and load fc.bias;
    V2: VL/model_executor/models/utils.py:431-436 skips any unexpected *.bias silently: vLLM runs fc without it."""
    import numpy as np

    from eagle3_checks.storage.safetensors import from_numpy

    d = drafter("flat")
    d.config["bias"] = True
    d.tensors["fc.bias"] = from_numpy(np.full(EXAMPLE.hidden_size, 0.5, dtype=np.float32))
    d.tensors["midlayer.self_attn.o_proj.bias"] = from_numpy(np.zeros(EXAMPLE.hidden_size, dtype=np.float32))
    result = gate(d.write())
    for spec in (SG23, SG06):
        assert reading(d.root, spec).tensors["fc.bias"] == "fc.bias"
        assert status(result, "engine.loads", spec) == PASSED
    assert keyed(result, "engine.loads", VLLM) == {"engine.loads/dropped": "fc.bias"}
    golden("test_s18_fc_bias_is_loaded_by_sglang_and_skipped_by_vllm", findings_of(result, "engine.loads", VLLM))


def test_s19_the_profiles_cite_the_files_of_their_release():
    """S19: SG23 has no speculative/eagle_worker.py (the worker is eagle_worker_v2.py) and reads aux ids in
    model_executor/model_runner_components/spec_aux_hidden_state.py."""
    sources = engines.profile(SG23).sources
    assert "srt/speculative/eagle_worker_v2.py" in sources
    assert "srt/model_executor/model_runner_components/spec_aux_hidden_state.py" in sources
    assert "srt/speculative/eagle_worker.py" in engines.profile(SG06).sources


# ----- vLLM 0.33.0 (table 5.2) ----------------------------------------------------------------------------------------

def test_v1_a_missing_lm_head_is_the_targets(drafter):
    """V1: VL/v1/worker/gpu/spec_decode/eagle/utils.py:107-119 shares the target's lm_head; with a draft vocabulary
    smaller than the target's the logits processor keeps its first DV rows (layers/logits_processor.py:196-198)
    before the d2t scatter: every drafted token is wrong. With the same vocabulary it is right."""
    d = drafter("flat")
    del d.tensors["lm_head.weight"]
    result = gate(d.write())
    assert keyed(result, "engine.loads", VLLM) == {"engine.loads/no-tensor": "lm_head.weight"}  # the target's, cut
    golden("test_v1_a_missing_lm_head_is_the_targets", findings_of(result, "engine.loads", VLLM))
    same = drafter("flat", replace(EXAMPLE, draft_vocab_size=EXAMPLE.vocab_size))
    del same.tensors["lm_head.weight"]
    r = reading(same.write(), VLLM)
    assert r.unfilled["lm_head.weight"].startswith("shared from the target")


def test_v2_an_unknown_bias_is_skipped_and_an_unknown_weight_refused(drafter):
    """V2: VL/model_executor/models/utils.py:431-436, 457-458: a name ending .bias is always ignorable; any other
    unknown name raises "There is no module or parameter named"."""
    import numpy as np

    from eagle3_checks.storage.safetensors import from_numpy

    d = drafter("flat")
    d.tensors["extra.bias"] = from_numpy(np.zeros(4, dtype=np.float32))
    assert not reading(d.write(), VLLM).refusals
    d.tensors["extra.weight"] = from_numpy(np.zeros(4, dtype=np.float32))
    assert list(reading(d.write(), VLLM).refused_at.values()) == ["extra.weight"]


def test_v3_qwen3_o_proj_has_no_bias(drafter):
    """V3: VL/model_executor/models/qwen3.py:114-119 builds o_proj with bias=False: an o_proj.bias is dropped."""
    d = drafter("flat", replace(EXAMPLE, model_type="qwen3", attention_bias=True))
    r = reading(d.write(), VLLM)
    assert set(r.ignored) == {"midlayer.self_attn.o_proj.bias", "t2d"} and r.o_bias is False


def test_v4_an_explicit_null_norm_before_residual_is_false(drafter):
    """V4: VL/transformers_utils/configs/speculators/algos.py:33-35 config_dict.get("norm_before_residual", True)
    keeps None, which llama_eagle3.py:101-104 reads as False; absent it is True."""
    d = drafter("speculators")
    d.config["norm_before_residual"] = None
    assert reading(d.write(), VLLM).norm_before_residual is False
    del d.config["norm_before_residual"]
    assert reading(d.write(), VLLM).norm_before_residual is True


def test_v6_a_qwen3_speculators_config_without_max_position_embeddings(drafter):
    """V6: VL/model_executor/models/qwen3.py:205 reads config.max_position_embeddings without a default; a
    speculators config is a plain PreTrainedConfig (configs/speculators/base.py:15-30)."""
    d = drafter("speculators", replace(EXAMPLE, model_type="qwen3"))
    del d.config["transformer_layer_config"]["max_position_embeddings"]
    r = reading(d.write(), VLLM)
    assert list(r.refused_at.values()) == ["transformer_layer_config.max_position_embeddings"]
    golden("test_v6_a_qwen3_speculators_config_without_max_position_embeddings",
           "\n".join(r.refusals) + "\n")  # AttributeError


def test_v7_num_aux_layers_sizes_a_qwen3_drafters_fc(drafter):
    """V7: VL/model_executor/models/qwen3_eagle3.py:201-214 reads num_aux_layers first."""
    d = drafter("flat", replace(EXAMPLE, model_type="qwen3"))
    d.config["num_aux_layers"] = 4
    assert reading(d.write(), VLLM).num_aux == 4


def test_v8_the_default_runner_never_reads_eagle_config_ids(drafter):
    """V8: the default V2 runner reads the top-level ids (VL/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150);
    only the V1 runner (VLLM_USE_V2_MODEL_RUNNER=0, no Triton, parallel drafting: VL/config/vllm.py:748-767,
    3070-3077) also reads eagle_config's (VL/v1/worker/gpu_model_runner.py:5202-5224). The finding says both."""
    d = drafter("flat")
    del d.config["eagle_aux_hidden_state_layer_ids"]
    r = reading(d.write(), "vllm@0.33.0")
    assert r.aux_layer_ids is None
    result = gate(d.root)
    assert codes(result, "engine.aux-layers", VLLM) == {"engine.aux-layers/ids-not-read"}
    # where 0.33.0 reads the ids (VLLM_USE_V2_MODEL_RUNNER=0 for the V1 runner), and the newest release's finding
    golden("test_v8_the_default_runner_never_reads_eagle_config_ids",
           f"reading vllm@0.33.0: aux_layer_ids: {r.sources['aux_layer_ids']}\n"
           + findings_of(result, "engine.aux-layers", VLLM))


def test_v9_the_bias_key_gives_o_proj_a_bias(drafter):
    """V9: VL/model_executor/models/llama.py:266-274: o_proj's bias is attention_bias or bias."""
    d = drafter("flat")
    d.config["bias"] = True
    r = reading(d.write(), VLLM)
    assert r.o_bias is True and set(r.unfilled) == {"layers.0.self_attn.o_proj.bias"}


def test_v10_d2t_is_sized_against_the_targets_vocabulary(drafter, tmp_path):
    """V10: VL/model_executor/models/llama_eagle3.py:338-345 builds draft_id_to_target_id when draft_vocab_size
    differs from the TARGET's vocabulary (model_config.get_vocab_size()), not the drafter's vocab_size."""
    d = drafter("flat")
    d.config["vocab_size"] = EXAMPLE.draft_vocab_size  # a drafter config that states the draft vocabulary twice
    path = d.write()
    alone = reading(path, VLLM)
    assert "d2t" in alone.refused_at.values()  # no draft_id_to_target_id built: the d2t tensor is unexpected
    [d2t] = [x for x, at in alone.refused_at.items() if at == "d2t"]
    golden("test_v10_d2t_is_sized_against_the_targets_vocabulary", d2t + "\n")  # draft_id_to_target_id
    target = read_target_config(target_config(EXAMPLE), "target/config.json")
    assert "d2t" not in reading(path, VLLM, target).refused_at.values()


def test_v11_use_aux_hidden_state_false_drops_fc(drafter):
    """V11: VL/model_executor/models/llama_eagle3.py:179-183, 462-463: no fc and no aux capture."""
    d = drafter("flat")
    d.config["eagle_config"]["use_aux_hidden_state"] = False
    result = gate(d.write())
    assert keyed(result, "engine.loads", VLLM) == {"engine.loads/dropped": "fc.weight"}
    golden("test_v11_use_aux_hidden_state_false_drops_fc", findings_of(result, "engine.loads", VLLM))


def test_v12_peagle_draft_model_under_method_eagle3(drafter):
    """V12: VL/model_executor/models/registry.py:698 registers PEagleDraftModel, but for method eagle3
    VL/transformers_utils/configs/eagle.py:55-64 first renames it Eagle3PEagleDraftModel, which is not registered;
    PeagleLlamaForCausalLM ends in neither and becomes Eagle3PeagleLlamaForCausalLM likewise."""
    d = drafter("flat")
    d.config["architectures"] = ["LlamaForCausalLM"]
    assert not reading(d.write(), VLLM).refusals  # -> Eagle3LlamaForCausalLM, registered
    d.config["architectures"] = ["PEagleDraftModel"]
    refusals = reading(d.write(), VLLM).refusals
    assert refusals
    golden("test_v12_peagle_draft_model_under_method_eagle3", "\n".join(refusals) + "\n")  # Eagle3PEagleDraftModel


# ----- what the engines' own loaders showed (tests/conformance) -----------------------------------------------------

def test_a_lost_head_dim_is_a_silent_cut_not_a_refusal(drafter):
    """Recorded with vLLM 0.33.0 and SGLang 0.5.23's own loaders (tests/conformance/recorded/*/head-dim-missing-flat):
    the linear weight loaders narrow q/k/v (4 x 24 rows) to the 4 x 16 the config implies and o_proj's columns
    likewise (vLLM model_executor/layers/linear.py:598, 863, 1780; SGLang srt/layers/linear.py:739): the server starts.
    speculators loads with torch's load_state_dict, which refuses a size mismatch."""
    d = drafter("flat")
    del d.config["head_dim"]
    result = gate(d.write())
    for spec in (VLLM, SG23):
        found = keyed(result, "engine.loads", spec)
        assert found["engine.loads/narrowed"] == "midlayer.self_attn.k_proj.weight"
        assert not {"engine.loads/refused", "engine.loads/class-refused"} & set(found)
        assert set(reading(d.root, spec).narrowed) == {f"midlayer.self_attn.{x}_proj.weight" for x in "qkvo"}
        assert reading(d.root, spec).head_dim == 16
        assert not reading(d.root, spec).refusals
    # the messages and the cuts: "silently cuts 4 tensor(s)", "(96, 128) cut to the (64, 128) (nh·hd, 2H)", "head_dim
    # 16", "not what was trained", and no "refuses"
    cuts = "".join(f"reading {spec}: narrowed {name}: {how}\n" for spec in (VLLM, SG23)
                   for name, how in sorted(reading(d.root, spec).narrowed.items()))
    golden("test_a_lost_head_dim_is_a_silent_cut_not_a_refusal", findings_of(result, "engine.loads", VLLM, SG23) + cuts)
    assert status(gate(drafter("flat").write()), "engine.loads", VLLM) == PASSED


def test_a_narrowed_reading_is_not_run_by_the_forward_pass(drafter):
    """A cut weight is not the trained one: the forward pass does not run a reading with cut tensors as if it were."""
    d = drafter("flat")
    del d.config["head_dim"]
    r = reading(d.write(), VLLM)
    assert r.narrowed and not r.servable
    assert reading(drafter("flat").write(), VLLM).servable


# ----- trainer releases ---------------------------------------------------------------------------------------------

def test_the_trainer_is_named_only_on_evidence(drafter):
    """speculators_version states it; SpecForge's template fields (max_window_layers, use_sliding_window) are written by
    speculators' train CLI too (speculators 0.9.0 train/cli.py:227-231) and name no trainer."""
    found = engines.identify(open_checkpoint(drafter("speculators").write()))
    assert (found.name, found.version, found.basis, found.how) == \
        ("speculators", "0.9.0", "read", "speculators_version in config.json")
    assert engines.identify(open_checkpoint(drafter("flat").write())).name is None
    d = drafter("flat")
    d.config["max_window_layers"] = 1
    assert engines.identify(open_checkpoint(d.write())).name is None
    stated = engines.identify(open_checkpoint(d.write()), stated="specforge")
    assert (stated.name, stated.version, stated.basis) == ("specforge", None, "read")


def test_specforge_0_1_0_trained_a_null_rope_scaling_with_base_10000(drafter):
    """SpecForge 0.1.0 (sdist) modeling/draft/llama3_eagle.py:248-252 builds LlamaRotaryEmbedding without a base
    (default 10000, :99); 0.2.0 passes rope_theta (:569-578)."""
    from eagle3_checks.engines import specforge

    ckpt = open_checkpoint(drafter("flat").write())
    old, new = (specforge.read(ckpt, **dict(r.differs)) for r in specforge.RELEASES)
    assert (old.rope_theta, new.rope_theta) == (10000.0, 1e6) and old.version == "0.1.0"


@pytest.mark.parametrize("case, fields, code", [
    # rope_scaling null, rope_theta 1e6: the releases differ
    ("rope-theta", {}, "config.trainer-release/unknown-release"),
    ("base-10000", {"rope_theta": 10000.0}, "config.trainer-release/detected"),  # both releases build base 10000
    # 0.1.0 builds every rotary embedding without a base (linear: llama3_eagle.py:256-261, :151)
    ("linear-rope", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "config.trainer-release/unknown-release"),
    # norm_output true: 0.2.0 feeds the pre-norm state back, SpecForge after PR #879 the normed one
    ("norm-output", {"rope_theta": 10000.0, "norm_output": True}, "config.trainer-release/unknown-release"),
])
def test_a_specforge_checkpoint_of_unknown_release_states_each_reading_where_they_differ(drafter, case, fields, code):
    d = drafter("flat")
    d.config.update(**fields)
    found = run(d.write(), level="header", trainer="specforge").result("config.trainer-release").findings
    assert [f.code for f in found] == [code]
    if code.endswith("unknown-release"):
        assert found[0].basis == "assumed"  # no transformers_version: no release is excluded
    # the message: each release's reading where they differ ("specforge 0.1.0 10000.0", "specforge 0.2.0 ...";
    # "main after PR #879 'normed'", "0.2.0 'prenorm'")
    golden(f"test_a_specforge_checkpoint_of_unknown_release_states_each_reading_where_they_differ-{case}",
           found[0].message + "\n")


@pytest.mark.parametrize("version", ["0.1.0", "0.10.0", "main"])
def test_a_speculators_release_the_gate_does_not_model_is_said(drafter, version):
    d = drafter("speculators")
    d.config["speculators_version"] = version
    result = run(d.write(), level="header")
    assert [f.code for f in result.result("config.trainer-release").findings] == ["config.trainer-release/not-modelled"]
    assert result.result("config.trainer-release").status == "warned"
    clean = run(drafter("speculators").write(), level="header").result("config.trainer-release")
    assert clean.status == "passed" and [f.code for f in clean.findings] == ["config.trainer-release/detected"]


def test_the_engine_checks_read_the_target_as_served(drafter, tmp_path):
    """Started with --max-model-len, that is the target's max_model_len: vLLM raises a plain-RoPE draft's
    max_position_embeddings to it (config/speculative.py:1807-1846), not to the target's own context (the live
    conformance run on vLLM 0.30.0 found the gate doing the latter)."""
    target = target_file(tmp_path, max_position_embeddings=32768)
    result = run(drafter("flat").write(), engine="vllm@0.33.0", level="header", reference="none",
                 target_config=str(target), max_model_len=8192)
    found = result.result("engine.serving", "vllm@0.33.0").findings
    assert [f.code for f in found] == ["engine.serving/context-raised"], found
    # raised from 4096 to the served max_model_len 8192, not to the target's 32768
    golden("test_the_engine_checks_read_the_target_as_served", findings_of(result, "engine.serving", "vllm@0.33.0"),
           tmp_path)


# ----- a message names the release it judges ------------------------------------------------------------------------
# A record holds for several releases (engines/record.py): its messages say {release}, never a literal, and a cited
# file's line numbers name the release they were read in ({lines}). Read over the defect catalogue and launches that
# reach the launch steps, every message of every release's reading names no other release of its own engine (vLLM,
# SGLang and speculators: the engines whose records hold for more than one release).
SAYS = {"vllm": "vLLM", "sglang": "SGLang", "speculators": "speculators"}
LAUNCHES = (None, {"speculative_config": {"not_a_field": 1}}, {"speculative_config": {"parallel_drafting": True}})


def reading_text(r) -> list[str]:
    parts = [*r.sources.values(), *r.refusals, *r.ignored.values(), *r.unused.values(), *r.unfilled.values(),
             *r.narrowed.values(), *r.replaced.values(), r.not_modelled or "", r.class_refusal or ""]
    return [p for p in parts if p]


def named_releases(text: str, engine: str) -> set[str]:
    """The releases of ``engine`` a message names as the one that does something ("SGLang 0.5.20 reads"): a range
    ("vLLM 0.28.0 to 0.33.0") and a cited file's release ("0.5.23's llama.py:103") are other statements."""
    import re

    version = r"\d+\.\d+\.\d+(?:\.\d+)?"  # speculators has four-part post releases (0.7.0.1)
    text = re.sub(rf"\b{SAYS[engine]} {version} to {version}", "", text)
    return set(re.findall(rf"\b{SAYS[engine]} ({version})\b", text))


def test_every_message_of_a_reading_names_the_release_it_judges(drafter):
    """(About its wording, by design: which release a message names is the behaviour under test, and no field carries
    it.) Every message of every release's reading names no other release of its own engine."""
    from eagle3_checks.defects import CATALOGUE
    from helpers import mla_drafter, write_defect

    ckpts = [open_checkpoint(write_defect(drafter(layout), defect)) for defect in CATALOGUE
             for layout in defect.layouts if defect.edit is not None or defect.after is not None]
    ckpts.append(open_checkpoint(mla_drafter(drafter("flat")).write()))
    wrong, said = [], 0
    for name in SAYS:
        for release, profile in engines.releases(name):
            judged = profile.at(release.version, release.differs)
            for ckpt in ckpts:
                for launch in LAUNCHES:
                    for text in reading_text(judged.read(ckpt, launch=launch)):
                        named = named_releases(text, name)
                        said += bool(named)
                        if named - {release.version}:
                            wrong.append((f"{name}@{release.version}", text))
    assert said > 50 and not wrong, sorted(set(wrong))[:20]


def test_a_message_naming_another_release_is_caught():
    """What the test above reads: the judged release passes, a literal other release is named."""
    assert named_releases("SGLang 0.5.20 reads flat configs only (0.5.23's srt/models/llama.py:366)", "sglang") == \
        {"0.5.20"}
    assert named_releases("which vLLM 0.33.0's SpeculativeConfig does not have", "vllm") == {"0.33.0"}
    assert named_releases("vLLM 0.28.0 to 0.33.0 only: their V1 runner", "vllm") == set()
