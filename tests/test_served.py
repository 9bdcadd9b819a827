"""Acceptance as a real server counts it: ``accept --engine llamacpp`` held to what llama-server itself counted.

``tests/conformance/served/llamacpp-0.3.36.json`` is a recording (conformance/record_served.py: llama.cpp built from
the llama-cpp-python 0.3.36 sdist, serving on CPU) of the trained world's drafter, one-change mutants of it and
eagle3-checks convert's output, each served greedily with K = 3 on the prompts of the world's recorded sequences: per
request the ids served, ``timings.draft_n``/``draft_n_accepted`` and every verify step, and the ``/metrics`` scrape.
The recording keeps the world it served beside itself (``llamacpp-0.3.36/``: the target and the trained drafter, with
their sha256 in the recording): a world trained again on another machine differs in its last bits, so the suite
predicts from the files the server served, not from the session's trained world.

What is held, per drafter: the served walk's acceptance length on the world's recorded states within 1% of the
server's and each position's rate within 0.01, the server's figures inside the 95% intervals; and on the text the
server produced, the walk's verify steps equal to the server's, step for step, except at the near-ties the recording
names.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("pyarrow")

from eagle3_checks.cli import main
from helpers import assert_golden, load_conformance

RECORDING = Path(__file__).parent / "conformance" / "served" / "llamacpp-0.3.36.json"
RECORDED = json.loads(RECORDING.read_text())
world_mod = load_conformance("served_world")


def _server(name: str) -> tuple[float, list[float], int]:
    """The server's acceptance length, per-position rates and verify steps, from its /metrics counters."""
    c = RECORDED["drafters"][name]["counters"]
    steps = c["llamacpp:spec_decode_num_drafts_total"]
    return (1.0 + c["llamacpp:spec_decode_num_accepted_tokens_total"] / steps,
            [n / steps for n in c["llamacpp:spec_decode_num_accepted_tokens_per_pos_total"]], int(steps))


WORLD = world_mod.kept_world(RECORDING)


@pytest.fixture(scope="session")
def served_world(tmp_path_factory):
    """The recording's drafters built from the world it kept, and the target's states of the served requests with
    their loss mask (the prompt boundary)."""
    assert world_mod.fingerprint(WORLD) == RECORDED["world"], "the kept world is not the one recorded"
    root = tmp_path_factory.mktemp("served")
    reqs = RECORDED["requests"]
    return {"world": WORLD, "requests": reqs, "drafters": world_mod.build(WORLD, root / "drafters"),
            "data": world_mod.states(WORLD, reqs, root / "recorded"), "root": root}


def test_the_recorded_counters_are_the_recorded_steps():
    """The server's /metrics counters are the sums of the verify steps its log gave per request (the recorder
    parsed every step), and the per-request timings agree with them."""
    for name, d in RECORDED["drafters"].items():
        c = d["counters"]
        steps = [s for r in d["responses"] for s in r["steps"]]
        assert c["llamacpp:spec_decode_num_drafts_total"] == len(steps), name
        assert c["llamacpp:spec_decode_num_draft_tokens_total"] == sum(dr for dr, _ in steps), name
        assert c["llamacpp:spec_decode_num_accepted_tokens_total"] == sum(a for _, a in steps), name
        assert c["llamacpp:spec_decode_num_accepted_tokens_per_pos_total"] == \
            [sum(1 for _, a in steps if a > i) for i in range(RECORDED["k"])], name
        assert all(r["draft_n_accepted"] == sum(a for _, a in r["steps"]) for r in d["responses"]), name


PREDICTED: dict[str, dict] = {}


def _predicted(served_world, name: str, capsys) -> dict:
    """accept --engine llamacpp's JSON reading of drafter ``name`` on the world's recorded states (once a session)."""
    if name not in PREDICTED:
        capsys.readouterr()
        data = served_world["data"]
        code = main(["accept", str(served_world["drafters"][name]), "--data", str(data), "--loss-mask", str(data),
                     "--target", str(served_world["world"] / "target"), "--engine", "llamacpp", "--format", "json"])
        assert code in (0, 1)
        doc = json.loads(capsys.readouterr().out)
        PREDICTED[name] = next(r for r in doc["readings"] if r["reading"] == world_mod.LLAMACPP)
    return PREDICTED[name]


