"""scan.values and the streaming scanner: NaN/Inf/zero/untrained weights, per-tensor statistics, bounded reads."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eagle3_checks.checks import scan as scan_check
from eagle3_checks.cli import main
from eagle3_checks.numerics import value_stats as scanner
from eagle3_checks.storage.safetensors import RawTensor, from_numpy, read_header
from helpers import assert_golden, run

SCAN = "scan.values"
FC = "fc.weight"


def scan_result(path, **options):
    options.setdefault("level", "scan")
    return run(path, **options).result(SCAN)


def messages(result, severity=None):
    return [f.message for f in result.findings if severity is None or f.severity.value == severity]


def with_values(d, role, values: np.ndarray, dtype="BF16"):
    """Replace one tensor of drafter ``d`` by ``values`` (same shape)."""
    name = d.name(role)
    assert values.shape == d.tensors[name].shape
    d.tensors[name] = from_numpy(values.astype(np.float32), dtype)
    return d


def fc_values(d, seed=0):
    shape = d.tensors[d.name(FC)].shape
    return np.random.default_rng(seed).standard_normal(shape) / math.sqrt(shape[-1])


# ----- the check on whole drafters ------------------------------------------------------------------------------

def test_example_passes_with_statistics(drafter):
    d = drafter("flat")
    r = scan_result(d.write())
    assert r.status == "passed", messages(r)
    stats = r.data["tensors"]
    assert set(stats) == {n for n, t in d.tensors.items() if t.dtype == "BF16"}
    fc = stats["fc.weight"]
    exact = np.frombuffer(d.tensors["fc.weight"].data, "<u2").astype(np.uint32) << 16
    exact = exact.view(np.float32)
    assert fc["max_abs"] == pytest.approx(float(np.abs(exact).max()), rel=1e-6)
    assert fc["mean"] == pytest.approx(float(exact.mean()), abs=1e-4)
    assert fc["std"] == pytest.approx(float(exact.std()), rel=1e-3)
    assert fc["nan"] == 0 and fc["inf"] == 0 and fc["numel"] == exact.size
    assert r.data["bytes_scanned"] == sum(t.nbytes for t in d.tensors.values() if t.dtype == "BF16")


def test_nan_is_an_error_with_count_and_first_index(drafter):
    d = drafter("flat")
    v = fc_values(d)
    v[3, 7] = v[5, 0] = v[5, 1] = np.nan
    r = scan_result(with_values(d, FC, v).write())
    assert r.status == "failed"
    f = r.findings[0]
    assert f.message == f"fc.weight: 3 NaN of {v.size} values, the first at index (3, 7)"
    assert f.file == "model.safetensors" and f.key == "fc.weight" and f.code == "scan.values/non-finite"
    assert_golden("test_scan/test_nan_is_an_error_with_count_and_first_index.txt", f"{f.message}\n{f.why}\n{f.fix}\n")


@pytest.mark.parametrize("dtype", ["BF16", "F16", "F32"])
def test_inf_in_every_float_dtype(drafter, dtype):
    d = drafter("flat")
    v = fc_values(d)
    v[0, 2], v[1, 1] = np.inf, -np.inf
    with_values(d, FC, v, dtype)
    r = scan_result(d.write())
    assert messages(r, "error") == [f"fc.weight: 2 Inf of {v.size} values, the first at index (0, 2)"]


@pytest.mark.parametrize("dtype, bad, kind", [
    ("F8_E4M3", 0x7F, "NaN"),   # e4m3fn: S.1111.111 is NaN (no Inf exists)
    ("F8_E4M3", 0xFF, "NaN"),
    ("F8_E5M2", 0x7C, "Inf"),
    ("F8_E5M2", 0xFE, "NaN"),
])
def test_fp8_nan_and_inf(drafter, dtype, bad, kind):
    d = drafter("flat")
    shape = d.tensors[FC].shape
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 0x70, size=shape, dtype=np.uint8) | (rng.integers(0, 2, size=shape, dtype=np.uint8) << 7)
    raw.flat[17] = bad
    d.tensors[FC] = RawTensor(dtype, shape, raw.tobytes())
    r = scan_result(d.write(), waive=["dtypes=fp8 weights on purpose"])
    assert f"fc.weight: 1 {kind} of {raw.size} values, the first at index (0, 17)" in messages(r, "error")


def test_all_zero_weight_is_an_error_and_zero_bias_a_warning(drafter):
    d = drafter("flat")
    with_values(d, FC, np.zeros(d.tensors[FC].shape))
    d.config["attention_bias"] = True
    for p, width in (("q", d.shape.num_attention_heads), ("k", d.shape.num_key_value_heads),
                     ("v", d.shape.num_key_value_heads)):
        d.tensors[f"midlayer.self_attn.{p}_proj.bias"] = from_numpy(np.zeros(width * d.shape.head_dim, np.float32),
                                                                     "BF16")
    r = scan_result(d.write())
    assert "fc.weight: every value is zero" in messages(r, "error")
    assert "midlayer.self_attn.q_proj.bias: every value is zero" in messages(r, "warning")


def test_norm_left_at_one_or_far_from_scale(drafter):
    d = drafter("flat")
    n = d.tensors["norm.weight"].shape
    with_values(d, "norm.weight", np.ones(n))
    with_values(d, "layers.0.hidden_norm.weight", np.full(n, 300.0))
    r = scan_result(d.write())
    assert r.status == "warned"
    assert "norm.weight: every value is 1.0, RMSNorm's initial value" in messages(r, "warning")
    assert "midlayer.hidden_norm.weight: largest scale 300, far from an RMSNorm's usual range" in messages(r)


def untrained_shape():
    from dataclasses import replace

    from eagle3_checks.drafter.example import EXAMPLE

    return replace(EXAMPLE, hidden_size=128, intermediate_size=256)  # enough elements for the moments


@pytest.mark.parametrize("init, expect", [
    (lambda rng, s: rng.normal(0, 0.02, s), "normal(0, 0.02) (transformers' initializer_range)"),
    (lambda rng, s: rng.uniform(-1 / math.sqrt(s[-1]), 1 / math.sqrt(s[-1]), s), "(nn.Linear's default initialis"),
])
def test_untrained_initialisers_warn(drafter, init, expect):
    d = drafter("flat", untrained_shape())
    rng = np.random.default_rng(1)
    with_values(d, FC, init(rng, d.tensors[FC].shape))
    r = scan_result(d.write())
    assert r.status == "warned"
    [m] = messages(r, "warning")
    assert m.startswith("fc.weight: its statistics match ") and expect in m


def test_untrained_embedding_warns(drafter):
    d = drafter("flat", untrained_shape())
    shape = d.tensors["embed_tokens.weight"].shape
    with_values(d, "embed_tokens.weight", np.random.default_rng(2).standard_normal(shape))
    [m] = messages(scan_result(d.write()), "warning")
    assert m.startswith("embed_tokens.weight: its statistics match nn.Embedding's normal(0, 1) initialisation")


@pytest.mark.parametrize("make", [
    lambda rng, s: rng.standard_t(4, s) * 0.02 / math.sqrt(2),  # heavy tails at the initializer_range's scale
    lambda rng, s: np.where(rng.random(s) < 1e-3, 8.0, 1.0) * rng.normal(0, 0.02, s),  # a Gaussian body, outliers
    lambda rng, s: rng.normal(0, 0.02, s) + 0.012 * np.sin(np.arange(s[-1]) * 0.7),  # init plus a column pattern
], ids=["heavy-tails", "outliers", "init-plus-update"])
def test_trained_looking_weights_do_not_warn(drafter, make):
    d = drafter("flat", untrained_shape())
    r = scan_result(with_values(d, FC, make(np.random.default_rng(3), d.tensors[FC].shape)).write())
    assert r.status == "passed", messages(r)


def test_the_sample_walks_across_columns(drafter):
    """A 512 x 512 tensor where every 4th column alone looks freshly initialised: the sample must not see only
    those columns (a stride that divides the row length would)."""
    rng = np.random.default_rng(5)
    v = rng.standard_t(3, (512, 512)) * 0.05
    v[:, ::4] = rng.normal(0, 0.02, (512, 128))
    from eagle3_checks.storage.safetensors import write_safetensors

    path = drafter("flat").root
    path.mkdir(parents=True)
    write_safetensors(path / "w.safetensors", {"w": from_numpy(v.astype(np.float32), "BF16")})
    old = scanner.SAMPLE
    scanner.SAMPLE = 512 * 512 // 4  # a stride of 4 before it is made coprime with the row
    try:
        st_ = scanner.scan([read_header(path / "w.safetensors", "w").entries["w"]]).stats["w"]
    finally:
        scanner.SAMPLE = old
    assert scanner.sample_step(512 * 512, (512, 512)) == 5
    assert st_.std > 0.04 and st_.kurtosis > 1, (st_.std, st_.kurtosis)


def test_nan_in_the_second_shard_names_that_shard(drafter):
    d = drafter("speculators")
    v = np.random.default_rng(0).standard_normal(d.tensors["lm_head.weight"].shape)
    v[-1, -1] = np.nan
    with_values(d, "lm_head.weight", v)
    path = d.write(shards=2)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    r = scan_result(path)
    [f] = [f for f in r.findings if f.severity.value == "error"]
    assert f.file == index["weight_map"]["lm_head.weight"] and f.key == "lm_head.weight"
    rows, cols = v.shape
    assert f.message.endswith(f"the first at index ({rows - 1}, {cols - 1})")


def test_truncated_file_scans_what_is_there(drafter):
    path = drafter("flat").write()
    f = path / "model.safetensors"
    entries = read_header(f, "m").entries
    cut = entries["fc.weight"].offset + 10  # inside fc.weight: it and every later tensor are past the end
    f.write_bytes(f.read_bytes()[:cut])
    result = run(path, level="scan")
    assert result.result("files").status == "failed"  # the truncation is the files check's finding
    r = result.result(SCAN)
    later = sorted(n for n, e in entries.items() if e.offset + e.nbytes > cut)
    assert r.data["not_scanned"] == later and "fc.weight" in later
    assert set(r.data["tensors"]) == {n for n, e in entries.items() if n not in later and e.dtype == "BF16"}


def test_a_file_that_shrinks_during_the_scan_is_an_error(drafter):
    path = drafter("flat").write()
    f = path / "model.safetensors"
    entry = read_header(f, "model.safetensors").entries["fc.weight"]
    f.write_bytes(f.read_bytes()[:entry.offset + 10])
    stats = scanner.scan([entry]).stats["fc.weight"]
    assert stats.error == f"model.safetensors ends inside fc.weight (element 5 of {entry.numel})"
    assert not stats.all_zero


def test_a_checkpoint_truncated_after_it_was_opened(drafter):
    from eagle3_checks.drafter.checkpoint import open_checkpoint
    from eagle3_checks.gate import GateOptions, run_gate

    path = drafter("flat").write()
    ckpt = open_checkpoint(path)  # headers read while the file was whole
    f = path / "model.safetensors"
    f.write_bytes(f.read_bytes()[:ckpt.tensors["fc.weight"].offset + 10])
    r = run_gate(ckpt, GateOptions(reference="none", level="scan")).result(SCAN)
    assert r.status == "failed"
    assert "fc.weight: cannot be read (model.safetensors ends inside fc.weight (element 5 of" in messages(r)[0]


def test_json_report_carries_statistics_and_text_shows_the_table(drafter, capsys):
    path = drafter("flat").write()
    assert main(["check", str(path), "--level", "scan", "--reference", "none", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    [scan] = [c for c in report["checkpoints"][0]["checks"] if c["id"] == SCAN]
    assert scan["data"]["tensors"]["fc.weight"]["dtype"] == "BF16"
    assert {"mean", "std", "max_abs", "nan", "inf", "numel"} <= set(scan["data"]["tensors"]["fc.weight"])
    assert main(["check", str(path), "--level", "scan", "--reference", "none"]) == 0
    text = capsys.readouterr().out
    assert main(["check", str(path), "--level", "scan", "--reference", "none", "--format", "markdown"]) == 0
    markdown = capsys.readouterr().out
    # the scan's part of each report: its line and table in text, the statistics block in markdown
    table = text[text.index("  PASS  scan.values"):].splitlines()
    table = table[:next(i for i, line in enumerate(table) if i and not line.startswith(" " * 8))]
    block = markdown[markdown.index("<details><summary>Weight statistics"):]
    assert_golden("test_scan/test_json_report_carries_statistics_and_text_shows_the_table.txt",
                  "\n".join(table) + "\n\n" + block[:block.index("</details>") + len("</details>")] + "\n")


def test_progress_bar_only_on_a_terminal_and_in_text(drafter, capsys, monkeypatch):
    path = drafter("flat").write()
    monkeypatch.setattr(scan_check, "PROGRESS_FROM", 0)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    main(["check", str(path), "--level", "scan", "--reference", "none"])
    err = capsys.readouterr().err
    # the bar redraws its line: each carriage return written as a visible \r and a line break (a golden file keeps
    # no carriage return)
    assert_golden("test_scan/test_progress_bar_only_on_a_terminal_and_in_text.txt", err.replace("\r", "\\r\n"))
    main(["check", str(path), "--level", "scan", "--reference", "none", "--format", "json"])
    assert capsys.readouterr().err == ""  # no progress bar, nor anything else
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    main(["check", str(path), "--level", "scan", "--reference", "none"])
    assert capsys.readouterr().err == ""  # no progress bar, nor anything else


def test_scan_level_never_imports_torch(drafter):
    path = drafter("flat").write()
    code = ("import sys; from eagle3_checks.cli import main; rc = main(['check', sys.argv[1], '--level', 'scan', "
            "'--format', 'json']); assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert '"scan.values"' in proc.stdout


def test_header_level_does_not_scan(drafter):
    d = drafter("flat")
    v = fc_values(d)
    v[0, 0] = np.nan
    result = run(with_values(d, FC, v).write(), level="header")
    assert SCAN not in {r.check.id for r in result.results} and result.exit_code == 0


# ----- the scanner against numpy, across chunk boundaries ---------------------------------------------------------

_NP = {"BF16": None, "F16": np.float16, "F32": np.float32, "F64": np.float64}


def reference(values: np.ndarray, dtype: str):
    """What the scanner must find, computed with numpy on the values as stored."""
    if dtype == "BF16":
        stored = np.frombuffer(from_numpy(values.astype(np.float32), "BF16").data, "<u2").astype(np.uint32) << 16
        stored = stored.view(np.float32)
    else:
        stored = values.astype(_NP[dtype])
    finite = stored[np.isfinite(stored)]
    bad = np.flatnonzero(~np.isfinite(stored))
    return (int(np.isnan(stored).sum()), int(np.isinf(stored).sum()), int(bad[0]) if bad.size else None,
            float(np.abs(finite).max()) if finite.size else 0.0, stored)


@given(dtype=st.sampled_from(sorted(_NP)), n=st.integers(1, 3000), chunk=st.sampled_from([8, 24, 64, 1 << 12]),
       sample=st.sampled_from([7, 100, 1 << 16]),
       seed=st.integers(0, 2**16), specials=st.lists(st.tuples(st.integers(0, 2999), st.sampled_from(
           [np.nan, np.inf, -np.inf, 0.0, -0.0, 65504.0, 1e-8])), max_size=6))
def test_scanner_matches_numpy(tmp_path_factory, dtype, n, chunk, sample, seed, specials):
    values = np.random.default_rng(seed).standard_normal(n) * 3
    for i, v in specials:
        values[i % n] = v
    raw = from_numpy(values.astype(np.float32), "BF16") if dtype == "BF16" else from_numpy(values.astype(_NP[dtype]))
    path = tmp_path_factory.mktemp("scan") / "x.safetensors"
    from eagle3_checks.storage.safetensors import write_safetensors

    write_safetensors(path, {"pad": RawTensor("U8", (3,), b"abc"), "x": raw})
    entry = read_header(path, "x.safetensors").entries["x"]
    old = scanner.CHUNK, scanner.SAMPLE
    scanner.CHUNK, scanner.SAMPLE = chunk, sample
    try:
        st_ = scanner.scan([entry]).stats["x"]
        step = scanner.sample_step(n, (n,))
    finally:
        scanner.CHUNK, scanner.SAMPLE = old
    nan, inf, first, max_abs, stored = reference(values, dtype)
    assert (st_.nan, st_.inf, st_.first_nonfinite) == (nan, inf, first)
    assert st_.max_abs == max_abs
    assert st_.all_zero == (max_abs == 0.0 and nan == 0)
    picked = stored[::step].astype(np.float64)  # the sample: every step-th element, across chunk boundaries
    picked = picked[np.isfinite(picked)]
    assert st_.sample == picked.size
    if picked.size:
        assert st_.mean == pytest.approx(picked.mean(), rel=1e-9, abs=1e-12)
        assert st_.std == pytest.approx(picked.std(), rel=1e-9, abs=1e-12)


def test_to_float_decodes_fp8_exactly():
    e4m3 = np.arange(256, dtype=np.uint8)
    got = scanner.to_float(e4m3, "F8_E4M3")
    assert got[0x08] == 2.0 ** -6 and got[0x01] == 2.0 ** -9 and got[0x7E] == 448.0 and got[0xFE] == -448.0
    assert np.isnan(got[0x7F]) and np.isnan(got[0xFF]) and np.isfinite(got[:0x7F]).all()
    e5m2 = scanner.to_float(np.array([0x3C, 0x7B, 0x7C, 0x7D, 0x01], np.uint8), "F8_E5M2")
    assert e5m2[0] == 1.0 and e5m2[1] == 57344.0 and np.isinf(e5m2[2]) and np.isnan(e5m2[3]) and e5m2[4] == 2.0 ** -16


@pytest.mark.parametrize("dtype, torch_dtype", [("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2")])
def test_fp8_scan_matches_torch(tmp_path, dtype, torch_dtype):
    """Every fp8 code, decoded by torch (an independent reader), against the scanner's counts and maximum."""
    torch = pytest.importorskip("torch")
    codes = np.random.default_rng(6).permutation(np.tile(np.arange(256, dtype=np.uint8), 40))
    ref = torch.frombuffer(bytearray(codes.tobytes()), dtype=getattr(torch, torch_dtype)).float().numpy()
    np.testing.assert_array_equal(scanner.to_float(np.arange(256, dtype=np.uint8), dtype),
                                  torch.arange(256, dtype=torch.uint8).view(getattr(torch, torch_dtype)).float()
                                  .numpy())
    from eagle3_checks.storage.safetensors import write_safetensors

    write_safetensors(tmp_path / "f.safetensors", {"x": RawTensor(dtype, (codes.size,), codes.tobytes())})
    entry = read_header(tmp_path / "f.safetensors", "f").entries["x"]
    old = scanner.CHUNK
    scanner.CHUNK = 1000
    try:
        st_ = scanner.scan([entry]).stats["x"]
    finally:
        scanner.CHUNK = old
    bad = np.flatnonzero(~np.isfinite(ref))
    assert (st_.nan, st_.inf) == (int(np.isnan(ref).sum()), int(np.isinf(ref).sum()))
    assert st_.first_nonfinite == int(bad[0])
    assert st_.max_abs == float(np.abs(ref[np.isfinite(ref)]).max())


