"""The acceptance level on drafters that learned something: a tiny target trained on a small synthetic language, its
recorded states, and drafters trained on them with speculators 0.9.0's own model and loss, on CPU, during the session
(peers/train_world.py: about 100 s, in the background from collection on; these tests run last).

What they hold: the trained reading accepts far above chance and its figures equal speculators' own full_acc_k /
cond_acc_k; each mis-conversion lowers the acceptance and the gate names it; the resolver says which rope base and
norm flag the weights were trained with, and "undecided" on an untrained drafter; following the gate's fix restores
what was trained.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from functools import partial
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

import helpers  # noqa: E402
from eagle3_checks.acceptance import evaluate, expect_of, load_head, readings, samples  # noqa: E402
from eagle3_checks.acceptance.evaluate import Figures  # noqa: E402
from eagle3_checks.acceptance.resolve import AL, ALPHA, CONFIRMED, CONTRADICTED, UNDECIDED, measure  # noqa: E402
from eagle3_checks.cli import main  # noqa: E402
from eagle3_checks.drafter.checkpoint import open_checkpoint  # noqa: E402
from eagle3_checks.gate import ACCEPT_ALSO  # noqa: E402
from eagle3_checks.options import DECIDE_GAIN  # noqa: E402
from eagle3_checks.reports.sarif import to_sarif  # noqa: E402
from helpers import SGLANG, VLLM, assert_golden, run  # noqa: E402

K = 3


def figures(world: Path, drafter: Path, target: bool = True, steps: int = K, engines: tuple[str, ...] = ()):
    ckpt = open_checkpoint(drafter)
    named = readings(ckpt, list(engines))
    expect = expect_of(named[0][1])
    head = load_head(world / "target", expect.hidden, expect.vocab) if target else None
    return evaluate(ckpt, named, samples(world / "test", expect), steps, target=head)


def gate_world(world: Path, drafter: Path, **options):
    return run(drafter, data=str(world / "test"), target=str(world / "target"), **options)


codes = partial(helpers.codes, failing=True)  # what fails the gate


def _releases(text: str) -> str:
    """``text`` with the newest vLLM release written as <VLLM>: a golden file names what a bare --engine judges."""
    return text.replace(f"vLLM {VLLM}", "vLLM <VLLM>").replace(f"vllm@{VLLM}", "vllm@<VLLM>")


def _codes_named(out: str, fmt: str) -> set[str]:
    """The finding codes a github or markdown report names: each annotation's title, each finding's `code` (the
    engine a per-engine result judged left off)."""
    import re

    from eagle3_checks.reports.github import parse_github

    if fmt == "github":  # title: eagle3-checks [waived ]CODE[[ENGINE]][: ROOT CAUSE]
        labels = [a["title"].removeprefix("eagle3-checks ").removeprefix("waived ").split(": ")[0]
                  for a in parse_github(out) if a.get("title") != "eagle3-checks verdict"]
    else:  # `CODE` or `CODE[ENGINE]`, wherever the report names one
        labels = re.findall(r"`([a-z0-9.-]+/[a-z0-9-]+(?:\[[^`\]]*\])?)`", out)
    return {label.split("[")[0] for label in labels}


def copy(world: Path, name: str, tmp_path: Path, edit_config=None, edit_tensors=None) -> Path:
    out = tmp_path / f"{name}-copy"
    shutil.copytree(world / "drafters" / name, out)
    if edit_config:
        cfg = json.loads((out / "config.json").read_text())
        edit_config(cfg)
        (out / "config.json").write_text(json.dumps(cfg, indent=2))
    if edit_tensors:
        tensors = safetensors_torch.load_file(str(out / "model.safetensors"))
        edit_tensors(tensors)
        safetensors_torch.save_file(tensors, str(out / "model.safetensors"))
    return out


def test_the_trained_reading_accepts_far_above_chance(trained_world):
    trained = figures(trained_world, trained_world / "drafters" / "trained").readings[0]
    untrained = figures(trained_world, trained_world / "drafters" / "untrained").readings[0]
    assert trained.positions == 16 * (48 - K)  # every row whose K labels lie in the sample
    assert trained.step_accuracy[0] > 0.8 and trained.per_start_acceptance_length > 3.0, trained.record()
    # as a server counts it: per verify step, which crosses the easy stretches fast (clustered acceptance)
    assert 2.5 < trained.acceptance_length < trained.per_start_acceptance_length, trained.record()
    assert trained.alpha is not None and trained.alpha > 0.6
    assert untrained.acceptance_length < 1.05 and untrained.step_accuracy[0] < 0.05, untrained.record()


@pytest.mark.parametrize("name", ["trained", "trained-nbr"])
def test_figures_equal_speculators_own_metrics(trained_world, name):
    """speculators' Eagle3DraftModel.forward (models/eagle3/metrics.py, compute_metrics) on the test states, summed
    over the samples by peers/train_world.py: its step k counts the rows that have a step-k target, as a run of
    the project's evaluation with K = k + 1 does; the conditional accuracy at k is cond_acc_k and the product of the
    conditionals full_acc_k."""
    metrics = json.loads((trained_world / "metrics.json").read_text())[name]
    for k in range(K):
        ours = figures(trained_world, trained_world / "drafters" / name, steps=k + 1).readings[0]
        assert ours.positions == metrics[f"full_acc_{k}_total"]
        assert ours.cond_counted[k] == metrics[f"cond_acc_{k}_total"]
        cond = metrics[f"cond_acc_{k}_sum"] / metrics[f"cond_acc_{k}_total"]
        assert ours.conditional_accuracy[k] == pytest.approx(cond, abs=1e-6)
        product = 1.0
        for c in ours.conditional_accuracy:
            product *= c
        assert product == pytest.approx(metrics[f"full_acc_{k}_sum"] / metrics[f"full_acc_{k}_total"], abs=1e-6)
    assert metrics["full_acc_0_sum"] / metrics["full_acc_0_total"] > 0.8  # not a trivial agreement


def _absolute_d2t(t: dict) -> None:
    t["d2t"] = t["d2t"] + torch.arange(t["d2t"].shape[0])


def _fc_blocks_rotated(t: dict) -> None:
    a, b, c = t["fc.weight"].chunk(3, dim=1)
    t["fc.weight"] = torch.cat([b, c, a], dim=1).contiguous()


def _config(**fields):
    def edit(cfg: dict) -> None:
        cfg.update(fields)
    return edit


def _layer_config(**fields):
    def edit(cfg: dict) -> None:
        cfg["transformer_layer_config"].update(fields)
        if "rope_theta" in fields:
            cfg["transformer_layer_config"]["rope_parameters"]["rope_theta"] = fields["rope_theta"]
    return edit


# name -> (the drafter, its config stating what it was trained with, the mis-conversion's config and tensor edits,
# the code the gate must name). "trained-rope10k" was trained with rope base 10000 and its config states 1e6 (as
# SpecForge before PR #270 wrote them): the mis-conversion is the saved config itself.
MUTATIONS = {
    "norm-before-residual-flipped": ("trained", None, _config(norm_before_residual=True), None,
                                     "acceptance.trained-with/norm-before-residual"),
    "rope-base-not-the-trained-one": ("trained-rope10k", _layer_config(rope_theta=10000.0), None, None,
                                      "acceptance.trained-with/rope-theta"),
    "aux-blocks-permuted": ("trained", None, None, _fc_blocks_rotated, "acceptance.trained-with/aux-order"),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_each_mis_conversion_lowers_acceptance_and_the_gate_names_it(trained_world, tmp_path, mutation):
    name, as_trained, edit_config, edit_tensors, code = MUTATIONS[mutation]
    right = copy(trained_world, name, tmp_path / "right", as_trained) if as_trained else \
        trained_world / "drafters" / name
    base = figures(trained_world, right).readings[0]
    mutant = copy(trained_world, name, tmp_path, edit_config, edit_tensors)
    got = figures(trained_world, mutant).readings[0]
    assert got.acceptance_length < base.acceptance_length - 0.03 and got.alpha < base.alpha - 0.02, \
        (mutation, got.record(), base.record())
    assert code in codes(gate_world(trained_world, mutant)), mutation


def test_an_absolute_id_d2t_is_a_finding_and_the_trainer_reading_still_runs(trained_world, tmp_path, capsys):
    """d2t written as absolute ids (it equals nonzero(t2d)): speculators trained in the draft space t2d selects and
    never read d2t, so the trainer's reading computes what was trained; vLLM 0.33.0 adds arange to it and indexes
    past the vocabulary (llama_eagle3.py:385-394). accept exits 1 with the finding, not 2 as bad input."""
    mutant = copy(trained_world, "trained", tmp_path, None, _absolute_d2t)
    got = figures(trained_world, mutant, engines=("vllm@0.33.0",))
    base = figures(trained_world, trained_world / "drafters" / "trained")
    assert got.readings[0].record() == base.readings[0].record()
    assert got.absolute_d2t and got.readings[1].problem  # said: the golden file, below
    code = main(["accept", str(mutant), "--data", str(trained_world / "test"), "--target",
                 str(trained_world / "target"), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    errors = {f["code"]: f for f in doc["findings"] if f["severity"] == "error"}
    # accept's findings are the gate's: the acceptance level's checks and the vocabulary checks, run by run_check
    gated = gate_world(trained_world, mutant)
    judged = {f.code for r in gated.results if r.check.level == "acceptance" or r.check.id in ACCEPT_ALSO
              for f in r.findings if f.severity.value == "error"}
    assert code == 1 and set(errors) == judged and "vocab.t2d/absolute-ids" in judged, (set(errors), judged)
    assert errors["vocab.t2d/absolute-ids"]["basis"] == "read"
    # and rendered by the gate's reports: SARIF that check's SARIF test accepts, one exit-status rule in every format
    from test_report_formats import validate_sarif

    for fmt in ("sarif", "github", "markdown"):
        assert main(["accept", str(mutant), "--data", str(trained_world / "test"), "--target",
                     str(trained_world / "target"), "--format", fmt]) == code, fmt
        out = capsys.readouterr().out
        if fmt == "sarif":
            log = json.loads(out)
            validate_sarif(log)
            # what check's SARIF of the same checks says (a finding folded into its root cause in both; the notes
            # differ: check also asks which semantics the weights were trained with, accept only with --resolve)
            same = to_sarif([dataclasses.replace(gated, results=[
                r for r in gated.results if r.check.level == "acceptance" or r.check.id in ACCEPT_ALSO])])
            failing = [[(r["ruleId"], r["level"]) for r in got["runs"][0]["results"] if r["level"] != "note"]
                       for got in (log, same)]
            assert failing[0] == failing[1] and failing[0], failing
        else:
            named = _codes_named(out, fmt)
            assert any(c.startswith("vocab.d2t/") for c in named) and \
                "acceptance.engine-drop/unservable" in named, (fmt, named)
    assert doc["readings"][0]["acceptance_length"] == base.readings[0].acceptance_length
    # the reading that cannot serve it is stated as such, with why, in every format: no figure, no drop, no average
    unservable = doc["readings"][1]
    assert unservable["unservable"] and unservable["verdict"] == "unservable" and unservable["why"]
    assert unservable["acceptance_length"] is None and unservable["drop"] is None, unservable
    main(["accept", str(mutant), "--data", str(trained_world / "test"), "--engine", "vllm@0.33.0"])
    text = capsys.readouterr().out
    # the text report's line for that reading (its label, then what it says in place of figures)
    (shown,) = [line.strip() for line in text.splitlines() if line.startswith("  vllm@0.33.0 ")]
    assert {"vocab.t2d/absolute-ids", "acceptance.engine-drop/unservable"} <= codes(gated)

    results = to_sarif([gated])["runs"][0]["results"]
    said = [r for r in results if r["ruleId"].startswith("acceptance.engine-drop") and r["level"] == "error"]
    assert said, results
    # the wording: what d2t holds, what vLLM then does (cited), in the evaluation, the text report, accept's JSON and
    # the gate's SARIF
    assert_golden("test_trained_world/test_an_absolute_id_d2t_is_a_finding_and_the_trainer_reading_still_runs.txt",
                  _releases("\n".join([got.absolute_d2t, got.readings[1].problem, shown, unservable["why"],
                                        *(r["message"]["text"] for r in said)])), {"TMP": tmp_path})
    # the offsets restored: nothing left to report
    fixed = copy(trained_world, "trained", tmp_path / "offsets")
    assert main(["accept", str(fixed), "--data", str(trained_world / "test")]) == 0


def test_a_lost_head_dim_is_named_and_no_reading_computes_what_was_trained(trained_world, tmp_path, capsys):
    """head_dim 32 with 4 heads of a hidden size of 64: without it the reader derives 16. speculators' loader then
    fails on q_proj, and vLLM 0.33.0 cuts the projections to the size it builds (engine.loads/narrowed)."""
    def edit(cfg: dict) -> None:
        del cfg["transformer_layer_config"]["head_dim"]

    mutant = copy(trained_world, "trained", tmp_path, edit)
    assert {"config.head-dim/missing", "engine.loads/narrowed"} <= codes(gate_world(trained_world, mutant))
    code = main(["accept", str(mutant), "--data", str(trained_world / "test")])
    err = capsys.readouterr().err
    assert code == 2
    # the wording: no reading computes it (the trainer's loader fails on each projection)
    assert_golden("test_trained_world/test_a_lost_head_dim_is_named_and_no_reading_computes_what_was_trained.txt",
                  _releases(err), {"TMP": tmp_path, "WORLD": trained_world})


def test_an_engine_default_that_loses_acceptance_fails_and_fix_restores_it(trained_world, tmp_path, capsys):
    """The trained drafter's config without norm_before_residual (as an exporter that leaves speculators' defaults
    out writes it): speculators reads it as False, as trained; vLLM 0.33.0 defaults it to True for a speculators
    config. The gate fails vLLM's reading on the data; following its fix restores the trained acceptance (the
    README's before and after)."""
    def edit(cfg: dict) -> None:
        del cfg["norm_before_residual"]

    drafter = copy(trained_world, "trained", tmp_path, edit)
    before = gate_world(trained_world, drafter)
    assert "acceptance.engine-drop/drop" in codes(before)
    drop = next(f for f in before.findings() if f.code == "acceptance.engine-drop/drop")
    assert drop.cause == "config.json: norm_before_residual" and drop.basis == "measured"
    served = figures(trained_world, drafter, engines=(f"vllm@{VLLM}",)).readings
    assert served[1].acceptance_length < 0.7 * served[0].acceptance_length, [f.record() for f in served]
    fixed = tmp_path / "fixed"
    capsys.readouterr()
    assert main(["fix", str(drafter), str(fixed), "--data", str(trained_world / "test"),
                 "--target", str(trained_world / "target")]) == 0, capsys.readouterr()
    after = gate_world(trained_world, fixed)
    assert not codes(after), codes(after)
    result = figures(trained_world, fixed, engines=(f"vllm@{VLLM}",))
    assert result.readings[1].acceptance_length == pytest.approx(served[0].acceptance_length, abs=1e-9)


