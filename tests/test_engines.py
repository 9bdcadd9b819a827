"""Engine profiles: for each rule, a tiny checkpoint the profile passes and one it fails, with the engine
behaviour it models cited (vLLM 0.33.0, SGLang 0.5.6, speculators 0.9.0 sources). SGLang 0.5.6 is named here: its
profile keeps the verdicts it always gave; SGLang 0.5.23's differences are in test_engine_releases.py."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial

import pytest

import helpers
from eagle3_checks.cli import main
from eagle3_checks.drafter.example import EXAMPLE
from helpers import SGLANG, VLLM, assert_golden, codes, run, status, wording

FAILED, PASSED, WARNED = "failed", "passed", "warned"


def messages(result, check, engine) -> str:
    """The wording of one check's findings for one engine (a golden file's text)."""
    return wording(result.result(check, engine).findings)


gate = partial(helpers.gate, engine="vllm,sglang@0.5.6,speculators")  # the releases these tests judge


# ----- engine.loads ------------------------------------------------------------------------------------------

def test_layers0_names_pass_vllm_and_fail_sglang(drafter):
    """vLLM maps midlayer. to layers.0. and loads both (llama_eagle3.py hf_to_vllm_mapper); SGLang 0.5.6 looks up
    model.midlayer.* and drops any other name silently (llama_eagle3.py load_weights)."""
    result = gate(drafter("flat", first_layer="layers").write())
    assert status(result, "engine.loads", "vllm") == PASSED
    assert status(result, "engine.loads", "sglang") == FAILED
    assert codes(result, "engine.loads", "sglang") == {"engine.loads/unfilled", "engine.loads/target-tensor-used"}
    assert_golden("test_engines/test_layers0_names_pass_vllm_and_fail_sglang.txt",
                  messages(result, "engine.loads", "sglang"))
    assert status(gate(drafter("flat").write()), "engine.loads", "sglang") == PASSED


def test_model_prefix_fails_vllm(drafter):
    """vLLM prepends `model.` to every drafter tensor but lm_head and raises "There is no module or parameter
    named ..." for model.model.* (llama_eagle3.py load_weights)."""
    d = drafter("flat")
    d.tensors = {f"model.{k}": v for k, v in d.tensors.items()}
    result = gate(d.write())
    assert status(result, "engine.loads", "vllm") == FAILED
    refused = [f for f in result.result("engine.loads", "vllm").findings if f.code == "engine.loads/refused"]
    assert {f.key for f in refused} == set(d.tensors) - {"model.t2d"}  # every name it loads, model.d2t among them
    assert_golden("test_engines/test_model_prefix_fails_vllm.txt", messages(result, "engine.loads", "vllm"))


def test_speculators_layout_fails_sglang_and_passes_vllm_and_speculators(drafter):
    """SGLang 0.5.6 has one EAGLE-3 class, LlamaForCausalLMEagle3, for flat configs; vLLM reads speculators configs
    (transformers_utils/configs/speculators); speculators is their own trainer."""
    result = gate(drafter("speculators").write())
    assert status(result, "engine.loads", "sglang") == FAILED
    assert codes(result, "engine.loads", "sglang") == {"engine.loads/refused"}
    assert_golden("test_engines/test_speculators_layout_fails_sglang_and_passes_vllm_and_speculators.txt",
                  messages(result, "engine.loads", "sglang"))
    assert status(result, "engine.loads", "vllm") == PASSED
    assert status(result, "engine.loads", "speculators") == PASSED


def test_flat_layout_fails_speculators(drafter):
    """speculators' from_pretrained needs speculators_model_type (config.py SpeculatorModelConfig)."""
    result = gate(drafter("flat").write())
    assert status(result, "engine.loads", "speculators") == FAILED


def test_sglang_drops_biases_and_fc_norms(drafter):
    """SGLang 0.5.6 rebuilds q/k/v without bias (llama_eagle3.py) but keeps llama.py's o_proj, whose bias follows
    attention_bias; its MLP has no bias and it has no fc_norm: those tensors are dropped."""
    d = drafter("flat", replace(EXAMPLE, attention_bias=True, fc_norm=True))
    result = gate(d.write())
    assert status(result, "engine.loads", "vllm") == PASSED
    assert status(result, "engine.loads", "sglang") == FAILED
    assert [(f.code, f.key) for f in result.result("engine.loads", "sglang").findings
            if f.severity.value == "error"] == [("engine.loads/dropped", "fc_norm.0.weight")]
    assert_golden("test_engines/test_sglang_drops_biases_and_fc_norms.txt", messages(result, "engine.loads", "sglang"))
    from eagle3_checks import engines
    from eagle3_checks.drafter.checkpoint import open_checkpoint

    r = engines.read(open_checkpoint(d.root), "sglang@0.5.6")
    assert r.tensors["layers.0.self_attn.o_proj.bias"] == "midlayer.self_attn.o_proj.bias"
    # the 6 trained tensors it drops (besides t2d, which no engine reads, and embed_tokens, the target's instead)
    assert set(r.ignored) - {"t2d", "embed_tokens.weight"} == {
        "fc_norm.0.weight", "fc_norm.1.weight", "fc_norm.2.weight", "midlayer.self_attn.q_proj.bias",
        "midlayer.self_attn.k_proj.bias", "midlayer.self_attn.v_proj.bias"}


