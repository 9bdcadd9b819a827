"""Drafters saved by the real speculators package (0.9.0, installed by the README's test command) pass the gate,
and the embedded example's speculators layout is the layout speculators itself writes."""

from __future__ import annotations

import shutil

import pytest

from eagle3_checks.checks.reference import diff
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.spec import load_spec, shipped_specs, snapshot
from eagle3_checks.storage.safetensors import RawTensor, read_bytes, read_header, write_safetensors
from helpers import VLLM_REFUSES, assert_clean, assert_golden, run
from peers.variants import SPECULATORS, SPECULATORS_UNLOADED

pytestmark = pytest.mark.slow  # every test here builds drafters with a real peer package


@pytest.mark.parametrize("name", [v["name"] for v in SPECULATORS])
def test_speculators_saved_drafter_passes_the_header_gate(speculators_drafters, name):
    result = run(speculators_drafters / name, reference="none", level="header", engine="speculators")
    assert_clean(result)
    assert result.ckpt.layout == "speculators"
    vllm = run(speculators_drafters / name, reference="none", level="header", engine="vllm")
    if name in VLLM_REFUSES:
        [fc] = [f for f in vllm.result("engine.loads").findings if f.key == "fc.weight"]
        assert fc.code == "engine.loads/refused"  # its shape (64, 256); vllm builds (64, 192)
        assert_golden(f"test_speculators_peer/test_speculators_saved_drafter_passes_the_header_gate-{name}.txt",
                      f"{fc.message}\nfound: {fc.found}\n")
    else:
        assert_clean(vllm)


def test_speculators_config_reads_as_written(speculators_drafters):
    ck = open_checkpoint(speculators_drafters / "example-dims")
    cfg = ck.config
    assert cfg["head_dim"] == 24 and cfg.explicit("head_dim")
    assert cfg.entry("rope_theta").source.endswith("transformer_layer_config.rope_parameters.rope_theta")
    assert cfg["norm_before_residual"] is True and cfg.explicit("norm_before_residual")
    assert "target_hidden_size" in cfg.nulls and cfg.target_hidden == 64
    assert sorted(ck.roles) == sorted(load_spec(shipped_specs()["tiny-example"]).tensors)


def test_example_speculators_layout_matches_what_speculators_writes(speculators_drafters, drafter):
    """Our embedded example differs from a speculators-saved drafter of the same dims only where it chose to:
    bf16 weights (speculators saved float32 here: a dtype engines cast, a note), the residual norm and the rope base
    (semantic values: warnings). Nothing structural: no error."""
    real = snapshot(open_checkpoint(speculators_drafters / "example-dims"), "real")
    ours = snapshot(open_checkpoint(drafter("speculators").write()), "ours")
    found = sorted((f.severity.value, f.code, f.message) for f in diff(ours, real))
    assert found == [("info", "dtype-accepted", "14 tensor(s) are BF16, real has F32: embed_tokens.weight, fc.weight, "
                      "layers.0.hidden_norm.weight, layers.0.input_layernorm.weight, ... (10 more)"),
                     ("warning", "semantic", "config norm_before_residual: False, real has True"),
                     ("warning", "semantic", "config rope_theta: 1000000.0, real has 10000.0")]


def test_speculators_drafter_renamed_by_hand_is_caught(speculators_drafters, tmp_path):
    """The seeds' hand conversion: rename layers.0. to midlayer. but keep the speculators config."""
    dst = tmp_path / "renamed"
    shutil.copytree(speculators_drafters / "example-dims", dst)
    header = read_header(dst / "model.safetensors", "model.safetensors")
    tensors = {name.replace("layers.0.", "midlayer."): RawTensor(e.dtype, e.shape, read_bytes(e))
               for name, e in header.entries.items()}
    write_safetensors(dst / "model.safetensors", tensors)
    result = run(dst, reference="none", engine="speculators")
    assert result.exit_code == 1
    [keys] = result.result("keys").findings
    assert keys.code == "keys/flat-names" and (keys.key, keys.expected) == ("midlayer.hidden_norm.weight",
                                                                            "layers.0.hidden_norm.weight")
    forward = result.result("forward.equivalence", "speculators")
    assert forward.status == "failed" and forward.findings[0].code == "forward.equivalence/unservable"
    # keys: 10 tensors use flat-layout names in a speculators checkpoint; forward: each keeps its random
    # initialisation (speculators loads non-strictly)
    assert_golden("test_speculators_peer/test_speculators_drafter_renamed_by_hand_is_caught.txt",
                  f"{keys.message}\nwhy: {keys.why}\nfix: {keys.fix}\n\n{forward.findings[0].message}\n"
                  f"found: {forward.findings[0].found}\n")


