"""Reference specs: the shipped ones, snapshots, --reference resolution and the diff."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from eagle3_checks.checkpoint import open_checkpoint
from eagle3_checks.errors import UsageError
from eagle3_checks.example import EXAMPLE
from eagle3_checks.spec import Spec, diff, load_spec, resolve_reference, shipped_specs, snapshot

from conftest import run


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
    result = run(drafter("flat").write(), reference=str(ref), strict=True)
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


def test_semantic_field_and_shape_differences_fail(drafter):
    ref = snapshot(open_checkpoint(drafter("flat").write()), "ref")
    d = drafter("flat", replace(EXAMPLE, intermediate_size=192, rope_theta=10000.0))
    msgs = errors(diff(snapshot(open_checkpoint(d.write()), "c"), ref))
    assert "layers.0.mlp.up_proj.weight: shape [192, 64], ref has [160, 64]" in msgs
    assert "config intermediate_size: 192, ref has 160" in msgs
    assert "config rope_theta: 10000.0, ref has 1000000.0" in msgs


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
    assert not errors(diff(_spec([3, 31, 59], "vllm"), _spec([2, 30, 58], "sglang")))
    msgs = errors(diff(_spec([2, 30, 58], "vllm"), _spec([2, 30, 58], "sglang")))
    assert msgs and "capture the outputs of target layers [1, 29, 57]" in msgs[0]
    assert not errors(diff(_spec([2, 30, 58], None), _spec([2, 30, 58], "sglang")))  # unknown: numbers


def test_reference_auto_picks_by_family_or_skips(drafter):
    ck = open_checkpoint(drafter("flat").write())
    spec, note = resolve_reference("auto", ck)
    assert spec.name == "tiny-example" and note.startswith("auto:")
    other = open_checkpoint(drafter("flat", replace(EXAMPLE, hidden_size=32, head_dim=8)).write())
    spec, note = resolve_reference("auto", other)
    assert spec is None and "no shipped reference spec matches hidden_size 32, vocab_size 512" in note
    result = run(other.path, reference="auto")
    assert result.result("reference.diff").status == "skipped"
    assert "no shipped reference spec matches" in result.result("reference.diff").reason


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
    import test_defects

    d = drafter("speculators")
    test_defects.fp32_weights(d)
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
