"""File integrity: every broken-file case is a `files` finding naming the file and the byte offset, through the
whole gate (scan level included), never an exception, and the files stay as they were."""

from __future__ import annotations

import json
import os
import struct

import pytest

from eagle3_checks.cli import main
from helpers import assert_golden, codes, run

F32 = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}


def raw_file(header: bytes, data: bytes = b"", length: int | None = None) -> bytes:
    return struct.pack("<Q", len(header) if length is None else length) + header + data


def js(obj) -> bytes:
    return json.dumps(obj).encode()


# (case id, file bytes, the byte offset, the message expected after "model.safetensors (byte N): "); the code
# each case's finding carries: CODES
HEADERS = [
    ("length-beyond-file", raw_file(b"{}", length=5000), 0,
     "declares a 5000-byte header but the file is only 10 bytes: truncated"),
    ("length-over-cap", raw_file(b"{}", length=100_000_001), 0,
     "declares a 100000001-byte header, above safetensors' cap of 100000000 bytes"),
    ("not-an-object", raw_file(b"[1, 2]"), 8, "header is a JSON array, not an object"),
    ("not-utf8", raw_file(b'{"a\xff": 1}'), 11, "header is not valid UTF-8 at byte 11"),
    ("not-json", raw_file(b'{"a": '), 14, "header is not valid JSON (Expecting value)"),
    ("duplicate-key", raw_file(b'{"a": ' + js(F32) + b', "a": ' + js(F32) + b"}", b"\0" * 4), 8,
     "header names tensor 'a' twice"),
    ("unknown-dtype", raw_file(js({"a": dict(F32, dtype="F4")}), b"\0" * 4), 9,
     "tensor 'a' has unknown dtype 'F4'"),
    ("negative-shape", raw_file(js({"a": dict(F32, shape=[-1])}), b"\0" * 4), 9,
     "tensor 'a' has an invalid shape [-1]"),
    ("overflowing-shape", raw_file(js({"a": dict(F32, shape=[2**32, 2**31], data_offsets=[0, 4])}), b"\0" * 4), 9,
     "tensor 'a': shape [4294967296, 2147483648] x F32 overflows 64 bits"),
    ("shape-size-mismatch", raw_file(js({"a": dict(F32, shape=[3])}), b"\0" * 4), 9,
     "tensor 'a': shape [3] x F32 is 12 bytes but its offsets span 4"),
    ("overlap", raw_file(js({"a": F32, "b": dict(F32, data_offsets=[2, 6])}), b"\0" * 6), None,
     "tensor 'b' overlaps the tensor before it"),
    ("hole", raw_file(js({"a": dict(F32, data_offsets=[4, 8])}), b"\0" * 8), None,
     "4 unused bytes (a hole) before tensor 'a'"),
    ("offsets-past-end", raw_file(js({"a": dict(F32, shape=[4], data_offsets=[0, 16])}), b"\0" * 16)[:-12], None,
     "tensor 'a' ends at byte"),
    ("trailing-bytes", raw_file(js({"a": F32}), b"\0" * 12), None, "8 bytes after the last tensor"),
    ("metadata-not-strings", raw_file(js({"__metadata__": {"format": 1}, "a": F32}), b"\0" * 4), 8,
     "__metadata__ must map strings to strings"),
    ("entry-not-object", raw_file(js({"a": [1]})), 9, "entry for 'a' is not an object"),
    ("bad-offsets", raw_file(js({"a": dict(F32, data_offsets=[4, 0])}), b"\0" * 4), 9,
     "tensor 'a' has invalid data_offsets [4, 0]"),
    ("too-short", b"\x01\x02\x03", 0, "is 3 bytes, too short for the 8-byte header length: truncated"),
    ("zip", b"PK\x03\x04" + b"\0" * 60, 0, "is a zip archive (what torch.save writes), not safetensors"),
    ("pickle", b"\x80\x04\x95" + b"\0" * 60, 0, "is a Python pickle, not safetensors"),
    ("deep-json", raw_file(b"[" * 100_000 + b"]" * 100_000), 8,
     "header nests JSON too deeply to be a safetensors header"),
]


