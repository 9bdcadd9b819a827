"""Published drafters as they are laid out: each gated at every level, passing where every engine serves it.

EAGLE's own EAGLE-3 release for Llama-3.1-8B-Instruct is a ``pytorch_model.bin`` with a transformers-4.28 config:
``LlamaForCausalLMEagle3``, no ``head_dim`` (heads are hidden_size / num_attention_heads), no ``rope_theta`` (EAGLE's
cnets.py and every engine use 10000), no aux-layer ids (EAGLE trains on the engines' default layers), ``midlayer.*``
names, no ``embed_tokens`` (the target's is used). Here at a tiny size, with random weights.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import replace

import numpy as np
import pytest

from eagle3_checks.cli import main
from eagle3_checks.drafter.example import EXAMPLE, drafter_files, target_config
from helpers import VLLM

torch = pytest.importorskip("torch")

EAGLE_CONFIG = {  # the keys and values of EAGLE's config.json, at the tiny example's sizes
    "architectures": ["LlamaForCausalLMEagle3"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 160, "max_position_embeddings": 2048,
    "model_type": "llama", "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1,
    "pad_token_id": 0, "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "torch_dtype": "float16",
    "transformers_version": "4.28.1", "use_cache": True, "vocab_size": 512, "draft_vocab_size": 128,
}
_NUMPY = {"F16": np.float16, "I64": np.int64, "F32": np.float32, "BOOL": np.bool_}


@pytest.fixture
def eagle_release(tmp_path):
    shape = replace(EXAMPLE, head_dim=16, embed_tokens=False, dtype="F16")
    tensors, _ = drafter_files(shape, "flat")
    state = {name: torch.from_numpy(np.frombuffer(t.data, dtype=_NUMPY[t.dtype]).reshape(t.shape).copy())
             for name, t in tensors.items()}
    path = tmp_path / "EAGLE3-LLaMA3.1-Instruct-8B"
    path.mkdir()
    torch.save(state, path / "pytorch_model.bin")
    (path / "config.json").write_text(json.dumps(EAGLE_CONFIG, indent=2))
    target = tmp_path / "target.json"
    target.write_text(json.dumps(target_config(shape)))
    return path, target


@pytest.mark.parametrize("level", ["header", "scan", "forward"])
def test_eagles_llama31_release_passes_vllm_at_every_level_without_unpickling(eagle_release, level, monkeypatch,
                                                                             capsys):
    path, target = eagle_release

    def refuse(*args, **kwargs):
        raise AssertionError("a pickle was executed")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    code = main(["check", str(path), "--engine", "vllm", "--level", level, "--target-config", str(target),
                 "--format", "json"])
    report = json.loads(capsys.readouterr().out)["checkpoints"][0]
    assert code == 0, [f["message"] for c in report["checks"] for f in c["findings"] if f["severity"] == "error"]
    status = {c["id"] + (f"[{c['engine']}]" if "engine" in c else ""): c["status"] for c in report["checks"]}
    assert status["keys"] == status["shapes"] == status[f"engine.loads[vllm@{VLLM}]"] == "passed"
    if level != "header":
        assert status["scan.values"] == "passed"
    if level == "forward":
        assert status[f"forward.equivalence[vllm@{VLLM}]"] == "passed"
    assert report["counts"]["error"] == 0
