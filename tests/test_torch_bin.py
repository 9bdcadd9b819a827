"""pytorch_model.bin checkpoints: read at header level from the zip directory and the pickle's opcodes, never
unpickled; gated like the same drafter saved as safetensors; anything but plain tensors refused, never run."""

from __future__ import annotations

import collections
import contextlib
import io
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from eagle3_checks.cli import main
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.example import EXAMPLE, drafter_files, write_checkpoint
from eagle3_checks.gate import gate, parse_options
from eagle3_checks.storage.safetensors import DTYPES, RawTensor, load_array, read_bytes
from eagle3_checks.storage.torch_bin import read_bin, walk_pickle
from helpers import FUZZ, assert_fails, assert_golden, gate_everything

torch = pytest.importorskip("torch")


# ----- helpers -----------------------------------------------------------------------------------------------

def to_torch(t: RawTensor):
    if t.dtype == "BF16":
        return torch.from_numpy(np.frombuffer(t.data, "<i2").copy()).view(torch.bfloat16).reshape(t.shape)
    return torch.from_numpy(np.frombuffer(t.data, DTYPES[t.dtype][2]).copy()).reshape(t.shape)


def write_bin(path: Path, tensors: dict[str, RawTensor], config: dict | None, shards: int = 1) -> Path:
    """The drafter as torch.save writes it: pytorch_model.bin, or shards and pytorch_model.bin.index.json."""
    path.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (path / "config.json").write_text(json.dumps(config, indent=2))
    state = {k: to_torch(v) for k, v in tensors.items()}
    if shards == 1:
        torch.save(state, path / "pytorch_model.bin")
        return path
    names = list(state)
    per = -(-len(names) // shards)
    weight_map = {}
    for i in range(shards):
        fname = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
        part = names[i * per:(i + 1) * per]
        torch.save({n: state[n] for n in part}, path / fname)
        weight_map.update({n: fname for n in part})
    (path / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return path


def rezip(src: Path, dst: Path, replace: dict | None = None, deflate=lambda name: False) -> None:
    """Rewrite a torch.save archive entry by entry (zipfile, STORED unless ``deflate(name)``), some replaced."""
    replace = replace or {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            for suffix, new in replace.items():
                if info.filename.endswith(suffix):
                    data = new(data) if callable(new) else new
            zout.writestr(info.filename, data,
                          zipfile.ZIP_DEFLATED if deflate(info.filename) else zipfile.ZIP_STORED)


def pkl_of(path: Path) -> bytes:
    with zipfile.ZipFile(path) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))


def gate_at(path: Path, level: str, **kw):
    return gate(path, parse_options(reference="none", engine="vllm", level=level, **kw))


def check_lines(out: str, check: str) -> list[str]:
    """One check's part of a text report: its status line (the padding after the check id closed up) and the
    indented lines of its findings below it."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line[8:].split(" ")[0] == check)
    block = [re.sub(r"(?<=\S)  +", "  ", lines[at])]
    return block + list(itertools.takewhile(lambda line: line.startswith(" " * 8), lines[at + 1:]))


def summary(result) -> list:
    """Every check's status and findings, with the weight file's name taken out."""
    def clean(text):
        return None if text is None else text.replace("pytorch_model.bin", "WEIGHTS").replace(
            "model.safetensors", "WEIGHTS")
    return [(r.check.id, r.status, sorted((f.severity.value, clean(f.message), clean(f.expected), clean(f.found))
                                          for f in r.findings)) for r in result.results]


@pytest.fixture
def pair(tmp_path):
    """The example flat drafter as safetensors and as pytorch_model.bin, with the same config.json."""
    def make(edit=lambda tensors, config: None, shards: int = 1):
        tensors, config = drafter_files(EXAMPLE, "flat")
        edit(tensors, config)
        st_ = write_checkpoint(tmp_path / f"st{shards}", tensors, config, shards)
        return st_, write_bin(tmp_path / f"bin{shards}", tensors, config, shards)
    return make


# ----- a drafter written by torch.save gates like the same drafter in safetensors -------------------------------

@pytest.mark.parametrize("level", ["header", "scan", "forward"])
def test_bin_drafter_gates_like_its_safetensors_twin(pair, level):
    st_path, bin_path = pair()
    a, b = gate_at(st_path, level), gate_at(bin_path, level)
    assert a.exit_code == b.exit_code == 0
    assert summary(a) == summary(b)
    ck = open_checkpoint(bin_path)
    assert ck.weight_files == ["pytorch_model.bin"] and ck.complete and not ck.problems
    ref = open_checkpoint(st_path)
    assert len(ck.tensors) == 16 and ck.roles == ref.roles
    for name, e in ref.tensors.items():
        assert (ck.tensors[name].dtype, ck.tensors[name].shape) == (e.dtype, e.shape)
        assert read_bytes(ck.tensors[name]) == read_bytes(e)
    if level == "forward":  # its trainer unknown: agreeing with the reading judged, and stating the others
        assert "forward.equivalence/agrees" in {f.code for f in b.result("forward.equivalence", "vllm").findings}


def test_a_defect_in_a_bin_drafter_gives_the_same_findings(pair):
    def defect(tensors, config):
        del config["head_dim"]  # q_proj holds heads of 24, hidden/heads is 16
        tensors["d2t"] = RawTensor("F32", tensors["d2t"].shape, np.frombuffer(tensors["d2t"].data, "<i8")
                                   .astype("<f4").tobytes())

    st_path, bin_path = pair(defect)
    a, b = gate_at(st_path, "scan"), gate_at(bin_path, "scan")
    assert a.exit_code == b.exit_code == 1
    assert summary(a) == summary(b)
    assert_fails(b, "config.head-dim/missing")
    assert_fails(b, "dtypes/d2t-not-integer")


def test_sharded_bin_with_an_index(pair):
    st_path, bin_path = pair(shards=3)
    assert summary(gate_at(st_path, "scan")) == summary(gate_at(bin_path, "scan"))
    ck = open_checkpoint(bin_path)
    assert len(ck.weight_files) == 3 and len(ck.tensors) == 16 and not ck.problems
    index = json.loads((bin_path / "pytorch_model.bin.index.json").read_text())
    index["weight_map"]["ghost.weight"] = "pytorch_model-00001-of-00003.bin"
    index["weight_map"]["fc.weight"] = "../pytorch_model-00001-of-00003.bin"
    (bin_path / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    result = gate_at(bin_path, "header")
    assert_fails(result, "files/index-mismatch", "pytorch_model.bin.index.json", "ghost.weight")
    assert_fails(result, "files", "outside the checkpoint directory")
    (bin_path / "pytorch_model-00002-of-00003.bin").unlink()
    assert_fails(gate_at(bin_path, "header"), "files/missing-shard", "pytorch_model-00002-of-00003.bin",
                 "a torch.save file")


def test_safetensors_win_over_a_bin_beside_them(pair):
    st_path, bin_path = pair()
    shutil.copy(bin_path / "pytorch_model.bin", st_path / "pytorch_model.bin")
    assert open_checkpoint(st_path).weight_files == ["model.safetensors"]


def test_a_bin_without_config_is_a_checkpoint_and_no_weights_says_bin_too(pair, tmp_path):
    _, bin_path = pair()
    (bin_path / "config.json").unlink()
    ck = open_checkpoint(bin_path)  # no UsageError: weights without a config, as for safetensors
    assert ck.layout == "flat" and len(ck.tensors) == 16
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text("{}")
    assert_fails(gate_at(tmp_path / "cfg", "header"), "files", "no index, other safetensors file or pytorch_model.bin")


def test_shared_storages_parameters_views_and_fp8(tmp_path):
    base = torch.arange(10, dtype=torch.float32)
    state = {"a": base[:4], "b": base[4:].view(2, 3), "p": torch.nn.Parameter(torch.ones(2, 2)),
             "f8": torch.tensor([0.5, -2.0, 448.0]).to(torch.float8_e4m3fn), "scalar": torch.tensor(3.0),
             "empty": torch.zeros(0, 5), "i": torch.arange(3), "bf": torch.tensor([1.5, -2.0], dtype=torch.bfloat16)}
    torch.save(state, tmp_path / "x.bin")
    h = read_bin(tmp_path / "x.bin", "x.bin")
    assert h.parsed and not h.problems and set(h.entries) == set(state)
    assert h.entries["a"].offset + 16 == h.entries["b"].offset  # one storage, two offsets
    for name, t in state.items():
        e = h.entries[name]
        assert e.shape == tuple(t.shape)
        assert read_bytes(e) == t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    np.testing.assert_array_equal(load_array(h.entries["b"]), [[4, 5, 6], [7, 8, 9]])
    assert (h.entries["f8"].dtype, h.entries["bf"].dtype, h.entries["i"].dtype) == ("F8_E4M3", "BF16", "I64")


def test_a_module_state_dict_with_its_metadata_is_read(tmp_path):
    """model.state_dict() carries _metadata (module versions), pickled as a BUILD of data: read, never run."""
    m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2))
    torch.save(m.state_dict(), tmp_path / "m.bin")
    assert b"_metadata" in pkl_of(tmp_path / "m.bin")
    h = read_bin(tmp_path / "m.bin", "m.bin")
    assert not h.problems and set(h.entries) == set(m.state_dict())
    np.testing.assert_array_equal(load_array(h.entries["0.weight"]), m[0].weight.detach().numpy())


def test_a_transposed_tensor_is_refused(tmp_path):
    torch.save({"w": torch.zeros(3, 2).t(), "ok": torch.zeros(2)}, tmp_path / "t.bin")
    h = read_bin(tmp_path / "t.bin", "t.bin")
    assert list(h.entries) == ["ok"]
    (p,) = h.problems
    assert "stride [1, 2] for size [2, 3]: not contiguous row-major" in p.message and p.offset > 0


# ----- refused, never run ------------------------------------------------------------------------------------

class RunsCode:
    def __init__(self, call, arg):
        self.call, self.arg = call, arg

    def __reduce__(self):
        return self.call, (self.arg,)


@pytest.mark.parametrize("call", ["os.system", "builtins.eval"])
def test_a_bin_whose_pickle_calls_code_is_refused_without_running_it(pair, tmp_path, capsys, call):
    st_path, bin_path = pair()
    marker = tmp_path / "ran"
    ck = open_checkpoint(bin_path)
    from eagle3_checks.numerics.draft_steps import Weights

    w = Weights(ck, "cpu")
    state = {n: w.raw(n).clone() for n in ck.tensors}
    code = f"touch {marker}" if call == "os.system" else f"open({str(marker)!r}, 'w')"
    state["midlayer.hidden_norm.weight"] = RunsCode(os.system if call == "os.system" else eval, code)
    torch.save(state, bin_path / "pytorch_model.bin")
    assert main(["check", str(bin_path), "--level", "forward", "--reference", "none"]) == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    # the report's files check: the file, the byte, what the pickle calls (protocol 2's names: posix.system,
    # __builtin__.eval), never run
    assert_golden(f"test_torch_bin/test_a_bin_whose_pickle_calls_code_is_refused_without_running_it-{call}.txt",
                  "\n".join(check_lines(out.out, "files")) + "\n")
    assert not marker.exists()
    result = gate_at(bin_path, "header")
    [f] = result.result("files").findings
    assert f.code == "files/wrong-format" and f.file == "pytorch_model.bin" and f.offset > 0
    assert_fails(result, "files", "holds more than plain tensors", "never load this file with torch.load")
    assert not open_checkpoint(bin_path).complete
    assert not marker.exists()


def test_a_legacy_torch_pickle_is_not_unpickled(tmp_path, pair):
    _, bin_path = pair()
    torch.save({"fc.weight": torch.zeros(2)}, bin_path / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    assert_fails(gate_at(bin_path, "header"), "files", "pytorch_model.bin (byte 0)", "legacy (non-zip) torch pickle",
                 "cannot be read without unpickling", "safetensors")


@pytest.mark.parametrize("pkl, fragment", [
    (b"\x80\x02}}X\x01\x00\x00\x00bK\x01sb.", "BUILD sets the state of a dict"),
    (b"\x80\x02}X\x01\x00\x00\x00aK\x01s.", "holds more than plain tensors: 'a' is int"),
    (b"\x80\x02ctorch\nFloatStorage\n.", "holds torch.FloatStorage, not a state dict"),
    (b"\x80\x02]q\x00.", "opcode EMPTY_LIST"),
    (b"\x80\x02cposix\nsystem\nX\x02\x00\x00\x00lsR.", "holds more than plain tensors: posix.system"),
    (b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x8c\x04eval\x93.",
     "holds more than plain tensors: builtins.eval"),
    (b"\x80\x02ccollections\nOrderedDict\nK\x01\x85R.", "OrderedDict built from arguments"),
    (b"\x80\x02ctorch\nFloatStorage\n)R.", "a call of torch.FloatStorage"),
    (b"\x80\x02(X\x01\x00\x00\x00aK\x01i__main__\nX\n.", "opcode INST"),
    (b"\x80\x02}q\x00h\x07.", "memo slot never written"),
    (b"\x80\x02}q\x00", "pickle exhausted before seeing STOP"),
    (b"\x80\x02}q\x00\xff.", "not a valid pickle"),
    (b"\x80\x02}}X\x09\x00\x00\x00_metadatactorch\nFloatStorage\nsb.", "BUILD sets the state"),
    (b"\x80\x02}.", None),
    (b"\x80\x02}}X\x09\x00\x00\x00_metadata}X\x00\x00\x00\x00}X\x07\x00\x00\x00versionK\x01sssb.", None),
])
def test_the_pickle_walk_refuses_everything_but_a_state_dict(pkl, fragment):
    from eagle3_checks.storage.torch_bin import _Refused

    if fragment is None:
        assert walk_pickle(pkl) == {}
        return
    with pytest.raises(_Refused) as exc:
        walk_pickle(pkl)
    assert fragment in exc.value.message and exc.value.pos is not None


# ----- broken archives: clear files errors, no traceback --------------------------------------------------------

def storage_offset_2(pkl: bytes) -> bytes:
    """Tensor 'w' (4 floats) moved to storage offset 2: it would end past its storage."""
    assert pkl.count(b"QK\x00K\x04\x85") == 1
    return pkl.replace(b"QK\x00K\x04\x85", b"QK\x02K\x04\x85")


def patch_central(f: Path, entry: str, fields: dict[int, int]) -> None:
    """Overwrite 4-byte fields (by offset: 20 compressed size, 24 size, 42 local header offset) of ``entry``'s
    central directory record."""
    body = bytearray(f.read_bytes())
    at = body.index(b"PK\x01\x02")
    while body[at + 46:at + 46 + len(entry)] != entry.encode():
        at = body.index(b"PK\x01\x02", at + 1)
    for off, value in fields.items():
        body[at + off:at + off + 4] = value.to_bytes(4, "little")
    f.write_bytes(bytes(body))


@pytest.mark.parametrize("how, fragments", [
    ("truncated", ["without its end-of-central-directory record: truncated"]),
    ("cut-data", ["ends at byte", "truncated"]),
    ("deflated-data", ["zip entry 'w/data/0' is compressed (method 8)", "uncompressed"]),
    ("deflated-pkl", ["zip entry 'w/data.pkl' is compressed"]),
    ("storage-offset", ["tensor 'w' (offset 2, size [4], F32) ends at byte 24 of storage '0', which holds 16"]),
    ("header-offset", ["zip entry 'w/data/0': no local file header at byte"]),
    ("big-endian", ["w/byteorder says b'big'"]),
    ("no-storage", ["tensor 'w' is in storage '0', but the archive has no w/data/0"]),
    ("storage-size", ["storage '0' is declared as 16 bytes but w/data/0 holds 12"]),
    ("two-pickles", ["needs one <name>/data.pkl (found 2"]),
    ("empty", ["is empty, not a torch.save zip checkpoint"]),
    ("safetensors", ["is a safetensors file, not a torch.save zip checkpoint"]),
])
def test_broken_archives_are_clear_files_errors(tmp_path, pair, capsys, how, fragments):
    st_path, bin_path = pair()
    f = bin_path / "pytorch_model.bin"
    src = tmp_path / "w.bin"
    torch.save({"w": torch.arange(4, dtype=torch.float32), "v": torch.ones(2)}, src)
    raw = src.read_bytes()
    if how == "truncated":
        f.write_bytes(raw[:len(raw) // 2])
    elif how == "cut-data":  # w/data/1's sizes say it runs past the end of the file
        rezip(src, f)
        size = len(f.read_bytes())
        patch_central(f, "w/data/1", {20: size, 24: size})
    elif how == "deflated-data":
        rezip(src, f, deflate=lambda n: n.endswith("/data/0"))
    elif how == "deflated-pkl":
        rezip(src, f, deflate=lambda n: n.endswith("data.pkl"))
    elif how == "storage-offset":
        rezip(src, f, {"data.pkl": storage_offset_2})
    elif how == "header-offset":
        rezip(src, f)
        patch_central(f, "w/data/0", {42: len(f.read_bytes()) + 100})
    elif how == "big-endian":
        rezip(src, f, {"byteorder": b"big"})
    elif how == "no-storage":
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(f, "w") as zout:
            for info in zin.infolist():
                if not info.filename.endswith("/data/0"):
                    zout.writestr(info.filename, zin.read(info.filename))
    elif how == "storage-size":
        rezip(src, f, {"/data/0": lambda d: d[:12]})
    elif how == "two-pickles":
        rezip(src, f)
        with zipfile.ZipFile(f, "a") as z:
            z.writestr("other/data.pkl", b"\x80\x02}.")
    elif how == "empty":
        f.write_bytes(b"")
    elif how == "safetensors":
        shutil.copy(st_path / "model.safetensors", f)
    before = f.read_bytes()
    assert main(["check", str(bin_path), "--level", "scan", "--reference", "none"]) == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err and "crashed" not in out.out
    result = gate_at(bin_path, "header")
    assert_fails(result, "files", "pytorch_model.bin", *fragments)
    found = result.result("files").findings
    assert any(x.file == "pytorch_model.bin" and x.offset is not None for x in found)  # the byte it points at
    # each finding's message, why (torch.load's) and fix
    assert_golden(f"test_torch_bin/test_broken_archives_are_clear_files_errors-{how}.txt",
                  "".join(f"{x.message}\nwhy: {x.why}\nfix: {x.fix}\n" for x in found))
    assert f.read_bytes() == before


# ----- convert reads a .bin source in place ------------------------------------------------------------------

def test_convert_reads_a_bin_source_without_torch_load(pair, tmp_path, monkeypatch):
    from eagle3_checks.convert import convert

    st_path, bin_path = pair()

    def no_load(*a, **kw):
        raise AssertionError("torch.load called")

    monkeypatch.setattr(torch, "load", no_load)
    result = convert(bin_path, tmp_path / "out", "speculators", verify_level="header")
    assert result.verification.exit_code == 0
    ref = open_checkpoint(st_path)
    out = open_checkpoint(tmp_path / "out")
    assert {r: read_bytes(out.entry(r)) for r in out.roles} == {r: read_bytes(ref.entry(r)) for r in ref.roles}


# ----- fuzz: mutated opcodes, zip records, offsets -----------------------------------------------------------

BIN_FUZZ = FUZZ  # the fuzz suite's examples per test (conftest.py EXAMPLES), as for safetensors
_ROOT = tempfile.TemporaryDirectory(prefix="eagle3-fuzz-bin-")
_BASE: list[Path] = []


def bin_base() -> Path:
    if not _BASE:
        tensors, config = drafter_files(EXAMPLE, "flat")
        _BASE.append(write_bin(Path(_ROOT.name) / "bin", tensors, config))
    return _BASE[0]


@contextlib.contextmanager
def bin_copy():
    with tempfile.TemporaryDirectory(prefix="eagle3-fuzz-bin-") as tmp:
        path = Path(tmp) / "ckpt"
        shutil.copytree(bin_base(), path)
        yield path


OPCODE_BYTES = st.sampled_from([b"R", b"b", b"i", b"o", b"\x81", b"c", b"\x93", b"Q", b"h", b"q", b"(", b"t", b"s",
                                b"u", b"}", b")", b".", b"K", b"X", b"\x8c", b"\x94", b"\x95", b"0", b"N",
                                b"cos\nsystem\n", b"cbuiltins\neval\n", b"ctorch\nFloatStorage\n",
                                b"ctorch._utils\n_rebuild_parameter\n", b"\xff\xff\xff\x7f"])


@BIN_FUZZ
@given(data=st.data())
def test_fuzz_mutated_pickle_opcodes(data):
    """The archive stays valid; data.pkl's opcodes are mutated."""
    with bin_copy() as path:
        f = path / "pytorch_model.bin"
        pkl = bytearray(pkl_of(f))
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(0, len(pkl)))
            op = data.draw(st.sampled_from(["set", "insert", "delete", "truncate"]))
            if op == "set":
                chunk = data.draw(OPCODE_BYTES | st.binary(min_size=1, max_size=4))
                pkl[at:at + len(chunk)] = chunk
            elif op == "insert":
                pkl[at:at] = data.draw(OPCODE_BYTES | st.binary(min_size=1, max_size=8))
            elif op == "delete":
                del pkl[at:at + data.draw(st.integers(1, 16))]
            else:
                del pkl[at:]
        src = path.parent / "orig.bin"
        f.rename(src)
        rezip(src, f, {"data.pkl": bytes(pkl)})
        src.unlink()
        gate_everything(path)


