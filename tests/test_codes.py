"""Finding codes and waivers: every finding has a stable, declared code (CHECK_ID/SLUG) shown in every report;
``--waive`` takes a check id or a code, keeps the check running, reports waived findings as waived and a waiver
that matches nothing as stale (an error under --strict); ``explain`` takes a code and shows each check's codes and
its failing and passing example."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from eagle3_checks import checks as checks_package
from eagle3_checks.defects import DEFECTS, EXAMPLES, Defect, example_of, inject, run_example
from eagle3_checks.gate import FAILED, PASSED, WAIVED, WAIVERS, WARNED, all_checks, parse_options
from eagle3_checks.registry import SLUG
from helpers import SGLANG, VLLM, assert_golden, cli

PACKAGE = Path(checks_package.__file__).resolve().parent.parent
SOURCES = sorted((PACKAGE / "checks").glob("*.py"))
MAKERS = {"error", "warning", "info", "make", "stale"}
BY_ID = {c.id: c for c in all_checks()}
# slugs two sites of one check share on purpose: one kind of finding, said in two situations
# one kind of finding made at two sites: the trainer detected with its release stated, or without one that matters
SHARED = {("engine.aux-layers", "convention-unknown"), ("config.trainer-release", "detected"),
          ("keys", "unexpected-tensor"),  # P-EAGLE's mask_hidden in another drafter, or any other tensor
          # engine.aux-layers' verdicts on the layers fed, made once from the trained layers and once under every
          # reading of the ids the evidence leaves possible (_every_reading): the same finding, two routes to it
          *(("engine.aux-layers", slug) for slug in ("default-matches", "ids-not-read", "default-undecided",
                                                     "wrong-layers", "undecided"))}


# ----- codes: declared, kebab-case, passed at every site ----------------------------------------------------------


def _literals(node: ast.expr) -> list[str] | None:
    """The string values a code= expression can take, or None when it is computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        a, b = _literals(node.body), _literals(node.orelse)
        return None if a is None or b is None else a + b
    return None


def _check_of(tree: ast.Module, path: Path) -> dict[str, str]:
    """Function name -> the check id it reports for: the decorated checks, and the helpers they call."""
    owner: dict[str, str] = {}
    funcs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    for f in funcs.values():
        for d in f.decorator_list:
            if isinstance(d, ast.Call) and getattr(d.func, "id", None) == "check":
                owner[f.name] = d.args[0].value  # type: ignore[attr-defined]
    todo = list(owner.items())
    while todo:  # the helpers they call, and the helpers those call
        name, check_id = todo.pop()
        for node in ast.walk(funcs[name]):
            if isinstance(node, ast.Name) and node.id in funcs and node.id not in owner:
                owner[node.id] = check_id
                todo.append((node.id, check_id))
    if path.name == "reference.py":  # the reference diff's findings, made by diff() and the helpers it calls, which
        owner["diff"] = "reference.diff"  # the diff command uses too
        for node in ast.walk(funcs["diff"]):
            if isinstance(node, ast.Name) and node.id in funcs and node.id not in owner:
                owner[node.id] = "reference.diff"
    return owner


def _sites():
    """(file, line, check id, [slugs] or None) of every finding made in the checks and the reference diff."""
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        owner = _check_of(tree, path)
        for func in [f for f in tree.body if isinstance(f, ast.FunctionDef)]:
            for node in ast.walk(func):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) in MAKERS:
                    code = next((k.value for k in node.keywords if k.arg == "code"), None)
                    assert code is not None, f"{path.name}:{node.lineno}: a finding made without code=\"slug\""
                    yield path.name, node.lineno, owner.get(func.name), _literals(code), node.func.id  # type: ignore


