"""The installed engine as the judge (engine.live): what the gate does with the recording an installed engine makes
of the candidate. No engine is installed here: a stand-in interpreter replays vLLM 0.33.0's own recording of the
flat example (eagle3_checks/live/example-flat.vllm-0.33.0.json, the committed conformance recording), edited per
test, and answers the version query as that release. The real engines were run this way by hand (vLLM 0.29.0 on
the example: 15 s; on a full-vocabulary drafter without d2t it left d2t unwritten, which the profile of 0.31.0 to
0.33.0 does not predict: engine.live/disagrees)."""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path

import pytest

import helpers
from eagle3_checks import live
from eagle3_checks.defects import REPLAYED, replaying
from eagle3_checks.errors import UsageError
from helpers import build_conformance_set, run

ROOT = Path(__file__).resolve().parents[1]


codes = partial(helpers.codes, check="engine.live", engine="vllm@0.33.0")


def live_run(drafter, target_path, edit=None, **options):
    return run(drafter("flat", trained=True).write(), engine="vllm@installed", engine_python=str(replaying(edit)),
               target_config=str(target_path), level="header", **options)


def test_the_replayed_recording_is_the_committed_conformance_recording():
    assert REPLAYED.read_text() == (ROOT / "tests/conformance/recorded/vllm-0.33.0/example-flat.json").read_text()


def test_an_engine_that_loads_the_candidate_as_predicted_agrees(drafter, target_path):
    result = live_run(drafter, target_path)
    assert result.options.live == (("vllm@0.33.0", str(replaying(None))),)
    assert result.options.engine_notes[0].endswith(f"judged live by the vllm 0.33.0 installed for "
                                                   f"{replaying(None)} (engine.live)")
    assert result.result("engine.live", "vllm@0.33.0").status == "passed"
    assert codes(result) == {"engine.live/agrees"}


def _refused(rec: dict) -> None:
    rec["refused"] = {"type": "ValueError", "message": "There is no module or parameter named 'fc_norm'",
                      "stage": "load", "at": "vllm/model_executor/models/utils.py:321"}


def _narrowed(rec: dict) -> None:
    rec["loaded"]["fc.weight"][0]["narrowed"] = True


def _harness(rec: dict) -> None:
    rec["harness_error"] = {"type": "ImportError", "message": "cannot import name 'get_model'", "traceback": ""}


def _other_layers(rec: dict) -> None:
    rec["aux"]["capture_before_layer"] = [2, 4, 6]


@pytest.mark.parametrize("edit, expected", [
    (_refused, ["engine.live/refused", "engine.live/disagrees"]),
    (_narrowed, ["engine.live/narrowed", "engine.live/disagrees"]),
    (_other_layers, ["engine.live/disagrees"]),
    (_harness, ["engine.live/cannot-judge"]),
])
def test_what_the_installed_engine_did_is_the_verdict(drafter, target_path, edit, expected):
    result = live_run(drafter, target_path, edit)
    assert result.result("engine.live", "vllm@0.33.0").status == "failed"
    assert codes(result) == set(expected)


def test_a_release_the_recorder_does_not_know_cannot_be_judged_live(drafter, target_path, tmp_path):
    broken = tmp_path / "python"
    broken.write_text(f"#!{sys.executable}\nimport sys\nif sys.argv[1:2] == ['-c']:\n    print('0.33.0')\n"
                      "    sys.exit(0)\nraise SystemExit('ModuleNotFoundError: no module vllm.v1.worker.gpu')\n")
    broken.chmod(0o755)
    result = run(drafter("flat").write(), engine="vllm@installed", engine_python=str(broken),
                 target_config=str(target_path), level="header")
    found = result.result("engine.live", "vllm@0.33.0").findings
    assert [f.code for f in found] == ["engine.live/cannot-judge"]
    assert "does not know vllm 0.33.0's internals (it exited with 1): ModuleNotFoundError" in found[0].message


def test_live_judging_needs_the_target_config(drafter):
    result = run(drafter("flat").write(), engine="vllm@installed", engine_python=str(replaying(None)),
                 level="header")
    assert result.result("engine.live", "vllm@0.33.0").status == "skipped"


def test_a_release_judged_by_its_profile_only_has_no_live_result(drafter, target_path):
    result = run(drafter("flat").write(), engine="vllm@0.32.0,vllm@installed", target_config=str(target_path),
                 engine_python=str(replaying(None)), level="header")
    assert result.options.engines() == ("vllm@0.32.0", "vllm@0.33.0")
    assert [r.engine for r in result.results if r.check.id == "engine.live"] == ["vllm@0.33.0"]
    assert result.result("engine.live", "vllm@0.33.0").status == "passed"
    assert result.result("engine.loads", "vllm@0.32.0").status == "passed"


