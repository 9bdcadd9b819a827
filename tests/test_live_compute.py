"""The installed engine's own compute in the gate (``--engine NAME@installed`` at the forward and acceptance levels):
what the gate does with the logits an engine's recorder computes. No engine is installed here: a stand-in
interpreter answers as vLLM 0.33.0 (its loading recording of the flat example, as tests/test_live.py replays it)
and computes each drafter the way the gate's modelled reading does, or miswired on purpose, or refuses to judge, and
writes what the real recorder writes (``recorders/_compute.py``: the compact record and every logit). That tests the
gate's plumbing and verdicts; the engines' own compute is held to the modelled readings by
tests/test_engine_compute.py (committed recordings) and conformance/test_live.py (a real installed engine).
"""

from __future__ import annotations

import atexit
import json
import shutil
import sys
import tempfile
from functools import partial
from pathlib import Path

import pytest

pytest.importorskip("torch")

import helpers
from eagle3_checks.cli import main
from eagle3_checks.defects import REPLAYED
from helpers import assert_golden, run, steady

_STAND_INS: dict[str, Path] = {}

# The stand-in recorder. MODE: "modelled" (the gate's reading, what a faithful engine computes), "miswired" (the
# normed state fed forward), "residual" (norm_before_residual flipped), "cannot" (the stand-in cannot judge).
SCRIPT = """#!{python}
import json, sys
from pathlib import Path
MODE = {mode!r}
RECORD = json.loads(Path({replayed!r}).read_text())
if sys.argv[1:2] == ["-c"]:
    print(RECORD["version"])
    sys.exit(0)
args = sys.argv[2:]
computed = args[args.index("--compute") + 1] if "--compute" in args else None
manifest, out = Path(args[0]), Path(args[1])
out.mkdir(parents=True)
root = manifest.parent
records = {{}}
for entry in json.loads(manifest.read_text()):
    (out / f"{{entry['name']}}.json").write_text(json.dumps({{**RECORD, "checkpoint": entry["name"]}}))
    if computed is None:
        continue
    from safetensors.torch import load_file, save_file
    from eagle3_checks import engines
    from eagle3_checks.drafter.checkpoint import open_checkpoint
    from eagle3_checks.gate import load_target
    from eagle3_checks.live import compute
    from eagle3_checks.numerics.draft_steps import Weights
    rc = compute.recorder_module()
    rec = {{"checkpoint": entry["name"], "source_hash": entry["source_hash"]}}
    if MODE == "cannot":
        rec["cannot_judge"] = "the attention stand-in does not compute a sliding window"
    else:
        ckpt = open_checkpoint(Path(entry["dir"]))
        reading = engines.read(ckpt, "vllm@0.33.0", load_target(str(root / entry["target_config"])))
        if MODE == "miswired":
            reading.feedback = "normed" if reading.feedback == "prenorm" else "prenorm"
        if MODE == "residual":
            reading.norm_before_residual = not reading.norm_before_residual
        for i, (path, full) in enumerate(zip(entry["compute_inputs"], entry["compute_full"])):
            inputs = load_file(str(root / path))
            got = compute.modelled(reading, Weights(ckpt, "cpu"), inputs, entry["compute_steps"])
            later = inputs.get("later_tokens")
            tokens = [later[k] if later is not None and k < later.shape[0] else lg.argmax(-1)
                      for k, lg in enumerate(got.logits)]
            if i == 0:
                rec["steps"] = rc.summary(got.logits, got.fed, tokens)
            save_file(rc.full(got.logits, got.fed, tokens), str(root / full))
    records[entry["name"]] = rec
(out / "index.json").write_text(json.dumps({{"run_seconds": 0.0}}))
if computed is not None:
    Path(computed).write_text(json.dumps({{"checkpoints": records}}))
"""


def stand_in(mode: str) -> Path:
    """An interpreter path that answers as vLLM 0.33.0 and computes in ``mode`` (see SCRIPT)."""
    if mode not in _STAND_INS:
        folder = Path(tempfile.mkdtemp(prefix="eagle3-compute-stand-in-"))
        atexit.register(shutil.rmtree, folder, True)  # the process's, removed when it ends
        script = folder / "python"
        script.write_text(SCRIPT.format(python=sys.executable, mode=mode, replayed=str(REPLAYED)))
        script.chmod(0o755)
        _STAND_INS[mode] = script
    return _STAND_INS[mode]


def forward_run(drafter, target_path, mode: str):
    return run(drafter("flat", trained=True).write(), engine="vllm@installed", engine_python=str(stand_in(mode)),
               target_config=str(target_path), level="forward")


