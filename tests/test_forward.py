"""The forward level: engine readings, the forward.equivalence check against a source and against the trainer,
the `eagle3-checks forward` command, and what happens without torch."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from dataclasses import replace

import numpy as np
import pytest
import safetensors.numpy

import helpers
from eagle3_checks import engines
from eagle3_checks.cli import main
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.example import EXAMPLE, vocab_mapping
from eagle3_checks.errors import INSTALL
from eagle3_checks.storage.safetensors import RawTensor, from_numpy
from helpers import SGLANG, VLLM, Drafter, assert_golden, run, wording, write_inputs, write_target

FORWARD = "forward.equivalence"


def forward_result(result, engine="vllm"):
    return result.result(FORWARD, engine)


# ----- a faithful conversion passes; each defect injected into it fails ----------------------------------------

@pytest.fixture
def source(drafter):
    return drafter("speculators").write()


def swap(d: Drafter, a: str, b: str) -> None:
    a, b = d.name(a), d.name(b)
    d.tensors[a], d.tensors[b] = d.tensors[b], d.tensors[a]


def kv_swapped(d):
    swap(d, "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.v_proj.weight")


def norms_swapped(d):
    swap(d, "layers.0.input_layernorm.weight", "layers.0.hidden_norm.weight")


def gate_up_swapped(d):
    swap(d, "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight")


def fc_blocks_reordered(d):
    t = d.tensors["fc.weight"]
    blocks = np.frombuffer(t.data, "<u2").reshape(t.shape[0], 3, -1)[:, ::-1, :]
    d.tensors["fc.weight"] = RawTensor(t.dtype, t.shape, np.ascontiguousarray(blocks).tobytes())


def rope_theta_changed(d):
    d.config["rope_theta"] = 10000.0


def norm_before_residual_flipped(d):
    d.config["norm_before_residual"] = True


def other_vocab_mapping(d):
    d2t, t2d = vocab_mapping(EXAMPLE.vocab_size, EXAMPLE.draft_vocab_size, seed=7)
    d.tensors["d2t"], d.tensors["t2d"] = from_numpy(d2t), from_numpy(t2d)


# the cause the finding names for each (its why: "layers.0.self_attn.k_proj.weight equals the source's
# layers.0.self_attn.v_proj.weight", "rope_theta: vllm uses 10000.0 ..."): golden/test_forward/
# test_defect_in_a_conversion_fails-NAME.txt
DEFECTS = [kv_swapped, norms_swapped, gate_up_swapped, fc_blocks_reordered, rope_theta_changed,
           norm_before_residual_flipped, other_vocab_mapping]


def test_faithful_conversion_passes(drafter, source):
    """The same tensors in the flat layout (what a converter writes) compute what the source computes."""
    result = run(drafter("flat").write(), source=str(source), engine="all")
    said = []
    for engine in ("vllm", "sglang"):
        r = forward_result(result, engine)
        assert r.status == "passed" and [f.code for f in r.findings] == [f"{FORWARD}/agrees"], r.findings
        said.append(wording(r.findings, figures=False))
    # each matches the source under its trainer's reading
    assert_golden("test_forward/test_faithful_conversion_passes.txt", "".join(said))


@pytest.mark.parametrize("defect", DEFECTS, ids=[d.__name__ for d in DEFECTS])
def test_defect_in_a_conversion_fails(drafter, source, defect):
    d = drafter("flat")
    defect(d)
    result = run(d.write(), source=str(source))
    r = forward_result(result)
    assert r.status == "failed", r.findings
    [f] = r.findings
    assert f.check == f"forward.equivalence[vllm@{VLLM}]" and f.code == f"{FORWARD}/differs"
    # differs from the source under its trainer's reading, each step's figures, and the cause
    assert_golden(f"test_forward/test_defect_in_a_conversion_fails-{defect.__name__}.txt", wording([f], figures=False))


@pytest.mark.parametrize("layout", ["speculators", "flat"])
@pytest.mark.parametrize("case", [c for c in helpers.CLEAN
                                  if c[0] != "fc_norm, 4 aux layers, wider target"],
                         ids=lambda c: c[0])
def test_clean_drafters_pass_the_forward_check(drafter, layout, case):
    _, shape, shards = case
    result = run(drafter(layout, shape, trained=True).write(shards), engine="vllm")
    assert forward_result(result).status == "passed", forward_result(result).findings


def test_wider_target_four_aux_layers(drafter):
    """fc_norm, 4 aux states of a 96-wide target: the flat layout serves in vLLM; a speculators config cannot say
    it to vLLM 0.33 (fc sized from eagle_config only) nor to speculators 0.9 (fc = A x hidden_size)."""
    shape = replace(EXAMPLE, fc_norm=True, aux_layer_ids=(1, 2, 4, 6), target_hidden_size=96)
    d = drafter("flat", shape)
    d.config["num_aux_hidden_states"] = 4
    assert forward_result(run(d.write(), trainer="specforge@0.2.0")).status == "passed"
    result = run(drafter("speculators", shape).write())
    r = forward_result(result)
    assert r.status == "skipped"
    loads = result.result("engine.loads", "vllm")
    assert loads.status == "failed" and "fc.weight" in {f.key for f in loads.findings}
    # the trainer's reading cannot run, and vLLM refuses fc.weight: shape (64, 384)
    assert_golden("test_forward/test_wider_target_four_aux_layers.txt",
                  f"{FORWARD} skipped: {r.reason}\n" + wording(loads.findings, figures=False))


def test_vocab_mapping_difference_is_named_as_such(drafter, source):
    d = drafter("flat")
    other_vocab_mapping(d)
    [f] = forward_result(run(d.write(), source=str(source))).findings
    assert f.code == f"{FORWARD}/differs"
    # step 0: the two map draft tokens to different target ids
    assert_golden("test_forward/test_vocab_mapping_difference_is_named_as_such.txt", wording([f], figures=False))


def test_norm_before_residual_default_trap_without_source(drafter):
    """A speculators config without norm_before_residual: speculators trains with False, vLLM reads True."""
    d = drafter("speculators")
    del d.config["norm_before_residual"]
    result = run(d.write(), engine="all")
    [f] = forward_result(result, "vllm").findings
    assert (f.code, f.cause) == (f"{FORWARD}/differs", "config.json: norm_before_residual")
    # differs from its trainer's reading (speculators), vLLM's default True, the fix: state false
    assert_golden("test_forward/test_norm_before_residual_default_trap_without_source.txt", wording([f], figures=False))
    assert forward_result(result, "speculators").status == "passed"


def test_unreadable_for_an_engine_is_a_finding(drafter):
    d = drafter("flat", first_layer="layers")
    result = run(d.write(), engine="sglang@0.5.6")
    [f] = forward_result(result, "sglang").findings
    assert f.code == f"{FORWARD}/unservable"
    # sglang 0.5.6 would not compute it: layers.0.* left uninitialised memory
    assert_golden("test_forward/test_unreadable_for_an_engine_is_a_finding.txt", wording([f], figures=False))


def test_forward_check_without_embed_tokens(drafter, source):
    """A conversion that leaves embed_tokens out (as SpecForge's exporter does): engines share the target's."""
    d = drafter("flat")
    del d.tensors["embed_tokens.weight"]
    result = run(d.write(), source=str(source))
    r = forward_result(result)
    assert r.status == "passed" and [f.code for f in r.findings] == [f"{FORWARD}/agrees"]
    # later steps embed the drafted tokens with a stand-in table
    assert_golden("test_forward/test_forward_check_without_embed_tokens.txt", wording(r.findings, figures=False))


def test_forward_check_with_the_targets_embedding(drafter, tmp_path):
    """--target: a drafter without embed_tokens is run as engines run it, every step embedded with the target's."""
    d = drafter("flat", trained=True)
    target = write_target(tmp_path / "target", d.tensors.pop("embed_tokens.weight"))
    result = run(d.write(), target=str(target), engine="vllm,sglang")
    said = []
    for engine in ("vllm", "sglang"):
        r = forward_result(result, engine)
        assert r.status == "passed" and [f.code for f in r.findings] == [f"{FORWARD}/agrees"]
        said.append(wording(r.findings, figures=False))
    # tokens embedded with the target's embed_tokens (--target)
    assert_golden("test_forward/test_forward_check_with_the_targets_embedding.txt", "".join(said))
    assert result.result("target.vocab").status == "passed"  # the target's config.json came along


def test_forward_command_steps_with_the_targets_embedding(drafter, tmp_path, capsys):
    """A SpecForge-style drafter (no embed_tokens) drafts 3 steps with --target T exactly as the same drafter
    carrying T's embedding does: the engines' reading with the target's embedding."""
    own = drafter("flat")
    table = own.tensors["embed_tokens.weight"]
    target = write_target(tmp_path / "target", table)
    bare = drafter("flat")
    del bare.tensors["embed_tokens.weight"]
    inputs = write_inputs(tmp_path / "in.safetensors")
    outs = {}
    for name, d, extra in (("own", own, []), ("target", bare, ["--target", str(target)])):
        outs[name] = tmp_path / f"{name}.safetensors"
        assert main(["forward", str(d.write()), "--engine", "vllm", "--inputs", str(inputs), "--out", str(outs[name]),
                     "--steps", "3", *extra]) == 0, capsys.readouterr().err
    got, want = (safetensors.numpy.load_file(outs[k]) for k in ("target", "own"))
    assert sorted(got) == sorted(want) == ["logits", "logits_step_1", "logits_step_2"]
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])

    # without a target: what the checkpoint allows (one step), with a note; asking for more says how
    capsys.readouterr()
    inputs = write_inputs(tmp_path / "in-embeds.safetensors", embeds=True)
    assert main(["forward", str(bare.root), "--engine", "vllm", "--inputs", str(inputs), "--out",
                 str(tmp_path / "one.safetensors")]) == 0
    note = capsys.readouterr().err  # ran 1 draft step
    assert sorted(safetensors.numpy.load_file(tmp_path / "one.safetensors")) == ["logits"]
    assert main(["forward", str(bare.root), "--engine", "vllm", "--inputs", str(inputs), "--out",
                 str(tmp_path / "three.safetensors"), "--steps", "3"]) == 2
    refusal = capsys.readouterr().err  # pass --target with the target checkpoint
    assert not (tmp_path / "three.safetensors").exists()
    assert_golden("test_forward/test_forward_command_steps_with_the_targets_embedding.txt", note + refusal,
                  {"TMP": tmp_path})


