"""Property tests: any valid vocabulary mapping passes; any single corruption of it fails, naming the check."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from eagle3_checks.drafter.example import EXAMPLE
from eagle3_checks.storage.safetensors import from_numpy
from helpers import Drafter, run


@st.composite
def mappings(draw):
    """(V, DV, sorted target ids of the draft vocabulary)."""
    v = draw(st.integers(min_value=32, max_value=600))
    dv = draw(st.integers(min_value=16, max_value=v - 1))
    ids = draw(st.lists(st.integers(0, v - 1), min_size=dv, max_size=dv, unique=True))
    return v, dv, np.array(sorted(ids), dtype=np.int64)


def _gate(tmp_path_factory, v, dv, d2t, t2d):
    shape = replace(EXAMPLE, vocab_size=v, draft_vocab_size=dv, embed_tokens=False)
    d = Drafter(tmp_path_factory.mktemp("p"), "flat", shape)
    d.tensors["d2t"] = from_numpy(np.asarray(d2t, dtype=np.int64))
    if t2d is None:
        d.tensors.pop("t2d", None)
    else:
        d.tensors["t2d"] = from_numpy(np.asarray(t2d, dtype=bool))
    return run(d.write())


def _mask(v, ids):
    m = np.zeros(v, bool)
    m[ids[(ids >= 0) & (ids < v)]] = True
    return m


@given(mappings())
def test_valid_mappings_pass(tmp_path_factory, mapping):
    v, dv, ids = mapping
    result = _gate(tmp_path_factory, v, dv, ids - np.arange(dv), _mask(v, ids))
    assert result.result("vocab.d2t").status == "passed"  # with t2d present, no heuristic is needed
    assert result.result("vocab.t2d").status == "passed"
    assert result.exit_code == 0


@given(mappings(), st.sampled_from(["absolute", "shift", "duplicate", "swap"]), st.data())
def test_corrupted_mappings_fail(tmp_path_factory, mapping, corruption, data):
    v, dv, ids = mapping
    d2t = ids - np.arange(dv)
    t2d = _mask(v, ids)
    if corruption == "absolute":
        d2t = ids.copy()  # target ids written where offsets belong
    elif corruption == "shift":
        i = data.draw(st.integers(0, dv - 1))
        d2t = d2t.copy()
        d2t[i] += data.draw(st.sampled_from([-1, 1]))
    elif corruption == "duplicate":
        i = data.draw(st.integers(1, dv - 1))
        d2t = d2t.copy()
        d2t[i] = ids[i - 1] - i  # draft id i maps to draft id i-1's target
    else:
        i = data.draw(st.integers(0, dv - 2))
        swapped = ids.copy()
        swapped[[i, i + 1]] = swapped[[i + 1, i]]
        d2t = swapped - np.arange(dv)
    result = _gate(tmp_path_factory, v, dv, d2t, t2d)
    messages = [f.message for c in ("vocab.d2t", "vocab.t2d") for f in result.result(c).findings
                if f.severity.value == "error"]
    expected = {"absolute": ("holds absolute target ids", "map outside the target vocabulary"),
                "shift": ("disagree on", "already has", "not increasing", "map outside"),
                "duplicate": ("already has",), "swap": ("not increasing",)}[corruption]
    assert any(e in m for m in messages for e in expected), (corruption, messages)
