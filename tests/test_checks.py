"""Each check, beyond the defect matrix: the finding it gives for each rule, with its code and severity; what it says
is each test's golden file (tests/golden/test_checks/TEST.txt: regenerate with pytest --update-goldens)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from eagle3_checks.drafter.example import EXAMPLE
from eagle3_checks.gate import FAILED, PASSED, SKIPPED, WARNED, all_checks
from eagle3_checks.registry import modelled_only
from eagle3_checks.storage.safetensors import RawTensor, from_numpy
from helpers import SGLANG, VLLM, assert_fails, assert_golden, codes, mla_drafter, run


def findings(result, check_id, severity=None):
    r = result.result(check_id)
    return [f for f in r.findings if severity is None or f.severity.value == severity]


def warned(result, check_id, *codes):
    """``check_id`` warned, with a warning of each of ``codes``."""
    r = result.result(check_id)
    assert r.status == WARNED, (r.status, [f.message for f in r.findings])
    found = {f.code for f in r.findings if f.severity.value == "warning"}
    assert set(codes) <= found, found


def said(result, *codes):
    """What the findings of ``codes`` say in a gate run (every engine's, in the gate's order), each whole: code and
    severity, message, where, expected and found, why and fix; the run's folder written <TMP>."""
    lines = []
    for f in result.findings():
        if f.code in codes:
            lines += [f"{f.code_label} ({f.severity.value}): {f.message}",
                      *(f"  {k}: {getattr(f, k)}" for k in ("file", "key", "expected", "found", "why", "fix")
                        if getattr(f, k) is not None)]
    assert lines, f"no finding of {codes}"
    return "\n".join(lines).replace(str(result.ckpt.source.path.parent), "<TMP>") + "\n"


def golden(test, *said):
    """The test's golden file: what its findings say (:func:`said`), each run's in turn."""
    assert_golden(f"test_checks/{test}.txt", "\n".join(said))


# ----- keys ------------------------------------------------------------------------------------------

def test_keys_bias_without_flag(drafter):
    d = drafter("flat")
    d.tensors["midlayer.self_attn.q_proj.bias"] = from_numpy(np.zeros(96, np.float32), "BF16")
    result = run(d.write())
    assert_fails(result, "keys/undeclared-bias")
    golden("test_keys_bias_without_flag", said(result, "keys/undeclared-bias"))  # midlayer.self_attn.q_proj.bias


def test_keys_missing_bias_with_flag(drafter):
    d = drafter("speculators", replace(EXAMPLE, mlp_bias=True))
    del d.tensors["layers.0.mlp.down_proj.bias"]
    result = run(d.write())
    assert_fails(result, "keys/missing-tensor")
    golden("test_keys_missing_bias_with_flag", said(result, "keys/missing-tensor"))  # layers.0.mlp.down_proj.bias


def test_keys_input_norm_without_norm_before_fc(drafter):
    d = drafter("flat", replace(EXAMPLE, norm_before_fc=True))
    del d.config["norm_before_fc"]
    assert_fails(run(d.write()), "keys/undeclared-input-norm")


def test_extra_layer_is_a_layer_count_error_not_a_key_error(drafter):
    d = drafter("speculators", replace(EXAMPLE, num_layers=2))
    d.config["transformer_layer_config"]["num_hidden_layers"] = 1
    result = run(d.write())
    assert_fails(result, "config.layers/count-mismatch")  # num_hidden_layers is 1, the checkpoint has 2
    assert result.result("keys").status == PASSED
    golden("test_extra_layer_is_a_layer_count_error_not_a_key_error", said(result, "config.layers/count-mismatch"))


def test_keys_unknown_tensor(drafter):
    d = drafter("flat")
    d.tensors["verifier_lm_head.weight"] = d.tensors["lm_head.weight"]
    result = run(d.write())
    assert_fails(result, "keys/unknown-tensor")
    golden("test_keys_unknown_tensor", said(result, "keys/unknown-tensor"))  # verifier_lm_head.weight


def test_keys_flat_names_in_speculators_layout(drafter):
    d = drafter("speculators")
    d.tensors = {k.replace("layers.0.", "midlayer."): v for k, v in d.tensors.items()}
    result = run(d.write())
    assert_fails(result, "keys/flat-names")  # 10 tensors, layers.0.hidden_norm.weight among them
    golden("test_keys_flat_names_in_speculators_layout", said(result, "keys/flat-names"))


def test_keys_same_tensor_twice(drafter):
    d = drafter("flat")
    d.tensors["layers.0.hidden_norm.weight"] = d.tensors["midlayer.hidden_norm.weight"]
    result = run(d.write())
    assert_fails(result, "keys/duplicate-tensor")
    golden("test_keys_same_tensor_twice", said(result, "keys/duplicate-tensor"))  # layers.0.hidden_norm.weight


def test_keys_flat_config_with_layers0_names_is_valid(drafter):
    """vLLM maps midlayer. and layers.0. alike; a note says SGLang 0.5.6 reads only midlayer.*."""
    d = drafter("flat", first_layer="layers")
    assert "layers.0.fc" not in d.tensors and "layers.0.hidden_norm.weight" in d.tensors
    result = run(d.write())
    assert result.result("keys").status == PASSED
    assert [f.code for f in findings(result, "keys", "info")] == ["keys/layers-0-names"]  # SGLang 0.5.6's reading
    assert result.exit_code == 0
    golden("test_keys_flat_config_with_layers0_names_is_valid", said(result, "keys/layers-0-names"))