CODES = {
    "length-beyond-file": "truncated", "length-over-cap": "bad-header", "not-an-object": "invalid-json",
    "not-utf8": "invalid-json", "not-json": "invalid-json", "duplicate-key": "bad-header",
    "unknown-dtype": "bad-header", "negative-shape": "bad-header", "overflowing-shape": "bad-header",
    "shape-size-mismatch": "bad-header", "overlap": "byte-ranges", "hole": "byte-ranges",
    "offsets-past-end": "truncated", "trailing-bytes": "byte-ranges", "metadata-not-strings": "bad-header",
    "entry-not-object": "bad-header", "bad-offsets": "bad-header", "too-short": "truncated", "zip": "wrong-format",
    "pickle": "wrong-format", "deep-json": "invalid-json"
}


def lines_naming(text: str, name: str) -> list[str]:
    """The lines of a command's output that name ``name``: what a golden file records of an output that is
    otherwise about other things."""
    return [line for line in text.splitlines() if name in line]


def files_messages(result) -> list[str]:
    return [f.message for f in result.result("files").findings]


@pytest.mark.parametrize("case, content, offset, message", HEADERS, ids=[c[0] for c in HEADERS])
def test_broken_safetensors_file(drafter, case, content, offset, message):
    path = drafter("flat").write()
    (path / "model.safetensors").write_bytes(content)
    result = run(path, level="scan")
    assert f"files/{CODES[case]}" in [f.code for f in result.result("files").findings]
    found = files_messages(result)
    prefix = f"model.safetensors (byte {offset}): " if offset is not None else "model.safetensors (byte "
    assert any(m.startswith(prefix) and message in m for m in found), found
    assert result.exit_code == 1
    assert (path / "model.safetensors").read_bytes() == content


def test_a_code_never_depends_on_the_words_of_a_message(drafter):
    """The reader says the kind where it finds the problem: a tensor named with the words the files check once
    searched messages for ("truncated", "hole", "header") keeps the code of what is wrong with it."""
    path = drafter("flat").write()
    name = js("a truncated file with a hole, not safetensors: a pickle")
    (path / "model.safetensors").write_bytes(raw_file(b"{" + name + b": " + js(F32) + b", " + name + b": " + js(F32)
                                                      + b"}", b"\0" * 4))
    findings = run(path, level="header").result("files").findings
    assert [f.code for f in findings] == ["files/bad-header"] and "truncated" in findings[0].message


def test_every_kind_a_reader_says_is_a_declared_files_code():
    from eagle3_checks.registry import REGISTRY
    from eagle3_checks.storage.safetensors import KINDS

    assert set(KINDS) == set(dict(REGISTRY["files"].codes))


def test_offsets_name_the_byte_where_the_trouble_starts(drafter):
    """A hole is reported where the unused bytes begin, an overlap where the second tensor begins."""
    path = drafter("flat").write()
    head = js({"a": dict(F32, data_offsets=[4, 8])})
    (path / "model.safetensors").write_bytes(raw_file(head, b"\0" * 8))
    assert f"model.safetensors (byte {8 + len(head)}): 4 unused bytes (a hole) before tensor 'a'" \
        in files_messages(run(path, level="header"))
    head = js({"a": F32, "b": dict(F32, data_offsets=[2, 6])})
    (path / "model.safetensors").write_bytes(raw_file(head, b"\0" * 6))
    assert f"model.safetensors (byte {8 + len(head) + 2}): tensor 'b' overlaps the tensor before it" \
        in files_messages(run(path, level="header"))


def test_an_entry_problem_points_at_its_key(drafter):
    path = drafter("flat").write()
    head = js({"a": F32, "b": dict(F32, dtype="F4", data_offsets=[4, 8])})
    content = raw_file(head, b"\0" * 8)
    (path / "model.safetensors").write_bytes(content)
    [m] = [m for m in files_messages(run(path, level="header")) if "unknown dtype" in m]
    offset = int(m.split("(byte ")[1].split(")")[0])
    assert content[offset:offset + 3] == b'"b"', m


