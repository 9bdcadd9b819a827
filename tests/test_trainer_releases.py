"""Trainer releases as data: speculators 0.2.0 to 0.9.0 (each read from its wheel on PyPI; 0.9.0 also runs here) and
SpecForge 0.1.0, 0.2.0 and its main branch after PR #879. The release a checkpoint states (speculators_version)
selects the trainer reading the engine, forward and acceptance levels compare against; one that states none gets
every release's reading where they differ; every report says which trainer and release, and how that was known."""

from __future__ import annotations

import json
import re

import pytest

from eagle3_checks import engines
from eagle3_checks.drafter.checkpoint import open_checkpoint
from eagle3_checks.engines import speculators
from eagle3_checks.reports.github import render_github
from eagle3_checks.reports.json_report import render_json
from eagle3_checks.reports.markdown import render_markdown
from eagle3_checks.reports.sarif import render_sarif
from eagle3_checks.reports.text import render_text
from helpers import goldens, run

golden = goldens("test_trainer_releases")  # tests/golden/test_trainer_releases/TEST.txt


def trained(drafter, version, **fields):
    d = drafter("speculators")
    if version is None:
        d.config.pop("speculators_version", None)
    else:
        d.config["speculators_version"] = version
    tlc = fields.pop("tlc", None)
    if tlc is not None:
        d.config["transformer_layer_config"] = {k: v for k, v in {**d.config["transformer_layer_config"],
                                                                    **tlc}.items() if v is not None}
    d.config.update(fields)
    return open_checkpoint(d.write())


@pytest.mark.parametrize("fields, attr, by_release", [
    # norm_output exists from 0.7.0 (models/eagle3/config.py:76-82); before, the pre-norm state is fed back
    ({"norm_output": True}, "feedback", {"0.6.0": "prenorm", "0.7.0": "normed", "0.9.0": "normed"}),
    # fc_norm from 0.7.0 (config.py:66-74)
    ({"fc_norm": True}, "fc_norm", {"0.6.0.2": False, "0.7.0": True}),
    # norm_before_fc from 0.5.0 (config.py:58-65)
    ({"norm_before_fc": True}, "input_norm", {"0.4.0": False, "0.5.0": True, "0.8.1": True}),
    # fc takes len(ids) states from 0.7.0 (core.py:67-74); 3 before (0.6.0 core.py:55)
    ({"eagle_aux_hidden_state_layer_ids": [1, 3, 5, 6]}, "num_aux", {"0.6.0": 3, "0.7.0": 4}),
    # transformer_layer_config without model_type: LlamaConfig up to 0.6.0 (config.py:34, 82), Qwen3Config after
    ({"tlc": {"model_type": None, "head_dim": None}}, "head_dim", {"0.6.0": 16, "0.7.0": 128}),
    ({"tlc": {"model_type": None}}, "qk_norm", {"0.3.0": False, "0.6.0": False, "0.7.0": True}),
])
def test_each_speculators_release_reads_the_checkpoint_as_its_source_says(drafter, fields, attr, by_release):
    for version, expected in by_release.items():
        ckpt = trained(drafter, version, **dict(fields))
        reading = engines.trainer(ckpt)
        assert reading.version == version and getattr(reading, attr) == expected, (version, reading.sources.get(attr))


def test_speculators_0_3_0_builds_llama_layers_only(drafter):
    ckpt = trained(drafter, "0.3.0", tlc={"model_type": "qwen3"})
    refusals = engines.trainer(ckpt).refusals
    assert refusals
    golden("test_speculators_0_3_0_builds_llama_layers_only", "\n".join(refusals) + "\n")  # "llama only"
    assert not engines.trainer(trained(drafter, "0.4.0", tlc={"model_type": "qwen3"})).refusals


def test_a_stated_modelled_release_is_detected_and_judges(drafter):
    ckpt_dir = trained(drafter, "0.6.0", norm_output=True).source.path
    result = run(ckpt_dir, level="header")
    found = result.result("config.trainer-release").findings
    assert [f.code for f in found] == ["config.trainer-release/detected"]
    assert (result.trainer["name"], result.trainer["version"]) == ("speculators", "0.6.0")
    golden("test_a_stated_modelled_release_is_detected_and_judges",
           found[0].message + "\n")  # "speculators 0.6.0 (read from its source"
    # vLLM 0.33.0 serves norm_output as stated (the normed state fed back); speculators 0.6.0 trained without it
    assert "engine.semantics/feedback" in {f.code for f in result.result("engine.semantics", "vllm").findings}
    assert not [f for f in run(trained(drafter, "0.9.0", norm_output=True).source.path, level="header")
                .result("engine.semantics", "vllm").findings if f.code == "engine.semantics/feedback"]