def test_architectures_each_engine_maps(drafter):
    """vLLM's EAGLEConfig prefixes Eagle3 to a name that lacks it (LlamaForCausalLM -> Eagle3LlamaForCausalLM,
    registered); SGLang 0.5.6 builds its EAGLE-3 class only for LlamaForCausalLMEagle3."""
    d = drafter("flat")
    d.config["architectures"] = ["LlamaForCausalLM"]
    result = gate(d.write())
    assert status(result, "engine.loads", "vllm") == PASSED
    assert status(result, "engine.loads", "sglang") == FAILED
    d.config["architectures"] = ["MistralForCausalLM"]
    result = gate(d.write())
    assert status(result, "engine.loads", "vllm") == FAILED
    assert [(f.code, f.key) for f in result.result("engine.loads", "vllm").findings] == [
        ("engine.loads/class-refused", "architectures")]
    assert_golden("test_engines/test_architectures_each_engine_maps.txt", messages(result, "engine.loads", "vllm"))


def test_sglang_refuses_more_than_one_layer(drafter):
    """SGLang 0.5.6 raises "EAGLE3 currently only supports 1 layer"; vLLM builds num_hidden_layers layers."""
    result = gate(drafter("flat", replace(EXAMPLE, num_layers=2)).write())
    assert status(result, "engine.loads", "vllm") == PASSED
    assert "engine.loads/refused" in codes(result, "engine.loads", "sglang")
    assert_golden("test_engines/test_sglang_refuses_more_than_one_layer.txt",
                  messages(result, "engine.loads", "sglang"))


@pytest.mark.parametrize("layout", ["flat", "speculators"])
def test_an_activation_other_than_silu_is_refused_by_vllm_and_sglang(drafter, layout):
    """vLLM 0.33 llama.py LlamaMLP and qwen2.py Qwen2MLP raise "Unsupported activation: ... Only silu is supported
    for now."; SGLang 0.5.6 srt/models/llama.py LlamaMLP raises too. silu passes both."""
    d = drafter(layout)
    fields = d.config["transformer_layer_config"] if layout == "speculators" else d.config
    assert status(gate(d.write()), "engine.loads", "vllm") == PASSED
    fields["hidden_act"] = "gelu"
    result = gate(d.write())
    assert codes(result, "engine.loads", "vllm") == {"engine.loads/refused"}
    text = "vllm:\n" + messages(result, "engine.loads", "vllm")
    if layout == "flat":
        assert "engine.loads/refused" in codes(result, "engine.loads", "sglang")
        text += "sglang:\n" + messages(result, "engine.loads", "sglang")
    assert_golden(f"test_engines/test_an_activation_other_than_silu_is_refused_by_vllm_and_sglang-{layout}.txt", text)


def test_embedding_shared_from_target_is_a_note(drafter):
    """Without embed_tokens, vLLM and SGLang share the target's embedding (llm_base_proposer.py, set_embed)."""
    d = drafter("flat")
    del d.tensors["embed_tokens.weight"]
    result = gate(d.write())
    r = result.result("engine.loads", "vllm")
    assert r.status == PASSED and [f.code for f in r.findings] == ["engine.loads/shared-from-target"]
    assert_golden("test_engines/test_embedding_shared_from_target_is_a_note.txt", wording(r.findings))


def test_embedding_in_the_checkpoint_that_sglang_replaces_is_said_so(drafter):
    """SGLang 0.5.6 eagle_worker.py set_embed puts the target's embedding in place of the checkpoint's; the note says
    that, not that the checkpoint has none."""
    result = gate(drafter("flat").write())
    assert [(f.code, f.key) for f in result.result("engine.loads", "sglang").findings] == [
        ("engine.loads/target-tensor-used", "embed_tokens.weight")]  # not engine.loads/shared-from-target
    assert_golden("test_engines/test_embedding_in_the_checkpoint_that_sglang_replaces_is_said_so.txt",
                  messages(result, "engine.loads", "sglang"))