def test_keys_vocab_mapping_with_full_vocabulary(drafter):
    """vLLM builds no draft_id_to_target_id when the vocabularies are equal and refuses a d2t; t2d it skips."""
    d = drafter("speculators", replace(EXAMPLE, draft_vocab_size=EXAMPLE.vocab_size))
    d.tensors["d2t"] = from_numpy(np.zeros(EXAMPLE.vocab_size, np.int64))
    assert_fails(run(d.write()), "keys/unneeded-d2t")
    del d.tensors["d2t"]
    d.tensors["t2d"] = from_numpy(np.ones(EXAMPLE.vocab_size, bool))
    result = run(d.write(), level="header")
    assert result.result("keys").status == PASSED
    assert [f.code for f in findings(result, "keys")] == ["keys/unneeded-t2d"]  # vLLM and SGLang skip it
    golden("test_keys_vocab_mapping_with_full_vocabulary", said(result, "keys/unneeded-t2d"))


def test_keys_qk_norm_follows_the_flat_architecture(drafter):
    """vLLM builds Llama layers for LlamaForCausalLMEagle3 whatever the model_type: q_norm is refused there;
    Eagle3Qwen3ForCausalLM builds Qwen3 layers, which need it."""
    d = drafter("flat", replace(EXAMPLE, model_type="qwen3"))
    d.config["architectures"] = ["LlamaForCausalLMEagle3"]
    llama = run(d.write())
    assert_fails(llama, "keys/undeclared-qk-norm")  # q_norm.weight
    d.config["architectures"] = ["Eagle3Qwen3ForCausalLM"]
    assert run(d.write(), level="header").result("keys").status == PASSED
    del d.tensors["midlayer.self_attn.k_norm.weight"]
    qwen3 = run(d.write())
    assert_fails(qwen3, "keys/missing-tensor")  # k_norm.weight
    golden("test_keys_qk_norm_follows_the_flat_architecture", said(llama, "keys/undeclared-qk-norm"),
           said(qwen3, "keys/missing-tensor"))


def test_keys_lm_head_missing_explains_accept_length(drafter):
    d = drafter("flat")
    del d.tensors["lm_head.weight"]
    result = run(d.write())
    assert_fails(result, "keys/missing-tensor")
    # lm_head.weight, and why it matters: SGLang PR #27908's accept length
    golden("test_keys_lm_head_missing_explains_accept_length", said(result, "keys/missing-tensor"))


# ----- shapes ----------------------------------------------------------------------------------------

def test_shapes_mlp_and_norm(drafter):
    d = drafter("speculators")
    t = d.tensors["layers.0.mlp.down_proj.weight"]
    d.tensors["layers.0.mlp.down_proj.weight"] = RawTensor(t.dtype, (64, 128), b"\0" * 64 * 128 * 2)
    d.tensors["norm.weight"] = from_numpy(np.ones(32, np.float32), "BF16")
    result = run(d.write())
    assert_fails(result, "shapes/mismatch")
    assert {f.key for f in findings(result, "shapes", "error")} >= {"layers.0.mlp.down_proj.weight", "norm.weight"}
    golden("test_shapes_mlp_and_norm", said(result, "shapes/mismatch"))


def test_shapes_second_layer_takes_hidden_size(drafter):
    d = drafter("speculators", replace(EXAMPLE, num_layers=2))
    d.tensors["layers.1.self_attn.q_proj.weight"] = d.tensors["layers.0.self_attn.q_proj.weight"]
    result = run(d.write())
    assert_fails(result, "shapes/mismatch")
    assert "layers.1.self_attn.q_proj.weight" in {f.key for f in findings(result, "shapes", "error")}
    golden("test_shapes_second_layer_takes_hidden_size", said(result, "shapes/mismatch"))  # (96, 64) (nh·hd, H)


# ----- dtypes ----------------------------------------------------------------------------------------

def test_dtypes_mixed_weights_warn(drafter):
    d = drafter("flat")
    d.tensors["norm.weight"] = from_numpy(np.ones(64, np.float32))
    result = run(d.write())
    warned(result, "dtypes", "dtypes/mixed-weights")  # norm.weight F32 among BF16
    golden("test_dtypes_mixed_weights_warn", said(result, "dtypes/mixed-weights"))


def test_dtypes_config_disagrees_warns(drafter):
    d = drafter("speculators")
    d.config["dtype"] = "float16"
    result = run(d.write())
    warned(result, "dtypes", "dtypes/config-dtype-differs")  # BF16 weights, float16 stated
    golden("test_dtypes_config_disagrees_warns", said(result, "dtypes/config-dtype-differs"))


def test_dtypes_config_states_two_different_dtypes_warns(drafter):
    d = drafter("flat")
    d.config["dtype"] = "float16"  # beside torch_dtype bfloat16
    result = run(d.write())
    warned(result, "dtypes", "dtypes/dtype-and-torch-dtype")  # fix: keep one of them, the weights' dtype (BF16)
    golden("test_dtypes_config_states_two_different_dtypes_warns", said(result, "dtypes/dtype-and-torch-dtype"))
    d.config["dtype"] = "bfloat16"
    assert run(d.write()).result("dtypes").status == PASSED


