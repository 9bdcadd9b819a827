"""The eagle3-checks command: every subcommand, formats, and the exit-code rule (0 / 1 / 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import helpers
from eagle3_checks import __version__
from eagle3_checks.cli import main
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.gate import all_checks
from helpers import VLLM, assert_golden, cli


def json_codes(out: str) -> list[set[str]]:
    """Each checkpoint's finding codes in a `check --format json` report, in the order the report lists them."""
    return [{f["code"] for c in ckpt["checks"] for f in c["findings"] if f.get("code")}
            for ckpt in json.loads(out)["checkpoints"]]


def test_check_passes_example_and_fails_defect(drafter, capsys, tmp_path):
    good = drafter("flat").write()
    # the release named: the report does not depend on what is installed here
    code, out, _ = cli(capsys, "check", good, "--engine", f"vllm@{VLLM}")
    assert code == 0
    assert_golden("cli/check-example.txt", out, {"TMP": tmp_path})
    bad = drafter("flat")
    helpers.inject(bad, "d2t-missing")
    bad_path = bad.write()
    code, out, _ = cli(capsys, "check", bad_path, good, "--engine", f"vllm@{VLLM}")
    assert code == 1  # what the report says of each: tests/golden/cli/
    assert_golden("cli/check-d2t-missing-and-example.txt", out, {"TMP": tmp_path})
    code, out, _ = cli(capsys, "check", bad_path, good, "--engine", f"vllm@{VLLM}", "--format", "json")
    missing, example = json_codes(out)
    assert code == 1 and "keys/missing-tensor" in missing and "keys/missing-tensor" not in example


def test_the_same_checkpoint_twice_is_gated_once(drafter, tmp_path, capsys):
    good = drafter("flat").write()
    (tmp_path / "link").symlink_to(good)
    code, out, _ = cli(capsys, "check", good, good, tmp_path / "link", "--format", "json")
    assert code == 0 and [c["path"] for c in json.loads(out)["checkpoints"]] == [str(good)]


def test_check_json_and_markdown(drafter, capsys):
    bad = drafter("speculators")
    helpers.inject(bad, "head-dim-missing")
    code, out, _ = cli(capsys, "check", bad.write(), "--format", "json")
    data = json.loads(out)
    assert code == 1 and data["schema_version"] == 1 and data["exit_code"] == 1
    report = data["checkpoints"][0]
    # auto picks the demo's spec for the demo's checkpoint only: this one lacks a field the spec records
    assert report["layout"] == "speculators" and report["reference"] is None
    by_id = {c["id"]: c for c in report["checks"]}
    # the acceptance level runs with --data; engine.live with --engine NAME@installed
    assert set(by_id) == {c.id for c in all_checks() if c.level != "acceptance" and not c.live_only}
    f = by_id["config.head-dim"]["findings"][0]
    assert f["severity"] == "error" and f["expected"] == "24" and f["key"] == "transformer_layer_config.head_dim"
    assert f["check"] == "config.head-dim" and f["why"] and f["fix"] == 'add "head_dim": 24'
    assert f["code"] == "config.head-dim/missing"
    code, out, _ = cli(capsys, "check", bad.root, "--format", "markdown", "--engine", f"vllm@{VLLM}")
    assert code == 1  # the finding's code, config.head-dim/missing, in the table: the golden file
    assert_golden("cli/check-head-dim-missing.md", out, {"TMP": bad.root.parent})
    # a passing check's note is in the findings list too (the table counts it): config.trainer-release/detected in
    # the golden file
    good = drafter("speculators")
    good_path = good.write()
    code, out, _ = cli(capsys, "check", good_path, "--format", "markdown", "--engine", f"vllm@{VLLM}")
    assert code == 0
    assert_golden("cli/check-speculators.md", out, {"TMP": good.root.parent})
    code, out, _ = cli(capsys, "check", good_path, "--format", "json", "--engine", f"vllm@{VLLM}")
    assert code == 0 and "config.trainer-release/detected" in json_codes(out)[0]


