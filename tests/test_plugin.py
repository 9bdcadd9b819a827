"""The pytest plugin, driven with pytester: items per check, selection, reports, options, fixtures, xdist."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from xml.etree import ElementTree

import pytest

from eagle3_checks.engines import newest
from eagle3_checks.gate import all_checks

try:  # pytester's in-process runs unload what they import, and torch cannot be imported twice in one process
    import torch  # noqa: F401
except ImportError:
    pass

import helpers
from helpers import SGLANG, VLLM, assert_golden

# one item each with the default --eagle3-engine (vllm); the acceptance level's only with --eagle3-data, engine.live
# only with --eagle3-engine NAME@installed
DEFAULT = [c for c in all_checks() if c.level != "acceptance" and not c.live_only]
N_CHECKS = len(DEFAULT)
LABELS = {f"{c.id}[{newest('vllm').spec}]" if c.per_engine else c.id for c in DEFAULT}


class Failed:
    """What a reporting plugin reads of each failed item: its node id, location (the label pytest shows) and the
    findings the gate attached (user_properties)."""

    def __init__(self) -> None:
        self.reports: list = []

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed:
            self.reports.append(report)

    def findings(self, code: str) -> list[dict]:
        return [f for r in self.reports for f in json.loads(dict(r.user_properties).get("eagle3_findings", "[]"))
                if f.get("code") == code]


def test_gate_from_an_empty_folder(pytester, drafter):
    path = drafter("flat").write()
    result = pytester.runpytest(f"--eagle3-ckpt={path}")
    # Without --eagle3-target-config the three target checks skip (with the reason), the rest pass.
    result.assert_outcomes(passed=N_CHECKS - 3, skipped=3)
    result.stdout.fnmatch_lines(["*eagle3-checks*", f"*{path}: PASSED: 0 error(s)*"])
    assert result.ret == 0


@pytest.mark.parametrize("ci", [None, "true"], ids=["terminal", "ci"])
def test_failure_prints_the_finding_not_a_traceback(pytester, drafter, monkeypatch, ci):
    # In CI (the CI variable set) pytest prints a failure's whole message on the short-summary line;
    # the plugin gives it one line, the first finding, so the findings are not printed twice.
    if ci:
        monkeypatch.setenv("CI", ci)
    else:
        monkeypatch.delenv("CI", raising=False)
        monkeypatch.delenv("BUILD_NUMBER", raising=False)
    d = drafter("speculators")
    helpers.inject(d, "d2t-missing")
    path = d.write()
    result = pytester.runpytest(f"--eagle3-ckpt={path}", "-p", "no:cacheprovider")
    # keys fails, and so does vLLM's loads (it builds a d2t no tensor fills: zeros); --eagle3-reference=auto picks
    # the shipped tiny spec for the demo's own checkpoint only, which this no longer is, so the diff skips; the
    # forward check has no trained mapping to compare with and skips, saying so.
    result.assert_outcomes(failed=2, passed=N_CHECKS - 8, skipped=6)
    result.stdout.fnmatch_lines([
        f"*eagle3 {path.name}::keys*",
        "*ERROR: d2t is missing (draft_vocab_size 128 < vocab_size 512)*",
        "*fix:*embed the d2t offsets*",
    ])
    out = result.stdout.str()
    assert "Traceback" not in out and "pytest_plugin.py" not in out and "raise CheckFailed" not in out
    failures, summary = out.split("short test summary info")
    assert failures.count("ERROR: d2t is missing") == 1 and summary.count("ERROR: d2t is missing") == 1
    # At the terminal the line is cut to its width; in CI it is whole.
    keys_line = "ERROR: d2t is missing (draft_vocab_size 128 < vocab_size 512)" if ci else "ERROR: d2t is missing*"
    result.stdout.fnmatch_lines([f"FAILED eagle3-checks::{path.name}::keys - {keys_line}"])
    assert result.ret == 1


def test_summary_says_the_verdict_is_the_whole_gates_when_k_selects_some(pytester, drafter):
    d = drafter("flat")
    helpers.inject(d, "d2t-missing")
    path = d.write()
    result = pytester.runpytest(f"--eagle3-ckpt={path}", "--eagle3-reference=none", "-k", "shapes")
    result.assert_outcomes(passed=1)
    # keys and engine.loads[vllm] (a d2t no tensor fills) fail, outside the selection
    result.stdout.fnmatch_lines([f"{path}: FAILED: 2 error(s)*(the whole gate, {N_CHECKS} checks; 1 reported in "
                                 "this run)"])
    result = pytester.runpytest(f"--eagle3-ckpt={path}", "--eagle3-reference=none")
    assert "reported in this run" not in result.stdout.str()
    # -k selecting only the project's own test (which asks for the checkpoint, so the gate runs): pytest passes, and
    # the summary does not say FAILED
    pytester.makepyfile(test_mine="def test_plain(eagle3_checkpoint):\n    assert eagle3_checkpoint.config\n")
    result = pytester.runpytest(f"--eagle3-ckpt={path}", "--eagle3-reference=none", "-k", "plain")
    result.assert_outcomes(passed=1)
    assert result.ret == 0 and "FAILED" not in result.stdout.str()
    result.stdout.fnmatch_lines([f"{path}: none of its {N_CHECKS} checks was selected in this run (-k or -m): not "
                                 "reported"])


def test_the_same_checkpoint_twice_is_collected_once(pytester, drafter):
    path = drafter("flat").write()
    result = pytester.runpytest(f"--eagle3-ckpt={path}", f"--eagle3-ckpt={path}", "--eagle3-reference=none")
    assert sum(result.parseoutcomes().get(k, 0) for k in ("passed", "skipped", "failed")) == N_CHECKS


def test_k_selects_and_junit_lists_every_check(pytester, drafter):
    path = drafter("flat").write()
    result = pytester.runpytest(f"--eagle3-ckpt={path}", "-k", "vocab and d2t")
    result.assert_outcomes(passed=1)
    junit = pytester.path / "junit.xml"
    pytester.runpytest(f"--eagle3-ckpt={path}", f"--junitxml={junit}")
    cases = ElementTree.parse(junit).getroot().iter("testcase")
    names = {c.get("name") for c in cases}
    assert names == LABELS


def test_own_tests_and_fixtures_run_with_the_gate(pytester, drafter):
    a, b = drafter("flat", trained=True).write(), drafter("speculators").write()
    pytester.makepyfile(test_mine="""
        def test_plain():
            assert True

        def test_head_dim(eagle3_checkpoint):
            assert eagle3_checkpoint.config["head_dim"] == 24

        def test_no_warnings(eagle3_findings):
            assert not [f for f in eagle3_findings if f.severity.value == "warning"]
    """)
    result = pytester.runpytest(f"--eagle3-ckpt={a}", f"--eagle3-ckpt={b}", "-v")
    # 2 checkpoints x every check, plus test_plain, plus 2 fixture tests x 2 checkpoints.
    result.assert_outcomes(passed=2 * (N_CHECKS - 3) + 5, skipped=6)
    result.stdout.fnmatch_lines([f"*test_head_dim[[]{a.name}[]] PASSED*", f"*test_head_dim[[]{b.name}[]] PASSED*"])


def test_fixtures_skip_without_a_checkpoint(pytester):
    pytester.makepyfile(test_mine="def test_x(eagle3_checkpoint):\n    pass\n")
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*pass --eagle3-ckpt=PATH*"])


def test_a_waived_code_is_an_expected_failure_and_the_check_still_runs(pytester, drafter):
    d = drafter("flat")
    helpers.inject(d, "d2t-arange")
    path = d.write()
    result = pytester.runpytest(f"--eagle3-ckpt={path}", "--eagle3-level=header", "-rxX", "-k", "vocab or waivers",
                                "--eagle3-waive=vocab.d2t/arange=vocabulary being rebuilt",
                                "--eagle3-skip=vocab.t2d=the mask follows")  # the old name, still read
    outcomes = result.parseoutcomes()
    assert outcomes.get("xfailed") == 2 and outcomes.get("passed") == 2 and "failed" not in outcomes, outcomes
    result.stdout.fnmatch_lines(["XFAIL eagle3-checks::*::vocab.d2t - waived: vocabulary being rebuilt",
                                 "XFAIL eagle3-checks::*::vocab.t2d - waived: the mask follows"])
    # a waiver that matched nothing is stale: a warning, which fails the gate.waivers item under --eagle3-strict
    failed = Failed()
    result = pytester.runpytest(f"--eagle3-ckpt={path}", "--eagle3-level=header", "-k", "waivers", "--eagle3-strict",
                                "--eagle3-skip=vocab.d2t/arange=vocabulary being rebuilt",
                                "--eagle3-skip=vocab.d2t/unsorted=vocabulary being rebuilt", plugins=[failed])
    result.assert_outcomes(failed=1)
    [stale] = failed.findings("gate.waivers/stale")
    assert (stale["severity"], stale["key"]) == ("error", "vocab.d2t/unsorted")
    assert_golden("test_plugin/test_a_waived_code_is_an_expected_failure_and_the_check_still_runs.txt",
                  stale["message"] + "\n")  # the waiver as given, with its reason


def test_ini_options_and_relative_paths(pytester, drafter, target_path):
    d = drafter("flat", trained=True)
    del d.config["torch_dtype"]  # a warning
    d.root = pytester.path / "ckpts" / "mine"
    d.write()
    pytester.makeini(f"""
        [pytest]
        eagle3_ckpt = ckpts/mine
        eagle3_reference = none
        eagle3_target_config = {target_path}
        eagle3_strict = true
        eagle3_waive =
            config.rope=theta checked by hand
    """)
    failed = Failed()
    result = pytester.runpytest("-rfs", plugins=[failed])
    # config.rope runs and passes: the waiver is stale, which --eagle3-strict fails (the gate.waivers item)
    result.assert_outcomes(failed=2, passed=N_CHECKS - 2, skipped=1)  # N_CHECKS + the gate.waivers item
    result.stdout.fnmatch_lines(["FAILED eagle3-checks::mine::dtypes*",
                                 "FAILED eagle3-checks::mine::gate.waivers - ERROR: stale waiver*"])
    [stale] = failed.findings("gate.waivers/stale")
    assert (stale["severity"], stale["key"]) == ("error", "config.rope")
    assert_golden("test_plugin/test_ini_options_and_relative_paths.txt", stale["message"] + "\n")  # matched no finding
    # The command line wins over the ini file (its old option name too): the dtypes warning waived, an expected failure
    result = pytester.runpytest("--eagle3-skip", "dtypes=known", "-rxs")
    result.assert_outcomes(passed=N_CHECKS - 1, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines(["XFAIL eagle3-checks::mine::dtypes - waived: known"])


def test_summary_and_failures_show_normalised_paths(pytester, drafter):
    """A path given as a/../b (or an ini file's ../drafter, joined to the ini's folder) is shown normalised in the
    summary, the failure's header and the item's label; the gate runs on it as given."""
    d = drafter("flat")
    helpers.inject(d, "d2t-missing")
    d.root = pytester.path / "ckpts" / "mine"
    d.write()
    (pytester.path / "tests").mkdir()
    pytester.makeini("""
        [pytest]
        eagle3_ckpt = tests/../ckpts/./mine
        eagle3_reference = none
    """)
    failed = Failed()
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "keys", plugins=[failed])
    out = result.stdout.str()
    shown = str(pytester.path / "ckpts" / "mine")
    result.stdout.fnmatch_lines([f"{shown}: FAILED: *", "FAILED eagle3-checks::mine::keys - ERROR: *"])
    # the item's label, as pytest shows it over the failure and in the summary
    assert [(r.nodeid, r.location[2]) for r in failed.reports] == [("eagle3-checks::mine::keys", "eagle3 mine::keys")]
    # every line naming the checkpoint's folder names it normalised: the failure's header line (the checkpoint) and
    # the verdict (a line naming it as given, tests/../ckpts/./mine, would be missing here)
    assert_golden("test_plugin/test_summary_and_failures_show_normalised_paths.txt",
                  "".join(f"{line}\n" for line in out.splitlines() if str(pytester.path) in line
                          and not line.startswith("rootdir: ")), {"TMP": pytester.path})


@pytest.mark.parametrize("args, message", [
    (["--eagle3-skip", "nope=x"], "no check named 'nope'"),
    (["--eagle3-skip", "keys"], "write CHECK_ID=REASON"),
    (["--eagle3-level", "all"], "--eagle3-level 'all': choose one of header, scan, forward"),
    (["--eagle3-engine", "tgi"],
     "--eagle3-engine 'tgi': choose vllm, sglang, trtllm, llamacpp, lmdeploy, mlx, speculators"),
    (["--eagle3-source=/nonexistent"], "--eagle3-source /nonexistent: no such file or directory"),
    (["--eagle3-reference=no-such-spec"], "--eagle3-reference 'no-such-spec': no such file, directory or shipped spec"),
    (["--eagle3-target-config", "/nonexistent/config.json"], "no such file"),
])
def test_option_errors_are_usage_errors(pytester, drafter, args, message):
    result = pytester.runpytest(f"--eagle3-ckpt={drafter('flat').write()}", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*eagle3-checks: *{message}*"])


@pytest.mark.parametrize("kind, message", [("nope", "nope: no such file or directory"),
                                           ("afile", "afile: not a directory"),
                                           ("empty", "empty: holds neither config.json nor a safetensors file")])
def test_a_path_that_is_no_checkpoint_is_a_usage_error(pytester, tmp_path, kind, message):
    """As in the CLI: one usage error, not one failed item per check (an empty folder gave 24 identical ones)."""
    if kind == "afile":
        (tmp_path / kind).write_text("x")
    elif kind == "empty":
        (tmp_path / kind).mkdir()
    result = pytester.runpytest(f"--eagle3-ckpt={tmp_path / kind}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--eagle3-ckpt*{message}*"])
    assert "FAILED" not in result.stdout.str()


def test_engine_all_gives_one_item_per_engine(pytester, drafter):
    path = drafter("speculators").write()
    result = pytester.runpytest(f"--eagle3-ckpt={path}", "--eagle3-engine=vllm,sglang,speculators", "-k", "forward",
                                "-rf")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([f"FAILED eagle3-checks::*::forward.equivalence[[]sglang@{SGLANG}[]] - *"])


def test_broken_checkpoint_is_failing_items_not_a_crash(pytester, drafter):
    path = drafter("flat").write()
    (path / "model.safetensors").write_bytes(b"garbage!" * 4)
    result = pytester.runpytest(f"--eagle3-ckpt={path}")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*FAILED*::files*"])
    assert "Traceback" not in result.stdout.str()


def test_xdist_keeps_each_checkpoint_on_one_worker(pytester, drafter):
    paths = [drafter("flat").write(), drafter("speculators").write(), drafter("flat").write()]
    args = [f"--eagle3-ckpt={p}" for p in paths]
    result = pytester.runpytest_subprocess(*args, "-n", "2", "-v")
    result.assert_outcomes(passed=3 * (N_CHECKS - 3), skipped=9)
    workers = defaultdict(set)
    for m in re.finditer(r"\[(gw\d+)\] \[ *\d+%\] \w+ eagle3-checks::([^:]+)::", result.stdout.str()):
        workers[m.group(2)].add(m.group(1))
    assert len(workers) == 3 and all(len(w) == 1 for w in workers.values()), dict(workers)


def test_failure_summary_is_one_line_under_xdist_and_in_junit(pytester, drafter, monkeypatch):
    """Under xdist the failure travels from a worker to the controller; the one-line summary survives, and JUnit's
    message is it."""
    monkeypatch.setenv("CI", "true")
    d = drafter("flat")
    helpers.inject(d, "d2t-missing")
    path = d.write()
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(f"--eagle3-ckpt={path}", "-n", "2", f"--junitxml={junit}",
                                           "--eagle3-reference=none")
    out = result.stdout.str()
    failures, summary = out.split("short test summary info")
    assert failures.count("ERROR: d2t is missing") == 1 and summary.count("ERROR: d2t is missing") == 1, out
    result.stdout.fnmatch_lines([f"FAILED eagle3-checks::{path.name}::keys - ERROR: d2t is missing (draft_vocab*"])
    # the verdict section, tallied on the controller from the workers' reports
    result.stdout.fnmatch_lines([f"{path}: FAILED: 2 error(s), * (from the {N_CHECKS} checks the workers reported)"])
    messages = sorted(f.get("message") for f in ElementTree.parse(junit).getroot().iter("failure"))
    assert messages == ["ERROR: d2t is missing (draft_vocab_size 128 < vocab_size 512)",
                        f"ERROR: vllm {VLLM} builds 1 parameter(s) that no tensor fills: d2t"]
    failure = next(f for f in ElementTree.parse(junit).getroot().iter("failure")
                   if f.get("message").startswith("ERROR: d2t is missing"))
    assert "fix:" in failure.text and "embed the d2t offsets" in failure.text


def test_failure_is_pytests_own_representation(pytester, drafter):
    """Reporting plugins read the crash location (pytest-json-report reads path and lineno), and --tb=line prints
    it: it names the check and its first finding, under xdist too."""
    d = drafter("flat")
    helpers.inject(d, "d2t-missing")
    path = d.write()
    crashes = []

    class CrashLog:  # what a reporting plugin sees, on the xdist controller too
        @staticmethod
        def pytest_runtest_logreport(report):
            if report.failed:
                c = report.longrepr.reprcrash
                crashes.append(f"{c.path}|{c.lineno}|{c.message}")

    for args in ([], ["-n", "2"]):
        result = pytester.runpytest(f"--eagle3-ckpt={path}", "--eagle3-reference=none", "--tb=line", *args,
                                    plugins=[CrashLog()])
        result.stdout.fnmatch_lines([f"eagle3-checks::{path.name}::keys:0: ERROR: d2t is missing (draft_vocab*"])
        assert "Traceback" not in result.stdout.str()
    assert sorted(crashes) == sorted([f"eagle3-checks::{path.name}::keys|0|ERROR: d2t is missing (draft_vocab_size "
                                      "128 < vocab_size 512)", f"eagle3-checks::{path.name}::engine.loads"
                                      f"[vllm@{VLLM}]|0|ERROR: vllm {VLLM} builds 1 parameter(s) that no tensor "
                                      "fills: d2t"] * 2)


def test_last_failed_reruns_failed_checks_beside_failed_user_tests(pytester, drafter):
    """--lf: pytest's cache looks for the failed checks' file at <rootdir>/eagle3-checks, which does not exist;
    with a failed user test beside them it used to skip the gate and rerun the user test only."""
    d = drafter("flat")
    helpers.inject(d, "d2t-missing")
    path = d.write()
    pytester.makepyfile(test_user="def test_ok():\n    pass\n\ndef test_broken():\n    assert False\n")
    args = [f"--eagle3-ckpt={path}", "--eagle3-reference=none"]
    assert pytester.runpytest(*args).parseoutcomes()["failed"] == 3  # keys, engine.loads and test_broken
    result = pytester.runpytest(*args, "--lf", "-v")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*test_user.py::test_broken FAILED*", f"*eagle3-checks::{path.name}::keys FAILED*"])


def test_last_failed_reruns_a_failed_per_engine_check(pytester, drafter):
    """pytest 9 stores node ids parsed into name and [params]; engine.loads[sglang@0.5.23] must match itself again."""
    path = drafter("speculators").write()  # SGLang reads flat configs only: engine checks fail for sglang
    args = [f"--eagle3-ckpt={path}", "--eagle3-reference=none", "--eagle3-engine=vllm,sglang",
            "--eagle3-level=header"]
    first = pytester.runpytest(*args, "-rf")
    failed = sorted(re.findall(r"FAILED (eagle3-checks::\S+)", first.stdout.str()))
    assert any(f"[sglang@{SGLANG}]" in f for f in failed), failed
    again = pytester.runpytest(*args, "--lf", "-rf")
    assert sorted(re.findall(r"FAILED (eagle3-checks::\S+)", again.stdout.str())) == failed
    assert again.parseoutcomes()["failed"] == len(failed) and "passed" not in again.parseoutcomes()


def test_scan_level_in_ci(pytester, drafter):
    """--eagle3-level=scan: header checks plus the weight scan, no forward item; a NaN weight fails scan.values."""
    import numpy as np

    from eagle3_checks.storage.safetensors import from_numpy

    d = drafter("flat")
    v = np.zeros(d.tensors["fc.weight"].shape, np.float32) + 0.01
    v[2, 3] = np.nan
    d.tensors["fc.weight"] = from_numpy(v, "BF16")
    path = d.write()
    result = pytester.runpytest(f"--eagle3-ckpt={path}", "--eagle3-level=scan", "--eagle3-reference=none",
                                "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "forward.equivalence" not in out
    result.stdout.fnmatch_lines(["*ERROR: fc.weight: 1 NaN of 12288 values, the first at index (2, 3)*",
                                 f"FAILED eagle3-checks::{path.name}::scan.values - *"])
    assert result.ret == 1


def test_eagle3_data_adds_the_acceptance_level(pytester, drafter, tmp_path):
    """--eagle3-data runs the acceptance level's three checks (one item each, engine-drop per release), with the
    gate's thresholds as plugin options; the example drafter without norm_before_residual, on states recorded from
    it, loses more than 2% of its acceptance under vLLM 0.33.0's default."""
    pytest.importorskip("torch")
    from eagle3_checks.defects import example_data

    data = example_data("speculators", tmp_path)
    clean = drafter("speculators").write()
    result = pytester.runpytest(f"--eagle3-ckpt={clean}", f"--eagle3-data={data}", "--eagle3-reference=none",
                                "-k", "acceptance", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, deselected=N_CHECKS)
    d = drafter("speculators")
    helpers.inject(d, "norm-before-residual-absent-measured")
    result = pytester.runpytest(f"--eagle3-ckpt={d.write()}", f"--eagle3-data={data}", "--eagle3-max-drop=0.02",
                                "--eagle3-reference=none", "-k", "acceptance", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1, deselected=N_CHECKS)
    result.stdout.fnmatch_lines([f"*acceptance.engine-drop*vllm@{VLLM}*"])