@pytest.mark.parametrize("options, says", [
    ({"engine": "vllm@installed", "engine_python": sys.executable}, "cannot judge this release live: vllm is not "
                                                                     "installed for"),
    ({"engine": "vllm", "engine_python": sys.executable}, "judge live with --engine NAME@installed"),
    ({"engine": "tgi@installed"}, "tgi has no live recorder"),
    ({"engine": "vllm@installed", "engine_python": "/nonexistent/python"}, "cannot run /nonexistent/python"),
])
def test_live_judging_asked_wrongly_is_a_usage_error(drafter, options, says):
    with pytest.raises(UsageError, match=says):
        run(drafter("flat").write(), **options)


def test_the_subprocess_sees_no_gpu_and_the_engines_cpu_platform(tmp_path, target_path, drafter):
    """What the recorder's interpreter is given: no CUDA device, vLLM's CPU platform, a fixed hash seed."""
    spy = tmp_path / "python"
    seen = tmp_path / "env.json"
    spy.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                   f"json.dump({{k: os.environ.get(k) for k in ('CUDA_VISIBLE_DEVICES', 'VLLM_TARGET_DEVICE', "
                   f"'PYTHONHASHSEED')}}, open({str(seen)!r}, 'w'))\nprint('0.33.0')\n")
    spy.chmod(0o755)
    assert live.version("vllm", str(spy)) == "0.33.0"
    assert json.loads(seen.read_text()) == {"CUDA_VISIBLE_DEVICES": "", "VLLM_TARGET_DEVICE": "cpu",
                                            "PYTHONHASHSEED": "0"}



def test_the_release_is_asked_once_per_interpreter_and_each_environment_keeps_its_own(tmp_path):
    """Two environments whose python links to one base interpreter (as every venv's does) hold different releases:
    each is asked once, and neither answers for the other."""
    import os

    base = tmp_path / "base-python"
    calls = tmp_path / "calls"
    base.write_text(f"#!{sys.executable}\nimport sys\nopen({str(calls)!r}, 'a').write(sys.argv[0] + '\\n')\n"
                    "print('0.34.0' if 'new' in sys.argv[0] else '0.33.0')\n")
    base.chmod(0o755)
    for env in ("old", "new"):
        (tmp_path / env).mkdir()
        os.symlink(base, tmp_path / env / "python")
    for _ in range(3):
        assert live.version("vllm", str(tmp_path / "old" / "python")) == "0.33.0"
        assert live.version("vllm", str(tmp_path / "new" / "python")) == "0.34.0"
    assert len(calls.read_text().splitlines()) == 2

def _head_dim_read_as_8(rec: dict) -> None:
    rec["config"]["head_dim"] = 8


def _fc_left_unwritten(rec: dict) -> None:
    rec["unwritten"] = [{"param": "model.fc.weight", "shard": None, "role": "fc.weight"}]


@pytest.mark.parametrize("edit, check, code", [
    (_refused, "engine.loads", "engine.loads/refused"),
    (_narrowed, "engine.loads", "engine.loads/narrowed"),
    (_fc_left_unwritten, "engine.loads", "engine.loads/unfilled"),
    (_other_layers, "engine.aux-layers", "engine.aux-layers/wrong-layers"),
    (_head_dim_read_as_8, "engine.semantics", "engine.semantics/head-dim"),
])
def test_judged_live_the_engine_checks_take_the_engines_verdict(drafter, target_path, edit, check, code):
    """The profile predicts the example loads as trained (its engine checks pass without --engine NAME@installed);
    judged live, each of them gives what the installed engine's recording showed, said to be the engine's."""
    modelled = run(drafter("flat", trained=True).write(), engine="vllm@0.33.0", target_config=str(target_path),
                   level="header", aux_convention="vllm")
    assert modelled.result(check, "vllm@0.33.0").status == "passed"
    result = live_run(drafter, target_path, edit, aux_convention="vllm")
    found = [f for f in result.result(check, "vllm@0.33.0").findings if f.code == code]
    assert found and result.result(check, "vllm@0.33.0").status == "failed", \
        [f.code for f in result.result(check, "vllm@0.33.0").findings]
    assert "the installed vllm 0.33.0, live" in " ".join(f"{f.message} {f.found} {f.why}" for f in found)


