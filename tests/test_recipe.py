"""eagle3-checks recipe: the launch that serves a drafter as trained, per engine release; golden output here, and
held to vLLM 0.33.0's and SGLang 0.5.23's own argument parsers by their recordings (tests/conformance/recipes/,
made with conformance/recipe_parsers.py under each engine's interpreter)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from eagle3_checks.cli import main
from eagle3_checks.defects import Draft
from eagle3_checks.drafter.example import EXAMPLE, target_config
from eagle3_checks.drafter.layout import FLAT, SPECULATORS
from helpers import SGLANG, VLLM, assert_golden

RECORDED = Path(__file__).parent / "conformance" / "recipes"


@pytest.fixture
def here(tmp_path, monkeypatch):
    """The example checkpoints in the working folder, named relatively (as the recordings were made)."""
    monkeypatch.chdir(tmp_path)
    Draft.example(FLAT).save(tmp_path / "example-flat")
    Draft.example(SPECULATORS).save(tmp_path / "example-speculators")
    lmd = Draft.example(FLAT)
    lmd.config["architectures"] = ["LlamaForCausalLM"]
    lmd.save(tmp_path / "example-lmdeploy")
    (tmp_path / "example-target").mkdir()
    (tmp_path / "example-target" / "config.json").write_text(json.dumps(target_config(EXAMPLE)))
    (tmp_path / "qwen3_5-target").mkdir()
    (tmp_path / "qwen3_5-target" / "config.json").write_text(json.dumps({**target_config(EXAMPLE),
                                                                         "model_type": "qwen3_5"}))
    return tmp_path


def recipe(capsys, *args):
    code = main(["recipe", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


CASES = [
    ("vllm", "example-flat", "example-target", ["--aux-convention", "vllm"]),
    ("sglang", "example-flat", "example-target", ["--aux-convention", "sglang"]),
    ("trtllm", "example-flat", "example-target", ["--aux-convention", "vllm"]),
    ("llamacpp", "example-flat", "example-target", ["--aux-convention", "vllm"]),
    ("lmdeploy", "example-lmdeploy", "example-target", ["--aux-convention", "vllm"]),
    ("mlx", "example-speculators", "qwen3_5-target", []),
    ("sglang", "example-speculators", "example-target", []),  # SGLang reads no speculators config: not ready
]


def test_recipes_are_golden(here, capsys):
    """Each engine's launch of the example, with its reasons (regenerate with pytest --update-goldens)."""
    text = []
    for engine, ckpt, target, extra in CASES:
        code, out, _ = recipe(capsys, ckpt, "--engine", engine, "--target-config", f"{target}/config.json", *extra)
        text.append(f"$ eagle3-checks recipe {ckpt} --engine {engine} {' '.join(extra)} (exit {code})\n{out}")
    got = "\n".join(text)
    assert_golden("recipes.txt", got)


@pytest.mark.parametrize("engine, ready", [("vllm", 0), ("sglang", 0), ("trtllm", 0), ("llamacpp", 0)])
def test_the_example_is_served_as_trained(here, capsys, engine, ready):
    convention = "sglang" if engine == "sglang" else "vllm"
    code, out, _ = recipe(capsys, "example-flat", "--engine", engine, "--target-config", "example-target",
                          "--aux-convention", convention, "--format", "json")
    doc = json.loads(out)  # passed: the text's "preconditions: all hold"
    assert code == ready and doc["passed"] is True and doc["findings"] == [], doc["findings"]


@pytest.mark.parametrize("name", ["vllm-0.33.0", f"vllm-{VLLM}", f"sglang-{SGLANG}"])
def test_recipes_are_what_the_engines_own_parsers_accepted(here, capsys, name):
    """The recording holds each recipe as the engine's parser read it (vLLM: make_arg_parser and
    AsyncEngineArgs.from_cli_args, then create_engine_config built the speculative config; SGLang:
    ServerArgs.add_cli_args, then from_cli_args ran its resolution hooks). Today's recipe for the same case must be
    the command recorded, and the parser must have read the method and paths the recipe meant."""
    recording = json.loads((RECORDED / f"{name}.json").read_text())
    assert recording["version"] == name.split("-")[1]
    for case in recording["cases"]:
        meant = case["recipe"]
        argv = shlex.split(meant["commands"][-1])
        drafter = meant["launch"].get("speculative_config", {}).get("model") or meant["launch"]["args"][
            "speculative-draft-model-path"]
        tp = str(meant["launch"].get("tensor_parallel_size") or meant["launch"]["args"]["tp-size"])
        convention = ["--aux-convention", "sglang" if recording["engine"] == "sglang" else "vllm"] \
            if drafter == "example-flat" else []
        code, out, _ = recipe(capsys, drafter, "--engine", meant["engine"], "--target-config", "example-target",
                              "--tp", tp, *convention, "--format", "json")
        assert json.loads(out)["commands"] == meant["commands"], "re-record: conformance/recipe_parsers.py"
        parsed = case["parsed"]
        if recording["engine"] == "vllm":
            assert argv[:3] == ["vllm", "serve", "example-target"]
            assert parsed["speculative_config"] == meant["launch"]["speculative_config"]
            if "built" in parsed:
                assert parsed["built"]["method"] == "eagle3" and parsed["built"]["num_speculative_tokens"] == 3
        else:
            assert parsed["speculative_algorithm"] == "EAGLE3" and parsed["speculative_draft_model_path"] == drafter
            assert parsed.get("resolved", parsed)["speculative_num_draft_tokens"] == 4