def test_memory_is_bounded_by_the_chunk(tmp_path):
    """One reused read buffer per thread: scanning 64 MB allocates no tensor-sized array."""
    import tracemalloc

    from eagle3_checks.storage.safetensors import write_safetensors

    path = tmp_path / "big.safetensors"
    write_safetensors(path, {"w": RawTensor("BF16", (4096, 8192))})  # 64 MB of zeros, sparse
    entry = read_header(path, "big.safetensors").entries["w"]
    tracemalloc.start()
    result = scanner.scan([entry])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert result.stats["w"].all_zero
    assert peak < 3 * scanner.CHUNK, f"peak {peak / 1e6:.1f} MB for a 64 MB tensor"
    # every value NaN: the slow path (counting and locating) allocates per chunk too, never per tensor
    nan = tmp_path / "nan.safetensors"
    write_safetensors(nan, {"w": RawTensor("BF16", (4096, 8192), b"\xc0\x7f" * (4096 * 8192))})
    entry = read_header(nan, "nan.safetensors").entries["w"]
    tracemalloc.start()
    result = scanner.scan([entry])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert result.stats["w"].nan == 4096 * 8192
    assert peak < 8 * scanner.CHUNK, f"peak {peak / 1e6:.1f} MB for a 64 MB all-NaN tensor"