def test_dtypes_config_states_nothing_warns(drafter):
    d = drafter("flat")
    del d.config["torch_dtype"]
    result = run(d.write())
    warned(result, "dtypes", "dtypes/config-dtype-missing")
    golden("test_dtypes_config_states_nothing_warns", said(result, "dtypes/config-dtype-missing"))


def test_dtypes_integer_weight_fails(drafter):
    d = drafter("flat")
    d.tensors["fc.weight"] = from_numpy(np.zeros((64, 192), np.int8))
    result = run(d.write())
    assert_fails(result, "dtypes/non-float-weight")
    golden("test_dtypes_integer_weight_fails", said(result, "dtypes/non-float-weight"))  # fc.weight


def test_dtypes_narrow_d2t_and_int_t2d_warn(drafter):
    d = drafter("flat")
    d.tensors["d2t"] = from_numpy(np.frombuffer(d.tensors["d2t"].data, "<i8").astype(np.int32))
    d.tensors["t2d"] = from_numpy(np.frombuffer(d.tensors["t2d"].data, bool).astype(np.uint8))
    result = run(d.write())
    warned(result, "dtypes", "dtypes/d2t-narrow", "dtypes/t2d-integer")  # d2t I32 (producers write I64), t2d U8
    golden("test_dtypes_narrow_d2t_and_int_t2d_warn", said(result, "dtypes/d2t-narrow", "dtypes/t2d-integer"))
    assert result.result("vocab.d2t").status == PASSED  # values are still valid offsets


# ----- vocab -----------------------------------------------------------------------------------------

def test_d2t_absolute_heuristic_without_t2d_warns(drafter):
    """Absolute ids that happen to stay in range: only the heuristic can tell, so it warns."""
    shape = replace(EXAMPLE, vocab_size=4096, t2d=False)
    d = drafter("flat", shape)
    ids = np.sort(np.random.default_rng(1).choice(1024, 128, replace=False))
    d.tensors["d2t"] = from_numpy(ids.astype(np.int64))
    d.tensors["embed_tokens.weight"] = from_numpy(np.zeros((4096, 64), np.float32), "BF16")
    result = run(d.write())
    warned(result, "vocab.d2t", "vocab.d2t/absolute-ids")  # strictly increasing everywhere, as absolute ids are
    golden("test_d2t_absolute_heuristic_without_t2d_warns", said(result, "vocab.d2t/absolute-ids"))


def severities(result, check_id):
    return {f.code: f.severity.value for f in result.result(check_id).findings}


@pytest.mark.parametrize("t2d", ["none", "unfilled"])
def test_d2t_all_zero_with_a_smaller_draft_vocabulary_fails(drafter, t2d):
    """An all-zero d2t while DV < V is a mapping never filled in: speculators 0.9.0 starts d2t and t2d as zeros
    (speculators/model.py:51-55), and vLLM 0.33.0 (llama_eagle3.py:385-394) and SGLang 0.5.23
    (llama_eagle3.py:350-352) then propose target id i for draft id i. Without t2d (the issue's case) vocab.d2t
    fails it; with speculators' unfilled all-False t2d, vocab.t2d does (its count), as it decides whenever t2d is
    there (tests/test_properties.py: a t2d marking the same run agrees, and passes)."""
    d = drafter("flat")
    d.tensors["d2t"] = from_numpy(np.zeros(EXAMPLE.draft_vocab_size, np.int64))
    if t2d == "none":
        del d.tensors["t2d"]
    else:
        d.tensors["t2d"] = from_numpy(np.zeros(EXAMPLE.vocab_size, bool))
    result = run(d.write())
    assert result.exit_code == 1
    if t2d == "none":
        assert result.result("vocab.d2t").status == FAILED
        assert severities(result, "vocab.d2t") == {"vocab.d2t/all-zero": "error"}
    else:
        assert severities(result, "vocab.d2t") == {}
        assert severities(result, "vocab.t2d") == {"vocab.t2d/count": "error"}


def test_d2t_constant_offset_warns(drafter):
    """One nonzero offset throughout: the draft vocabulary is one contiguous run of target ids, which no
    frequency-built vocabulary is; it stays in range, so it warns."""
    d = drafter("flat")
    del d.tensors["t2d"]
    d.tensors["d2t"] = from_numpy(np.full(EXAMPLE.draft_vocab_size, 7, np.int64))
    result = run(d.write())
    assert result.result("vocab.d2t").status == WARNED
    assert severities(result, "vocab.d2t") == {"vocab.d2t/constant": "warning"}


def test_d2t_all_zero_is_the_identity_when_the_vocabularies_are_equal(drafter):
    """With DV == V all zeros is the identity mapping: vocab.d2t has nothing to say (keys reports that vLLM
    builds no draft_id_to_target_id then)."""
    d = drafter("flat", replace(EXAMPLE, draft_vocab_size=EXAMPLE.vocab_size, t2d=False))
    d.tensors["d2t"] = from_numpy(np.zeros(EXAMPLE.vocab_size, np.int64))
    result = run(d.write())
    assert result.result("vocab.d2t").status == PASSED


