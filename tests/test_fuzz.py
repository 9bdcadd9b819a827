"""Fuzzing the reader and the gate: mutated headers, tensor bytes, configs and indexes of valid drafters.

Whatever the mutation, every command answers with exit 0, 1 or 2 (never 3, the internal-error code), no check
crashes, nothing is written into the checkpoint, and each example finishes within a time bound (an alarm fails a
hang). Examples per test: 100 in the default ``ci`` profile (deterministic), 10,000 with
``HYPOTHESIS_PROFILE=thorough``.

Regressions found by fuzzing, or worth keeping, live in ``tests/corpus/`` (see test_corpus_regressions).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eagle3_checks.cli import main
from eagle3_checks.drafter.example import EXAMPLE, drafter_files, write_checkpoint
from eagle3_checks.storage.safetensors import DTYPES
from helpers import FUZZ, gate_everything

CORPUS = Path(__file__).parent / "corpus"

_BASES: dict[tuple[str, int], Path] = {}
_ROOT = tempfile.TemporaryDirectory(prefix="eagle3-fuzz-base-")


def base(layout: str, shards: int = 1) -> Path:
    """A valid drafter, built once per session."""
    key = (layout, shards)
    if key not in _BASES:
        tensors, config = drafter_files(EXAMPLE, layout, 0)
        _BASES[key] = write_checkpoint(Path(_ROOT.name) / f"{layout}-{shards}", tensors, config, shards)
    return _BASES[key]


@contextlib.contextmanager
def copy_of(layout: str, shards: int = 1):
    with tempfile.TemporaryDirectory(prefix="eagle3-fuzz-") as tmp:
        path = Path(tmp) / "ckpt"
        shutil.copytree(base(layout, shards), path)
        yield path


# ----- strategies --------------------------------------------------------------------------------------------

JSON_SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12)
                | st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63, 2**64, 2**64 + 1, 1e308, "", "F32", "BF16",
                                   "../x", "/etc/passwd", "a\u0000b", "\ud800"]))
JSON = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=8)


def near(value):
    """Values close to a valid one: the mutations most likely to slip past a check."""
    if isinstance(value, bool):
        return st.sampled_from([not value, 0, 1, "true", None])
    if isinstance(value, int):
        return st.sampled_from([value + 1, value - 1, -value, 2 * value, value // 2, 0, -1, float(value), str(value),
                                2**63 - 1, 2**64, [value]])
    if isinstance(value, float):
        return st.sampled_from([value * 2, -value, 0.0, float("inf"), float("nan"), str(value)]
                               + ([int(value)] if math.isfinite(value) and abs(value) < 2**64 else []))
    if isinstance(value, str):
        return st.sampled_from([value.upper(), value + "x", "", value[:-1], [value], None, 7])
    if isinstance(value, list):
        return st.sampled_from([value[:-1], value + value[-1:], value[::-1], [str(v) for v in value], [], {}, None]
                               if value else [[0], [-1], None])
    return st.just(None)


def read_st(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(path: Path, header: dict, data: bytes) -> None:
    body = json.dumps(header).encode("utf-8", "surrogatepass")
    path.write_bytes(struct.pack("<Q", len(body)) + body + data)


def paths(obj, prefix=()):
    """Every path to a value inside nested dicts."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield prefix + (k,)
            yield from paths(v, prefix + (k,))


def set_path(obj: dict, path: tuple, value, delete: bool) -> None:
    for k in path[:-1]:
        obj = obj[k]
    if delete:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


# ----- the fuzz tests ----------------------------------------------------------------------------------------

@FUZZ
@given(data=st.data(), layout=st.sampled_from(["flat", "speculators"]))
def test_mutated_header_json(data, layout):
    with copy_of(layout) as path:
        f = path / "model.safetensors"
        header, body = read_st(f)
        for _ in range(data.draw(st.integers(1, 3))):
            name = data.draw(st.sampled_from(sorted(header) + ["__metadata__", "new.weight"]))
            entry = header.get(name)
            if isinstance(entry, dict) and entry and data.draw(st.booleans()):
                field = data.draw(st.sampled_from(sorted(entry)))
                how = data.draw(st.sampled_from(["near", "json", "delete"]))
                if how == "delete":
                    del entry[field]
                else:
                    entry[field] = data.draw(near(entry[field]) if how == "near" else JSON)
            elif data.draw(st.booleans()):
                value = header.pop(name, None)
                if data.draw(st.booleans()):  # renamed: any text, a lone surrogate, another tensor's name
                    header[data.draw(st.text(max_size=20) | st.sampled_from(
                        ["fc.weight\ud800", "\udfff", "model.fc.weight", "layers.99999.mlp.up_proj.weight",
                         "midlayer.self_attn.q_proj.weight", "fc_norm.0.weight", "d2t", "a|b`c"]))] = value
            else:
                header[name] = data.draw(JSON | st.fixed_dictionaries({
                    "dtype": st.sampled_from(sorted(DTYPES)) | st.text(max_size=4),
                    "shape": st.lists(st.integers(-2, 2**40), max_size=3),
                    "data_offsets": st.lists(st.integers(-2, len(body) + 64), min_size=2, max_size=2)}))
        write_st(f, header, body)
        gate_everything(path)