codes = partial(helpers.codes, engine="vllm@0.33.0")


def messages(result, check: str) -> str:
    """The messages of one check's findings, one a line, :func:`steady` (a golden file's text)."""
    return steady("".join(f"{f.code}: {f.message}\n" for f in result.result(check, "vllm@0.33.0").findings))


def test_the_forward_level_judges_the_engines_own_logits(drafter, target_path):
    result = forward_run(drafter, target_path, "modelled")
    assert codes(result, "engine.live") == {"engine.live/agrees", "engine.live/computes-as-modelled"}
    assert codes(result, "forward.equivalence") == {"forward.equivalence/agrees"}
    # computed by vllm 0.33.0's own code; the modelled vllm 0.33.0 reading gives the same logits
    assert_golden("test_live_compute/test_the_forward_level_judges_the_engines_own_logits.txt",
                  messages(result, "forward.equivalence"))
    # what the engine's own code computed is recorded, not modelled (registry.RECORDED)
    assert {f.basis for f in result.result("forward.equivalence", "vllm@0.33.0").findings} == {"recorded"}


def test_an_engine_computing_otherwise_is_reported_and_its_logits_are_judged(drafter, target_path):
    """The engine feeds the normed state forward where the modelled reading feeds the pre-norm one: engine.live
    says the model is wrong, and forward.equivalence judges what the engine computes (it differs from training)."""
    result = forward_run(drafter, target_path, "miswired")
    assert "engine.live/computes-otherwise" in codes(result, "engine.live")
    assert codes(result, "forward.equivalence") == {"forward.equivalence/differs"}
    # computed by vllm 0.33.0's own code; the modelled reading differs from them
    assert_golden("test_live_compute/test_an_engine_computing_otherwise_is_reported_and_its_logits_are_judged.txt",
                  messages(result, "forward.equivalence"))


def test_a_drafter_the_stand_in_cannot_compute_is_judged_by_the_modelled_reading(drafter, target_path):
    result = forward_run(drafter, target_path, "cannot")
    assert codes(result, "engine.live") == {"engine.live/agrees", "engine.live/compute-unjudged"}
    assert codes(result, "forward.equivalence") == {"forward.equivalence/agrees"}
    # the modelled reading: vllm 0.33.0's own code did not compute it, and why
    assert_golden("test_live_compute/test_a_drafter_the_stand_in_cannot_compute_is_judged_by_the_modelled_reading.txt",
                  messages(result, "forward.equivalence"))


def test_below_the_forward_level_the_engine_is_not_asked_to_compute(drafter, target_path):
    result = run(drafter("flat", trained=True).write(), engine="vllm@installed",
                 engine_python=str(stand_in("miswired")), target_config=str(target_path), level="header")
    assert codes(result, "engine.live") == {"engine.live/agrees"}


def test_forward_writes_the_engines_own_logits(drafter, target_path, tmp_path, capsys):
    """``forward --engine vllm@installed``: the logits written are the engine's own (here the stand-in's), the note
    says who computed them and how the modelled reading compares; a miswired engine's differ, and the note says so."""
    from eagle3_checks.storage.safetensors import load_array, read_header
    from helpers import write_inputs

    path = drafter("flat", trained=True).write()
    inputs = write_inputs(tmp_path / "in.safetensors")

    def forward(mode: str) -> dict:
        out = tmp_path / f"{mode}.safetensors"
        assert main(["forward", str(path), "--engine", "vllm@installed", "--engine-python", str(stand_in(mode)),
                     "--target-config", str(target_path), "--inputs", str(inputs), "--out", str(out)]) == 0
        header = read_header(out, out.name)
        assert header.metadata["computed_by"] == "its own code"
        return {name: load_array(e) for name, e in header.entries.items()}

    faithful = forward("modelled")
    note = capsys.readouterr().err  # computed by vllm 0.33.0's own code; the modelled reading gives the same logits
    miswired = forward("miswired")
    note += capsys.readouterr().err  # the modelled reading differs: step 1
    assert_golden("test_live_compute/test_forward_writes_the_engines_own_logits.txt", steady(note), {"TMP": tmp_path})
    assert (faithful["logits"] == miswired["logits"]).all() and not (
        faithful["logits_step_1"] == miswired["logits_step_1"]).all()


@pytest.fixture(scope="module")
def self_labelled(tmp_path_factory) -> tuple[Path, Path]:
    """The flat example drafter and a few states recorded from it (acceptance.synthetic: each next token its own
    step-0 choice), as the acceptance level's defects are gated."""
    from eagle3_checks.acceptance.synthetic import write_self_labelled
    from eagle3_checks.defects import Draft
    from eagle3_checks.drafter.checkpoint import open_checkpoint

    root = tmp_path_factory.mktemp("self-labelled")
    drafter = Draft.example("flat").save(root / "example-flat")
    return drafter, write_self_labelled(open_checkpoint(drafter), root / "data", samples=8, length=12)