def _answers(world: Path, name: str, target: bool = True, drafter: Path | None = None,
             target_dir: str = "target", data: str = "test") -> dict:
    ckpt = open_checkpoint(drafter or world / "drafters" / name)
    named = readings(ckpt, [])
    expect = expect_of(named[0][1])
    head = load_head(world / target_dir, expect.hidden, expect.vocab) if target else None
    _, found = measure(ckpt, named, lambda: samples(world / data, expect), K, target=head)
    return {a.question: a for a in found}


def _key(value):
    return tuple(value) if isinstance(value, (list, tuple)) else value


# The one-change mutants of the drafters trained against target-broad (its final norm scaled by 1/4: broad next-token
# distributions, so that alpha barely moves where the acceptance length does), on the states of their aux ids:
# mutant -> (drafter, tensor edit, config edit, the question it changes, the value the weights were trained with).
# "none": the drafter as trained.
ONE_CHANGE = {
    "none": ("broad", None, None, None, None),
    "aux-order": ("broad", _fc_blocks_rotated, None, "aux_order", (1, 2, 0)),
    "norm-before-residual": ("broad", None, _config(norm_before_residual=True), "norm_before_residual", False),
    "rope-base": ("broad-rope10k", None, None, "rope_theta", 10000.0),
    "feedback": ("broad", None, _config(norm_output=True), "feedback", "prenorm"),
}