def test_the_forward_note_says_what_sglang_does_with_the_checkpoints_embedding(drafter, tmp_path, capsys):
    """SGLang's worker puts the target's embedding in place of a drafter's embed_tokens after load (0.5.23
    srt/speculative/eagle_worker_v2.py:353-363, set_embed at srt/models/llama.py:910-918, unless target_hidden_size
    differs): the note said "the checkpoint has no embed_tokens" on a checkpoint that has one. It says what SGLang does,
    with the reading's file and line ("sglang VERSION embeds with the target's embed_tokens, not the checkpoint's
    embed_tokens.weight (the target's embedding serves instead: set_embed after load (eagle_worker_v2.py:353-363))",
    in each of the first three runs' words in the golden file); a checkpoint without one is still said to have none."""
    path = drafter("flat").write()
    assert "embed_tokens.weight" in open_checkpoint(path).roles
    embeds, ids_only = (write_inputs(tmp_path / f"in-{e}.safetensors", embeds=e) for e in (True, False))
    out = ["--out", str(tmp_path / "o.safetensors")]
    said = []  # each run's stderr
    assert main(["forward", str(path), "--engine", f"sglang@{SGLANG}", "--inputs", str(embeds), *out]) == 0
    said.append(capsys.readouterr().err)  # ran 1 draft step: what SGLang does
    assert main(["forward", str(path), "--engine", f"sglang@{SGLANG}", "--inputs", str(embeds), *out,
                 "--steps", "2"]) == 2
    said.append(capsys.readouterr().err)  # the same, and pass --target
    assert main(["forward", str(path), "--engine", f"sglang@{SGLANG}", "--inputs", str(ids_only), *out]) == 2
    said.append(capsys.readouterr().err)  # the same, and inputs_embeds (T, H) is required
    bare = drafter("flat")
    del bare.tensors["embed_tokens.weight"]
    assert main(["forward", str(bare.write()), "--engine", f"sglang@{SGLANG}", "--inputs", str(embeds), *out]) == 0
    said.append(capsys.readouterr().err)  # ran 1 draft step: BARE has no embed_tokens
    assert_golden("test_forward/test_the_forward_note_says_what_sglang_does_with_the_checkpoints_embedding.txt",
                  "\n".join(said), {"TMP": tmp_path})


