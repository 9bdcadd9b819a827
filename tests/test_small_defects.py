"""Smaller traps a new user hits in the first week, each reproduced through the CLI (issue 42, item 4): each test
failed on the code before its fix."""

from __future__ import annotations

import json
import os

import pytest

from eagle3_checks.cli import main
from helpers import assert_golden


def test_convert_makes_the_folders_above_dst(drafter, tmp_path, capsys):
    src = drafter("speculators").write()
    dst = tmp_path / "not" / "yet" / "there"
    assert main(["convert", str(src), str(dst), "--to", "vllm", "--verify", "header"]) == 0, capsys.readouterr().err
    assert (dst / "config.json").is_file()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert main(["convert", str(src), str(blocker / "dst"), "--to", "vllm"]) == 2
    assert_golden("test_small_defects/test_convert_makes_the_folders_above_dst.txt", capsys.readouterr().err,
                  {"TMP": tmp_path})


def test_a_sample_that_is_not_a_regular_file_is_never_skipped(tmp_path, capsys):
    pytest.importorskip("torch")
    from eagle3_checks.drafter.example import write_drafter

    drafter = write_drafter(tmp_path / "d")
    data = tmp_path / "data"
    data.mkdir()
    os.mkfifo(data / "hs_0.safetensors")
    code = main(["accept", str(drafter), "--data", str(data)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert_golden("test_small_defects/test_a_sample_that_is_not_a_regular_file_is_never_skipped.txt", err,
                  {"TMP": tmp_path})


def test_fix_on_a_passing_checkpoint_says_there_is_nothing_to_fix(drafter, tmp_path, capsys):
    src = drafter("speculators").write()
    assert main(["fix", str(src), str(tmp_path / "out"), "--level", "header"]) == 0
    out = capsys.readouterr().out
    assert not (tmp_path / "out").exists(), out
    said, _, report = out.partition("\n\n")  # what fix says, then the gate's report
    assert report.startswith("eagle3-checks "), out
    assert_golden("test_small_defects/test_fix_on_a_passing_checkpoint_says_there_is_nothing_to_fix.txt", said,
                  {"TMP": tmp_path})


def test_record_names_only_its_own_options(tmp_path, capsys):
    """A drafter whose trainer's counting is unknown: record says --layers (the option it takes), with the ids each
    counting would give, not --aux-convention, --trainer or --source (which it does not take)."""
    pytest.importorskip("transformers")
    import transformers

    from eagle3_checks.drafter.example import write_drafter

    target = tmp_path / "target"
    cfg = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=4, vocab_size=512, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=128, max_position_embeddings=256)
    transformers.LlamaForCausalLM(cfg).save_pretrained(target)
    drafter = write_drafter(tmp_path / "d", layout="flat")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"input_ids": [5, 6]}) + "\n")
    capsys.readouterr()  # (transformers' progress bars)
    assert main(["record", str(target), "--prompts", str(prompts), "--out", str(tmp_path / "o"), "--drafter",
                 str(drafter)]) == 2
    err = capsys.readouterr().err
    # the whole message: --layers with the ids each counting gives, and no option record does not take
    assert_golden("test_small_defects/test_record_names_only_its_own_options.txt", err, {"TMP": tmp_path})