# ----- engine.semantics --------------------------------------------------------------------------------------

def test_speculators_config_without_norm_before_residual_fails_vllm(drafter):
    """vLLM's update_eagle3 reads an absent norm_before_residual as True; speculators trains with False."""
    d = drafter("speculators")
    del d.config["norm_before_residual"]
    result = gate(d.write())
    assert status(result, "engine.semantics", "vllm") == FAILED
    f = result.result("engine.semantics", "vllm").findings[0]
    assert f.message == f"vllm {VLLM} reads norm_before_residual as True, the drafter was trained with False"
    assert f.fix == 'state "norm_before_residual": false in config.json'
    assert status(result, "engine.semantics", "speculators") == PASSED
    assert status(gate(drafter("speculators").write()), "engine.semantics", "vllm") == PASSED


def test_rope_only_in_rope_parameters_fails_sglang(drafter):
    """SGLang 0.5.6 pins transformers 4.57.1 and reads getattr(config, "rope_theta", 10000): a theta only in
    rope_parameters (what transformers 5 writes) runs at 10000 there; vLLM reads rope_parameters."""
    d = drafter("flat")
    d.config["rope_parameters"] = {"rope_theta": d.config.pop("rope_theta"), "rope_type": "default"}
    result = gate(d.write())
    assert status(result, "engine.semantics", "vllm") == PASSED
    assert status(result, "engine.semantics", "sglang") == FAILED
    [f] = result.result("engine.semantics", "sglang").findings
    assert (f.code, f.key) == ("engine.semantics/rope-theta", "rope_theta") and f.found.startswith("10000.0 ")
    assert_golden("test_engines/test_rope_only_in_rope_parameters_fails_sglang.txt", wording([f]))


def test_kimi_k2_model_type_without_head_dim(drafter):
    """vLLM parses model_type kimi_k2 as DeepseekV3Config (head_dim 64); SpecForge builds a LlamaConfig (H/nh)."""
    d = drafter("flat")
    d.config["model_type"] = "kimi_k2"
    del d.config["head_dim"]
    result = gate(d.write())
    [f] = result.result("engine.semantics", "vllm").findings
    assert (f.code, f.key) == ("engine.semantics/head-dim", "head_dim") and f.found.startswith("64 ")
    assert_golden("test_engines/test_kimi_k2_model_type_without_head_dim.txt", wording([f]))
    d.config["head_dim"] = 24
    assert status(gate(d.write()), "engine.semantics", "vllm") == PASSED


def test_norm_output_means_different_things(drafter):
    """speculators and vLLM: norm_output feeds the normed state to the next step; SpecForge: it applies the final
    norm before lm_head (always on in vLLM/SGLang), and later steps get the pre-norm state."""
    d = drafter("flat")
    d.config["norm_output"] = True
    result = gate(d.write())
    assert status(result, "engine.semantics", "vllm") == FAILED
    [f] = result.result("engine.semantics", "vllm").findings
    assert (f.code, f.key) == ("engine.semantics/feedback", "feedback") and f.found.startswith("'normed' ")
    assert_golden("test_engines/test_norm_output_means_different_things.txt", wording([f]))
    assert status(result, "engine.semantics", "sglang") == PASSED


def test_fc_norm_and_tied_embeddings_under_sglang(drafter):
    """SGLang 0.5.6 has no fc_norm, and with tie_word_embeddings makes lm_head the embedding."""
    d = drafter("flat", replace(EXAMPLE, fc_norm=True))
    [fc] = gate(d.write()).result("engine.semantics", "sglang").findings
    assert (fc.code, fc.key) == ("engine.semantics/fc-norm", "fc_norm") and fc.found.startswith("False ")
    d = drafter("flat")
    d.config["tie_word_embeddings"] = True
    result = gate(d.write())
    [tied] = result.result("engine.semantics", "sglang").findings
    assert (tied.code, tied.key) == ("engine.semantics/lm-head-from-embed", "lm_head_from_embed")
    assert tied.found.startswith("True ")
    assert_golden("test_engines/test_fc_norm_and_tied_embeddings_under_sglang.txt", wording([fc, tied]))
    assert status(result, "engine.semantics", "vllm") == PASSED


# ----- engine.aux-layers --------------------------------------------------------------------------------------