@pytest.mark.parametrize("layout", ["flat", "speculators"])
def test_the_configs_initializer_range_is_the_one_matched(drafter, layout):
    d = drafter(layout, untrained_shape())
    with_values(d, FC, np.random.default_rng(4).normal(0, 0.01, d.tensors[FC].shape))
    assert scan_result(d.write()).status == "passed"  # normal(0, 0.01) is no initialiser by default
    d.layer_config["initializer_range"] = 0.01
    [m] = messages(scan_result(d.write()), "warning")
    assert "normal(0, 0.01) (transformers' initializer_range)" in m


def test_many_tiny_tensors_open_the_file_once(tmp_path, monkeypatch):
    """A header listing 20,000 tensors: one open per file, not per tensor."""
    import builtins

    from eagle3_checks.storage.safetensors import write_safetensors

    path = tmp_path / "many.safetensors"
    write_safetensors(path, {f"t{i}": RawTensor("F32", (2,), b"\0\0\x80\x3f" * 2) for i in range(20_000)})
    entries = list(read_header(path, "many.safetensors").entries.values())
    opened = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: (opened.append(p), real_open(p, *a, **k))[1])
    result = scanner.scan(entries)
    assert len(opened) == 1  # the cost is per file, not per tensor (its time is benchmarks/test_scan.py's)
    assert all(s.max_abs == 1.0 and s.constant for s in result.stats.values()) and len(result.stats) == 20_000