@FUZZ
@given(data=st.data(), layout=st.sampled_from(["flat", "speculators"]), shards=st.sampled_from([1, 2]))
def test_mutated_bytes(data, layout, shards):
    with copy_of(layout, shards) as path:
        files = sorted(p for p in path.iterdir() if p.suffix == ".safetensors")
        f = data.draw(st.sampled_from(files))
        raw = bytearray(f.read_bytes())
        (n,) = struct.unpack("<Q", raw[:8])
        hot = st.integers(0, min(len(raw), 8 + n + 16))  # the length, the header, the first data bytes
        anywhere = st.integers(0, len(raw))
        for _ in range(data.draw(st.integers(1, 4))):
            op = data.draw(st.sampled_from(["set", "insert", "delete", "truncate", "length", "value"]))
            at = data.draw(hot | anywhere)
            if op == "set":
                chunk = data.draw(st.binary(min_size=1, max_size=4))
                raw[at:at + len(chunk)] = chunk
            elif op == "insert":
                raw[at:at] = data.draw(st.binary(min_size=1, max_size=8))
            elif op == "delete":
                del raw[at:at + data.draw(st.integers(1, 16))]
            elif op == "truncate":
                del raw[at:]
            elif op == "length":
                raw[0:8] = struct.pack("<Q", data.draw(st.integers(0, 2**64 - 1) | st.sampled_from(
                    [n - 1, n + 1, n + 8, 0, 100_000_001, len(raw)])))
            else:  # NaN, Inf, zeros or fp8 NaN bytes in the data
                raw[at:at + 2] = data.draw(st.sampled_from([b"\xc0\x7f", b"\x80\x7f", b"\x00\x00", b"\x7f\xff"]))
        f.write_bytes(bytes(raw))
        gate_everything(path)


@FUZZ
@given(data=st.data(), layout=st.sampled_from(["flat", "speculators"]))
def test_mutated_config(data, layout):
    with copy_of(layout) as path:
        f = path / "config.json"
        config = json.loads(f.read_text())
        if data.draw(st.integers(0, 9)) == 0:  # raw bytes: not JSON, not UTF-8, cut short
            raw = bytearray(f.read_bytes())
            at = data.draw(st.integers(0, len(raw)))
            raw[at:at + 4] = data.draw(st.binary(max_size=4))
            f.write_bytes(bytes(raw))
        else:
            for _ in range(data.draw(st.integers(1, 3))):
                where = data.draw(st.sampled_from(sorted(paths(config), key=str)))
                try:
                    current = config
                    for k in where:
                        current = current[k]
                except (KeyError, TypeError):
                    continue
                how = data.draw(st.sampled_from(["near", "near", "json", "delete"]))
                try:
                    set_path(config, where, data.draw(near(current) if how == "near" else JSON), how == "delete")
                except (KeyError, TypeError):
                    continue
            f.write_text(json.dumps(config, ensure_ascii=True))
        gate_everything(path)


@FUZZ
@given(data=st.data(), layout=st.sampled_from(["flat", "speculators"]))
def test_mutated_index(data, layout):
    with copy_of(layout, 2) as path:
        f = path / "model.safetensors.index.json"
        index = json.loads(f.read_text())
        names = sorted(index["weight_map"])
        shards = sorted(set(index["weight_map"].values()))
        for _ in range(data.draw(st.integers(1, 3))):
            op = data.draw(st.sampled_from(["shard", "drop", "add"]))
            if op == "shard":
                index["weight_map"][data.draw(st.sampled_from(names))] = data.draw(
                    st.sampled_from(shards + ["../" + shards[0], "/" + shards[0], "", ".", "config.json",
                                              "model.safetensors.index.json", "nope.safetensors", "sub/x",
                                              "a\\..\\b", "ckpt"]) | JSON)
            elif op == "drop":
                index["weight_map"].pop(data.draw(st.sampled_from(names)), None)
            elif op == "add":
                index["weight_map"][data.draw(st.text(max_size=12))] = data.draw(st.sampled_from(shards))
        if data.draw(st.integers(0, 4)) == 0:
            index[data.draw(st.sampled_from(["weight_map", "metadata"]))] = data.draw(JSON)
        f.write_text(json.dumps(index))
        gate_everything(path)


# ----- the corpus --------------------------------------------------------------------------------------------

def corpus_cases() -> list[dict]:
    return json.loads((CORPUS / "cases.json").read_text())["cases"]


@pytest.mark.parametrize("case", corpus_cases(), ids=lambda c: c["name"])
def test_corpus_regressions(tmp_path, case):
    """Each corpus file replaces one file of a valid drafter; the gate answers with the expected finding."""
    path = tmp_path / "ckpt"
    shutil.copytree(base(case.get("layout", "flat"), case.get("shards", 1)), path)
    shutil.copyfile(CORPUS / case["file"], path / case["replaces"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["check", str(path), "--level", "scan", "--reference", "none"])
    assert code == case["exit_code"], out.getvalue()[-3000:]
    assert case["expect"] in out.getvalue(), out.getvalue()[-3000:]
    gate_everything(path)


def test_every_corpus_file_is_a_case():
    files = {p.name for p in CORPUS.iterdir()} - {"cases.json"}
    assert files == {c["file"] for c in corpus_cases()}
