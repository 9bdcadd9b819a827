"""Hostile and broken input: every command answers with a message and exit 1 or 2 (never 3, never a traceback),
quickly, and leaves the files as they were."""

from __future__ import annotations

import json
import re
import struct

import numpy as np
import pytest
import safetensors.numpy

from eagle3_checks.cli import main
from eagle3_checks.storage.safetensors import RawTensor, encode_header, read_header, write_safetensors
from helpers import assert_golden


def header_file(path, header: dict, data: bytes = b"") -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def deep_json() -> str:
    return '{"a":' + "[" * 200_000 + "]" * 200_000 + "}"


def break_dtype_list(path):
    header_file(path / "model.safetensors", {"fc.weight": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}},
                b"\0" * 4)


def break_deep_header(path):
    raw = deep_json().encode()
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)


def break_deep_config(path):
    (path / "config.json").write_text(deep_json())


def break_nul_shard(path):
    (path / "model.safetensors").rename(path / "a.safetensors")
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"fc.weight": "a\u0000b"}}))


def break_huge_layer_index(path):
    header_file(path / "model.safetensors", {f"layers.{'9' * 5000}.input_layernorm.weight":
                                             {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                             "layers.10000000.input_layernorm.weight":
                                             {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8)


def break_huge_layer_count(path):
    cfg = json.loads((path / "config.json").read_text())
    cfg["num_hidden_layers"] = 10**9
    (path / "config.json").write_text(json.dumps(cfg))


def break_huge_numbers(path):
    text = (path / "config.json").read_text().replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": ' + "9" * 400)
    text = text.replace('"rope_theta": 1000000.0', '"rope_theta": 1e400')
    (path / "config.json").write_text(text)


def break_huge_d2t_shape(path):
    header = read_header(path / "model.safetensors", "m").entries
    tensors = {n: RawTensor(e.dtype, e.shape, (path / "model.safetensors").read_bytes()[e.offset:e.offset + e.nbytes])
               for n, e in header.items() if n != "d2t"}
    write_safetensors(path / "model.safetensors", tensors)
    raw = bytearray((path / "model.safetensors").read_bytes())
    # Append a d2t entry whose shape claims 2**61 elements, data pointing past the end.
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    end = max(v["data_offsets"][1] for k, v in head.items() if k != "__metadata__")
    head["d2t"] = {"dtype": "I64", "shape": [2**61], "data_offsets": [end, end + 8 * 2**61]}
    body = json.dumps(head).encode()
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(body)) + body + bytes(raw[8 + n:]))


def break_one_dim_o_proj(path):
    header = read_header(path / "model.safetensors", "m").entries
    data = (path / "model.safetensors").read_bytes()
    tensors = {n: RawTensor(e.dtype, e.shape, data[e.offset:e.offset + e.nbytes]) for n, e in header.items()}
    tensors["midlayer.self_attn.o_proj.weight"] = RawTensor("BF16", (4,), b"\0" * 8)
    tensors["midlayer.self_attn.q_proj.weight"] = RawTensor("BF16", (), b"\0" * 2)
    write_safetensors(path / "model.safetensors", tensors)


def break_many_config_keys(path):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update({f"k{i}": i for i in range(100_000)})
    (path / "config.json").write_text(json.dumps(cfg))


BREAKAGES = [break_dtype_list, break_deep_header, break_deep_config, break_nul_shard, break_huge_layer_index,
             break_huge_layer_count, break_huge_numbers, break_huge_d2t_shape, break_one_dim_o_proj,
             break_many_config_keys]


@pytest.mark.parametrize("breakage", BREAKAGES, ids=lambda f: f.__name__[6:])
@pytest.mark.parametrize("command", ["check", "inspect", "spec", "diff"])
def test_broken_checkpoints(drafter, tmp_path, capsys, breakage, command):
    path = drafter("flat").write()
    breakage(path)
    before = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
    argv = {"check": ["check", str(path), "--level", "header"], "inspect": ["inspect", str(path)],
            "spec": ["spec", str(path), "-o", str(tmp_path / "s.json")], "diff": ["diff", str(path), "tiny-example"]}
    code = main(argv[command])
    out, err = capsys.readouterr()
    assert code in (0, 1, 2), (code, err)
    assert "internal error" not in err and "crashed" not in out and "Traceback" not in out + err
    assert before == {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}


def test_valid_header_whose_length_looks_like_a_pickle(tmp_path):
    """A header of 0x10580 bytes starts with 0x80 0x05, a pickle's first bytes: still a safetensors file."""
    tensors = {"x": RawTensor("F32", (2,), b"\0" * 8)}
    head = encode_header(tensors, {"pad": " " * (0x10580 - 70)})
    n = struct.unpack("<Q", head[:8])[0]
    pad = 0x10580 - n
    meta = {"pad": " " * (0x10580 - 70 + pad)}
    head = encode_header(tensors, meta)
    assert head[:2] == b"\x80\x05", head[:8]
    path = tmp_path / "m.safetensors"
    path.write_bytes(head + b"\0" * 8)
    assert read_header(path, "m").problems == []
    assert safetensors.numpy.load_file(path)["x"].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("case, argv", [
    ("long-checkpoint", ["check", "/tmp/" + "a" * 5000]),
    ("long-reference", ["check", "{good}", "--reference", "/tmp/" + "b" * 5000]),
    ("long-target-config", ["check", "{good}", "--target-config", "/tmp/" + "c" * 5000]),
    ("deep-target-config", ["check", "{good}", "--target-config", "{deep}"]),
    ("deep-reference", ["check", "{good}", "--reference", "{deep}"]),
    ("long-diff-side", ["diff", "{good}", "/tmp/" + "d" * 5000]),
    ("long-spec-output", ["spec", "{good}", "-o", "/tmp/" + "e" * 5000]),
])
def test_unusable_option_values_are_usage_errors(drafter, tmp_path, capsys, case, argv):
    """A usage error (exit 2) in one line of stderr (an "eagle3-checks: error:" line, its wording in the golden
    file), nothing on stdout."""
    good = drafter("flat").write()
    (tmp_path / "deep.json").write_text(deep_json())
    code = main([a.format(good=good, deep=tmp_path / "deep.json") for a in argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.splitlines()) == 1, (code, out, err)
    # the exception's own words are Python's and the OS's (errno 36 is Linux's): not the tool's, not recorded
    said = re.sub(r"\b((?:Recursion|OS)Error): .*", r"\1: ...", err)
    assert_golden(f"test_hostile/test_unusable_option_values_are_usage_errors-{case}.txt", said, {"TMP": tmp_path})


def test_spec_refuses_a_config_with_type_errors(drafter, tmp_path, capsys):
    d = drafter("flat")
    d.config["hidden_size"] = "64"
    code = main(["spec", str(d.write()), "-o", str(tmp_path / "s.json")])
    err = capsys.readouterr().err
    assert code == 1 and len(err.splitlines()) == 2  # config.json: hidden_size has the wrong type; nothing written
    assert_golden("test_hostile/test_spec_refuses_a_config_with_type_errors.txt", err, {"TMP": tmp_path})
    assert not (tmp_path / "s.json").exists()


def test_index_without_shards_or_config_is_not_a_checkpoint(tmp_path, capsys):
    (tmp_path / "model.safetensors.index.json").write_text('{"weight_map": {"a": "b.safetensors"}}')
    assert main(["check", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1  # holds neither config.json nor a safetensors file
    assert_golden("test_hostile/test_index_without_shards_or_config_is_not_a_checkpoint.txt", err, {"TMP": tmp_path})


def test_bad_spec_values_are_usage_errors(drafter, tmp_path, capsys):
    from eagle3_checks.drafter.spec import shipped_specs

    spec = json.loads(open(shipped_specs()["tiny-example"]).read())
    spec["config"]["aux_layer_ids"] = 5
    (tmp_path / "bad.json").write_text(json.dumps(spec))
    assert main(["diff", str(drafter("flat").write()), str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1  # aux_layer_ids must be a list
    assert_golden("test_hostile/test_bad_spec_values_are_usage_errors.txt", err, {"TMP": tmp_path})


def test_d2t_with_an_enormous_shape_is_a_finding(drafter):
    from helpers import codes, run

    path = drafter("flat").write()
    break_huge_d2t_shape(path)
    result = run(path, level="header")
    assert result.result("files").status == "failed"
    assert result.result("vocab.d2t").status in ("failed", "skipped")
    assert not [c for c in codes(result) if c.endswith("/crashed")]  # no check raised
    np.testing.assert_equal(result.exit_code, 1)


@pytest.mark.parametrize("value, kind", [("eagle3", "eagle3"), ("peagle", "peagle"), ("dflash", None), ([], None),
                                         ({"eagle3": 1}, None), (None, None)])
def test_the_speculators_kind_is_a_name_or_none(value, kind):
    """speculators_model_type of any JSON type: a kind the layout knows, or None (an unhashable value once crashed
    every check that asked; the fuzz test found it)."""
    from eagle3_checks.drafter.layout import speculators_kind

    assert speculators_kind({"speculators_model_type": value}) == kind