@pytest.mark.parametrize("target", [True, False], ids=["target", "tokens"])
@pytest.mark.parametrize("mutant", list(ONE_CHANGE))
def test_each_one_change_mutant_is_decided_right_and_no_question_against_the_trained_value(trained_world, tmp_path,
                                                                                            mutant, target):
    """With --target (alpha and the acceptance length) and without (the acceptance length): the changed question
    is contradicted, with the value the weights were trained with, by a gain whose 95% interval over the sequences
    excludes zero; no other question is decided against what the weights were trained with (the rope-base mutant's
    config is its saved one: trained with 10000, stating 1e6)."""
    name, tensors, config, question, truth = ONE_CHANGE[mutant]
    drafter = copy(trained_world, name, tmp_path, config, tensors) if tensors or config else None
    got = _answers(trained_world, name, target, drafter, "target-broad", "test-broad")
    for q, a in got.items():
        if q == question:
            assert a.verdict == CONTRADICTED and _key(a.best) == truth, (q, a.describe())
            t = a.decided_by
            assert t is not None and t.gain.lo > 0 and t.gain.value >= DECIDE_GAIN, a.describe()
            assert t.figure in (AL, ALPHA) if target else t.figure == AL
        else:
            assert a.verdict != CONTRADICTED, (q, a.describe())


