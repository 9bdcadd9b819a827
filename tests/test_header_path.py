"""The header level imports no numpy (d2t and t2d are read with the standard library, checks/vocab.py), nor the
machinery of the later levels and other commands; and the standard library's reading of the vocabulary mapping and
numpy's (used from NUMPY_FROM values) agree, finding for finding, on any mapping."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from eagle3_checks.checks import vocab
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.example import EXAMPLE, FLAT, config, write_example
from eagle3_checks.gate import all_checks, run_check
from eagle3_checks.options import GateOptions
from eagle3_checks.registry import Context
from eagle3_checks.storage.safetensors import from_numpy, write_safetensors

# What a header-level run has no use for: numpy, the scan and forward passes, the other commands' machinery.
NOT_ON_THE_HEADER_PATH = ("numpy", "torch", "eagle3_checks.numerics.value_stats", "eagle3_checks.numerics.draft_steps",
                          "eagle3_checks.defects", "eagle3_checks.check_docs", "eagle3_checks.convert",
                          "eagle3_checks.fix", "eagle3_checks.draft_outputs", "eagle3_checks.drafter.example",
                          "eagle3_checks.storage.torch_bin")
PROBE = ("import sys\nfrom eagle3_checks.cli import main\ncode = main(sys.argv[1:])\n"
         f"print('LOADED', sorted(m for m in sys.modules if m in {NOT_ON_THE_HEADER_PATH!r}))\nsys.exit(code)\n")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_header_level_imports_no_numpy(tmp_path, fmt):
    """The embedded example gated at the header level, with the reference and target options a run gives (auto,
    --target-config): it passes, and the process never imported numpy (nor the rest of NOT_ON_THE_HEADER_PATH)."""
    paths = write_example(tmp_path)
    proc = subprocess.run([sys.executable, "-c", PROBE, "check", str(paths[FLAT]), "--target-config",
                           str(paths["target"] / "config.json"), "--level", "header", "--format", fmt],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "LOADED []"
    if fmt == "json":
        report = json.loads(proc.stdout.rsplit("LOADED", 1)[0])["checkpoints"][0]
        statuses = {c["id"]: c["status"] for c in report["checks"]}
        assert statuses["vocab.d2t"] == statuses["vocab.t2d"] == "passed"  # d2t and t2d were read, and judged


# ----- the two readings of the mapping ------------------------------------------------------------------------------

D2T_DTYPES = ("I64", "I32", "I16", "U64", "U8", "F64", "F32", "F16", "BF16")
T2D_DTYPES = ("BOOL", "U8", "I64", "F32", "BF16")
_NUMPY = {"I64": np.int64, "I32": np.int32, "I16": np.int16, "U64": np.uint64, "U8": np.uint8, "F64": np.float64,
          "F32": np.float32, "F16": np.float16, "BF16": np.float32, "BOOL": np.bool_}


def _tensor(values, dtype: str):
    """``values`` (int64 or float64) in ``dtype``, wrapped or rounded the way numpy casts them."""
    array = np.asarray(values)
    with np.errstate(all="ignore"):
        if dtype == "BOOL":
            return from_numpy(array != 0)
        return from_numpy(array.astype(_NUMPY[dtype]), dtype if dtype == "BF16" else None)


@st.composite
def mappings(draw):
    """(V, DV, d2t values, d2t dtype, t2d values or None, t2d dtype): a valid mapping, then maybe one corruption of d2t
    and one of t2d, each of the kinds the checks tell apart."""
    v = draw(st.one_of(st.integers(2, 40), st.integers(40, 300)))  # both sides of the heuristics' 16 draft ids
    dv = draw(st.one_of(st.integers(1, v), st.integers(min(16, v), v)))
    ids = np.array(sorted(draw(st.lists(st.integers(0, v - 1), min_size=dv, max_size=dv, unique=True))), np.int64)
    d2t = (ids - np.arange(dv)).astype(np.float64)
    kind = draw(st.sampled_from(["valid", "arange", "absolute", "shift", "swap", "duplicate", "outside", "constant",
                                 "zeros", "random", "fraction", "nan"]))
    if kind == "arange":
        d2t = np.arange(dv, dtype=np.float64)
    elif kind == "absolute":
        d2t = ids.astype(np.float64)
    elif kind in ("shift", "swap", "duplicate", "outside", "fraction", "nan"):
        i = draw(st.integers(0, dv - 1))
        j = draw(st.integers(0, dv - 1))
        if kind == "shift":
            d2t[i] += draw(st.sampled_from([-2, -1, 1, 2]))
        elif kind == "swap":
            d2t[i], d2t[j] = ids[j] - i, ids[i] - j
        elif kind == "duplicate":
            d2t[i] = ids[j] - i
        elif kind == "outside":
            d2t[i] = draw(st.sampled_from([-1 - i, v - i, v, 2**40, -(2**40)]))
        elif kind == "fraction":
            d2t[i] += 0.5
        else:
            d2t[i] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    elif kind == "constant":
        d2t = np.full(dv, draw(st.integers(-3, v)), np.float64)
    elif kind == "zeros":
        d2t = np.zeros(dv)
    elif kind == "random":
        d2t = np.array(draw(st.lists(st.integers(-v, v), min_size=dv, max_size=dv)), np.float64)
    d2t_dtype = draw(st.sampled_from(D2T_DTYPES))
    if kind in ("fraction", "nan") and d2t_dtype[0] in "IU":
        d2t_dtype = "F32"  # a fraction or a non-finite value only in a floating d2t
    values = d2t if d2t_dtype[0] == "F" or d2t_dtype == "BF16" else np.trunc(d2t).astype(np.int64)

    t2d_kind = draw(st.sampled_from(["mask", "mask", "none", "none", "none", "other", "count", "length", "values"]))
    mask = np.zeros(v, np.int64)
    mask[ids] = 1
    if t2d_kind == "none":
        return v, dv, values, d2t_dtype, None, "BOOL"
    if t2d_kind == "other":
        other = draw(st.lists(st.integers(0, v - 1), min_size=dv, max_size=dv, unique=True))
        mask = np.zeros(v, np.int64)
        mask[other] = 1
    elif t2d_kind == "count":
        mask[draw(st.integers(0, v - 1))] ^= 1
    elif t2d_kind == "length":
        mask = np.append(mask, draw(st.sampled_from([[0], [1], [0, 1]])))
    elif t2d_kind == "values":
        mask = mask.astype(np.float64)
        mask[draw(st.integers(0, v - 1))] = draw(st.sampled_from([2.0, -1.0, 0.5, np.nan]))
    t2d_dtype = draw(st.sampled_from(T2D_DTYPES if t2d_kind != "values" else ("I64", "F32", "BF16")))
    return v, dv, values, d2t_dtype, mask, t2d_dtype


def _judged(root, numpy_from: int) -> list:
    """Both vocabulary checks on the mapping in ``root``, read with numpy from ``numpy_from`` values: each result's
    status and reason and every finding, field by field."""
    checks = {c.id: c for c in all_checks()}
    ckpt = open_checkpoint(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(vocab, "NUMPY_FROM", numpy_from)
        expected = vocab.NumpyReading if numpy_from == 0 else vocab.PythonReading
        assert vocab.reading(ckpt) is expected
        ctx = Context(ckpt, None, "", None, GateOptions(), None)
        results = [run_check(checks[c], ctx, {}) for c in ("vocab.d2t", "vocab.t2d")]
    return [(r.status, r.reason, [(f.code, f.severity, f.message, f.expected, f.found, f.fix, f.why, f.file, f.key)
                                  for f in r.findings]) for r in results]


@settings(settings.get_profile("fuzz"))  # cheap examples: two tiny files, two checks read twice
@given(mappings())
@example((64, 20, np.full(20, 7), "I64", None, "BOOL"))  # constant (no t2d)
@example((64, 20, np.zeros(20, np.int64), "I32", None, "BOOL"))  # all-zero (no t2d)
@example((64, 20, np.arange(1, 21), "I64", None, "BOOL"))  # absolute ids, told by the heuristic (no t2d)
@example((64, 20, np.r_[np.nan, np.full(19, 1.0)], "F32", None, "BOOL"))  # non-integer, NaN in the preview
@example((2**16, 3, np.array([2**64 - 1, 0, 0], np.uint64), "U64", None, "BOOL"))  # U64 read as int64 (-1)
def test_the_standard_library_and_numpy_readings_agree(tmp_path_factory, mapping):
    v, dv, d2t, d2t_dtype, t2d, t2d_dtype = mapping
    root = tmp_path_factory.mktemp("vocab")
    tensors = {"d2t": _tensor(d2t, d2t_dtype)}
    if t2d is not None:
        tensors["t2d"] = _tensor(t2d, t2d_dtype)
    write_safetensors(root / "model.safetensors", tensors)
    (root / "config.json").write_text(json.dumps(config(replace(EXAMPLE, vocab_size=v, draft_vocab_size=dv), FLAT)))
    python, numpy = _judged(root, numpy_from=2**62), _judged(root, numpy_from=0)
    assert python == numpy
