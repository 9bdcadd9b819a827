"""eagle3-checks record: a transformers target's states on the user's prompts, written as speculators 0.9.0 writes and
reads them (eagle3_checks/acceptance/record.py). What its output reproduces of a trainer's own recorded data, and what
speculators' own reader makes of it, tests/test_trained_world.py holds; here, on a tiny random target: the layers as
vLLM counts them, the tokenizer's chat template, the drafter's own layers, and bad input."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")
pytest.importorskip("pyarrow")

from eagle3_checks.cli import main  # noqa: E402
from eagle3_checks.drafter.example import DrafterShape, write_drafter  # noqa: E402
from helpers import assert_golden  # noqa: E402

HIDDEN, LAYERS, VOCAB = 64, 4, 512
WORDS = [f"w{i}" for i in range(VOCAB - 8)]


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    """A random 4-layer Llama target with a word-level tokenizer and a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    root = tmp_path_factory.mktemp("record") / "target"
    cfg = transformers.LlamaConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, vocab_size=VOCAB,
                                   num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                                   max_position_embeddings=256, eos_token_id=1, bos_token_id=0)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(root)
    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2, "user:": 3, "assistant:": 4, **{w: i + 8 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                                unk_token="<unk>")
    fast.chat_template = ("{% for m in messages %}user: {{ m['content'] }} {% endfor %}"
                          "{% if add_generation_prompt %}assistant:{% endif %}")
    fast.save_pretrained(root)
    return root


def _golden(request) -> str:
    """This test's golden file (a parametrized case's: NAME-PARAM)."""
    return "test_record/" + request.node.name.replace("[", "-").rstrip("]") + ".txt"


def _timeless(text: str) -> str:
    """What record says, its time and rate (which vary from run to run) written N."""
    return re.sub(r"in \d+(?:\.\d+)? s, \d+(?:\.\d+)? tokens/s", "in N s, N tokens/s", text)


def _prompts(tmp_path: Path, items: list[dict]) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


def _states(target: Path, ids: list[int]):
    """The target's states by hand: hidden_states[L] for L < N is the input of layer L; the last layer's output
    before the final norm by a hook (transformers' last hidden_states entry is after it)."""
    model = transformers.LlamaForCausalLM.from_pretrained(str(target)).eval()
    captured = {}
    hook = model.model.layers[-1].register_forward_hook(lambda m, a, o: captured.update(pre=o[0] if isinstance(
        o, tuple) else o))
    with torch.no_grad():
        hs = model(torch.tensor([ids]), output_hidden_states=True).hidden_states
    hook.remove()
    return hs, captured["pre"][0]


def test_layers_are_counted_as_vllm_counts_them(target, tmp_path, capsys):
    prompts = _prompts(tmp_path, [{"input_ids": [5, 9, 12, 40]}, {"input_ids": [7, 7, 8]}])
    out = tmp_path / "out"
    assert main(["record", str(target), "--prompts", str(prompts), "--out", str(out), "--layers", "0,2,4",
                 "--max-new-tokens", "6"]) == 0
    said = capsys.readouterr().out
    # the wording: what was written where, and the accept command that reads it
    assert_golden("test_record/test_layers_are_counted_as_vllm_counts_them.txt", _timeless(said), {"TMP": tmp_path})
    got = safetensors_torch.load_file(str(out / "hidden_states" / "hs_0.safetensors"))
    ids = got["token_ids"].tolist()
    assert ids[:4] == [5, 9, 12, 40] and len(ids) <= 10 and got["token_ids"].dtype == torch.int64
    hs, pre = _states(target, ids)
    assert got["hidden_states"].shape == (len(ids), 4, HIDDEN)
    expected = torch.stack([hs[0][0], hs[2][0], pre, pre], dim=1)  # id 4 = N: the last layer's output, then the last
    assert torch.allclose(got["hidden_states"], expected, atol=1e-5)
    assert not torch.allclose(got["hidden_states"][:, -1], hs[-1][0], atol=1e-3)  # not the post-norm state
    state = json.loads((out / "state.json").read_text())
    assert state["_format_type"] == "torch" and (out / state["_data_files"][0]["filename"]).is_file()


def test_text_prompts_go_through_the_chat_template(target, tmp_path):
    prompts = _prompts(tmp_path, [{"text": "w1 w2 w3"}])
    out = tmp_path / "out"
    assert main(["record", str(target), "--prompts", str(prompts), "--out", str(out), "--layers", "1,2,3",
                 "--max-new-tokens", "3"]) == 0
    ids = safetensors_torch.load_file(str(out / "hidden_states" / "hs_0.safetensors"))["token_ids"].tolist()
    assert ids[:5] == [3, 9, 10, 11, 4]  # user: w1 w2 w3 assistant:


def test_the_drafters_own_layers_and_accept_reads_the_folder_as_it_is(target, tmp_path, capsys):
    drafter = write_drafter(tmp_path / "drafter", DrafterShape(aux_layer_ids=(1, 2, 3), target_layers=LAYERS))
    prompts = _prompts(tmp_path, [{"input_ids": list(range(10, 20))}, {"input_ids": list(range(30, 42))}])
    out = tmp_path / "out"
    assert main(["record", str(target), "--prompts", str(prompts), "--out", str(out), "--drafter", str(drafter),
                 "--max-new-tokens", "8"]) == 0
    capsys.readouterr()
    code = main(["accept", str(drafter), "--data", str(out), "--loss-mask", str(out), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and doc["readings"][0]["positions"] == 2 * 8 - 2 * 3  # the continuation's rows only


@pytest.mark.parametrize("line", ["not json", '{"text": "w1", "input_ids": [1]}', '{"input_ids": []}',
                                  '{"input_ids": [600]}'],
                         ids=["not-json", "text-and-ids", "no-ids", "id-outside-the-vocabulary"])
def test_bad_prompts_are_one_line_and_leave_nothing(target, tmp_path, capsys, request, line):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"input_ids": [5, 6]}\n' + line + "\n")
    out = tmp_path / "out"
    assert main(["record", str(target), "--prompts", str(prompts), "--out", str(out), "--layers", "1,2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    # the wording: which line of which file, and what is wrong with it
    assert_golden(_golden(request), err, {"TMP": tmp_path})
    assert not out.exists() and not list(tmp_path.glob(".out*"))


@pytest.mark.parametrize("args", [["--layers", "1,9"], ["--layers", "1,x"], ["--layers", "1,1"]],
                         ids=["outside-the-target", "not-a-number", "twice"])
def test_bad_layers_are_refused(target, tmp_path, capsys, request, args):
    prompts = _prompts(tmp_path, [{"input_ids": [5, 6]}])
    assert main(["record", str(target), "--prompts", str(prompts), "--out", str(tmp_path / "out"), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    # the wording: the id or the form refused, and what --layers takes
    assert_golden(_golden(request), err, {"TMP": tmp_path})
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_not_a_target_or_an_existing_out_is_refused(target, tmp_path, capsys):
    prompts = _prompts(tmp_path, [{"input_ids": [5, 6]}])
    assert main(["record", str(tmp_path), "--prompts", str(prompts), "--out", str(tmp_path / "o"), "--layers",
                 "1"]) == 2
    not_a_target = capsys.readouterr().err
    (tmp_path / "exists").mkdir()
    assert main(["record", str(target), "--prompts", str(prompts), "--out", str(tmp_path / "exists"), "--layers",
                 "1"]) == 2
    exists = capsys.readouterr().err
    # the wording: no config.json in TARGET; an --out that exists
    assert_golden("test_record/test_a_folder_that_is_not_a_target_or_an_existing_out_is_refused.txt",
                  not_a_target + exists, {"TMP": tmp_path})


# ----- a long job: refused up front, streamed, stopped at once, resumed --------------------------------------------

def test_a_prompt_longer_than_the_targets_context_is_refused_before_anything_runs(target, tmp_path, capsys):
    prompts = _prompts(tmp_path, [{"input_ids": [5, 6]}, {"input_ids": [7] * 250}, {"input_ids": [8, 9]}])
    out = tmp_path / "out"
    assert main(["record", str(target), "--prompts", str(prompts), "--out", str(out), "--layers", "1,2",
                 "--max-new-tokens", "10"]) == 2
    err = capsys.readouterr().err
    # the wording: which prompt (file:line), its tokens and the new ones against the target's context, what to do
    assert_golden("test_record/test_a_prompt_longer_than_the_targets_context_is_refused_before_anything_runs.txt", err,
                  {"TMP": tmp_path})
    assert not out.exists() and not list(tmp_path.glob("out*")) and not list(tmp_path.glob(".out*"))


def test_progress_is_said_off_a_terminal(target, tmp_path, capsys):
    from eagle3_checks.acceptance.record import record

    prompts = _prompts(tmp_path, [{"input_ids": [5, 6]}, {"input_ids": [7, 8]}, {"input_ids": [9, 10]}])
    done = record(str(target), prompts, tmp_path / "out", [1, 2], max_new_tokens=2, every=0.0)
    err = capsys.readouterr().err
    assert done.samples == 3 and "\r" not in err, repr(err)  # lines, not a terminal's progress line redrawn
    # the wording: the count to record, then a line per prompt (every=0.0) with the time left, which varies
    assert_golden("test_record/test_progress_is_said_off_a_terminal.txt",
                  re.sub(r"about \d+ s left", "about N s left", err))


def test_the_prompts_file_is_streamed(tmp_path):
    """Every prompt is checked before any runs, one line in memory at a time: a 50,000-line file costs its reader no
    more than one line (read whole, its lines and their items held about 20 MB). benchmarks/test_record.py measures
    record's peak on a 2,000,000-line file."""
    import tracemalloc

    from eagle3_checks.acceptance.record import prompt_lines

    prompts = tmp_path / "p.jsonl"
    with open(prompts, "w") as fh:
        for i in range(50_000):
            fh.write(json.dumps({"input_ids": [5 + i % 400, 6, 7, 8, 9, 10, 11, 12]}) + "\n")
    tracemalloc.start()
    try:
        n = sum(1 for _ in prompt_lines(prompts))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == 50_000 and peak < 1_000_000, peak


_STALL = """
import ctypes, os, sys
import transformers
forward = transformers.LlamaModel.forward
calls = [0]
def stalled(self, *a, **k):  # the second prompt's first step: 60 s in C, where no Python signal handler runs
    calls[0] += 1
    if os.environ.get("STALL") and calls[0] == int(os.environ["STALL"]):
        ctypes.CDLL(None).sleep(60)
    return forward(self, *a, **k)
transformers.LlamaModel.forward = stalled
from eagle3_checks.cli import main
sys.exit(main(["record", *sys.argv[1:]]))
"""


def _stalled_run(tmp_path: Path, args: list[str], signum: int) -> str:
    """record in a subprocess, its second prompt stalled 60 s in C; ``signum`` sent once the first is kept. Asserts
    the run ended within 5 s with 128 + the signal, the first prompt kept, nothing else; returns what the tool said
    on stderr (its own lines: the progress lines and any library's warnings apart)."""
    # each prompt makes 5 forward calls (4 generated tokens, then the recording pass): call 6 is prompt 2's first
    proc = subprocess.Popen([sys.executable, "-c", _STALL, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "STALL": "6"})
    rows = tmp_path / "out.partial" / "rows.jsonl"
    deadline = time.monotonic() + 120
    while not (rows.is_file() and rows.read_text().count("\n") >= 1):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.5)  # inside the stalled call
    sent = time.monotonic()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signum and time.monotonic() - sent < 5, (proc.returncode, err)
    said = "\n".join(line for line in err.splitlines() if line.startswith("eagle3-checks: "))
    assert not (tmp_path / "out").exists() and not list((tmp_path / "out.partial").rglob("*.tmp"))
    assert sorted(p.name for p in (tmp_path / "out.partial" / "hidden_states").iterdir()) == ["hs_0.safetensors"]
    return said


def _stall_args(target: Path, tmp_path: Path) -> list[str]:
    prompts = _prompts(tmp_path, [{"input_ids": [5 + i, 6, 7]} for i in range(4)])
    return [str(target), "--prompts", str(prompts), "--out", str(tmp_path / "out"), "--layers", "1,2",
            "--max-new-tokens", "4"]


def test_sigterm_stops_record_at_once_and_the_same_command_resumes(target, tmp_path, capsys):
    """SIGTERM while the target sits inside one long call (60 s in C, the second prompt), where no Python signal
    handler runs: record ends within 5 s with 143, the prompt under way discarded, the first kept in OUT.partial; the
    same command resumes it, and the result is byte for byte what an uninterrupted run writes."""
    args = _stall_args(target, tmp_path)
    said = _stalled_run(tmp_path, args, signal.SIGTERM)
    assert main(["record", *args]) == 0
    resumed = capsys.readouterr().out
    # the wording: the signal, what is kept and where, how to resume; then the resumed run's report
    assert_golden("test_record/test_sigterm_stops_record_at_once_and_the_same_command_resumes.txt",
                  said + "\n\n" + _timeless(resumed), {"TMP": tmp_path})
    assert not (tmp_path / "out.partial").exists()
    whole = tmp_path / "whole"
    assert main(["record", *args[:4], str(whole), *args[5:]]) == 0
    for a in sorted(whole.rglob("*")):
        b = tmp_path / "out" / a.relative_to(whole)
        assert a.is_dir() or a.read_bytes() == b.read_bytes(), a


def test_sigint_stops_record_at_once(target, tmp_path):
    said = _stalled_run(tmp_path, _stall_args(target, tmp_path), signal.SIGINT)
    # the wording: the signal, what is kept and where, how to resume
    assert_golden("test_record/test_sigint_stops_record_at_once.txt", said, {"TMP": tmp_path})


def test_a_kept_run_of_other_arguments_is_not_resumed(target, tmp_path, capsys):
    prompts = _prompts(tmp_path, [{"input_ids": [5, 6]}, {"input_ids": [7, 8]}])
    out = tmp_path / "out"
    partial = tmp_path / "out.partial"
    (partial / "hidden_states").mkdir(parents=True)
    (partial / "run.json").write_text(json.dumps({"target": "elsewhere"}))
    assert main(["record", str(target), "--prompts", str(prompts), "--out", str(out), "--layers", "1,2"]) == 2
    err = capsys.readouterr().err
    assert partial.is_dir()
    # the wording: OUT.partial holds a run of other arguments (which), and what to do
    assert_golden("test_record/test_a_kept_run_of_other_arguments_is_not_resumed.txt", err, {"TMP": tmp_path})
    assert main(["record", str(target), "--prompts", str(prompts), "--out", str(out), "--layers", "1,2",
                 "--restart", "--max-new-tokens", "2"]) == 0
    assert (out / "hidden_states" / "hs_1.safetensors").is_file() and not partial.exists()