@pytest.mark.parametrize("name", list(world_mod.DRAFTERS))
def test_accept_predicts_what_the_server_counted(served_world, name, capsys):
    got = _predicted(served_world, name, capsys)
    length, per_position, steps = _server(name)
    assert got["acceptance_length"] == pytest.approx(length, rel=0.01), (name, got["acceptance_length"], length)
    assert got["per_position"] == pytest.approx(per_position, abs=0.01), (name, got["per_position"], per_position)
    lo, hi = got["intervals"]["acceptance_length"]
    assert lo <= length <= hi, (name, lo, length, hi)
    for (lo, hi), rate in zip(got["intervals"]["per_position"], per_position, strict=True):
        assert lo <= rate <= hi, (name, lo, rate, hi)
    assert got["verify_steps"] == pytest.approx(steps, rel=0.01)
    metrics = got["served_metrics"]["as_named"]["metrics"]
    assert metrics["llamacpp:spec_decode_num_drafts_total"] == got["verify_steps"]
    # the trainers' per-start figure stands beside it, and is not what the server reported
    assert got["per_start_acceptance_length"] > length * 1.05 or name == "norm-before-residual-flipped"


SERVED_TEXT: dict[str, Path] = {}


@pytest.mark.parametrize("name", list(world_mod.DRAFTERS))
def test_on_the_text_the_server_produced_the_walk_is_the_servers(served_world, name):
    """States on the ids the server served (greedy: the drafter changes no token, so every drafter's are the same
    and recorded once), the llama.cpp reading walked with llama.cpp's drafting: every request's verify steps equal
    the server's, except where the recording names a near-tie of the drafter (a top-2 logit gap below NEAR_TIE,
    which llama.cpp's float order may break the other way)."""
    recorded = RECORDED["drafters"][name]
    served = [dict(r, served=resp["tokens"]) for r, resp in zip(served_world["requests"], recorded["responses"],
                                                                  strict=True)]
    key = json.dumps([r["served"] for r in served])
    if key not in SERVED_TEXT:
        SERVED_TEXT[key] = world_mod.states(served_world["world"], served,
                                            served_world["root"] / f"served-{len(SERVED_TEXT)}", key="served")
    figures = world_mod.reading_walks(served_world["world"], served_world["drafters"][name], SERVED_TEXT[key])
    parted = world_mod.disagreements(figures, [r["steps"] for r in recorded["responses"]])
    assert [(p["request"], p["verify_step"]) for p in parted] == \
        [(p["request"], p["verify_step"]) for p in recorded["parted"]], name
    assert all(p["gap"] is not None and p["gap"] < world_mod.NEAR_TIE for p in parted), (name, parted)


def test_every_drafter_was_served_the_same_text():
    """Greedy decoding: the drafter changes how fast the server goes, never what it says."""
    texts = {json.dumps([r["tokens"] for r in d["responses"]]) for d in RECORDED["drafters"].values()}
    assert len(texts) == 1


