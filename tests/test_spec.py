"""Reference specs: the shipped ones, snapshots, --reference resolution and the diff."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from eagle3_checks.checks.reference import diff, with_aux_layers
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.config_values import read_target_config
from eagle3_checks.drafter.example import EXAMPLE, KIMI_K2, drafter_files, write_checkpoint
from eagle3_checks.drafter.layout import FLAT
from eagle3_checks.drafter.spec import Spec, load_spec, resolve_reference, shipped_specs, snapshot
from eagle3_checks.errors import UsageError
from helpers import SGLANG, VLLM, assert_golden, failing, run


def errors(findings):
    return [f.message for f in findings if f.severity.value == "error"]


def warnings(findings):
    return [f.message for f in findings if f.severity.value == "warning"]


def facts(findings):
    """What each finding states as data: (severity, code, key, expected, found)."""
    return {(f.severity.value, f.code, f.key, f.expected, f.found) for f in findings}


def _releases(text: str) -> str:
    """``text`` with the newest releases' versions written as <VLLM> and <SGLANG>: a golden file that names what a
    bare --engine judges changes with what it says of the release, not with the release's number alone."""
    return text.replace(f"vllm {VLLM}", "vllm <VLLM>").replace(f"sglang {SGLANG}", "sglang <SGLANG>")


def test_shipped_tiny_spec_is_the_embedded_example(drafter):
    """The committed spec must be regenerated whenever the example changes (eagle3-checks spec)."""
    shipped = load_spec(shipped_specs()["tiny-example"])
    fresh = snapshot(open_checkpoint(drafter("speculators").write()), "tiny-example")
    assert fresh.tensors == shipped.tensors
    assert fresh.config == shipped.config
    assert shipped.family == {"hidden_size": 64, "vocab_size": 512}


def test_aq_medai_spec_records_kimi_k2_shapes():
    spec = load_spec(shipped_specs()["aq-medai-kimi-k2-eagle3"])
    t, c = spec.tensors, spec.config
    assert t["fc.weight"].shape == (7168, 21504)
    assert t["layers.0.self_attn.q_proj.weight"].shape == (8192, 14336)
    assert t["layers.0.self_attn.o_proj.weight"].shape == (7168, 8192)
    assert t["lm_head.weight"].shape == (32000, 7168) and t["d2t"].dtype == "I64"
    assert t["embed_tokens.weight"].optional and t["t2d"].optional
    assert c["head_dim"] == 128 and c["aux_layer_ids"] == [2, 30, 58] and c["rope_theta"] == 1e6
    assert spec.aux_convention == "sglang" and spec.aux_convention_note.startswith("inferred")
    assert spec.family == {"hidden_size": 7168, "vocab_size": 163840}


def test_spec_round_trip(drafter, tmp_path):
    spec = snapshot(open_checkpoint(drafter("flat").write()), "x")
    (tmp_path / "x.json").write_text(spec.dumps())
    assert load_spec(tmp_path / "x.json").to_json() == spec.to_json()


def test_same_drafter_in_both_layouts_diffs_clean(drafter):
    a = snapshot(open_checkpoint(drafter("speculators").write()), "a")
    b = snapshot(open_checkpoint(drafter("flat").write()), "b")
    found = diff(b, a)
    assert not errors(found)
    assert [(f.severity.value, f.code, f.expected, f.found) for f in found] == [
        ("info", "layouts-differ", "speculators", "flat")]


def test_layout_difference_never_fails_even_strict(drafter):
    ref = drafter("speculators").write()
    result = run(drafter("flat", trained=True).write(), reference=str(ref), strict=True)
    assert result.result("reference.diff").status == "passed"
    assert result.exit_code == 0


def test_optional_and_required_tensors(drafter):
    ref = snapshot(open_checkpoint(drafter("flat").write()), "ref")
    no_embed = snapshot(open_checkpoint(drafter("flat", replace(EXAMPLE, embed_tokens=False)).write()), "c")
    assert not errors(diff(no_embed, ref)) and not errors(diff(ref, no_embed))
    d = drafter("flat", replace(EXAMPLE, attention_bias=True))
    with_bias = snapshot(open_checkpoint(d.write()), "bias")
    found = diff(with_bias, ref)
    # structure: an error (only the candidate has it)
    assert ("error", "tensor-presence", "layers.0.self_attn.q_proj.bias", "absent", "present") in facts(found)
    # the flag itself: what is computed
    assert ("warning", "semantic", "attention_bias", "False", "True") in facts(found)