def test_trtllm_four_aux_layers_pass_with_the_recipes_launch_only(here, capsys, tmp_path):
    """The Done-when pair: a 4-aux drafter fails llama.cpp, and passes TensorRT-LLM with the recipe's
    eagle3_layers_to_capture (read back with --launch) and not without it."""
    Draft.example(FLAT, replace(EXAMPLE, aux_layer_ids=(1, 3, 5, 7))).save(tmp_path / "four")
    code, out, _ = recipe(capsys, "four", "--engine", "trtllm", "--target-config", "example-target",
                          "--aux-convention", "vllm", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["launch"]["speculative_config"]["eagle3_layers_to_capture"] == [0, 2, 4, 6]
    (tmp_path / "launch.json").write_text(out)
    base = ["check", "four", "--engine", "trtllm", "--target-config", "example-target", "--aux-convention", "vllm",
            "--level", "header", "--reference", "none"]
    assert main(base) == 1
    assert main([*base, "--launch", "trtllm=launch.json"]) == 0
    capsys.readouterr()
    assert main(["check", "four", "--engine", "llamacpp", "--level", "header", "--reference", "none"]) == 1
    assert recipe(capsys, "four", "--engine", "llamacpp", "--target-config", "example-target")[0] == 1


def test_trtllm_without_the_trained_layers_says_what_is_missing(here, capsys):
    code, out, _ = recipe(capsys, "example-flat", "--engine", "trtllm", "--target-config", "example-target",
                          "--format", "json")
    [f] = [f for f in json.loads(out)["findings"] if f["code"] == "recipe/launch-layers"]
    assert code == 1 and f["key"] == "eagle3_layers_to_capture"
    assert_golden("test_recipe/test_trtllm_without_the_trained_layers_says_what_is_missing.txt",
                  f"{f['message']}\nwhy: {f['why']}\nfix: {f['fix']}\n")


@pytest.mark.parametrize("engine, target_flag", [("vllm", "vllm serve {}"), ("trtllm", "trtllm-serve {}"),
                                                 ("llamacpp", "--target-model-dir {}")])
def test_a_target_config_in_the_current_folder_names_no_folder(here, capsys, engine, target_flag):
    """--target-config config.json (a file here) printed `vllm serve .`, `trtllm-serve .`, `--target-model-dir .`: the
    current folder is where the config was copied, not the target. The commands name the verifier the config names
    (_name_or_path), else the one the drafter names (speculators_config.verifier.name_or_path), else TARGET, which the
    text explains."""
    config = json.loads((here / "example-target" / "config.json").read_text())
    (here / "config.json").write_text(json.dumps(config))
    code, out, _ = recipe(capsys, "example-flat", "--engine", engine, "--target-config", "config.json",
                          "--aux-convention", "vllm")
    assert code == 0, out
    assert target_flag.format("TARGET") in out and target_flag.format(". ") not in out + " "
    said = out  # the recipe, with what TARGET stands for
    (here / "config.json").write_text(json.dumps({**config, "_name_or_path": "example-org/example-target"}))
    code, out, _ = recipe(capsys, "example-flat", "--engine", engine, "--target-config", "config.json",
                          "--aux-convention", "vllm")
    assert code == 0 and target_flag.format("example-org/example-target") in out
    said += f"\n{out}"
    # a _name_or_path of another machine's folder is not usable: the drafter's verifier (speculators) instead
    (here / "config.json").write_text(json.dumps({**config, "_name_or_path": "/models/llama"}))
    code, out, _ = recipe(capsys, "example-speculators", "--engine", engine, "--target-config", "./config.json",
                          "--format", "json")
    doc = json.loads(out)
    assert doc["target"] == "example-org/example-target"
    # the two recipes whole, then the third's note: what TARGET stands for, and where the target's name comes from
    assert_golden(f"test_recipe/test_a_target_config_in_the_current_folder_names_no_folder-{engine}.txt",
                  f"{said}\ntarget_note: {doc['target_note']}\n")
    assert any(target_flag.format("example-org/example-target") in c for c in doc["commands"])
    # a config in a folder of its own still names that folder, with no note
    code, out, _ = recipe(capsys, "example-flat", "--engine", engine, "--target-config", "example-target/config.json",
                          "--aux-convention", "vllm", "--format", "json")
    assert json.loads(out)["target"] == "example-target" and "target_note" not in json.loads(out)


def test_tensor_parallel_preconditions(here, capsys):
    """vLLM 0.33.0 config/model.py:1557-1564 (heads / tp), config/speculative.py:1862-1869 (a draft tp of 1 is
    allowed): the recipe launches the draft at tp 1; SGLang runs the draft at the target's tp and cannot."""
    code, out, _ = recipe(capsys, "example-flat", "--engine", "vllm", "--target-config", "example-target",
                          "--aux-convention", "vllm", "--tp", "3", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["launch"]["speculative_config"]["draft_tensor_parallel_size"] == 1
    code, out, _ = recipe(capsys, "example-flat", "--engine", "sglang", "--target-config", "example-target",
                          "--aux-convention", "sglang", "--tp", "3", "--format", "json")
    assert code == 1 and {f["code"] for f in json.loads(out)["findings"]} >= {"engine.serving/tp-heads",
                                                                              "engine.serving/tp-kv-heads"}
    capsys.readouterr()
    # the gate's engine.serving states the same facts, for the launch the user has in mind
    assert main(["check", "example-flat", "--engine", "vllm", "--level", "header", "--reference", "none", "--tp",
                 "3", "--aux-convention", "vllm", "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)["checkpoints"][0]
    assert "engine.serving/tp-heads" in {f.get("code") for c in report["checks"] for f in c["findings"]}
    assert main(["check", "example-flat", "--engine", "vllm", "--level", "header", "--reference", "none", "--tp",
                 "2", "--aux-convention", "vllm"]) == 0


def test_pipeline_parallelism_needs_the_drafters_own_embedding(here, capsys, tmp_path):
    """vLLM 0.33.0 v1/worker/gpu/spec_decode/eagle/utils.py:59-70: the target's embedding is not on the drafter's
    pipeline stage."""
    Draft.example(FLAT, replace(EXAMPLE, embed_tokens=False)).save(tmp_path / "no-embed")
    code, out, _ = recipe(capsys, "no-embed", "--engine", "vllm", "--target-config", "example-target",
                          "--aux-convention", "vllm", "--pp", "2", "--format", "json")
    assert code == 1 and "engine.serving/pp-embedding" in {f["code"] for f in json.loads(out)["findings"]}
    assert recipe(capsys, "example-flat", "--engine", "vllm", "--target-config", "example-target",
                  "--aux-convention", "vllm", "--pp", "2")[0] == 0


@pytest.mark.parametrize("case, args", [
    ("engine-all", ["--engine", "all"]),  # a recipe is for one engine release
    ("engine-speculators", ["--engine", "speculators"]),  # speculators is not launched
    ("no-tokens", ["--engine", "vllm", "--num-speculative-tokens", "0"]),  # at least 1
    ("tp-two", ["--engine", "vllm", "--tp", "two"]),  # --tp 'two': a positive number
])
def test_usage_errors(here, capsys, case, args):
    code, _, err = recipe(capsys, "example-flat", *args)
    assert code == 2, err
    assert_golden(f"test_recipe/test_usage_errors-{case}.txt", err, {"TMP": here})


def test_every_launch_precondition_is_a_declared_engine_serving_code():
    """engine.serving makes its precondition findings with the codes engines.launch gives them."""
    from eagle3_checks.engines import launch
    from eagle3_checks.registry import REGISTRY

    declared = dict(REGISTRY["engine.serving"].codes)
    source = Path(launch.__file__).read_text()
    made = set(re.findall(r'Problem\("([a-z-]+)"', source)) - {"launch-layers"}
    assert made == {"tp-heads", "tp-kv-heads", "pp-embedding", "local-verifier"} and made <= set(declared)
