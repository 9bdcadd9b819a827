"""The converter: byte-exact, verified, atomic; its refusals; and the strategies that fuzz converters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings

from eagle3_checks.cli import main
from eagle3_checks.convert import TARGETS, ConvertRefused, convert
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.drafter.example import EXAMPLE, vocab_mapping
from eagle3_checks.drafter.spec import semantic_config
from eagle3_checks.errors import UsageError
from eagle3_checks.storage.safetensors import read_bytes
from eagle3_checks.strategies import DrafterCase, drafters, fuzz_converter
from helpers import SGLANG, VLLM, assert_golden, run

# The property tests below (each example converts and gates drafters on disk, too slow for hypothesis' health check).
CONVERT_SETTINGS = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def role_bytes(path: Path) -> dict[str, bytes]:
    ck = open_checkpoint(path)
    return {role: read_bytes(ck.tensors[name]) for role, name in ck.roles.items()}


def semantics(path: Path) -> dict:
    return semantic_config(open_checkpoint(path).config)


# ----- properties ----------------------------------------------------------------------------------------------

@pytest.mark.slow  # over 8 s: 60 examples (the ci profile), each converting and gating drafters on disk
@CONVERT_SETTINGS
@given(drafters(layouts=("speculators",)))
def test_round_trip_is_bit_exact(tmp_path_factory, case: DrafterCase):
    """speculators -> flat (vLLM) -> speculators: tensors bit for bit, semantic config fields equal; each converted
    checkpoint passed the gate (and forward equivalence against its source) before it was written."""
    root = tmp_path_factory.mktemp("rt")
    src = case.write(root / "src")
    flat = convert(src, root / "flat", "vllm")
    back = convert(root / "flat", root / "back", "speculators")
    assert flat.verification.exit_code == 0 and back.verification.exit_code == 0
    assert role_bytes(root / "back") == role_bytes(src) == role_bytes(root / "flat")
    assert semantics(root / "back") == semantics(src)


@pytest.mark.slow  # over 8 s: 60 examples (the ci profile), each converting and gating drafters on disk
@CONVERT_SETTINGS
@given(drafters(layouts=("flat",)))
def test_flat_sources_convert_for_vllm_and_speculators(tmp_path_factory, case: DrafterCase):
    root = tmp_path_factory.mktemp("flat")
    src = case.write(root / "src")
    for to in ("vllm", "speculators"):
        if to == "speculators" and case.shape.target_hidden_size:
            with pytest.raises(ConvertRefused):  # speculators 0.9 sizes fc from hidden_size, not the target's
                convert(src, root / to, to)
            continue
        result = convert(src, root / to, to)
        assert result.verification.exit_code == 0
        assert role_bytes(root / to) == role_bytes(src)


def test_fuzz_a_users_converter_and_shrink_its_failure():
    """A converter that forgets head_dim: fuzz_converter fails, and hypothesis shrinks the drafter to a minimal one."""
    def lossy(src: Path, dst: Path) -> None:
        convert(src, dst, "vllm", verify_level="header")
        cfg = json.loads((dst / "config.json").read_text())
        del cfg["head_dim"]
        (dst / "config.json").write_text(json.dumps(cfg))

    with pytest.raises(AssertionError, match="config.head-dim"):
        fuzz_converter(lossy, layouts=("speculators",), forward=False, settings=settings(max_examples=10))

    def breaks(case: DrafterCase) -> bool:
        return case.shape.head_dim * case.shape.num_attention_heads != case.shape.hidden_size
    minimal = find(drafters(layouts=("speculators",)), breaks, settings=settings(max_examples=200, database=None))
    assert minimal.shape.num_layers == 1 and minimal.shards == 1 and minimal.seed == 0


def test_fuzz_our_own_converter_passes():
    fuzz_converter(lambda s, d: convert(s, d, "vllm"), settings=settings.get_profile("convert"))


# ----- the command, and what it keeps -----------------------------------------------------------------------------

def test_convert_help_offers_only_the_layouts_it_writes(drafter, tmp_path, capsys):
    """--help offered --to trtllm, lmdeploy and mlx, which always ended in a usage error: convert writes for the
    engines whose profile converts (vllm, sglang, llamacpp: flat; speculators), and the others read one of those."""
    import re

    from eagle3_checks.engines import PROFILES

    with pytest.raises(SystemExit):
        main(["convert", "--help"])
    out = capsys.readouterr().out
    offered = re.search(r"--to \{([^}]*)\}", out).group(1).split(",")
    assert offered == list(dict.fromkeys(p.name for p in PROFILES if p.converts_to)) == list(TARGETS)
    assert {"trtllm", "lmdeploy", "mlx"}.isdisjoint(offered)
    src = drafter("flat").write()
    said = ""
    for name in ("trtllm", "lmdeploy", "mlx"):  # not offered, and refused saying where its launch comes from
        assert main(["convert", str(src), str(tmp_path / name), "--to", name]) == 2
        said += capsys.readouterr().err  # eagle3-checks recipe --engine NAME
        assert not (tmp_path / name).exists()
    assert_golden("test_convert/test_convert_help_offers_only_the_layouts_it_writes.txt", said, {"TMP": tmp_path})


def test_cli_converts_and_keeps_the_original_config(drafter, tmp_path, capsys):
    src = drafter("speculators").write()
    code = main(["convert", str(src), str(tmp_path / "out"), "--to", "sglang", "--shift-aux-ids"])
    out = capsys.readouterr().out
    assert code == 0, out
    # 16 tensors copied byte for byte; verified at the forward level for sglang, 0 error(s)
    assert_golden("test_convert/test_cli_converts_and_keeps_the_original_config.txt", out, {"TMP": tmp_path})
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["head_dim"] == 24
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 4]  # SGLang's, where it reads them
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]  # vLLM's
    assert cfg["rope_theta"] == cfg["rope_parameters"]["rope_theta"] == 1e6
    assert cfg["norm_before_residual"] is False and "target_hidden_size" not in cfg
    assert json.loads((tmp_path / "out" / "config_speculators.json").read_text()) == \
        json.loads((src / "config.json").read_text())
    assert all(n.startswith(("midlayer.", "fc.", "norm.", "lm_head.", "embed_tokens.", "d2t", "t2d"))
               for n in open_checkpoint(tmp_path / "out").tensors)


def test_a_flat_drafter_without_rope_theta_converts_with_the_base_every_reader_uses(drafter, tmp_path, capsys):
    """EAGLE's flat drafters often state no rope_theta; their trainer (cnets.py) and every engine use
    10000. convert used to refuse them (config.rope was an error); it writes 10000 explicitly."""
    d = drafter("flat")
    del d.config["rope_theta"]
    assert main(["convert", str(d.write()), str(tmp_path / "out"), "--to", "vllm", "--verify", "header"]) == 0, \
        capsys.readouterr().err
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["rope_theta"] == cfg["rope_parameters"]["rope_theta"] == 10000.0


def test_sharded_source_and_pytorch_bin_source(drafter, tmp_path, monkeypatch):
    """A pytorch_model.bin source is read in place (its zip directory and pickle opcodes, never unpickled): no
    temporary copy of the weights is made, whether the conversion succeeds or is refused (an earlier torch.load
    path leaked a full copy per run)."""
    import tempfile

    torch = pytest.importorskip("torch")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    src = drafter("flat").write(shards=3)
    assert convert(src, tmp_path / "a", "speculators").verification.exit_code == 0
    assert role_bytes(tmp_path / "a") == role_bytes(src)
    binsrc = tmp_path / "bin"
    binsrc.mkdir()
    (binsrc / "config.json").write_text((src / "config.json").read_text())
    ck = open_checkpoint(src)
    from eagle3_checks.numerics.draft_steps import Weights

    w = Weights(ck, "cpu")
    torch.save({name: w.raw(name).clone() for name in ck.tensors}, binsrc / "pytorch_model.bin")
    convert(binsrc, tmp_path / "b", "vllm")
    assert role_bytes(tmp_path / "b") == role_bytes(src)
    assert list(scratch.iterdir()) == []
    with pytest.raises(UsageError, match="exists"):
        convert(binsrc, tmp_path / "b", "vllm")
    assert list(scratch.iterdir()) == []


# ----- vocabulary mappings ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["npz", "folder", "torch"])
def test_vocab_mapping_is_embedded(drafter, tmp_path, kind):
    d = drafter("speculators")
    d2t = np.frombuffer(d.tensors.pop("d2t").data, "<i8").copy()
    t2d = np.frombuffer(d.tensors.pop("t2d").data, bool).copy()
    src = d.write()
    with pytest.raises(ConvertRefused, match="has no d2t .* pass --vocab-mapping"):
        convert(src, tmp_path / "x", "vllm")
    if kind == "npz":
        mapping = tmp_path / "m.npz"
        np.savez(mapping, d2t=d2t, t2d=t2d)
    elif kind == "folder":
        mapping = tmp_path / "m"
        mapping.mkdir()
        np.save(mapping / "d2t.npy", d2t)
        np.save(mapping / "t2d.npy", t2d)
    else:
        torch = pytest.importorskip("torch")
        mapping = tmp_path / "vocab_mapping.pt"
        torch.save({"d2t": torch.from_numpy(d2t), "t2d": torch.from_numpy(t2d)}, mapping)
    result = convert(src, tmp_path / "out", "vllm", vocab_mapping=str(mapping))
    assert "d2t embedded from" in " ".join(result.plan.notes)
    out = open_checkpoint(tmp_path / "out")
    np.testing.assert_array_equal(out.array("d2t"), d2t)


def test_vocab_mapping_that_disagrees_or_does_not_fit(drafter, tmp_path):
    src = drafter("speculators").write()
    d2t, t2d = vocab_mapping(EXAMPLE.vocab_size, EXAMPLE.draft_vocab_size, seed=9)
    np.savez(tmp_path / "other.npz", d2t=d2t, t2d=t2d)
    with pytest.raises(ConvertRefused, match="its d2t differs from the one in"):
        convert(src, tmp_path / "a", "vllm", vocab_mapping=str(tmp_path / "other.npz"))
    np.savez(tmp_path / "short.npz", d2t=d2t[:10], t2d=t2d)
    with pytest.raises(ConvertRefused, match="d2t has 10 entries"):
        convert(src, tmp_path / "b", "vllm", vocab_mapping=str(tmp_path / "short.npz"))
    (tmp_path / "pickle.pt").write_bytes(b"\x80\x04garbage")
    with pytest.raises(UsageError, match="cannot read d2t and t2d"):
        convert(src, tmp_path / "c", "vllm", vocab_mapping=str(tmp_path / "pickle.pt"))
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(UsageError, match="cannot read d2t and t2d: EOFError: the file is empty or ends early"):
        convert(src, tmp_path / "c", "vllm", vocab_mapping=str(tmp_path / "empty.pt"))
    np.savez(tmp_path / "half.npz", d2t=d2t)
    with pytest.raises(UsageError, match=r"half.npz: holds no t2d \(it needs d2t and t2d; found d2t\)"):
        convert(src, tmp_path / "c", "vllm", vocab_mapping=str(tmp_path / "half.npz"))
    torch = pytest.importorskip("torch")
    torch.save({"d2t": print}, tmp_path / "code.pt")  # a reference to code: weights_only refuses it
    with pytest.raises(UsageError) as exc:
        convert(src, tmp_path / "c", "vllm", vocab_mapping=str(tmp_path / "code.pt"))
    assert "refused it: it holds more than plain tensors (eagle3-checks never unpickles code)" in str(exc.value)
    assert "weights_only` set to `False`" not in str(exc.value) and "\n" not in str(exc.value)


# ----- refusals ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tokens", ["0", "-3"])
def test_speculative_tokens_below_one_is_a_usage_error(drafter, tmp_path, capsys, tokens):
    src = drafter("flat").write()
    assert main(["convert", str(src), str(tmp_path / "out"), "--to", "speculators", "--speculative-tokens",
                 tokens]) == 2
    assert_golden(f"test_convert/test_speculative_tokens_below_one_is_a_usage_error-{tokens}.txt",
                  capsys.readouterr().err, {"TMP": tmp_path})  # the number of drafted tokens, at least 1
    assert not (tmp_path / "out").exists()


def test_destination_refusals(drafter, tmp_path, capsys):
    src = drafter("speculators").write()
    (tmp_path / "exists").mkdir()
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    said = ""
    # DST is SRC, is inside it, contains it, exists (pass --force), is a symlink
    for dst in (src, src / "inner", src.parent, tmp_path / "exists", tmp_path / "loop"):
        assert main(["convert", str(src), str(dst), "--to", "vllm"]) == 2
        said += capsys.readouterr().err
    assert_golden("test_convert/test_destination_refusals.txt", said, {"TMP": tmp_path})
    assert not (src / "inner").exists()
    # a DST whose parent is missing is made, as `cp -r` users expect (test_small_defects.py)


def test_force_replaces_only_a_checkpoint_and_never_the_sources_files(drafter, tmp_path, capsys, monkeypatch):
    """--force deleted whatever folder DST named: notes in a subfolder, or the blobs/ folder a Hugging Face cache
    snapshot links into (the source's own bytes). Both are refused now, and so is the current directory."""
    src = drafter("speculators").write()
    junk = tmp_path / "junk"
    (junk / "sub").mkdir(parents=True)
    (junk / "sub" / "notes.txt").write_text("important")
    (junk / "config.json").write_text("{}")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("important")
    blobs, snap = tmp_path / "hub" / "blobs", tmp_path / "hub" / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    for f in src.iterdir():
        (blobs / f.name).write_bytes(f.read_bytes())
        (snap / f.name).symlink_to(blobs / f.name)
    # not a drafter checkpoint (a folder in it; no config.json or safetensors file), holds SRC's files, is the
    # current directory or holds it
    cases = [(src, junk), (src, plain), (snap, blobs), (src, Path("."))]
    monkeypatch.chdir(tmp_path / "hub")
    said = ""
    for source, dst in cases:
        assert main(["convert", str(source), str(dst), "--to", "vllm", "--force", "--verify", "header"]) == 2
        said += capsys.readouterr().err
    assert_golden("test_convert/test_force_replaces_only_a_checkpoint_and_never_the_sources_files.txt", said,
                  {"TMP": tmp_path})
    assert (junk / "sub" / "notes.txt").read_text() == "important" and (plain / "notes.txt").exists()
    assert open_checkpoint(snap).config is not None and not list(tmp_path.glob("**/.*eagle3-tmp*"))


def test_a_destination_that_cannot_be_written_is_a_usage_error(drafter, tmp_path, capsys):
    """A name that is legal but too long once the temporary's suffix is added (the same goes for a read-only
    folder): exit 2 with the reason, not an internal error."""
    src = drafter("speculators").write()
    dst = tmp_path / ("x" * 245)
    assert main(["convert", str(src), str(dst), "--to", "vllm", "--verify", "header"]) == 2
    err = capsys.readouterr().err.replace(f".eagle3-tmp-{os.getpid()}", ".eagle3-tmp-PID")  # its temporary's name
    assert_golden("test_convert/test_a_destination_that_cannot_be_written_is_a_usage_error.txt", err,
                  {"TMP": tmp_path})  # cannot write it: File name too long
    assert not dst.exists()


@pytest.mark.parametrize("breakage", [
    "truncated",  # the file is truncated
    "inconsistent",  # fc.weight's shape (64, 96)
    "bad-d2t",  # d2t entries that map to a target id another draft id already has
])
def test_broken_sources_are_refused_and_untouched(drafter, tmp_path, capsys, breakage):
    d = drafter("flat")
    if breakage == "inconsistent":
        from eagle3_checks.storage.safetensors import RawTensor

        d.tensors["fc.weight"] = RawTensor("BF16", (64, 96), b"\0" * 64 * 96 * 2)
    elif breakage == "bad-d2t":
        v = np.frombuffer(d.tensors["d2t"].data, "<i8").copy()
        v[5] = v[4] - 1
        from eagle3_checks.storage.safetensors import from_numpy

        d.tensors["d2t"] = from_numpy(v)
    src = d.write()
    if breakage == "truncated":
        f = src / "model.safetensors"
        f.write_bytes(f.read_bytes()[:-100])
    before = {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}
    assert main(["convert", str(src), str(tmp_path / "out"), "--to", "vllm"]) == 1
    out = capsys.readouterr().out  # not converted, and why
    assert_golden(f"test_convert/test_broken_sources_are_refused_and_untouched-{breakage}.txt", out, {"TMP": tmp_path})
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.eagle3-*"))
    assert before == {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}


# a trained layer the target lacks is refused before anything is written: no ids can capture it
@pytest.mark.parametrize("change, code", [({"num_hidden_layers": 4}, f"aux-layer ids: no ids make vllm@{VLLM} capture "
                                           "the trained layers [0, 2, 4] on this target (layer 4 is past its last "
                                           "layer, 3); nothing was written"),
                                          ({"hidden_size": 128}, "target.hidden-size/fc-width")])
def test_target_config_is_part_of_the_verification(drafter, tmp_path, change, code):
    """With --target-config, the written drafter must fit the target (aux ids in range, fc width), or nothing is
    written: the verification used to check the vocabulary only and say "0 error(s)"."""
    from eagle3_checks.drafter.example import target_config

    src = drafter("speculators").write()
    (tmp_path / "target.json").write_text(json.dumps({**target_config(EXAMPLE), **change}))
    with pytest.raises(ConvertRefused) as exc:
        convert(src, tmp_path / "out", "vllm", target_config=str(tmp_path / "target.json"), verify_level="header")
    assert code in {f.code for f in exc.value.findings} | {str(exc.value)}, [f.code for f in exc.value.findings]
    assert not (tmp_path / "out").exists()
    (tmp_path / "fits.json").write_text(json.dumps(target_config(EXAMPLE)))
    convert(src, tmp_path / "ok", "vllm", target_config=str(tmp_path / "fits.json"), verify_level="header")


def test_convert_writes_each_engines_ids_where_it_reads_them(drafter, tmp_path):
    """speculators counts the vLLM way ([1, 3, 5]: the outputs of layers 0, 2, 4). The flat copy carries vLLM 0.33's
    ids at the top level (VL v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150 reads only those) and SGLang
    0.5.23's in eagle_config (SG23 spec_aux_hidden_state.py:185-196 reads only those; +1 on the Llama verifier the
    config names, SG23 models/llama.py:929-941), and records the trained layers; --shift-aux-ids changes nothing."""
    src = drafter("speculators").write()
    for out, shift in ((tmp_path / "a", False), (tmp_path / "b", True)):
        result = convert(src, out, "sglang", shift_aux_ids=shift, verify_level="header")
        cfg = json.loads((out / "config.json").read_text())
        assert cfg["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]
        assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 2, 4]
        provenance = cfg["eagle3_checks_provenance"]
        assert provenance["aux_layer_convention"] == "vllm" and provenance["trained_aux"]["layers"] == [0, 2, 4]
        assert result.verification.exit_code == 0
    assert (tmp_path / "a" / "config.json").read_bytes() == (tmp_path / "b" / "config.json").read_bytes()


def test_aux_convention_of_a_flat_source_given_by_the_user(drafter, tmp_path, capsys):
    """A flat config does not say how its trainer counted: its ids are copied as they are (and the note says so)
    until --aux-convention tells it; then each engine's ids are written for the trained layers."""
    src = drafter("flat").write()
    assert main(["convert", str(src), str(tmp_path / "a"), "--to", "speculators", "--verify", "header"]) == 0
    assert_golden("test_convert/test_aux_convention_of_a_flat_source_given_by_the_user.txt",
                  capsys.readouterr().out, {"TMP": tmp_path})  # copied as they are: the trained layers are unknown
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]
    assert "trained_aux" not in cfg["eagle3_checks_provenance"]
    assert main(["convert", str(src), str(tmp_path / "b"), "--to", "speculators", "--aux-convention", "sglang",
                 "--verify", "header"]) == 0
    cfg = json.loads((tmp_path / "b" / "config.json").read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 4, 6]
    assert cfg["eagle3_checks_provenance"]["trained_aux"]["layers"] == [1, 3, 5]


