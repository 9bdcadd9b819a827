"""TensorRT-LLM, llama.cpp, lmdeploy and mlx-vlm: each stated difference of their profiles, with a drafter that
passes and one that fails on that engine (header level, where the difference is decided).

Citations, as in each profile module: ``TRT/`` is ``tensorrt_llm/`` read at commit 00679c66 (the 1.4.0rc1 wheel is
not reachable), ``LCPP/`` is ``vendor/llama.cpp/`` in the llama-cpp-python 0.3.36 sdist (commit 0c1e57098),
``LMD/`` is ``lmdeploy/`` in the 0.18.0 wheel, ``MLX/`` is ``mlx_vlm/`` in the 0.7.10 wheel.
"""

from __future__ import annotations

import json
from dataclasses import replace

from eagle3_checks import engines
from eagle3_checks.cli import main
from eagle3_checks.drafter.example import EXAMPLE, target_config
from eagle3_checks.drafter.layout import FLAT, SPECULATORS
from helpers import VLLM, assert_golden, codes, gate, status

TRT, LCPP, LMD, MLX = "trtllm@1.4.0rc1", "llamacpp@0.3.36", "lmdeploy@0.18.0", "mlx@0.7.10"
FAILED, PASSED, SKIPPED = "failed", "passed", "skipped"


def finding_text(f) -> str:
    """A finding's wording, for its golden file: its message, and the found, why and fix it states."""
    return "".join(f"{label}{value}\n" for label, value in (("", f.message), ("found: ", f.found),
                                                           ("why: ", f.why), ("fix: ", f.fix)) if value)




def target_file(tmp_path, **fields):
    p = tmp_path / f"target-{len(list(tmp_path.glob('target-*')))}" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps({**target_config(EXAMPLE), **fields}))
    return str(p)


def launch_file(tmp_path, layers):
    p = tmp_path / f"launch-{len(list(tmp_path.glob('launch-*')))}.json"
    p.write_text(json.dumps({"speculative_config": {"decoding_type": "Eagle3", "eagle3_layers_to_capture": layers}}))
    return f"trtllm={p}"


def test_engine_all_judges_six_engines(monkeypatch):
    monkeypatch.setattr(engines, "installed_version", lambda name: None)
    specs = engines.resolve("all").specs
    assert {s.split("@")[0] for s in specs} - {"speculators"} == {"vllm", "sglang", "trtllm", "llamacpp", "lmdeploy",
                                                                  "mlx"}


# ----- TensorRT-LLM: the aux layers are a launch option --------------------------------------------------------------

def test_trt_four_aux_layers_load_only_with_the_launch_layers(drafter, tmp_path):
    """TRT/llmapi/llm_args.py Eagle3DecodingConfig: fc is built for len(eagle3_layers_to_capture) layers, else 3;
    the drafter's own ids are not read. A 4-aux drafter fails to load without the launch option and loads with it."""
    d = drafter("flat", replace(EXAMPLE, aux_layer_ids=(1, 3, 5, 7)))
    path = d.write()
    target = target_file(tmp_path)
    bare = gate(path, "trtllm", target_config=target, aux_convention="vllm")
    assert status(bare, "engine.loads", TRT) == FAILED
    [f] = [f for f in bare.result("engine.loads", TRT).findings if f.code == "engine.loads/refused"]
    assert f.key == "launch: eagle3_layers_to_capture"
    assert_golden("test_other_engines/test_trt_four_aux_layers_load_only_with_the_launch_layers.txt",
                  finding_text(f))  # launch with eagle3_layers_to_capture naming 4 layers
    ok = gate(path, "trtllm", target_config=target, aux_convention="vllm",
              launch=[launch_file(tmp_path, [0, 2, 4, 6])])
    assert status(ok, "engine.loads", TRT) == PASSED and status(ok, "engine.aux-layers", TRT) == PASSED
    off = gate(path, "trtllm", target_config=target, aux_convention="vllm",
               launch=[launch_file(tmp_path, [1, 3, 5, 7])])
    assert codes(off, "engine.aux-layers", TRT) == {"engine.aux-layers/wrong-layers"}  # counted as outputs of X