def test_aux_ids_only_nested_pass_sglang_and_fail_vllm(drafter):
    """vLLM 0.33's V2 model runner (its default for EAGLE-3) reads the top-level ids, then eagle_config["layer_ids"]
    (eagle3_utils.py get_eagle3_aux_layers_from_config); ids only in eagle_config["eagle_aux_hidden_state_layer_ids"],
    as SpecForge and the AQ-MedAI drafter write them, leave vLLM on its default layers."""
    d = drafter("flat")
    del d.config["eagle_aux_hidden_state_layer_ids"]
    result = gate(d.write())
    assert status(result, "engine.aux-layers", "sglang") == PASSED
    assert status(result, "engine.aux-layers", "vllm") == FAILED
    assert [(f.code, f.key) for f in result.result("engine.aux-layers", "vllm").findings] == [
        ("engine.aux-layers/ids-not-read", "eagle_aux_hidden_state_layer_ids")]
    assert_golden("test_engines/test_aux_ids_only_nested_pass_sglang_and_fail_vllm.txt",
                  messages(result, "engine.aux-layers", "vllm"))


def test_aux_ids_only_at_top_level_pass_vllm_and_fail_sglang(drafter):
    """vLLM captures the top-level ids (eagle3_utils.py); SGLang 0.5.6 reads only
    eagle_config["eagle_aux_hidden_state_layer_ids"] (model_runner.py)."""
    d = drafter("flat")
    del d.config["eagle_config"]
    d.config["num_aux_hidden_states"] = 3
    result = gate(d.write(), trainer="speculators@0.9.0")  # the top-level ids are its trainer's, vLLM's count
    assert status(result, "engine.aux-layers", "vllm") == PASSED
    assert status(result, "engine.aux-layers", "sglang") == FAILED
    assert [(f.code, f.key) for f in result.result("engine.aux-layers", "sglang").findings] == [
        ("engine.aux-layers/ids-not-read", "eagle_config.eagle_aux_hidden_state_layer_ids")]
    assert_golden("test_engines/test_aux_ids_only_at_top_level_pass_vllm_and_fail_sglang.txt",
                  messages(result, "engine.aux-layers", "sglang"))


def test_no_aux_ids_anywhere_warns(drafter):
    d = drafter("flat")
    del d.config["eagle_config"], d.config["eagle_aux_hidden_state_layer_ids"]
    assert status(gate(d.write()), "engine.aux-layers", "vllm") == WARNED


def test_aux_convention_gap_gives_the_shifted_ids(drafter):
    """An id counted the SGLang way (the output of layer X) is X+1 for vLLM (the residual entering layer X+1)."""
    d = drafter("flat")
    path = d.write()
    result = gate(path, aux_convention="sglang")
    assert status(result, "engine.aux-layers", "sglang") == PASSED
    f = result.result("engine.aux-layers", "vllm").findings[0]
    assert (f.code, f.key, f.expected, f.found) == ("engine.aux-layers/wrong-layers",
                                                    "eagle_aux_hidden_state_layer_ids", "[2, 4, 6]", "[1, 3, 5]")
    result = gate(path, aux_convention="vllm")
    assert status(result, "engine.aux-layers", "vllm") == PASSED
    [g] = result.result("engine.aux-layers", "sglang").findings
    assert (g.code, g.key, g.expected, g.found) == ("engine.aux-layers/wrong-layers",
                                                    "eagle_config.eagle_aux_hidden_state_layer_ids", "[0, 2, 4]",
                                                    "[1, 3, 5]")
    assert_golden("test_engines/test_aux_convention_gap_gives_the_shifted_ids.txt", wording([f, g]))


def test_fields_more_than_one_trainer_writes_name_no_trainer(drafter):
    """max_window_layers and use_sliding_window are SpecForge template fields, and speculators 0.9.0's train CLI writes
    use_sliding_window too (train/cli.py:227-231): no evidence of either trainer, so how the ids were counted stays
    unknown and no capture is called wrong: a warning (served as trained under vLLM's count of the ids only), with
    each reading named, whether or not another selected release captures other layers."""
    d = drafter("flat")
    d.config.update({"max_window_layers": 48, "use_sliding_window": False})
    result = run(d.write(), engine="vllm,sglang@0.5.6", level="header")
    assert result.trainer["name"] is None
    r = result.result("engine.aux-layers", "vllm")  # SGLang captures other layers from this file: at most one is right
    assert r.status == WARNED and [f.code for f in r.findings] == ["engine.aux-layers/undecided"]
    alone = run(drafter("flat").write(), engine="vllm", level="header").result("engine.aux-layers", "vllm")
    assert alone.status == WARNED and [f.code for f in alone.findings] == ["engine.aux-layers/undecided"]
    assert alone.findings[0].basis == "assumed" and alone.findings[0].settle
    told = run(drafter("flat").write(), engine="vllm", level="header", aux_convention="vllm")
    assert told.result("engine.aux-layers", "vllm").status == PASSED


