"""eagle3-checks accept: recorded target states in the three producers' formats, each reading's acceptance.

A tiny random target (a transformers LlamaForCausalLM: hidden 64, 4 layers, vocabulary 512) records its states for a
few token sequences, written as each producer writes them (safetensors for speculators, with hs-connectors' own FP8
quantiser for its FP8 variant; torch.save for SpecForge and TensorRT-LLM). The sequences are half the drafter's own
greedy step-0 choice and half random, so the figures are neither 0 nor 1. The drafter is the embedded example's shape
with the target's depth.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from eagle3_checks import engines  # noqa: E402
from eagle3_checks.acceptance import (  # noqa: E402
    DataError,
    evaluate,
    expect_of,
    readings,
    samples,
)
from eagle3_checks.acceptance.evaluate import sample_inputs  # noqa: E402
from eagle3_checks.cli import main  # noqa: E402
from eagle3_checks.drafter.checkpoint import open_checkpoint  # noqa: E402
from eagle3_checks.drafter.example import DrafterShape, write_drafter  # noqa: E402
from eagle3_checks.numerics.draft_steps import Inputs, Weights, run  # noqa: E402
from helpers import SGLANG, VLLM, assert_golden  # noqa: E402

HIDDEN, LAYERS, VOCAB = 64, 4, 512
AUX = (1, 2, 3)  # vLLM's convention: id L is the residual stream entering layer L, HF hidden_states[L]
SHAPE = DrafterShape(aux_layer_ids=AUX, target_layers=LAYERS)
LENGTHS = (18, 22, 15)
K = 3


def _target():
    cfg = transformers.LlamaConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, vocab_size=VOCAB,
                                   num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                                   max_position_embeddings=256)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def _states(model, ids):
    """(aux [T, 3H], last before the final norm [T, H], last after it [T, H]) of the target on ``ids``."""
    captured = {}
    hook = model.model.layers[-1].register_forward_hook(lambda m, a, out: captured.update(
        pre=out[0] if isinstance(out, tuple) else out))
    try:
        with torch.no_grad():
            out = model(ids[None], output_hidden_states=True)
    finally:
        hook.remove()
    hs = out.hidden_states
    aux = torch.cat([hs[i][0] for i in AUX], dim=-1)
    return aux, captured["pre"][0], hs[-1][0]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("accept")
    drafter = write_drafter(root / "drafter", SHAPE)
    ckpt = open_checkpoint(drafter)
    trained = engines.trainer(ckpt)
    weights = Weights(ckpt, "cpu")
    model = _target()
    g = torch.Generator().manual_seed(1)
    records, wide = [], []  # the states in bf16 (as targets record them), and in float32
    for n in LENGTHS:
        ids = torch.randint(0, VOCAB, (2,), generator=g)
        while ids.shape[0] < n:  # half the drafter's own step-0 choice, half random
            aux, _, _ = _states(model, ids)
            j = ids.shape[0] - 2
            inp = Inputs(aux_hidden_states=aux[:j + 1], input_ids=ids[1:j + 2], position_ids=torch.arange(j + 1) + 1)
            choice = int(run(trained, weights, inp, 1)[0][-1].argmax())
            nxt = choice if torch.rand(1, generator=g) < 0.5 else int(torch.randint(0, VOCAB, (1,), generator=g))
            ids = torch.cat([ids, torch.tensor([nxt])])
        aux, pre, post = _states(model, ids)
        records.append((ids, aux.bfloat16(), pre.bfloat16(), post.bfloat16()))
        wide.append((ids, aux, pre, post))
    model.save_pretrained(root / "target")  # safetensors: its final norm and lm_head are what --target reads
    return {"root": root, "drafter": drafter, "ckpt": ckpt, "records": records, "wide": wide, "model": model}


def write_speculators(folder: Path, records, fp8: bool = False) -> Path:
    folder.mkdir(parents=True)
    for i, (ids, aux, pre, _) in enumerate(records):
        hs = torch.cat([aux.reshape(ids.shape[0], len(AUX), HIDDEN), pre[:, None]], dim=1)
        tensors = {"hidden_states": hs.contiguous(), "token_ids": ids.to(torch.int64)}
        if fp8:  # hs-connectors' own quantiser, as its FP8 connector writes
            from hs_connectors.fp8_utils import SCALES_KEY, quantize_tensor_to_fp8

            tensors["hidden_states"], tensors[SCALES_KEY] = quantize_tensor_to_fp8(hs)
        safetensors_torch.save_file(tensors, str(folder / f"hs_{i}.safetensors"))
    return folder


def write_specforge(folder: Path, records, gz: tuple[int, ...] = (1,)) -> Path:
    rows = folder / "rows_0-2000"
    rows.mkdir(parents=True)
    for i, (ids, aux, _, post) in enumerate(records):
        data = {"input_ids": ids, "loss_mask": torch.ones_like(ids), "hidden_state": post[None].clone(),
                "aux_hidden_state": aux[None].clone()}
        if i in gz:
            buf = io.BytesIO()
            torch.save(data, buf)
            (rows / f"data_{i}.ckpt.gz").write_bytes(gzip.compress(buf.getvalue(), compresslevel=6))
        else:
            torch.save(data, rows / f"data_{i}.ckpt")
    return folder


def write_trtllm(folder: Path, records, key: str = "aux_hidden_states") -> Path:
    folder.mkdir(parents=True)
    items = [{"id": i + 1, "input_ids": ids, "hidden_state": post.clone(), key: aux.clone()}
             for i, (ids, aux, _, post) in enumerate(records)]
    torch.save(items[:2], folder / "data_2.pt")
    torch.save(items[2:], folder / "data_3.pt")
    return folder


def accept(ckpt_dir: Path, data: Path, *extra: str, capsys=None) -> tuple[int, str, str]:
    code = main(["accept", str(ckpt_dir), "--data", str(data), *extra])
    out = capsys.readouterr() if capsys else None
    return code, out.out if out else "", out.err if out else ""


# a figure a report states (an acceptance length, a rate, a share, a count of steps or positions): not a version
# (0.34.0, vllm@0.34.0), a cited line (llama_eagle3.py:385-394, 757-758), a pull request (#534) nor part of a name
FIGURE = re.compile(r"(?<![\w@.:#-])[+-]?\d+(?:\.\d+)?(?![\w.-])")


def _wording(text: str) -> str:
    """A report's wording for its golden file: each figure written N (they rest on float arithmetic, which the tests
    hold by range and by hand, not to the digit), the newest releases as <VLLM> and <SGLANG> (what a bare --engine
    judges)."""
    text = text.replace(f"vllm@{VLLM}", "vllm@<VLLM>").replace(f"vLLM {VLLM}", "vLLM <VLLM>")
    text = text.replace(f"sglang@{SGLANG}", "sglang@<SGLANG>").replace(f"SGLang {SGLANG}", "SGLang <SGLANG>")
    return FIGURE.sub("N", text)


def _golden(request) -> str:
    """This test's golden file (a parametrized case's: NAME-PARAM)."""
    return "test_acceptance/" + request.node.name.replace("[", "-").rstrip("]") + ".txt"


def figures(world, folder: Path, specs=("vllm@0.33.0",), steps: int = K, ckpt=None):
    ckpt = ckpt or world["ckpt"]
    named = readings(ckpt, list(specs))
    return evaluate(ckpt, named, samples(folder, expect_of(named[0][1])), steps)


# ----- the formats --------------------------------------------------------------------------------------------

def test_three_formats_give_the_same_figures(world, capsys):
    recs = world["records"]
    root = world["root"] / "formats"
    folders = [write_speculators(root / "spec", recs), write_specforge(root / "sf", recs),
               write_trtllm(root / "trt", recs), write_trtllm(root / "trt2", recs, "hidden_state_features")]
    outs = []
    for folder in folders:
        code, out, _ = accept(world["drafter"], folder, "--format", "json", capsys=capsys)
        assert code == 0, out
        outs.append(json.loads(out))
    # the figures alike; the findings alike but for the data folder they name (file)
    assert all({k: v for k, v in o.items() if k != "findings"} == {k: v for k, v in outs[0].items() if k != "findings"}
               for o in outs)
    assert all([{k: v for k, v in f.items() if k != "file"} for f in o["findings"]]
               == [{k: v for k, v in f.items() if k != "file"} for f in outs[0]["findings"]] for o in outs)
    doc = outs[0]
    assert doc["labels"] == "tokens"
    assert [r["reading"] for r in doc["readings"]] == ["trainer", f"vllm@{VLLM}"]
    r = doc["readings"][0]
    required = {"reading", "steps", "positions", "acceptance_length", "step_accuracy", "conditional_accuracy", "alpha"}
    assert required <= set(r)  # the required interface, and beside it the intervals and the servers' metrics
    assert set(r) - required == {"sequences", "intervals", "coverage", "coverage_interval", "served_metrics",
                                 "verify_steps", "per_position", "per_start_acceptance_length"}
    assert r["sequences"] == len(LENGTHS)
    lo, hi = r["intervals"]["acceptance_length"]
    assert lo <= r["acceptance_length"] <= hi and hi - lo > 0
    assert len(r["intervals"]["step_accuracy"]) == K and r["intervals"]["alpha"] is None
    served = r["served_metrics"]
    assert served["acceptance_length"] == r["acceptance_length"] == 1 + served["accepted"] / served["verify_steps"]
    vllm = doc["readings"][1]["served_metrics"]
    assert vllm["as_named"]["metrics"]["vllm:spec_decode_num_drafts"] == vllm["verify_steps"] > 0
    assert "as_named" not in served  # the trainer's reading is served by no engine in particular
    assert r["acceptance_length"] <= r["per_start_acceptance_length"]
    assert r["steps"] == K and len(r["step_accuracy"]) == K and len(r["conditional_accuracy"]) == K
    assert r["alpha"] is None
    assert r["positions"] == sum(n - K - 1 for n in LENGTHS)
    assert 1.2 < r["acceptance_length"] < 4.0 and 0.3 < r["step_accuracy"][0] < 0.9


def test_fp8_variant_dequantised_as_hs_connectors(world, capsys):
    pytest.importorskip("hs_connectors")
    from hs_connectors.fp8_utils import dequantize_fp8_tensor, quantize_tensor_to_fp8

    root = world["root"] / "fp8"
    fp8 = write_speculators(root / "fp8", world["records"], fp8=True)
    plain = []  # the package's own dequantisation, written as plain bf16
    for ids, aux, pre, post in world["records"]:
        hs = torch.cat([aux.reshape(ids.shape[0], len(AUX), HIDDEN), pre[:, None]], dim=1)
        back = dequantize_fp8_tensor(*quantize_tensor_to_fp8(hs))
        plain.append((ids, back[:, :-1].flatten(1), back[:, -1], post))
    deq = write_speculators(root / "plain", plain)
    a, b = figures(world, fp8).record(), figures(world, deq).record()
    assert a == b


def test_text_report(world, capsys):
    folder = write_trtllm(world["root"] / "text", world["records"])
    code, out, _ = accept(world["drafter"], folder, capsys=capsys)
    assert code == 0
    # the wording: the labels, each reading's lines (the trainer's, then vLLM's), the verdict
    assert_golden("test_acceptance/test_text_report.txt", _wording(out), {"DATA": folder})


# ----- the figures, by hand ---------------------------------------------------------------------------------------

def test_figures_equal_a_direct_computation(world):
    """Step k of row j predicts x[j+k+2] from the aux state at j and x[j+1]; the figures counted by hand."""
    folder = write_speculators(world["root"] / "direct", world["records"][:1])
    got = figures(world, folder, specs=()).readings[0]
    ids, aux, _, _ = world["records"][0]
    t = ids.shape[0]
    reading = engines.trainer(world["ckpt"])
    inp = Inputs(aux_hidden_states=aux.float()[:t - 1], input_ids=ids[1:], position_ids=torch.arange(1, t),
                 later_tokens=[torch.cat([ids[k + 2:], torch.zeros(k + 2, dtype=torch.int64)])[:t - 1]
                               for k in range(K - 1)])
    logits = run(reading, Weights(world["ckpt"], "cpu"), inp, K)
    # the draft's argmax by hand: over the draft vocabulary, then through d2t
    d2t = world["ckpt"].tensors
    starts = range(t - K - 1)
    correct = [[False] * K for _ in starts]
    for j in starts:
        for k in range(K):
            row = logits[k][j]
            finite = torch.isfinite(row).nonzero().flatten()
            best = int(finite[row[finite].argmax()])
            correct[j][k] = best == int(ids[j + k + 2])
    runs = []
    for row in correct:
        n = 0
        while n < K and row[n]:
            n += 1
        runs.append(n)
    assert d2t  # the drafter carries its mapping
    assert got.positions == len(runs)
    assert got.per_start_acceptance_length == pytest.approx(1 + sum(runs) / len(runs))
    # the served walk by hand: no loss mask, so one request from token 1; K drafts per verify step (the trainer's
    # reading walks as a chain-drafting server), each accepting its leading run, bounded by the tokens remaining
    lead = []
    for j in range(t - 1):
        n = 0
        while n < K and j + n + 2 < t:
            row = logits[n][j]
            finite = torch.isfinite(row).nonzero().flatten()
            if int(finite[row[finite].argmax()]) != int(ids[j + n + 2]):
                break
            n += 1
        lead.append(n)
    s, steps, accepted = 0, 0, 0
    while t - s - 2 > 0:
        a = min(lead[s], K, t - s - 3)
        steps, accepted, s = steps + 1, accepted + a, s + a + 1
    assert (got.verify_steps, got.acceptance_length) == (steps, pytest.approx(1 + accepted / steps))
    assert got.step_accuracy == pytest.approx([sum(r[k] for r in correct) / len(correct) for k in range(K)])
    for k in range(K):
        den = sum(1 for n in runs if n >= k)
        assert got.conditional_accuracy[k] == pytest.approx(sum(1 for n in runs if n > k) / den if den else 0.0)


def test_inputs_are_shifted_as_speculators_pairs_them(world):
    ids, aux, pre, _ = world["records"][0]
    from eagle3_checks.acceptance import Sample

    s = Sample("x", ids, aux.float(), pre.float(), False)
    inp, labels, valid, target_logits = sample_inputs(s, K)
    assert target_logits is None
    assert torch.equal(inp.input_ids, ids[1:]) and torch.equal(inp.position_ids, torch.arange(1, ids.shape[0]))
    assert torch.equal(labels[0][:3], ids[2:5]) and torch.equal(inp.later_tokens[0], labels[0])
    assert not bool(valid[2][-1]) and bool(valid[0][0])


def test_loss_mask_restricts_positions(world):
    recs = world["records"][:1]
    folder = write_specforge(world["root"] / "masked", recs, gz=())
    path = folder / "rows_0-2000" / "data_0.ckpt"
    d = {"input_ids": recs[0][0], "loss_mask": torch.zeros_like(recs[0][0]), "hidden_state": recs[0][3][None].clone(),
         "aux_hidden_state": recs[0][1][None].clone()}
    d["loss_mask"][8:] = 1
    torch.save(d, path)
    got = figures(world, folder, specs=()).readings[0]
    assert got.positions == recs[0][0].shape[0] - K - 1 - 7  # step 0 of row j needs mask[j+1]


# ----- a mis-conversion -------------------------------------------------------------------------------------------

def _flipped(world) -> Path:
    """The world's drafter with norm_before_residual dropped from its config (vLLM 0.33.0 then reads True)."""
    flipped = world["root"] / "flipped"
    if not flipped.exists():
        flipped.mkdir()
        for f in world["drafter"].iterdir():
            os.symlink(f, flipped / f.name) if f.name != "config.json" else None
        cfg = json.loads((world["drafter"] / "config.json").read_text())
        cfg.pop("norm_before_residual", None)
        (flipped / "config.json").write_text(json.dumps(cfg))
    return flipped