def _accept(drafter: Path, data: Path, target_path: Path, mode: str, capsys, *extra: str) -> tuple[int, dict]:
    code = main(["accept", str(drafter), "--data", str(data), "--target-config", str(target_path), "--engine",
                 "vllm@installed", "--engine-python", str(stand_in(mode)), "--format", "json", *extra])
    return code, {r["reading"]: r for r in json.loads(capsys.readouterr().out)["readings"]}


def test_accept_scores_the_engines_own_compute_beside_the_modelled_reading(self_labelled, target_path, capsys):
    drafter, data = self_labelled
    code, got = _accept(drafter, data, target_path, "modelled", capsys)
    assert code == 0 and set(got) == {"trainer", "vllm@0.33.0", "vllm@0.33.0, own code"}
    own, modelled = got["vllm@0.33.0, own code"], got["vllm@0.33.0"]
    assert own["positions"] == modelled["positions"] > 0
    assert own["acceptance_length"] == modelled["acceptance_length"]
    assert own["step_accuracy"] == modelled["step_accuracy"]
    code, got = _accept(drafter, data, target_path, "residual", capsys, "--max-drop", "0.01")
    # an engine that computes the first layer's residual otherwise: its own figures are judged, and fail
    own, modelled = got["vllm@0.33.0, own code"], got["vllm@0.33.0"]
    assert own["step_accuracy"][0] < modelled["step_accuracy"][0] and code == 1


def test_accept_judging_live_needs_the_target_config(self_labelled, capsys):
    drafter, data = self_labelled
    code = main(["accept", str(drafter), "--data", str(data), "--engine", "vllm@installed", "--engine-python",
                 str(stand_in("modelled"))])
    assert code == 2
    assert_golden("test_live_compute/test_accept_judging_live_needs_the_target_config.txt", capsys.readouterr().err,
                  {"DATA": data, "DRAFTER": drafter})


@pytest.fixture
def two_samples(trained_world, tmp_path) -> Path:
    """Two of the trained world's test samples."""
    import shutil

    out = tmp_path / "data"
    out.mkdir()
    for i in (0, 1):
        shutil.copyfile(trained_world / "test" / f"hs_{i}.safetensors", out / f"hs_{i}.safetensors")
    return out


def test_accept_embeds_with_the_targets_embedding_where_the_engine_does(trained_world, two_samples, tmp_path,
                                                                        capsys):
    """SGLang serves every EAGLE-3 drafter with the target's embedding (eagle_worker_v2.py:353-363): its reading
    has no embed_tokens, and with --target accept embeds with the target's, as the engine does (without it the
    reading could not run); the trained world's drafter, converted for SGLang, scores as under vLLM."""
    flat = tmp_path / "sglang"
    assert main(["convert", str(trained_world / "drafters" / "trained"), str(flat), "--to", "sglang"]) == 0
    capsys.readouterr()
    assert main(["accept", str(flat), "--data", str(two_samples), "--target", str(trained_world / "target"),
                 "--engine", "sglang", "--engine", "vllm", "--format", "json"]) == 0
    got = {r["reading"].split("@")[0]: r for r in json.loads(capsys.readouterr().out)["readings"]}
    assert got["sglang"]["acceptance_length"] == got["vllm"]["acceptance_length"] > 2.5


def test_the_acceptance_level_judges_the_engines_own_figures(self_labelled, target_path):
    """`check --level acceptance --engine vllm@installed`: acceptance.engine-drop judges the installed engine's own
    compute, names who computed it beside the modelled reading's figure, and fails when that compute loses more than
    --max-drop (the stand-in that flips norm_before_residual); a faithful engine's own figures pass."""
    drafter, data = self_labelled

    def drop(mode: str):
        result = run(drafter, data=str(data), engine="vllm@installed", engine_python=str(stand_in(mode)),
                     target_config=str(target_path), level="acceptance", max_drop=0.01, aux_convention="vllm")
        return result.result("acceptance.engine-drop", "vllm@0.33.0")

    faithful, residual = drop("modelled"), drop("residual")
    assert faithful.status == "passed", [(f.code, f.message) for f in faithful.findings]
    assert residual.status == "failed" and "acceptance.engine-drop/drop" in {f.code for f in residual.findings}
    assert "own code" in " ".join(f.message for f in residual.findings)
