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
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from eagle3_checks import engines
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.families.mla import effective
from eagle3_checks.engines.profile import Target
from eagle3_checks.engines.sglang_0_5_23 import AFTER_LOAD
from eagle3_checks.gate import load_target

ROOT = Path(__file__).resolve().parents[1]
RECORDED = Path(__file__).parent / "conformance" / "recorded"
RECORDINGS = sorted((d.name, p.stem) for d in RECORDED.iterdir() if d.is_dir()
                    for p in d.glob("*.json") if p.name != "index.json")


def _checkpoint_set():
    spec = importlib.util.spec_from_file_location("conformance_checkpoints", ROOT / "conformance" / "checkpoints.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("conformance") / "set"
    out.mkdir()
    return out, {entry["name"]: entry for entry in _checkpoint_set().build(out)}


def recording(engine_dir: str, name: str) -> dict:
    return json.loads((RECORDED / engine_dir / f"{name}.json").read_text())


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


def _before_layer(layers) -> list[int]:
    """The profile's captured layers (outputs of X) as the recording counts them (inputs of layer X+1)."""
    return sorted(x + 1 for x in layers)


def disagreements(rec: dict, r, target, loaded: bool = True, limit=None) -> list[str]:
    """Where the gate's reading ``r`` of a checkpoint differs from what the engine recorded. ``loaded`` False: the
    engine's load stopped for a CPU-only reason after it had read the config and the aux ids (compare those only).
    ``limit``: engine.serving's verdict on the context the recording was made with (the profile's ``serving``); one
    that says the release refuses to start is a refusal like the reading's."""
    out: list[str] = []
    if not loaded:  # the engine stopped before anything the gate could refuse for: what it read up to there
        return _aux_and_config(rec, r, target)
    engine_refused = rec["refused"] is not None
    refuses = [limit.message] if limit is not None and limit.refuses else []
    gate_refused = bool(r.refusals) or not r.layout_ok or bool(refuses)
    if engine_refused != gate_refused:
        said = f"{rec['refused']['type']}: {rec['refused']['message'][:160]}" if engine_refused else "loads"
        out.append(f"refused: the engine {said!r}; the gate {(r.refusals + refuses)[:1] or 'predicts it loads'}")
    if engine_refused or gate_refused:
        return out
    # SGLang keeps d2t as an attribute, hot_token_id, None without a d2t tensor: draft ids are target ids, which is
    # what a drafter without a draft vocabulary means (srt/models/llama_eagle3.py:350-353), not a parameter left out.
    unwritten = {u["role"] or u["param"] for u in rec["unwritten"]
                 if not (u.get("attribute") and r.draft_vocab_size == r.vocab_size)}
    # What the worker puts in place after the load (a tied lm_head is the embedding set_embed replaces) is the
    # profile's note, not a parameter the loader leaves; the norm a later layer builds and never uses may stay empty.
    filled = set(r.tensors) | set(r.unused)
    predicted = {role for role, how in r.unfilled.items() if not how.startswith(AFTER_LOAD)} | \
        (r.idle_roles() - filled)
    if unwritten != predicted:
        out.append(f"unwritten: the engine {sorted(unwritten)}, the gate {sorted(predicted)}")
    # SGLang's MLA loader caches q_a_proj and kv_a_proj_with_mqa and loads their concatenation into
    # fused_qkv_a_proj_with_mqa (SG23/models/kimi_k25_eagle3.py:467-492): the recorder sees a tensor that is no
    # checkpoint tensor go there, and the two it was made of as never loaded
    fused = {x["param"].rsplit(".fused_qkv_a_proj_with_mqa.", 1)[0]
             for x in rec["loaded"].get("(not a checkpoint tensor)", []) if ".fused_qkv_a_proj_with_mqa." in x["param"]}
    concatenated = {n for n in rec["ignored"] if n.endswith(("self_attn.q_a_proj.weight",
                                                              "self_attn.kv_a_proj_with_mqa.weight")) and fused}
    ignored, predicted = set(rec["ignored"]) - concatenated, set(r.ignored)
    if ignored != predicted:
        out.append(f"ignored: the engine {sorted(ignored)}, the gate {sorted(predicted)}")
    narrowed = sorted(name for name, loads in rec["loaded"].items() if any(x["narrowed"] for x in loads))
    if narrowed != sorted(r.narrowed):
        out.append(f"narrowed: the engine {narrowed}, the gate {sorted(r.narrowed)}")
    return out + _aux_and_config(rec, r, target)


def _aux_and_config(rec: dict, r, target) -> list[str]:
    """The target layers captured and the config values read, engine vs gate."""
    out = []
    profile = engines.profile(f"{r.engine}@{r.version}")
    capture = profile.capture(r.aux_layer_ids, target) if r.aux_layer_ids else profile.default_capture(target)
    if capture.last_id is not None and r.aux_layer_ids:  # ids past the last one capture nothing (engine.aux-layers)
        capture = profile.capture([i for i in r.aux_layer_ids if i <= capture.last_id], target)
    if rec["aux"]["requires_aux_hidden_states"] and capture.layers is not None:
        engine_layers = sorted(set(rec["aux"]["capture_before_layer"]))
        if engine_layers != _before_layer(capture.layers):
            out.append(f"aux: the engine captures before layers {engine_layers}, the gate "
                       f"{_before_layer(capture.layers)} ({capture.rule})")
    cfg = rec["config"]
    if any(c in (cfg.get("rope_scaling") or {}).get("class", "") for c in ("YaRN", "DeepseekScaling")):
        cfg = {k: v for k, v in cfg.items() if k != "max_position_embeddings"}  # the recorder read YaRN's original
    # the eps each norm was built with, read back from the modules (MLA attention only): the latent norms' and the
    # layer's own
    if cfg.get("norm_eps") and r.mla is not None:
        built = cfg["norm_eps"]
        latent = effective(r.mla)["latent_norm_eps"]
        for norm in ("q_a_layernorm", "kv_a_layernorm"):
            if norm in built and built[norm] != latent:
                out.append(f"{norm} eps: the engine {built[norm]!r}, the gate {latent!r}")
        if built.get("input_layernorm") is not None and built["input_layernorm"] != r.rms_norm_eps:
            out.append(f"input_layernorm eps: the engine {built['input_layernorm']!r}, the gate {r.rms_norm_eps!r}")
    # the rows of lm_head: a tied one is the V-row embedding (SGLang llama_eagle3.py:303-304)
    head_rows = r.vocab_size if r.lm_head_from_embed else r.draft_vocab_size
    # an MLA drafter's heads are sized by its MLA fields: the head_dim the recorder read (its config class's default or
    # the attention's rotary width) is no value the gate's MLA reading computes with
    head_dim = cfg.get("head_dim") if r.family == "mla" else r.head_dim
    for field, value in (("head_dim", head_dim), ("num_aux", r.num_aux), ("fc_norm", r.fc_norm),
                         ("norm_before_fc", r.input_norm), ("norm_output", r.feedback == "normed"),
                         ("vocab_size", r.vocab_size), ("draft_vocab_size", head_rows),
                         ("target_hidden_size", r.target_hidden_size), ("num_hidden_layers", r.num_layers),
                         ("rope_theta", r.rope_theta), ("max_position_embeddings", r.max_position_embeddings)):
        if cfg.get(field) is not None and cfg[field] != value:
            out.append(f"{field}: the engine {cfg[field]!r}, the gate {value!r}")
    if r.engine == "vllm" and cfg.get("norm_before_residual") is not None \
            and cfg["norm_before_residual"] != r.norm_before_residual:
        out.append(f"norm_before_residual: the engine {cfg['norm_before_residual']!r}, the gate "
                   f"{r.norm_before_residual!r}")
    return out


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
    found = disagreements(rec, reading, Target.of(target_config), loaded=not cpu_only, limit=limit)
    assert not found, f"{name} under {spec} ({entry['why']}):\n  " + "\n  ".join(found)


def test_a_prediction_that_differs_from_the_recording_is_named(built):
    """The comparison can fail: a recording edited to say the engine refused, dropped a tensor or captured other
    layers is a disagreement, field by field."""
    out, entries = built
    rec, entry = recording("vllm-0.33.0", "example-flat"), entries["example-flat"]
    target_config = load_target(str(out / entry["target_config"]))
    reading = engines.read(open_checkpoint(out / entry["dir"]), "vllm@0.33.0", target_config)
    target = Target.of(target_config)
    assert disagreements(rec, reading, target) == []
    edited = {**rec, "ignored": [*rec["ignored"], "fc.weight"], "aux": {**rec["aux"], "capture_before_layer": [1, 2]},
              "config": {**rec["config"], "head_dim": 16}}
    found = disagreements(edited, reading, target)
    assert [f.split(":")[0] for f in found] == ["ignored", "aux", "head_dim"], found
    refused = {**rec, "refused": {"type": "ValueError", "message": "no"}}
    assert disagreements(refused, reading, target)[0].startswith("refused: the engine 'ValueError: no'")


def test_a_cpu_only_mla_recording_is_compared_on_what_it_read(built):
    """SGLang 0.5.23's MLA drafter stops at its rotary embedding on a CPU; the ids it captures and the config values
    it read before that are still held to the gate's MLA reading, and an edited recording is a disagreement."""
    out, entries = built
    rec, entry = recording("sglang-0.5.23", "mla-flat"), entries["mla-flat"]
    assert rec["refused"]["cpu_only"]
    target_config = load_target(str(out / entry["target_config"]))
    reading = engines.read(open_checkpoint(out / entry["dir"]), "sglang@0.5.23", target_config)
    target = Target.of(target_config)
    assert reading.family == "mla" and disagreements(rec, reading, target, loaded=False) == []
    edited = {**rec, "aux": {**rec["aux"], "capture_before_layer": [1, 3, 5]},
              "config": {**rec["config"], "num_hidden_layers": 2}}
    found = disagreements(edited, reading, target, loaded=False)
    assert [f.split(":")[0] for f in found] == ["aux", "num_hidden_layers"], found