def test_flipped_norm_before_residual_changes_the_engine_reading(world, capsys):
    """vLLM 0.33.0 defaults norm_before_residual to True where speculators trained with False: a config without
    the field gets another engine reading, whose logits and figures differ."""
    flipped = _flipped(world)
    ckpt = open_checkpoint(flipped)
    named = readings(ckpt, [f"vllm@{VLLM}"])
    assert named[0][1].norm_before_residual != named[1][1].norm_before_residual
    folder = write_speculators(world["root"] / "flip-data", world["records"])
    res = evaluate(ckpt, named, samples(folder, expect_of(named[0][1])), K)
    base, served = res.readings
    assert base.record() == figures(world, folder, specs=()).readings[0].record()  # the trainer reading is unchanged
    assert served.record() != base.record() and served.acceptance_length < base.acceptance_length
    code, out, _ = accept(flipped, folder, "--format", "json", capsys=capsys)
    doc = json.loads(out)
    drop = 1 - doc["readings"][1]["acceptance_length"] / doc["readings"][0]["acceptance_length"]
    assert drop > 0.10 and code == 1 and doc["readings"][1]["verdict"] == "fails"
    (dropped,) = [f for f in doc["findings"] if f["code"] == "acceptance.engine-drop/drop"]
    assert (dropped["check"], dropped["cause"]) == (f"acceptance.engine-drop[vllm@{VLLM}]",
                                                    "config.json: norm_before_residual")
    code, out, _ = accept(flipped, folder, capsys=capsys)  # the text report names the cause
    assert code == 1
    # the wording: the failing reading, its drop and the field its reading differs in
    assert_golden("test_acceptance/test_flipped_norm_before_residual_changes_the_engine_reading.txt", _wording(out))


