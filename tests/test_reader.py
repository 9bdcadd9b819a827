"""The checkpoint reader: safetensors headers by hand, both layouts, shards, symlinks, provenance, no torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import safetensors.numpy

from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.errors import UsageError
from eagle3_checks.storage.safetensors import from_numpy, load_array, read_header, write_safetensors
from helpers import assert_fails, assert_golden, run

# ----- safetensors, both ways against the reference implementation ---------------------------------------

def test_our_files_load_in_safetensors(tmp_path):
    arrays = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.array([True, False]),
              "c": np.arange(5, dtype=np.int64)}
    write_safetensors(tmp_path / "x.safetensors", {k: from_numpy(v) for k, v in arrays.items()}, {"k": "v"})
    loaded = safetensors.numpy.load_file(tmp_path / "x.safetensors")
    for k, v in arrays.items():
        np.testing.assert_array_equal(loaded[k], v)


def test_safetensors_files_read_here(tmp_path):
    arrays = {"w": np.random.default_rng(0).standard_normal((7, 3)).astype(np.float16), "d2t": np.arange(9)}
    safetensors.numpy.save_file(arrays, tmp_path / "y.safetensors", metadata={"format": "np"})
    h = read_header(tmp_path / "y.safetensors", "y.safetensors")
    assert not h.problems and h.metadata == {"format": "np"}
    for k, v in arrays.items():
        assert h.entries[k].shape == v.shape
        np.testing.assert_array_equal(load_array(h.entries[k]), v)



def test_bf16_rounding(tmp_path):
    values = np.array([1.0, 1.00390625, 1.01171875, -2.5], np.float32)
    write_safetensors(tmp_path / "b.safetensors", {"x": from_numpy(values, "BF16")})
    back = load_array(read_header(tmp_path / "b.safetensors", "b").entries["x"])
    # 1 + 2^-8 is a tie: rounds to even (1.0); 1 + 3*2^-8 rounds up to 1 + 2^-6.
    np.testing.assert_array_equal(back, [1.0, 1.0, 1.015625, -2.5])


# ----- file integrity (every case: test_integrity.py) -------------------------------------------------------

def test_integrity_problem_is_a_files_finding_with_offset(drafter):
    d = drafter("flat")
    path = d.write()
    f = path / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-10])
    result = run(path)
    assert_fails(result, "files/truncated", "model.safetensors")
    # Header-level checks still run on what the header says.
    assert result.result("shapes").status == "passed"
    t2d = result.result("vocab.t2d")
    assert t2d.status == "skipped"  # its reason: t2d's bytes cannot be read
    assert_golden("test_reader/test_integrity_problem_is_a_files_finding_with_offset.txt", t2d.reason + "\n")


# ----- opening checkpoints --------------------------------------------------------------------------------

def test_unusable_paths_are_usage_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    said = []
    for name in ("nope", "file", "empty"):  # no such file, not a directory, holds neither config.json nor weights
        with pytest.raises(UsageError) as exc:
            open_checkpoint(tmp_path / name)
        said.append(str(exc.value))
    assert_golden("test_reader/test_unusable_paths_are_usage_errors.txt", "\n".join(said) + "\n", {"TMP": tmp_path})


def test_weights_without_config(drafter):
    d = drafter("flat")
    path = d.write()
    (path / "config.json").unlink()
    ck = open_checkpoint(path)
    assert ck.layout == "flat" and ck.layout_source.startswith("tensor names")
    assert ck.config is None


def test_config_without_weights(drafter):
    d = drafter("flat")
    d.root.mkdir(parents=True)
    (d.root / "config.json").write_text(json.dumps(d.config))
    assert_fails(run(d.root), "files/missing-file", "model.safetensors")


def test_hugging_face_cache_symlinks_are_followed(drafter, tmp_path):
    """A snapshot folder whose files are symlinks into ../../blobs, as huggingface_hub lays them out."""
    src = drafter("flat").write(shards=2)
    blobs = tmp_path / "hub" / "blobs"
    snap = tmp_path / "hub" / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in src.iterdir():
        (blobs / f"sha-{f.name}").write_bytes(f.read_bytes())
        os.symlink(os.path.relpath(blobs / f"sha-{f.name}", snap), snap / f.name)
    result = run(snap)
    assert result.exit_code == 0, [f.message for f in result.findings()]
    assert len(result.ckpt.tensors) == 16


def test_index_names_a_tensor_its_shard_lacks(drafter):
    path = drafter("speculators").write(shards=2)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    index["weight_map"]["ghost.weight"] = "model-00001-of-00002.safetensors"
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert_fails(run(path), "files/index-mismatch", "ghost.weight", "model-00001-of-00002.safetensors")


def test_provenance_of_config_values(drafter):
    d = drafter("speculators")
    del d.config["transformer_layer_config"]["num_key_value_heads"]
    cfg = open_checkpoint(d.write()).config
    assert cfg.entry("head_dim").source == "config.json: transformer_layer_config.head_dim"
    assert cfg.entry("rope_theta").source == "config.json: transformer_layer_config.rope_parameters.rope_theta"
    assert cfg.entry("num_key_value_heads").source.startswith("default: num_attention_heads")
    assert cfg["num_key_value_heads"] == 4 and not cfg.explicit("num_key_value_heads")
    assert cfg.entry("target_hidden_size").source == "default: hidden_size" and "target_hidden_size" in cfg.nulls


def test_flat_config_torch_dtype_and_nested_ids(drafter):
    cfg = open_checkpoint(drafter("flat").write()).config
    assert cfg.dtype == "BF16" and cfg.entry("dtype").source == "config.json: torch_dtype"
    assert cfg["aux_layer_ids"] == [1, 3, 5]
    assert cfg.entry("aux_layer_ids").source == "config.json: eagle_config.eagle_aux_hidden_state_layer_ids"


def test_header_path_never_imports_torch(drafter, tmp_path):
    """A stand-in torch module that records any import attempt: the whole header gate never makes one."""
    path = drafter("speculators").write()
    fake, marker = tmp_path / "fake_torch", tmp_path / "torch-was-imported"
    fake.mkdir()
    (fake / "torch.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                   "raise ImportError('torch on the header path')\n")
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(fake)!r})
        from eagle3_checks.cli import main
        sys.exit(main(["check", {str(path)!r}, "--reference", "tiny-example", "--level", "header"]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASSED" in proc.stdout
    assert not marker.exists(), "something imported torch on the header path"