def test_the_readme_accept_example_is_this_run(served_world, tmp_path, capsys):
    """The README's before and after: every line it shows is a line of the run it names (on this world's drafter
    with norm_before_residual left out, and on fix's output), and the figures its prose cites are the recording's and
    the prediction's."""
    import re
    import shutil

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    drafter = tmp_path / "drafter"
    shutil.copytree(served_world["drafters"]["trained"], drafter)
    cfg = json.loads((drafter / "config.json").read_text())
    del cfg["norm_before_residual"]
    (drafter / "config.json").write_text(json.dumps(cfg, indent=2))
    # fix's one edit (norm_before_residual = false: test_trained_world holds fix to it) gives the trained drafter back
    paths = {"drafter": drafter, "fixed": served_world["drafters"]["trained"], "states": served_world["data"],
             "target": served_world["world"] / "target"}
    blocks = re.findall(r"```\n\$ eagle3-checks (accept [^\n]*)\n(.*?)\n```", readme, re.S)
    assert len(blocks) == 2 and re.search(r"After `eagle3-checks fix drafter fixed [^`]*` \(one edit:\s+"
                                          r"`norm_before_residual = false`\)", readme)
    for command, shown in blocks:
        capsys.readouterr()
        main([str(paths.get(a, a)) for a in command.split()])
        out = capsys.readouterr().out.splitlines()
        missing = [line for line in shown.splitlines() if line not in out]
        assert not missing, (command, missing)
    length, _, _ = _server("trained")
    predicted = re.search(r"counted ([\d.]+) where `accept --engine llamacpp` says ([\d.]+); the per-start figure "
                          r"beside it\s+\(([\d.]+)\)", readme)
    assert predicted and predicted.group(1) == f"{length:.3f}", predicted
    got = _predicted(served_world, "trained", capsys)
    assert (predicted.group(2), predicted.group(3)) == (f"{got['acceptance_length']:.3f}",
                                                        f"{got['per_start_acceptance_length']:.3f}")