def test_max_drop_sets_the_share_an_engine_reading_may_lose(world, capsys):
    """--max-drop: the flipped reading fails when the drop's 95% interval (over the sequences) lies beyond the share
    allowed, passes when it lies within it, and is inconclusive (a warning, exit 0) when it straddles it."""
    flipped = _flipped(world)
    folder = write_speculators(world["root"] / "drop-data", world["records"])
    code, out, _ = accept(flipped, folder, "--format", "json", capsys=capsys)
    doc = json.loads(out)
    served = doc["readings"][1]
    drop = 1 - served["acceptance_length"] / doc["readings"][0]["acceptance_length"]
    lo, hi = served["drop_interval"]
    assert served["drop"] == pytest.approx(drop) and lo < drop < hi
    assert code == 1 and 0.10 < lo
    code, out, _ = accept(flipped, folder, "--max-drop", f"{min(hi + 0.01, 0.999):.3f}", "--format", "json",
                          capsys=capsys)
    doc = json.loads(out)
    assert code == 0 and [r.get("verdict") for r in doc["readings"]] == [None, "holds"]
    assert not [f for f in doc["findings"]
                if f["code"].startswith("acceptance.engine-drop/") and f["severity"] != "info"]
    code, out, _ = accept(flipped, folder, "--max-drop", f"{lo - 0.01:.3f}", "--format", "json", capsys=capsys)
    doc = json.loads(out)
    assert code == 1 and [r.get("verdict") for r in doc["readings"]] == [None, "fails"]
    assert {f["code"] for f in doc["findings"] if f["severity"] == "error"} == {"acceptance.engine-drop/drop"}
    code, out, _ = accept(flipped, folder, "--max-drop", f"{drop:.3f}", "--format", "json", capsys=capsys)
    doc = json.loads(out)
    inconclusive = [f for f in doc["findings"] if f["code"] == "acceptance.engine-drop/inconclusive"]
    assert code == 0 and len(inconclusive) == 1
    assert inconclusive[0]["severity"] == "warning" and inconclusive[0]["basis"] == "inferred"
    assert doc["readings"][1]["verdict"] == "inconclusive"
    # the wording: the straddling drop, and what would settle it (more positions, their number a figure)
    assert_golden("test_acceptance/test_max_drop_sets_the_share_an_engine_reading_may_lose.txt",
                  _wording(inconclusive[0]["message"] + "\n" + inconclusive[0]["settle"]))