@BIN_FUZZ
@given(data=st.data())
def test_fuzz_mutated_archive_bytes(data):
    """Zip records, local headers, offsets and sizes mutated in place, or the file cut short."""
    with bin_copy() as path:
        f = path / "pytorch_model.bin"
        raw = bytearray(f.read_bytes())
        records = [m.start() for m in re.finditer(rb"PK(\x01\x02|\x03\x04|\x05\x06|\x06\x06|\x06\x07)", raw)]
        for _ in range(data.draw(st.integers(1, 4))):
            rec = min(data.draw(st.sampled_from(records)), len(raw))
            at = data.draw(st.integers(rec, min(len(raw), rec + 56)) | st.integers(0, len(raw)))
            op = data.draw(st.sampled_from(["set", "u32", "insert", "delete", "truncate"]))
            if op == "set":
                chunk = data.draw(st.binary(min_size=1, max_size=4))
                raw[at:at + len(chunk)] = chunk
            elif op == "u32":
                raw[at:at + 4] = data.draw(st.sampled_from([0, 1, 0xFFFFFFFF, len(raw), max(len(raw) - 30, 0), 2**31])
                                           | st.integers(0, 2**32 - 1)).to_bytes(4, "little")
            elif op == "insert":
                raw[at:at] = data.draw(st.binary(min_size=1, max_size=8))
            elif op == "delete":
                del raw[at:at + data.draw(st.integers(1, 16))]
            else:
                del raw[at:]
        f.write_bytes(bytes(raw))
        gate_everything(path)