def test_the_resolver_names_what_each_drafter_was_trained_with(trained_world):
    plain, nbr, rope = (_answers(trained_world, n) for n in ("trained", "trained-nbr", "trained-rope10k"))
    assert plain["rope_theta"].verdict == CONFIRMED and plain["norm_before_residual"].verdict == CONFIRMED
    assert nbr["norm_before_residual"].verdict == CONFIRMED and nbr["norm_before_residual"].stated is True
    assert rope["rope_theta"].verdict == CONTRADICTED and rope["rope_theta"].best == 10000.0
    for answers_ in (plain, rope):
        assert answers_["aux_order"].verdict == CONFIRMED and answers_["feedback"].verdict == CONFIRMED


def test_with_token_labels_the_resolver_decides_the_norm_and_never_confirms_a_wrong_rope_base(trained_world):
    """The recorded tokens alone give acceptance lengths, a coarser measure than alpha: the flipped norm still costs
    over 0.6 of a token per round, the rope base under 0.04, and for the drafter trained with 10000 less than the
    margin, so it is undecided there (the note says --target measures alpha), never confirmed."""
    plain, nbr, rope = (_answers(trained_world, n, target=False) for n in ("trained", "trained-nbr",
                                                                          "trained-rope10k"))
    assert plain["norm_before_residual"].verdict == nbr["norm_before_residual"].verdict == CONFIRMED
    assert rope["norm_before_residual"].verdict == CONFIRMED
    assert rope["rope_theta"].verdict in (CONTRADICTED, UNDECIDED) and rope["rope_theta"].best == 10000.0
    if rope["rope_theta"].verdict == UNDECIDED:
        assert "--target" in rope["rope_theta"].settle


def test_the_resolver_is_undecided_on_an_untrained_drafter(trained_world):
    """Its figures are at chance under every candidate: undecided, and the reason says so (the resolver blames an
    untrained drafter only then)."""
    got = _answers(trained_world, "untrained")
    assert {q: a.verdict for q, a in got.items()} == {q: UNDECIDED for q in got}
    assert set(got) == {"rope_theta", "norm_before_residual", "feedback", "aux_order"}
    # the wording of why: at chance, under every candidate
    assert_golden("test_trained_world/test_the_resolver_is_undecided_on_an_untrained_drafter.txt",
                  "\n".join(f"{q}: {got[q].why}" for q in sorted(got)))
    for q, a in _answers(trained_world, "trained", target=False).items():  # a trained drafter is never blamed
        assert "at chance" not in a.why, (q, a.why)