@pytest.mark.parametrize("argv, fragment", [
    (["{good}", "{tmp}/nope", "--format", "json"], "nope: no such file or directory"),
    (["{good}", "--reference", "no-such-spec", "--format", "json"], "no-such-spec"),
])
def test_check_json_on_a_usage_error_is_still_json(drafter, tmp_path, capsys, monkeypatch, argv, fragment):
    """`check ... --format json > report.json` in CI: a usage error leaves a JSON document that says why (exit 2),
    and nothing is gated before a bad path is found."""
    import eagle3_checks.gate

    gated = []
    real_gate = eagle3_checks.gate.gate
    monkeypatch.setattr(eagle3_checks.gate, "gate", lambda path, *a: gated.append(path) or real_gate(path, *a))
    good = drafter("flat").write()
    code, out, err = cli(capsys, "check", *[a.format(good=good, tmp=tmp_path) for a in argv])
    data = json.loads(out)
    assert code == 2 and data["exit_code"] == 2 and data["checkpoints"] == [] and fragment in data["error"]
    assert fragment in err
    if "{tmp}/nope" in argv:  # the bad path is found before the good one is gated
        assert gated == []


def test_skip_waives_a_check_with_its_reason(drafter, capsys):
    # (speculators: a half-converted name only config.architectures fails; a flat name no engine serves fails
    # engine.loads too, as no engine release builds it)
    bad = drafter("speculators")
    helpers.inject(bad, "flat-class-in-speculators")
    path = bad.write()
    code, out, err = cli(capsys, "check", path, "--skip", "config.architectures=renamed by our loader", "--engine",
                         f"vllm@{VLLM}")
    assert code == 0
    assert_golden("cli/check-waived.txt", out, {"TMP": bad.root.parent})
    # the old name is still read, and says (once) when it goes and what replaces it
    assert_golden("cli/test_skip_waives_a_check_with_its_reason.txt", err)
    code, out, err = cli(capsys, "check", path, "--waive", "config.architectures=renamed by our loader", "--format",
                         "json")
    waived = {f["code"]: f["waived"] for c in json.loads(out)["checkpoints"][0]["checks"] for f in c["findings"]
              if f.get("waived")}
    assert code == 0 and err == "" and waived == {
        "config.architectures/flat-class-in-speculators": "renamed by our loader"}


def test_shift_aux_ids_is_deprecated_and_changes_nothing(drafter, capsys, tmp_path):
    path = drafter("speculators").write()
    code, _, err = cli(capsys, "convert", path, tmp_path / "a", "--to", "vllm", "--verify", "header")
    assert code == 0 and err == ""
    code, _, err = cli(capsys, "convert", path, tmp_path / "b", "--to", "vllm", "--verify", "header", "--shift-aux-ids")
    assert code == 0
    assert_golden("cli/test_shift_aux_ids_is_deprecated_and_changes_nothing.txt", err, {"TMP": tmp_path})
    assert (tmp_path / "a" / "config.json").read_text() == (tmp_path / "b" / "config.json").read_text()


def test_strict_fails_on_warnings(drafter, capsys):
    d = drafter("flat")
    del d.config["torch_dtype"]
    path = d.write()
    assert cli(capsys, "check", path)[0] == 0
    code, out, _ = cli(capsys, "check", path, "--strict", "--format", "json")
    report = json.loads(out)["checkpoints"][0]
    assert code == report["exit_code"] == 1 and report["strict"] is True
    assert report["counts"]["error"] == 0 and report["counts"]["warning"] > 0
    # the verdict says why it failed: the golden file (the header level: its notes do not depend on torch)
    code, out, _ = cli(capsys, "check", path, "--strict", "--quiet", "--level", "header", "--engine", f"vllm@{VLLM}")
    assert code == 1
    assert_golden("cli/test_strict_fails_on_warnings.txt", out, {"TMP": d.root.parent})


@pytest.mark.parametrize("argv, fragment", [
    (["check", "{missing}"], "no such file or directory"),
    (["check", "{file}"], "not a directory"),
    (["check", "{empty}"], "holds neither config.json nor a safetensors file"),
    (["check", "{good}", "--skip", "keys"], "write CHECK_ID=REASON"),
    (["check", "{good}", "--skip", "nope=x"], "no check named 'nope'"),
    (["check", "{good}", "--target-config", "{missing}"], "no such file"),
    (["check", "{good}", "--target-config", "{file}"], "cannot read it as JSON"),
    (["check", "{good}", "--reference", "nope"], "no such file, directory or shipped spec"),
    (["diff", "{good}", "nope"], "no such checkpoint directory, spec file or shipped spec"),
    (["inspect", "{missing}"], "no such file or directory"),
])
def test_usage_errors_exit_2(drafter, tmp_path, capsys, argv, fragment):
    paths = {"missing": tmp_path / "missing", "file": tmp_path / "file.txt", "empty": tmp_path / "empty",
             "good": drafter("flat").write()}
    paths["file"].write_text("not json")
    paths["empty"].mkdir()
    code, out, err = cli(capsys, *[a.format(**paths) for a in argv])
    assert code == 2 and fragment in err and "Traceback" not in err + out