def test_d2t_real_mapping_without_t2d_passes(drafter):
    """A frequency-built mapping (not one offset throughout) without t2d: neither all-zero nor constant."""
    result = run(drafter("flat", replace(EXAMPLE, t2d=False)).write())
    assert result.result("vocab.d2t").status == PASSED
    assert severities(result, "vocab.d2t") == {}


def test_d2t_non_integer_float(drafter):
    d = drafter("flat")
    d.tensors["d2t"] = from_numpy(np.full(128, 0.5, np.float32))
    assert_fails(run(d.write()), "vocab.d2t/non-integer")


def test_t2d_wrong_count(drafter):
    d = drafter("speculators")
    mask = np.frombuffer(d.tensors["t2d"].data, bool).copy()
    mask[np.flatnonzero(~mask)[0]] = True
    d.tensors["t2d"] = from_numpy(mask)
    result = run(d.write())
    assert_fails(result, "vocab.t2d/count")  # 129 tokens marked, draft_vocab_size 128
    golden("test_t2d_wrong_count", said(result, "vocab.t2d/count"))


def test_vocab_checks_skip_when_absent(drafter):
    result = run(drafter("flat", replace(EXAMPLE, t2d=False)).write())
    assert result.result("vocab.t2d").status == SKIPPED
    assert_golden("test_checks/test_vocab_checks_skip_when_absent.txt", result.result("vocab.t2d").reason + "\n")


def test_vocab_reads_only_the_mapping_tensors(drafter, monkeypatch):
    """Header checks touch tensor data only for d2t and t2d: every other byte stays unread."""
    import eagle3_checks.storage.safetensors as st

    read: list[str] = []
    real = st.read_bytes
    monkeypatch.setattr(st, "read_bytes", lambda e: (read.append(e.name), real(e))[1])
    result = run(drafter("flat").write(), reference="tiny-example")
    assert result.exit_code == 0
    assert sorted(read) == ["d2t", "t2d"]


# ----- config ----------------------------------------------------------------------------------------

def test_config_fields_wrong_type_and_missing(drafter):
    d = drafter("flat")
    d.config["hidden_size"] = "64"
    del d.config["intermediate_size"]
    result = run(d.write())
    assert_fails(result, "config.fields/invalid-field")  # hidden_size '64', not a positive integer
    assert_fails(result, "config.fields/missing-field")  # intermediate_size
    assert {f.key for f in findings(result, "config.fields", "error")} >= {"hidden_size", "intermediate_size"}
    golden("test_config_fields_wrong_type_and_missing",
           said(result, "config.fields/invalid-field", "config.fields/missing-field"))


def test_config_fields_null_target_hidden_size_in_flat_config(drafter):
    d = drafter("flat")
    d.config["target_hidden_size"] = None
    result = run(d.write())
    assert_fails(result, "config.fields/null-target-hidden-size")
    golden("test_config_fields_null_target_hidden_size_in_flat_config",
           said(result, "config.fields/null-target-hidden-size"))  # fix: remove target_hidden_size


def test_config_fields_speculators_structure(drafter):
    d = drafter("speculators")
    d.config["speculators_config"]["proposal_methods"] = []
    del d.config["speculators_config"]["verifier"]
    result = run(d.write())
    assert_fails(result, "config.fields/speculative-tokens")
    assert_fails(result, "config.fields/verifier-missing")


def test_config_fields_not_an_object(drafter):
    d = drafter("flat")
    d.write()
    (d.root / "config.json").write_text("[1, 2]")
    result = run(d.root)
    assert_fails(result, "files/invalid-json")  # a JSON array, not an object
    assert result.result("config.fields").status == SKIPPED
    golden("test_config_fields_not_an_object", said(result, "files/invalid-json"))


def test_config_layers_default_32(drafter):
    d = drafter("flat")
    del d.config["num_hidden_layers"]
    result = run(d.write())
    assert_fails(result, "config.layers/count-mismatch")  # 32: transformers LlamaConfig's default, not stated
    golden("test_config_layers_default_32", said(result, "config.layers/count-mismatch"))


def test_config_layers_gap(drafter):
    d = drafter("speculators", replace(EXAMPLE, num_layers=3))
    for k in [k for k in d.tensors if k.startswith("layers.1.")]:
        del d.tensors[k]
    result = run(d.write())
    assert_fails(result, "config.layers/layer-gap")  # decoder layers [1] have no tensors
    golden("test_config_layers_gap", said(result, "config.layers/layer-gap"))


def test_config_vocab_sizes_unstated_draft_vocab(drafter):
    d = drafter("flat")
    del d.config["draft_vocab_size"]
    result = run(d.write())
    assert_fails(result, "config.vocab-sizes/draft-vocab-unstated")
    golden("test_config_vocab_sizes_unstated_draft_vocab",
           said(result, "config.vocab-sizes/draft-vocab-unstated"))  # fix: add "draft_vocab_size": 128
    [f] = [f for f in result.findings() if f.code == "config.vocab-sizes/draft-vocab-unstated"]
    assert [(op["path"], op["value"]) for op in f.patch] == [("/draft_vocab_size", 128)]  # lm_head's rows


