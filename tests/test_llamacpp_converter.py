"""llama.cpp's own converter (convert_hf_to_gguf.py of the llama.cpp build llama-cpp-python 0.3.36 vendors, commit
0c1e57098), run on CPU on the whole conformance set by conformance/record_llamacpp.py: the default run holds the
llamacpp profile to what it did (tests/conformance/converters/llamacpp-0.3.36.json). The converter is the first half
of the profile; the C++ runtime (src/models/eagle3.cpp) is read, not run, so a refusal of the profile the converter
does not make must be one the runtime makes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from eagle3_checks import engines
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.gate import load_target

ROOT = Path(__file__).parent.parent
RECORDING = json.loads((Path(__file__).parent / "conformance" / "converters" / "llamacpp-0.3.36.json").read_text())
SPEC = "llamacpp@0.3.36"
# what the converter checks in the tensor data, which the header-level reading does not see: vocab.d2t (scan level)
# reports absolute ids and ids out of range
DATA = {"d2t-absolute-flat": "the converter reads d2t's values (conversion/llama.py:338-354); vocab.d2t judges them"}
# the refusals of the runtime, where the converter copies without a word: exactly 3 ids, no biases, every tensor
# present, each of the shape it builds ("tensor ... has wrong shape", src/llama-model-loader.cpp:917)
RUNTIME = ("exactly 3", "builds no bias", "wrong number of tensors", "a load error", "enc.output_norm.weight is loaded",
           "its weight loader fails")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("conformance_checkpoints", ROOT / "conformance" / "checkpoints.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("lcpp") / "set"
    out.mkdir()
    return out, {e["name"]: e for e in module.build(out)}


def _reading(built, name):
    out, entries = built
    entry = entries[name]
    assert entry["source_hash"] == RECORDING["checkpoints"][name]["source_hash"], "re-record: record_llamacpp.py"
    target = load_target(out / entry["target_config"]) if entry.get("target_config") else None
    return engines.read(open_checkpoint(out / name), SPEC, target), target


def test_the_recording_covers_the_whole_set(built):
    assert set(RECORDING["checkpoints"]) == set(built[1])
    assert RECORDING["version"] == SPEC.split("@")[1] and RECORDING["commit"] == "0c1e57098"


@pytest.mark.parametrize("name", sorted(RECORDING["checkpoints"]))
def test_the_profile_predicts_what_the_converter_did(built, name):
    said = RECORDING["checkpoints"][name]
    if name in DATA:
        pytest.skip(DATA[name])
    r, target = _reading(built, name)
    refusals = r.refusals + ([r.class_refusal] if r.class_refusal else [])
    if said["refused"]:
        assert refusals or not r.layout_ok, f"the converter refused: {said['refused']}"
        return
    assert not r.class_refusal, f"the converter converted it: {r.class_refusal}"
    runtime_only = [x for x in refusals if not any(mark in x for mark in RUNTIME)]
    assert not runtime_only, f"the converter converted it, the profile refuses at conversion: {runtime_only}"
    kv = said["kv"]
    n = target.num_hidden_layers if target else None
    ids = r.aux_layer_ids or ([2, n // 2, n - 3] if n else None)
    assert kv["eagle3.target_layers"] == ids
    assert kv.get("eagle3.norm_before_fc", False) == r.input_norm
    assert kv.get("eagle3.norm_before_residual", False) == r.norm_before_residual
    assert kv["eagle3.target_hidden_size"] == r.target_hidden_size
    if said.get("d2t_absolute") is not None:
        assert said["d2t_absolute"], "the converter writes d2t as absolute ids (conversion/llama.py:241-246)"