def test_min_acceptance_warns_without_changing_the_exit_code(world, capsys):
    folder = write_speculators(world["root"] / "min-data", world["records"])
    code, out, _ = accept(world["drafter"], folder, "--format", "json", capsys=capsys)
    assert code == 0
    lengths = [r["acceptance_length"] for r in json.loads(out)["readings"]]
    code, above, _ = accept(world["drafter"], folder, "--min-acceptance", f"{min(lengths) - 0.001:.3f}",
                            capsys=capsys)
    assert code == 0
    code, below, _ = accept(world["drafter"], folder, "--min-acceptance", str(K + 1), capsys=capsys)
    assert code == 0
    code, out, err = accept(world["drafter"], folder, "--min-acceptance", str(K + 1), "--format", "json",
                            capsys=capsys)
    warned = {f["code"] for f in json.loads(out)["findings"] if f["severity"] == "warning"}
    assert code == 0 and "acceptance.figures/below-minimum" in warned and len(json.loads(out)["readings"]) == 2
    # the wording: no warning where every reading reaches the minimum; one per reading below it (--min-acceptance),
    # in the text report and, beside JSON, on stderr
    assert_golden("test_acceptance/test_min_acceptance_warns_without_changing_the_exit_code.txt",
                  _wording("\n".join([above, below, err])))