def notes(findings):
    return [f.message for f in findings if f.severity.value == "info"]


def test_structure_fails_and_semantic_values_warn(drafter):
    """What breaks (a shape, a field that sizes tensors) is an error; a semantic value (rope, head_dim as stated) is
    a warning whose fix keeps the drafter's own value; the trainer's own choices (intermediate size, draft
    vocabulary, aux ids) are notes."""
    ref = snapshot(open_checkpoint(drafter("flat").write()), "ref")
    d = drafter("flat", replace(EXAMPLE, intermediate_size=192, rope_theta=10000.0))
    found = diff(snapshot(open_checkpoint(d.write()), "c"), ref)
    assert not errors(found)
    assert {x for x in facts(found) if x[0] != "info"} == {
        ("warning", "semantic", "rope_theta", "1000000.0", "10000.0")}
    (rope,) = [f for f in found if f.code == "semantic"]
    assert rope.basis == "read"
    # the trainer's choices: notes
    assert {("info", "trainer-shape", "layers.0.mlp.up_proj.weight", "[160, 64]", "[192, 64]"),
            ("info", "trainer-choice", "intermediate_size", "160", "192")} <= facts(found)
    (up,) = [f for f in found if f.key == "layers.0.mlp.up_proj.weight"]
    # the wording: what settles the rope base (--source, --data); the fix keeps the drafter's own value, never "take
    # the reference's"; the cost against the forward tolerance (head_dim 24, theta 1e4 vs 1e6 differ from the first
    # position on); and which field the note's shape follows
    assert_golden("test_spec/test_structure_fails_and_semantic_values_warn.txt",
                  "\n".join([rope.message, rope.why, rope.fix, rope.settle, up.message]))
    heads = drafter("flat", replace(EXAMPLE, num_attention_heads=8, head_dim=12))
    found = diff(snapshot(open_checkpoint(heads.write()), "h"), ref)
    assert ("error", "config-field", "num_attention_heads", "4", "8") in facts(found)  # sizes tensors
    assert ("error", "shape", "layers.0.self_attn.k_proj.weight", "[48, 128]", "[24, 128]") in facts(found)
    assert ("warning", "semantic", "head_dim", "24", "12") in facts(found)
    assert {f.code for f in found if f.severity.value == "error"} == {"config-field", "shape"}


def test_a_kimi_sized_drafter_with_another_draft_vocabulary_diffs_with_notes_only():
    """A Kimi-sized drafter with a 64,000-token draft vocabulary got 4 reference.diff errors against the
    AQ-MedAI spec ('fix the export'); the draft vocabulary is the trainer's choice."""
    aq = load_spec(shipped_specs()["aq-medai-kimi-k2-eagle3"])
    tensors = {**aq.tensors, "lm_head.weight": replace(aq.tensors["lm_head.weight"], shape=(64000, 7168)),
               "d2t": replace(aq.tensors["d2t"], shape=(64000,))}
    mine = replace(aq, name="mine", tensors=tensors, config={**aq.config, "draft_vocab_size": 64000})
    found = diff(mine, aq)
    assert not errors(found)
    assert notes(found) == [
        "d2t: shape [64000], aq-medai-kimi-k2-eagle3 has [32000] (follows draft_vocab_size: the trainer's choice, "
        "not fixed by the target)",
        "lm_head.weight: shape [64000, 7168], aq-medai-kimi-k2-eagle3 has [32000, 7168] (follows draft_vocab_size: "
        "the trainer's choice, not fixed by the target)",
        "config draft_vocab_size: 64000, aq-medai-kimi-k2-eagle3 has 32000 (the trainer's choice, not fixed by the "
        "target)"]
    wider = replace(mine, tensors={**tensors, "fc.weight": replace(aq.tensors["fc.weight"], shape=(7168, 28672))})
    assert errors(diff(wider, aq)) == ["fc.weight: shape [7168, 28672], aq-medai-kimi-k2-eagle3 has [7168, 21504]"]