@BIN_FUZZ
@given(data=st.data())
def test_fuzz_mutated_zip_entries(data):
    """Entries dropped, duplicated, renamed, compressed or replaced, the archive rewritten validly."""
    with bin_copy() as path:
        f = path / "pytorch_model.bin"
        with zipfile.ZipFile(f) as z:
            entries = collections.OrderedDict((i.filename, z.read(i.filename)) for i in z.infolist())
        names = list(entries)
        for _ in range(data.draw(st.integers(1, 3))):
            name = data.draw(st.sampled_from(names))
            op = data.draw(st.sampled_from(["drop", "rename", "replace", "cut"]))
            if op == "drop":
                entries.pop(name, None)
            elif op == "rename":
                if name in entries:
                    entries[data.draw(st.sampled_from(names) | st.text(min_size=1, max_size=12))] = entries.pop(name)
            elif op == "replace":
                entries[name] = data.draw(st.binary(max_size=64) | st.sampled_from([b"big", b"little", b"\x80\x02}."]))
            elif name in entries:
                entries[name] = entries[name][:data.draw(st.integers(0, len(entries[name])))]
        deflated = data.draw(st.sets(st.sampled_from(names), max_size=2))
        with zipfile.ZipFile(f, "w") as z:
            for name, body in entries.items():
                z.writestr(name, body, zipfile.ZIP_DEFLATED if name in deflated else zipfile.ZIP_STORED)
        gate_everything(path)