def test_what_a_release_captures_by_the_targets_class_is_not_judged_when_the_target_and_trainer_are_unknown(drafter):
    """SGLang 0.5.23 counts by the target's class (a first id 0: +1 on Llama/Qwen-style targets, raw on DeepSeek-style
    ones), and with neither the verifier's config nor who trained the drafter known, each layer set it may capture is
    one a possible counting trained on: a note of what it captures, not a verdict; with vLLM selected as well, the
    two releases capture other layers from this file, and at most one of them is right (a warning)."""
    d = drafter("flat")
    d.config.update({"max_window_layers": 48, "use_sliding_window": False})
    d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [0, 2, 4]
    d.config["eagle_aux_hidden_state_layer_ids"] = [0, 2, 4]
    path = d.write()
    alone = run(path, engine=f"sglang@{SGLANG}", level="header").result("engine.aux-layers", "sglang")
    assert alone.status == PASSED and [f.code for f in alone.findings] == ["engine.aux-layers/convention-unknown"]
    both = run(path, engine=f"sglang@{SGLANG},vllm", level="header").result("engine.aux-layers", "sglang")
    assert both.status == WARNED and [f.code for f in both.findings] == ["engine.aux-layers/undecided"]


def test_aux_ids_beyond_the_target_under_each_convention(drafter, tmp_path):
    """vLLM and speculators accept ids in [0, N] (N: the last layer's output); under SGLang's +1 an explicit N-2
    is the last id that captures anything: layer i's input is captured only for i < N (SG06/models/llama.py:337-347,
    742; row S13)."""
    d = drafter("flat")
    d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 3, 8]
    d.config["eagle_aux_hidden_state_layer_ids"] = [1, 3, 8]
    target = tmp_path / "t.json"
    target.write_text(json.dumps({"num_hidden_layers": 8, "hidden_size": 64, "vocab_size": 512}))
    result = gate(d.write(), target_config=str(target))
    assert "engine.aux-layers/beyond-last-layer" not in codes(result, "engine.aux-layers", "vllm")
    [f] = result.result("engine.aux-layers", "sglang").findings
    assert (f.code, f.expected, f.found) == ("engine.aux-layers/beyond-last-layer", "ids <= 6", "[1, 3, 8]")
    assert_golden("test_engines/test_aux_ids_beyond_the_target_under_each_convention.txt",
                  "vllm:\n" + messages(result, "engine.aux-layers", "vllm") + "sglang:\n" + wording([f]))


def test_reference_diff_compares_layers_with_the_candidates_convention(drafter):
    """The AQ-MedAI spec records its ids in the SGLang convention (inferred): a candidate whose trainer counted the
    vLLM way needs ids one higher to capture the same layers."""
    from eagle3_checks.checks.reference import diff, with_aux_layers
    from eagle3_checks.drafter.spec import Spec, load_spec, shipped_specs

    ref = with_aux_layers(load_spec(shipped_specs()["aq-medai-kimi-k2-eagle3"]), None, None, None)

    def cand(ids):  # the layers each side's ids select, under its own counting
        return with_aux_layers(Spec("c", {"aux_layer_ids": ids}, {}, None, "vllm"), None, None, None)

    assert not [f for f in diff(cand([3, 31, 59]), ref) if f.key == "aux_layer_ids"]
    assert [(f.code, f.expected, f.found) for f in diff(cand([2, 30, 58]), ref) if f.key == "aux_layer_ids"] == [
        ("aux-convention", "outputs of layers [2, 30, 58]", "outputs of layers [1, 29, 57]")]


# ----- engine.serving ----------------------------------------------------------------------------------------

def test_max_position_embeddings_below_the_served_context(drafter):
    """vLLM 0.33 raises a plain-RoPE draft's max_position_embeddings to max_model_len
    (_maybe_override_draft_max_position_embeddings) but caps max_model_len for yarn; SGLang refuses to start
    (SG06/configs/model_config.py:286-311, ValueError unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1)."""
    d = drafter("flat")
    path = d.write()
    result = gate(path, max_model_len=8192)
    assert status(result, "engine.serving", "vllm") == PASSED
    assert codes(result, "engine.serving", "vllm") == {"engine.serving/context-raised"}
    raised = messages(result, "engine.serving", "vllm")
    assert [f.code for f in result.result("engine.serving", "sglang").findings] == ["engine.serving/context-too-short"]
    d.config["rope_scaling"] = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048}
    yarn = gate(d.write(), max_model_len=8192)
    [f] = yarn.result("engine.serving", "vllm").findings
    assert (f.code, f.expected, f.found) == ("engine.serving/context-too-short", ">= 8192",
                                             "4096 (config.json: max_position_embeddings)")
    assert_golden("test_engines/test_max_position_embeddings_below_the_served_context.txt",
                  "plain RoPE:\n" + raised + "yarn:\n" + wording([f]))
    assert status(gate(path, max_model_len=4096), "engine.serving", "sglang") == PASSED