def test_a_full_vocabulary_drafter_against_a_draft_vocabulary_reference(drafter):
    ref = snapshot(open_checkpoint(drafter("flat").write()), "ref")
    full = drafter("flat", replace(EXAMPLE, draft_vocab_size=EXAMPLE.vocab_size))
    found = diff(snapshot(open_checkpoint(full.write()), "c"), ref)
    assert not errors(found), errors(found)
    (d2t,) = [f for f in found if f.key == "d2t"]
    assert (d2t.severity.value, d2t.code) == ("info", "draft-vocab-tensor")
    # the wording: which side has it (the reference), and that it follows draft_vocab_size
    assert_golden("test_spec/test_a_full_vocabulary_drafter_against_a_draft_vocabulary_reference.txt", d2t.message)


def test_rope_spellings_compare_equal(drafter):
    """rope_parameters {rope_theta, rope_type: default} and a legacy rope_theta with rope_scaling null agree."""
    a = snapshot(open_checkpoint(drafter("speculators").write()), "a")
    assert a.config["rope_scaling"] is None and a.config["rope_theta"] == 1e6
    d = drafter("flat")
    d.config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
    found = diff(snapshot(open_checkpoint(d.write()), "b"), a)
    assert not errors(found) and warnings(found) == [
        "config rope_scaling: {'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 1024}, a has "
        "None"]


def _spec(ids, convention):
    return with_aux_layers(Spec("s", {"aux_layer_ids": ids}, {}, None, convention), None, None, None)


def test_aux_ids_compared_as_layers_when_both_conventions_are_known():
    # vLLM id L captures the output of layer L-1; SGLang id X the output of layer X.
    assert not diff(_spec([3, 31, 59], "vllm"), _spec([2, 30, 58], "sglang"))
    # which layers is the trainer's choice: a note (engine.aux-layers judges what the serving engine captures)
    # the layers the ids select, not their numbers: equal numbers counted differently differ, and the finding says
    # what it rests on (a convention) and what settles it
    (aux,) = diff(_spec([2, 30, 58], "vllm"), _spec([2, 30, 58], "sglang"))
    assert (aux.severity.value, aux.code, aux.key, aux.expected, aux.found) == (
        "info", "aux-convention", "aux_layer_ids", "outputs of layers [2, 30, 58]", "outputs of layers [1, 29, 57]")
    assert aux.basis == "inferred"
    assert not errors(diff(_spec([2, 30, 58], None), _spec([2, 30, 58], "sglang")))  # unknown: numbers
    # one side's counting unknown: compared as numbers, and the note says so
    (unknown,) = diff(_spec([1, 2, 3], None), _spec([2, 30, 58], "sglang"))
    assert unknown.code == "aux-not-compared" and unknown.severity.value == "info"
    assert (unknown.key, unknown.expected, unknown.found) == ("aux_layer_ids", "[2, 30, 58]", "[1, 2, 3]")
    # the wording: the layers each side captures, what settles it (--aux-convention), and which side's counting is
    # not known (the candidate's)
    assert_golden("test_spec/test_aux_ids_compared_as_layers_when_both_conventions_are_known.txt",
                  "\n".join([aux.message, aux.settle, unknown.message, unknown.settle]))
    assert not diff(_spec([2, 30, 58], None), _spec([2, 30, 58], "sglang"))  # same numbers: nothing to say


def test_reference_auto_picks_the_demos_spec_for_the_demos_checkpoint_only(drafter):
    """tiny-example is the demo's: picked without --reference for a checkpoint it describes exactly (the demo's,
    in either layout), for no other drafter of its width."""
    said = []
    for layout in ("flat", "speculators"):
        spec, note = resolve_reference("auto", open_checkpoint(drafter(layout).write()))
        assert spec.name == "tiny-example", note
        said.append(note)
    other = open_checkpoint(drafter("flat", replace(EXAMPLE, hidden_size=32, head_dim=8)).write())
    spec, note = resolve_reference("auto", other)
    assert spec is None and said[0] == said[1]
    result = run(other.path, reference="auto")
    assert result.reference_name is None and result.result("reference.diff").status == "skipped"
    # the wording: the checkpoint the demo's spec describes; for the other, that no spec matches its sizes (the note,
    # then the skipped diff's reason)
    assert_golden("test_spec/test_reference_auto_picks_the_demos_spec_for_the_demos_checkpoint_only.txt",
                  "\n".join([said[0], note, result.result("reference.diff").reason]))