def test_the_launch_options_are_the_clis(pytester, drafter):
    """--eagle3-tp and --eagle3-launch mean what check's --tp and --launch mean (engine.serving, TensorRT-LLM's
    launch layers)."""
    path = drafter("flat").write()
    base = [f"--eagle3-ckpt={path}", "--eagle3-level=header", "--eagle3-reference=none", "--eagle3-aux-convention=vllm",
            "-k", "engine"]
    assert pytester.runpytest(*base, "--eagle3-engine=vllm", "--eagle3-tp=3").ret == pytest.ExitCode.TESTS_FAILED
    assert pytester.runpytest(*base, "--eagle3-engine=vllm", "--eagle3-tp=2").ret == pytest.ExitCode.OK
    launch = pytester.path / "launch.json"
    bare = pytester.path / "bare.json"
    launch.write_text(json.dumps({"speculative_config": {"eagle3_layers_to_capture": [0, 2, 4]}}))
    bare.write_text(json.dumps({"speculative_config": {"max_draft_len": 3}}))
    # no launch given: the ids to launch with are a note (engine.aux-layers/launch-ids); a launch without them fails
    assert pytester.runpytest(*base, "--eagle3-engine=trtllm").ret == pytest.ExitCode.OK
    assert pytester.runpytest(*base, "--eagle3-engine=trtllm", f"--eagle3-launch=trtllm={bare}").ret == \
        pytest.ExitCode.TESTS_FAILED
    assert pytester.runpytest(*base, "--eagle3-engine=trtllm", f"--eagle3-launch=trtllm={launch}").ret == \
        pytest.ExitCode.OK
    result = pytester.runpytest(*base, "--eagle3-engine=trtllm", "--eagle3-launch=trtllm")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


