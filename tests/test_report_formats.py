"""Where CI and people read the verdict: root causes in every format, GitHub annotations, SARIF, colour, --quiet,
markdown, and golden outputs of the new formats on the embedded example."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest

import helpers
from eagle3_checks import __version__
from eagle3_checks.cli import main
from eagle3_checks.defects import CATALOGUE
from eagle3_checks.reports.causes import group
from eagle3_checks.reports.github import parse_github
from eagle3_checks.reports.locations import json_key_line
from eagle3_checks.reports.sarif import to_sarif
from helpers import SGLANG, VLLM, assert_golden, cli, run

DATA = Path(__file__).parent / "data"


@pytest.fixture
def drafter(drafter):
    """The tests' drafters, a flat one with its speculators config beside it (who trained it: these tests are about
    the reports, not about what an unknown trainer leaves open)."""
    def make(layout: str = "speculators", *args, **kw):
        kw.setdefault("trained", layout == "flat")
        return drafter(layout, *args, **kw)

    return make


def sarif_schema():
    import jsonschema  # in the test extra: never skipped

    return jsonschema, json.loads((DATA / "sarif-schema-2.1.0.json").read_text())


def github_rejects(log: dict) -> list[str]:
    """What GitHub code scanning refuses in a SARIF log that the OASIS schema allows: a result without a location
    ("locationFromSarifResult: expected at least one location": github/codeql-action#1738 and #2459, where the
    whole upload fails), a location without a physical one ("expected a physical location"), or one whose
    artifactLocation has no uri or an empty one ("expected artifact location": microsoft/sarif-sdk#2704, GH1001),
    or one without region.startLine, which code scanning needs to show it (sarif-sdk's GitHub rule GH1003,
    ProvideRequiredRegionProperties). Returns one line per offending result (empty: GitHub takes the file)."""
    out = []
    for r, run_ in enumerate(log.get("runs", [])):
        for i, result in enumerate(run_.get("results") or []):
            where = f"runs[{r}].results[{i}] ({result.get('ruleId')})"
            locations = result.get("locations") or []
            if not locations:
                out.append(f"{where}: expected at least one location")
            for loc in locations:
                physical = loc.get("physicalLocation")
                if not physical:
                    out.append(f"{where}: expected a physical location")
                elif not (physical.get("artifactLocation") or {}).get("uri"):
                    out.append(f"{where}: expected artifact location")
                elif not isinstance((physical.get("region") or {}).get("startLine"), int):
                    out.append(f"{where}: expected region.startLine")
    return out


def validate_sarif(log: dict) -> None:
    """The log is valid against the shipped SARIF 2.1.0 schema, and GitHub code scanning would take it."""
    jsonschema, schema = sarif_schema()
    jsonschema.Draft4Validator.check_schema(schema)
    jsonschema.Draft4Validator(schema).validate(log)
    assert not github_rejects(log), github_rejects(log)


def test_the_github_rule_rejects_what_code_scanning_rejects():
    """The helper itself: the four shapes of result GitHub refuses, and a located one it takes."""
    def log(*results):
        return {"runs": [{"results": list(results)}]}

    located = {"ruleId": "r", "locations": [{"physicalLocation": {"artifactLocation": {"uri": "d/config.json"},
                                                                  "region": {"startLine": 3}}}]}
    assert github_rejects(log(located)) == []
    lineless = {"ruleId": "e", "locations": [{"physicalLocation": {"artifactLocation": {"uri": "d/model.safetensors"},
                                                                   "region": {"byteOffset": 8}}}]}
    assert github_rejects(log(lineless)) == ["runs[0].results[0] (e): expected region.startLine"]
    assert github_rejects(log({"ruleId": "a"}, {"ruleId": "b", "locations": []})) == [
        "runs[0].results[0] (a): expected at least one location",
        "runs[0].results[1] (b): expected at least one location"]
    logical = {"ruleId": "c", "locations": [{"logicalLocations": [{"name": "x"}]}]}
    assert github_rejects(log(logical)) == ["runs[0].results[0] (c): expected a physical location"]
    empty = {"ruleId": "d", "locations": [{"physicalLocation": {"artifactLocation": {"uri": ""}}}]}
    assert github_rejects(log(empty)) == ["runs[0].results[0] (d): expected artifact location"]


@pytest.fixture
def no_head_dim(drafter):
    d = drafter("flat")
    del d.config["head_dim"]
    return d.write()


TINY = ("--reference", "tiny-example")  # the demo's spec is picked without --reference for the demo's checkpoint only


# ----- root causes -----------------------------------------------------------------------------------------------


def test_a_lost_head_dim_is_one_root_cause_in_the_text_report(no_head_dim, capsys):
    """The cause (9 findings in 6 checks: engine.semantics too, as the speculators config beside it says what was
    trained, head_dim 24), its fix, what else it affects, and the verdict (reference.diff's head_dim is a semantic
    value, a warning: what each engine computes with 16 and with 24) are in the golden file."""
    # the release named: the report does not depend on what is installed here
    code, out, _ = cli(capsys, "check", no_head_dim, *TINY, "--engine", f"vllm@{VLLM}")
    assert code == 1
    header, rest = out.split("  ROOT CAUSE ", 1)
    assert "FAIL" not in header  # the report leads with the cause, before any check line
    # the dependent findings are listed under their checks, pointing at the cause instead of repeating its fix
    assert out.count("follows from config.json: head_dim, above") == 8
    assert out.count('add "head_dim": 24') == 1
    assert_golden("test_report_formats/test_a_lost_head_dim_is_one_root_cause_in_the_text_report.txt", out,
                  {"TMP": no_head_dim.parent})


def test_a_root_cause_counts_its_findings_and_checks_in_words_that_agree(drafter, capsys):
    """"(15 findings in 1 checks)": one check is a check (about its wording: the counts in words)."""
    code, out, _ = cli(capsys, "diff", drafter("flat").write(), "aq-medai-kimi-k2-eagle3")
    assert code == 1 and "ROOT CAUSE config.json: hidden_size (15 findings in 1 check)" in out, out[:400]
    assert "checks)" not in out.split("ROOT CAUSE config.json: hidden_size", 1)[1].splitlines()[0]


def test_root_causes_in_json_are_added_fields(no_head_dim, capsys):
    code, out, _ = cli(capsys, "check", no_head_dim, *TINY, "--format", "json")
    report = json.loads(out)["checkpoints"][0]
    # everything schema version 1 had is still there
    assert {"path", "layout", "reference", "exit_code", "counts", "checks"} <= set(report)
    assert {"error", "warning", "info"} <= set(report["counts"]) and report["counts"]["error"] == 8
    assert report["counts"]["causes"] == 1
    (cause,) = report["causes"]
    assert cause["key"] == "config.json: head_dim" and cause["check"] == "config.head-dim"
    assert cause["fix"] == 'add "head_dim": 24'
    assert [a["check"] for a in cause["also_affects"]] == ["shapes"] * 4 + [f"engine.loads[vllm@{VLLM}]",
                                                                            f"engine.semantics[vllm@{VLLM}]",
                                                                            "reference.diff",
                                                                            f"forward.equivalence[vllm@{VLLM}]"]
    failing = [f for c in report["checks"] for f in c["findings"] if f["severity"] in ("error", "warning")]
    assert len(failing) == 9 and {f["cause"] for f in failing} == {"config.json: head_dim"}


def test_root_causes_in_markdown(no_head_dim, capsys):
    code, out, _ = cli(capsys, "check", no_head_dim, *TINY, "--format", "markdown")
    causes, table = out.split("| status | check |")
    # the section of root causes: the cause, its code, its fix and what else it affects
    assert_golden("test_report_formats/test_root_causes_in_markdown.md", causes.split("#### Root causes", 1)[1])
    assert table.count("follows from: `config.json: head_dim`") == 8


def test_a_missing_tensor_is_a_root_cause_without_the_checks_saying_so(drafter):
    """No check names a cause for a missing d2t: the findings keyed by the tensor are grouped under it."""
    d = drafter("flat")
    helpers.inject(d, "d2t-missing")
    result = run(d.write(), reference="tiny-example")
    causes = group(result)
    (cause,) = [c for c in causes.groups if c.key == "tensor: d2t"]
    assert cause.finding.check == "keys" and cause.finding.code == "keys/missing-tensor"
    assert {f.check for f in cause.also} >= {"reference.diff"}


def test_unrelated_findings_stay_apart(drafter):
    d = drafter("flat")
    helpers.inject(d, "unserved-architecture")
    helpers.inject(d, "d2t-missing")
    result = run(d.write(), reference="tiny-example")
    causes = group(result)
    d2t = next(c for c in causes.groups if c.key == "tensor: d2t")
    assert not any(f.check == "config.architectures" for f in d2t.findings)
    arch = [f for f in result.findings() if f.check == "config.architectures" and f.severity.value == "error"]
    assert arch and not any(causes.is_dependent(f) for f in arch)
    assert causes.count() >= 2


def test_an_engine_refusing_the_layout_is_one_cause_of_its_load_and_forward_failures(drafter):
    pytest.importorskip("torch")
    result = run(drafter("speculators").write(), engine=f"sglang@{SGLANG}")
    causes = group(result)
    (cause,) = causes.groups
    assert cause.finding.check == f"engine.loads[sglang@{SGLANG}]" and cause.finding.code == "engine.loads/refused"
    # the cause's key (sglang reads flat configs only): the golden file
    assert_golden("test_report_formats/test_an_engine_refusing_the_layout_is_one_cause_of_its_load_and_forward_"
                  "failures.txt", cause.key + "\n")
    assert [f.check for f in cause.also] == [f"forward.equivalence[sglang@{SGLANG}]"]
    assert causes.count() == 1


# ----- GitHub workflow commands ------------------------------------------------------------------------------------


def test_json_key_line():
    text = ('{\n  "a": {"x": "}{,\\"", "head_dim": 1},\n  "transformer_layer_config": {\n    "head_dim": 24,\n'
            '    "list": [{"head_dim": 3}]\n  },\n  "head_dim": 16\n}\n')
    assert json_key_line(text, "head_dim") == 7
    assert json_key_line(text, "transformer_layer_config.head_dim") == 4
    assert json_key_line(text, "a.head_dim") == 2
    assert json_key_line(text, "transformer_layer_config.missing") == 3  # its parent
    assert json_key_line(text, "transformer_layer_config.list[0].head_dim") == 5  # stops at the list
    assert json_key_line(text, "nope") is None
    assert json_key_line('{"a\\u00e9": 1}', "a\u00e9") == 1


def test_github_annotations_parse_back(drafter, capsys):
    d = drafter("speculators")
    helpers.inject(d, "flat-class-in-speculators")
    helpers.inject(d, "head-dim-missing")
    path = d.write()
    code, out, _ = cli(capsys, "check", path, "--format", "github")
    assert code == 1
    commands = parse_github(out)
    config_text = (path / "config.json").read_text()
    errors = [c for c in commands if c["level"] == "error" and c["title"] != "eagle3-checks verdict"]
    by_title = {c["title"]: c for c in errors}
    arch = by_title["eagle3-checks config.architectures/flat-class-in-speculators"]
    assert arch["file"] == f"{path}/config.json"
    assert config_text.splitlines()[int(arch["line"]) - 1].strip().startswith('"architectures"')
    head = by_title["eagle3-checks config.head-dim/missing: config.json: head_dim"]
    # head_dim is absent: the annotation points at the object it belongs in
    assert config_text.splitlines()[int(head["line"]) - 1].strip().startswith('"transformer_layer_config"')
    assert not any("follows from" in c["message"] or c["title"].startswith("eagle3-checks shapes") for c in errors)
    assert commands[-1]["title"] == "eagle3-checks verdict"
    # the cause's annotation (what else it affects, its fix) and the verdict's: the golden file
    assert_golden("test_report_formats/test_github_annotations_parse_back.txt",
                  f"{head['message']}\n{commands[-1]['message']}\n", {"TMP": path.parent})


def test_github_escapes_what_the_runner_unescapes():
    from eagle3_checks.reports.github import github_command

    line = github_command("warning", "50% of\nit, a: b", file="a,b:c.json", line=3, title="t%1")
    assert "\n" not in line
    assert parse_github(line) == [{"level": "warning", "message": "50% of\nit, a: b", "file": "a,b:c.json",
                                   "line": "3", "title": "t%1"}]


def test_github_on_a_usage_error(capsys, tmp_path):
    code, out, err = cli(capsys, "check", tmp_path / "nope", "--format", "github")
    assert code == 2
    (cmd,) = parse_github(out)
    assert cmd["level"] == "error"
    # what stderr and the annotation say (no such file or directory): the golden file
    assert_golden("test_report_formats/test_github_on_a_usage_error.txt", f"{err}{cmd['message']}\n",
                  {"TMP": tmp_path})


# ----- SARIF ---------------------------------------------------------------------------------------------------------


def test_sarif_is_valid_and_locates_findings(drafter, capsys):
    d = drafter("speculators")
    helpers.inject(d, "flat-class-in-speculators")
    helpers.inject(d, "head-dim-missing")
    path = d.write()
    code, out, _ = cli(capsys, "check", path, *TINY, "--format", "sarif")
    log = json.loads(out)
    validate_sarif(log)
    (run_,) = log["runs"]
    rules = run_["tool"]["driver"]["rules"]
    assert len({r["id"] for r in rules}) == len(rules)
    results = run_["results"]
    errors = [r for r in results if r["level"] == "error"]
    assert {r["ruleId"] for r in errors} == {"config.architectures/flat-class-in-speculators",
                                             "config.head-dim/missing"}
    for r in results:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]
    head = next(r for r in errors if r["ruleId"] == "config.head-dim/missing")
    loc = head["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == (path / "config.json").as_uri()
    assert loc["region"]["startLine"] == json_key_line((path / "config.json").read_text(), "transformer_layer_config")
    assert head["properties"]["cause"] == "config.json: head_dim" and len(head["properties"]["alsoAffects"]) == 6
    assert run_["invocations"][0]["exitCode"] == 1


def test_sarif_points_into_a_weight_file_by_byte_offset(drafter, capsys):
    d = drafter("flat")
    path = d.write()
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # truncated
    code, out, _ = cli(capsys, "check", path, "--format", "sarif")
    log = json.loads(out)
    validate_sarif(log)
    files = [r for r in log["runs"][0]["results"] if r["ruleId"].startswith("files/")]
    assert files and all(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == weights.as_uri()
                         for r in files)
    assert any("byteOffset" in r["locations"][0]["physicalLocation"]["region"] for r in files)


def _safetensors_ranges(path: Path) -> dict[str, tuple[int, int]]:
    """Each tensor's (absolute byte offset, byte length) in a safetensors file, read here from its header."""
    import struct

    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    return {k: (8 + n + v["data_offsets"][0], v["data_offsets"][1] - v["data_offsets"][0])
            for k, v in header.items() if k != "__metadata__"}


def _sarif_of(capsys, path, *argv) -> list[dict]:
    code, out, _ = cli(capsys, "check", path, "--format", "sarif", *argv)
    log = json.loads(out)
    validate_sarif(log)
    return log["runs"][0]["results"]


def _place(result: dict) -> tuple[str, dict]:
    (loc,) = result["locations"]
    physical = loc["physicalLocation"]
    return physical["artifactLocation"]["uri"].rsplit("/", 1)[-1], physical.get("region", {})


def test_sarif_locates_the_results_once_reported_without_a_location(drafter, capsys):
    """engine.loads/replaced, reference.diff/layouts-differ (both on the demo's own flat example),
    engine.loads/refused and forward.equivalence/agrees carried no location, so upload-sarif refused the file. A
    tensor's finding points at the tensor's bytes; one with nothing more specific at the checkpoint's config.json."""
    path = drafter("flat").write()
    ranges = _safetensors_ranges(path / "model.safetensors")
    results = _sarif_of(capsys, path, "--level", "header", "--reference", "tiny-example", "--engine", "all")
    by_code = {r["ruleId"]: r for r in results}
    replaced = by_code["engine.loads/replaced"]
    assert _place(replaced) == ("model.safetensors", {"startLine": 1, **dict(zip(("byteOffset", "byteLength"),
                                                                ranges["embed_tokens.weight"], strict=True))})
    assert _place(by_code["reference.diff/layouts-differ"]) == ("config.json", {"startLine": 1})
    d = drafter("speculators")
    helpers.inject(d, "model-prefix")  # SGLang refuses the model. names: engine.loads/refused, keyed by a tensor
    path = d.write()
    ranges = _safetensors_ranges(path / "model.safetensors")
    results = _sarif_of(capsys, path, "--level", "header", "--engine", "all")
    # the refusals of model. names follow from the one root cause, the prefix: folded into its result
    prefix = next(r for r in results if r["ruleId"] == "keys/model-prefix")
    assert any(a["check"].startswith("engine.loads") for a in prefix["properties"]["alsoAffects"]), prefix
    _place(prefix)
    refused = [r for r in results if r["ruleId"] == "engine.loads/refused"]
    for r in refused:
        name, region = _place(r)
        key = r["properties"].get("key")
        assert (name, region) == (("model.safetensors", {"startLine": 1, **dict(zip(("byteOffset", "byteLength"),
                                                                                   ranges[key], strict=True))})
                                  if key in ranges else ("config.json", region)), r


def test_sarif_locates_the_forward_levels_results(drafter, capsys):
    pytest.importorskip("torch")
    results = _sarif_of(capsys, drafter("speculators").write(), "--level", "forward")
    agrees = [r for r in results if r["ruleId"] == "forward.equivalence/agrees"]
    assert agrees and all(_place(r) == ("config.json", {"startLine": 1}) for r in agrees)


def test_sarif_locates_every_result_of_every_defect(drafter, target_path):
    """Every defect of the catalogue, both layouts, at the scan level for every engine: each result has a location
    GitHub takes, and it is the right one: a config key's line in config.json, a named tensor's bytes in its weight
    file (as its header states them), the file a finding names, or config.json."""
    located = set()
    for defect in CATALOGUE:
        for layout in defect.layouts:
            path = helpers.write_defect(drafter(layout), defect)
            result = run(path, level="scan", engine="all", target_config=str(target_path),
                         reference=defect.options.get("reference", "auto"))
            log = to_sarif([result])
            validate_sarif(log)
            config = (path / "config.json").read_text() if (path / "config.json").is_file() else ""
            ranges = {n: r for w in result.ckpt.weight_files if (path / w).suffix == ".safetensors"
                      and (path / w).is_file() for n, r in _safetensors_ranges(path / w).items()}
            for r in log["runs"][0]["results"]:
                name, region = _place(r)
                key = r["properties"].get("key")
                if "startLine" in region and name == "config.json" and region["startLine"] > 1:
                    line = config.splitlines()[region["startLine"] - 1]
                    assert re.match(r'\s*"', line), (r["ruleId"], line)  # a key's line, not a value's
                if "byteLength" in region:
                    assert (region["byteOffset"], region["byteLength"]) in ranges.values(), r["ruleId"]
                    assert key is None or key in ranges or result.ckpt.roles.get(key) in ranges, r["ruleId"]
                located.add((r["ruleId"], name.rsplit(".", 1)[-1], tuple(sorted(region))))
    kinds = {(name, region) for _, name, region in located}
    assert {("json", ("startLine",)), ("safetensors", ("byteLength", "byteOffset", "startLine")),
            ("safetensors", ("byteOffset", "startLine"))} <= kinds, kinds


def test_sarif_on_a_usage_error_is_still_sarif(capsys, tmp_path):
    code, out, _ = cli(capsys, "check", tmp_path / "nope", "--format", "sarif")
    log = json.loads(out)
    validate_sarif(log)
    (inv,) = log["runs"][0]["invocations"]
    assert code == 2 and inv["exitCode"] == 2 and not inv["executionSuccessful"]
    assert_golden("test_report_formats/test_sarif_on_a_usage_error_is_still_sarif.txt",
                  inv["toolExecutionNotifications"][0]["message"]["text"] + "\n", {"TMP": tmp_path})


# ----- golden outputs on the embedded example --------------------------------------------------------------------


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """`demo --out` writes the example; a copy of its flat drafter loses head_dim (the failing case)."""
    root = tmp_path_factory.mktemp("golden")
    assert main(["demo", "--out", str(root), "--format", "json"]) == 0
    broken = root / "example-flat-no-head-dim"
    shutil.copytree(root / "example-flat", broken)
    cfg = json.loads((broken / "config.json").read_text())
    del cfg["head_dim"]
    (broken / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return root


@pytest.mark.parametrize("fmt", ["text", "github", "sarif", "markdown"])
@pytest.mark.parametrize("case", ["passing", "failing"])
def test_golden(example, capsys, monkeypatch, fmt, case):
    monkeypatch.chdir(example)  # relative paths: the report names them as a CI job would
    ckpts = ["example-flat"] if case == "passing" else ["example-flat-no-head-dim"]
    code, out, _ = cli(capsys, "check", *ckpts, "--target-config", "example-target/config.json",
                       "--engine", f"vllm@{VLLM},sglang@{SGLANG}", "--level", "scan", "--format", fmt)
    assert code == (0 if case == "passing" else 1)
    out = out.replace(__version__, "VERSION")
    if fmt == "sarif":
        validate_sarif(json.loads(out))
    if fmt == "github":
        parse_github(out)
    assert_golden(f"{case}.{ {'text': 'txt', 'github': 'github.txt', 'sarif': 'sarif.json', 'markdown': 'md'}[fmt] }",
                  out)


def test_the_demos_text_report_is_the_golden_file(tmp_path, capsys, monkeypatch):
    """What `eagle3-checks demo` prints, the first thing a new user sees (the Quick start's first line)."""
    monkeypatch.chdir(tmp_path)
    code, out, _ = cli(capsys, "demo", "--out", "demo")
    assert code == 0
    assert_golden("demo.txt", out.replace(__version__, "VERSION"))


# ----- the terminal ------------------------------------------------------------------------------------------------


class _Tty(io.StringIO):
    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


def _run_on(monkeypatch, stream, *argv):
    monkeypatch.setattr("sys.stdout", stream)
    code = main([str(a) for a in argv])
    return code, stream.getvalue()


@pytest.mark.parametrize("tty, no_color, flag, coloured", [
    (True, None, None, True),
    (False, None, None, False),
    (True, "1", None, False),
    (True, None, "never", False),
    (False, None, "always", True),
])
def test_colour_only_on_a_terminal_and_never_with_no_color(drafter, monkeypatch, tty, no_color, flag, coloured):
    path = drafter("flat").write()
    monkeypatch.delenv("TERM", raising=False)
    if no_color:
        monkeypatch.setenv("NO_COLOR", no_color)
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)
    # the release named: the report does not depend on what is installed here
    argv = ["check", path, "--level", "header", "--engine", f"vllm@{VLLM}"] + (["--color", flag] if flag else [])
    code, out = _run_on(monkeypatch, _Tty() if tty else io.StringIO(), *argv)
    assert code == 0 and ("\x1b[" in out) is coloured  # the escape sequences themselves: no other carrier
    # the report in colour (PASS in green), and the same report, escapes aside, without: the golden files
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert_golden("test_report_formats/test_colour_only_on_a_terminal_and_never_with_no_color-plain.txt", plain,
                  {"TMP": path.parent})
    if coloured:
        assert_golden("test_report_formats/test_colour_only_on_a_terminal_and_never_with_no_color-coloured.txt",
                      out, {"TMP": path.parent})


def test_colour_never_reaches_machine_formats(drafter, monkeypatch):
    path = drafter("flat").write()
    for fmt in ("json", "markdown", "github", "sarif"):
        code, out = _run_on(monkeypatch, _Tty(), "check", path, "--level", "header", "--format", fmt,
                            "--color", "always")
        assert "\x1b[" not in out, fmt


def test_quiet_shows_the_failures_and_the_verdict(no_head_dim, drafter, capsys):
    """Failures (the root cause, shapes' failure) and the verdict, and nothing else (no PASS or SKIP row, no note, no
    scan.values table): the whole of both reports is in the golden file."""
    code, failed, _ = cli(capsys, "check", no_head_dim, *TINY, "--quiet", "--level", "scan")
    assert code == 1
    code, passed, _ = cli(capsys, "check", drafter("flat").write(), "-q", "--level", "header")
    assert code == 0 and len(passed.splitlines()) == 2
    assert_golden("test_report_formats/test_quiet_shows_the_failures_and_the_verdict.txt", failed + passed,
                  {"TMP": no_head_dim.parent})


def test_quiet_reports_a_repeated_per_tensor_warning_once_with_a_count(drafter, capsys):
    """A freshly initialised drafter (every matrix normal(0, 0.02), transformers' initializer_range): scan.values
    warns "untrained" for each of its ten matrices; --quiet printed the ten in full. Now once, with the count and
    where the others are."""
    import numpy as np

    from eagle3_checks.storage.safetensors import from_numpy

    d = drafter("flat")
    rng = np.random.default_rng(1)
    for name, t in list(d.tensors.items()):
        if t.dtype == "BF16" and len(t.shape) == 2:
            d.tensors[name] = from_numpy(rng.normal(0, 0.02, t.shape).astype(np.float32), "BF16")
    path = d.write()
    code, full, _ = cli(capsys, "check", path, "--level", "scan")
    quiet_code, quiet, _ = cli(capsys, "check", path, "--level", "scan", "--quiet")
    json_code, out, _ = cli(capsys, "check", path, "--level", "scan", "--format", "json")
    untrained = [f for c in json.loads(out)["checkpoints"][0]["checks"] for f in c["findings"]
                 if f["code"] == "scan.values/untrained"]
    assert code == quiet_code == json_code == 0 and len(untrained) == 10
    assert quiet.count("code:     scan.values/untrained") == 1 and full.count("code:     scan.values/untrained") == 10
    # the one in full, "and: 9 more ... (10 in all)" with where the others are, and the verdict that still counts
    # every one (10 warnings): the golden file
    assert_golden("test_report_formats/test_quiet_reports_a_repeated_per_tensor_warning_once_with_a_count.txt", quiet,
                  {"TMP": path.parent})


def test_markdown_shows_failures_and_collapses_passing_checks(no_head_dim, capsys):
    code, out, _ = cli(capsys, "check", no_head_dim, "--format", "markdown", "--level", "header")
    findings = out.split("#### Findings of failing checks")[1]
    visible, collapsed = findings.split("<details><summary>Notes from passing checks</summary>")
    assert "`config.head-dim/missing`" in visible and "`shapes/mismatch`" in visible
    assert "`config.trainer-release/detected`" in collapsed and "`engine.aux-layers" not in visible


# ----- waived findings ------------------------------------------------------------------------------------------


def test_waived_findings_in_every_report(drafter, capsys):
    """The waived finding (its code, its reason) in JSON; what the text report, markdown's waived section and the
    GitHub notice say of it: the golden file, in that order."""
    d = drafter("flat")
    helpers.inject(d, "d2t-arange")
    arange = d.write()
    # the release named: the report does not depend on what is installed here
    argv = ["check", arange, "--level", "header", "--skip", "vocab.d2t/arange=rebuilding the vocabulary", "--engine",
            f"vllm@{VLLM}"]
    code, out, _ = cli(capsys, *argv, "--format", "json")
    (d2t,) = [c for c in json.loads(out)["checkpoints"][0]["checks"] if c["id"] == "vocab.d2t"]
    assert d2t["status"] == "waived" and [(f["code"], f["severity"], f["waived"]) for f in d2t["findings"]] == [
        ("vocab.d2t/arange", "error", "rebuilding the vocabulary")]
    code, text, _ = cli(capsys, *argv)
    code, out, _ = cli(capsys, *argv, "--format", "markdown")
    waived = out.split("#### Waived findings (--waive)")[1]
    assert "| WAIVED |" not in out
    code, out, _ = cli(capsys, *argv, "--format", "github")
    (note,) = [c for c in parse_github(out) if c.get("title", "").startswith("eagle3-checks waived")]
    assert note["level"] == "notice" and note["title"] == "eagle3-checks waived vocab.d2t/arange"
    said = f"{text}----- markdown: #### Waived findings (--waive){waived}----- github notice\n{note['message']}\n"
    assert_golden("test_report_formats/test_waived_findings_in_every_report.txt", said, {"TMP": arange.parent})
    code, out, _ = cli(capsys, *argv, "--format", "sarif")
    log = json.loads(out)
    validate_sarif(log)
    (result,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "vocab.d2t/arange"]
    assert result["suppressions"] == [{"kind": "external", "status": "accepted",
                                       "justification": "--waive: rebuilding the vocabulary"}]


# ----- demo --------------------------------------------------------------------------------------------------------


def test_demo_without_out_prints_no_temporary_paths(capsys):
    import tempfile

    for fmt in ("text", "json", "sarif", "github"):
        code, out, err = cli(capsys, "demo", "--format", fmt)
        assert code == 0, err
        assert tempfile.gettempdir() not in out and "eagle3-demo-" not in out, fmt
        assert "example-flat" in out, fmt  # the example named as --out would name it
        # where the examples were (a temporary folder, deleted) and how to keep them: the same in every format
        assert_golden("test_report_formats/test_demo_without_out_prints_no_temporary_paths.txt", err)


# ----- files: a specific why per case ------------------------------------------------------------------------------


def test_files_says_why_for_each_case(drafter):
    """Each case's files findings, their codes and whys (a missing shard, a truncated file, a directory as
    config.json, no config.json, one that does not parse): the golden file."""
    cases = {}
    d = drafter("flat")
    path = d.write(shards=2)
    (path / "model-00002-of-00002.safetensors").unlink()
    cases["missing shard"] = run(path)
    path = drafter("flat").write()
    w = path / "model.safetensors"
    w.write_bytes(w.read_bytes()[:-100])
    cases["truncated"] = run(path)
    path = drafter("flat").write()
    (path / "config.json").unlink()
    (path / "config.json").mkdir()
    cases["config dir"] = run(path)
    path = drafter("flat").write()
    (path / "config.json").unlink()
    cases["no config"] = run(path)
    path = drafter("flat").write()
    (path / "config.json").write_text("{not json")
    cases["bad json"] = run(path)
    seen, said = set(), []
    for name, result in cases.items():
        findings = [f for f in result.result("files").findings if f.why]
        assert findings and all(f.code.startswith("files/") for f in findings), name
        said += [f"{name}: {f.code}: {f.why}" for f in findings]
        seen.update(f.why for f in findings)
    assert len(seen) >= len(cases)  # no shared boilerplate
    assert_golden("test_report_formats/test_files_says_why_for_each_case.txt", "\n".join(said) + "\n",
                  {"TMP": d.root.parent})


# ----- small items: --skip per engine, did-you-mean, a drafter's config as --target-config ------------------------


def test_skip_a_per_engine_check_for_one_engine_or_release(drafter, capsys):
    """A waiver for one engine (or release) waives that result's findings only; the check runs for every engine."""
    d = drafter("flat", trained=False)  # a SpecForge export: its ids in eagle_config, counted SGLang's way
    del d.config["eagle_aux_hidden_state_layer_ids"]  # vLLM 0.33 reads the top level only: it fails, SGLang passes
    path = d.write()
    argv = ["check", path, "--level", "header", "--engine", f"vllm,sglang@{SGLANG}", "--format", "json",
            "--trainer", "specforge@0.2.0"]

    def statuses(*skip):
        code, out, err = cli(capsys, *argv, *[a for s in skip for a in ("--skip", s)])
        checks = json.loads(out)["checkpoints"][0]["checks"]
        got = {c.get("engine"): c["status"] for c in checks if c["id"] == "engine.aux-layers"}
        stale = [f["message"] for c in checks if c["id"] == "gate.waivers" for f in c["findings"]]
        return code, got, stale

    assert statuses()[:2] == (1, {f"vllm@{VLLM}": "failed", f"sglang@{SGLANG}": "passed"})
    for waiver in (f"engine.aux-layers[vllm@{VLLM}]=judged by hand", "engine.aux-layers[vllm]=judged by hand",
                   "engine.aux-layers/ids-not-read[vllm]=judged by hand", "engine.aux-layers=judged by hand"):
        assert statuses(waiver) == (0, {f"vllm@{VLLM}": "waived", f"sglang@{SGLANG}": "passed"}, []), waiver
    code, got, stale = statuses("engine.aux-layers[sglang]=not served there")
    assert code == 1 and got == {f"vllm@{VLLM}": "failed", f"sglang@{SGLANG}": "passed"}
    assert stale == ["stale waiver: --waive engine.aux-layers[sglang]=not served there matched no finding "
                     f"(engine.aux-layers[sglang@{SGLANG}] ran and found nothing to waive)"]


@pytest.mark.parametrize("argv, fragment", [
    (["check", "{good}", "--skip", "config.rop=x"], "no check named 'config.rop'; did you mean config.rope?"),
    (["check", "{good}", "--skip", "engine.aux-layers[vlm]=x"], "no engine named 'vlm'"),
    (["check", "{good}", "--skip", "engine.aux-layers[vllm@nine]=x"], "'nine' is no release number"),
    (["check", "{good}", "--skip", "keys[vllm]=x"], "keys is not a per-engine check"),
    (["check", "{good}", "--skip", "engine.aux-layers[vllm=x"], "write engine.aux-layers[ENGINE]"),
    (["explain", "rope"], "did you mean config.rope?"),
    (["explain", "engine.aux-layer"], "did you mean engine.aux-layers"),
    (["check", "{good}", "--target-config", "{good}/config.json"], "this is a drafter's config (it has"),
    (["check", "{good}", "--target-config", "{good}"], "not the verifier's"),
])
def test_usage_errors_say_what_was_meant(drafter, capsys, argv, fragment):
    good = drafter("flat").write()
    code, out, err = cli(capsys, *[a.format(good=good) for a in argv])
    assert code == 2 and fragment in err and "Traceback" not in out + err, err


def test_a_drafter_config_as_target_config_in_the_plugin_and_convert(drafter, tmp_path, capsys):
    good = drafter("speculators").write()
    code, _, err = cli(capsys, "convert", good, tmp_path / "out", "--to", "vllm", "--target-config", good,
                       "--verify", "header")
    assert code == 2 and not (tmp_path / "out").exists()
    assert_golden("test_report_formats/test_a_drafter_config_as_target_config_in_the_plugin_and_convert.txt", err,
                  {"TMP": tmp_path})


def test_the_docs_workflow_runs_the_gate_in_every_ci_format():
    """docs/ci.md's GitHub Actions job: its eagle3-checks commands parse, and it uploads the SARIF it writes."""
    import shlex

    from eagle3_checks.cli import build_parser

    page = (Path(__file__).parent.parent / "docs" / "ci.md").read_text()
    section = page.split("## Annotations, code scanning and the job summary", 1)[1]
    yaml = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    commands = [line.split("run:", 1)[1].split(">", 1)[0].strip() for line in yaml.splitlines()
                if "run: eagle3-checks" in line]
    formats = set()
    for command in commands:
        args = build_parser().parse_args(shlex.split(command)[1:])
        formats.add(args.format)
    assert formats == {"github", "markdown", "sarif"}
    assert "github/codeql-action/upload-sarif" in yaml and "sarif_file: eagle3.sarif" in yaml
    assert "> eagle3.sarif" in yaml and "security-events: write" in yaml


# ----- the reference line, and diff as check reports --------------------------------------------------------------


def _checkpoint_json(capsys, path, *argv) -> dict:
    code, out, _ = cli(capsys, "check", path, "--level", "header", "--format", "json", *argv)
    return json.loads(out)["checkpoints"][0]


def _bad_config(drafter, shape=None):
    path = drafter("flat", *([shape] if shape else [])).write()
    (path / "config.json").write_text("{not json")
    return path


def test_a_drafter_of_no_shipped_shape_states_why_once_and_short(drafter, capsys):
    """Every report on a drafter of no shipped shape repeated a 600-character "no shipped reference spec
    matches" note, in the header and again in reference.diff's SKIP row. Now it is said once, naming the nearest spec
    only."""
    from dataclasses import replace

    from eagle3_checks.drafter.example import EXAMPLE

    path = drafter("flat", replace(EXAMPLE, hidden_size=32, head_dim=8)).write()
    report = _checkpoint_json(capsys, path)
    note = report["reference_note"]
    assert report["reference"] is None and len(note) < 250, note
    assert next(c for c in report["checks"] if c["id"] == "reference.diff")["status"] == "skipped"
    rows = [note]  # naming the nearest spec (closest tiny-example): the golden file
    for fmt in ("text", "markdown"):
        code, out, _ = cli(capsys, "check", path, "--level", "header", "--format", fmt)
        assert out.count(note if fmt == "text" else note.replace("|", "\\|")) == 1, fmt
        (row,) = [line for line in out.splitlines() if "reference.diff" in line]  # the check's row, by its id
        rows.append(row)
    # and its SKIP row in each (it points at the reference line instead of repeating it)
    assert_golden("test_report_formats/test_a_drafter_of_no_shipped_shape_states_why_once_and_short.txt",
                  "\n".join(rows) + "\n")


def test_an_unreadable_config_states_no_none_in_the_reference_line(drafter, capsys):
    """"None heads of None" in the reference line of a drafter whose config.json does not parse."""
    report = _checkpoint_json(capsys, _bad_config(drafter))
    assert "None" not in report["reference_note"]  # the regression itself (about its wording)
    assert next(c for c in report["checks"] if c["id"] == "reference.diff")["status"] == "skipped"
    # what it says instead (config.json): the golden file
    assert_golden("test_report_formats/test_an_unreadable_config_states_no_none_in_the_reference_line.txt",
                  report["reference_note"] + "\n")


def test_diff_and_check_give_an_invalid_config_one_code(drafter, capsys):
    """check said files/invalid-json and diff files/corrupt for the same config.json."""
    path = _bad_config(drafter)
    checked = {f["code"] for c in _checkpoint_json(capsys, path)["checks"] if c["id"] == "files"
               for f in c["findings"]}
    code, out, _ = cli(capsys, "diff", path, "tiny-example", "--format", "json")
    diffed = {f["code"] for f in json.loads(out)["findings"] if f["code"].startswith("files/")}
    assert code == 1 and checked == diffed == {"files/invalid-json"}


def test_diff_does_not_compare_a_side_it_cannot_read(drafter, capsys):
    """With config.json unreadable, diff turned a d2t of another length (the draft vocabulary, the
    trainer's choice) into an error, and every config field into one more. As check skips reference.diff there, diff
    reports the file problem alone and says the two were not compared."""
    from dataclasses import replace

    from eagle3_checks.drafter.example import EXAMPLE

    path = _bad_config(drafter, replace(EXAMPLE, draft_vocab_size=256))
    code, out, _ = cli(capsys, "diff", path, "tiny-example", "--format", "json")
    data = json.loads(out)
    assert code == 1 and data["compared"] is False and [f["code"] for f in data["findings"]] == ["files/invalid-json"]
    said = data["not_compared"] + "\n"  # A (this side): the golden file
    code, out, _ = cli(capsys, "diff", "tiny-example", path, "--format", "json")
    data = json.loads(out)
    assert code == 1 and data["compared"] is False and [f["code"] for f in data["findings"]] == ["files/invalid-json"]
    # the text report: B (this side) not compared, and no reference.diff finding: the golden file
    code, out, _ = cli(capsys, "diff", "tiny-example", path)
    assert code == 1
    assert_golden("test_report_formats/test_diff_does_not_compare_a_side_it_cannot_read.txt", said + out,
                  {"TMP": path.parent})


def test_diff_groups_by_root_cause_as_check_does(drafter, capsys):
    """diff against a reference of another size repeated one why and fix for every tensor. The shapes
    hidden_size sizes follow from it, as in check: one root cause, its why and fix once."""
    path = drafter("flat").write()
    code, out, _ = cli(capsys, "diff", path, "aq-medai-kimi-k2-eagle3", "--format", "json")
    data = json.loads(out)
    causes = {c["key"]: c for c in data["causes"]}
    hidden = causes["config.json: hidden_size"]
    shapes = [f for f in data["findings"] if f["code"] == "reference.diff/shape"]
    assert code == 1 and len(shapes) >= 10
    assert len(hidden["also_affects"]) == sum(f.get("cause") == "config.json: hidden_size" for f in shapes) >= 10
    code, text, _ = cli(capsys, "diff", path, "aq-medai-kimi-k2-eagle3")
    for value in {f[k] for f in data["findings"] for k in ("why", "fix") if f.get(k)}:
        assert text.count(value[:40]) <= 1, value
    # check groups the same findings the same way
    result = run(path, reference="aq-medai-kimi-k2-eagle3", level="header")
    (cause,) = [c for c in group(result).groups if c.key == "config.json: hidden_size"]
    assert cause.finding.code == "reference.diff/config-field" and len(cause.also) == len(hidden["also_affects"])


def test_a_run_without_a_reference_note_shows_no_empty_parentheses(drafter):
    """A gate run given no reference and no note about it (as accept runs its checks): the text and markdown headers
    say the reference is - and stop there; they showed "- ()"."""
    from eagle3_checks.drafter.checkpoint import open_checkpoint
    from eagle3_checks.gate import parse_options, run_gate
    from eagle3_checks.reports.markdown import render_markdown
    from eagle3_checks.reports.text import render_text

    result = run_gate(open_checkpoint(drafter("flat").write()), parse_options(level="header", engine=f"vllm@{VLLM}"))
    assert result.reference_note == "" and result.reference_name is None
    text, markdown = render_text([result]), render_markdown([result])
    assert "  reference: -\n" in text and "reference **-** · **" in markdown
    assert "()" not in text.split("\n  engine")[0] and "- ()" not in markdown