def _users_drafter(drafter, **config):
    """A user's valid drafter of the demo's width that is not the demo's: float32 weights, its own eps and rope."""
    d = drafter("flat", replace(EXAMPLE, dtype="F32", rope_theta=10000.0))
    d.config.update(config)
    return d.write()


def test_a_users_drafter_of_the_demos_width_is_not_diffed_against_the_demo(drafter):
    """It was: auto picked tiny-example by shape alone and failed a valid drafter on F32 vs BF16, rms_norm_eps 1e-5 vs
    1e-6 and rope_theta. Now nothing is picked, the note says why, and the gate passes it."""
    path = _users_drafter(drafter, rms_norm_eps=1e-5)
    spec, note = resolve_reference("auto", open_checkpoint(path))
    assert spec is None
    # the wording: why nothing is picked (the closest spec, which describes one checkpoint, and what differs)
    assert_golden("test_spec/test_a_users_drafter_of_the_demos_width_is_not_diffed_against_the_demo.txt", note)
    result = run(path, reference="auto", level="header", strict=True, aux_convention="vllm")
    assert result.result("reference.diff").status == "skipped" and result.exit_code == 0, failing(result)
    # diffed against the demo on purpose (--reference tiny-example): the F32 weights are a note (engines cast them),
    # eps and rope warnings that keep the drafter's own values, nothing an error
    found = run(path, reference="tiny-example", level="header").result("reference.diff").findings
    assert not errors(found)
    assert {f.code for f in found if f.severity.value == "warning"} == {"reference.diff/semantic"}
    assert {x for x in facts(found) if x[0] == "warning"} == {
        ("warning", "reference.diff/semantic", "rms_norm_eps", "1e-06", "1e-05"),
        ("warning", "reference.diff/semantic", "rope_theta", "1000000.0", "10000.0")}
    assert [f.code for f in found if f.severity.value == "info"] == ["reference.diff/layouts-differ",
                                                                      "reference.diff/dtype-accepted"]
    assert all(f.basis == "read" for f in found)


def test_reference_auto_picks_nothing_for_another_draft_vocabulary(drafter):
    """Both vocabularies are part of what auto matches on; against the demo's spec named on purpose the draft
    vocabulary is the trainer's choice, a note."""
    path = drafter("flat", replace(EXAMPLE, draft_vocab_size=256)).write()
    assert run(path, reference="auto").reference_name is None
    result = run(path, reference="tiny-example")
    r = result.result("reference.diff")
    assert r.status == "passed", [f.message for f in r.findings]
    assert ("info", "reference.diff/trainer-choice", "draft_vocab_size", "128", "256") in facts(r.findings)


@pytest.mark.parametrize("change", [{"num_layers": 2}, {"num_attention_heads": 8, "head_dim": 12}],
                         ids=["two-layers", "other-heads"])
def test_reference_auto_matches_the_whole_family(drafter, request, change):
    """auto matched on hidden_size and vocab_size alone; heads, head_dim, the layer count and the kind of
    layer must match too, else the diff is skipped with the reason."""
    spec, note = resolve_reference("auto", open_checkpoint(drafter("flat", replace(EXAMPLE, **change)).write()))
    assert spec is None
    # the wording of the reason: the sizes matched on, and what differs from the closest spec
    assert_golden(f"test_spec/test_reference_auto_matches_the_whole_family-{request.node.callspec.id}.txt", note)