def test_local_verifier_path_warns_for_vllm(drafter):
    """vLLM's `vllm serve DRAFTER` shortcut reads speculators_config.verifier.name_or_path and refuses anything but a
    remote repository id (transformers_utils/config.py)."""
    d = drafter("speculators")
    d.config["speculators_config"]["verifier"]["name_or_path"] = "/models/kimi-k2"
    result = gate(d.write())
    assert status(result, "engine.serving", "vllm") == WARNED
    assert status(gate(drafter("speculators").write()), "engine.serving", "vllm") == PASSED


# ----- the shells ----------------------------------------------------------------------------------------------

def test_compatibility_matrix_and_json(drafter, capsys):
    """Named releases are required: SGLang does not read the speculators layout, and the gate fails."""
    path = drafter("speculators").write()
    assert main(["check", str(path), "--engine", "vllm,sglang", "--level", "header"]) == 1
    text = capsys.readouterr().out
    assert [line.split()[:2] for line in text.splitlines() if line.strip().startswith(("vllm@", "sglang@"))] == \
        [[f"vllm@{VLLM}", "PASS"], [f"sglang@{SGLANG}", "FAIL"]]
    main(["check", str(path), "--engine", "vllm,sglang", "--level", "header", "--format", "json"])
    data = json.loads(capsys.readouterr().out)["checkpoints"][0]
    assert data["compatibility"][f"sglang@{SGLANG}"]["engine.loads"] == "failed"
    assert data["compatibility"][f"vllm@{VLLM}"] == dict.fromkeys(
        ("engine.loads", "engine.semantics", "engine.aux-layers", "engine.serving", "engine.release"), "passed")
    assert main(["check", str(path), "--engine", "vllm,sglang", "--level", "header", "--format", "markdown"]) == 1
    markdown = capsys.readouterr().out
    # the matrix of each format: from its heading to the blank line after it
    assert_golden("test_engines/test_compatibility_matrix_and_json.txt",
                  section(text, "  compatibility (engine x check):") + "\n"
                  + section(markdown, "Compatibility (engine x check):"))


def section(text: str, heading: str) -> str:
    """The lines of ``text`` from ``heading`` to the first blank line after its table."""
    lines = text.splitlines()
    start = lines.index(heading)
    end = next(i for i in range(start + 2, len(lines) + 1) if i == len(lines) or not lines[i].strip())
    return "\n".join(lines[start:end]) + "\n"