def test_convert_prints_the_warnings_it_counts(drafter, tmp_path, capsys):
    d = drafter("flat")
    del d.config["torch_dtype"]  # a warning in the source, and so in the converted config
    assert main(["convert", str(d.write()), str(tmp_path / "out"), "--to", "speculators", "--verify", "header"]) == 0
    out = capsys.readouterr().out
    # the dtype, and the aux ids whose counting no trainer states (served as trained under one reading of two): the
    # 2 warning(s) counted, each printed
    assert out.count("\n  warning: ") == 2, out
    assert_golden("test_convert/test_convert_prints_the_warnings_it_counts.txt", out, {"TMP": tmp_path})


def test_round_trip_keeps_the_verifier_and_the_first_trainer(drafter, tmp_path):
    """The flat layout has no field for the verifier a speculators config names, nor for who trained the drafter:
    the provenance block carries both, and converting back restores the verifier."""
    src = drafter("speculators").write()
    convert(src, tmp_path / "flat", "vllm", verify_level="header")
    convert(tmp_path / "flat", tmp_path / "back", "speculators", verify_level="header")
    original = json.loads((src / "config.json").read_text())
    back = json.loads((tmp_path / "back" / "config.json").read_text())
    assert back["speculators_config"]["verifier"] == original["speculators_config"]["verifier"]
    assert back["eagle3_checks_provenance"]["trainer"] == "speculators"
    assert back["eagle3_checks_provenance"]["converted_from"] == "flat"