def test_reference_auto_never_gives_an_mla_drafter_a_llama_spec(drafter):
    """MLA drafters are modelled; auto matches them by layer kind, so no Llama-layer spec (the AQ-MedAI one,
    the tiny example) is ever chosen for one (the shipped MLA spec is of another size)."""
    from helpers import mla_drafter

    path = mla_drafter(drafter("flat")).write()
    spec, note = resolve_reference("auto", open_checkpoint(path))
    # the note names the nearest spec only, of the same kind of layer (not every spec's differences)
    assert spec is None, note
    assert_golden("test_spec/test_reference_auto_never_gives_an_mla_drafter_a_llama_spec.txt", note)
    assert run(path, reference="auto").result("reference.diff").status == "skipped"


def test_reference_existing_path_wins_over_name(drafter, tmp_path, monkeypatch):
    ref = drafter("speculators", replace(EXAMPLE, intermediate_size=192)).write()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny-example").symlink_to(ref)
    spec, note = resolve_reference("tiny-example", open_checkpoint(drafter("flat").write()))
    assert note == "checkpoint tiny-example" and spec.config["intermediate_size"] == 192


_VALID = {"schema": "eagle3-checks/reference-spec", "schema_version": 1, "name": "mine", "layout": "flat",
          "config": {}, "tensors": {}}


@pytest.mark.parametrize("content", [
    "{",
    json.dumps({"schema": "other"}),
    json.dumps({"schema": "eagle3-checks/reference-spec", "schema_version": 99}),
    json.dumps({**_VALID, "name": ""}),
    json.dumps({**_VALID, "layout": 7}),
    json.dumps({**_VALID, "aux_layer_convention": "bogus"}),
    json.dumps({**_VALID, "aux_layer_convention": ""}),
    json.dumps({**_VALID, "aux_layer_convention": {"value": "bogus"}}),
], ids=["not-json", "another-schema", "another-schema-version", "empty-name", "layout-not-a-string",
        "convention-a-string", "convention-empty", "convention-value-unknown"])
def test_bad_spec_files_are_usage_errors(drafter, tmp_path, request, content):
    (tmp_path / "bad.json").write_text(content)
    with pytest.raises(UsageError) as refused:
        run(drafter("flat").write(), reference=str(tmp_path / "bad.json"))
    # the wording: the file, and what is wrong in it
    assert_golden(f"test_spec/test_bad_spec_files_are_usage_errors-{request.node.callspec.id}.txt", str(refused.value),
                  {"TMP": tmp_path})


def test_a_minimal_valid_spec_loads(drafter, tmp_path):
    (tmp_path / "ok.json").write_text(json.dumps(_VALID))
    assert run(drafter("flat").write(), reference=str(tmp_path / "ok.json")).reference_name == "mine"


def test_unknown_reference_name_and_broken_reference_checkpoint(drafter):
    with pytest.raises(UsageError) as unknown:
        run(drafter("flat").write(), reference="no-such-spec")
    broken = drafter("speculators").write()
    (broken / "config.json").write_text("{")
    with pytest.raises(UsageError) as integrity:
        run(drafter("flat").write(), reference=str(broken))
    # the wording: nothing of that name; a reference checkpoint whose files cannot be read
    assert_golden("test_spec/test_unknown_reference_name_and_broken_reference_checkpoint.txt",
                  f"{unknown.value}\n{integrity.value}", {"TMP": broken.parent})


def test_fp32_candidate_against_bf16_reference_is_one_note(drafter):
    """Engines cast floating weights to the dtype they serve in: F32 against a BF16 reference is a note (one, for
    every tensor); a float d2t against an int64 one is another kind of tensor: an error."""
    import helpers

    result = run(drafter("speculators", replace(EXAMPLE, dtype="F32")).write(), reference="tiny-example")
    r = result.result("reference.diff")
    assert r.status == "passed" and [(f.code, f.key, f.expected, f.found) for f in r.findings] == [
        ("reference.diff/dtype-accepted", "embed_tokens.weight", "BF16", "F32")]
    # the wording: how many tensors and which (the first four), and where the engines cast them (weight_utils.py)
    assert_golden("test_spec/test_fp32_candidate_against_bf16_reference_is_one_note.txt",
                  r.findings[0].message + "\n" + r.findings[0].why)
    d = drafter("speculators")
    helpers.inject(d, "d2t-float")
    found = run(d.write(), reference="tiny-example").result("reference.diff").findings
    assert [(f.code, f.severity.value) for f in found] == [("reference.diff/dtype", "error")]


