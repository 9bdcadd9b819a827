"""The gate's modelled compute, held to the engines' own.

``tests/conformance/computed/<engine>-<version>.json`` holds, per conformance checkpoint the engine built, what the
engine's own drafter forward computed on CPU for K draft steps (``conformance/run.sh`` with the recorders'
``--compute``; ``eagle3_checks/live/recorders/_compute.py`` says what is the engine's and what is the attention
stand-in): each step's top-k target ids and logits per row, the -inf pattern, the state fed forward. No engine is
installed here: the suite rebuilds the checkpoints, feeds the release's modelled reading
(:mod:`eagle3_checks.numerics.draft_steps` under ``engines.read``) the same seeded inputs, and asserts the same argmax
in every row, every recorded logit within the forward level's float32 tolerance and the same fed state. A reading
miswired on purpose (the normed state fed forward, the embedding and fc halves swapped, the other
``norm_before_residual``) fails the same comparison.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from eagle3_checks import engines  # noqa: E402
from eagle3_checks.drafter.checkpoint import open_checkpoint  # noqa: E402
from eagle3_checks.gate import load_target  # noqa: E402
from eagle3_checks.live import compute  # noqa: E402
from eagle3_checks.numerics import draft_steps  # noqa: E402
from eagle3_checks.numerics.draft_steps import Weights  # noqa: E402
from helpers import build_conformance_set  # noqa: E402

COMPUTED = Path(__file__).parent / "conformance" / "computed"
RECORDED = Path(__file__).parent / "conformance" / "recorded"
RELEASES = sorted(p.stem for p in COMPUTED.glob("*.json"))
RECORDS = {release: json.loads((COMPUTED / f"{release}.json").read_text()) for release in RELEASES}
# every drafter the engine built and ran (or raised on, or computed NaN with: the gate must agree on those too)
CASES = [(release, name) for release in RELEASES for name, rec in RECORDS[release]["checkpoints"].items()
         if not {"cannot_judge", "not_computed"} & set(rec)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("computed") / "set"
    return out, build_conformance_set(out)


def reading_of(built, release: str, name: str):
    out, entries = built
    entry = entries[name]
    rec = RECORDS[release]
    target = load_target(str(out / entry["target_config"]))
    if entry.get("context_length"):  # as tests/test_conformance.py: the served context
        target = dataclasses.replace(target, max_position_embeddings=entry["context_length"])
    ckpt = open_checkpoint(out / entry["dir"])
    return engines.read(ckpt, f"{rec['engine']}@{rec['version']}", target), Weights(ckpt, "cpu")


def test_there_are_compute_recordings_of_both_engines():
    assert {"vllm-0.33.0", "sglang-0.5.23"} <= set(RELEASES)
    for release in ("vllm-0.33.0", "sglang-0.5.23"):
        head = RECORDS[release]
        assert head["computed"] >= 40, (release, head["computed"])


@pytest.mark.parametrize("release", RELEASES)
def test_every_drafter_the_engine_loaded_was_computed(built, release):
    """A compute recording covers the conformance set, made from these checkpoints (source_hash), and every drafter
    the engine's loading recording says it built and loaded has its compute record or says why it cannot be judged."""
    _, entries = built
    records = RECORDS[release]["checkpoints"]
    # the same checkpoints as the loading recording of the release (conformance/run.sh makes both in one run)
    assert set(records) == {p.stem for p in (RECORDED / release).glob("*.json") if p.name != "index.json"}
    stale = [name for name, rec in records.items() if rec["source_hash"] != entries.get(name, {}).get("source_hash")]
    assert not stale, f"{release}: computed from other checkpoints: {stale} (record again with conformance/run.sh)"
    for name, rec in records.items():
        loaded = json.loads((RECORDED / release / f"{name}.json").read_text())["refused"] is None
        outcomes = [k for k in ("steps", "computes_nan", "raised", "cannot_judge", "not_computed") if k in rec]
        assert outcomes == (["not_computed"] if not loaded else outcomes) and len(outcomes) == 1, (name, outcomes)