def test_fix_applies_the_rope_base_the_weights_were_trained_with(trained_world, tmp_path, capsys):
    drafter = trained_world / "drafters" / "trained-rope10k"
    before = gate_world(trained_world, drafter)
    assert "acceptance.trained-with/rope-theta" in codes(before)
    finding = next(f for f in before.findings() if f.code == "acceptance.trained-with/rope-theta")
    assert finding.patch and all(op["value"] == 10000.0 for op in finding.patch)
    assert finding.basis == "measured"
    assert (finding.key, finding.expected, finding.found) == ("rope_theta", "rope_theta 10000", "rope_theta 1e+06")
    # what the data did not decide carries no patch: a note resting on the config, with what would settle it
    for f in before.findings():
        if f.code == "acceptance.trained-with/undecided":
            assert f.patch is None and f.basis == "assumed" and f.settle, f
    fixed = tmp_path / "fixed"
    assert main(["fix", str(drafter), str(fixed), "--data", str(trained_world / "test"),
                 "--target", str(trained_world / "target")]) == 0
    assert not codes(gate_world(trained_world, fixed))
    source = json.loads((drafter / "config.json").read_text())
    assert source["transformer_layer_config"]["rope_theta"] == 1e6
    written = json.loads((fixed / "config.json").read_text())
    # fix --data wrote the decided value, and nothing else of the drafter's config changed
    assert written["transformer_layer_config"]["rope_theta"] == 10000.0
    assert written["transformer_layer_config"]["rope_parameters"]["rope_theta"] == 10000.0
    for key in set(source) | set(written):
        if key != "transformer_layer_config":
            assert source.get(key) == written.get(key) or key == "eagle3_checks_provenance", key
    rest = {k: v for k, v in written["transformer_layer_config"].items() if k not in ("rope_theta", "rope_parameters")}
    assert rest == {k: v for k, v in source["transformer_layer_config"].items()
                    if k not in ("rope_theta", "rope_parameters")}


def test_fix_writes_nothing_the_data_did_not_decide(trained_world, tmp_path):
    """The untrained drafter: every question undecided (at chance), so no acceptance finding carries a patch and fix
    --data writes no edit from the acceptance level."""
    from eagle3_checks.fix import plan_fixes
    from eagle3_checks.gate import parse_options

    drafter = trained_world / "drafters" / "untrained"
    options = parse_options(reference="none", data=str(trained_world / "test"), target=str(trained_world / "target"))
    _, done = plan_fixes(open_checkpoint(drafter), options)
    assert not [e for e in done.edits if e.check.startswith("acceptance.")], done.edits
    assert "acceptance.figures/accepts-nothing" in {f.code for f in done.left}


def _speculators_model(world: Path, name: str):
    """speculators' own Eagle3DraftModel of a saved drafter, its verifier norm and lm_head from the target (what
    load_verifier_weights fetches from the Hub)."""
    from speculators.models.eagle3 import Eagle3SpeculatorConfig
    from speculators.models.eagle3.core import Eagle3DraftModel

    config = Eagle3SpeculatorConfig.from_pretrained(str(world / "drafters" / name))
    config.transformer_layer_config._attn_implementation = "eager"
    model = Eagle3DraftModel(config).eval()
    model.load_state_dict(safetensors_torch.load_file(str(world / "drafters" / name / "model.safetensors")),
                          strict=False)
    target = safetensors_torch.load_file(str(world / "target" / "model.safetensors"))
    with torch.no_grad():
        model.verifier_norm.weight.copy_(target["model.norm.weight"])
        model.verifier_lm_head.weight.copy_(target["lm_head.weight"][model.t2d])
    return model


def test_speculators_loss_masks_count_as_its_metrics_count_them(trained_world, tmp_path, capsys, monkeypatch):
    """The prepared-data folder speculators trains from, written by the datasets save_to_disk its prepare_data
    calls (cli/prepare_data.py:243): the prompt's 8 tokens masked out, as regenerate_responses builds rows
    (cli/regenerate_responses.py:323-329). accept --loss-mask counts only masked-in positions, and each step's
    figures equal speculators' forward with that loss_mask."""
    pytest.importorskip("speculators")
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from speculators.losses.eager import kl_div_loss

    from eagle3_checks.acceptance import LossMasks

    files = sorted((trained_world / "test").glob("hs_*.safetensors"), key=lambda p: int(p.stem[3:]))
    rows = [safetensors_torch.load_file(str(p)) for p in files]
    ids = [r["token_ids"].tolist() for r in rows]
    masks = [[0] * 8 + [1] * (len(i) - 8) for i in ids]
    folder = tmp_path / "prepared"
    datasets.Dataset.from_dict({"input_ids": ids, "loss_mask": masks}).save_to_disk(str(folder))
    code = main(["accept", str(trained_world / "drafters" / "trained"), "--data", str(trained_world / "test"),
                 "--target", str(trained_world / "target"), "--loss-mask", str(folder), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    masked = json.loads(out)["readings"][0]
    assert masked["positions"] == 16 * (48 - K - 7)  # step 0 of row j counts where mask[j+1]: rows 7..44
    model = _speculators_model(trained_world, "trained")
    ckpt = open_checkpoint(trained_world / "drafters" / "trained")
    named = readings(ckpt, [])
    expect = expect_of(named[0][1])
    head = load_head(trained_world / "target", expect.hidden, expect.vocab)
    for k in range(K):
        total: dict[str, float] = {}
        for r, m in zip(rows, masks, strict=True):
            hs, x = r["hidden_states"], r["token_ids"]
            t = x.shape[0]
            with torch.no_grad():  # shift_batch (models/eagle3/data.py), then the forward with the loss mask
                _, _, metrics = model(hidden_states=hs[:-1, :-1].flatten(1)[None], input_ids=x[1:][None],
                                      document_ids=torch.zeros(1, t - 1, dtype=torch.long),
                                      loss_mask=torch.tensor(m[1:], dtype=torch.bool)[None],
                                      position_ids=torch.arange(1, t)[None],
                                      verifier_last_hidden_states=hs[1:, -1][None], ttt_steps=k + 1,
                                      loss_config={"kl_div": (kl_div_loss, 1.0)})
            for name, v in metrics.items():
                total[name] = total.get(name, 0.0) + float(v)
        ours = evaluate(ckpt, named, samples(trained_world / "test", expect, LossMasks(folder)), k + 1,
                        target=head).readings[0]
        assert ours.cond_counted[k] == total[f"cond_acc_{k}_total"]
        assert ours.conditional_accuracy[k] == pytest.approx(total[f"cond_acc_{k}_sum"] / total[f"cond_acc_{k}_total"],
                                                             abs=1e-6)


def test_a_loss_mask_folder_that_does_not_fit_is_refused(trained_world, tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "other"
    datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]] * 16, "loss_mask": [[1, 1, 1]] * 16}).save_to_disk(
        str(folder))
    code = main(["accept", str(trained_world / "drafters" / "trained"), "--data", str(trained_world / "test"),
                 "--loss-mask", str(folder)])
    err = capsys.readouterr().err
    assert code == 2
    code = main(["accept", str(trained_world / "drafters" / "trained"), "--data", str(trained_world / "test"),
                 "--loss-mask", str(tmp_path)])
    err2 = capsys.readouterr().err
    assert code == 2
    # the wording of the tool's two errors (datasets' own progress bars apart)
    said = [line for line in (err + err2).splitlines() if line.startswith("eagle3-checks: ")]
    assert_golden("test_trained_world/test_a_loss_mask_folder_that_does_not_fit_is_refused.txt", "\n".join(said),
                  {"TMP": tmp_path, "WORLD": trained_world})