def test_every_finding_is_made_with_a_declared_slug():
    seen: dict[tuple[str, str], list[str]] = {}
    computed = []
    for name, line, check_id, slugs, maker in _sites():
        assert check_id in BY_ID, f"{name}:{line}: in no check's function (or helper)"
        if slugs is None:
            computed.append((check_id, name, line))
            continue
        for slug in slugs:
            assert SLUG.match(slug), f"{name}:{line}: {slug!r} is not kebab-case"
            assert slug in dict(BY_ID[check_id].codes), f"{name}:{line}: {check_id}/{slug} is not declared"
            # a code declared a note is made as a note (info), and a note is made only with a code declared so
            declared_note = dict(BY_ID[check_id].codes)[slug].is_note
            if maker in ("error", "warning", "info"):
                assert declared_note == (maker == "info"), f"{name}:{line}: {check_id}/{slug} made with {maker}()"
            seen.setdefault((check_id, slug), []).append(f"{name}:{line}")
    # one slug, one kind of finding: two sites of one check share a slug only where that is meant
    shared = {k: v for k, v in seen.items() if len(v) > 1}
    assert set(shared) <= SHARED, shared
    # the computed ones: files (the kind of integrity problem), engine.semantics (the field misread),
    # acceptance.trained-with (the field the data contradicts) and engine.serving (the launch precondition, codes of
    # engines.launch: test_recipe.py holds them to the declared ones)
    dynamic = {"files", "engine.semantics", "acceptance.trained-with", "engine.serving"}
    assert {c for c, _, _ in computed} == dynamic, computed
    # every declared code of a literal-coded check is made somewhere (no stale declaration)
    for c in all_checks():
        if c.id not in dynamic:
            assert {slug for slug, _ in c.codes} == {s for (cid, s) in seen if cid == c.id}, c.id


def test_the_files_check_declares_every_kind_it_reports():
    """The readers say a problem's kind (storage.safetensors.KINDS); the files check reports it as the code of that
    name and says why for each."""
    from eagle3_checks.checks.files import _WHY_KIND
    from eagle3_checks.storage.safetensors import KINDS

    assert set(KINDS) == set(dict(BY_ID["files"].codes)) == set(_WHY_KIND) | {"config-missing", "invalid-json"}


def test_codes_are_listed_statically():
    for c in all_checks():
        assert c.codes, f"{c.id} declares no finding codes"
        for code, meaning in c.meanings.items():
            assert code.startswith(c.id + "/") and SLUG.match(code.split("/", 1)[1]) and meaning.strip(), code
    assert "engine.semantics/norm-before-residual" in BY_ID["engine.semantics"].meanings


def test_list_json_and_explain_show_the_codes(capsys):
    code, out, _ = cli(capsys, "list", "--format", "json")
    listed = {c["id"]: c for c in json.loads(out)}
    assert {"code": "vocab.d2t/arange", "meaning": BY_ID["vocab.d2t"].meanings["vocab.d2t/arange"]} in \
        listed["vocab.d2t"]["codes"]
    code, stale, _ = cli(capsys, "explain", "gate.waivers/stale")  # what a SARIF rule's help names
    assert code == 0
    code, out, _ = cli(capsys, "explain", "vocab.t2d/absolute-ids", "--no-examples")
    assert code == 0
    # the wording: each code's meaning first, then its check's codes and (--no-examples: described, not run) example
    assert_golden("test_codes/test_list_json_and_explain_show_the_codes.txt", stale + "\n" + out)


# ----- the examples explain shows ----------------------------------------------------------------------------------


def test_every_check_names_an_example_of_the_catalogue_with_a_code_of_its_own():
    """Each built-in check's registration names its example (@check(example=...)): a defect of the catalogue, by
    name or declared with the check (then the catalogue holds it), that declares a code of that check; EXAMPLES is
    derived from them."""
    builtin = [c for c in all_checks() if c.func.__module__.startswith(checks_package.__name__ + ".")]
    assert len(builtin) >= 24
    for c in builtin:
        name = c.example.name if isinstance(c.example, Defect) else c.example
        assert name in DEFECTS, f"{c.id}: example {name!r} is no defect of eagle3_checks/defects.py"
        assert c.id in EXAMPLES and EXAMPLES[c.id].defect is DEFECTS[name]
        code = EXAMPLES[c.id].code
        assert code is not None and code in c.meanings, (c.id, DEFECTS[name].codes)