def test_sglang_refuses_what_it_cannot_compute(drafter, tmp_path):
    src = drafter("flat", replace(EXAMPLE, attention_bias=True, num_layers=2)).write()
    with pytest.raises(ConvertRefused, match=rf"sglang {SGLANG} cannot compute this drafter \(more than one layer "
                                             rf"\(SGLang {SGLANG} norms layers >= 1 with hidden_norm\), attention or "
                                             "MLP biases"):
        convert(src, tmp_path / "a", "sglang")


def test_force_replaces_atomically(drafter, tmp_path):
    src = drafter("speculators").write()
    dst = tmp_path / "out"
    convert(src, dst, "vllm")
    (dst / "marker").write_text("old")
    inode = dst.stat().st_ino
    convert(src, dst, "speculators", force=True)
    assert not (dst / "marker").exists() and dst.stat().st_ino != inode
    assert json.loads((dst / "config.json").read_text())["architectures"] == ["Eagle3DraftModel"]
    assert not list(tmp_path.glob(".out.eagle3-*"))


CONVERT = [sys.executable, "-m", "eagle3_checks", "convert"]


def _slow_source(root: Path) -> Path:
    """A drafter big enough (~60 MB) that a conversion is still running when the test interrupts it."""
    from eagle3_checks.drafter.example import drafter_files, write_random_checkpoint

    shape = replace(EXAMPLE, hidden_size=512, num_attention_heads=8, num_key_value_heads=8, head_dim=64,
                    intermediate_size=2048, vocab_size=16384, draft_vocab_size=4096)
    tensors, config = drafter_files(shape, "speculators", sparse=True)
    return write_random_checkpoint(root / "big", tensors, config)