@pytest.mark.parametrize("argv", [
    ["check", "{path}"], ["inspect", "{path}"], ["check", "{good}", "--target", "{path}"],
    ["forward", "{good}", "--engine", "vllm", "--inputs", "{path}", "--out", "{out}"],
])
@pytest.mark.parametrize("kind, fragment", [
    ("loop", "a symbolic link loop"), ("loop-on-the-way", "a symbolic link loop"),
    ("dangling", "a symbolic link to gone, which does not exist"), ("missing", "no such file or directory"),
])
def test_a_symlink_loop_is_named_as_one(drafter, tmp_path, capsys, argv, kind, fragment):
    """A checkpoint (or --target, --inputs) path that is a symbolic link loop said "no such file or directory"
    (pathlib says a loop does not exist): it says what it is, exit 2, as does a link to a missing target."""
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "dangling").symlink_to("gone")
    path = {"loop": tmp_path / "loop", "loop-on-the-way": tmp_path / "loop" / "drafter",
            "dangling": tmp_path / "dangling", "missing": tmp_path / "missing"}[kind]
    paths = {"path": path, "good": drafter("flat").write(), "out": tmp_path / "out.safetensors"}
    code, out, err = cli(capsys, *[a.format(**paths) for a in argv])
    assert code == 2 and fragment in err and "Traceback" not in err + out, err


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["check", "x", "--level", "bogus"])
    assert exc.value.code == 2


def test_inspect_shows_provenance_and_tensors(drafter, capsys):
    d = drafter("flat")
    del d.config["num_key_value_heads"]
    code, out, _ = cli(capsys, "inspect", d.write())
    assert code == 0
    assert_golden("cli/inspect-flat.txt", out, {"TMP": d.root.parent})
    code, out, _ = cli(capsys, "inspect", d.root, "--format", "json")
    data = json.loads(out)
    assert data["config"]["head_dim"] == {"value": 24, "source": "config.json: head_dim"}