def test_the_fuzz_base_is_a_valid_bin_drafter():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["check", str(bin_base()), "--level", "scan", "--reference", "none"]) == 0


def test_the_header_gate_of_a_bin_never_imports_torch(pair, tmp_path):
    """A stand-in torch module that records any import attempt: the header gate of a .bin never makes one (the
    opcodes are walked with pickletools.genops; nothing is loaded)."""
    _, bin_path = pair()
    fake, marker = tmp_path / "fake", tmp_path / "imported"
    fake.mkdir()
    (fake / "torch.py").write_text(f"open({str(marker)!r}, 'a').write('torch ')\nraise ImportError('torch')\n")
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(fake)!r})
        from eagle3_checks.cli import main
        sys.exit(main(["check", {str(bin_path)!r}, "--reference", "none", "--level", "header"]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASSED" in proc.stdout and not marker.exists()


# ----- every refusal of the walk and the zip reader, one case each ------------------------------------------------

STORAGE = b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQ"
HOOKS = b"ccollections\nOrderedDict\n)R"
TENSOR = b"ctorch._utils\n_rebuild_tensor_v2\n(" + STORAGE + b"K\x00K\x04\x85K\x01\x85\x89" + HOOKS + b"tR"


def state(*items: bytes) -> bytes:
    """A pickled dict of 'w', 'x', ... to the given values."""
    body = b"".join(b"X\x01\x00\x00\x00" + bytes([ord("w") + i]) + v for i, v in enumerate(items))
    return b"\x80\x02}(" + body + b"u."


def test_the_walk_reads_a_hand_written_state_dict():
    (t,) = walk_pickle(state(TENSOR)).values()
    assert (t.dtype, t.shape, t.stride, t.offset, t.storage.key, t.storage.numel) == ("F32", (4,), (1,), 0, "0", 4)
    param = b"ctorch._utils\n_rebuild_parameter\n(" + TENSOR + b"\x88" + HOOKS + b"tR"
    assert walk_pickle(state(param))["w"].shape == (4,)
    v3 = TENSOR.replace(b"_v2", b"_v3").replace(b"ctorch\nFloatStorage\n", b"ctorch.storage\nUntypedStorage\n")
    assert walk_pickle(state(v3.replace(HOOKS + b"tR", HOOKS + b"ctorch\nfloat8_e5m2\ntR")))["w"].dtype == "F8_E5M2"


@pytest.mark.parametrize("pkl, fragment", [
    (state(TENSOR.replace(b"ctorch\nFloatStorage\n", b"ccollections\nOrderedDict\n")),
     "names storage '0' of class collections.OrderedDict"),
    (state(TENSOR.replace(b"K\x04tQ", b"tQ")), "persistent id that is not ('storage'"),
    (state(TENSOR, TENSOR.replace(b"FloatStorage", b"HalfStorage")), "names storage '0' twice"),
    (state(TENSOR.replace(b"\x89" + HOOKS, HOOKS)), "with 5 arguments, not the 6 torch writes"),
    (state(TENSOR.replace(b"K\x00K\x04", b"X\x01\x00\x00\x000K\x04")), "arguments other than (storage, offset"),
    (state(TENSOR.replace(b"_v2", b"_v3").replace(HOOKS + b"tR", HOOKS + b"ctorch\nfloat32\ntR")),
     "on a typed storage"),
    (state(TENSOR.replace(b"ctorch\nFloatStorage\n", b"ctorch.storage\nUntypedStorage\n")),
     "on an UntypedStorage ('0') without a dtype"),
    (state(TENSOR.replace(b"_v2", b"_v3").replace(HOOKS + b"tR", HOOKS + HOOKS + b"tR")),
     "with dtype a dict, which this tool does not read"),
    (state(b"ctorch._utils\n_rebuild_parameter\n(" + TENSOR + b"K\x01" + HOOKS + b"tR"),
     "_rebuild_parameter with arguments other than"),
    (state(b"ctorch._utils\n_rebuild_parameter\n(" + TENSOR + b"tR"), "_rebuild_parameter with arguments"),
    (state(b"ctorch._utils\n_rebuild_tensor_v2\nK\x01R"), "a call of torch._utils._rebuild_tensor_v2"),
    (state(TENSOR + b"0"), "opcode POP"),
    (b"\x80\x02}}.", "values left on its stack"),
    (b"\x80\x02}(X\x01\x00\x00\x00au.", "odd number of values"),
    (b"\x80\x02)X\x01\x00\x00\x00aK\x01s.", "SETITEM on a tuple, not a dict"),
    (b"\x80\x02}K\x01K\x01s.", "a key that is not a string (int)"),
    (b"\x80\x02R.", "REDUCE finds an empty stack"),
    (b"\x80\x02t.", "TUPLE without a MARK"),
    (b"\x80\x04K\x01K\x02\x93.", "STACK_GLOBAL without two strings"),
    (b"\x80\x02q\x00.", "BINPUT finds an empty stack"),
])
def test_each_refusal_of_the_walk(pkl, fragment):
    from eagle3_checks.storage.torch_bin import _Refused

    with pytest.raises(_Refused) as exc:
        walk_pickle(pkl)
    assert fragment in exc.value.message


def write_zip64(path: Path, entries: dict[str, bytes], extras: bool = True, locator: bool = True) -> None:
    """A STORED zip in zip64 form throughout (as torch writes files past 4 GB): 0xFFFFFFFF sizes and offsets in
    the central directory with zip64 extra fields, a zip64 end record and its locator."""
    import struct
    import zlib

    out, central = bytearray(), bytearray()
    for name, data in entries.items():
        n, off, crc = name.encode(), len(out), zlib.crc32(data)
        out += struct.pack("<4s5H3I2H", b"PK\x03\x04", 45, 0, 0, 0, 0, crc, len(data), len(data), len(n), 0)
        out += n + data
        extra = struct.pack("<2H3Q", 1, 24, len(data), len(data), off) if extras else b""
        central += struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                               len(n), len(extra), 0, 0, 0, 0, 0xFFFFFFFF) + n + extra
    cd_off = len(out)
    out += central
    z64 = len(out)
    out += struct.pack("<4sQ2H2I4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, len(entries), len(entries), len(central),
                       cd_off)
    if locator:
        out += struct.pack("<4sIQI", b"PK\x06\x07", 0, z64, 1)
    out += struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    path.write_bytes(bytes(out))


def test_zip64_archives_as_torch_writes_them_past_4_gb(tmp_path):
    state_ = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(3, dtype=torch.bfloat16)}
    torch.save(state_, tmp_path / "small.bin")
    with zipfile.ZipFile(tmp_path / "small.bin") as z:
        entries = {n: z.read(n) for n in z.namelist()}
    write_zip64(tmp_path / "z64.bin", entries)
    assert torch.equal(torch.load(tmp_path / "z64.bin", weights_only=True)["w"], state_["w"])  # a valid zip64
    h = read_bin(tmp_path / "z64.bin", "z64.bin")
    assert not h.problems and set(h.entries) == {"w", "b"}
    np.testing.assert_array_equal(load_array(h.entries["w"]), state_["w"].numpy())
    write_zip64(tmp_path / "noextra.bin", entries, extras=False)
    assert "needs a zip64 extra field, which is missing" in read_bin(tmp_path / "noextra.bin", "x").problems[0].message
    write_zip64(tmp_path / "noloc.bin", entries, locator=False)
    assert "needs a zip64 locator, which is missing" in read_bin(tmp_path / "noloc.bin", "x").problems[0].message