def test_a_check_may_declare_its_example_with_its_registration():
    """A check registered with a Defect as its example (one place: a plugin's, or a new built-in one) is in the
    catalogue, is its own example, and fails on it while the example without it passes."""
    from eagle3_checks.drafter.defect_kit import Defect as Kit
    from eagle3_checks.drafter.defect_kit import layer_config
    from eagle3_checks.registry import REGISTRY, check, error

    example = Kit("rms-norm-eps-large", "test.norm-eps/too-large", "with rms_norm_eps 0.5",
                  layer_config(rms_norm_eps=0.5))
    try:
        @check("test.norm-eps", "rms_norm_eps is small", example=example, codes={"too-large": "above 1e-2"})
        def norm_eps(ctx):
            eps = ctx.ckpt.config.entry("rms_norm_eps") if ctx.ckpt.config is not None else None
            if eps is not None and isinstance(eps.value, float) and eps.value > 1e-2:
                yield error(f"rms_norm_eps {eps.value}", code="too-large", key="rms_norm_eps")
        c = REGISTRY["test.norm-eps"]
        assert Defect is Kit and example_of(c).defect is example
        failing, passing = run_example(c.id, True), run_example(c.id, False)
        assert [f.code for f in failing.findings] == ["test.norm-eps/too-large"] and passing.status == "passed"
    finally:
        REGISTRY.pop("test.norm-eps", None)


@pytest.mark.parametrize("check_id", [c.id for c in all_checks()])
def test_every_check_has_an_example_that_fails_and_one_that_passes(check_id):
    """The example's defect fails the check with the code it declares for it; the example without it passes."""
    c = BY_ID[check_id]
    if c.requires and c.requires():
        pytest.skip(c.requires())
    assert check_id in EXAMPLES
    bad, good = run_example(check_id, True), run_example(check_id, False)
    assert bad.status in (FAILED, WARNED), (bad.status, bad.reason, [f.message for f in bad.findings])
    assert good.status == PASSED, (good.status, good.reason, [f.message for f in good.findings])
    assert all(f.code in c.meanings for f in bad.findings)
    assert EXAMPLES[check_id].code in {f.code for f in bad.findings if f.severity.value != "info"}, \
        (EXAMPLES[check_id].code, [(f.code, f.message) for f in bad.findings])


def test_explain_gates_the_examples(capsys):
    code, out, _ = cli(capsys, "explain", "config.head-dim")
    assert code == 0
    # the codes, the basis, and the examples run: the failing one's finding, then "-> passed"
    assert_golden("test_codes/test_explain_gates_the_examples.txt", out)


@pytest.mark.parametrize("argv", [
    ["explain", "vocab.d2t/absolut-ids"],
    ["explain", "vocab.d2tt/arange"],
    ["check", "{good}", "--skip", "vocab.d2t/absolut-ids=x"],
    ["check", "{good}", "--skip", "absolute-ids=x"],
    ["check", "{good}", "--skip", "vocab.d2t/Absolute_IDs=x"],
    ["check", "{good}", "--skip", "vocab.d2t/arange[vllm]=x"],
    ["check", "{good}", "--skip", "engine.loads/narrowed[vlm]=x"],
    ["check", "{good}", "--skip", "vocab.d2t/arange"],
], ids=["explain-misspelt-slug", "explain-misspelt-check", "skip-misspelt-slug", "skip-bare-slug",
        "skip-not-kebab-case", "skip-engine-of-an-engineless-check", "skip-unknown-engine", "skip-no-reason"])