@pytest.mark.parametrize("breakage", ["config-unreadable", "shard-missing"])
def test_diff_is_skipped_when_the_checkpoint_cannot_be_read_whole(drafter, breakage):
    """The files check names the problem; a diff of an unreadable config or a partial tensor list against the
    reference would add a score of errors that say nothing more (20 "unknown" fields, 14 "only the reference has
    it")."""
    path = drafter("flat").write(shards=2)
    if breakage == "config-unreadable":
        (path / "config.json").write_text("{")
    else:
        next(path.glob("model-00001-*.safetensors")).unlink()
    result = run(path, reference="tiny-example", level="header")
    r = result.result("reference.diff")
    assert r.status == "skipped"
    # the wording: the files check names the problem (its reason points there)
    assert_golden(f"test_spec/test_diff_is_skipped_when_the_checkpoint_cannot_be_read_whole-{breakage}.txt", r.reason,
                  {"TMP": path})
    assert result.result("files").status == "failed" and result.exit_code == 1
    assert run(drafter("flat").write(shards=2), reference="tiny-example").result("reference.diff").status == "passed"


@pytest.mark.parametrize("name", sorted(shipped_specs()))
def test_every_shipped_spec_says_where_its_values_come_from(name):
    """A reference spec is a claim about a published drafter (or, for the tiny one, the embedded example): its
    ``source`` says where each value comes from, so that a value no published drafter has (the MLA spec's
    rms_norm_eps 1e-6 was one) can be traced and corrected. It names the published checkpoint or the embedded
    example, and speaks of the project only (no tracker numbers)."""
    spec = load_spec(shipped_specs()[name])
    assert len(spec.source) >= 80, spec.source
    assert re.search(r"published|embedded example", spec.source), spec.source
    assert not re.search(r"\bissue \d+", spec.source), spec.source


# ----- published drafters' specs: picked for their own target family; what breaks vs what differs ------------------

KIMI_K2_TARGET = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 7168,
                  "num_hidden_layers": 61, "vocab_size": 163840}
KIMI_K25_TARGET = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
                   "text_config": {"hidden_size": 7168, "num_hidden_layers": 61, "vocab_size": 163840}}


def _kimi_k2(tmp_path, name="kimi", shape=KIMI_K2, **config):
    """A Llama-layer drafter of the AQ-MedAI Kimi-K2 drafter's sizes (headers only: sparse tensors)."""
    tensors, cfg = drafter_files(shape, FLAT, sparse=True)
    cfg.update(config)
    return write_checkpoint(tmp_path / name, tensors, cfg)


def _target(tmp_path, config, name="target.json"):
    (tmp_path / name).write_text(json.dumps(config))
    return str(tmp_path / name)


def test_a_published_spec_is_picked_for_its_own_target_family_only(tmp_path):
    """Kimi-K2 and Kimi-K2.5 Llama-layer drafters are built alike (SpecForge's two templates differ in model_type):
    the AQ-MedAI Kimi-K2 spec is evidence for a Kimi-K2 drafter only, so auto needs the target."""
    ck = open_checkpoint(_kimi_k2(tmp_path))
    notes = []
    spec, note = resolve_reference("auto", ck)
    assert spec is None, note
    notes.append(note)
    spec, note = resolve_reference("auto", ck, read_target_config(KIMI_K2_TARGET, "k2.json"))
    assert spec.name == "aq-medai-kimi-k2-eagle3", note
    notes.append(note)
    spec, note = resolve_reference("auto", ck, read_target_config(KIMI_K25_TARGET, "k25.json"))
    assert spec is None, note
    notes.append(note)
    # the verifier the drafter's own config names is evidence of its target too
    spec, note = resolve_reference("auto", ck, None, ["DeepseekV3ForCausalLM"])
    assert spec.name == "aq-medai-kimi-k2-eagle3", note
    notes.append(note)
    # both vocabularies: another draft vocabulary is not the published drafter's build
    other = open_checkpoint(_kimi_k2(tmp_path, "dv", replace(KIMI_K2, draft_vocab_size=64000)))
    spec, note = resolve_reference("auto", other, read_target_config(KIMI_K2_TARGET, "k2.json"))
    assert spec is None, note
    notes.append(note)
    # the wording of each note: without the target, the target the spec is for, another target, the verifier the
    # drafter's config names, another draft vocabulary
    assert_golden("test_spec/test_a_published_spec_is_picked_for_its_own_target_family_only.txt", "\n".join(notes),
                  {"TMP": tmp_path})