def test_a_speculators_checkpoint_of_unknown_release_states_each_reading_where_they_differ(drafter):
    result = run(trained(drafter, None, norm_output=True, fc_norm=True).source.path, level="header")
    found = result.result("config.trainer-release").findings
    assert [f.code for f in found] == ["config.trainer-release/unknown-release"] and found[0].basis == "inferred"
    # the fields it holds date it to 0.7.0 on (norm_output, fc_norm: models/eagle3/config.py:66, 76 from 0.7.0): an
    # inference, so the releases before are stated too ("feedback: speculators 0.7.0 to 0.9.0 'normed', speculators
    # 0.2.0 to 0.6.0.2 (outside its dating) 'prenorm'", "fc_norm: speculators 0.7.0 to 0.9.0 True"), and what depends
    # on them is a warning
    golden("test_a_speculators_checkpoint_of_unknown_release_states_each_reading_where_they_differ",
           found[0].message + "\n")
    alike = run(trained(drafter, None).source.path, level="header").result("config.trainer-release").findings
    assert [f.code for f in alike] == ["config.trainer-release/detected"]


def test_the_releases_are_the_wheels_on_pypi_in_order():
    versions = [r.version for r in speculators.RELEASES]
    assert versions[0] == "0.2.0" and versions[-1] == speculators.VERSION
    assert [engines.version_key(v) for v in versions] == sorted(engines.version_key(v) for v in versions)
    assert all(r.why for r in speculators.RELEASES[:-1]), "each release states how it differs from 0.9.0, or not"


@pytest.mark.parametrize("case, layout, version", [
    # "trainer: speculators 0.6.0 (speculators_version in config.json; read); judged against speculators 0.6.0's
    # reading"
    ("stated", "speculators", "0.6.0"),
    # "trainer: speculators, release not stated (a speculators config without speculators_version; read); judged
    # against speculators 0.7.0 to 0.9.0's reading"
    ("not-stated", "speculators", None),
    # "trainer: unknown (nothing in the checkpoint names its trainer; assumed); judged against specforge 0.2.0 / main
    # after PR #879 or speculators 0.2.0 to 0.9.0's reading"
    ("flat", "flat", None),
])
def test_every_report_says_which_trainer_and_release_and_how_it_was_known(drafter, tmp_path, case, layout, version):
    d = drafter(layout)
    if layout == "speculators":
        d.config.pop("speculators_version")
        if version:
            d.config["speculators_version"] = version
    result = run(d.write(), level="header")
    doc = json.loads(render_json([result]))["checkpoints"][0]["trainer"]
    assert (doc["name"], doc["version"]) == (None if layout == "flat" else "speculators", version)
    assert json.loads(render_sarif([result]))["runs"][0]["properties"]["verdicts"][0]["trainer"] == doc
    # the trainer line of the text, markdown and github reports: each states the JSON's how and reading
    text = [line for line in render_text([result]).splitlines() if line.startswith("  trainer: ")]
    markdown = [line for line in render_markdown([result]).splitlines() if line.startswith("Trainer ")]
    github = [line for line in render_github([result]).replace("%3A", ":").replace("%2C", ",").splitlines()
              if line.startswith("::notice title=eagle3-checks verdict::")]
    assert len(text) == len(markdown) == len(github) == 1
    assert all(doc["how"] in line and doc["reading"] in line for line in text + markdown + github)
    golden(f"test_every_report_says_which_trainer_and_release_and_how_it_was_known-{case}",
           "\n".join(text + markdown + github) + "\n", tmp_path)