@pytest.mark.parametrize("args", [["--max-drop", "1"], ["--max-drop", "-0.1"], ["--min-acceptance", "0.5"],
                                  ["--min-acceptance", str(K + 2)]],
                         ids=["max-drop-1", "max-drop-negative", "min-acceptance-below-1", "min-acceptance-above-k-1"])
def test_bad_thresholds_are_refused_before_anything_runs(world, capsys, tmp_path, request, args):
    folder = write_speculators(tmp_path / "data", world["records"][:1])
    code, out, err = accept(world["drafter"], folder, *args, capsys=capsys)
    assert code == 2 and err.count("\n") == 1 and not out
    # the wording of the one line: the option, what it takes, the value given
    assert_golden(_golden(request), err, {"TMP": tmp_path})


@pytest.mark.parametrize("fmt", ["json", "sarif", "github"])
def test_a_usage_error_still_writes_the_report_asked_for(world, capsys, tmp_path, fmt):
    """As `check`: `accept ... --format sarif > report.sarif` in CI leaves a SARIF log (JSON, an annotation) saying
    why nothing was measured, and exits 2 with the error."""
    from test_report_formats import validate_sarif

    folder = write_speculators(tmp_path / "data", world["records"][:1])
    code, out, err = accept(world["drafter"], folder, "--max-drop", "1", "--format", fmt, capsys=capsys)
    assert code == 2
    if fmt == "json":
        assert json.loads(out)["exit_code"] == 2
        said = json.loads(out)["error"]
    elif fmt == "sarif":
        log = json.loads(out)
        validate_sarif(log)
        said = log["runs"][0]["invocations"][0]["toolExecutionNotifications"][0]["message"]["text"]
    else:
        said = out  # one ::error annotation
    # the wording: the error line, then what the report asked for says of it
    assert_golden(f"test_acceptance/test_a_usage_error_still_writes_the_report_asked_for-{fmt}.txt", err + said,
                  {"TMP": tmp_path})


# ----- bad input --------------------------------------------------------------------------------------------------

def _bad(world, folder: Path, capsys, request) -> None:
    """accept refuses the data in ``folder``: exit 2, one line (its wording: the test's golden file), the folder
    untouched."""
    before = sorted((p, p.stat().st_mtime_ns) for p in folder.rglob("*"))
    code, out, err = accept(world["drafter"], folder, capsys=capsys)
    assert code == 2, (out, err)
    assert err.count("\n") == 1, err
    assert_golden(_golden(request), err, {"WORLD": world["root"]})
    assert sorted((p, p.stat().st_mtime_ns) for p in folder.rglob("*")) == before


def _one(world):
    return world["records"][:1]


@pytest.mark.parametrize("what", ["hidden", "layers", "aux"])
def test_shapes_that_do_not_fit_the_drafter(world, capsys, request, what):
    ids, aux, pre, post = _one(world)[0]
    folder = world["root"] / f"shape-{what}"
    if what == "hidden":
        write_specforge(folder, [(ids, torch.cat([aux, aux[:, :6]], -1), pre, torch.cat([post, post[:, :2]], -1))],
                        gz=())
        _bad(world, folder, capsys, request)
    elif what == "layers":
        folder.mkdir()
        hs = torch.stack([pre] * 5, dim=1)
        safetensors_torch.save_file({"hidden_states": hs, "token_ids": ids}, str(folder / "hs_0.safetensors"))
        _bad(world, folder, capsys, request)
    else:
        write_trtllm(folder, [(ids, aux[:, :2 * HIDDEN].clone(), pre, post)] * 3)
        _bad(world, folder, capsys, request)


def test_token_ids_outside_the_vocabulary(world, capsys, request):
    ids, aux, pre, post = _one(world)[0]
    ids = ids.clone()
    ids[3] = VOCAB + 7
    _bad(world, write_trtllm(world["root"] / "vocab", [(ids, aux, pre, post)] * 3), capsys, request)


def test_lengths_that_disagree(world, capsys, request):
    ids, aux, pre, post = _one(world)[0]
    folder = write_specforge(world["root"] / "lengths", [(ids, aux, pre, post)], gz=())
    path = folder / "rows_0-2000" / "data_0.ckpt"
    torch.save({"input_ids": ids, "loss_mask": torch.ones(3, dtype=torch.int64), "hidden_state": post[None].clone(),
                "aux_hidden_state": aux[None].clone()}, path)
    _bad(world, folder, capsys, request)