def test_an_unstated_draft_vocab_on_speculators_is_its_default_and_no_engine_patch_rests_on_it(drafter):
    """speculators' draft_vocab_size defaults to 32000: unstated beside a 128-row lm_head, the finding says it is the
    default (it said "draft_vocab_size 32000 exceeds vocab_size 512", read), its patch states the rows, and
    engine.semantics offers no patch of 32000 (a value no drafter with this lm_head was trained with)."""
    d = drafter("speculators")
    del d.config["draft_vocab_size"]
    result = run(d.write(), engine=f"vllm@{VLLM}", level="header")
    assert "config.vocab-sizes/draft-exceeds-vocab" not in codes(result)
    [f] = [f for f in result.findings() if f.code == "config.vocab-sizes/draft-vocab-unstated"]
    assert (f.found, f.expected, [op["value"] for op in f.patch]) == ("absent (default 32000)", "128", [128])
    assert not [g for g in result.findings() if g.code == "engine.semantics/draft-vocab-size" and g.patch]


def test_config_vocab_sizes_draft_larger(drafter):
    d = drafter("flat")
    d.config["draft_vocab_size"] = 1024
    result = run(d.write())
    assert_fails(result, "config.vocab-sizes/draft-exceeds-vocab")  # 1024 > vocab_size 512
    golden("test_config_vocab_sizes_draft_larger", said(result, "config.vocab-sizes/draft-exceeds-vocab"))


def test_config_aux_ids_in_two_places_disagree(drafter):
    """With the trainer's convention unknown, two lists that differ cannot both feed the trained layers: a warning
    naming what each engine release captures from the field it reads."""
    d = drafter("flat")
    d.config["eagle_aux_hidden_state_layer_ids"] = [3, 5, 7]  # eagle_config keeps [1, 3, 5]
    result = run(d.write(), engine="vllm,sglang@0.5.6")
    warned(result, "config.aux-layers", "config.aux-layers/convention-unknown")
    # what vLLM reads at the top level and SGLang 0.5.6 in eagle_config, the layers each captures; --aux-convention
    golden("test_config_aux_ids_in_two_places_disagree", said(result, "config.aux-layers/convention-unknown"))


def test_config_aux_ids_in_one_place_captured_differently_warn(drafter):
    """The same ids in both places and an unknown convention: vLLM and SGLang capture layers one apart from them,
    and at most one can be right (it used to pass both, with a note)."""
    result = run(drafter("flat").write(), engine="vllm,sglang@0.5.6")
    warned(result, "config.aux-layers", "config.aux-layers/convention-unknown")
    # vLLM captures the outputs of layers [0, 2, 4] from [1, 3, 5], SGLang 0.5.6 those of [1, 3, 5]
    golden("test_config_aux_ids_in_one_place_captured_differently_warn",
           said(result, "config.aux-layers/convention-unknown"))
    assert run(drafter("flat").write(), engine="vllm").result("config.aux-layers").status == "passed"


def test_config_aux_ids_that_differ_pass_when_each_is_right_for_its_engine(drafter, target_path):
    """The ids of a drafter trained the SGLang way: [1, 3, 5] in eagle_config for SGLang, [2, 4, 6] at the top
    level for vLLM (the same layers): every engine is fed the trained layers, and nothing fails."""
    d = drafter("flat")
    d.config["eagle_aux_hidden_state_layer_ids"] = [2, 4, 6]
    result = run(d.write(), engine="vllm,sglang,sglang@0.5.6", aux_convention="sglang", target_config=str(target_path))
    r = result.result("config.aux-layers")
    assert r.status == "passed" and [f.code for f in r.findings] == ["config.aux-layers/two-places"]
    golden("test_config_aux_ids_that_differ_pass_when_each_is_right_for_its_engine",
           said(result, "config.aux-layers/two-places"))  # each engine reads one
    assert all(result.result("engine.aux-layers", e).status == "passed"
               for e in ("vllm", f"sglang@{SGLANG}", "sglang@0.5.6"))


def test_config_aux_ids_missing_warns(drafter):
    d = drafter("speculators")
    del d.config["eagle_aux_hidden_state_layer_ids"]
    result = run(d.write())
    warned(result, "config.aux-layers", "config.aux-layers/missing")
    golden("test_config_aux_ids_missing_warns", said(result, "config.aux-layers/missing"))


def test_config_aux_ids_duplicated_and_unsorted(drafter):
    d = drafter("flat")
    d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 1, 5]
    d.config["eagle_aux_hidden_state_layer_ids"] = [1, 1, 5]
    repeated = run(d.write())
    assert_fails(repeated, "config.aux-layers/repeated")  # [1, 1, 5]
    d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [5, 1, 3]
    d.config["eagle_aux_hidden_state_layer_ids"] = [5, 1, 3]
    unsorted = run(d.write(), level="header")
    warned(unsorted, "config.aux-layers", "config.aux-layers/unsorted")  # [5, 1, 3]
    golden("test_config_aux_ids_duplicated_and_unsorted", said(repeated, "config.aux-layers/repeated"),
           said(unsorted, "config.aux-layers/unsorted"))


