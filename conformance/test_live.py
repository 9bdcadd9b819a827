"""The installed engine as the judge, against the real engine: ``--engine NAME@installed`` on every conformance
checkpoint, in an environment that has the engine (``conformance/run.sh --live ENGINE@VERSION`` runs this after
recording; outside the default test run, which replays the committed recordings instead).

    EAGLE3_LIVE_ENGINE=vllm EAGLE3_LIVE_PYTHON=.../bin/python pytest conformance/test_live.py

The gate's live path (``eagle3_checks.live.record_many``, then ``engine.live`` per checkpoint) runs the installed
engine once over the whole set. Each checkpoint is held to two things:

- the live recording is the committed conformance recording of that release (``tests/conformance/recorded/``),
  field by field: the live path is the recorder, run on the candidate where it lies;
- the engine's own compute of each drafter it builds (the recorder's ``--compute``) is the committed compute
  recording (``tests/conformance/computed/``), byte for byte;
- the gate, judging live, gives the engine's own verdict and finds no disagreement with the release's profile
  (``engine.live`` gives ``agrees`` or the engine's own ``refused`` / ``unwritten`` / ``narrowed``, never
  ``disagrees`` or ``cannot-judge``), and the engine checks, which take the engine's verdicts, give what the
  profile gives (tests/test_live.py holds the same on the committed recordings, without an engine).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import checkpoints  # conformance/checkpoints.py, beside this file (pytest puts this folder on sys.path)
from eagle3_checks import live
from eagle3_checks.gate import gate, parse_options

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "conformance" / "recorded"
ENGINE = os.environ.get("EAGLE3_LIVE_ENGINE", "")
PYTHON = os.environ.get("EAGLE3_LIVE_PYTHON", "")
# what a recording says of the engine, compared live vs committed (the messages name the folder the checkpoint was
# read from, which differs between the two; the type, the stage and the engine frame do not)
FIELDS = ("architecture", "loaded", "ignored", "unwritten", "aux", "config", "serves_with")
ENGINE_VERDICTS = {"engine.live/agrees", "engine.live/refused", "engine.live/unwritten", "engine.live/narrowed"}
ENGINE_CHECKS = ("engine.loads", "engine.semantics", "engine.aux-layers", "engine.serving")

if not (ENGINE and PYTHON):
    pytest.skip("set EAGLE3_LIVE_ENGINE and EAGLE3_LIVE_PYTHON (conformance/run.sh --live does)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """The set, built; the installed engine run once over all of it; its release and the run's time."""
    out = tmp_path_factory.mktemp("conformance") / "set"
    out.mkdir()
    entries = {e["name"]: e for e in checkpoints.build(out)}
    started = time.time()
    got = live.record_many(ENGINE, PYTHON, [(out / e["dir"], out / e["target_config"], e.get("context_length"))
                                            for e in entries.values()])
    seconds = time.time() - started
    version = live.version(ENGINE, PYTHON)
    print(f"\n{ENGINE} {version}: {len(entries)} checkpoints recorded live in {seconds:.0f} s")
    return out, entries, dict(zip(entries, got, strict=True)), version


def names():
    return sorted(json.loads((RECORDED / "vllm-0.33.0" / "index.json").read_text())["records"])


@pytest.mark.parametrize("name", [n.removesuffix(".json") for n in names()])
def test_the_live_recording_is_the_committed_recording(judged, name):
    _, _, got, version = judged
    committed = RECORDED / f"{ENGINE}-{version}" / f"{name}.json"
    if not committed.is_file():
        pytest.fail(f"no committed recording of {ENGINE} {version}: record it with conformance/run.sh")
    rec = got[name]
    assert isinstance(rec, live.Live), f"{name}: {rec}"
    expected = json.loads(committed.read_text())
    for field in FIELDS:
        assert rec.record.get(field) == expected.get(field), (name, field)
    said, want = rec.record["refused"], expected["refused"]
    assert (said is None) == (want is None), (name, said, want)
    if said:
        assert {k: said.get(k) for k in ("type", "stage", "at", "cpu_only")} == \
            {k: want.get(k) for k in ("type", "stage", "at", "cpu_only")}, name


@pytest.fixture(scope="module")
def computed(judged, tmp_path_factory):
    """The installed engine's recorder run with --compute over the whole set (as conformance/run.sh records it):
    each drafter it built, run through its own forward on CPU."""
    import subprocess

    out, _, _, version = judged
    path = tmp_path_factory.mktemp("computed") / f"{ENGINE}-{version}.json"
    proc = subprocess.run([PYTHON, str(live.RECORDERS / f"record_{ENGINE}.py"), str(out / "manifest.json"),
                           str(path.parent / "recorded"), "--compute", str(path)], capture_output=True, text=True,
                          env=live._env(), timeout=live.TIMEOUT_S)
    assert path.is_file(), proc.stderr[-3000:]
    return json.loads(path.read_text()), version


def test_the_engines_own_compute_is_the_committed_compute_recording(computed):
    """Every drafter's compute record, byte for byte as committed (tests/conformance/computed/): the engine's own
    forward is deterministic on CPU, and tests/test_engine_compute.py holds the modelled readings to that file."""
    got, version = computed
    path = ROOT / "tests" / "conformance" / "computed" / f"{ENGINE}-{version}.json"
    if not path.is_file():
        pytest.fail(f"no committed compute recording of {ENGINE} {version}: record it with conformance/run.sh")
    want = json.loads(path.read_text())
    assert {k: v for k, v in got.items() if k != "date"} == {k: v for k, v in want.items() if k != "date"}


@pytest.mark.parametrize("name", [n.removesuffix(".json") for n in names()])
def test_the_gate_judging_live_gives_the_engines_verdict_and_no_disagreement(judged, name):
    out, entries, _, version = judged
    entry = entries[name]
    options = parse_options(engine=f"{ENGINE}@installed", engine_python=PYTHON, reference="none", level="header",
                            target_config=str(out / entry["target_config"]), max_model_len=entry.get("context_length"))
    result = gate(out / entry["dir"], options)
    spec = f"{ENGINE}@{version}"
    codes = {f.code for f in result.result("engine.live", spec).findings}
    assert codes and codes <= ENGINE_VERDICTS and "engine.live/disagrees" not in codes, (name, codes)
    # the engine checks, taking the engine's verdicts, give what the release's profile gives
    modelled = gate(out / entry["dir"], parse_options(
        engine=spec, reference="none", level="header", target_config=str(out / entry["target_config"]),
        max_model_len=entry.get("context_length")))
    for check in ENGINE_CHECKS:
        want, got = modelled.result(check, spec), result.result(check, spec)
        assert (want.status, {f.code for f in want.findings}) == (got.status, {f.code for f in got.findings}), \
            (name, check, [f.code for f in want.findings], [f.code for f in got.findings])