@pytest.mark.parametrize("kind", ["safetensors", "ckpt", "gz"])
def test_truncated_files(world, capsys, request, kind):
    folder = world["root"] / f"trunc-{kind}"
    if kind == "safetensors":
        write_speculators(folder, _one(world))
        path = folder / "hs_0.safetensors"
    else:
        write_specforge(folder, _one(world), gz=(0,) if kind == "gz" else ())
        path = next((folder / "rows_0-2000").iterdir())
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    _bad(world, folder, capsys, request)


def test_empty_folder(world, capsys, request):
    folder = world["root"] / "empty"
    folder.mkdir()
    _bad(world, folder, capsys, request)


def test_pickle_that_runs_code_is_refused_and_never_run(world, capsys, request, tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    folder = world["root"] / "evil"
    folder.mkdir()
    ids = _one(world)[0][0]
    torch.save([{"input_ids": ids, "hidden_state": Evil()}], folder / "data_1.pt")
    _bad(world, folder, capsys, request)
    assert not marker.exists()


def test_nonfinite_states_are_skipped_and_counted(world, capsys):
    ids, aux, pre, post = _one(world)[0]
    aux = aux.clone()
    aux[10, 5] = float("nan")
    folder = write_trtllm(world["root"] / "nan", [(ids, aux, pre, post)] * 3)
    res = figures(world, folder, specs=())
    assert res.skipped == 3 * (ids.shape[0] - 10)
    assert res.readings[0].positions == 3 * (10 - K - 1)
    code, out, err = accept(world["drafter"], folder, "--format", "json", capsys=capsys)
    assert code == 0
    # the note of what was skipped (the count: res.skipped, above)
    assert_golden("test_acceptance/test_nonfinite_states_are_skipped_and_counted.txt", _wording(err))


def test_samples_reader_refuses_a_mixed_folder(world):
    folder = world["root"] / "mixed"
    write_speculators(folder / "a", _one(world))
    write_trtllm(folder / "b", _one(world) * 3)
    with pytest.raises(DataError, match="more than one producer"):
        list(samples(folder, expect_of(engines.trainer(world["ckpt"]))))


# ----- labels from the target ------------------------------------------------------------------------------------

def test_target_labels_and_alpha(world, capsys):
    """With --target the labels are the target's argmax and alpha is reported; speculators' states (before the
    final norm, normed here with the target's) and SpecForge's (after it) give the same figures; by hand with the
    transformers model itself for one step."""
    recs = world["wide"]
    root = world["root"] / "target-labels"
    docs = []
    for folder in (write_speculators(root / "spec", recs), write_specforge(root / "sf", recs, gz=())):
        code, out, _ = accept(world["drafter"], folder, "--target", str(world["root"] / "target"), "--steps", "1",
                              "--format", "json", capsys=capsys)
        doc = json.loads(out)
        # the random target's argmax is not what the drafter learned to draft: it accepts nothing there (an error)
        errors = {f["code"] for f in doc["findings"] if f["severity"] == "error"}
        assert code == 1 and errors == {"acceptance.figures/accepts-nothing"}, out
        docs.append(doc)
    a, b = (d["readings"][0] for d in docs)
    assert docs[0]["labels"] == docs[1]["labels"] == "target"
    assert (a["positions"], a["step_accuracy"]) == (b["positions"], b["step_accuracy"])
    assert a["alpha"] == pytest.approx(b["alpha"], rel=1e-5)
    # by hand: step 0 of row j against the target's distribution at position j+1
    model, ckpt = world["model"], world["ckpt"]
    reading = engines.trainer(ckpt)
    hits, overlap, n = 0, 0.0, 0
    for ids, aux, pre, _ in recs:
        t = ids.shape[0]
        with torch.no_grad():
            target = model.lm_head(model.model.norm(pre))
        draft = run(reading, Weights(ckpt, "cpu"), Inputs(aux_hidden_states=aux[:t - 1], input_ids=ids[1:],
                                                          position_ids=torch.arange(1, t)), 1)[0]
        for j in range(t - 1):
            hits += int(draft[j].argmax() == target[j + 1].argmax())
            overlap += float(torch.minimum(target[j + 1].softmax(-1), draft[j].softmax(-1)).sum())
            n += 1
    assert a["positions"] == n
    assert a["step_accuracy"][0] == pytest.approx(hits / n)
    assert a["acceptance_length"] == pytest.approx(1 + hits / n)
    assert a["alpha"] == pytest.approx(overlap / n, rel=1e-4)
    assert 0.0 < a["alpha"] < 1.0


def test_a_target_of_another_size_is_refused(world, capsys, tmp_path):
    cfg = transformers.LlamaConfig(hidden_size=32, num_hidden_layers=1, vocab_size=VOCAB, num_attention_heads=2,
                                   intermediate_size=64)
    transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path / "other")
    folder = write_trtllm(world["root"] / "other-target", world["records"])
    code, _, err = accept(world["drafter"], folder, "--target", str(tmp_path / "other"), capsys=capsys)
    assert code == 2
    # the wording of the error (transformers' own progress bars, from saving the other target, apart)
    said = [line for line in err.splitlines() if line.startswith("eagle3-checks: ")]
    assert_golden("test_acceptance/test_a_target_of_another_size_is_refused.txt", "\n".join(said),
                  {"TMP": tmp_path, "WORLD": world["root"]})


