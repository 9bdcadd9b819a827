"""One defect at a time, injected into an otherwise clean tiny drafter of each layout: the gate fails and
names the right check with the right message. Clean drafters of every shape pass."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conftest import LAYOUTS, Drafter, assert_clean, assert_fails, run
from eagle3_checks.drafter.example import EXAMPLE
from eagle3_checks.storage.safetensors import RawTensor, from_numpy


def ints(t: RawTensor) -> np.ndarray:
    return np.frombuffer(t.data, dtype="<i8").copy()


def set_d2t(d: Drafter, values: np.ndarray) -> None:
    d.tensors["d2t"] = from_numpy(values.astype(np.int64))


def missing_tensor(d):
    del d.tensors[d.name("layers.0.mlp.up_proj.weight")]


def model_prefix(d):
    d.tensors = {f"model.{k}": v for k, v in d.tensors.items()}


def transposed_q(d):
    name = d.name("layers.0.self_attn.q_proj.weight")
    t = d.tensors[name]
    d.tensors[name] = RawTensor(t.dtype, t.shape[::-1], t.data)


def fc_two_aux(d):
    t = d.tensors["fc.weight"]
    d.tensors["fc.weight"] = RawTensor(t.dtype, (t.shape[0], 2 * EXAMPLE.ht), b"\0" * (t.shape[0] * 2 * EXAMPLE.ht * 2))


def lm_head_full_vocab(d):
    d.tensors["lm_head.weight"] = from_numpy(np.ones((EXAMPLE.vocab_size, EXAMPLE.hidden_size), np.float32), "BF16")


def d2t_absolute(d):
    set_d2t(d, ints(d.tensors["d2t"]) + np.arange(EXAMPLE.draft_vocab_size))


def d2t_absolute_no_t2d(d):
    d2t_absolute(d)
    del d.tensors["t2d"]


def d2t_out_of_range(d):
    v = ints(d.tensors["d2t"])
    v[-1] += EXAMPLE.vocab_size
    set_d2t(d, v)


def d2t_unsorted(d):
    v = ints(d.tensors["d2t"]) + np.arange(EXAMPLE.draft_vocab_size)
    v[[10, 11]] = v[[11, 10]]
    set_d2t(d, v - np.arange(EXAMPLE.draft_vocab_size))


def d2t_duplicated(d):
    v = ints(d.tensors["d2t"]) + np.arange(EXAMPLE.draft_vocab_size)
    v[21] = v[20]
    set_d2t(d, v - np.arange(EXAMPLE.draft_vocab_size))


def d2t_float(d):
    d.tensors["d2t"] = from_numpy(ints(d.tensors["d2t"]).astype(np.float32))


def d2t_arange(d):
    set_d2t(d, np.arange(EXAMPLE.draft_vocab_size))


def d2t_missing(d):
    del d.tensors["d2t"]


def t2d_inconsistent(d):
    mask = np.frombuffer(d.tensors["t2d"].data, dtype=bool).copy()
    on, off = np.flatnonzero(mask)[50], np.flatnonzero(~mask)[-1]
    mask[on], mask[off] = False, True
    d.tensors["t2d"] = from_numpy(mask)


def fp32_weights(d):
    d.tensors = {k: (from_numpy(np.frombuffer(t.data, "<u2").astype(np.uint32).__lshift__(16).view(np.float32)
                                .reshape(t.shape)) if t.dtype == "BF16" else t) for k, t in d.tensors.items()}
    d.config["dtype" if d.layout == "speculators" else "torch_dtype"] = "float32"


def head_dim_dropped(d):
    del d.layer_field()["head_dim"]


def wrong_architectures(d):
    # (flat: not LlamaForCausalLM, which vLLM serves as Eagle3LlamaForCausalLM; LlamaModel no engine serves)
    d.config["architectures"] = ["LlamaModel"] if d.layout == "flat" else ["LlamaForCausalLMEagle3"]


def draft_vocab_off(d):
    d.config["draft_vocab_size"] = EXAMPLE.draft_vocab_size + 8


def vocab_off(d):
    d.layer_field()["vocab_size"] = EXAMPLE.vocab_size // 2


def aux_above_target(d):
    ids = [1, 3, EXAMPLE.target_layers + 4]
    if d.layout == "speculators":
        d.config["eagle_aux_hidden_state_layer_ids"] = ids
    else:
        d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids


def shard_missing(path: Path):
    shard = sorted(path.glob("model-*.safetensors"))[1]
    shard.unlink()


def shard_escapes(path: Path):
    index = json.loads((path / "model.safetensors.index.json").read_text())
    name = next(iter(index["weight_map"]))
    index["weight_map"][name] = "../elsewhere/model.safetensors"
    (path / "model.safetensors.index.json").write_text(json.dumps(index))


def truncated(path: Path):
    f = path / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-1000])


def no_config(path: Path):
    (path / "config.json").unlink()


# (defect, before write, after write, shards, gate options, check id, message fragments)
DEFECTS = [
    ("missing tensor", missing_tensor, None, 1, {}, "keys", ("mlp.up_proj.weight is missing",)),
    ("model. prefix", model_prefix, None, 1, {}, "keys", ("16 tensors carry a `model.` prefix", "model.d2t")),
    ("transposed q_proj", transposed_q, None, 1, {}, "shapes", ("q_proj.weight", "transposed")),
    ("fc for 2 aux layers", fc_two_aux, None, 1, {}, "config.aux-layers", ("2 aux states", "3 x 64")),
    ("fc for 2 aux layers (shape)", fc_two_aux, None, 1, {}, "shapes", ("fc.weight", "fc takes 2 aux hidden states")),
    ("lm_head full vocab", lm_head_full_vocab, None, 1, {}, "shapes", ("lm_head.weight", "full target vocabulary")),
    ("d2t absolute", d2t_absolute, None, 1, {}, "vocab.t2d", ("holds absolute target ids",)),
    ("d2t absolute, no t2d", d2t_absolute_no_t2d, None, 1, {}, "vocab.d2t", ("outside the target vocabulary",
                                                                               "looks like absolute target ids")),
    ("d2t arange", d2t_arange, None, 1, {}, "vocab.d2t", ("equals arange(128)", "2i")),
    ("d2t out of range", d2t_out_of_range, None, 1, {}, "vocab.d2t",
     ("1 of 128 draft ids map outside", "draft id 127")),
    ("d2t unsorted", d2t_unsorted, None, 1, {}, "vocab.d2t", ("not increasing", "draft id 11")),
    ("d2t duplicated", d2t_duplicated, None, 1, {}, "vocab.d2t", ("draft ids 20 and 21",)),
    ("d2t float", d2t_float, None, 1, {}, "dtypes", ("d2t: dtype F32, expected I64",)),
    ("d2t missing", d2t_missing, None, 1, {}, "keys", ("d2t is missing", "draft_vocab_size 128 < vocab_size 512")),
    ("t2d inconsistent", t2d_inconsistent, None, 1, {}, "vocab.t2d", ("disagree on",)),
    ("fp32 vs bf16 reference", fp32_weights, None, 1, {"reference": "tiny-example"}, "reference.diff",
     ("14 tensor(s) are F32, tiny-example has BF16",)),
    ("head_dim dropped", head_dim_dropped, None, 1, {}, "config.head-dim",
     ("head_dim is not stated", "engines would use 16", "4 heads of 24")),
    ("head_dim dropped (shape)", head_dim_dropped, None, 1, {}, "shapes", ("set head_dim: 24",)),
    ("wrong architectures", wrong_architectures, None, 1, {}, "config.architectures", ("architectures ['",
                                                                                         "class")),
    ("draft_vocab_size off", draft_vocab_off, None, 1, {}, "config.vocab-sizes", ("draft_vocab_size 136", "128 rows")),
    ("vocab_size off", vocab_off, None, 1, {}, "config.vocab-sizes", ("vocab_size 256", "covers 512 tokens")),
    ("aux id above target", aux_above_target, None, 1, {"target": True}, "target.aux-layers",
     ("aux-layer ids [12] exceed the target's 8 layers",)),
    ("shard missing", None, shard_missing, 3, {}, "files", ("model-00002-of-00003.safetensors", "does not exist")),
    ("shard escapes folder", None, shard_escapes, 3, {}, "files", ("outside the checkpoint directory",)),
    ("truncated file", None, truncated, 1, {}, "files", ("truncated",)),
    ("no config", None, no_config, 1, {}, "files", ("config.json", "is missing")),
]


def write_defect(d: Drafter, before, after, shards: int) -> Path:
    """Write drafter ``d`` with one defect: ``before`` edits it, ``after`` edits the written files."""
    if before:
        before(d)
    path = d.write(shards)
    if after:
        after(path)
    return path


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("defect", DEFECTS, ids=[d[0] for d in DEFECTS])
def test_defect_fails_the_right_check(drafter, target_path, layout, defect):
    _, before, after, shards, options, check_id, fragments = defect
    path = write_defect(drafter(layout), before, after, shards)
    options = dict(options)
    if options.pop("target", False):
        options["target_config"] = str(target_path)
    result = run(path, **options)
    assert result.exit_code == 1
    assert_fails(result, check_id, *fragments)


CLEAN = [
    ("example", EXAMPLE, 1),
    ("sharded", EXAMPLE, 3),
    ("no embed_tokens", replace(EXAMPLE, embed_tokens=False), 1),
    ("no t2d", replace(EXAMPLE, t2d=False), 1),
    ("full vocabulary", replace(EXAMPLE, draft_vocab_size=EXAMPLE.vocab_size), 1),
    ("two layers", replace(EXAMPLE, num_layers=2), 1),
    ("biases", replace(EXAMPLE, attention_bias=True, mlp_bias=True), 1),
    ("norm_before_fc", replace(EXAMPLE, norm_before_fc=True), 1),
    ("fc_norm, 4 aux layers, wider target", replace(EXAMPLE, fc_norm=True, aux_layer_ids=(1, 2, 4, 6),
                                                  target_hidden_size=96), 2),
    ("qwen3 layer", replace(EXAMPLE, model_type="qwen3"), 1),
    ("fp16", replace(EXAMPLE, dtype="F16"), 1),
    ("fp32", replace(EXAMPLE, dtype="F32"), 1),
]


# A speculators config cannot tell vLLM 0.33 about 4 aux states of a wider target (fc is sized from eagle_config
# only): that drafter is clean in the flat layout only (see test_forward.test_wider_target_four_aux_layers).
CLEAN_CASES = [pytest.param(layout, case, id=f"{case[0]}-{layout}") for case in CLEAN for layout in LAYOUTS
               if not (layout == "speculators" and case[0].startswith("fc_norm, 4 aux"))]


@pytest.mark.parametrize("layout, case", CLEAN_CASES)
def test_clean_drafters_pass(drafter, tmp_path, layout, case):
    _, shape, shards = case
    d = drafter(layout, shape)
    if shape.target_hidden_size:
        d.config["num_aux_hidden_states"] = len(shape.aux_layer_ids)  # what vLLM sizes a flat drafter's fc from
    path = d.write(shards)
    target = tmp_path / f"target-{layout}.json"
    target.write_text(json.dumps({"num_hidden_layers": shape.target_layers, "hidden_size": shape.ht,
                                  "vocab_size": shape.vocab_size}))
    result = run(path, target_config=str(target), level="header")
    assert_clean(result)
    skipped = {r.check.id for r in result.results if r.status == "skipped"}
    assert skipped <= {"reference.diff", "vocab.d2t", "vocab.t2d"}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_example_passes_its_shipped_spec_under_auto(drafter, layout):
    result = run(drafter(layout).write(), reference="auto", strict=True)
    assert result.reference_name == "tiny-example"
    assert result.result("reference.diff").status == "passed"
    assert result.exit_code == 0