def test_engine_all_judges_the_releases_that_read_the_layout(drafter, capsys):
    """--engine all: a release that does not read the checkpoint's layout is not applicable (N/A in the matrix),
    and fails the gate only when no release reads it, or under --strict."""
    path = drafter("speculators").write()
    assert main(["check", str(path), "--engine", "all", "--level", "header"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[:3] for line in out.splitlines() if line.strip().startswith("sglang@")] == \
        [[f"sglang@{SGLANG}", "N/A", "N/A"]]
    # what the report says of the release that does not read the layout: the lines of its results
    assert_golden("test_engines/test_engine_all_judges_the_releases_that_read_the_layout.txt",
                  "".join(line + "\n" for line in out.splitlines()
                          if line.split()[1:2] and line.split()[1].endswith(f"[sglang@{SGLANG}]")))
    assert main(["check", str(path), "--engine", "all", "--level", "header", "--strict"]) == 1
    capsys.readouterr()
    d = drafter("speculators")  # read by no sglang release
    assert main(["check", str(d.write()), "--engine", "all,vllm", "--level", "header"]) == 0
    capsys.readouterr()
    flat = drafter("flat").write()  # speculators reads no flat config
    # TensorRT-LLM takes the aux layers from its launch: the layers the flat example's ids name, as it counts them
    launch = flat.parent / "trtllm-launch.json"
    launch.write_text(json.dumps({"speculative_config": {"eagle3_layers_to_capture": [1, 3, 5]}}))
    assert main(["check", str(flat), "--engine", "all", "--level", "header", "--format", "json",
                 "--launch", f"trtllm={launch}"]) == 0
    doc = json.loads(capsys.readouterr().out)["checkpoints"][0]
    assert doc["compatibility"]["speculators@0.9.0"]["engine.loads"] == "n/a"


def test_explain(capsys):
    """explain's page of a check, and what it says of a name that is no check (the whole of each, in the golden)."""
    assert main(["explain", "engine.aux-layers"]) == 0
    said = [capsys.readouterr().out]
    assert main(["explain", "nope"]) == 2  # no suggestion
    said.append(capsys.readouterr().err)
    assert main(["explain", "engine.load"]) == 2  # engine.loads
    said.append(capsys.readouterr().err)
    assert main(["explain", "config"]) == 2  # a prefix: the checks it starts
    said.append(capsys.readouterr().err)
    assert_golden("test_engines/test_explain.txt", "\n".join(said))


def test_option_errors(drafter, capsys):
    """A choice outside its vocabulary is argparse's usage error (exit 2); a bad number is the gate's own
    (tests/test_options.py::test_a_bad_number_reads_the_same_from_the_cli_and_the_gate)."""
    with pytest.raises(SystemExit) as exc:
        main(["check", str(drafter("flat").write()), "--aux-convention", "tgi"])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err
    assert main(["check", str(drafter("flat").write()), "--max-model-len", "x"]) == 2


def test_default_layers_that_happen_to_be_the_trained_ones_are_a_note(drafter, tmp_path):
    """Ids only in eagle_config (as the AQ-MedAI drafter writes them) leave vLLM 0.33 on its default (2, N/2, N-3);
    when those are the layers the drafter was trained on, that is a note, not a failure."""
    target = tmp_path / "t.json"
    target.write_text(json.dumps({"num_hidden_layers": 8, "hidden_size": 64, "vocab_size": 512}))
    d = drafter("flat")
    del d.config["eagle_aux_hidden_state_layer_ids"]
    d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 3, 4]  # SGLang way: outputs of 1, 3, 4
    result = gate(d.write(), target_config=str(target), aux_convention="sglang")
    r = result.result("engine.aux-layers", "vllm")
    assert r.status == PASSED
    [f] = r.findings
    assert f.code == "engine.aux-layers/default-matches" and f.patch == (
        {"op": "add", "path": "/eagle_aux_hidden_state_layer_ids", "value": [2, 4, 5]},)
    assert_golden("test_engines/test_default_layers_that_happen_to_be_the_trained_ones_are_a_note.txt", wording([f]))
    d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 4, 5]  # other layers than the default's
    assert status(gate(d.write(), target_config=str(target), aux_convention="sglang"),
                  "engine.aux-layers", "vllm") == FAILED


def test_hub_ids_are_not_local_paths(drafter):
    d = drafter("speculators")
    d.config["speculators_config"]["verifier"]["name_or_path"] = "gpt2"
    assert status(gate(d.write()), "engine.serving", "vllm") == PASSED


# ----- what holds under every reading of the ids is known (engines.TrainedAux.readings) -----------------------------

def _target(tmp_path, arch: str, layers: int):
    path = tmp_path / f"{arch}-{layers}.json"
    path.write_text(json.dumps({"architectures": [arch], "num_hidden_layers": layers, "hidden_size": 64,
                                "vocab_size": 512}))
    return str(path)


def _ids_at(d, ids, top: bool, nested: bool):
    d.config.pop("eagle_aux_hidden_state_layer_ids", None)
    d.config["eagle_config"].pop("eagle_aux_hidden_state_layer_ids", None)
    if top:
        d.config["eagle_aux_hidden_state_layer_ids"] = ids
    if nested:
        d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    return d