# ----- against speculators' own metrics ---------------------------------------------------------------------------

def test_figures_equal_speculators_own_full_and_cond_accuracy(tmp_path, monkeypatch):
    """speculators 0.9.0's Eagle3DraftModel.forward computes full_acc_k and cond_acc_k
    (speculators/models/eagle3/metrics.py, compute_metrics) on the same drafter and the same recorded states. Its
    step k counts the rows that have a step-k target; a run of accept with K = k + 1 counts exactly those, so its
    conditional accuracy at k is cond_acc_k and the product of its conditionals is full_acc_k (the share of rows
    whose steps 0..k are all right). The tokens are the target's greedy continuation, so speculators' teacher
    forcing (the recorded tokens) and accept's (the target's argmax) feed the same tokens; the draft vocabulary is
    the whole vocabulary, so its draft-space targets are the target's argmax."""
    pytest.importorskip("speculators")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # restored after the test (the peer builder would set it for good)
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "peers"))
    from build_speculators import build
    from speculators.losses.eager import kl_div_loss as eager_kl_div_loss  # the fused one needs Triton
    from speculators.models.eagle3.core import Eagle3DraftModel
    from variants import SPECULATORS

    variant = next(dict(v) for v in SPECULATORS if v["name"] == "full-vocab")
    build(str(tmp_path), variant)
    drafter = tmp_path / variant["name"]
    (drafter / "inputs.safetensors").unlink()
    (drafter / "peer_logits.safetensors").unlink()
    # built from its saved config and weights (from_pretrained would fetch the verifier's weights from the Hub)
    from speculators.models.eagle3 import Eagle3SpeculatorConfig

    config = Eagle3SpeculatorConfig.from_pretrained(str(drafter))
    config.transformer_layer_config._attn_implementation = "eager"
    model = Eagle3DraftModel(config).eval()
    missing, unexpected = model.load_state_dict(safetensors_torch.load_file(str(drafter / "model.safetensors")),
                                                strict=False)
    assert not unexpected and all(n.startswith("verifier_") for n in missing), (missing, unexpected)
    g = torch.Generator().manual_seed(3)
    hidden, vocab, t = variant["hidden_size"], variant["vocab"], 40
    with torch.no_grad():
        model.verifier_norm.weight.fill_(1.0)
        model.verifier_lm_head.weight.normal_(generator=g)
    # the target: its final norm and lm_head; the data: random states, the tokens the target's greedy choice
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"hidden_size": hidden, "vocab_size": vocab,
                                                    "rms_norm_eps": 1e-6, "architectures": ["LlamaForCausalLM"]}))
    safetensors_torch.save_file({"model.norm.weight": model.verifier_norm.weight.detach().clone(),
                                 "lm_head.weight": model.verifier_lm_head.weight.detach().clone()},
                                str(target / "model.safetensors"))
    # the tokens: the target's greedy choice at each last state; every other last state is the lm_head row of the
    # drafter's own step-0 choice there (so the figures are neither 0 nor 1), the others random
    aux = torch.randn(t, 3 * hidden, generator=g)
    last = torch.randn(t, hidden, generator=g)
    w = model.verifier_lm_head.weight.detach()
    ckpt = open_checkpoint(drafter)
    trained, weights = engines.trainer(ckpt), Weights(ckpt, "cpu")

    def greedy(i: int) -> int:
        with torch.no_grad():
            return int(model.verifier_lm_head(model.verifier_norm(last[i])).argmax())

    ids = [int(torch.randint(0, vocab, (1,), generator=g)), greedy(0)]
    for j in range(t - 2):
        if j % 2 == 0:  # row j's step 0 (and, where it fits, its step 1) drafts what the target then chooses
            inp = Inputs(aux_hidden_states=aux[:j + 1], input_ids=torch.tensor(ids[1:j + 2]),
                         position_ids=torch.arange(1, j + 2))
            last[j + 1] = w[int(run(trained, weights, inp, 1)[0][-1].argmax())]
            ids.append(greedy(j + 1))
            if j + 2 < t:
                inp.later_tokens = [torch.tensor(ids[2:j + 3])]
                last[j + 2] = w[int(run(trained, weights, inp, 2)[1][-1].argmax())]
        else:
            ids.append(greedy(j + 1))
    ids = torch.tensor(ids)
    data = tmp_path / "data"
    data.mkdir()
    hs = torch.cat([aux.reshape(t, 3, hidden), last[:, None]], dim=1)
    safetensors_torch.save_file({"hidden_states": hs.contiguous(), "token_ids": ids}, str(data / "hs_0.safetensors"))

    from eagle3_checks.acceptance import load_head

    head = load_head(target, hidden, vocab)
    seen = []
    for k in range(K):
        with torch.no_grad():  # speculators' shift_batch (models/eagle3/data.py), then its forward
            _, _, metrics = model(hidden_states=aux[:-1][None], input_ids=ids[1:][None],
                                  document_ids=torch.zeros(1, t - 1, dtype=torch.long),
                                  position_ids=torch.arange(1, t)[None], verifier_last_hidden_states=last[1:][None],
                                  ttt_steps=k + 1, loss_config={"kl_div": (eager_kl_div_loss, 1.0)})
        named = readings(ckpt, [])
        ours = evaluate(ckpt, named, samples(data, expect_of(named[0][1])), k + 1, target=head).readings[0]
        full = float(metrics[f"full_acc_{k}_sum"] / metrics[f"full_acc_{k}_total"])
        cond_total = float(metrics[f"cond_acc_{k}_total"])
        assert ours.positions == int(metrics[f"full_acc_{k}_total"])
        assert ours.cond_counted[k] == cond_total
        if cond_total:  # none accepted so far: speculators' ratio is 0/0, accept's 0.0
            cond = float(metrics[f"cond_acc_{k}_sum"]) / cond_total
            assert ours.conditional_accuracy[k] == pytest.approx(cond, abs=1e-6)
        else:
            assert ours.conditional_accuracy[k] == 0.0
        product = 1.0
        for c in ours.conditional_accuracy:
            product *= c
        assert product == pytest.approx(full, abs=1e-6)
        seen.append((full, ours.conditional_accuracy[k]))
    assert 0.2 < seen[0][0] < 0.8 and seen[1][0] > 0.0, seen  # not a trivial agreement