def test_the_docs_table_is_the_recording_and_the_prediction(served_world, capsys):
    """docs/acceptance.md's table of the two figures: per drafter (in served_world.DRAFTERS' order) the prediction,
    what llama-server counted and the per-start figure, as this run and the recording give them."""
    import re

    doc = (Path(__file__).resolve().parents[1] / "docs" / "acceptance.md").read_text()
    head = doc.index("| drafter | `accept --engine llamacpp` | llama-server counted | per start")
    rows = [line for line in doc[head:].splitlines()[2:] if line.startswith("|")][:len(world_mod.DRAFTERS)]
    assert len(rows) == len(world_mod.DRAFTERS)
    for name, row in zip(world_mod.DRAFTERS, rows, strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")]
        first = [re.match(r"[\d.]+", c).group(0) for c in cells[1:]]
        got = _predicted(served_world, name, capsys)
        assert first == [f"{got['acceptance_length']:.3f}", f"{_server(name)[0]:.3f}",
                         f"{got['per_start_acceptance_length']:.3f}"], (name, row)


# ----- served: the recorded scrapes explained --------------------------------------------------------------------

@pytest.fixture(scope="session")
def served_predictions(served_world):
    """Every reading's prediction on the world's recorded states (served.predict: the trainer's, llama.cpp's, and
    the resolver's one-change candidates), made once for every scrape."""
    from eagle3_checks.acceptance import LossMasks, expect_of, load_head, readings, samples
    from eagle3_checks.acceptance.served import predict
    from eagle3_checks.drafter.checkpoint import open_checkpoint

    ckpt = open_checkpoint(served_world["drafters"]["trained"])
    expect = expect_of(readings(ckpt, [])[0][1])
    data = served_world["data"]
    head = load_head(served_world["world"] / "target", expect.hidden, expect.vocab)
    return predict(ckpt, world_mod.LLAMACPP, samples(data, expect, LossMasks(data)), 3, head)


def _scrape(name: str):
    from eagle3_checks.acceptance.served import counters
    from eagle3_checks.engines.counting import LLAMACPP

    return counters(RECORDED["drafters"][name]["metrics_scrape"], name, LLAMACPP, [LLAMACPP])


# what each recorded drafter's scrape says of the trained drafter: (verdict, what fits besides the trained reading)
SCRAPES = {"trained": "as-trained", "converted": "as-trained", "rope-base-10000": "otherwise",
           "norm-before-residual-flipped": "otherwise", "aux-order-rotated": "otherwise"}


@pytest.mark.parametrize("name", list(world_mod.DRAFTERS))
def test_served_names_what_each_recorded_scrape_shows(served_predictions, name):
    """Set beside the trained drafter's readings, llama-server's own counters say: served as trained for the trained
    drafter and convert's output; not as trained for norm_before_residual flipped and for rope base 10000 (only that
    reading fits, each time) and for fc's blocks rotated (only aux orders fit, the rotation served among them)."""
    from eagle3_checks.acceptance.served import judge

    verdict = judge(_scrape(name), served_predictions.fits(_scrape(name)))
    fitting = [f.what for f in verdict.fits if f.fits]
    assert verdict.verdict == SCRAPES[name], (name, verdict.said)
    if name == "norm-before-residual-flipped":
        assert fitting == ["norm_before_residual True"] and verdict.exit_code == 1 and verdict.cost > 0.4
    elif name == "aux-order-rotated":
        assert "fc blocks fed aux (2, 0, 1)" in fitting and all(w.startswith("fc blocks fed aux") for w in fitting)
        assert verdict.exit_code == 1 and verdict.cost > 0.05, fitting
    elif name == "rope-base-10000":
        assert fitting == ["rope_theta 10000"] and verdict.exit_code == 1 and verdict.cost > 0.2
    else:
        assert verdict.exit_code == 0 and "the drafter read as trained" in fitting


def test_two_scrapes_around_a_run_give_a_fresh_servers_answer(served_predictions):
    """A server that first served the trained drafter's traffic and then the flipped one's: the counters between
    two scrapes are the flipped run's, and so is the answer."""
    from eagle3_checks.acceptance.served import Counters, difference, judge

    first, flipped = _scrape("trained"), _scrape("norm-before-residual-flipped")
    added = Counters("llamacpp", *(a + b for a, b in ((first.verify_steps, flipped.verify_steps),
                                                      (first.drafted, flipped.drafted),
                                                      (first.accepted, flipped.accepted))),
                     [a + b for a, b in zip(first.accepted_per_position, flipped.accepted_per_position, strict=True)])
    between = difference(first, added, "second")
    once, twice = (judge(s, served_predictions.fits(s)) for s in (flipped, between))
    assert (once.verdict, [f.fits for f in once.fits]) == (twice.verdict, [f.fits for f in twice.fits])


def test_served_through_the_command_with_its_chart(served_world, tmp_path, capsys):
    scrape = tmp_path / "metrics.prom"
    scrape.write_text(RECORDED["drafters"]["norm-before-residual-flipped"]["metrics_scrape"])
    data = served_world["data"]
    code = main(["served", str(served_world["drafters"]["trained"]), "--metrics", str(scrape), "--engine",
                 "llamacpp", "--data", str(data), "--loss-mask", str(data), "--target",
                 str(served_world["world"] / "target"), "--format", "markdown"])
    out = capsys.readouterr().out
    assert code == 1  # the verdict "otherwise" (Verdict.exit_code)
    # the wording: the verdict heading, the server's line, the table, the chart and the verdict's sentence
    assert_golden("test_served/test_served_through_the_command_with_its_chart.txt", out, {"TMP": tmp_path})
    # the chart's series are the table's: the server's bars, then each reading's line in the table's order
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| reading")]
    table = [line.split("|")[3].split() for line in rows]
    chart = [line.strip().split("[", 1)[1].rstrip("]").split(", ") for line in out.splitlines()
             if line.strip().startswith(("bar [", "line ["))]
    assert chart == table and len(chart) == len(rows) > 3


def test_the_dashboard_page_shows_these_runs(served_predictions):
    """docs/served.md's worked example: every line it shows of a `served` run is a line of what served renders for
    that scrape on this world (the command itself: test_served_through_the_command_with_its_chart)."""
    import re

    from eagle3_checks.acceptance.served import judge
    from eagle3_checks.cli import render_served

    page = (Path(__file__).resolve().parents[1] / "docs" / "served.md").read_text()
    blocks = re.findall(r"```\n\$ eagle3-checks (served [^\n]*)\n(.*?)\n```", page, re.S)
    assert len(blocks) == 3
    for command, shown in blocks:
        args = command.split()
        assert args[1:2] == ["drafter-trained"] and args[args.index("--engine") + 1] == "llamacpp"
        name = args[args.index("--metrics") + 1]
        server = _scrape(name[len("metrics-"):-len(".prom")])
        verdict = judge(server, served_predictions.fits(server))
        out = render_served(verdict, world_mod.LLAMACPP, [name], served_predictions.drafting).splitlines()
        missing = [line for line in shown.splitlines() if line not in out]
        assert not missing, (command, missing)
