"""Tiny drafters built from nothing: the embedded example, and the raw material of the tests.

:func:`drafter_files` returns a drafter's tensors (keyed by on-disk name) and its config.json as
plain data, so a test can inject one defect and then :func:`write_checkpoint` it. Values are
random but reproducible (``seed``); weights are written in ``dtype`` (bf16 by default), d2t as
int64 offsets and t2d as a bool mask, as every real producer writes them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..fast_dataclass import dataclass
from ..storage.safetensors import RawTensor, encode_header, from_numpy, write_safetensors
from .config_values import read_config
from .expected import expected_tensors
from .layout import FLAT, SPECULATORS, on_disk_name

_CONFIG_DTYPE = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}


@dataclass(frozen=True)
class _Sizes:
    """What sizes a drafter of any family: its width, heads, MLP, vocabularies, aux layers and target depth."""

    hidden_size: int = 64
    num_attention_heads: int = 4
    intermediate_size: int = 160
    vocab_size: int = 512
    draft_vocab_size: int = 128
    aux_layer_ids: tuple[int, ...] = (1, 3, 5)
    target_layers: int = 8
    num_layers: int = 1
    dtype: str = "BF16"
    max_position_embeddings: int = 4096


@dataclass(frozen=True)
class DrafterShape(_Sizes):
    """Everything that sizes a drafter of Llama (or Qwen3) layers. The defaults are the embedded example: GQA (4
    heads, 2 KV heads), head_dim 24 != hidden_size / heads = 16, a 128-token draft vocabulary of a 512-token target."""

    num_key_value_heads: int = 2
    head_dim: int = 24
    target_hidden_size: int | None = None  # None: the drafter's hidden_size
    rope_theta: float = 1_000_000.0
    model_type: str = "llama"
    attention_bias: bool = False
    mlp_bias: bool = False
    norm_before_fc: bool = False
    fc_norm: bool = False
    norm_before_residual: bool = False
    embed_tokens: bool = True
    t2d: bool = True

    @property
    def ht(self) -> int:
        return self.target_hidden_size or self.hidden_size


EXAMPLE = DrafterShape()
# The AQ-MedAI Kimi-K2 drafter's sizes (reference_specs/aq-medai-kimi-k2-eagle3.json): for benchmarks.
KIMI_K2 = DrafterShape(hidden_size=7168, num_attention_heads=64, num_key_value_heads=64, head_dim=128,
                       intermediate_size=18432, vocab_size=163840, draft_vocab_size=32000, aux_layer_ids=(2, 30, 58),
                       target_layers=61, max_position_embeddings=131072)


def vocab_mapping(vocab_size: int, draft_vocab_size: int, seed: int = 0):
    """(d2t offsets int64, t2d bool): a random sorted draft vocabulary, biased to low ids like real ones."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if draft_vocab_size >= vocab_size:
        return np.zeros(vocab_size, np.int64), np.ones(vocab_size, bool)
    # Frequent tokens cluster at low ids: take half the draft vocabulary from the first quarter.
    dense = min(draft_vocab_size // 2, vocab_size // 4)
    low = np.sort(rng.choice(vocab_size // 4, size=dense, replace=False))
    rest = rng.choice(np.arange(vocab_size // 4, vocab_size), size=draft_vocab_size - dense, replace=False)
    ids = np.sort(np.concatenate([low, rest])).astype(np.int64)
    t2d = np.zeros(vocab_size, bool)
    t2d[ids] = True
    return ids - np.arange(draft_vocab_size, dtype=np.int64), t2d


def role_tensors(shape: DrafterShape = EXAMPLE, seed: int = 0, sparse: bool = False) -> dict[str, RawTensor]:
    """Every tensor of the drafter, keyed by canonical role. ``sparse``: weights are zero-filled holes
    (a real header and real d2t/t2d bytes, no disk or memory for the weights)."""
    import numpy as np


    rng = np.random.default_rng(seed)
    cfg = read_config(config(shape, SPECULATORS), SPECULATORS)
    out: dict[str, RawTensor] = {}
    for role, exp in expected_tensors(cfg).items():
        if role in ("d2t", "t2d"):
            continue
        if role == "embed_tokens.weight" and not shape.embed_tokens:
            continue
        assert None not in exp.shape  # the example's config determines every dimension
        dims = tuple(int(d) for d in exp.shape if d is not None)
        if sparse:
            out[role] = RawTensor(shape.dtype, dims)
            continue
        if len(dims) == 1 and role.endswith("norm.weight"):
            values = 1.0 + 0.05 * rng.standard_normal(dims)
        else:
            values = rng.standard_normal(dims) / math.sqrt(dims[-1])
        out[role] = from_numpy(values.astype(np.float32), shape.dtype)
    if shape.draft_vocab_size < shape.vocab_size:
        d2t, t2d = vocab_mapping(shape.vocab_size, shape.draft_vocab_size, seed)
        out["d2t"] = from_numpy(d2t)
        if shape.t2d:
            out["t2d"] = from_numpy(t2d)
    return out


def config(shape: DrafterShape = EXAMPLE, layout: str = SPECULATORS) -> dict[str, Any]:
    """config.json as the layout's producer writes it (speculators save_pretrained, or SpecForge's export)."""
    layer = {
        "model_type": shape.model_type,
        "hidden_size": shape.hidden_size,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "head_dim": shape.head_dim,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_layers,
        "vocab_size": shape.vocab_size,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "max_position_embeddings": shape.max_position_embeddings,
        "attention_bias": shape.attention_bias,
        "mlp_bias": shape.mlp_bias,
        "tie_word_embeddings": False,
    }
    aux = list(shape.aux_layer_ids)
    dtype = _CONFIG_DTYPE.get(shape.dtype, "bfloat16")
    if layout == SPECULATORS:
        return {
            "architectures": ["Eagle3DraftModel"],
            "speculators_model_type": "eagle3",
            "speculators_version": "0.9.0",
            "draft_vocab_size": shape.draft_vocab_size,
            "eagle_aux_hidden_state_layer_ids": aux,
            "norm_before_residual": shape.norm_before_residual,
            "norm_before_fc": shape.norm_before_fc,
            "fc_norm": shape.fc_norm,
            "norm_output": False,
            "target_hidden_size": shape.target_hidden_size,
            "tie_word_embeddings": False,
            "dtype": dtype,
            "speculators_config": {
                "algorithm": "eagle3",
                "default_proposal_method": "greedy",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                "verifier": {"name_or_path": "example-org/example-target", "architectures": ["LlamaForCausalLM"]},
            },
            "transformer_layer_config": {
                **layer,
                "rope_parameters": {"rope_theta": shape.rope_theta, "rope_type": "default"},
            },
        }
    flat = {
        # vLLM builds Qwen3 layers (q_norm/k_norm) only for this architecture; SGLang 0.5.6 has none.
        "architectures": ["Eagle3Qwen3ForCausalLM" if shape.model_type == "qwen3" else "LlamaForCausalLMEagle3"],
        # Both places: SGLang reads eagle_config's ids only, vLLM 0.33 (V2 runner) the top-level ones only.
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True},
        "eagle_aux_hidden_state_layer_ids": aux,
        **layer,
        "rope_theta": shape.rope_theta,
        "rope_scaling": None,
        "draft_vocab_size": shape.draft_vocab_size,
        "torch_dtype": dtype,
    }
    if shape.target_hidden_size is not None:
        flat["target_hidden_size"] = shape.target_hidden_size
    if shape.norm_before_residual:
        flat["norm_before_residual"] = True
    if shape.norm_before_fc:
        flat["norm_before_fc"] = True
    if shape.fc_norm:
        flat["fc_norm"] = True
    return flat


def target_config(shape: DrafterShape = EXAMPLE) -> dict[str, Any]:
    """A verifier config.json the drafter fits."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": shape.ht,
            "num_hidden_layers": shape.target_layers, "vocab_size": shape.vocab_size}


def drafter_files(shape: DrafterShape = EXAMPLE, layout: str = SPECULATORS, seed: int = 0,
                  first_layer: str = "midlayer", sparse: bool = False) -> tuple[dict[str, RawTensor], dict[str, Any]]:
    """(tensors by on-disk name, config.json) of a drafter in ``layout``."""
    tensors = {on_disk_name(role, layout, first_layer): t for role, t in role_tensors(shape, seed, sparse).items()}
    return tensors, config(shape, layout)


def write_checkpoint(path: Path, tensors: dict[str, RawTensor], config_json: dict[str, Any] | None,
                     shards: int = 1) -> Path:
    """Write config.json and the tensors (one file, or ``shards`` files plus an index)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if config_json is not None:
        (path / "config.json").write_text(json.dumps(config_json, indent=2) + "\n")
    names = list(tensors)
    if shards <= 1:
        write_safetensors(path / "model.safetensors", tensors)
        return path
    per = math.ceil(len(names) / shards)
    weight_map: dict[str, str] = {}
    for i in range(shards):
        part = names[i * per:(i + 1) * per]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(path / fname, {n: tensors[n] for n in part})
        weight_map.update({n: fname for n in part})
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return path


def write_random_checkpoint(path: Path, tensors: dict[str, RawTensor], config_json: dict[str, Any],
                            seed: int = 0, chunk: int = 1 << 24) -> Path:
    """Like :func:`write_checkpoint` for one file, but every sparse (``data=None``) floating tensor is filled with
    random values, streamed in chunks: a full-size drafter of any size in bounded memory (for benchmarks)."""
    import numpy as np

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config_json, indent=2) + "\n")
    rng = np.random.default_rng(seed)
    with open(path / "model.safetensors", "wb") as fh:
        fh.write(encode_header(tensors))
        for t in tensors.values():
            if t.data is not None:
                fh.write(t.data)
                continue
            scale = 1.0 if len(t.shape) == 1 else 1.0 / math.sqrt(t.shape[-1])
            left = math.prod(t.shape)
            while left:
                n = min(chunk, left)
                values = rng.standard_normal(n, dtype=np.float32) * np.float32(scale)
                if len(t.shape) == 1:
                    values += np.float32(1.0)
                data = from_numpy(values, t.dtype).data
                assert data is not None  # from_numpy always carries the bytes
                fh.write(data)
                left -= n
    return path


def write_drafter(path: Path, shape: DrafterShape = EXAMPLE, layout: str = SPECULATORS, seed: int = 0,
                  shards: int = 1) -> Path:
    tensors, cfg = drafter_files(shape, layout, seed)
    return write_checkpoint(path, tensors, cfg, shards)


EXAMPLE_DIRS = {SPECULATORS: "example-speculators", FLAT: "example-flat", "target": "example-target"}


def write_example(root: Path) -> dict[str, Path]:
    """The embedded example: the same tiny drafter in both layouts, and its target's config.json. The flat one is the
    speculators one flattened as eagle3-checks convert writes it: its speculators config kept beside it
    (``config_speculators.json``: who trained it), speculators_version kept, and the aux ids where each engine reads
    them counted its way (the top level vLLM's, id L the input of layer L; eagle_config SGLang's, id X the output of
    layer X, on this Llama target: one less)."""
    root = Path(root)
    tensors, flat = drafter_files(EXAMPLE, FLAT)
    ids = list(EXAMPLE.aux_layer_ids)
    flat = {**flat, "speculators_version": "0.9.0",
            "eagle_config": {**flat["eagle_config"], "eagle_aux_hidden_state_layer_ids": [i - 1 for i in ids]}}
    out = {
        SPECULATORS: write_drafter(root / EXAMPLE_DIRS[SPECULATORS], EXAMPLE, SPECULATORS),
        FLAT: write_checkpoint(root / EXAMPLE_DIRS[FLAT], tensors, flat),
    }
    (out[FLAT] / "config_speculators.json").write_text(json.dumps(config(EXAMPLE, SPECULATORS), indent=2) + "\n")
    target = root / EXAMPLE_DIRS["target"]
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_text(json.dumps(target_config(EXAMPLE), indent=2) + "\n")
    out["target"] = target
    return out


# ----- MLA drafters (drafter/families/mla.py) ----------------------------------------------------------------------

@dataclass(frozen=True)
class MlaDrafterShape(_Sizes):
    """Everything that sizes an MLA drafter (Eagle3DeepseekV2ForCausalLM, flat layout). The defaults are the tiny one
    the tests build: hidden 64, 4 heads, q_lora_rank 48, kv_lora_rank 32, nope 16, rope 8, v 16, DeepSeek yarn.
    Its ``aux_layer_ids`` are eagle_config's (SGLang's), counted the SGLang way."""

    q_lora_rank: int | None = 48  # None: stated null, q is one q_proj
    kv_lora_rank: int = 32
    qk_nope_head_dim: int = 16
    qk_rope_head_dim: int = 8
    v_head_dim: int = 16
    top_level_ids: tuple[int, ...] | None = (2, 4, 6)  # the same layers counted vLLM's way, where vLLM reads them
    rope_theta: float = 50000.0
    yarn_factor: float | None = 4.0  # None: plain RoPE
    original_max_position_embeddings: int = 1024
    rms_norm_eps: float = 1e-6
    model_type: str = "kimi_k2"


TINY_MLA = MlaDrafterShape()
# A Kimi-K2.5 MLA drafter's sizes (reference_specs/kimi-k2.5-mla-eagle3.json): for the header benchmark and tests.
KIMI_K25_MLA = MlaDrafterShape(hidden_size=7168, num_attention_heads=64, q_lora_rank=1536, kv_lora_rank=512,
                               qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, intermediate_size=18432,
                               vocab_size=163840, draft_vocab_size=163840, aux_layer_ids=(2, 30, 58),
                               top_level_ids=(3, 31, 59), target_layers=61, rope_theta=50000.0,
                               max_position_embeddings=262144, yarn_factor=64.0, original_max_position_embeddings=4096,
                               rms_norm_eps=1e-5)  # the published drafter's eps, not DeepseekV3Config's


def mla_config(shape: MlaDrafterShape = TINY_MLA) -> dict[str, Any]:
    """config.json of an MLA drafter as the Kimi-K2.x MLA drafters are published: flat, model_type kimi_k2, aux ids in
    eagle_config (and, for vLLM 0.33's V2 runner, at the top level counted its way)."""
    out: dict[str, Any] = {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"],
        "model_type": shape.model_type,
        "hidden_size": shape.hidden_size,
        "num_attention_heads": shape.num_attention_heads,
        "q_lora_rank": shape.q_lora_rank,
        "kv_lora_rank": shape.kv_lora_rank,
        "qk_nope_head_dim": shape.qk_nope_head_dim,
        "qk_rope_head_dim": shape.qk_rope_head_dim,
        "v_head_dim": shape.v_head_dim,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_layers,
        "vocab_size": shape.vocab_size,
        "draft_vocab_size": shape.draft_vocab_size,
        "rms_norm_eps": shape.rms_norm_eps,
        "hidden_act": "silu",
        "max_position_embeddings": shape.max_position_embeddings,
        "rope_theta": shape.rope_theta,
        "rope_scaling": None if shape.yarn_factor is None else {
            "type": "yarn", "factor": shape.yarn_factor,
            "original_max_position_embeddings": shape.original_max_position_embeddings,
            "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1},
        "tie_word_embeddings": False,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(shape.aux_layer_ids)},
        "torch_dtype": _CONFIG_DTYPE.get(shape.dtype, "bfloat16"),
    }
    if shape.top_level_ids is not None:
        out["eagle_aux_hidden_state_layer_ids"] = list(shape.top_level_ids)
    return out


def mla_drafter_files(shape: MlaDrafterShape = TINY_MLA, seed: int = 0,
                      sparse: bool = False) -> tuple[dict[str, RawTensor], dict[str, Any]]:
    """(tensors by on-disk name, config.json) of an MLA drafter: every tensor its config implies (first layer named
    ``midlayer.``), random (or, ``sparse``, zero-filled holes) but reproducible."""
    import numpy as np

    cfg_json = mla_config(shape)
    rng = np.random.default_rng(seed)
    out: dict[str, RawTensor] = {}
    for role, exp in expected_tensors(read_config(cfg_json, FLAT)).items():
        if role in ("d2t", "t2d"):
            continue
        assert None not in exp.shape  # the config determines every dimension
        dims = tuple(int(d) for d in exp.shape if d is not None)
        name = on_disk_name(role, FLAT)
        if sparse:
            out[name] = RawTensor(shape.dtype, dims)
        elif len(dims) == 1 and role.endswith("norm.weight"):
            out[name] = from_numpy((1.0 + 0.05 * rng.standard_normal(dims)).astype(np.float32), shape.dtype)
        else:
            out[name] = from_numpy((rng.standard_normal(dims) / math.sqrt(dims[-1])).astype(np.float32), shape.dtype)
    if shape.draft_vocab_size < shape.vocab_size:
        d2t, t2d = vocab_mapping(shape.vocab_size, shape.draft_vocab_size, seed)
        out["d2t"], out["t2d"] = from_numpy(d2t), from_numpy(t2d)
    return out, cfg_json


def mla_target_config(shape: MlaDrafterShape = TINY_MLA) -> dict[str, Any]:
    """A Kimi-K2.5-style verifier config.json the MLA drafter fits (a DeepSeek-V3 text model)."""
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": shape.hidden_size,
            "num_hidden_layers": shape.target_layers, "vocab_size": shape.vocab_size,
            "max_position_embeddings": shape.max_position_embeddings}


__all__ = ["DrafterShape", "EXAMPLE", "KIMI_K25_MLA", "MlaDrafterShape", "TINY_MLA", "mla_config",
           "mla_drafter_files", "mla_target_config", "EXAMPLE_DIRS", "KIMI_K2", "drafter_files", "role_tensors",
           "config",
           "target_config", "vocab_mapping", "write_checkpoint", "write_drafter", "write_example",
           "write_random_checkpoint"]