def test_config_head_dim_kimi_model_type_defaults_to_64(drafter):
    """model_type kimi_k2 is parsed as DeepseekV3Config: head_dim 64 unless stated."""
    d = drafter("flat")
    d.config["model_type"] = "kimi_k2"
    del d.config["head_dim"]
    result = run(d.write())
    assert_fails(result, "config.head-dim/missing")  # engines would use 64, DeepseekV3Config's default
    golden("test_config_head_dim_kimi_model_type_defaults_to_64", said(result, "config.head-dim/missing"))


def test_config_head_dim_matching_only_class_default_warns(drafter):
    d = drafter("speculators", replace(EXAMPLE, model_type="qwen3", head_dim=128))
    del d.config["transformer_layer_config"]["head_dim"]
    result = run(d.write())
    warned(result, "config.head-dim", "config.head-dim/class-default")  # 128: only the qwen3 class default
    golden("test_config_head_dim_matching_only_class_default_warns", said(result, "config.head-dim/class-default"))


def test_config_tied_embeddings_with_draft_vocab(drafter):
    d = drafter("flat")
    d.config["tie_word_embeddings"] = True
    assert_fails(run(d.write()), "config.tied-embeddings/draft-vocab")


def test_config_tied_embeddings_with_own_head_warns(drafter):
    d = drafter("flat", replace(EXAMPLE, draft_vocab_size=EXAMPLE.vocab_size))
    d.config["tie_word_embeddings"] = True
    result = run(d.write())
    warned(result, "config.tied-embeddings", "config.tied-embeddings/own-lm-head")
    golden("test_config_tied_embeddings_with_own_head_warns", said(result, "config.tied-embeddings/own-lm-head"))


@pytest.mark.parametrize("layout", ["speculators", "flat"])
def test_config_rope_unstated_is_a_note_when_every_reader_uses_the_same_base(drafter, layout):
    """A drafter that states no rope_theta is read with 10000 by its trainer (EAGLE's cnets.py, SpecForge,
    speculators through transformers) and by every engine (vLLM get_rope, SGLang llama.py:322-334): it is served as
    trained, so a note, not an error (it used to be one, and convert refused the drafter)."""
    d = drafter(layout)
    for key in ("rope_theta", "rope_parameters"):
        d.layer_config.pop(key, None)
    result = run(d.write(), engine="all")
    r = result.result("config.rope")
    assert r.status == PASSED, [f.message for f in r.findings]
    (f,) = r.findings
    assert (f.code, f.severity.value) == ("config.rope/theta-default", "info")
    assert f.key == ("transformer_layer_config.rope_theta" if layout == "speculators" else "rope_theta")
    # no rope_theta stated; the trainer and every selected engine use 10000, each named
    golden(f"test_config_rope_unstated_is_a_note_when_every_reader_uses_the_same_base-{layout}",
           said(result, "config.rope/theta-default"))


def test_config_rope_unstated_is_an_error_when_readers_default_differently(drafter, monkeypatch):
    from eagle3_checks import engines

    real = engines.read

    def other_default(ckpt, spec, target=None, launch=None):
        reading = real(ckpt, spec, target, launch)
        if spec.startswith("sglang"):
            reading.set("rope_theta", 500000.0, "a hypothetical default")
        return reading

    monkeypatch.setattr(engines, "read", other_default)
    d = drafter("flat")
    del d.config["rope_theta"]
    result = run(d.write(), engine="vllm,sglang")
    assert_fails(result, "config.rope/theta-unstated")  # the readers default differently: each one's value
    golden("test_config_rope_unstated_is_an_error_when_readers_default_differently",
           said(result, "config.rope/theta-unstated"))


def test_a_lost_rope_theta_is_still_caught_against_the_spec(drafter):
    """The tiny example was trained with 1e6: without rope_theta every reader uses 10000, which config.rope notes and
    reference.diff (the shipped spec states 1e6) warns about, saying what each engine computes with either value (a
    warning: which value the drafter was trained with is not the reference's to say; --strict fails it)."""
    d = drafter("flat")
    del d.config["rope_theta"]
    result = run(d.write(), reference="tiny-example", engine="vllm,sglang", strict=True)
    assert result.result("config.rope").status == PASSED
    assert_fails(result, "reference.diff/semantic")
    (f,) = [f for f in result.result("reference.diff").findings if f.code == "reference.diff/semantic"]
    assert (f.key, f.expected, f.found) == ("rope_theta", "1000000.0", "10000.0")
    # the why: what vLLM and SGLang each compute with either value
    golden("test_a_lost_rope_theta_is_still_caught_against_the_spec", said(result, "reference.diff/semantic"))