# ----- the scan on threads: the same result as one thread, whatever the timing ------------------------------------

def boundary_checkpoint(path, chunk_elems: int):
    """Tensors whose NaN, Inf, largest magnitude and zeros sit on both sides of chunk boundaries, in four dtypes, then
    a tensor cut short by the end of the file."""
    from eagle3_checks.storage.safetensors import write_safetensors

    rng = np.random.default_rng(7)
    tensors = {}
    for dtype in ("BF16", "F16", "F32", "F64"):
        v = rng.standard_normal((40, chunk_elems)) * 0.5
        e = chunk_elems
        v.flat[e - 1] = np.nan  # the last element of chunk 0
        v.flat[e] = np.inf  # the first of chunk 1
        v.flat[2 * e - 1], v.flat[2 * e] = -np.inf, np.nan
        v.flat[3 * e:4 * e] = np.nan  # a whole chunk of NaN
        v.flat[5 * e - 1] = -1000.0  # the largest finite magnitude, the last of a chunk
        v.flat[5 * e] = 999.0
        v.flat[7 * e:9 * e] = 0.0
        values = v.astype(np.float32) if dtype == "BF16" else v.astype(_NP[dtype])
        tensors[f"w.{dtype}"] = from_numpy(values, dtype) if dtype == "BF16" else from_numpy(values)
    tensors["clean"] = from_numpy(rng.standard_normal((64, chunk_elems // 2)).astype(np.float32), "BF16")
    tensors["zeros"] = from_numpy(np.zeros((3, chunk_elems), np.float32), "BF16")
    tensors["tail"] = from_numpy(rng.standard_normal((16, chunk_elems)).astype(np.float32))
    write_safetensors(path, tensors)
    entries = read_header(path, path.name).entries
    tail = entries["tail"]
    path.write_bytes(path.read_bytes()[:tail.offset + 5 * chunk_elems * 4 + 6])  # inside chunk 5 of the last tensor
    return list(entries.values())


@pytest.mark.parametrize("chunk", [64, 200, 4096])
def test_threads_give_the_single_threaded_result(tmp_path, monkeypatch, chunk):
    """Many chunks (a tiny CHUNK): the findings, counts, first indices and every statistic are equal on one thread
    and on several, and the first NaN or Inf and the first error are the ones a single pass meets."""
    monkeypatch.setattr(scanner, "CHUNK", chunk)
    entries = boundary_checkpoint(tmp_path / "b.safetensors", 32)
    one = scanner.scan(entries, threads=1)
    assert {s.name: s.as_dict() for s in scanner.scan(entries, threads=2).stats.values()} == \
        {s.name: s.as_dict() for s in one.stats.values()}
    assert list(scanner.scan(entries, threads=3).stats) == list(one.stats)
    for dtype in ("BF16", "F16", "F32", "F64"):
        st_ = one.stats[f"w.{dtype}"]
        assert (st_.nan, st_.inf, st_.first_nonfinite) == (2 + 32, 2, 31)
        assert st_.max_abs == 1000.0 and not st_.all_zero
    assert one.stats["zeros"].all_zero
    assert one.stats["tail"].error == f"b.safetensors ends inside tail (element 161 of {16 * 32})"
    assert one.bytes_read == sum(e.nbytes for e in entries)


@pytest.mark.skipif(not hasattr(os, "preadv"), reason="one thread where reads are not positional")
def test_threads_finishing_out_of_order_give_the_same_result(tmp_path, monkeypatch):
    """Chunks that finish in a random order (each sleeps a random while): the result is combined in chunk order."""
    import random
    import time

    monkeypatch.setattr(scanner, "CHUNK", 64)
    entries = boundary_checkpoint(tmp_path / "b.safetensors", 32)
    expect = {s.name: s.as_dict() for s in scanner.scan(entries, threads=1).stats.values()}
    real, order, rnd = scanner._scan_chunk, [], random.Random(3)

    def late(c, buf):
        time.sleep(rnd.random() * 1e-3)
        real(c, buf)
        order.append((c.tensor.entry.name, c.start))

    monkeypatch.setattr(scanner, "_scan_chunk", late)
    progress = []
    got = scanner.scan(entries, progress=lambda done, total: progress.append(done), threads=2)
    assert {s.name: s.as_dict() for s in got.stats.values()} == expect
    assert len(order) > 200 and order != sorted(order, key=lambda k: ([e.name for e in entries].index(k[0]), k[1]))
    assert progress == sorted(progress)  # the progress is reported in chunk order too


def test_the_scan_uses_the_cpus_it_may_run_on(monkeypatch):
    monkeypatch.setattr(scanner.os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert scanner.workers() == 1
    monkeypatch.setattr(scanner.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert scanner.workers() == scanner.WORKERS == 2