@pytest.mark.slow
def test_the_forward_level_computes_against_each_release_where_the_release_is_unknown(drafter):
    """norm_output true without speculators_version: 0.6.0 fed the pre-norm state back, 0.7.0 on the normed one.
    vLLM 0.33.0 feeds the normed one back: it computes 0.9.0's drafter, not 0.6.0's, and the report says both."""
    pytest.importorskip("torch")
    result = run(trained(drafter, None, norm_output=True).source.path, level="forward", engine="vllm")
    found = {f.code: f for f in result.result("forward.equivalence", "vllm").findings}
    assert set(found) == {"forward.equivalence/unknown-release", "forward.equivalence/agrees"}
    # the message: "speculators 0.2.0 to 0.6.0.2 (outside its dating): differs", "compares against speculators 0.7.0
    # to 0.9.0's"; the figures measured (logits, differences, top-1 agreement) are not its wording
    said = re.sub(r"\(step (\d+): .*?top-1 agreement \d+/\d+\)", r"(step \1: MEASURED)",
                  found["forward.equivalence/unknown-release"].message)
    golden("test_the_forward_level_computes_against_each_release_where_the_release_is_unknown", said + "\n")
    known = run(trained(drafter, "0.9.0", norm_output=True).source.path, level="forward", engine="vllm")
    assert [f.code for f in known.result("forward.equivalence", "vllm").findings] == ["forward.equivalence/agrees"]


def test_a_release_judged_by_another_names_the_one_whose_reading_judges(drafter):
    result = run(trained(drafter, "0.10.0").source.path, level="header")
    assert result.trainer["reading"] == "speculators 0.9.0"  # "judged against speculators 0.9.0's reading"
    found = result.result("config.trainer-release").findings
    assert [f.code for f in found] == ["config.trainer-release/not-modelled"]
    # the message: "read its package and state its differences" (a trainer has no recording: no run.sh)
    golden("test_a_release_judged_by_another_names_the_one_whose_reading_judges", found[0].message + "\n")


@pytest.mark.parametrize("name, version, release", [("vllm", "0.33.0+cpu", "0.33.0"),
                                                    ("speculators", "0.9.0.dev1", "0.9.0")])
def test_a_build_of_a_modelled_release_is_judged_as_that_release(name, version, release):
    judged = engines.judge(name, version)
    assert judged.warning is None and judged.release == release
    golden(f"test_a_build_of_a_modelled_release_is_judged_as_that_release-{name}", judged.note + "\n")  # "a build of"


def test_a_stated_difference_no_function_takes_is_refused():
    with pytest.raises(TypeError, match="keywords of neither"):
        engines.profile("vllm@0.33.0").at("0.29.0", (("no_such_keyword", True),))


def test_specforge_is_a_record_walked_by_the_one_reader(drafter):
    """SpecForge's reading is STEPS, walked by engines.reader as every release's is, and its releases (and the
    changes before 0.1.0, and PR #879) differ by SWITCHES, which a record states: each one a release or a change names
    is a switch, and no other keyword is read."""
    from eagle3_checks.engines import reader, specforge, trainers

    switches = dict(specforge.SWITCHES)
    named = {k for rel in (*specforge.RELEASES, *specforge.UNRELEASED) for k, _ in rel.differs}
    named |= {change.keyword for change in trainers.CHANGES}
    assert named <= switches.keys() and named, named - switches.keys()
    ckpt = open_checkpoint(drafter("flat").write())
    for rel in (*specforge.RELEASES, *specforge.UNRELEASED):
        stated = {**switches, **dict(rel.differs)}
        assert specforge.read(ckpt, **dict(rel.differs)) == reader.read(
            specforge.NAME, specforge.VERSION, specforge.STEPS, ckpt, switches=stated), rel.version
    assert specforge.read(ckpt, rope_base_10000=True).rope_theta == 10000.0 != specforge.read(ckpt).rope_theta
    with pytest.raises(TypeError, match="not a SpecForge switch: rope_base"):
        specforge.read(ckpt, rope_base=True)


def test_a_flat_drafter_is_read_once_for_every_speculators_release(drafter, monkeypatch):
    """A flat config read as speculators trained it means the same under every speculators release (only the label
    names the release): it is read once, and each release's reading is a copy of its own (no list or dict shared)."""
    from eagle3_checks.engines import identify, specforge, trainers

    ckpt = open_checkpoint(drafter("flat").write())
    calls = []
    read = specforge.read
    monkeypatch.setattr(specforge, "read", lambda *a, **k: calls.append(k) or read(*a, **k))
    got = trainers._speculators_releases(ckpt, identify(ckpt, None, "speculators"))
    assert len(got) == len(speculators.RELEASES) and calls == [{"speculators_meaning": True}]
    assert [r.version for _, r in got] == [rel.version for rel in reversed(speculators.RELEASES)]
    for attr in ("sources", "tensors", "refusals"):
        assert len({id(getattr(r, attr)) for _, r in got}) == len(got), attr