def test_unknown_codes_are_usage_errors(drafter, capsys, request, argv):
    good = drafter("flat").write()
    code, out, err = cli(capsys, *[a.format(good=good) for a in argv])
    assert code == 2 and not out, (out, err)
    # the error's wording: what was meant (the nearest codes, the form a waiver takes), one line, no traceback
    assert_golden(f"test_codes/test_unknown_codes_are_usage_errors-{request.node.callspec.id}.txt", err,
                  {"TMP": good.parent})


# ----- waivers -------------------------------------------------------------------------------------------------------


@pytest.fixture
def arange(drafter):
    d = drafter("flat")
    inject(d, "d2t-arange")
    return d.write()


def _report(capsys, *argv):
    code, out, err = cli(capsys, "check", *argv, "--level", "header", "--format", "json")
    assert code in (0, 1), err
    report = json.loads(out)["checkpoints"][0]
    return code, report, {(c["id"], c.get("engine")): c for c in report["checks"]}


@pytest.mark.parametrize("flag", ["--waive", "--skip"], ids=["waive", "old-name-skip"])
@pytest.mark.parametrize("waiver", ["vocab.d2t/arange", "vocab.d2t"], ids=["by-code", "by-check-id"])
def test_a_waiver_keeps_the_check_running_and_reports_its_findings_waived(arange, capsys, waiver, flag):
    code, _, checks = _report(capsys, arange)
    assert code == 1 and checks[("vocab.d2t", None)]["status"] == FAILED
    failing_elsewhere = [k for k, c in checks.items() if c["status"] == FAILED and k != ("vocab.d2t", None)]
    skip = [a for k in failing_elsewhere for a in (flag, f"{k[0]}=not this test's business")]
    code, report, checks = _report(capsys, arange, flag, f"{waiver}=a draft vocabulary being rebuilt", *skip)
    d2t = checks[("vocab.d2t", None)]
    assert code == 0 and d2t["status"] == WAIVED
    (f,) = d2t["findings"]
    assert f["code"] == "vocab.d2t/arange" and f["severity"] == "error"
    assert f["waived"] == "a draft vocabulary being rebuilt"
    assert report["counts"]["error"] == 0 and report["counts"]["waived"] >= 1
    assert "waived" in report["summary"] and checks[(WAIVERS.id, None)]["status"] == PASSED


def test_a_code_waiver_waives_only_its_code(arange, capsys):
    code, _, checks = _report(capsys, arange, "--skip", "vocab.d2t/unsorted=another finding")
    assert code == 1 and checks[("vocab.d2t", None)]["status"] == FAILED
    assert not any("waived" in f for f in checks[("vocab.d2t", None)]["findings"])
    (stale,) = checks[(WAIVERS.id, None)]["findings"]
    assert stale["code"] == "gate.waivers/stale" and stale["severity"] == "warning"
    assert stale["key"] == "vocab.d2t/unsorted"
    assert_golden("test_codes/test_a_code_waiver_waives_only_its_code.txt", stale["message"])


@pytest.mark.parametrize("strict", [False, True])
def test_a_stale_waiver_is_a_warning_and_an_error_under_strict(drafter, capsys, strict):
    path = drafter("flat").write()
    code, _, checks = _report(capsys, path, "--skip", "config.rope=theta checked by hand",
                              *(["--strict"] if strict else []))
    assert code == (1 if strict else 0)
    assert checks[("config.rope", None)]["status"] == PASSED
    waivers = checks[(WAIVERS.id, None)]
    assert waivers["status"] == (FAILED if strict else WARNED)
    (stale,) = waivers["findings"]
    assert (stale["code"], stale["severity"], stale["key"]) == \
        ("gate.waivers/stale", "error" if strict else "warning", "config.rope")
    assert_golden(f"test_codes/test_a_stale_waiver_is_a_warning_and_an_error_under_strict-{strict}.txt",
                  stale["message"])