# ----- the reports the CLI writes, from the plugin (--eagle3-report FORMAT=PATH) ----------------------------------


def _cli_report(tmp_path, fmt, *argv):
    """What `eagle3-checks check --format FMT` writes, run from ``tmp_path`` (in this process: its main is the
    console script's)."""
    import contextlib
    import io
    import os

    from eagle3_checks.cli import main

    out, here = io.StringIO(), os.getcwd()
    os.chdir(tmp_path)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["check", *map(str, argv), "--format", fmt])
    finally:
        os.chdir(here)
    return code, out.getvalue()


def test_the_plugin_writes_the_reports_the_cli_writes(pytester, drafter):
    """A CI job that runs the plugin uploads code-scanning results too: --eagle3-report sarif=PATH (and json, ...)
    writes what `eagle3-checks check --format sarif` writes, for every checkpoint, whether the gate passed or not."""
    good = drafter("flat").write()
    d = drafter("speculators")
    helpers.inject(d, "d2t-missing")
    bad = d.write()
    result = pytester.runpytest(f"--eagle3-ckpt={good}", f"--eagle3-ckpt={bad}", "--eagle3-report=sarif=out.sarif",
                                "--eagle3-report", "json=out.json",
                                "-p", "no:cacheprovider")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["eagle3-checks: wrote the sarif report out.sarif",
                                 "eagle3-checks: wrote the json report out.json"])
    sarif = json.loads((pytester.path / "out.sarif").read_text())
    from test_report_formats import validate_sarif

    validate_sarif(sarif)
    code, cli_sarif = _cli_report(pytester.path, "sarif", good, bad)
    assert code == 1 and sarif == json.loads(cli_sarif)
    code, cli_json = _cli_report(pytester.path, "json", good, bad)
    assert json.loads((pytester.path / "out.json").read_text()) == json.loads(cli_json)
    assert {r["ruleId"] for r in sarif["runs"][0]["results"] if r["level"] == "error"} >= {"keys/missing-tensor"}