@pytest.mark.parametrize("case, scaling, fatal", [
    ("factor-x", {"rope_type": "yarn", "factor": "x", "original_max_position_embeddings": 2048}, True),
    ("rope-type-3", {"rope_type": 3, "factor": 2.0}, True),
    ("factor-0", {"rope_type": "linear", "factor": 0}, False),
    ("mscale-minus-1", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "mscale": -1},
     False),
])
def test_config_rope_values_that_engines_cannot_use(drafter, case, scaling, fatal):
    """A rope value of the wrong type: transformers' rope init raises, so the engines refuse the drafter at load (an
    error). A number out of range: the init accepts it and computes inf or nonsense frequencies (a warning; no
    refusal). The forward check used to crash on both."""
    d = drafter("flat")
    d.config["rope_scaling"] = scaling
    result = run(d.write(), engine="all")
    r = result.result("config.rope")
    code = "config.rope/unusable-scaling" if fatal else "config.rope/suspect-scaling"
    assert r.status == (FAILED if fatal else WARNED) and [f.code for f in r.findings] == [code]
    # the one finding says which value, and what it is not
    golden(f"test_config_rope_values_that_engines_cannot_use-{case}", said(result, code))
    assert not [f for f in result.findings() if f.code and f.code.endswith("/crashed")]
    for engine in ("vllm", "sglang"):
        assert (result.result("engine.loads", engine).status == FAILED) == fatal


def test_config_rope_scaling_that_is_valid(drafter):
    d = drafter("flat")
    d.config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048,
                                "mscale": 0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}
    assert run(d.write()).result("config.rope").status == "passed"


def test_config_rope_two_values(drafter):
    d = drafter("flat")
    d.config["rope_parameters"] = {"rope_theta": 10000.0, "rope_type": "default"}
    result = run(d.write())
    assert_fails(result, "config.rope/theta-conflict")  # 1000000.0 and rope_parameters.rope_theta 10000.0
    golden("test_config_rope_two_values", said(result, "config.rope/theta-conflict"))


# ----- target ----------------------------------------------------------------------------------------

def test_target_vocab_and_hidden(drafter, tmp_path):
    target = tmp_path / "t.json"
    target.write_text(json.dumps({"text_config": {"num_hidden_layers": 8, "hidden_size": 80, "vocab_size": 600},
                                  "vocab_size": 512}))
    result = run(drafter("flat").write(), target_config=str(target))
    assert_fails(result, "target.vocab/mismatch")  # 512, the target's text_config.vocab_size 600
    assert_fails(result, "target.hidden-size/fc-width")  # fc takes 192 inputs, the target gives 3 x 80 = 240
    assert_fails(result, "target.hidden-size/target-hidden-size")  # 64 (default: hidden_size): add it
    golden("test_target_vocab_and_hidden", said(result, "target.vocab/mismatch", "target.hidden-size/fc-width",
                                                 "target.hidden-size/target-hidden-size"))


def test_target_last_layer_id_is_a_note(drafter, tmp_path):
    d = drafter("speculators")
    d.config["eagle_aux_hidden_state_layer_ids"] = [1, 4, 8]
    target = tmp_path / "t.json"
    target.write_text(json.dumps({"num_hidden_layers": 8, "hidden_size": 64, "vocab_size": 512}))
    result = run(d.write(), target_config=str(target))
    assert result.result("target.aux-layers").status == PASSED
    assert [f.code for f in findings(result, "target.aux-layers", "info")] == ["target.aux-layers/last-layer"]
    golden("test_target_last_layer_id_is_a_note", said(result, "target.aux-layers/last-layer"))


# ----- the registry --------------------------------------------------------------------------------

def test_check_ids_are_stable_and_documented():
    """Ids are an interface (--skip, -k, JUnit, dashboards): renaming one is a breaking change."""
    assert [c.id for c in all_checks()] == [
        "files", "keys", "shapes", "dtypes", "vocab.d2t", "vocab.t2d", "config.fields", "config.architectures",
        "config.layers", "config.vocab-sizes", "config.aux-layers", "config.head-dim", "config.tied-embeddings",
        "config.rope", "config.trainer-release", "target.aux-layers", "target.vocab", "target.hidden-size",
        "engine.loads", "engine.semantics",
        "engine.aux-layers", "engine.serving", "engine.release", "engine.live", "reference.diff", "scan.values",
        "forward.equivalence",
        "acceptance.figures", "acceptance.engine-drop", "acceptance.trained-with"]
    for c in all_checks():
        assert c.title and c.guards and c.level in ("header", "scan", "forward", "acceptance")


# ----- config.architectures per engine release --------------------------------------------------------------

def test_llama_for_causal_lm_is_served_by_vllm_and_not_contradicted(drafter):
    """vLLM's own test drafters name LlamaForCausalLM, which vLLM 0.33 prefixes to Eagle3LlamaForCausalLM
    for method eagle3 (transformers_utils/configs/eagle.py:55-64); `--engine vllm` used to fail the drafter in
    config.architectures while engine.loads[vllm@0.34.0] passed it."""
    d = drafter("flat")
    d.config["architectures"] = ["LlamaForCausalLM"]
    path = d.write()
    result = run(path, engine="vllm")
    r = result.result("config.architectures")
    assert r.status == PASSED and result.result("engine.loads").status == PASSED
    # not a drafter class name, but every selected release serves it (vLLM builds Eagle3LlamaForCausalLM)
    assert [f.code for f in r.findings] == ["config.architectures/served-as-named"]
    both = run(path, engine="vllm,sglang")
    # served by vLLM, refused by SGLang, which builds LlamaForCausalLM, the target model's own class
    warned(both, "config.architectures", "config.architectures/refused-by-some")
    assert both.result("engine.loads", f"sglang@{SGLANG}").status == FAILED
    sglang = run(path, engine="sglang")
    assert_fails(sglang, "config.architectures/not-a-drafter-class")  # no selected engine serves it
    golden("test_llama_for_causal_lm_is_served_by_vllm_and_not_contradicted",
           said(result, "config.architectures/served-as-named"), said(both, "config.architectures/refused-by-some"),
           said(sglang, "config.architectures/not-a-drafter-class"))


