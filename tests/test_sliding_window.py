"""Sliding-window attention: what each modelled trainer and engine release does with a drafter's layer_types and
sliding_window, held to the release's source (cited in eagle3_checks/engines/), and what the gate reports when the
trained and the served window differ (engine.semantics/sliding-window, with the context from which it matters).

speculators 0.9.0 (0.7.0 on) trains with the window its transformer_layer_config states, measured from the context
row (models/eagle3/core.py:96-105, attention.py:16-19); before 0.7.0 it built one causal mask (0.6.0
models/eagle3/core.py:161). vLLM 0.33.0 reads the same fields (model_executor/models/llama.py:185-205) and slides by
the query's position (flash_attn.py:166). SGLang 0.5.23 reads neither and slides only with the launch's
--speculative-draft-window-size N, attending N + 1 keys (srt/models/llama_eagle3.py:284-299,
torch_native_backend.py:36-48); SGLang 0.5.6 never; SpecForge 0.2.0 trains full attention
(specforge/modeling/draft/flex_attention.py:108-127). The numerics are held to speculators' own forward pass in
tests/test_forward_peers.py (the peer variant "sliding-window"), and what a window served without costs to
tests/test_trained_world.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3_checks import engines
from eagle3_checks.cli import main
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.engines.reading import differences
from helpers import SGLANG, codes, run

WINDOW = 16


def _windowed(drafter, layout: str, provenance: str | None = None, version: str | None = None,
              window: int | None = WINDOW) -> Path:
    d = drafter(layout)
    fields = d.layer_config
    fields["layer_types"] = ["sliding_attention"]
    fields["use_sliding_window"] = True
    if window is not None:
        fields["sliding_window"] = window
    if provenance:
        d.config["eagle3_checks_provenance"] = {"trainer": provenance}
    if version:
        d.config["speculators_version"] = version
    return d.write()




def test_each_release_reads_the_window_as_its_source_does(drafter):
    ckpt = open_checkpoint(_windowed(drafter, "speculators"))
    trained = engines.trainer(ckpt)
    assert trained.window() == (WINDOW, (0,)) and trained.window_from == "row"
    assert "core.py:96-105" in trained.sources["sliding_window"]
    served = engines.read(ckpt, "vllm@0.33.0")
    assert served.window() == (WINDOW, (0,)) and served.window_from == "query"
    assert "llama.py:185-205" in served.sources["sliding_window"]
    assert differences(served, trained) == []  # the same window: measured from another place, a note (below)
    # speculators before 0.7.0 built no window: a drafter stating it was trained by 0.6.0 was trained without one
    old = engines.trainer(open_checkpoint(_windowed(drafter, "speculators", version="0.6.0")))
    assert old.window() is None and "before 0.7.0" in old.sources["sliding_window"]


def test_sglang_reads_the_window_only_from_its_launch(drafter):
    ckpt = open_checkpoint(_windowed(drafter, "flat", provenance="speculators"))
    assert engines.trainer(ckpt).window() == (WINDOW, (0,))
    plain = engines.read(ckpt, f"sglang@{SGLANG}")
    assert plain.window() is None and "llama_eagle3.py:284-299" in plain.sources["sliding_window"]
    assert differences(plain, engines.trainer(ckpt)) == ["sliding_window"]
    launched = engines.read(ckpt, f"sglang@{SGLANG}", launch={"args": {"speculative-draft-window-size": WINDOW - 1}})
    assert launched.window() == (WINDOW, (0,))  # N + 1 keys for N
    assert engines.read(ckpt, "sglang@0.5.6", launch={"args": {"speculative-draft-window-size": 15}}).window() is None
    # SpecForge trains full attention whatever the config carries
    specforge = engines.trainer(open_checkpoint(_windowed(drafter, "flat")))
    assert specforge.window() is None and "flex_attention.py:108-127" in specforge.sources["sliding_window"]


def test_a_window_served_without_is_an_error_from_the_context_it_binds(drafter, tmp_path):
    path = _windowed(drafter, "flat", provenance="speculators")
    result = run(path, engine=(f"sglang@{SGLANG}",))
    found = [f for f in result.findings() if f.code == "engine.semantics/sliding-window"]
    assert len(found) == 1 and found[0].severity.value == "error"
    assert f"up to {WINDOW} tokens and differently from {WINDOW + 1}" in found[0].message
    assert f"--speculative-draft-window-size {WINDOW - 1}" in found[0].fix
    # launched with the window (what the recipe writes), nothing is left; served within the window, a note
    launch = tmp_path / "launch.json"
    launch.write_text(json.dumps({"args": {"speculative-draft-window-size": WINDOW - 1}}))
    assert "engine.semantics/sliding-window" not in codes(run(path, engine=(f"sglang@{SGLANG}",),
                                                             launch=[f"sglang={launch}"]))
    within = run(path, engine=(f"sglang@{SGLANG}",), max_model_len=WINDOW)
    assert "engine.semantics/sliding-window-within-context" in codes(within)
    assert "engine.semantics/sliding-window" not in codes(within)


def test_a_window_the_trainer_never_used_is_removed_by_fix(drafter, tmp_path, capsys):
    """A flat drafter whose config carries layer_types. Trained by SpecForge (--trainer: full attention), vLLM would
    slide: the finding's patch removes the fields, and fix converges, the fixed drafter has no window finding left.
    Who trained it unknown, speculators (the window) and SpecForge (none) stay possible: a warning that states both,
    no patch."""
    path = _windowed(drafter, "flat")
    unknown = [f for f in run(path, engine=("vllm@0.33.0",)).findings() if f.code == "engine.semantics/sliding-window"]
    assert unknown and unknown[0].severity.value == "warning" and not unknown[0].patch
    found = [f for f in run(path, engine=("vllm@0.33.0",), trainer="specforge").findings()
             if f.code == "engine.semantics/sliding-window"]
    assert found and found[0].severity.value == "error" and {op["op"] for op in found[0].patch} == {"remove"}
    fixed = tmp_path / "fixed"
    main(["fix", str(path), str(fixed), "--engine", "vllm@0.33.0", "--trainer", "specforge"])
    capsys.readouterr()
    assert "layer_types" not in json.loads((fixed / "config.json").read_text())
    assert "engine.semantics/sliding-window" not in codes(run(fixed, engine=("vllm@0.33.0",), trainer="specforge"))


def test_vllm_measures_the_window_from_the_draft_position_a_note(drafter):
    path = _windowed(drafter, "speculators")
    result = run(path, engine=("vllm@0.33.0",))
    notes = [f for f in result.findings() if f.code == "engine.semantics/window-anchor"]
    assert notes and notes[0].severity.value == "info"
    assert "engine.semantics/sliding-window" not in codes(result)


def test_the_sglang_recipe_launches_with_the_trained_window(drafter, capsys):
    """The recipe writes N = W - 1, and the gate it runs with that launch finds no window left to report (whatever
    else it finds about this example's aux ids)."""
    path = _windowed(drafter, "flat", provenance="speculators")
    main(["recipe", str(path), "--engine", "sglang", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert f'"speculative-draft-window-size": {WINDOW - 1}' in json.dumps(doc)
    assert not [f for f in doc["findings"] if f["code"].startswith("engine.semantics/sliding-window")]


@pytest.mark.parametrize("window", [None, 0])
def test_a_window_without_a_size_is_none(drafter, window):
    """layer_types without sliding_window (speculators and vLLM pass None: full attention), and vLLM's 0 (none,
    config/model.py:815-821)."""
    ckpt = open_checkpoint(_windowed(drafter, "speculators", window=window))
    assert engines.trainer(ckpt).window() is None and engines.read(ckpt, "vllm@0.33.0").window() is None
