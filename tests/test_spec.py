"""Reference specs: the shipped ones, snapshots, --reference resolution and the diff."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from eagle3_checks.checks.reference import diff
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.example import EXAMPLE
from eagle3_checks.drafter.spec import Spec, load_spec, resolve_reference, shipped_specs, snapshot
from eagle3_checks.errors import UsageError
from helpers import run


def errors(findings):
    return [f.message for f in findings if f.severity.value == "error"]


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
    assert [f.severity.value for f in found] == ["info"] and "layouts differ" in found[0].message


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
    msgs = errors(diff(with_bias, ref))
    assert "layers.0.self_attn.q_proj.bias: only the candidate has it" in msgs
    assert "config attention_bias: True, ref has False" in msgs


def notes(findings):
    return [f.message for f in findings if f.severity.value == "info"]


def test_semantic_field_and_shape_differences_fail(drafter):
    """What the target fixes (hidden size, heads, head_dim, rope, ...) is an error; the trainer's own choices
    (intermediate size, draft vocabulary, aux ids) are notes (they used to be errors)."""
    ref = snapshot(open_checkpoint(drafter("flat").write()), "ref")
    d = drafter("flat", replace(EXAMPLE, intermediate_size=192, rope_theta=10000.0))
    found = diff(snapshot(open_checkpoint(d.write()), "c"), ref)
    assert errors(found) == ["config rope_theta: 10000.0, ref has 1000000.0"]
    assert "layers.0.mlp.up_proj.weight: shape [192, 64], ref has [160, 64] (follows intermediate_size: the " \
           "trainer's choice, not fixed by the target)" in notes(found)
    assert "config intermediate_size: 192, ref has 160 (the trainer's choice, not fixed by the target)" in notes(found)
    heads = drafter("flat", replace(EXAMPLE, num_attention_heads=8, head_dim=12))
    assert "config head_dim: 12, ref has 24" in errors(diff(snapshot(open_checkpoint(heads.write()), "h"), ref))


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
    assert "d2t: only ref has it (follows draft_vocab_size: the trainer's choice, not fixed by the target)" in \
        notes(found)


def test_rope_spellings_compare_equal(drafter):
    """rope_parameters {rope_theta, rope_type: default} and a legacy rope_theta with rope_scaling null agree."""
    a = snapshot(open_checkpoint(drafter("speculators").write()), "a")
    assert a.config["rope_scaling"] is None and a.config["rope_theta"] == 1e6
    d = drafter("flat")
    d.config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
    msgs = errors(diff(snapshot(open_checkpoint(d.write()), "b"), a))
    assert msgs == ["config rope_scaling: {'rope_type': 'yarn', 'factor': 4.0, "
                    "'original_max_position_embeddings': 1024}, a has None"]


def _spec(ids, convention):
    return Spec("s", {"aux_layer_ids": ids}, {}, None, convention)


def test_aux_ids_compared_as_layers_when_both_conventions_are_known():
    # vLLM id L captures the output of layer L-1; SGLang id X the output of layer X.
    assert not diff(_spec([3, 31, 59], "vllm"), _spec([2, 30, 58], "sglang"))
    # which layers is the trainer's choice: a note (engine.aux-layers judges what the serving engine captures)
    msgs = notes(diff(_spec([2, 30, 58], "vllm"), _spec([2, 30, 58], "sglang")))
    assert msgs and "capture the outputs of target layers [1, 29, 57]" in msgs[0]
    assert not errors(diff(_spec([2, 30, 58], "vllm"), _spec([2, 30, 58], "sglang")))
    assert not errors(diff(_spec([2, 30, 58], None), _spec([2, 30, 58], "sglang")))  # unknown: numbers


def test_reference_auto_picks_by_family_or_skips(drafter):
    ck = open_checkpoint(drafter("flat").write())
    spec, note = resolve_reference("auto", ck)
    assert spec.name == "tiny-example" and note.startswith("auto:")
    assert note == ("auto: shipped spec tiny-example (same family: hidden_size 64, vocab_size 512, 4 heads of 24, "
                    "1 Llama layer(s))")
    other = open_checkpoint(drafter("flat", replace(EXAMPLE, hidden_size=32, head_dim=8)).write())
    spec, note = resolve_reference("auto", other)
    assert spec is None and "no shipped reference spec matches hidden_size 32, vocab_size 512" in note
    result = run(other.path, reference="auto")
    assert result.result("reference.diff").status == "skipped"
    assert "no shipped reference spec matches" in result.result("reference.diff").reason


@pytest.mark.parametrize("change, why", [
    ({"num_layers": 2}, "tiny-example: num_hidden_layers 2 vs 1"),
    ({"num_attention_heads": 8, "head_dim": 12}, "tiny-example: num_attention_heads 8 vs 4, head_dim 12 vs 24"),
])
def test_reference_auto_matches_the_whole_family(drafter, change, why):
    """auto matched on hidden_size and vocab_size alone; heads, head_dim, the layer count and the kind of
    layer must match too, else the diff is skipped with the reason."""
    spec, note = resolve_reference("auto", open_checkpoint(drafter("flat", replace(EXAMPLE, **change)).write()))
    assert spec is None and why in note and note.startswith("no shipped reference spec matches hidden_size 64")


def test_reference_auto_picks_the_family_whatever_the_draft_vocabulary(drafter):
    path = drafter("flat", replace(EXAMPLE, draft_vocab_size=256)).write()
    result = run(path, reference="auto")
    r = result.result("reference.diff")
    assert result.reference_name == "tiny-example" and r.status == "passed", [f.message for f in r.findings]
    assert any("config draft_vocab_size: 256, tiny-example has 128 (the trainer's choice" in f.message
               for f in r.findings)


def test_reference_auto_never_gives_an_mla_drafter_a_llama_spec(drafter):
    """MLA drafters are modelled; auto matches them by layer kind, so no Llama-layer spec (the AQ-MedAI one,
    the tiny example) is ever chosen for one (the shipped MLA spec is of another size)."""
    from helpers import mla_drafter

    path = mla_drafter(drafter("flat")).write()
    spec, note = resolve_reference("auto", open_checkpoint(path))
    # the note names the nearest spec only, of the same kind of layer (not every spec's differences)
    assert spec is None and "closest kimi-k2.5-mla-eagle3: hidden_size 64 vs 7168" in note, note
    assert "tiny-example" not in note
    assert run(path, reference="auto").result("reference.diff").status == "skipped"


def test_reference_existing_path_wins_over_name(drafter, tmp_path, monkeypatch):
    ref = drafter("speculators", replace(EXAMPLE, intermediate_size=192)).write()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny-example").symlink_to(ref)
    spec, note = resolve_reference("tiny-example", open_checkpoint(drafter("flat").write()))
    assert note == "checkpoint tiny-example" and spec.config["intermediate_size"] == 192


_VALID = {"schema": "eagle3-checks/reference-spec", "schema_version": 1, "name": "mine", "layout": "flat",
          "config": {}, "tensors": {}}


@pytest.mark.parametrize("content, fragment", [
    ("{", "cannot read the reference spec"),
    (json.dumps({"schema": "other"}), '"schema" must be "eagle3-checks/reference-spec"'),
    (json.dumps({"schema": "eagle3-checks/reference-spec", "schema_version": 99}), "schema_version 99"),
    (json.dumps({**_VALID, "name": ""}), "needs a non-empty string name"),
    (json.dumps({**_VALID, "layout": 7}), "layout 7: 'speculators', 'flat' or null"),
    (json.dumps({**_VALID, "aux_layer_convention": "bogus"}), "aux_layer_convention must be an object"),
    (json.dumps({**_VALID, "aux_layer_convention": ""}), "aux_layer_convention must be an object"),
    (json.dumps({**_VALID, "aux_layer_convention": {"value": "bogus"}}), "aux_layer_convention.value 'bogus'"),
])
def test_bad_spec_files_are_usage_errors(drafter, tmp_path, content, fragment):
    (tmp_path / "bad.json").write_text(content)
    with pytest.raises(UsageError, match=re.escape(fragment)):
        run(drafter("flat").write(), reference=str(tmp_path / "bad.json"))


def test_a_minimal_valid_spec_loads(drafter, tmp_path):
    (tmp_path / "ok.json").write_text(json.dumps(_VALID))
    assert run(drafter("flat").write(), reference=str(tmp_path / "ok.json")).reference_name == "mine"


def test_unknown_reference_name_and_broken_reference_checkpoint(drafter):
    with pytest.raises(UsageError, match="no such file, directory or shipped spec"):
        run(drafter("flat").write(), reference="no-such-spec")
    broken = drafter("speculators").write()
    (broken / "config.json").write_text("{")
    with pytest.raises(UsageError, match="reference checkpoint has integrity problems"):
        run(drafter("flat").write(), reference=str(broken))


def test_fp32_candidate_against_bf16_reference_is_one_finding(drafter):
    import helpers

    d = drafter("speculators")
    helpers.inject(d, "fp32-weights")
    result = run(d.write(), reference="tiny-example")
    assert errors(result.result("reference.diff").findings) == [
        "14 tensor(s) are F32, tiny-example has BF16: embed_tokens.weight, fc.weight, layers.0.hidden_norm.weight, "
        "layers.0.input_layernorm.weight, ... (10 more)"]


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
    assert r.status == "skipped" and "see the files check" in r.reason
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