def test_header_with_a_lone_surrogate(drafter):
    """JSON's "\\ud800" parses in Python but is not Unicode: safetensors' serde_json refuses the header."""
    path = drafter("flat").write()
    head = b'{"fc.weight\\ud800": ' + js(F32) + b"}"
    (path / "model.safetensors").write_bytes(raw_file(head, b"\0" * 4))
    [m] = files_messages(run(path, level="scan"))
    assert m == ("model.safetensors (byte 19): header holds 'fc.weight\\ud800', a lone UTF-16 surrogate escape: "
                 "not Unicode text, and safetensors refuses the header")


def test_a_truncated_real_drafter(drafter):
    path = drafter("flat").write()
    f = path / "model.safetensors"
    full = f.read_bytes()
    f.write_bytes(full[: len(full) // 2])
    [m] = files_messages(run(path, level="scan"))
    assert m.startswith(f"model.safetensors (byte {len(full) // 2}): tensor ") and \
        m.endswith(f"ends at byte {len(full)} but the file is {len(full) // 2} bytes: truncated")


@pytest.mark.parametrize("keep", ["half", "header-only"])
def test_truncated_weights_are_not_scanned_or_run(drafter, keep):
    """The files check names the truncation; the scan reads what is there and lists the rest, and the forward pass
    does not run on missing bytes (it used to crash on an empty view, and the scan passed with nothing read)."""
    pytest.importorskip("torch")
    path = drafter("flat").write()
    f = path / "model.safetensors"
    full = f.read_bytes()
    header_end = 8 + int.from_bytes(full[:8], "little")
    f.write_bytes(full[: len(full) // 2 if keep == "half" else header_end])
    result = run(path)  # every level
    assert not [x for x in result.findings() if "crashed" in x.message]
    assert result.exit_code == 1 and result.result("files").status == "failed"
    scan = result.result("scan.values")
    if keep == "half":
        assert scan.status == "passed"
        [note] = [x.message for x in scan.findings if "not scanned" in x.message]
        assert "tensor(s) not scanned, their bytes run past the end of the file (see files): " in note
    else:
        assert scan.status == "skipped" and "no tensor's bytes can be read" in scan.reason
    forward = result.result("forward.equivalence", "vllm")
    assert forward.status == "skipped" and "see files" in forward.reason


# ----- config.json --------------------------------------------------------------------------------------------

def _config_not_utf8(path):
    (path / "config.json").write_bytes(b'{"hidden_size": 64, "x": "\xe9"}')


def _config_not_json(path):
    (path / "config.json").write_text('{"hidden_size": 64,')


def _config_not_json_after_unicode(path):
    # the error is at char 15, byte 18
    (path / "config.json").write_text('{"name": "\u00e9\u00e9\u00e9",', encoding="utf-8")


def _config_list(path):
    (path / "config.json").write_text("[]")


def _config_directory(path):
    (path / "config.json").unlink()
    (path / "config.json").mkdir()


def _config_symlink_loop(path):
    (path / "config.json").unlink()
    os.symlink("config.json", path / "config.json")


def _config_fifo(path):
    (path / "config.json").unlink()
    os.mkfifo(path / "config.json")


def _config_null(path):  # parses fine, and used to pass the gate as "no readable config"
    (path / "config.json").write_text("null")


def _config_missing(path):
    (path / "config.json").unlink()


def _config_duplicate_key(path):
    text = (path / "config.json").read_text()
    (path / "config.json").write_text(text.replace('{', '{"hidden_size": 4096, ', 1))


@pytest.mark.parametrize("breakage, message", [
    (_config_not_utf8, "config.json (byte 26): is not valid UTF-8"),
    (_config_not_json, "config.json (byte 19): is not valid JSON: Expecting property name enclosed in double quotes"),
    (_config_not_json_after_unicode, "config.json (byte 18): is not valid JSON: Expecting property name"),
    (_config_list, "config.json: is a JSON array, not an object"),
    (_config_null, "config.json: is a JSON null, not an object"),
    (_config_directory, "config.json: is a directory, not a file"),
    (_config_symlink_loop, "config.json: cannot be resolved (RuntimeError"),
    (_config_fifo, "config.json: is not a regular file"),
    (_config_missing, "config.json: is missing: engines cannot build the drafter without it"),
    (_config_duplicate_key, "config.json: states 'hidden_size' more than once; readers keep only the last"),
], ids=lambda v: v.__name__[8:] if callable(v) else "")
def test_broken_config(drafter, breakage, message):
    path = drafter("flat").write()
    breakage(path)
    result = run(path, level="scan")
    assert any(m.startswith(message) for m in files_messages(result)), files_messages(result)
    assert result.exit_code == 1


WRONG_TYPE, NOT_AN_OBJECT = "config.fields/invalid-field", "config.fields/eagle-config-not-object"


@pytest.mark.parametrize("field, value, code", [
    ("hidden_size", "64", WRONG_TYPE),
    ("num_attention_heads", 4.5, WRONG_TYPE),
    ("max_position_embeddings", "2048", WRONG_TYPE),
    ("draft_vocab_size", None, None),  # null means "not set" (transformers): no type error
    ("rope_theta", [1e6], WRONG_TYPE),
    ("tie_word_embeddings", "false", WRONG_TYPE),
    ("eagle_config", [1], NOT_AN_OBJECT),
    ("eagle_config", None, None),
])
def test_config_values_of_the_wrong_type(drafter, field, value, code):
    d = drafter("flat")
    d.config[field] = value
    result = run(d.write(), level="scan")
    if code is None:  # null: unset, not a type error
        assert not codes(result) & {WRONG_TYPE, NOT_AN_OBJECT}, codes(result)
        return
    found = [f for f in result.findings() if f.code == code]
    assert found and found[0].severity.value == "error" and found[0].file == "config.json", \
        [f.message for f in result.findings()]
    assert found[0].key == field
    # "<field> has the wrong type", "eagle_config is a JSON array ([1]), not an object"; what was expected, found
    f = found[0]
    assert_golden(f"test_integrity/test_config_values_of_the_wrong_type-{field}-{type(value).__name__}.txt",
                  f"{f.message}\nexpected: {f.expected}\nfound: {f.found}\n")


# ----- sharded indexes ----------------------------------------------------------------------------------------

def _index(path):
    return json.loads((path / "model.safetensors.index.json").read_text())


def _write_index(path, index):
    (path / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("shard, message", [
    ("model-00009-of-00009.safetensors", "model-00009-of-00009.safetensors: does not exist (the index puts 1 "
                                         "tensors there)"),
    ("/etc/passwd", "model.safetensors.index.json: maps 'fc.weight' to '/etc/passwd', outside the checkpoint"),
    ("../model.safetensors", "model.safetensors.index.json: maps 'fc.weight' to '../model.safetensors', outside"),
    ("sub/../../x.safetensors", "maps 'fc.weight' to 'sub/../../x.safetensors', outside the checkpoint directory"),
    ("..\\x.safetensors", "maps 'fc.weight' to '..\\\\x.safetensors', outside the checkpoint directory"),
    ("", "maps 'fc.weight' to '', not a file name"),
    (7, "maps 'fc.weight' to 7, not a file name"),
])
def test_index_naming_a_missing_or_escaping_shard(drafter, tmp_path, shard, message):
    path = drafter("flat").write(shards=2)
    (path.parent / "x.safetensors").write_bytes(b"never read")
    index = _index(path)
    index["weight_map"]["fc.weight"] = shard
    _write_index(path, index)
    result = run(path, level="scan")
    assert any(m.startswith(message) or message in m for m in files_messages(result)), files_messages(result)
    assert result.exit_code == 1


def test_index_without_a_weight_map(drafter):
    path = drafter("flat").write(shards=2)
    _write_index(path, {"metadata": {}})
    assert "model.safetensors.index.json: has no weight_map object" in files_messages(run(path, level="scan"))


@pytest.mark.parametrize("text, message", [("null", "is a JSON null, not an object"),
                                           ("[1]", "is a JSON array, not an object")])
def test_index_that_is_not_an_object(drafter, text, message):
    path = drafter("flat").write(shards=2)
    (path / "model.safetensors.index.json").write_text(text)
    result = run(path, level="scan")
    assert f"model.safetensors.index.json: {message}" in files_messages(result)
    assert result.exit_code == 1


def test_a_shard_that_is_a_directory(drafter):
    path = drafter("flat").write(shards=2)
    shard = _index(path)["weight_map"]["fc.weight"]
    (path / shard).unlink()
    (path / shard).mkdir()
    assert any(m.startswith(f"{shard}: is a directory, not a file") for m in files_messages(run(path, level="scan")))


def test_symlinked_files_resolving_to_regular_files_are_fine(drafter, tmp_path):
    src = drafter("flat").write(shards=2)
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    snap = tmp_path / "snapshot"
    snap.mkdir()
    for f in src.iterdir():
        os.replace(f, blobs / f.name)
        os.symlink(os.path.relpath(blobs / f.name, snap), snap / f.name)
    result = run(snap, level="scan")
    assert result.result("files").status == "passed" and result.result("scan.values").status == "passed"


def test_every_command_answers_a_broken_file_with_exit_1_or_2(drafter, tmp_path, capsys):
    path = drafter("flat").write()
    (path / "model.safetensors").write_bytes(b"\x80\x04\x95" + b"\0" * 60)
    said = []
    for argv in (["check", str(path), "--level", "scan"], ["inspect", str(path)], ["diff", str(path), "tiny-example"],
                 ["spec", str(path), "-o", str(tmp_path / "s.json")], ["convert", str(path), str(tmp_path / "o"),
                                                                       "--to", "speculators"]):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code in (1, 2), (argv, code, err)
        assert "Traceback" not in out + err, (argv, out, err)
        # each command names the broken file: its lines that do, stdout's then stderr's
        said += [f"$ {argv[0]} (exit {code})"] + lines_naming(out + err, "model.safetensors")
    assert_golden("test_integrity/test_every_command_answers_a_broken_file_with_exit_1_or_2.txt",
                  "\n".join(said) + "\n", {"TMP": tmp_path})
    assert not (tmp_path / "o").exists()


def test_reports_survive_text_the_stream_cannot_encode(drafter, monkeypatch):
    """Tensor names and config values come from the checkpoint: on a stream that cannot carry them (an ASCII or
    cp1252 console), they are written escaped, in every format and command; never a UnicodeEncodeError."""
    import io
    import sys

    d = drafter("flat")
    d.tensors["fc.weight\u2192"] = d.tensors["fc.weight"]
    d.config["architectures"] = ["LlamaForCausalLMEagle3\u2192"]
    path = d.write()
    said = []
    for argv in (["check", str(path), "--level", "scan", "--format", "text"], ["inspect", str(path)],
                 ["check", str(path), "--level", "scan", "--format", "markdown"], ["diff", str(path), "tiny-example"],
                 ["check", str(path), "--level", "scan", "--format", "json"]):
        out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
        monkeypatch.setattr(sys, "stdout", out)
        code = main(argv)
        out.flush()
        text = out.buffer.getvalue().decode()
        assert code in (0, 1), (argv, code)
        # the lines naming the tensor, written escaped (fc.weight\u2192, in every format); diff names it as not compared
        said += [f"$ {' '.join(argv[:1] + argv[2:])} (exit {code})"] + lines_naming(text, "fc.weight\\")
    assert_golden("test_integrity/test_reports_survive_text_the_stream_cannot_encode.txt", "\n".join(said) + "\n",
                  {"CKPT": path})