def test_accept_resolve_reports_what_the_weights_were_trained_with(trained_world, capsys):
    base = ["--data", str(trained_world / "test"), "--target", str(trained_world / "target"), "--resolve",
            "--format", "json"]
    code = main(["accept", str(trained_world / "drafters" / "trained-rope10k"), *base])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and [r["reading"] for r in doc["readings"]] == ["trainer", f"vllm@{VLLM}"]
    verdicts = {a["question"]: a for a in doc["trained_with"]}
    assert verdicts["rope_theta"]["verdict"] == "contradicted" and verdicts["rope_theta"]["best"] == 10000.0
    assert verdicts["norm_before_residual"]["verdict"] == "confirmed"
    assert main(["accept", str(trained_world / "drafters" / "trained"), *base]) == 0
    verdicts = {a["question"]: a["verdict"] for a in json.loads(capsys.readouterr().out)["trained_with"]}
    assert verdicts == dict.fromkeys(("rope_theta", "norm_before_residual", "feedback", "aux_order"), "confirmed")
    code = main(["accept", str(trained_world / "drafters" / "trained"), *base[:-2]])  # text
    out = capsys.readouterr().out
    assert code == 0
    # the text report's wording of each answer, the figures that decided it (which vary with the machine) left out
    said = [line.split(" (", 1)[0] for line in out.splitlines() if line.startswith("trained with: ")]
    assert_golden("test_trained_world/test_accept_resolve_reports_what_the_weights_were_trained_with.txt",
                  "\n".join(said))


def test_a_lost_head_dim_served_as_vllm_cuts_it_accepts_almost_nothing(trained_world, tmp_path):
    """What vLLM 0.33.0 serves from the drafter without head_dim: q/k/v/o cut to the 16-wide heads it builds
    (model_executor/layers/linear.py narrows without a size check), measured against the drafter read as trained."""
    from eagle3_checks import engines

    def edit(cfg: dict) -> None:
        del cfg["transformer_layer_config"]["head_dim"]

    mutant = copy(trained_world, "trained", tmp_path, edit)
    ckpt = open_checkpoint(mutant)
    served = engines.read(ckpt, f"vllm@{VLLM}")
    assert served.narrowed and served.computable and not served.servable
    expect = expect_of(served)
    head = load_head(trained_world / "target", expect.hidden, expect.vocab)
    base = figures(trained_world, trained_world / "drafters" / "trained").readings[0]
    # the trained drafter's own reading first (the base evaluate holds the others to), then vLLM's of the mutant
    got = evaluate(ckpt, [("trainer", engines.trainer(open_checkpoint(trained_world / "drafters" / "trained"))),
                          (f"vllm@{VLLM}", served)], samples(trained_world / "test", expect), K, target=head)
    cut = got.readings[1]
    assert cut.problem is None and len(cut.causes) == 1 + len(served.narrowed)  # head_dim, then each tensor cut
    assert set(served.narrowed) == {f"layers.0.self_attn.{p}_proj.weight" for p in "qkvo"}
    # the wording: head_dim as each side reads it, then each projection vLLM's loader cuts, and to what
    assert_golden("test_trained_world/test_a_lost_head_dim_served_as_vllm_cuts_it_accepts_almost_nothing.txt",
                  "\n".join(cut.causes))
    assert cut.acceptance_length < base.acceptance_length - 1.0, (cut.record(), base.record())