@pytest.mark.parametrize("release, name", CASES, ids=[f"{r}:{n}" for r, n in CASES])
def test_the_modelled_reading_computes_what_the_engine_computed(built, release, name):
    reading, weights = reading_of(built, release, name)
    assert compute.hold(reading, weights, RECORDS[release]["checkpoints"][name]) == []


def _fed_normed(r):
    r.feedback = "prenorm" if r.feedback == "normed" else "normed"


def _norm_before_residual(r):
    r.norm_before_residual = not r.norm_before_residual


MISWIRED = {"the other state fed forward": _fed_normed, "norm_before_residual flipped": _norm_before_residual}


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("miswiring", sorted(MISWIRED))
def test_a_miswired_reading_fails(built, release, miswiring):
    reading, weights = reading_of(built, release, "example-flat")
    wrong = copy.deepcopy(reading)
    MISWIRED[miswiring](wrong)
    found = compute.hold(wrong, weights, RECORDS[release]["checkpoints"]["example-flat"])
    assert found and any("differ" in f for f in found), found


@pytest.mark.parametrize("release", RELEASES)
def test_the_embedding_and_fc_halves_swapped_fail(built, release, monkeypatch):
    """The first layer's input is concat(input_layernorm(embed), hidden_norm(h)) in both engines (vLLM 0.33.0
    llama_eagle3.py:134-138, SGLang 0.5.23 llama_eagle3.py:97-105): the other order fails."""
    reading, weights = reading_of(built, release, "example-flat")
    original = draft_steps.torch_cat
    monkeypatch.setattr(draft_steps, "torch_cat", lambda parts: original(list(reversed(parts))))
    found = compute.hold(reading, weights, RECORDS[release]["checkpoints"]["example-flat"])
    assert found and any("differ" in f for f in found), found


def test_no_aux_states_feed_the_target_state_without_fc(drafter):
    """eagle_config.use_aux_hidden_state false: vLLM 0.33.0 builds no fc and hands the target's last hidden state
    on as it is (llama_eagle3.py:209, 397-402). Its own compute showed it (use-aux-hidden-state-false-flat: the
    engine was fed one 64-wide state, the gate's reading had three): the reading now feeds one state, and the forward
    level says the trained fc is not what vLLM computes."""
    from helpers import run

    d = drafter("flat")
    d.config["eagle_config"]["use_aux_hidden_state"] = False
    path = d.write()
    assert engines.read(open_checkpoint(path), "vllm@0.33.0").num_aux == 1
    codes = {f.code for f in run(path, engine="vllm@0.33.0", level="forward").result(
        "forward.equivalence", "vllm@0.33.0").findings}
    assert codes == {"forward.equivalence/fc-width"}, codes


def test_the_attention_stand_in_is_causal_attention_over_a_kv_cache():
    """The one computation a compute recording does not take from the engine (recorders/_compute.py StandIn): held
    to the forward pass's own attention (numerics.ops.attention: row t attends to the step-0 keys <= t and its own
    later keys), with grouped-query heads, over three steps."""
    from eagle3_checks.numerics.ops import KVCache, attention

    rc = compute.recorder_module()
    standin, cache = rc.StandIn(), KVCache()
    g = torch.Generator().manual_seed(0)
    t, nh, nkv, hd = 5, 4, 2, 8
    for step in range(3):
        q, k, v = (torch.randn(n, t, hd, generator=g) for n in (nh, nkv, nkv))
        standin.step = step
        got = standin.attend("layer", q.transpose(0, 1).reshape(t, -1), k.transpose(0, 1).reshape(t, -1),
                             v.transpose(0, 1).reshape(t, -1), nh, nkv, hd, hd, hd ** -0.5)
        want = attention(q, k, v, cache, step).transpose(0, 1).reshape(t, -1)
        assert torch.allclose(got, want, atol=1e-6), step


def test_the_seeded_inputs_are_the_recorded_ones():
    """The recorders' generator is integer arithmetic: this torch reproduces the inputs every committed compute
    recording was fed (their sha256s), whatever torch the engine ran."""
    example = RECORDS["vllm-0.33.0"]["checkpoints"]["example-flat"]
    inputs = compute.recorder_inputs(3 * 64, 512, None)
    assert {k: compute._digest(v) for k, v in sorted(inputs.items())} == example["inputs_sha256"]
