"""Drafters saved by the real speculators package (0.9.0, installed by the README's test command) pass the gate,
and the embedded example's speculators layout is the layout speculators itself writes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eagle3_checks.checkpoint import open_checkpoint
from eagle3_checks.spec import diff, load_spec, shipped_specs, snapshot

from conftest import assert_clean, run

BASE = dict(hidden_size=64, heads=4, kv_heads=2, head_dim=24, intermediate=160, vocab=512, draft_vocab=128, layers=1,
            aux=[1, 3, 5], norm_before_residual=True)
VARIANTS = [
    dict(BASE, name="example-dims"),
    dict(BASE, name="norm-before-fc", norm_before_residual=False, norm_before_fc=True),
    dict(BASE, name="full-vocab", draft_vocab=512),
    dict(BASE, name="two-layers", layers=2),
    dict(BASE, name="qwen3", model_type="qwen3", head_dim=32),
    dict(BASE, name="bf16", dtype="bfloat16"),
]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """Every variant, built and saved by speculators in one subprocess (torch stays out of this process)."""
    if importlib.util.find_spec("speculators") is None:
        pytest.fail("speculators 0.9.0 is not installed: install the test extras as the README's test command does")
    out = tmp_path_factory.mktemp("speculators")
    spec = out / "variants.json"
    spec.write_text(json.dumps(VARIANTS))
    script = Path(__file__).parent / "peers" / "build_speculators.py"
    proc = subprocess.run([sys.executable, str(script), str(out), str(spec)], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.parametrize("name", [v["name"] for v in VARIANTS])
def test_speculators_saved_drafter_passes(saved, name):
    result = run(saved / name, reference="none")
    assert_clean(result)
    assert result.ckpt.layout == "speculators"


def test_speculators_config_reads_as_written(saved):
    ck = open_checkpoint(saved / "example-dims")
    cfg = ck.config
    assert cfg["head_dim"] == 24 and cfg.explicit("head_dim")
    assert cfg.get("rope_theta").source.endswith("transformer_layer_config.rope_parameters.rope_theta")
    assert cfg["norm_before_residual"] is True and cfg.explicit("norm_before_residual")
    assert "target_hidden_size" in cfg.nulls and cfg.target_hidden == 64
    assert sorted(ck.roles) == sorted(load_spec(shipped_specs()["tiny-example"]).tensors)


def test_example_speculators_layout_matches_what_speculators_writes(saved, drafter):
    """Our embedded example differs from a speculators-saved drafter of the same dims only where it chose to:
    bf16 weights (speculators saved float32 here) and the rope base."""
    real = snapshot(open_checkpoint(saved / "example-dims"), "real")
    ours = snapshot(open_checkpoint(drafter("speculators").write()), "ours")
    messages = sorted(f.message for f in diff(ours, real) if f.severity.value == "error")
    assert messages == ["14 tensor(s) are BF16, real has F32: embed_tokens.weight, fc.weight, "
                        "layers.0.hidden_norm.weight, layers.0.input_layernorm.weight, ... (10 more)",
                        "config norm_before_residual: False, real has True",
                        "config rope_theta: 1000000.0, real has 10000.0"]


def test_speculators_drafter_converted_by_hand_is_caught(saved, tmp_path):
    """The seeds' hand conversion: rename layers.0. to midlayer. but keep the speculators config."""
    import shutil

    from eagle3_checks.safetensors_io import read_header, write_safetensors, RawTensor, read_bytes

    dst = tmp_path / "renamed"
    shutil.copytree(saved / "example-dims", dst)
    header = read_header(dst / "model.safetensors", "model.safetensors")
    tensors = {name.replace("layers.0.", "midlayer."): RawTensor(e.dtype, e.shape, read_bytes(e))
               for name, e in header.entries.items()}
    write_safetensors(dst / "model.safetensors", tensors)
    result = run(dst, reference="none")
    assert result.exit_code == 1
    assert "use flat-layout names in a speculators checkpoint" in result.result("keys").findings[0].message