def local_header(raw: bytearray, name: bytes) -> int:
    at = raw.index(b"PK\x03\x04")
    while raw[at + 30:at + 30 + len(name)] != name:
        at = raw.index(b"PK\x03\x04", at + 1)
    return at


@pytest.mark.parametrize("how, fragment", [
    ("local-method", "zip entry 'w/data/0' is compressed (method 8) in its local header"),
    ("local-name", "zip entry 'w/data/0': its local header at byte"),
    ("encrypted", "zip entry 'w/data.pkl' is encrypted"),
    ("tar", "tar-format torch checkpoint (torch before 0.4)"),
    ("text", "is neither a zip archive nor a pickle, not a torch.save zip checkpoint"),
    ("pickle-limit", "above the 10-byte limit for a state dict's pickle"),
    ("directory-limit", "does not fit in the"),
])
def test_each_refusal_of_the_zip_reader(tmp_path, monkeypatch, how, fragment):
    from eagle3_checks.storage import torch_bin as torch_bin_io

    f = tmp_path / "w.bin"
    (tmp_path / "src").mkdir()
    torch.save({"w": torch.arange(4, dtype=torch.float32)}, tmp_path / "src" / "w.bin")
    rezip(tmp_path / "src" / "w.bin", f)
    raw = bytearray(f.read_bytes())
    if how == "local-method":
        raw[local_header(raw, b"w/data/0") + 8] = 8
    elif how == "local-name":
        at = local_header(raw, b"w/data/0")
        raw[at + 30:at + 38] = b"w/data/9"
    elif how == "encrypted":
        at = raw.index(b"PK\x01\x02")
        raw[at + 8] |= 1
    elif how == "tar":
        raw = bytearray(512)
        raw[257:262] = b"ustar"
    elif how == "text":
        raw = bytearray(b"hello")
    elif how == "pickle-limit":
        monkeypatch.setattr(torch_bin_io, "PICKLE_LIMIT", 10)
    else:
        monkeypatch.setattr(torch_bin_io, "DIRECTORY_LIMIT", 10)
    f.write_bytes(bytes(raw))
    h = torch_bin_io.read_bin(f, "w.bin")
    assert not h.entries and any(fragment in p.message for p in h.problems), h.problems


def test_read_bin_on_a_directory(tmp_path):
    assert read_bin(tmp_path, "d").problems[0].message == "is a directory, not a file"