def test_default_layers_that_no_reading_trained_on_are_an_error_whoever_trained_it(drafter, tmp_path):
    """Ids [1, 3, 5] only in eagle_config, no trainer named, a 6-layer target: vLLM 0.34.0 reads the top level only
    and captures its defaults (ids 2, 3, 3: the outputs of layers 1, 2, 2), which are the trained layers under
    neither counting (vLLM's: 0, 2, 4; SGLang's +1: 1, 3, 5). Known: an error on what was read and recorded, and no
    ids written until the counting is known (each asks for others)."""
    d = _ids_at(drafter("flat"), [1, 3, 5], top=False, nested=True)
    result = run(d.write(), engine="vllm", level="header", target_config=_target(tmp_path, "LlamaForCausalLM", 6))
    assert result.trainer["name"] is None
    f = next(f for f in result.findings() if f.check.startswith("engine.aux-layers"))
    assert (f.code, f.severity.value, f.basis) == ("engine.aux-layers/ids-not-read", "error", "recorded")
    assert f.patch is None and f.found == "layers [1, 2, 2]"
    # the fix names the ids under each counting: [1, 3, 5] (vLLM's) and [2, 4, 6] (SGLang's before PR #25454)
    assert_golden("test_engines/test_default_layers_that_no_reading_trained_on_are_an_error_whoever_trained_it.txt",
                  wording([f]))
    told = run(d.root, engine="vllm", level="header", target_config=_target(tmp_path, "LlamaForCausalLM", 6),
               aux_convention="vllm")
    f = next(f for f in told.findings() if f.check.startswith("engine.aux-layers"))
    assert f.code == "engine.aux-layers/ids-not-read" and f.patch[0] == {
        "op": "add", "path": "/eagle_aux_hidden_state_layer_ids", "value": [1, 3, 5]}


def test_a_conversion_that_dropped_the_ids_is_judged_by_its_source(drafter, tmp_path):
    """A speculators-layout drafter without ids (as `speculators convert` writes one), checked with --source the flat
    checkpoint it came from (ids [1, 3, 5] at the top level, no trainer named): the source is the evidence, the
    converter's speculators_version is not; vLLM's defaults are the trained layers under no reading: an error."""
    src = _ids_at(drafter("flat"), [1, 3, 5], top=True, nested=False).write()
    conv = drafter("speculators")
    conv.config.pop("eagle_aux_hidden_state_layer_ids", None)
    path = conv.write()
    result = run(path, engine="vllm", level="header", source=str(src),
                 target_config=_target(tmp_path, "LlamaForCausalLM", 6))
    assert result.trainer["name"] is None
    f = next(f for f in result.findings() if f.check.startswith("engine.aux-layers"))
    assert (f.code, f.severity.value) == ("engine.aux-layers/ids-not-read", "error")
    # the ids are said to be read from --source (the whole finding, the source's folder as <TMP>)
    assert_golden("test_engines/test_a_conversion_that_dropped_the_ids_is_judged_by_its_source.txt", wording([f]),
                  {"TMP": tmp_path})
    # the conversion's own defect, whoever trained it: fix --source restores what vLLM read from the source, the
    # source's ids in vLLM's field, and the result serves as the source did (it passes; how the trainer counted is
    # still a warning, as it was of the source)
    target = _target(tmp_path, "LlamaForCausalLM", 6)
    assert f.patch and f.patch[0]["value"] == [1, 3, 5]
    assert main(["fix", str(path), str(tmp_path / "fixed"), "--engine", "vllm", "--level", "header", "--source",
                 str(src), "--target-config", target]) == 0
    fixed = json.loads((tmp_path / "fixed" / "config.json").read_text())
    assert fixed["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]
    again = run(tmp_path / "fixed", engine="vllm", level="header", source=str(src), target_config=target)
    assert again.exit_code == 0 and again.result("engine.aux-layers", "vllm").status == "warned"


def test_a_stated_trainer_release_settles_what_its_pins_settle(drafter, tmp_path):
    """SpecForge 0.2.0 captures through SGLang 0.5.14, which uses a DeepSeek target's ids raw when the first is not 1:
    stated, its ids [2, 4, 5] in eagle_config are trained on the outputs of 1, 3, 4, which vLLM's defaults on an
    8-layer target capture (a note); SpecForge of no stated release leaves the older +1 possible: a warning."""
    d = _ids_at(drafter("flat"), [2, 4, 5], top=False, nested=True)
    target = _target(tmp_path, "DeepseekV3ForCausalLM", 8)
    pinned = run(d.write(), engine="vllm", level="header", target_config=target, trainer="specforge@0.2.0")
    r = pinned.result("engine.aux-layers", "vllm")
    assert r.status == "passed" and [f.code for f in r.findings] == ["engine.aux-layers/default-matches"]
    open_ended = run(d.root, engine="vllm", level="header", target_config=target, trainer="specforge")
    f = open_ended.result("engine.aux-layers", "vllm").findings[0]
    assert (f.code, f.severity.value, f.basis) == ("engine.aux-layers/default-undecided", "warning", "assumed")
    assert f.found == "layers [1, 3, 4]" and f.settle
    # the default ids [2, 4, 5] it falls back to, the layers [1, 3, 4] they capture
    assert_golden("test_engines/test_a_stated_trainer_release_settles_what_its_pins_settle.txt", wording([f]))