@pytest.mark.parametrize("broken", ["unknown-dtype", "broken-link"])
def test_unreadable_tensors_stop_the_gate_at_the_header_level(drafter, tmp_path, broken):
    """A tensor of a dtype no reader knows, or a weights file that is a broken link: the files check fails and no
    level past it runs, so nothing imports torch (654 MB) to read what cannot be read."""
    import subprocess
    import sys

    path = drafter("flat").write()
    weights = path / "model.safetensors"
    if broken == "unknown-dtype":
        raw = weights.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        name = next(k for k in header if k != "__metadata__")
        header[name]["dtype"] = "X99"
        text = json.dumps(header).encode().ljust(n)
        weights.write_bytes(raw[:8] + text + raw[8 + n:])
    else:
        weights.unlink()
        weights.symlink_to(tmp_path / "gone.safetensors")
    code = ("import sys; from eagle3_checks.cli import main; c = main(['check', sys.argv[1], '--format', 'json']); "
            "print('torch' in sys.modules, c, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    torch_loaded, exit_code = done.stderr.strip().splitlines()[-1].split()
    assert (torch_loaded, exit_code) == ("False", "1"), done.stderr[-2000:]
    report = json.loads(done.stdout)["checkpoints"][0]
    deeper = [c for c in report["checks"] if c["id"] in ("scan.values",) or c["id"].startswith("forward.")]
    assert deeper and all(c["status"] == "skipped" for c in deeper), deeper
    assert_golden(f"test_small_defects/test_unreadable_tensors_stop_the_gate_at_the_header_level-{broken}.txt",
                  "".join(f"{c['id']}: {c['reason']}\n" for c in deeper), {"TMP": tmp_path})


def test_fix_writes_the_trainer_it_was_told_into_what_it_writes(drafter, tmp_path, capsys):
    """fix --trainer NAME rests on the user's word: the premise goes into the provenance block of what it writes, so
    a later gate without the flag judges the fixed drafter as the fix did, and says where the premise came from."""
    d = drafter("flat")
    d.config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 4, 6]  # SpecForge's count of layers 1, 3, 5
    d.config["eagle_aux_hidden_state_layer_ids"] = [2, 4, 6]
    src = d.write()
    assert main(["fix", str(src), str(tmp_path / "fixed"), "--engine", "vllm", "--trainer", "specforge@0.2.0",
                 "--level", "header"]) in (0, 1)
    cfg = json.loads((tmp_path / "fixed" / "config.json").read_text())
    provenance = cfg["eagle3_checks_provenance"]
    assert (provenance["trainer"], provenance["trainer_version"]) == ("specforge", "0.2.0")
    capsys.readouterr()
    assert main(["check", str(tmp_path / "fixed"), "--engine", "vllm", "--level", "header", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)["checkpoints"][0]
    assert report["trainer"]["name"] == "specforge"
    assert_golden("test_small_defects/test_fix_writes_the_trainer_it_was_told_into_what_it_writes.txt",
                  json.dumps(report["trainer"], indent=2, sort_keys=True) + "\n", {"TMP": tmp_path})


def test_fail_on_chooses_which_warnings_fail(drafter):
    """--strict fails every warning; --fail-on fails those of the codes (or prefixes) named, and no other: a team that
    blocks on engine.aux-layers need not block on a local verifier path. Through the CLI, the plugin and its ini."""
    d = drafter("flat")  # an unknown trainer: engine.aux-layers and engine.semantics warn
    path = d.write()
    assert main(["check", str(path), "--level", "header"]) == 0
    assert main(["check", str(path), "--level", "header", "--fail-on", "engine.aux-layers"]) == 1
    assert main(["check", str(path), "--level", "header", "--fail-on", "engine.aux-layers/undecided"]) == 1
    assert main(["check", str(path), "--level", "header", "--fail-on", "engine.serving,reference"]) == 0
    assert main(["check", str(path), "--level", "header", "--fail-on", "engine.aux-layrs"]) == 2


class FailedFindings:
    """The (severity, code) of each finding of the failed gate items, as a reporting plugin reads them (their
    user_properties)."""

    def __init__(self) -> None:
        self.findings: set[tuple[str, str]] = set()

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            found = json.loads(dict(report.user_properties).get("eagle3_findings", "[]"))
            self.findings |= {(f["severity"], f.get("code")) for f in found}


def test_fail_on_in_the_plugin_and_its_ini(pytester, drafter):
    path = drafter("flat").write()
    pytester.makeini("[pytest]\neagle3_fail_on = engine.aux-layers\n")
    failed = FailedFindings()
    result = pytester.runpytest(f"--eagle3-ckpt={path}", "--eagle3-level=header", "-k", "aux", plugins=[failed])
    assert result.ret == 1 and ("warning", "engine.aux-layers/undecided") in failed.findings, failed.findings
    result = pytester.runpytest(f"--eagle3-ckpt={path}", "--eagle3-level=header", "-k", "aux",
                                "--eagle3-fail-on=engine.serving")
    assert result.ret == 0


def test_diff_says_a_value_the_candidate_does_not_state_and_agrees_with_check(drafter, capsys, tmp_path):
    """A flat drafter whose config lost head_dim (4 heads of 24 in its q_proj) against the same drafter with it:
    `check` fails it (config.head-dim/missing), and `diff` says DIFFERENT with the same fact, read from its tensors;
    a semantic value it does not state is reported as its default (assumed), not as read."""
    a, b = drafter("flat"), drafter("flat")
    del a.config["head_dim"]
    lost, kept = a.write(), b.write()
    assert main(["check", str(lost), "--level", "header"]) == 1
    capsys.readouterr()
    assert main(["diff", str(lost), str(kept), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    [f] = [f for f in doc["findings"] if f["key"] == "head_dim"]
    assert (f["code"], f["severity"], f["basis"], f["expected"]) == ("reference.diff/config-field", "error", "read",
                                                                     "24")
    c = drafter("flat")
    del c.config["rope_theta"]  # the default where the reference states 1e6: a semantic warning, assumed
    assert main(["diff", str(c.write()), str(kept), "--format", "json"]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    [f] = [f for f in doc["findings"] if f["key"] == "rope_theta"]
    assert (f["code"], f["basis"]) == ("reference.diff/semantic", "assumed")
    assert_golden("test_small_defects/test_diff_says_a_value_the_candidate_does_not_state_and_agrees_with_check.txt",
                  "\n".join(f.get(k) or "" for k in ("message", "expected", "found", "why", "fix")), {"TMP": tmp_path})


def test_one_defect_is_one_root_cause(drafter):
    """A `model.` prefix on every tensor: keys names it, each engine refuses the tensors or leaves their parameters
    unfilled; all of it follows from the one cause (it was 19 errors from 16 root causes). A speculators drafter
    without norm_before_residual: engine.semantics names the field, forward.equivalence measures what it changes:
    one cause (it was two)."""
    from eagle3_checks.registry import Severity
    from eagle3_checks.reports.causes import group
    from helpers import run

    d = drafter("flat")
    d.tensors = {f"model.{k}": v for k, v in d.tensors.items()}
    prefixed = run(d.write(), level="header")
    causes = group(prefixed)
    assert causes.count(Severity.ERROR) == 1 and prefixed.counts()["error"] > 10
    assert causes.groups[0].key == "tensor names: a `model.` prefix"
    pytest.importorskip("torch")
    s = drafter("speculators")
    del s.config["norm_before_residual"]
    missing = run(s.write(), level="forward")
    errors = {f.code for f in missing.findings() if f.severity is Severity.ERROR}
    assert errors == {"engine.semantics/norm-before-residual", "forward.equivalence/differs"}, errors
    assert group(missing).count(Severity.ERROR) == 1


def test_shapes_and_the_engines_tell_one_story_of_a_narrowed_projection(drafter, tmp_path):
    """head_dim lost (4 heads of 24 read as 16): shapes, config.head-dim and engine.loads say the same cited fact,
    that vLLM narrows the projections without an error (it said a bare AssertionError stops the load)."""
    from eagle3_checks import engines
    from helpers import run

    d = drafter("flat")
    del d.config["head_dim"]
    result = run(d.write(), level="header", engine="vllm")
    shape = next(f for f in result.findings() if f.code == "shapes/mismatch")
    vllm = engines.newest("vllm")
    assert vllm.narrows_at and vllm.narrows_at in shape.why, shape.why  # the engine's record, cited
    assert "engine.loads/narrowed" in {f.code for f in result.findings()}
    head_dim = next(f for f in result.findings() if f.code == "config.head-dim/missing")
    # the two stories, whole: vLLM narrows without an error (no bare AssertionError stops the load)
    assert_golden("test_small_defects/test_shapes_and_the_engines_tell_one_story_of_a_narrowed_projection.txt",
                  f"shapes/mismatch: {shape.why}\nconfig.head-dim/missing: {head_dim.why}\n", {"TMP": tmp_path})


def test_converts_refusal_names_the_counting_it_rests_on(drafter, tmp_path, capsys):
    """A speculators drafter (trained on the outputs of layers 0, 2, 4 as vLLM counts) for SGLang 0.5.23 on a 6-layer
    DeepSeek-V3 target: no ids make SGLang capture those layers (id 1 switches it to +1), so convert refuses, and says
    what the trained layers rest on and that --aux-convention states it otherwise."""
    src = drafter("speculators").write()
    target = tmp_path / "ds.json"
    target.write_text(json.dumps({"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 6,
                                  "hidden_size": 64, "vocab_size": 512}))
    assert main(["convert", str(src), str(tmp_path / "out"), "--to", "sglang", "--target-config", str(target)]) == 1
    said = "".join(capsys.readouterr())
    assert_golden("test_small_defects/test_converts_refusal_names_the_counting_it_rests_on.txt", said,
                  {"TMP": tmp_path})


def test_the_low_coverage_wording_says_what_was_measured_and_names_no_cause_it_has_no_evidence_for():
    """A wording test (issue 42): on a recording whose d2t came from the same distribution (89.1% on 96-token
    continuations) the warning named "a d2t built from another distribution" as the cause. It says what it measured
    (with its interval) and what could explain it, each as a possibility; above the threshold it says nothing."""
    from types import SimpleNamespace

    from eagle3_checks.acceptance.evaluate import Result

    def result(coverage):
        reading = SimpleNamespace(coverage=coverage, interval=lambda name: SimpleNamespace(
            shown=lambda: f"{100 * coverage:.1f}% [88.0%, 90.2%]"))
        return SimpleNamespace(readings=[reading])

    said = Result.low_coverage(result(0.891))
    assert_golden("test_small_defects/test_the_low_coverage_wording_says_what_was_measured_and_names_no_cause_it_has_"
                  "no_evidence_for.txt", said)
    assert Result.low_coverage(result(0.95)) is None