@pytest.mark.parametrize("case", [
    "narrow",  # the target's embed_tokens is 32 wide, the drafter's hidden size is 64
    "no-embedding",  # no embed_tokens tensor
    "not-a-folder",  # --target
])
def test_forward_command_target_errors(drafter, tmp_path, capsys, case):
    bare = drafter("flat")
    del bare.tensors["embed_tokens.weight"]
    if case == "narrow":
        target = write_target(tmp_path / "t", from_numpy(np.zeros((512, 32), np.float32)), hidden=32)
    elif case == "no-embedding":
        target = write_target(tmp_path / "t", from_numpy(np.zeros((512, 64), np.float32)))
        index = json.loads((target / "model.safetensors.index.json").read_text())
        index["weight_map"]["model.embed.weight"] = index["weight_map"].pop("model.embed_tokens.weight")
        (target / "model.safetensors.index.json").write_text(json.dumps(index))
    else:
        target = tmp_path / "nope"
    code = main(["forward", str(bare.write()), "--engine", "vllm", "--inputs",
                 str(write_inputs(tmp_path / "in.safetensors")), "--out", str(tmp_path / "o.safetensors"),
                 "--steps", "2", "--target", str(target)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert not (tmp_path / "o.safetensors").exists()
    assert_golden(f"test_forward/test_forward_command_target_errors-{case}.txt", err, {"TMP": tmp_path})


def test_source_must_be_a_checkpoint(drafter, tmp_path):
    from eagle3_checks.errors import UsageError

    with pytest.raises(UsageError, match="--source .*no such file"):
        run(drafter("flat").write(), source=str(tmp_path / "nope"))


# ----- readings ------------------------------------------------------------------------------------------------

def test_vllm_reading_of_speculators_and_flat_defaults(drafter):
    d = drafter("speculators")
    del d.config["norm_before_residual"]
    r = engines.read(open_checkpoint(d.write()), "vllm")
    assert r.norm_before_residual is True
    t = engines.trainer(open_checkpoint(d.root))
    assert t.norm_before_residual is False
    # where each reading has its value from: vLLM's default (update_eagle3), speculators' default
    assert_golden("test_forward/test_vllm_reading_of_speculators_and_flat_defaults.txt",
                  f"vllm: {r.sources['norm_before_residual']}\nspeculators: {t.sources['norm_before_residual']}\n")
    flat = engines.read(open_checkpoint(drafter("flat").write()), "vllm")
    assert flat.norm_before_residual is False
    assert flat.tensors["layers.0.hidden_norm.weight"] == "midlayer.hidden_norm.weight"
    assert flat.ignored == {"t2d": "vLLM skips t2d"}


def test_sglang_reading_drops_what_it_does_not_know(drafter):
    d = drafter("flat", replace(EXAMPLE, attention_bias=True), first_layer="layers")
    d.config["rope_parameters"] = {"rope_theta": d.config.pop("rope_theta"), "rope_type": "default"}
    d.config["num_hidden_layers"] = 1
    r = engines.read(open_checkpoint(d.write()), "sglang@0.5.6")
    assert r.rope_theta == 10000.0
    # what it says of each: uninitialised memory, dropped silently, rope_parameters is not read
    assert_golden("test_forward/test_sglang_reading_drops_what_it_does_not_know.txt",
                  f"unfilled q_proj.weight: {r.unfilled['layers.0.self_attn.q_proj.weight']}\n"
                  f"ignored q_proj.bias: {r.ignored['layers.0.self_attn.q_proj.bias']}\n"
                  f"rope_theta: {r.sources['rope_theta']}\n")


def test_engine_refusals(drafter):
    d = drafter("flat")
    d.config["target_hidden_size"] = None
    d.tensors = {f"model.{k}": v for k, v in d.tensors.items()}
    r = engines.read(open_checkpoint(d.write()), "vllm")
    spec = engines.read(open_checkpoint(d.root), "speculators")
    two = drafter("flat", replace(EXAMPLE, num_layers=2))
    refusals = engines.read(open_checkpoint(two.write()), "sglang@0.5.6").refusals
    assert r.refusals and len(spec.refusals) == 1 and refusals
    # vLLM: target_hidden_size set to null, model.fc.weight (vLLM prefixes model.); speculators: a flat config;
    # SGLang 0.5.6: only 1 layer
    assert_golden("test_forward/test_engine_refusals.txt", "".join(
        f"{name}:\n" + "".join(f"  {x}\n" for x in said)
        for name, said in (("vllm", r.refusals), ("speculators", spec.refusals), ("sglang 0.5.6", refusals))))


@pytest.mark.parametrize("scaling", [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 64},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "truncate": False},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "mscale": 0.707,
     "mscale_all_dim": 0.707},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "mscale": 2.0, "mscale_all_dim": 0},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64, "attention_factor": 1.5,
     "beta_fast": 16, "beta_slow": 2},
], ids=["linear", "llama3", "yarn", "yarn-no-truncate", "yarn-mscale", "yarn-mscale-all-dim-0", "yarn-factor"])
def test_rope_scaling_matches_transformers(scaling):
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from eagle3_checks.numerics.draft_steps import inv_freq

    cfg = LlamaConfig(hidden_size=256, num_attention_heads=4, head_dim=64, max_position_embeddings=4096,
                      rope_parameters={**scaling, "rope_theta": 500000.0})
    want, want_scale = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](cfg, "cpu")
    got, got_scale = inv_freq(64, 500000.0, scaling)
    torch.testing.assert_close(got, want.float(), rtol=1e-6, atol=0)
    assert got_scale == pytest.approx(want_scale)