def test_done_an_aq_medai_shaped_drafter_with_eps_1e5_warns_stating_both_engines(tmp_path):
    """It failed reference.diff ("state rms_norm_eps as the reference has it") although both engines serve it with
    the 1e-5 it states. Now: a warning that says what vLLM 0.33.0 and SGLang 0.5.23 each compute with either value
    and what the difference costs against the forward tolerance; its fix keeps the drafter's own value."""
    path = _kimi_k2(tmp_path, rms_norm_eps=1e-5)
    result = run(path, reference="auto", target_config=_target(tmp_path, KIMI_K2_TARGET), engine="vllm,sglang",
                 level="header")
    assert result.reference_name == "aq-medai-kimi-k2-eagle3", result.reference_note
    r = result.result("reference.diff")
    assert r.status == "warned" and [(f.code, f.severity.value) for f in r.findings] == [
        ("reference.diff/semantic", "warning")]
    (f,) = r.findings
    assert (f.key, f.expected, f.found, f.file, f.basis) == ("rms_norm_eps", "1e-06", "1e-05", "config.json", "read")
    # the wording: what each release computes with either value, what the difference costs against the forward
    # tolerance, a fix that keeps the drafter's own value (not the reference's 1e-06), and what settles it (--source)
    assert_golden("test_spec/test_done_an_aq_medai_shaped_drafter_with_eps_1e5_warns_stating_both_engines.txt",
                  _releases("\n".join([f.message, f.why, f.fix, f.settle])))
    # --strict fails a warning, as for any check; without it the diff does not fail the drafter
    assert not [x for x in r.findings if x.severity.value == "error"]


def _demo_width(drafter, tmp_path, change):
    d = drafter("flat", replace(EXAMPLE, **change.get("shape", {})))
    d.config.update(change.get("config", {}))
    return d.write(), None


def _kimi_width(drafter, tmp_path, change):
    return _kimi_k2(tmp_path, **change.get("config", {})), _target(tmp_path, KIMI_K2_TARGET)


@pytest.mark.parametrize("build, change", [
    (_demo_width, {"config": {"rms_norm_eps": 1e-5}}),
    (_demo_width, {"shape": {"rope_theta": 10000.0}}),
    (_demo_width, {"shape": {"dtype": "F32"}}),
    (_demo_width, {"shape": {"draft_vocab_size": 256}}),
    (_demo_width, {"shape": {"intermediate_size": 192}}),
    (_demo_width, {"shape": {"norm_before_residual": True}}),
    (_demo_width, {"shape": {"num_key_value_heads": 4}}),
    (_demo_width, {"shape": {"embed_tokens": False}}),
    (_kimi_width, {"config": {"rms_norm_eps": 1e-5}}),
    (_kimi_width, {"config": {"rope_theta": 50000.0, "norm_before_residual": True}}),
    (_kimi_width, {"config": {"hidden_act": "gelu"}}),
], ids=lambda v: v.__name__ if callable(v) else repr(v))
def test_no_shipped_spec_fails_a_drafter_it_was_not_asked_to_diff(drafter, tmp_path, build, change):
    """Without --reference, a valid drafter of a shipped spec's width gets no reference.diff error: the demo's spec
    is not picked for it, and a published drafter's spec is picked only for a drafter built like it, where what
    differs is a semantic value (a warning) or a dtype engines cast (a note)."""
    path, target = build(drafter, tmp_path, change)
    result = run(path, reference="auto", target_config=target, level="header")
    r = result.result("reference.diff")
    assert r.status != "failed" and not [f for f in r.findings if f.severity.value == "error"], \
        (result.reference_note, [f.message for f in r.findings])