def test_report_paths_in_an_ini_file_are_relative_to_it_and_bad_ones_are_usage_errors(pytester, drafter):
    path = drafter("flat").write()
    (pytester.path / "ci").mkdir()
    pytester.makeini(f"""
        [pytest]
        eagle3_ckpt = {path}
        eagle3_report =
            markdown=ci/summary.md
            github=ci/annotations.txt
    """)
    sub = pytester.path / "tests"
    sub.mkdir()
    result = pytester.runpytest("--rootdir", str(pytester.path), "-p", "no:cacheprovider", str(sub))
    assert result.ret in (0, 5), result.stdout.str()
    assert (pytester.path / "ci" / "summary.md").read_text().startswith("### eagle3-checks:")
    assert "eagle3-checks verdict" in (pytester.path / "ci" / "annotations.txt").read_text()
    for bad, says in (("xml=out.xml", "--eagle3-report 'xml=out.xml': write FORMAT=PATH"),
                      ("sarif", "--eagle3-report 'sarif': write FORMAT=PATH"),
                      ("sarif=nowhere/out.sarif", "no folder")):
        result = pytester.runpytest(f"--eagle3-ckpt={path}", f"--eagle3-report={bad}", "-p", "no:cacheprovider")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*{says}*"])


def test_the_report_is_written_under_xdist(pytester, drafter):
    """Under xdist the workers gate and the controller holds no result: it gates once more to write the report."""
    path = drafter("flat").write()
    result = pytester.runpytest_subprocess(f"--eagle3-ckpt={path}", "-n", "2", "--eagle3-report=json=out.json",
                                           "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    report = json.loads((pytester.path / "out.json").read_text())
    assert report["exit_code"] == 0 and [c["path"] for c in report["checkpoints"]] == [str(path)]


def test_the_old_waive_name_still_waives_and_warns_of_its_removal(pytester, drafter):
    path = drafter("flat").write()
    result = pytester.runpytest(f"--eagle3-ckpt={path}", "--eagle3-reference=none", "-k", "shapes",
                                "--eagle3-skip=shapes=known")
    result.stdout.fnmatch_lines(["*--eagle3-skip / eagle3_skip is deprecated and will be removed in 0.2.0*"])
    assert result.ret == 0
    result = pytester.runpytest(f"--eagle3-ckpt={path}", "--eagle3-reference=none", "-k", "shapes",
                                "--eagle3-waive=shapes=known")
    assert "deprecated" not in result.stdout.str() and result.ret == 0