# ----- the forward command --------------------------------------------------------------------------------------

def test_forward_command_writes_logits(drafter, tmp_path, capsys):
    ckpt = drafter("flat").write()
    out = tmp_path / "out.safetensors"
    assert main(["forward", str(ckpt), "--engine", "vllm", "--inputs", str(write_inputs(tmp_path / "in.safetensors")),
                 "--out", str(out), "--steps", "3"]) == 0
    got = safetensors.numpy.load_file(out)
    assert sorted(got) == ["logits", "logits_step_1", "logits_step_2"]
    assert all(x.shape == (6, 512) and x.dtype == np.float32 for x in got.values())
    assert int(np.isfinite(got["logits"][0]).sum()) == 128
    assert_golden("test_forward/test_forward_command_writes_logits.txt", capsys.readouterr().out, {"TMP": tmp_path})


def test_forward_shows_where_engines_differ(drafter, tmp_path):
    """norm_output in a flat config: vLLM feeds the normed state back, SGLang 0.5.6 the pre-norm one. Same step 0,
    another step 1. (SGLang embeds with the target's embedding, so the inputs carry inputs_embeds.)"""
    d = drafter("flat")
    d.config["norm_output"] = True
    ckpt = d.write()
    inputs = write_inputs(tmp_path / "in.safetensors", embeds=True)
    outs = {}
    for engine in ("vllm", "sglang@0.5.6"):
        out = tmp_path / f"{engine}.safetensors"
        assert main(["forward", str(ckpt), "--engine", engine, "--inputs", str(inputs), "--out", str(out),
                     "--steps", "1"]) == 0
        outs[engine] = safetensors.numpy.load_file(out)
    np.testing.assert_array_equal(outs["vllm"]["logits"], outs["sglang@0.5.6"]["logits"])
    assert main(["forward", str(ckpt), "--engine", "vllm", "--inputs", str(inputs), "--out",
                 str(tmp_path / "v2.safetensors"), "--steps", "2"]) == 0
    del d.config["norm_output"]
    assert main(["forward", str(d.write()), "--engine", "vllm", "--inputs", str(inputs), "--out",
                 str(tmp_path / "p2.safetensors"), "--steps", "2"]) == 0
    normed = safetensors.numpy.load_file(tmp_path / "v2.safetensors")
    prenorm = safetensors.numpy.load_file(tmp_path / "p2.safetensors")
    np.testing.assert_array_equal(normed["logits"], prenorm["logits"])
    assert not np.array_equal(normed["logits_step_1"], prenorm["logits_step_1"])