def test_an_architecture_no_engine_serves_is_still_an_error(drafter):
    d = drafter("flat")
    d.config["architectures"] = ["MistralModel"]
    # (TensorRT-LLM's one-model path builds Eagle3ForCausalLM whatever the architectures say: it serves this one)
    result = run(d.write(), engine="vllm,sglang,llamacpp,lmdeploy,mlx,speculators")
    assert_fails(result, "config.architectures/not-a-drafter-class")  # no selected engine serves it (vLLM raises)
    golden("test_an_architecture_no_engine_serves_is_still_an_error",
           said(result, "config.architectures/not-a-drafter-class"))


# ----- the MLA drafter family (more in test_mla_family.py) ----------------------------------------------------------

def test_the_llama_shaped_checks_are_the_engine_independent_ones():
    """Which checks would skip a drafter of a family eagle3-checks does not model (modelled_only); every family it
    detects (Llama/Qwen3 layers, MLA) is modelled, so they run."""
    assert modelled_only() == ["keys", "shapes", "config.head-dim", "config.rope", "reference.diff"]


@pytest.mark.parametrize("architectures", [["Eagle3DeepseekV2ForCausalLM"], ["Eagle3DeepseekV3ForCausalLM"],
                                           ["DeepseekV3ForCausalLM"]])
def test_an_mla_drafter_is_modelled_not_false_errors(drafter, architectures):
    """A Kimi-K2.x MLA drafter once got ~27 false errors from checks assuming a Llama layer; the MLA family is now
    modelled: the structural checks run on its own tensors and pass, and each engine release judges the class it builds
    (vLLM 0.33 prefixes DeepseekV3ForCausalLM to the MLA class, transformers_utils/configs/eagle.py:55-64; SGLang
    0.5.23 registers only Eagle3DeepseekV2ForCausalLM, so under --engine all it is not applicable for the others)."""
    path = mla_drafter(drafter("flat"), architectures).write()
    result = run(path, reference="auto", engine="all")
    assert result.exit_code == 0, {r.label: [f.message for f in r.findings] for r in result.results
                                   if r.status == FAILED}
    assert not [f for f in result.findings() if f.severity.value == "error"]
    assert "config.architectures/not-modelled" not in {f.code for f in result.findings()}
    for check_id in ("keys", "shapes", "config.head-dim", "config.rope"):
        assert result.result(check_id).status == PASSED, (check_id, result.result(check_id).reason)
    assert result.result("engine.loads", "vllm").status == PASSED
    sglang = result.result("engine.loads", f"sglang@{SGLANG}")
    if architectures == ["Eagle3DeepseekV2ForCausalLM"]:
        assert sglang.status == PASSED
    else:
        assert sglang.status == SKIPPED and sglang.reason.startswith("not applicable"), sglang.reason


def test_mla_tensors_under_a_llama_class_are_an_mla_drafter_misnamed(drafter):
    """The config states MLA sizes and the tensors are MLA attention: the drafter is of the MLA family and its class is
    wrong (config.architectures, with the fix as data); vLLM builds its Llama-layer class from the name and raises for
    the MLA tensors (model_executor/models/utils.py: "There is no module or parameter named"), an error."""
    path = mla_drafter(drafter("flat"), ["LlamaForCausalLMEagle3"]).write()
    result = run(path)
    assert result.result("config.architectures").status == FAILED
    # names no MLA drafter class, but the drafter is one: the class to name, as data
    assert [f.code for f in result.result("config.architectures").findings] == ["config.architectures/mla-class"]
    assert result.result("config.architectures").findings[0].patch
    assert result.result("keys").status == PASSED
    loads = result.result("engine.loads", "vllm")
    # vLLM raises for the MLA tensors, q_a_proj.weight the first
    assert loads.status == FAILED and loads.findings[0].code == "engine.loads/refused"
    golden("test_mla_tensors_under_a_llama_class_are_an_mla_drafter_misnamed",
           said(result, "config.architectures/mla-class"), said(result, "engine.loads/refused"))


def test_llama_drafters_are_modelled(drafter):
    for layout in ("flat", "speculators"):
        result = run(drafter(layout).write())
        assert result.result("keys").status == PASSED and result.result("config.architectures").status == PASSED


def test_a_crashing_check_is_reported_not_raised(drafter, monkeypatch):
    from eagle3_checks import registry

    c = registry.REGISTRY["config.rope"]

    def boom(ctx):
        raise KeyError("surprise")

    monkeypatch.setitem(registry.REGISTRY, "config.rope", replace(c, func=boom))
    result = run(drafter("flat").write())
    r = result.result("config.rope")
    assert r.status == FAILED and [f.code for f in r.findings] == ["config.rope/crashed"]
    golden("test_a_crashing_check_is_reported_not_raised", said(result, "config.rope/crashed"))  # (KeyError
    assert result.result("config.head-dim").status == PASSED
