"""One defect at a time, injected into an otherwise clean tiny drafter of each layout: the gate fails and
names the right check with the right message. Clean drafters of every shape pass."""

from __future__ import annotations

import json

import pytest

from helpers import (
    CLEAN,
    LAYOUTS,
    assert_clean,
    assert_fails,
    aux_above_target,
    d2t_absolute,
    d2t_absolute_no_t2d,
    d2t_arange,
    d2t_duplicated,
    d2t_float,
    d2t_missing,
    d2t_out_of_range,
    d2t_unsorted,
    draft_vocab_off,
    fc_two_aux,
    fp32_weights,
    head_dim_dropped,
    lm_head_full_vocab,
    missing_tensor,
    model_prefix,
    no_config,
    run,
    shard_escapes,
    shard_missing,
    t2d_inconsistent,
    transposed_q,
    truncated,
    vocab_off,
    write_defect,
    wrong_architectures,
)

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


def test_every_finding_of_the_defects_has_its_checks_declared_code(drafter, target_path):
    """The gate over every defect above (both layouts, header and scan levels, every engine): each finding's code is
    CHECK_ID/SLUG of its own check, declared there (tests/test_codes.py holds every site to it statically)."""
    seen = set()
    for layout in LAYOUTS:
        for _, before, after, shards, options, _, _ in DEFECTS:
            path = write_defect(drafter(layout), before, after, shards)
            result = run(path, level="scan", engine="all", target_config=str(target_path),
                         reference=options.get("reference", "auto"))
            for r in result.results:
                for f in r.findings:
                    check_id, _, slug = (f.code or "").partition("/")
                    assert check_id == r.check.id and f.code in r.check.meanings, (r.label, f.code, f.message)
                    seen.add(f.code)
    assert {"vocab.d2t/arange", "vocab.t2d/absolute-ids", "config.head-dim/missing", "engine.loads/narrowed",
            "files/truncated", "keys/missing-tensor"} <= seen


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
