"""vLLM 0.34.0, a release record of the 0.33.0 reading: each difference its wheel shows (vllm/ in the 0.34.0 wheel
against 0.33.0's) with a drafter that passes and one that fails, and the release the bare name means. The
conformance recording (tests/conformance/recorded/vllm-0.34.0/) holds the reading to what the release's own loader
did; its argument parser's recording (tests/conformance/recipes/vllm-0.34.0.json) holds the launch keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3_checks import engines
from eagle3_checks.defects import Draft
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.layout import FLAT, SPECULATORS
from eagle3_checks.engines.vllm_0_33 import SPECULATIVE_FIELDS_0_33, SPECULATIVE_FIELDS_0_34
from helpers import codes, goldens, run

golden = goldens("test_vllm_0_34")  # tests/golden/test_vllm_0_34/TEST.txt

OLD, NEW = "vllm@0.33.0", "vllm@0.34.0"
RECIPES = Path(__file__).parent / "conformance" / "recipes"


def peagle(tmp_path: Path, mask_token_id: bool = True) -> Path:
    """A P-EAGLE drafter as speculators 0.9.0 saves one (models/peagle/config.py, core.py:44-53)."""
    d = Draft.example(SPECULATORS)
    d.config.update(speculators_model_type="peagle", architectures=["PEagleSpeculator"])
    if mask_token_id:
        d.config["mask_token_id"] = 511
    d.add("mask_hidden", (1, 1, 3 * d.shape.ht))
    return d.save(tmp_path / f"peagle-{mask_token_id}")


def loads(result, spec: str) -> str:
    return next(r.status for r in result.results if r.check.id == "engine.loads" and r.engine == spec)


def launch_file(tmp_path: Path, **spec) -> str:
    path = tmp_path / "launch.json"
    path.write_text(json.dumps({"speculative_config": {"method": "eagle3", "model": "D",
                                                        "num_speculative_tokens": 3, **spec}}))
    return f"vllm={path}"


def test_the_bare_name_means_the_newest_release():
    newest = f"vllm@{engines.releases('vllm')[-1][0].version}"  # the last release of the records, by version
    assert engines.resolve(None).specs[0] == newest and engines.resolve("vllm").specs == (newest,)
    judged = engines.judge("vllm", "0.34.0")
    assert judged.warning is None and judged.release == "0.34.0"
    assert engines.profile(OLD).release("0.34.0").recorded == "2026-12-06"
    golden("test_the_bare_name_means_the_newest_release", judged.note + "\n")  # "recorded 2026-12-06"
    assert engines.judge("vllm", "0.35.0").warning  # newer than every recorded release: judged as 0.34.0, warned


# ----- P-EAGLE: 0.33.0 builds it (update_peagle, algos.py:53-87), 0.34.0 refuses the config (algos.py:53-55) -------

def test_a_peagle_drafter_loads_on_0_33_with_parallel_drafting_and_is_refused_by_0_34(tmp_path):
    path = peagle(tmp_path)
    parallel = launch_file(tmp_path, parallel_drafting=True)
    both = run(path, level="header", engine=f"{OLD},{NEW}", launch=[parallel])
    assert loads(both, OLD) == "passed" and loads(both, NEW) == "failed"
    assert "engine.loads/refused" in codes(both, engine=NEW) and "engine.loads/refused" not in codes(both, engine=OLD)
    refused = next(f for r in both.results if r.engine == NEW and r.check.id == "engine.loads" for f in r.findings)
    assert refused.code == "engine.loads/refused"
    # vLLM's ValueError: "P-EAGLE (parallel drafting EAGLE-3) is not supported"
    golden("test_a_peagle_drafter_loads_on_0_33_with_parallel_drafting_and_is_refused_by_0_34",
           f"{refused.code}: {refused.message}\n")
    # the P-EAGLE kind is a speculators drafter: its config and its mask_hidden are what they should be
    assert not {"config.fields/speculators-model-type", "keys/unknown-tensor", "keys/unexpected-tensor"} & codes(both)


def test_on_0_33_a_peagle_drafter_launched_without_parallel_drafting_skips_its_mask_hidden(tmp_path):
    result = run(peagle(tmp_path), level="header", engine=OLD)
    assert loads(result, OLD) == "failed" and "engine.loads/ignored-unknown" in codes(result, engine=OLD)
    r = engines.read(open_checkpoint(peagle(tmp_path / "b")), OLD)
    assert set(r.ignored) == {"mask_hidden", "t2d"} and r.kind == "peagle" and r.norm_before_residual is False


def test_a_peagle_config_without_mask_token_id_is_refused_by_0_33(tmp_path):
    good = engines.read(open_checkpoint(peagle(tmp_path)), OLD)
    bad = engines.read(open_checkpoint(peagle(tmp_path, mask_token_id=False)), OLD)
    assert not good.refusals and bad.refused_at.get(bad.refusals[0]) == "mask_token_id"


def test_the_recipe_launches_peagle_with_parallel_drafting_where_the_release_builds_it(tmp_path, capsys):
    from eagle3_checks.cli import main

    path = peagle(tmp_path)
    target = tmp_path / "target.json"
    from eagle3_checks.drafter.example import EXAMPLE, target_config

    target.write_text(json.dumps(target_config(EXAMPLE)))
    assert main(["recipe", str(path), "--engine", OLD, "--target-config", str(target), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["launch"]["speculative_config"]["parallel_drafting"] is True
    assert main(["recipe", str(path), "--engine", NEW, "--target-config", str(target), "--format", "json"]) == 1


def test_an_eagle3_drafter_loads_on_both(tmp_path):
    result = run(Draft.example(SPECULATORS).save(tmp_path / "e"), level="header", engine=f"{OLD},{NEW}")
    assert loads(result, OLD) == loads(result, NEW) == "passed"


# ----- no V1 runner: the advice that names it names the releases that have one -----------------------------------

def test_the_v1_runner_advice_names_the_releases_it_applies_to(tmp_path):
    d = Draft.example(FLAT)
    d.config.pop("eagle_aux_hidden_state_layer_ids")  # ids in eagle_config only: neither runner V2 reads them
    path = d.save(tmp_path / "nested-only")
    old, new = (engines.read(open_checkpoint(path), s) for s in (OLD, NEW))
    assert old.aux_layer_ids is None and new.aux_layer_ids is None
    # 0.33.0: "vLLM 0.28.0 to 0.33.0 only" have the V1 runner (VLLM_USE_V2_MODEL_RUNNER=0); 0.34.0: "0.34.0 has Model
    # Runner V2 only", and no VLLM_USE_V2 advice
    golden("test_the_v1_runner_advice_names_the_releases_it_applies_to",
           f"{OLD}: {old.sources['aux_layer_ids']}\n{NEW}: {new.sources['aux_layer_ids']}\n")
    top = engines.read(open_checkpoint(Draft.example(FLAT).save(tmp_path / "top")), NEW)
    assert top.aux_layer_ids == [1, 3, 5]
    assert top.sources["aux_layer_ids"] == "config.json: eagle_aux_hidden_state_layer_ids"


# ----- the speculative config's keys, recorded against 0.34.0's own parser ----------------------------------------

def test_the_modelled_keys_are_the_ones_0_34s_parser_has():
    recording = json.loads((RECIPES / "vllm-0.34.0.json").read_text())["speculative_config"]
    assert set(recording["fields"]) == SPECULATIVE_FIELDS_0_34
    removed = SPECULATIVE_FIELDS_0_33 - SPECULATIVE_FIELDS_0_34
    assert removed == {"disable_padded_drafter_batch", "use_heterogeneous_vocab"}
    for key in ("disable_padded_drafter_batch", "use_heterogeneous_vocab"):
        assert "Unexpected keyword argument" in recording["probes"][key]
    assert "parallel_drafting is only supported by the dflash and dspark methods" in recording["probes"][
        "parallel_drafting"]


@pytest.mark.parametrize("key", ["disable_padded_drafter_batch", "use_heterogeneous_vocab"])
def test_a_launch_with_a_removed_key_fails_0_34_and_not_0_33(tmp_path, key):
    path = Draft.example(FLAT).save(tmp_path / "d")
    result = run(path, level="header", engine=f"{OLD},{NEW}", launch=[launch_file(tmp_path, **{key: True})],
                 aux_convention="vllm")
    assert loads(result, OLD) == "passed" and loads(result, NEW) == "failed"
    clean = run(path, level="header", engine=NEW, launch=[launch_file(tmp_path)], aux_convention="vllm")
    assert loads(clean, NEW) == "passed"


def test_parallel_drafting_with_eagle3_is_refused_by_0_34_and_needs_mask_hidden_on_0_33(tmp_path):
    """0.34.0: parallel_drafting with eagle3 fails validation (config/speculative.py:1688-1693); 0.33.0 builds the
    mask_hidden buffer and raises without the tensor (llama_eagle3.py:450-455), and loads a P-EAGLE drafter."""
    path = Draft.example(FLAT).save(tmp_path / "d")
    parallel = {"speculative_config": {"parallel_drafting": True}}
    new, old = (engines.read(open_checkpoint(path), spec, launch=parallel) for spec in (NEW, OLD))
    assert [new.refused_at[x] for x in new.refusals] == ["launch: speculative_config.parallel_drafting"]
    assert [old.refused_at[x] for x in old.refusals] == ["mask_hidden"]
    p = peagle(tmp_path)
    assert not engines.read(open_checkpoint(p), OLD, launch=parallel).refusals
    assert engines.read(open_checkpoint(p), NEW, launch=parallel).refusals


def test_mask_hidden_in_an_eagle3_drafter_is_skipped_by_both_and_named_by_keys(tmp_path):
    d = Draft.example(FLAT)
    d.add("mask_hidden", (1, 3 * d.shape.ht))
    bad = run(d.save(tmp_path / "m"), level="header", engine=f"{OLD},{NEW}")
    assert "keys/unexpected-tensor" in codes(bad)
    # why each skips it: 0.33.0 "unless the launch enables parallel drafting", 0.34.0 "not supported for EAGLE-3"
    golden("test_mask_hidden_in_an_eagle3_drafter_is_skipped_by_both_and_named_by_keys",
           "".join(f"{spec}: {engines.read(open_checkpoint(tmp_path / 'm'), spec).ignored['mask_hidden']}\n"
                   for spec in (OLD, NEW)))
    good = run(Draft.example(FLAT).save(tmp_path / "g"), level="header", engine=f"{OLD},{NEW}")
    assert "keys/unexpected-tensor" not in codes(good)