# what each says (its stderr): golden/test_forward/test_forward_command_usage_errors-CASE.txt
@pytest.mark.parametrize("case", [
    "no-file",  # no such file
    "inputs-dir",  # not a file
    "no-aux",  # no tensor 'aux_hidden_states'
    "wide-aux",  # aux_hidden_states has width 200; vllm expects 3 x 64 = 192
    "bad-ids",  # input_ids must lie in [0, 512)
    "float-ids",  # input_ids is F32, expected an integer tensor
    "short-positions",  # position_ids has 2 entries, expected 6
    "no-embed-no-embeds",  # inputs_embeds (T, H) is required
    "no-embed-two-steps",  # pass --target with the target checkpoint
    "engine-cannot-read",  # sglang 0.5.6 cannot read
    "negative-positions",  # position_ids must not be negative (found -1)
    "truncated",  # runs past the end of its file (truncated)
    "out-is-inputs",  # is the --inputs file
    "out-in-ckpt",  # is inside the checkpoint, which is never modified
    "out-loop",  # cannot write: Too many levels of symbolic links
    "too-many-steps",  # --steps must be between 1 and 32, not 1000000000
    "zero-steps",  # --steps must be between 1 and 32, not 0
])
def test_forward_command_usage_errors(drafter, tmp_path, capsys, case):
    layout = "speculators" if case == "engine-cannot-read" else "flat"
    shape = replace(EXAMPLE, embed_tokens=False) if case.startswith("no-embed") else EXAMPLE
    ckpt = drafter(layout, shape).write()
    path = tmp_path / "in.safetensors"
    if case == "no-aux":
        write_inputs(path, aux_hidden_states=None)
    elif case == "wide-aux":
        write_inputs(path, width=200)
    elif case == "bad-ids":
        write_inputs(path, input_ids=np.array([0, 1, 2, 3, 4, 999], np.int64))
    elif case == "float-ids":
        write_inputs(path, input_ids=np.zeros(6, np.float32))
    elif case == "short-positions":
        write_inputs(path, position_ids=np.arange(2, dtype=np.int64))
    elif case == "no-embed-two-steps":
        write_inputs(path, embeds=True)
    elif case == "negative-positions":
        write_inputs(path, position_ids=np.array([-1, 0, 1, 2, 3, 4], np.int64))
    elif case == "inputs-dir":
        path.mkdir()
    elif case != "no-file":
        write_inputs(path)
    if case == "truncated":
        weights = ckpt / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:5000])
    out = {"out-is-inputs": path, "out-in-ckpt": ckpt / "model.safetensors", "out-loop": tmp_path / "loop"}.get(
        case, tmp_path / "o")
    if case == "out-loop":
        out.symlink_to(out)
    weights_before = (ckpt / "model.safetensors").read_bytes()
    steps = {"no-embed-two-steps": "2", "too-many-steps": "1000000000", "zero-steps": "0"}.get(case, "1")
    before = path.read_bytes() if path.is_file() else None
    code = main(["forward", str(ckpt), "--engine", engine_of(case), "--inputs", str(path), "--out", str(out),
                 "--steps", steps])
    err = capsys.readouterr().err
    assert code == 2, err
    assert_golden(f"test_forward/test_forward_command_usage_errors-{case}.txt", err, {"TMP": tmp_path})
    assert not (tmp_path / "o").exists()
    assert (path.read_bytes() if path.is_file() else None) == before
    assert (ckpt / "model.safetensors").read_bytes() == weights_before