# ----- figures with their uncertainty -----------------------------------------------------------------------------

DRAWS = 2000


def test_the_intervals_cover_the_figures_of_a_larger_held_out_run(trained_world):
    """peers/train_world.py records 128 held-out sequences beside the 16 test ones. Each of 2,000 seeded draws of 16 of
    them gives every figure an interval (95%, over the sequences); at least 90% of them cover the figure of the
    whole held-out run, for each figure (nominal 95%: at 16 sequences the token-label intervals cover 91-93% of the
    2,000 draws, the target-label ones 95%)."""
    import random

    ckpt = open_checkpoint(trained_world / "drafters" / "trained")
    named = readings(ckpt, [])
    expect = expect_of(named[0][1])
    checked = {True: [("acceptance_length", 0), ("per_position", 0), ("per_position", 2),
                      ("per_start_acceptance_length", 0), ("alpha", 0), ("step_accuracy", 0), ("step_accuracy", 2),
                      ("conditional_accuracy", 1)],
               False: [("acceptance_length", 0), ("per_start_acceptance_length", 0), ("step_accuracy", 0)]}
    for target, figures_ in checked.items():
        head = load_head(trained_world / "target", expect.hidden, expect.vocab) if target else None
        whole = evaluate(ckpt, named, samples(trained_world / "heldout", expect), K, target=head).readings[0]
        assert len(whole.sequences) == 128
        covered = dict.fromkeys(figures_, 0)
        for seed in range(DRAWS):
            drawn = Figures("trainer", K)
            drawn.sequences = random.Random(seed).sample(whole.sequences, 16)
            for figure, k in figures_:
                interval = drawn.interval(figure, k)
                truth = getattr(whole, figure)
                truth = truth[k] if isinstance(truth, list) else truth
                covered[(figure, k)] += interval.lo <= truth <= interval.hi
        assert all(n >= 0.9 * DRAWS for n in covered.values()), (target, covered)


# ----- record: states for a drafter without training dumps -----------------------------------------------------------

def test_record_then_accept_reproduces_the_trainers_own_recorded_data(trained_world, tmp_path, capsys):
    """record on the world's target, prompted with the first 8 tokens of each test sequence: its greedy continuation
    is the one the trainer recorded (the sequences the target does not end early with its eos id 2), its states are
    the same floats, and accept gives the same figures; with the loss mask record writes (the prompt masked out) only
    the continuation counts. speculators' own ArrowDataset reads the folder as it trains from it, and its
    check_hidden_states accepts every sample."""
    pytest.importorskip("speculators")
    files = sorted((trained_world / "test").glob("hs_*.safetensors"), key=lambda p: int(p.stem[3:]))
    rows = [safetensors_torch.load_file(str(p)) for p in files]
    kept = [r for r in rows if 2 not in r["token_ids"][8:].tolist()]  # generation stops at eos (id 2)
    assert len(kept) >= 8
    reference = tmp_path / "reference"
    reference.mkdir()
    for i, r in enumerate(kept):
        safetensors_torch.save_file(r, str(reference / f"hs_{i}.safetensors"))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": r["token_ids"][:8].tolist()}) + "\n" for r in kept))
    out = tmp_path / "recorded"
    assert main(["record", str(trained_world / "target"), "--prompts", str(prompts), "--out", str(out),
                 "--drafter", str(trained_world / "drafters" / "trained"), "--max-new-tokens", "40"]) == 0
    for i, r in enumerate(kept):
        got = safetensors_torch.load_file(str(out / "hidden_states" / f"hs_{i}.safetensors"))
        assert torch.equal(got["token_ids"], r["token_ids"]) and torch.equal(got["hidden_states"], r["hidden_states"])
    capsys.readouterr()
    base = ["--target", str(trained_world / "target"), "--format", "json"]
    drafter = str(trained_world / "drafters" / "trained")
    assert main(["accept", drafter, "--data", str(reference), *base]) == 0
    theirs = json.loads(capsys.readouterr().out)["readings"]
    assert main(["accept", drafter, "--data", str(out), *base]) == 0
    ours = json.loads(capsys.readouterr().out)["readings"]
    assert ours == theirs
    assert main(["accept", drafter, "--data", str(out), "--loss-mask", str(out), *base]) == 0
    masked = json.loads(capsys.readouterr().out)["readings"][0]
    assert masked["positions"] == len(kept) * (48 - K - 7)  # step 0 of row j counts where mask[j+1]: rows 7..44

    from speculators.data_generation.offline import check_hidden_states
    from speculators.train.data import ArrowDataset

    dataset = ArrowDataset(max_len=64, datapath=str(out), on_missing="raise")
    assert len(dataset) == len(kept)
    for i, r in enumerate(kept):
        item = dataset._get_raw_data(i)
        assert torch.equal(item["input_ids"], r["token_ids"])
        assert item["loss_mask"].tolist() == [0] * 8 + [1] * 40
        check_hidden_states(safetensors_torch.load_file(str(out / "hidden_states" / f"hs_{i}.safetensors")),
                            r["token_ids"].tolist())


# ----- sliding windows ---------------------------------------------------------------------------------------------

