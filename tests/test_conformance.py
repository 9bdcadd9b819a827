"""The gate's engine readings, held to what the engines' own loaders did.

``tests/conformance/recorded/<engine>-<version>/`` holds one recording per checkpoint of ``conformance/checkpoints.py``,
made by running vLLM's and SGLang's real config parsing and weight loading on CPU (``conformance/run.sh``; see
``conformance/README.md``). No engine is installed here: the suite rebuilds the same checkpoints, proves they are the
ones recorded (``source_hash``), and asserts that the profile of that engine release predicts what the engine did:
refusal or not, every parameter left unwritten, every tensor ignored, the target layers captured, and each config
value the gate reports. A disagreement names the checkpoint, the release and the field.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from eagle3_checks import engines
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.engines.profile import Target
from eagle3_checks.engines.recorded import disagreements
from eagle3_checks.gate import load_target
from helpers import build_conformance_set

ROOT = Path(__file__).resolve().parents[1]
RECORDED = Path(__file__).parent / "conformance" / "recorded"
RECORDINGS = sorted((d.name, p.stem) for d in RECORDED.iterdir() if d.is_dir()
                    for p in d.glob("*.json") if p.name != "index.json")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("conformance") / "set"
    return out, build_conformance_set(out)


def recording(engine_dir: str, name: str) -> dict:
    return json.loads((RECORDED / engine_dir / f"{name}.json").read_text())


def test_every_recording_is_claimed_by_a_profile_and_every_claim_is_recorded():
    """A profile's range is what its recordings prove: each recorded release is a release of one profile, with the
    recording's date, and each release a profile says is recorded has its recording here (which the test below holds
    that profile to)."""
    recorded = {d.name: json.loads((d / "index.json").read_text()) for d in RECORDED.iterdir() if d.is_dir()}
    claimed = {f"{p.name}-{r.version}": r.recorded for p in engines.PROFILES for r in p.holds_for if r.recorded}
    assert claimed == {name: index["date"] for name, index in recorded.items()}
    for name, index in recorded.items():
        judged = engines.judge(index["engine"], index["version"])
        assert judged.warning is None and index["date"] in judged.note, (name, judged)


def test_there_are_recordings_of_both_engines():
    index = {d: json.loads((RECORDED / d / "index.json").read_text()) for d in ("vllm-0.33.0", "sglang-0.5.23")}
    assert all(i["checkpoints"] >= 40 and i["harness_error"] == 0 for i in index.values()), index


@pytest.mark.parametrize("engine_dir", sorted({d for d, _ in RECORDINGS}))
def test_the_recordings_are_of_these_checkpoints(built, engine_dir):
    """Each recording names the hash of the config and safetensors headers it was made from; rebuilding the set
    gives the same hashes (a changed example or generator means: record again with conformance/run.sh)."""
    _, entries = built
    stale = [name for d, name in RECORDINGS if d == engine_dir
             if entries.get(name, {}).get("source_hash") != recording(d, name)["source_hash"]]
    assert not stale, f"{engine_dir}: recordings made from other checkpoints: {stale}"


@pytest.mark.parametrize("engine_dir, name", RECORDINGS, ids=[f"{d}:{n}" for d, n in RECORDINGS])
def test_the_gate_predicts_what_the_engine_did(built, engine_dir, name):
    out, entries = built
    rec, entry = recording(engine_dir, name), entries[name]
    spec = f"{rec['engine']}@{rec['version']}"
    target_config = load_target(str(out / entry["target_config"]))
    if entry.get("context_length"):
        # served with a context of its own: that is the target's max_model_len, which vLLM raises a plain-RoPE draft's
        # max_position_embeddings to (config/speculative.py:1807-1846), and the context SGLang checks the draft against
        target_config = dataclasses.replace(target_config, max_position_embeddings=entry["context_length"])
    reading = engines.read(open_checkpoint(out / entry["dir"]), spec, target_config)
    cpu_only = bool(rec["refused"] and rec["refused"].get("cpu_only"))
    if cpu_only and reading.family != "mla":
        pytest.skip(f"the engine refused only because it ran on a CPU: {rec['refused']['message'][:120]}")
    # SGLang's MLA drafter cannot build its rotary embedding on a CPU (the recording says so): what it read before
    # that (the aux ids it captures, its config values) is compared; the weight load is not recorded
    serving = engines.profile(spec).serving
    limit = serving(reading, entry.get("context_length"), target_config) if serving else None
    found = disagreements(rec, reading, engines.profile(spec), Target.of(target_config), loaded=not cpu_only,
                          limit=limit)
    assert not found, f"{name} under {spec} ({entry['why']}):\n  " + "\n  ".join(found)


def test_a_prediction_that_differs_from_the_recording_is_named(built):
    """The comparison can fail: a recording edited to say the engine refused, dropped a tensor or captured other
    layers is a disagreement, field by field."""
    out, entries = built
    rec, entry = recording("vllm-0.33.0", "example-flat"), entries["example-flat"]
    target_config = load_target(str(out / entry["target_config"]))
    reading = engines.read(open_checkpoint(out / entry["dir"]), "vllm@0.33.0", target_config)
    target, profile = Target.of(target_config), engines.profile("vllm@0.33.0")
    assert disagreements(rec, reading, profile, target) == []
    edited = {**rec, "ignored": [*rec["ignored"], "fc.weight"], "aux": {**rec["aux"], "capture_before_layer": [1, 2]},
              "config": {**rec["config"], "head_dim": 16}}
    found = disagreements(edited, reading, profile, target)
    assert [f.split(":")[0] for f in found] == ["ignored", "aux", "head_dim"], found
    refused = {**rec, "refused": {"type": "ValueError", "message": "no"}}
    assert disagreements(refused, reading, profile, target)[0].startswith("refused: the engine 'ValueError: no'")


def test_a_cpu_only_mla_recording_is_compared_on_what_it_read(built):
    """SGLang 0.5.23's MLA drafter stops at its rotary embedding on a CPU; the ids it captures and the config values
    it read before that are still held to the gate's MLA reading, and an edited recording is a disagreement."""
    out, entries = built
    rec, entry = recording("sglang-0.5.23", "mla-flat"), entries["mla-flat"]
    assert rec["refused"]["cpu_only"]
    target_config = load_target(str(out / entry["target_config"]))
    reading = engines.read(open_checkpoint(out / entry["dir"]), "sglang@0.5.23", target_config)
    target, profile = Target.of(target_config), engines.profile("sglang@0.5.23")
    assert reading.family == "mla" and disagreements(rec, reading, profile, target, loaded=False) == []
    edited = {**rec, "aux": {**rec["aux"], "capture_before_layer": [1, 3, 5]},
              "config": {**rec["config"], "num_hidden_layers": 2}}
    found = disagreements(edited, reading, profile, target, loaded=False)
    assert [f.split(":")[0] for f in found] == ["aux", "num_hidden_layers"], found