@pytest.mark.parametrize("case, extra", [
    ("steps", ["--engine", "vllm", "--steps", "40"]),  # --steps must be between 1 and 32, not 40
    ("engine-all", ["--engine", "all"]),  # --engine 'all': forward runs one engine release, not 7
    ("missing-inputs", ["--engine", "vllm", "--inputs", "{missing}"]),  # no such file or directory
])
def test_forward_options_are_refused_before_torch_is_imported(drafter, tmp_path, capsys, monkeypatch, case, extra):
    """--steps 40 was refused only after torch was imported (seconds on a cold start): every option the command
    can judge without torch is judged first."""
    import eagle3_checks.cli as cli_module

    def torch_asked() -> str | None:
        raise AssertionError("torch was imported before the options were checked")

    monkeypatch.setattr(cli_module, "torch_missing", torch_asked)
    path = tmp_path / "in.safetensors"
    write_inputs(path)
    argv = ["forward", str(drafter("flat").write()), "--inputs", str(path), "--out", str(tmp_path / "o"), *extra]
    code = main([a.format(missing=tmp_path / "missing") for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert_golden(f"test_forward/test_forward_options_are_refused_before_torch_is_imported-{case}.txt", err,
                  {"TMP": tmp_path})


def engine_of(case):
    return "sglang@0.5.6" if case == "engine-cannot-read" else "vllm"


# ----- non-finite logits ----------------------------------------------------------------------------------------

_NAN_BITS = {"BF16": ("<u2", 0x7FC0), "F16": ("<u2", 0x7E00), "F32": ("<u4", 0x7FC00000)}


def all_nan(d: Drafter) -> None:
    """Every floating-point weight NaN (what speculators leaves in embed_tokens/lm_head before the verifier's are
    loaded, everywhere)."""
    for name, t in list(d.tensors.items()):
        if t.dtype in _NAN_BITS:
            kind, bits = _NAN_BITS[t.dtype]
            d.tensors[name] = RawTensor(t.dtype, t.shape, np.full(t.shape, bits, kind).tobytes())


def test_nan_logits_fail_the_forward_check(drafter):
    """NaN compares unequal to everything, so two all-NaN readings used to 'agree to float32 rounding'."""
    d = drafter("flat")
    all_nan(d)
    r = forward_result(run(d.write(), engine="vllm"))
    assert r.status == "failed", r.findings
    f = next(f for f in r.findings if f.code == "forward.equivalence/non-finite")
    # each side's NaN counts and the first of them, every step's in found, and --level scan in the fix
    assert_golden("test_forward/test_nan_logits_fail_the_forward_check.txt", wording([f], figures=False))


def test_compare_names_nan_and_positive_inf_but_not_the_mask():
    """What a step's comparison says of non-finite logits (about its wording: describe() is the unit of it)."""
    import torch

    from eagle3_checks.numerics.draft_steps import compare

    good = torch.tensor([[1.0, -math.inf, 2.0], [0.5, -math.inf, 0.25]])
    assert compare(good, good.clone(), 0).ok  # -inf is the draft-vocabulary mask: not a problem
    bad = good.clone()
    bad[1, 2] = math.inf
    diff = compare(bad, good, 3, ("vllm 0.33.0", "trainer"))
    assert not diff.ok
    assert diff.describe() == ("step 3: non-finite logits (vllm 0.33.0: 1 +inf of 6 logits, the first at (token 1, "
                               "target id 2))")
    nan = torch.full((2, 3), math.nan)
    assert compare(good, nan, 0, ("a", "trainer")).describe() == (
        "step 0: non-finite logits (trainer: 6 NaN of 6 logits, the first at (token 0, target id 0))")


def test_forward_command_exits_1_on_nan_logits_and_still_writes_them(drafter, tmp_path, capsys):
    d = drafter("flat")
    all_nan(d)
    ckpt = d.write()
    out = tmp_path / "out.safetensors"
    code = main(["forward", str(ckpt), "--engine", "vllm", "--inputs", str(write_inputs(tmp_path / "in.safetensors")),
                 "--out", str(out), "--steps", "2"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    # wrote OUT; error: the logits are not finite, each step's, and --level scan; no traceback
    assert_golden("test_forward/test_forward_command_exits_1_on_nan_logits_and_still_writes_them.txt",
                  captured.out + captured.err, {"TMP": tmp_path})
    assert np.isnan(safetensors.numpy.load_file(out)["logits"]).any()


# ----- without torch ------------------------------------------------------------------------------------------

def test_without_torch(drafter, tmp_path):
    """A torch that cannot be imported: the forward level is skipped with the install hint when not asked for,
    and asking for it (or for the forward command) is a usage error with the hint."""
    path = drafter("flat").write()
    fake = tmp_path / "no_torch"
    fake.mkdir()
    (fake / "torch.py").write_text("raise ImportError('no torch here')\n")

    def cli(*argv):
        code = textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(fake)!r})
            from eagle3_checks.cli import main
            sys.exit(main({[str(a) for a in argv]!r}))
        """)
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)

    default = cli("check", path, "--format", "json")
    assert default.returncode == 0, default.stderr
    report = json.loads(default.stdout)["checkpoints"][0]
    forward = next(c for c in report["checks"] if c["id"] == FORWARD)
    assert forward["status"] == "skipped" and INSTALL["forward"] in forward["reason"]
    asked = cli("check", path, "--level", "forward")
    assert asked.returncode == 2
    write_inputs(tmp_path / "in.safetensors")  # an --inputs that is no file is refused first, before torch is asked
    command = cli("forward", path, "--engine", "vllm", "--inputs", tmp_path / "in.safetensors", "--out", "y")
    assert command.returncode == 2
    # nothing on stderr of the default check; the forward level needs torch (the hint), twice; no traceback
    assert_golden("test_forward/test_without_torch.txt", "".join(
        f"{name}:\n{p.stderr}" for name, p in (("check", default), ("check --level forward", asked),
                                                ("forward", command))), {"TMP": tmp_path})


def test_install_hints_work_where_the_project_is():
    """The project is on no package index, and a plain `pip install torch` on Linux is the CUDA build: every hint
    installs from the checkout, and the forward one names torch's CPU index."""
    assert all("eagle3-checks[" not in hint and "pip install '.[" in hint for hint in INSTALL.values())
    assert "--index-url https://download.pytorch.org/whl/cpu" in INSTALL["forward"]


@pytest.mark.parametrize("field", ["hidden_size", "head_dim", "draft_vocab_size", "vocab_size", "target_hidden_size",
                                   "num_heads"])
def test_a_reading_without_a_size_the_pass_needs_cannot_be_computed(drafter, field):
    """The pass reads each size from the reading; one the reading leaves None raises ForwardError naming it (it used
    to be a TypeError deep in the pass, which the gate reports as a crashed check)."""
    from eagle3_checks.numerics.draft_steps import ForwardError, Weights, random_inputs
    from eagle3_checks.numerics.draft_steps import run as forward

    ckpt = open_checkpoint(drafter("flat").write())
    reading = engines.read(ckpt, "vllm")
    inputs = random_inputs(reading.num_aux * reading.target_hidden_size, reading.hidden_size, reading.vocab_size)
    assert len(forward(reading, Weights(ckpt, "cpu"), inputs, steps=1)) == 1  # as read, it computes
    with pytest.raises(ForwardError, match=f"reads no {field} for this drafter"):
        forward(replace(reading, **{field: None}), Weights(ckpt, "cpu"), inputs, steps=1)