def _interrupt(src: Path, dst: Path, sig: int) -> subprocess.Popen:
    """Start a conversion, freeze it (SIGSTOP) as soon as its temporary exists, then deliver ``sig``."""
    proc = subprocess.Popen([*CONVERT, str(src), str(dst), "--to", "vllm"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not list(dst.parent.glob(f".{dst.name}.eagle3-tmp-*")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.001)
    os.kill(proc.pid, signal.SIGSTOP)
    assert not dst.exists(), "the conversion finished before it could be interrupted"
    os.kill(proc.pid, sig)
    os.kill(proc.pid, signal.SIGCONT)
    return proc


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_interrupted_conversion_leaves_nothing_and_the_next_run_cleans_up(tmp_path, sig):
    src = _slow_source(tmp_path)
    dst = tmp_path / "out"
    proc = _interrupt(src, dst, sig)
    _, err = proc.communicate(timeout=60)
    assert not dst.exists()
    if sig == signal.SIGTERM:
        assert proc.returncode == 143, err
        assert_golden("test_convert/test_interrupted_conversion_leaves_nothing_and_the_next_run_cleans_up-SIGTERM.txt",
                      err, {"TMP": tmp_path})
        assert not list(tmp_path.glob(".out.eagle3-*"))
    else:
        assert list(tmp_path.glob(".out.eagle3-tmp-*")), "a killed run leaves its temporary behind"
        done = subprocess.run([*CONVERT, str(src), str(dst), "--to", "vllm", "--verify", "header"],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        # it says it removed a stale temporary from a killed run (the temporary named by the killed run's id)
        assert_golden("test_convert/test_interrupted_conversion_leaves_nothing_and_the_next_run_cleans_up-SIGKILL.txt",
                      done.stdout.replace(f".eagle3-tmp-{proc.pid}", ".eagle3-tmp-PID"), {"TMP": tmp_path})
        assert not list(tmp_path.glob(".out.eagle3-*")) and (dst / "model.safetensors").exists()


# ----- against the real speculators package -----------------------------------------------------------------------

@pytest.mark.slow
def test_speculators_saved_drafters_convert(speculators_drafters, tmp_path):
    """Drafters saved by speculators 0.9.0 convert for vLLM; the result passes the gate against its source."""
    from peers.variants import SPECULATORS

    for v in SPECULATORS:
        src = speculators_drafters / v["name"]
        dst = tmp_path / v["name"]
        if v.get("window"):
            # a window of 4 tokens over 16 random positions: vLLM 0.33.0 measures it from each draft's position,
            # speculators trained it from the context row; draft step 1 differs, and the verification says why
            with pytest.raises(ConvertRefused) as refused:
                convert(src, dst, "vllm")
            found = [f for f in refused.value.findings if f.code == "forward.equivalence/differs"]
            assert found and "measures the window of 4 tokens" in found[0].why and not dst.exists()
            continue
        convert(src, dst, "vllm")
        result = run(dst, source=str(src), engine="vllm")
        assert result.exit_code == 0, [f.message for f in result.findings() if f.severity.value == "error"]
        assert result.result("forward.equivalence", "vllm").status == "passed"
        assert role_bytes(dst) == {r: b for r, b in role_bytes(src).items()}


def test_convert_suggests_verifier_when_it_must_write_a_null_one(drafter, tmp_path, capsys):
    """Going to speculators without --verifier (nor a target config naming one), the verifier is null: convert's
    own verification only warns, `check --strict` then fails; convert says how to name it."""
    src = drafter("flat").write()
    assert main(["convert", str(src), str(tmp_path / "a"), "--to", "speculators", "--verify", "header"]) == 0
    out = capsys.readouterr().out  # the verifier is unnamed: pass --verifier ORG/NAME
    assert main(["convert", str(src), str(tmp_path / "b"), "--to", "speculators", "--verify", "header",
                 "--verifier", "org/target"]) == 0
    out += "---\n" + capsys.readouterr().out  # named: nothing said of it
    assert_golden("test_convert/test_convert_suggests_verifier_when_it_must_write_a_null_one.txt", out,
                  {"TMP": tmp_path})


# ----- every output serves the engines it is meant for ------------------------------------------------------------

MEANT_FOR = {"vllm": ("vllm", "sglang"), "sglang": ("vllm", "sglang"), "speculators": ("vllm", "speculators")}
ENGINE_CHECKS = ("engine.loads", "engine.semantics", "engine.aux-layers", "engine.serving")


@pytest.mark.parametrize("source, convention", [("speculators", None), ("flat", "sglang"), ("flat", "vllm")])
@pytest.mark.parametrize("to", sorted(MEANT_FOR))
@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "DeepseekV3ForCausalLM"])
def test_every_convert_output_passes_the_engines_it_is_meant_for(drafter, tmp_path, source, convention, to, arch):
    """One rule writes the aux ids (engines.ids_where_read, the same as engine.aux-layers' fixes): a flat output
    serves vLLM and SGLang as trained, a speculators one vLLM and speculators; gated with --engine all, each engine it
    is meant for passes every engine check."""
    from eagle3_checks.drafter.example import target_config

    target = tmp_path / "target.json"
    target.write_text(json.dumps({**target_config(EXAMPLE), "architectures": [arch],
                                  "_name_or_path": "example-org/example-target"}))
    d = drafter(source)  # ids that every engine can be given on both targets (see the next test for one that cannot)
    d.config["eagle_aux_hidden_state_layer_ids"] = [2, 4, 6]
    trainer = None
    if source == "flat":  # a flat drafter of a trainer that counts ids the convention's way, named by --trainer
        d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 4, 6]
        d.beside, trainer = None, {"sglang": "specforge@0.2.0", "vllm": "speculators@0.9.0"}[convention]
    out = tmp_path / "out"
    convert(d.write(), out, to, target_config=str(target), aux_convention=convention, verify_level="header",
            trainer=trainer)
    options = dict(engine="all", target_config=str(target), level="header", aux_convention=convention)
    result = run(out, **options)
    for engine in MEANT_FOR[to]:
        for check_id in ENGINE_CHECKS:
            r = result.result(check_id, engine)
            assert r.status == "passed", (check_id, r.engine, [(f.code, f.message) for f in r.findings])