def test_trt_takes_the_layers_at_launch_which_is_the_launchs_to_say(drafter, tmp_path):
    """TensorRT-LLM reads no aux ids from the checkpoint (eagle3_layers_to_capture is a launch option): gated without
    --launch, a correct drafter passes with a note of the ids to launch with (it failed --engine all on a launch
    requirement located in config.json); launched without the option, it captures its defaults (an error of the
    launch); launched as the recipe writes it, it captures the trained layers."""
    d = drafter("flat")
    target = target_file(tmp_path)
    bare = gate(d.write(), "trtllm", target_config=target, aux_convention="vllm")
    r = bare.result("engine.aux-layers", TRT)
    assert r.status == PASSED and [f.code for f in r.findings] == ["engine.aux-layers/launch-ids"]
    [f] = r.findings
    assert f.key == "launch: eagle3_layers_to_capture" and f.patch is None
    launch = tmp_path / "launch.json"
    launch.write_text(json.dumps({"speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 3}}))
    without = gate(d.root, "trtllm", target_config=target, aux_convention="vllm", launch=[f"trtllm={launch}"])
    found = without.result("engine.aux-layers", TRT).findings
    assert [f.code for f in found] == ["engine.aux-layers/ids-not-read"]
    assert found[0].key == "launch: eagle3_layers_to_capture" and found[0].patch is None
    # each says to launch with eagle3_layers_to_capture: [0, 2, 4] (the note's message, the error's fix)
    assert_golden("test_other_engines/test_trt_takes_the_layers_at_launch_which_is_the_launchs_to_say.txt",
                  finding_text(f) + "\n" + finding_text(found[0]))
    launch.write_text(json.dumps({"speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 3,
                                                         "eagle3_layers_to_capture": [0, 2, 4]}}))
    launched = gate(d.root, "trtllm", target_config=target, aux_convention="vllm", launch=[f"trtllm={launch}"])
    assert launched.result("engine.aux-layers", TRT).status == PASSED


def test_trt_reads_norm_before_fc_only_from_eagle_config(drafter):
    """TRT/_torch/models/modeling_speculative.py Eagle3DraftModel.__init__: norm_before_fc from eagle_config only."""
    d = drafter("flat", replace(EXAMPLE, norm_before_fc=True))
    d.config["eagle_config"].pop("norm_before_fc", None)
    d.config["norm_before_fc"] = True
    top = gate(d.write(), "trtllm")
    assert "engine.semantics/input-norm" in codes(top, "engine.semantics", TRT)
    d.config["eagle_config"]["norm_before_fc"] = True
    assert "engine.semantics/input-norm" not in codes(gate(d.write(), "trtllm"), "engine.semantics", TRT)


def test_trt_norms_later_layers_with_hidden_norm(drafter):
    """TRT Eagle3DecoderLayer.forward: layers >= 1 are normed by hidden_norm; a speculators-style second layer
    (input_layernorm) is computed with another weight. One layer: nothing differs."""
    two = gate(drafter("flat", replace(EXAMPLE, num_layers=2)).write(), "trtllm")
    assert "engine.semantics/later-norm" in codes(two, "engine.semantics", TRT)
    assert status(gate(drafter("flat").write(), "trtllm"), "engine.semantics", TRT) == PASSED


def test_trt_builds_no_qk_norms(drafter):
    d = drafter("flat", replace(EXAMPLE, model_type="qwen3"))
    d.config["architectures"] = ["Eagle3Qwen3ForCausalLM"]
    result = gate(d.write(), "trtllm,vllm")
    assert "engine.semantics/qk-norm" in codes(result, "engine.semantics", TRT)
    assert status(result, "engine.semantics", f"vllm@{VLLM}") == PASSED


def test_trt_an_mla_drafter_is_not_modelled(drafter):
    d = drafter("flat")
    d.config["kv_lora_rank"] = 512
    not_modelled = engines.read(_open(d.write()), TRT).not_modelled
    assert not_modelled  # an MLA drafter, which eagle3-checks reads from source but does not model
    assert_golden("test_other_engines/test_trt_an_mla_drafter_is_not_modelled.txt", f"{not_modelled}\n")


# ----- llama.cpp: its converter and runtime ---------------------------------------------------------------------------

def test_llamacpp_needs_exactly_three_aux_layers(drafter, tmp_path):
    """LCPP/src/models/eagle3.cpp:6-11: exactly 3 extract layers."""
    four = gate(drafter("flat", replace(EXAMPLE, aux_layer_ids=(1, 3, 5, 7))).write(), "llamacpp",
                target_config=target_file(tmp_path))
    assert status(four, "engine.loads", LCPP) == FAILED
    f = four.result("engine.loads", LCPP).findings[0]
    assert f.code == "engine.loads/refused" and f.key == "eagle_aux_hidden_state_layer_ids"
    assert_golden("test_other_engines/test_llamacpp_needs_exactly_three_aux_layers.txt",
                  finding_text(f))  # llama.cpp's runtime requires exactly 3
    assert status(gate(drafter("flat").write(), "llamacpp"), "engine.loads", LCPP) == PASSED


def test_llamacpp_reads_the_top_level_ids_only(drafter, tmp_path):
    """LCPP/conversion/llama.py:74-83: eagle_config is read nowhere."""
    d = drafter("flat")
    del d.config["eagle_aux_hidden_state_layer_ids"]
    result = gate(d.write(), "llamacpp", target_config=target_file(tmp_path), aux_convention="vllm")
    assert codes(result, "engine.aux-layers", LCPP) == {"engine.aux-layers/ids-not-read"}
    fixed = result.result("engine.aux-layers", LCPP).findings[0]
    assert fixed.patch and fixed.patch[0]["path"] == "/eagle_aux_hidden_state_layer_ids"


def test_llamacpp_ignores_fc_norm_and_refuses_biases_and_layers(drafter):
    fc_norm = gate(drafter(SPECULATORS, replace(EXAMPLE, fc_norm=True)).write(), "llamacpp")
    assert "engine.semantics/fc-norm" in codes(fc_norm, "engine.semantics", LCPP)
    biased = gate(drafter("flat", replace(EXAMPLE, attention_bias=True)).write(), "llamacpp")
    assert status(biased, "engine.loads", LCPP) == FAILED
    two = gate(drafter("flat", replace(EXAMPLE, num_layers=2)).write(), "llamacpp")
    f = two.result("engine.loads", LCPP).findings[0]
    assert f.code == "engine.loads/refused" and f.key == "num_hidden_layers"
    assert_golden("test_other_engines/test_llamacpp_ignores_fc_norm_and_refuses_biases_and_layers.txt",
                  finding_text(f))  # an EAGLE-3 GGUF only with num_hidden_layers 1


def test_llamacpp_computes_norm_before_fc_where_lmdeploy_cannot(drafter):
    """LCPP/conversion/llama.py:100-104 writes eagle3.norm_before_fc; lmdeploy 0.18.0 reads it nowhere. (The
    converter takes any name its LlamaModel class is registered for, :17-30, LlamaForCausalLM among them: recorded.)"""
    shape = replace(EXAMPLE, norm_before_fc=True)
    assert status(gate(drafter("flat", shape).write(), "llamacpp"), "engine.semantics", LCPP) == PASSED
    result = gate(lmdeploy_drafter(drafter, shape=shape).write(), "lmdeploy,llamacpp")
    assert status(result, "engine.loads", LMD) == FAILED  # input_norm.weight: KeyError
    assert status(result, "engine.semantics", LCPP) == PASSED


# ----- lmdeploy ------------------------------------------------------------------------------------------------------

def lmdeploy_drafter(drafter, **kw):
    d = drafter("flat", **kw)
    d.config["architectures"] = ["LlamaForCausalLM"]  # LMD/pytorch/configurations/llama.py:9-11
    return d


def test_lmdeploy_builds_its_drafter_for_llama_for_causal_lm_only(drafter):
    refused = gate(drafter("flat").write(), "lmdeploy")
    assert codes(refused, "engine.loads", LMD) == {"engine.loads/class-refused"}
    assert status(gate(lmdeploy_drafter(drafter).write(), "lmdeploy"), "engine.loads", LMD) == PASSED


def test_a_layers0_drafter_fails_lmdeploy(drafter):
    """LMD/pytorch/models/llama_eagle3.py:297-298, 313: every name gets model. and is looked up: KeyError."""
    d = lmdeploy_drafter(drafter, first_layer="layers")
    result = gate(d.write(), "lmdeploy,vllm")
    assert status(result, "engine.loads", LMD) == FAILED
    f = result.result("engine.loads", LMD).findings[0]
    assert f.code == "engine.loads/refused" and f.key == "layers.0.input_layernorm.weight"
    assert_golden("test_other_engines/test_a_layers0_drafter_fails_lmdeploy.txt", finding_text(f))  # a KeyError
    assert status(result, "engine.loads", f"vllm@{VLLM}") == PASSED


def test_lmdeploy_maps_every_token_to_id_zero_without_d2t(drafter):
    """LMD llama_eagle3.py:184: the d2t buffer is zeros; vLLM needs no d2t for a full draft vocabulary."""
    full = replace(EXAMPLE, draft_vocab_size=EXAMPLE.vocab_size)
    d = lmdeploy_drafter(drafter, shape=full)
    d.tensors.pop("d2t", None)
    result = gate(d.write(), "lmdeploy,vllm")
    [f] = result.result("engine.loads", LMD).findings
    assert f.code == "engine.loads/no-tensor" and f.key == "d2t"
    assert_golden("test_other_engines/test_lmdeploy_maps_every_token_to_id_zero_without_d2t.txt",
                  finding_text(f))  # zeros: every draft token is taken as target id 0
    assert status(result, "engine.loads", f"vllm@{VLLM}") == PASSED


def test_lmdeploy_never_ties_lm_head(drafter):
    d = lmdeploy_drafter(drafter)
    d.config["tie_word_embeddings"] = True
    assert status(gate(d.write(), "lmdeploy"), "engine.loads", LMD) == FAILED


def test_lmdeploy_serves_beside_llama_targets_only(drafter, tmp_path):
    d = lmdeploy_drafter(drafter)
    qwen = gate(d.write(), "lmdeploy", target_config=target_file(tmp_path, architectures=["Qwen3ForCausalLM"]))
    assert status(qwen, "engine.loads", LMD) == FAILED
    assert status(gate(d.write(), "lmdeploy", target_config=target_file(tmp_path)), "engine.loads", LMD) == PASSED


def test_lmdeploy_reads_no_ids(drafter, tmp_path):
    """LMD/pytorch/configurations/llama.py:24-29: the target captures (2, N/2, N-3) whatever the drafter says."""
    d = lmdeploy_drafter(drafter)
    result = gate(d.write(), "lmdeploy", target_config=target_file(tmp_path), aux_convention="vllm")
    found = result.result("engine.aux-layers", LMD).findings
    assert [f.code for f in found] == ["engine.aux-layers/ids-not-read"]
    assert_golden("test_other_engines/test_lmdeploy_reads_no_ids.txt", finding_text(found[0]))  # reads no ids
    d = lmdeploy_drafter(drafter, shape=replace(EXAMPLE, aux_layer_ids=(2, 4, 5)))  # the default of 8 layers
    matched = gate(d.write(), "lmdeploy", target_config=target_file(tmp_path), aux_convention="vllm")
    assert codes(matched, "engine.aux-layers", LMD) == {"engine.aux-layers/default-matches"}


# ----- mlx-vlm -------------------------------------------------------------------------------------------------------

def mlx_target(tmp_path):
    return target_file(tmp_path, model_type="qwen3_5")  # MLX/speculative/eagle3.py:366-370: capture + rollback


def test_mlx_reads_the_speculators_layout_only(drafter, tmp_path):
    flat = gate(drafter(FLAT).write(), "mlx", target_config=mlx_target(tmp_path))
    assert status(flat, "engine.loads", MLX) == FAILED
    ok = gate(drafter(SPECULATORS).write(), "mlx", target_config=mlx_target(tmp_path))
    assert status(ok, "engine.loads", MLX) == PASSED and status(ok, "engine.semantics", MLX) == PASSED


def test_mlx_default_ids_follow_the_drafters_depth(drafter, tmp_path):
    """MLX/speculative/drafters/eagle3/config.py:66-73: [2, n//2, max(n-3, 0)] of the drafter's 1 layer is
    [2, 0, 0], two distinct layers for an fc of three states."""
    d = drafter(SPECULATORS)
    del d.config["eagle_aux_hidden_state_layer_ids"]
    result = gate(d.write(), "mlx", target_config=mlx_target(tmp_path))
    f = result.result("engine.loads", MLX).findings[0]
    assert f.code == "engine.loads/refused" and f.key == "eagle_aux_hidden_state_layer_ids"
    assert_golden("test_other_engines/test_mlx_default_ids_follow_the_drafters_depth.txt",
                  finding_text(f))  # ids [2, 0, 0] capture 2 distinct layers


def test_mlx_builds_rope_from_the_theta_only(drafter, tmp_path):
    d = drafter(SPECULATORS)
    d.config["transformer_layer_config"]["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0,
                                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                            "original_max_position_embeddings": 8192}
    result = gate(d.write(), "mlx", target_config=mlx_target(tmp_path))
    assert "engine.semantics/rope-scaling" in codes(result, "engine.semantics", MLX)


def test_mlx_serves_beside_targets_that_capture_and_roll_back(drafter, tmp_path):
    llama = gate(drafter(SPECULATORS).write(), "mlx", target_config=target_file(tmp_path))
    f = llama.result("engine.loads", MLX).findings[0]
    assert f.code == "engine.loads/refused" and f.key == "--target-config"
    assert_golden("test_other_engines/test_mlx_serves_beside_targets_that_capture_and_roll_back.txt",
                  finding_text(f))  # speculative/eagle3.py:366-370 raises


def test_mlx_needs_an_embedding_and_refuses_midlayer_names(drafter, tmp_path):
    d = drafter(SPECULATORS)
    d.tensors.pop(d.name("embed_tokens.weight"))
    assert status(gate(d.write(), "mlx", target_config=mlx_target(tmp_path)), "engine.loads", MLX) == FAILED
    mid = drafter(SPECULATORS)
    mid.tensors = {name.replace("layers.0.", "midlayer."): t for name, t in mid.tensors.items()}
    result = gate(mid.write(), "mlx", target_config=mlx_target(tmp_path))
    assert status(result, "engine.loads", MLX) == FAILED


def test_the_new_engines_are_listed_with_how_they_are_known(capsys):
    assert main(["list", "--engines", "--format", "json"]) == 0
    doc = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    for name in ("trtllm", "llamacpp", "lmdeploy", "mlx"):
        assert doc[name]["releases"][0]["how"] == "read from its source"
    # why TensorRT-LLM's is read at commit 00679c66
    assert_golden("test_other_engines/test_the_new_engines_are_listed_with_how_they_are_known.txt",
                  doc["trtllm"]["releases"][0]["why"] + "\n")


def _open(path):
    from eagle3_checks.drafter.checkpoint import open_checkpoint

    return open_checkpoint(path)