def test_speculators_drafter_saved_before_the_verifier_loaded_is_caught(speculators_drafters):
    """speculators fills embed_tokens and lm_head with NaN until load_verifier_weights(); saved before that, they
    are NaN on disk. The scan names both, with the count."""
    result = run(speculators_drafters / SPECULATORS_UNLOADED["name"], reference="none", level="scan",
                 engine="speculators")
    errors = {f.key: f.message for f in result.result("scan.values").findings if f.severity.value == "error"}
    v = SPECULATORS_UNLOADED
    assert errors == {
        "embed_tokens.weight": f"embed_tokens.weight: {v['vocab'] * v['hidden_size']} NaN of "
                               f"{v['vocab'] * v['hidden_size']} values, the first at index (0, 0)",
        "lm_head.weight": f"lm_head.weight: {v['draft_vocab'] * v['hidden_size']} NaN of "
                          f"{v['draft_vocab'] * v['hidden_size']} values, the first at index (0, 0)",
    }


def test_speculators_mapping_never_loaded_is_caught_without_t2d(speculators_drafters, tmp_path):
    """speculators 0.9.0 starts d2t and t2d as zeros until load_vocab_mappings fills them
    (speculators/model.py:51-55, 81-121). Saved before that, with t2d then dropped (t2d is optional: engines skip
    it), d2t is all zeros with a draft vocabulary of 128 of 512: vocab.d2t fails it (it passed with no finding)."""
    dst = tmp_path / "no-t2d"
    shutil.copytree(speculators_drafters / SPECULATORS_UNLOADED["name"], dst)
    header = read_header(dst / "model.safetensors", "model.safetensors")
    assert read_bytes(header.entries["d2t"]) == bytes(8 * SPECULATORS_UNLOADED["draft_vocab"])  # as saved: zeros
    write_safetensors(dst / "model.safetensors", {name: RawTensor(e.dtype, e.shape, read_bytes(e))
                                                  for name, e in header.entries.items() if name != "t2d"})
    result = run(dst, reference="none", level="header", engine="speculators")
    assert [f.code for f in result.result("vocab.d2t").findings] == ["vocab.d2t/all-zero"]
    assert result.result("vocab.d2t").status == "failed" and result.exit_code == 1


def test_speculators_own_initialisation_reads_as_untrained(speculators_drafters):
    """The peer drafters are never trained: speculators initialises every projection normal(0, 0.02)
    (initializer_range), and the builder draws embed_tokens normal(0, 1). The scan says so for each, and for
    nothing the builder set by hand (lm_head std 0.2, norms uniform(0.5, 1.5))."""
    r = run(speculators_drafters / "example-dims", reference="none", level="scan").result("scan.values")
    warned = {f.key: f.found for f in r.findings if f.severity.value == "warning" and f.code == "scan.values/untrained"}
    projections = {f"layers.0.{p}.weight" for p in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                     "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                                                     "mlp.down_proj")}
    assert set(warned) == projections | {"fc.weight", "embed_tokens.weight"}
    assert {warned[k] for k in projections | {"fc.weight"}} == {
        "an untouched normal(0, 0.02) (transformers' initializer_range)"}
    assert warned["embed_tokens.weight"] == "an untouched nn.Embedding's normal(0, 1) initialisation"
    assert len([f for f in r.findings if f.severity.value == "warning"]) == len(warned)  # every warning: untrained