def test_inspect_labels_rope_parameters_as_the_config_writes_it(drafter, capsys):
    """A speculators config keeps its rope in transformer_layer_config.rope_parameters: inspect labels the field
    rope_parameters (it said rope_scaling, a key the file does not hold); a flat config's rope_scaling stays so."""
    code, out, _ = cli(capsys, "inspect", drafter("speculators").write())
    assert code == 0
    rope = [line.split()[0] for line in out.splitlines() if line.endswith("transformer_layer_config.rope_parameters")]
    assert rope == ["rope_parameters"]
    d = drafter("flat")
    d.config["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
    code, out, _ = cli(capsys, "inspect", d.write())
    assert [line.split()[0] for line in out.splitlines() if line.endswith("config.json: rope_scaling")] == \
        ["rope_scaling"]
    code, out, _ = cli(capsys, "inspect", drafter("speculators").write(), "--format", "json")
    assert json.loads(out)["config"]["rope_scaling"]["source"] == \
        "config.json: transformer_layer_config.rope_parameters"


def test_spec_writes_refuses_overwrite_and_broken_input(drafter, tmp_path, capsys):
    """What each refusal says (an existing file, a file inside the checkpoint, a path it cannot write, a checkpoint
    that does not read): the golden file, their stderr in that order."""
    out_file = tmp_path / "ref.json"
    code, out, _ = cli(capsys, "spec", drafter("flat").write(), "-o", out_file, "--name", "mine")
    assert code == 0 and json.loads(out_file.read_text())["name"] == "mine"
    said = []
    code, _, err = cli(capsys, "spec", drafter("flat").write(), "-o", out_file)
    assert code == 2
    said.append(err)
    ckpt = drafter("flat").write()
    config = (ckpt / "config.json").read_text()
    code, _, err = cli(capsys, "spec", ckpt, "-o", ckpt / "config.json", "--force")
    assert code == 2 and (ckpt / "config.json").read_text() == config
    said.append(err)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    code, _, err = cli(capsys, "spec", ckpt, "-o", tmp_path / "loop")
    assert code == 2, err
    said.append(err)
    broken = drafter("flat").write()
    (broken / "model.safetensors").write_bytes(b"\0" * 4)
    code, _, err = cli(capsys, "spec", broken, "-o", tmp_path / "other.json")
    assert code == 1 and not (tmp_path / "other.json").exists()
    said.append(err)
    assert_golden("cli/test_spec_writes_refuses_overwrite_and_broken_input.txt", "".join(said), {"TMP": tmp_path})
    # The written spec works as a reference.
    code, out, _ = cli(capsys, "check", drafter("speculators").write(), "--reference", out_file, "--strict",
                       "--format", "json")
    report = json.loads(out)["checkpoints"][0]
    assert code == 0 and report["reference"] == "mine" and report["reference_note"] == f"spec file {out_file}"


def test_diff(drafter, capsys):
    flat, spec_layout = drafter("flat").write(), drafter("speculators").write()
    code, out, _ = cli(capsys, "diff", flat, spec_layout)
    assert code == 0
    assert_golden("cli/test_diff.txt", out, {"TMP": flat.parent})
    code, out, _ = cli(capsys, "diff", flat, spec_layout, "--format", "json")
    data = json.loads(out)
    assert code == data["exit_code"] == 0 and data["compared"] is True
    assert [(f["code"], f["expected"], f["found"]) for f in data["findings"]] == [
        ("reference.diff/layouts-differ", "speculators", "flat")]
    code, out, _ = cli(capsys, "diff", flat, "aq-medai-kimi-k2-eagle3", "--format", "json")
    data = json.loads(out)
    assert code == 1 and data["exit_code"] == 1
    assert any("fc.weight: shape [64, 192], aq-medai-kimi-k2-eagle3 has [7168, 21504]" == f["message"]
               for f in data["findings"])


def test_diff_says_what_it_did_not_compare(drafter, capsys):
    """diff compares the two as specs: a tensor no drafter role names and a changed architectures are outside them.
    Two drafters differing only there are not SAME (it said so, exit 0, of a drafter SGLang would refuse by its
    architectures): NO ERROR, with what differs outside the spec named (``outside``); the same drafter twice is
    SAME."""
    a, b = drafter("flat"), drafter("flat")
    a.tensors["extra_proj.weight"] = a.tensors["fc.weight"]
    a.config["architectures"] = ["SomethingElse"]
    a_path, b_path = a.write(), b.write()
    code, out, _ = cli(capsys, "diff", a_path, b_path, "--format", "json")
    data = json.loads(out)
    assert code == data["exit_code"] == 0 and data["findings"] == []
    assert data["outside"] == ["A's extra_proj.weight (no drafter role)",
                               "architectures (['SomethingElse'] against ['LlamaForCausalLMEagle3'])"]
    assert data["summary"].startswith("NO ERROR: ")
    code, out, _ = cli(capsys, "diff", b_path, b_path, "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["outside"] == [] and data["summary"].startswith("SAME: ")
    code, out, _ = cli(capsys, "diff", a_path, b_path)
    assert_golden("cli/test_diff_says_what_it_did_not_compare.txt", out, {"TMP": a_path.parent})
    many = drafter("flat")
    for i in range(7):  # a whole model given by mistake: the first five named, the rest counted
        many.tensors[f"extra_{i}.weight"] = many.tensors["fc.weight"]
    code, out, _ = cli(capsys, "diff", many.write(), b_path, "--format", "json")
    assert json.loads(out)["outside"] == [f"A's extra_{i}.weight (no drafter role)" for i in range(5)] + [
        "2 more of A's tensors with no drafter role"]


def test_diff_compares_aux_ids_by_the_layers_they_select(drafter, tmp_path, capsys):
    """A speculators drafter's ids [1, 3, 5] count vLLM's way (the inputs of layers 1, 3, 5: the outputs of 0, 2, 4);
    a reference counted SGLang's way selects those layers with [0, 2, 4]. diff compared the numbers."""
    from eagle3_checks.drafter.spec import snapshot

    path = drafter("speculators").write()
    spec = snapshot(open_checkpoint(path), "sglang-counted")
    spec.aux_convention, spec.aux_convention_note = "sglang", "stated for this test"
    for ids, codes in (([0, 2, 4], []), ([1, 3, 5], ["reference.diff/aux-convention"])):
        spec.config["aux_layer_ids"] = ids
        (tmp_path / "ref.json").write_text(spec.dumps())
        code, out, _ = cli(capsys, "diff", path, tmp_path / "ref.json", "--format", "json")
        found = [f for f in json.loads(out)["findings"] if f["code"].startswith("reference.diff/aux")]
        assert code == 0 and [f["code"] for f in found] == codes, found
    assert found[0]["basis"] == "inferred" and found[0]["settle"]
    # what each side's ids capture, and what settles it (--aux-convention): the golden file
    assert_golden("cli/test_diff_compares_aux_ids_by_the_layers_they_select.txt",
                  f"{found[0]['message']}\nsettle: {found[0]['settle']}\n", {"TMP": tmp_path})


def test_diff_states_what_each_engine_computes_with_a_semantic_value(drafter, capsys):
    d = drafter("flat")
    d.config["rms_norm_eps"] = 1e-5
    code, out, _ = cli(capsys, "diff", d.write(), "tiny-example", "--engine", "vllm,sglang", "--format", "json")
    (f,) = [f for f in json.loads(out)["findings"] if f["code"] == "reference.diff/semantic"]
    assert code == 0 and f["severity"] == "warning" and f["basis"] == "read"
    # what vllm and sglang (their newest releases) compute with: the golden file
    assert_golden("cli/test_diff_states_what_each_engine_computes_with_a_semantic_value.txt", f["why"] + "\n")
    code, _, _ = cli(capsys, "diff", d.root, "tiny-example", "--strict")
    assert code == 1  # a warning fails under --strict


def test_fix_takes_the_report_options_check_takes(drafter, tmp_path, capsys):
    """fix -q was a usage error (the program's usage, not fix's); --color too."""
    d = drafter("flat")
    del d.config["head_dim"]
    src = d.write()
    # the release named: the report does not depend on what is installed here
    code, out, err = cli(capsys, "fix", src, tmp_path / "fixed", "-q", "--color", "always", "--engine", f"vllm@{VLLM}")
    assert code == 0, err
    # what was written, then the quiet report (failures and verdict only) in colour: the golden file
    assert_golden("cli/test_fix_takes_the_report_options_check_takes.txt", out, {"TMP": tmp_path})


def test_a_command_usage_error_shows_that_commands_usage(drafter, tmp_path, capsys):
    said = []
    for argv, usage in ((["fix", drafter("flat").write(), tmp_path / "out", "--bogus"], "usage: eagle3-checks fix "),
                        (["check", tmp_path, "-x"], "usage: eagle3-checks check ")):
        with pytest.raises(SystemExit) as exc:
            main([str(a) for a in argv])
        err = capsys.readouterr().err
        # the usage lines are argparse's (wrapped to the terminal): their start only; the error line is the golden's
        assert exc.value.code == 2 and err.startswith(usage), err[:200]
        said.append(err.splitlines()[-1])
    assert_golden("cli/test_a_command_usage_error_shows_that_commands_usage.txt", "\n".join(said) + "\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("breakage", ["truncated", "config-unreadable"])
def test_fix_exits_as_check_does_on_a_checkpoint_that_cannot_be_read(drafter, tmp_path, capsys, breakage):
    """docs/gate.md: one set of exit codes. check reports a truncated file or an unreadable config.json as files
    findings (exit 1); fix said "cannot be read as a checkpoint" and exited 2. Now it reports what check reports,
    exits with check's code, and writes nothing."""
    src = drafter("flat").write()
    if breakage == "truncated":
        weights = src / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-100])
    else:
        (src / "config.json").write_text("{")
    checked, out, _ = cli(capsys, "check", src, "--format", "json")
    fixed, fixed_out, err = cli(capsys, "fix", src, tmp_path / "out", "--format", "json")
    assert checked == fixed == 1 and not (tmp_path / "out").exists()
    assert_golden(f"cli/test_fix_exits_as_check_does_on_a_checkpoint_that_cannot_be_read-{breakage}.txt", err,
                  {"TMP": tmp_path})
    codes = {f["code"] for c in json.loads(fixed_out)["checkpoints"][0]["checks"] for f in c["findings"]}
    assert codes == {f["code"] for c in json.loads(out)["checkpoints"][0]["checks"] for f in c["findings"]}
    assert any(code.startswith("files/") for code in codes)
    # not a checkpoint at all: a usage error for both
    assert cli(capsys, "check", tmp_path)[0] == cli(capsys, "fix", tmp_path, tmp_path / "out2")[0] == 2


def test_list_rows_are_aligned(capsys):
    """The level column was padded to 7 ("forward"): the acceptance rows' titles started one column off, and the
    forward row's had a single space."""
    code, out, _ = cli(capsys, "list")
    rows = out.splitlines()
    starts = {row.index(c.title) for row, c in zip(rows, all_checks(), strict=True)}
    assert code == 0 and len(starts) == 1, starts
    assert all(row[next(iter(starts)) - 2:next(iter(starts))] == "  " for row in rows)


def test_list_and_version(capsys):
    """One row per check, its id first; reference.diff's row and the version line (the releases mirrored) are in the
    golden file."""
    code, out, _ = cli(capsys, "list")
    ids, rows = [c.id for c in all_checks()], out.splitlines()
    assert code == 0 and [row.split()[0] for row in rows] == ids
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    version = " ".join(capsys.readouterr().out.split())  # argparse wraps it to the terminal's width
    assert exc.value.code == 0 and version.startswith(f"eagle3-checks {__version__} ")
    assert_golden("cli/test_list_and_version.txt", f"{rows[ids.index('reference.diff')]}\n{version}\n")


def test_demo(tmp_path, capsys):
    # the release named: the report does not depend on what is installed here
    code, out, _ = cli(capsys, "demo", "--out", tmp_path / "ex", "--engine", f"vllm@{VLLM}")
    assert code == 0
    assert_golden("cli/test_demo.txt", out, {"TMP": tmp_path})
    assert (tmp_path / "ex" / "example-flat" / "model.safetensors").exists()
    code, out, _ = cli(capsys, "demo", "--format", "json", "--engine", f"vllm@{VLLM}")
    reports = json.loads(out)["checkpoints"]
    # the speculators example is the one the shipped spec describes (picked by auto); the flat one has none
    assert code == 0 and [(r["layout"], r["reference"], r["exit_code"], r["counts"]["error"], r["counts"]["warning"])
                          for r in reports] == [("speculators", "tiny-example", 0, 0, 0), ("flat", None, 0, 0, 0)]


def test_demo_out_refusals(tmp_path, capsys):
    """demo --out: a file is not a folder (it used to be an internal error), and an earlier example is kept unless
    --force."""
    (tmp_path / "afile").write_text("x")
    code, _, refused_file = cli(capsys, "demo", "--out", tmp_path / "afile")
    assert code == 2
    assert cli(capsys, "demo", "--out", tmp_path / "ex")[0] == 0
    config = tmp_path / "ex" / "example-flat" / "config.json"
    config.write_text("{}")
    code, _, refused_again = cli(capsys, "demo", "--out", tmp_path / "ex")
    assert code == 2 and config.read_text() == "{}"
    # what each refusal says (the --out file is not a directory; the earlier examples, named, exist): the golden file
    assert_golden("cli/test_demo_out_refusals.txt", refused_file + refused_again, {"TMP": tmp_path})
    assert cli(capsys, "demo", "--out", tmp_path / "ex", "--force")[0] == 0
    assert config.read_text() != "{}"


@pytest.mark.parametrize("breakage", ["garbage-header", "empty-weights", "config-null", "config-types",
                                       "index-garbage", "weights-dir"])
def test_broken_input_never_tracebacks(drafter, breakage):
    """Run as a real process: a clear message and exit 1, never a traceback, never a modified file."""
    d = drafter("speculators")
    path = d.write(shards=2 if breakage == "index-garbage" else 1)
    if breakage == "garbage-header":
        (path / "model.safetensors").write_bytes(b"\x10\0\0\0\0\0\0\0" + b"\xff" * 40)
    elif breakage == "empty-weights":
        (path / "model.safetensors").write_bytes(b"")
    elif breakage == "config-null":
        (path / "config.json").write_text("null")
    elif breakage == "config-types":
        cfg = json.loads((path / "config.json").read_text())
        cfg["transformer_layer_config"] = {"hidden_size": [1], "num_attention_heads": None, "vocab_size": -3}
        cfg["eagle_aux_hidden_state_layer_ids"] = "1,2,3"
        (path / "config.json").write_text(json.dumps(cfg))
    elif breakage == "index-garbage":
        (path / "model.safetensors.index.json").write_text('{"weight_map": {"fc.weight": 7}}')
    elif breakage == "weights-dir":
        (path / "model.safetensors").unlink()
        (path / "model.safetensors").mkdir()
    before = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
    # at the default level where the checkpoint still reads (the forward pass imports torch), else at the scan
    # level: a checkpoint whose header or index does not read has nothing a deeper level could run on
    level = [] if breakage == "config-types" else ["--level", "scan"]
    proc = subprocess.run([sys.executable, "-m", "eagle3_checks", "check", str(path), *level], capture_output=True,
                          text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr and "FAILED" in proc.stdout
    assert before == {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