def test_judged_live_and_agreeing_the_engine_checks_are_the_profiles(drafter, target_path):
    result = live_run(drafter, target_path)
    for check in ("engine.loads", "engine.semantics", "engine.aux-layers"):
        assert result.result(check, "vllm@0.33.0").status == "passed", check


# ----- the live verdict, held to the modelled one on the committed recordings ------------------------------------

ENGINE_CHECKS = ("engine.loads", "engine.semantics", "engine.aux-layers", "engine.serving")


@pytest.fixture(scope="module")
def conformance_set(tmp_path_factory):
    out = tmp_path_factory.mktemp("conformance") / "set"
    return out, build_conformance_set(out)


def replaying_recorded(folder: Path, release: str, where: Path) -> Path:
    """A stand-in interpreter of ``release`` that answers each candidate with the committed recording of the
    conformance checkpoint of that folder name (tests/conformance/recorded/``folder``/)."""
    script = where / f"python-{folder.name}"
    script.write_text(f"""#!{sys.executable}
import json, sys
from pathlib import Path
if sys.argv[1:2] == ["-c"]:
    print({release!r})
    sys.exit(0)
out = Path(sys.argv[3])
out.mkdir(parents=True)
for entry in json.loads(Path(sys.argv[2]).read_text()):
    rec = json.loads((Path({str(folder)!r}) / (Path(entry["dir"]).name + ".json")).read_text())
    (out / (entry["name"] + ".json")).write_text(json.dumps(rec))
(out / "index.json").write_text(json.dumps({{"run_seconds": 0.0}}))
""")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("engine_dir", ["vllm-0.33.0", "sglang-0.5.23"])
def test_judged_live_on_the_engines_own_recordings_the_engine_checks_give_the_profiles_verdicts(
        conformance_set, engine_dir, tmp_path):
    """The committed recordings agree with the profiles (test_conformance.py), so judging each conformance checkpoint
    live on its own recording must give every engine check the modelled verdict: a live correction that changes one
    (an idle norm taken for a missing tensor, SGLang's context check taken for a load refusal) fails here."""
    out, entries = conformance_set
    engine, release = engine_dir.split("-")
    python = replaying_recorded(ROOT / "tests" / "conformance" / "recorded" / engine_dir, release, tmp_path)
    spec, differ = f"{engine}@{release}", []
    # one recorder run over every checkpoint, as a gate run over many does (live.record_many): each gate below takes
    # its checkpoint's recording from it instead of starting the engine again
    live.record_many(engine, str(python), [(out / e["dir"], out / e["target_config"], e.get("context_length"))
                                           for e in entries.values()])
    for name, entry in sorted(entries.items()):
        options = dict(reference="none", level="header", target_config=str(out / entry["target_config"]),
                       max_model_len=entry.get("context_length"))
        modelled = run(out / entry["dir"], engine=spec, **options)
        judged = run(out / entry["dir"], engine=f"{engine}@installed", engine_python=str(python), **options)
        for check in ENGINE_CHECKS:
            want, got = modelled.result(check, spec), judged.result(check, spec)
            # the codes, not their count: an engine raises its first refusal, the profile lists each
            if (want.status, {f.code for f in want.findings}) != (got.status, {f.code for f in got.findings}):
                differ.append(f"{name} {check}: modelled {want.status} {[f.code for f in want.findings]}, live "
                              f"{got.status} {[f.code for f in got.findings]}")
    assert not differ, "\n".join(differ)


def test_a_config_the_gate_patched_is_what_the_engine_loads(drafter):
    """fix judges its patched config before writing it: judged live, the engine loads a folder holding that config
    (links to the weights beside it), not the unpatched one on disk."""
    from types import SimpleNamespace

    from eagle3_checks.checks._common import _as_read
    from eagle3_checks.drafter.checkpoint import open_checkpoint

    path = drafter("flat").write()
    ckpt = open_checkpoint(path)
    with _as_read(SimpleNamespace(ckpt=ckpt)) as folder:
        assert folder == path
    patched = {**ckpt.config_raw, "norm_before_residual": True}
    with _as_read(SimpleNamespace(ckpt=ckpt.with_config(patched))) as folder:
        assert folder != path and json.loads((folder / "config.json").read_text()) == patched
        assert (folder / "model.safetensors").resolve() == (path / "model.safetensors").resolve()
    assert json.loads((path / "config.json").read_text()) == ckpt.config_raw  # the source is never written