def test_a_waiver_of_a_check_that_did_not_run_is_a_note(drafter, capsys):
    path = drafter("speculators").write()
    code, _, checks = _report(capsys, path, "--strict", "--skip", "scan.values=slow",
                              "--skip", "engine.loads[sglang]=not served there")
    assert code == 0 and checks[(WAIVERS.id, None)]["status"] == PASSED
    notes = checks[(WAIVERS.id, None)]["findings"]
    assert [(f["code"], f["severity"]) for f in notes] == [("gate.waivers/not-exercised", "info")] * 2
    assert_golden("test_codes/test_a_waiver_of_a_check_that_did_not_run_is_a_note.txt",
                  "\n".join(f["message"] for f in notes))


def test_a_code_for_one_engine(drafter, capsys):
    d = drafter("flat")
    del d.config["head_dim"]
    path = d.write()
    argv = ["--engine", "vllm,sglang", "--skip", "engine.loads[vllm]/narrowed=cut on purpose"]
    code, _, checks = _report(capsys, path, *argv)
    assert checks[("engine.loads", f"vllm@{VLLM}")]["status"] == WAIVED
    assert checks[("engine.loads", f"sglang@{SGLANG}")]["status"] == FAILED
    assert parse_options(waive=["engine.loads[vllm]/narrowed=x"]).waive == (("engine.loads/narrowed[vllm]", "x"),)


def test_fix_leaves_a_waived_finding_as_it_is(drafter, tmp_path, capsys):
    d = drafter("flat")
    del d.config["head_dim"]
    src = d.write()
    code, out, _ = cli(capsys, "fix", src, tmp_path / "fixed", "--level", "header",
                       "--skip", "config.head-dim/missing=judged by hand", "--skip", "engine.loads=judged by hand",
                       "--skip", "shapes=judged by hand", "--skip", "reference.diff=judged by hand")
    assert code == 0 and not (tmp_path / "fixed").exists()  # nothing applied: no DST
    summary = out.split("\n\n", 1)[0]  # what fix did, before the gate's report of SRC
    assert_golden("test_codes/test_fix_leaves_a_waived_finding_as_it_is.txt", summary, {"TMP": tmp_path})
    code, out, _ = cli(capsys, "fix", src, tmp_path / "fixed2", "--level", "header")
    assert code == 0 and json.loads((tmp_path / "fixed2" / "config.json").read_text())["head_dim"] == 24


@pytest.mark.parametrize("check_id", sorted(BY_ID))
def test_every_check_reports_its_own_crash_with_its_crashed_code(check_id):
    """A bug in any check is an error finding with the code CHECK/crashed, never a traceback and never a pass: the
    check's own function made to raise, run as the gate runs it."""
    import dataclasses

    from eagle3_checks.gate import run_check
    from eagle3_checks.registry import Context

    def broken(ctx):
        raise RuntimeError("a bug")

    c = dataclasses.replace(BY_ID[check_id], func=broken, needs=(), requires=None, modelled_only=False,
                            live_only=False)
    r = run_check(c, Context(ckpt=None), {})
    assert [f.code for f in r.findings] == [f"{check_id}/crashed"] and r.status == FAILED
    assert f"{check_id}/crashed" in c.meanings


def test_a_crashed_check_has_a_code_too():
    from eagle3_checks.gate import run_check
    from eagle3_checks.registry import Check, Context

    def broken(ctx):
        raise RuntimeError("a bug")

    c = Check("team.broken", "breaks", "header", (), broken, guards="", codes=(("fine", "never made"),))
    r = run_check(c, Context(ckpt=None), {"team.broken/crashed": "known bug"})
    (f,) = r.findings
    assert f.code == "team.broken/crashed" and f.code in c.meanings and f.severity.value == "error"
    assert_golden("test_codes/test_a_crashed_check_has_a_code_too.txt", f.message)
    assert r.status == WAIVED and f.waived == "known bug"