def test_a_window_served_without_is_measured_and_unmeasured_on_short_sequences(trained_world, tmp_path, capsys):
    """"trained-window" was trained by speculators with a sliding window of 8 tokens. Converted for SGLang 0.5.23,
    which ignores layer_types: served without --speculative-draft-window-size it attends to the whole context, and on
    the 48-token test sequences the acceptance level measures what that costs (a drop whose interval excludes zero);
    launched with the window the recipe writes (7: N + 1 keys) it computes as trained; on sequences of at most 8
    tokens the data cannot tell, and accept says so."""
    flat = tmp_path / "flat"
    assert main(["convert", str(trained_world / "drafters" / "trained-window"), str(flat), "--to", "sglang",
                 "--verify", "header"]) == 0
    capsys.readouterr()
    base = ["--data", str(trained_world / "test"), "--target", str(trained_world / "target"), "--engine",
            f"sglang@{SGLANG}", "--format", "json"]
    main(["accept", str(flat), *base])
    doc = json.loads(capsys.readouterr().out)
    served = doc["readings"][1]
    assert served["reading"] == f"sglang@{SGLANG}" and served["drop_interval"][0] > 0, served
    launch = tmp_path / "launch.json"
    launch.write_text(json.dumps({"args": {"speculative-draft-window-size": 7}}))
    assert main(["accept", str(flat), *base, "--launch", f"sglang={launch}"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert abs(doc["readings"][1]["drop"]) < 0.005, doc["readings"][1]
    short = tmp_path / "short"
    short.mkdir()
    for p in sorted((trained_world / "test").glob("hs_*.safetensors")):
        r = safetensors_torch.load_file(str(p))
        safetensors_torch.save_file({k: v[:8].contiguous() for k, v in r.items()}, str(short / p.name))
    main(["accept", str(flat), "--data", str(short), "--target", str(trained_world / "target"), "--engine",
          f"sglang@{SGLANG}", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    notes = {f["code"]: f for f in doc["findings"]}
    assert "acceptance.engine-drop/window-unmeasured" in notes
    unmeasured = notes["acceptance.engine-drop/window-unmeasured"]
    assert (unmeasured["severity"], unmeasured["basis"]) == ("info", "inferred")
    # the wording: why the data cannot tell, and what would settle it (sequences longer than the window)
    assert_golden("test_trained_world/test_a_window_served_without_is_measured_and_unmeasured_on_short_sequences.txt",
                  unmeasured["message"].replace(f"sglang@{SGLANG}", "sglang@<SGLANG>") + "\n" + unmeasured["settle"])
    assert doc["readings"][1]["drop"] == 0.0
    assert {"engine.semantics/sliding-window"} <= codes(run(flat, engine=(f"sglang@{SGLANG}",)))


def test_fix_reorders_fc_blocks_the_data_decides_and_keeps_it_only_when_measured_again(trained_world, tmp_path,
                                                                                        capsys, monkeypatch):
    """fc's three input blocks rotated (the broad drafter, whose aux states lie far enough apart that the order
    decides): the data says which order the weights were trained for (acceptance.trained-with/aux-order), and fix
    --data rewrites fc.weight in that order (a byte-level permutation of each row's blocks), measures again and
    keeps it: fc.weight is the trained one byte for byte, every other tensor untouched, nothing contradicted."""
    mutant = copy(trained_world, "broad", tmp_path, None, _fc_blocks_rotated)
    data, target = str(trained_world / "test-broad"), str(trained_world / "target-broad")
    fixed = tmp_path / "fixed"
    code = main(["fix", str(mutant), str(fixed), "--data", data, "--target", target, "--engine", "vllm"])
    out = capsys.readouterr().out
    assert code == 0, out
    repaired = out.split("\n\n", 1)[0]  # what fix did, before the gate's report of what it wrote
    original = safetensors_torch.load_file(str(trained_world / "drafters" / "broad" / "model.safetensors"))
    got = safetensors_torch.load_file(str(fixed / "model.safetensors"))
    assert set(got) == set(original) and all(torch.equal(got[k], original[k]) for k in original)
    again = run(fixed, data=data, target=target, engine="vllm")
    assert "acceptance.trained-with/aux-order" not in codes(again) and again.exit_code == 0
    # a repair the data does not confirm when measured again is not kept (here: one that changes nothing)
    import eagle3_checks.fix as fixing

    def unchanged(order):
        def repair(source, name):
            from eagle3_checks.storage.safetensors import RawTensor, read_bytes

            e = source.entry(name)
            return RawTensor(e.dtype, e.shape, read_bytes(e))
        return repair

    monkeypatch.setattr(fixing, "_fc_order", unchanged)
    capsys.readouterr()
    main(["fix", str(mutant), str(tmp_path / "not-kept"), "--data", data, "--target", target, "--engine", "vllm"])
    out = capsys.readouterr().out
    # the wording of what fix did, each time: the repair written (the order the data decided), then the one not kept
    assert_golden("test_trained_world/test_fix_reorders_fc_blocks_the_data_decides_and_keeps_it_only_when_measured_again"
                  ".txt", repaired + "\n\n" + out.split("\n\n", 1)[0], {"TMP": tmp_path})
    assert not (tmp_path / "not-kept").exists()