@pytest.mark.parametrize("arch, ids", [("DeepseekV3ForCausalLM", [1, 3, 5]), ("LlamaForCausalLM", [0, 3, 5])])
def test_convert_refuses_ids_its_engine_cannot_be_given(drafter, tmp_path, capsys, arch, ids):
    """Trained on the embeddings' successor, the output of layer 0 (speculators' id 1): on a DeepSeek-V3 target SGLang
    0.5.23 cannot capture it (id 1 switches its first-id rule to +1, SG23 models/deepseek_v2.py:3458-3473). Trained
    on the embeddings themselves (speculators' id 0): on a Llama target SGLang would need id -1 (+1 on every id,
    SG23 models/llama.py:929-941), which is not an id the gate reads (convert used to write it and then fail its own
    verification, for --to vllm too). Either way --to sglang writes nothing, and --to vllm writes vLLM's ids and
    says SGLang's are not written."""
    from eagle3_checks.drafter.example import target_config

    target = tmp_path / "target.json"
    target.write_text(json.dumps({**target_config(EXAMPLE), "architectures": [arch]}))
    d = drafter("speculators")  # ids [1, 3, 5]: the outputs of layers 0, 2, 4
    d.config["eagle_aux_hidden_state_layer_ids"] = ids
    src = d.write()
    assert main(["convert", str(src), str(tmp_path / "s"), "--to", "sglang", "--target-config", str(target),
                 "--verify", "header"]) == 1
    assert not (tmp_path / "s").exists()
    assert main(["convert", str(src), str(tmp_path / "v"), "--to", "vllm", "--target-config", str(target),
                 "--verify", "header"]) == 0
    cfg = json.loads((tmp_path / "v" / "config.json").read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == ids
    assert "eagle_aux_hidden_state_layer_ids" not in cfg["eagle_config"]
    result = run(tmp_path / "v", engine="vllm,sglang", target_config=str(target), level="header")
    assert result.result("engine.aux-layers", "vllm").status == "passed"
    assert [f.code for f in result.result("engine.aux-layers", "sglang").findings] == ["engine.aux-layers/ids-not-read"]


def test_an_engine_that_needs_more_than_a_layout_is_pointed_to_the_recipe(tmp_path, capsys):
    """TensorRT-LLM, lmdeploy and mlx-vlm need launch settings, an architectures name or a target type that no
    layout carries: convert refuses --to them (exit 2) and names the recipe."""
    from eagle3_checks.cli import main
    from eagle3_checks.defects import Draft

    src = Draft.example("speculators").save(tmp_path / "src")
    said = ""
    for to in ("trtllm", "lmdeploy", "mlx"):
        assert main(["convert", str(src), str(tmp_path / to), "--to", to]) == 2
        said += capsys.readouterr().err  # eagle3-checks recipe --engine TO
        assert not (tmp_path / to).exists()
    assert_golden("test_convert/test_an_engine_that_needs_more_than_a_layout_is_pointed_to_the_recipe.txt", said,
                  {"TMP": tmp_path})