@pytest.mark.parametrize("args", [
    ["--level", "acceptance"],
    ["--data", "no-such-folder"],
    ["--data", ".", "--max-drop", "1.5"],
    ["--data", ".", "--min-acceptance", "9"],
], ids=["acceptance-level-without-data", "data-not-a-directory", "max-drop-above-1", "min-acceptance-above-4"])
def test_the_gate_refuses_bad_acceptance_options(drafter, capsys, request, args):
    path = drafter("speculators").write()
    assert main(["check", str(path), *args]) == 2
    # the wording: what the option needs (--data DIR, a directory, a share, an acceptance length from 1 to K+1)
    assert_golden(_golden(request), capsys.readouterr().err, {"TMP": path.parent})


def test_without_data_the_acceptance_level_does_not_run(drafter, capsys):
    path = drafter("speculators").write()
    assert main(["check", str(path), "--format", "json"]) == 0
    ids = {c["id"] for c in json.loads(capsys.readouterr().out)["checkpoints"][0]["checks"]}
    assert "forward.equivalence" in ids and not any(i.startswith("acceptance.") for i in ids)



# ----- a d2t written as absolute ids ------------------------------------------------------------------------------

def test_an_absolute_id_d2t_is_reported_and_each_engine_says_what_it_does(world, tmp_path, capsys):
    """The flat example drafter with d2t rewritten as the absolute target ids it encodes (and t2d kept): the trainer's
    reading maps the draft ids as trained and runs; vLLM 0.33.0 and SGLang 0.5.23 add arange(DV) to d2t, and each
    reading says what its release then does (cited); accept exits 1 with the vocabulary finding, never 2."""
    path = write_drafter(tmp_path / "flat", SHAPE, layout="flat")
    tensors = safetensors_torch.load_file(str(path / "model.safetensors"))
    tensors["d2t"] = tensors["d2t"] + torch.arange(tensors["d2t"].shape[0])
    safetensors_torch.save_file(tensors, str(path / "model.safetensors"))
    folder = write_speculators(tmp_path / "data", world["records"])
    code, out, err = accept(path, folder, "--engine", "vllm@0.33.0", "--engine", f"sglang@{SGLANG}", "--format", "json",
                            capsys=capsys)
    doc = json.loads(out)
    errors = {f["code"] for f in doc["findings"] if f["severity"] == "error"}
    assert code == 1 and {"vocab.t2d/absolute-ids"} <= errors, (errors, err)
    trainer, vllm, sglang = doc["readings"]
    assert trainer["positions"] > 0
    base = figures(world, folder, specs=(), ckpt=open_checkpoint(write_drafter(tmp_path / "right", SHAPE,
                                                                                layout="flat"))).readings[0]
    assert trainer["acceptance_length"] == pytest.approx(base.acceptance_length)
    text = accept(path, folder, "--engine", "vllm@0.33.0", "--engine", f"sglang@{SGLANG}", capsys=capsys)[1]
    assert [(r["reading"], r["verdict"]) for r in (vllm, sglang)] == [("vllm@0.33.0", "unservable"),
                                                                      (f"sglang@{SGLANG}", "unservable")]
    # the wording: what each release does with it, cited (vLLM llama_eagle3.py:385-394, SGLang :350-352)
    assert_golden("test_acceptance/test_an_absolute_id_d2t_is_reported_and_each_engine_says_what_it_does.txt",
                  _wording(text))


@pytest.mark.parametrize("field", ["target_hidden_size", "vocab_size"])
def test_a_trainer_reading_without_the_sizes_the_data_is_matched_by_is_refused(world, field):
    """expect_of matches recorded states to the drafter by the aux width and the vocabulary: a reading that states
    neither is an AcceptanceError naming it (accept: one line, exit 2), not a TypeError while reading samples."""
    from dataclasses import replace

    from eagle3_checks.acceptance import AcceptanceError

    trained = readings(open_checkpoint(world["drafter"]), [])[0][1]
    assert expect_of(trained).vocab == trained.vocab_size
    with pytest.raises(AcceptanceError, match=f"reads no {field}"):
        expect_of(replace(trained, **{field: None}))
