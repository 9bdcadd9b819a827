"""eagle3-checks record on two random transformers targets: the suite's tiny one (hidden 64, 4 layers, vocabulary
512) and one of Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads of 64 with 2 KV heads, MLP 4864, vocabulary
151936, tied embeddings: 494M parameters, float32), built at random and saved by transformers. Each records 8 prompts
of 64 tokens with a 64-token greedy continuation on the CPU.

The baseline is the same work without record: in a fresh process, the same model loaded the same way, each prompt
continued greedily by ``generate`` and run forward once over prompt and continuation (the two passes record makes),
with no hooks and nothing written. Both are timed from the first prompt to the last (the model's load apart) and
report tokens per second (prompt and continuation) and the process's peak RSS (VmHWM). The two are run alternately,
twice each, and the faster run of each counts (a shared machine's load moves single runs by more than record's own
work: its hooks, the states' copy and the writes).

Targets: record at most 1.25x the baseline's time; peak RSS at most the baseline's plus 512 MiB (one sample's states
and the writers, whatever the number of prompts).
"""

from __future__ import annotations

import json
import subprocess

from conftest import PYTHON, report

PROMPT_TOKENS = 64
RUNS = {"tiny": (8, 64), "0.5B": (4, 32)}  # (prompts, generated tokens per prompt)
SHAPES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=512, max_position_embeddings=256),
    "0.5B": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864, vocab_size=151936, max_position_embeddings=4096, tie_word_embeddings=True),
}

BASELINE = """
import json, sys, time
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM
torch.set_grad_enabled(False)
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype="auto").eval()
prompts = [json.loads(l)["input_ids"] for l in Path(sys.argv[2]).read_text().splitlines()]
t0 = time.perf_counter()
tokens = 0
for ids in prompts:
    x = torch.tensor([ids])
    seq = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=int(sys.argv[3]), do_sample=False,
                         pad_token_id=0)[0]
    model(seq[None])
    tokens += seq.shape[0]
s = time.perf_counter() - t0
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"seconds": s, "tokens": tokens, "maxrss_bytes": hwm * 1024}))
"""

RECORD = """
import json, sys
from pathlib import Path
from eagle3_checks.acceptance.record import record
done = record(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[4]), [2, 3, 4], max_new_tokens=int(sys.argv[3]))
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"seconds": done.seconds, "tokens": done.tokens, "maxrss_bytes": hwm * 1024}))
"""


def _target(name: str, root):
    """(name, the target folder, the prompts file, its parameter count)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SHAPES[name], eos_token_id=None, bos_token_id=None))
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(root / "target")
    del model
    g = torch.Generator().manual_seed(1)
    vocab = SHAPES[name]["vocab_size"]
    (root / "prompts.jsonl").write_text("".join(
        json.dumps({"input_ids": torch.randint(0, vocab, (PROMPT_TOKENS,), generator=g).tolist()}) + "\n"
        for _ in range(RUNS[name][0])))
    return name, root / "target", root / "prompts.jsonl", params


def _child(code: str, *args: str) -> dict:
    out = subprocess.run([PYTHON, "-c", code, *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_record_on_the_tiny_target(benchmark, tmp_path):
    rec, base, row = _measure(benchmark, _target("tiny", tmp_path / "target"), tmp_path)
    report(benchmark, **row)
    assert rec["seconds"] <= 1.25 * base["seconds"]
    assert rec["maxrss_bytes"] <= base["maxrss_bytes"] + (512 << 20)


def test_record_on_a_0_5b_target(benchmark, tmp_path):
    rec, base, row = _measure(benchmark, _target("0.5B", tmp_path / "target"), tmp_path)
    report(benchmark, **row)
    assert rec["seconds"] <= 1.25 * base["seconds"]
    assert rec["maxrss_bytes"] <= base["maxrss_bytes"] + (512 << 20)


def _measure(benchmark, target, tmp_path) -> tuple[dict, dict, dict]:
    """Record and the baseline, alternately, twice each: (record's faster run, the baseline's, the row)."""
    name, folder, prompts, params = target
    n_prompts, new = RUNS[name]
    recs, bases = [], []

    def once():
        for _ in range(2):
            recs.append(_child(RECORD, str(folder), str(prompts), str(new), str(tmp_path / f"out-{len(recs)}")))
            bases.append(_child(BASELINE, str(folder), str(prompts), str(new)))

    benchmark.pedantic(once, rounds=1, iterations=1)
    rec, base = min(recs, key=lambda r: r["seconds"]), min(bases, key=lambda r: r["seconds"])
    assert rec["tokens"] == base["tokens"] == n_prompts * (PROMPT_TOKENS + new)
    rate, base_rate = rec["tokens"] / rec["seconds"], base["tokens"] / base["seconds"]
    benchmark.extra_info.update({"params": params, "tokens": rec["tokens"], "record_s": round(rec["seconds"], 3),
                                 "baseline_s": round(base["seconds"], 3), "tokens_per_s": round(rate, 1),
                                 "baseline_tokens_per_s": round(base_rate, 1), "peak_rss_bytes": rec["maxrss_bytes"],
                                 "baseline_peak_rss_bytes": base["maxrss_bytes"],
                                 "record_runs_s": [round(r["seconds"], 3) for r in recs],
                                 "baseline_runs_s": [round(r["seconds"], 3) for r in bases]})
    print(f"\nrecord ({name}, {params / 1e6:.1f}M parameters): {rate:.0f} tokens/s, peak RSS "
          f"{rec['maxrss_bytes'] / 1e9:.2f} GB; generate + forward alone {base_rate:.0f} tokens/s, "
          f"{base['maxrss_bytes'] / 1e9:.2f} GB")
    row = dict(what=f"record, a random {name} transformers target ({params / 1e6:.1f}M parameters, float32): "
               f"{n_prompts} prompts of {PROMPT_TOKENS} tokens + {new} generated, {rate:.1f} tokens/s",
               measured_s=rec["seconds"], budget="1.25x the baseline; peak RSS the baseline's + 512 MiB",
               baseline="the same generate + forward in transformers, no hooks, nothing written",
               baseline_s=base["seconds"], rss_bytes=rec["maxrss_bytes"],
               notes=f"{rate:.1f} tokens/s against {base_rate:.1f}; baseline peak RSS "
               f"{base['maxrss_bytes'] / 1e9:.2f} GB")
    return rec, base, row


STREAMED = """
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
done = subprocess.run([sys.executable, "-m", "eagle3_checks", "record", *sys.argv[1:]], capture_output=True, text=True)
print(json.dumps({"code": done.returncode, "err": done.stderr[-500:], "seconds": time.perf_counter() - t0,
                  "maxrss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
"""


def test_record_streams_a_2m_line_prompts_file(benchmark, tmp_path):
    """record checks every prompt before any runs, one line in memory at a time: a 2,000,000-line prompts file (72
    MB) whose last line is bad is read through and refused at that line with the peak of a 10-line one (the file
    read whole took 1.67 GB). Budget: the 10-line run's peak RSS + 64 MiB."""
    _, folder, _, _ = _target("tiny", tmp_path / "target")
    got = {}
    for lines in (10, 2_000_000):
        prompts = tmp_path / f"p{lines}.jsonl"
        with open(prompts, "w") as fh:
            for i in range(lines - 1):
                fh.write(json.dumps({"input_ids": [5 + i % 400, 6, 7, 8, 9, 10, 11, 12]}) + "\n")
            fh.write('{"input_ids": [600]}\n')
        got[lines] = _child(STREAMED, str(folder), "--prompts", str(prompts), "--out", str(tmp_path / f"o{lines}"),
                            "--layers", "1,2")
        assert got[lines]["code"] == 2 and f":{lines}: token id 600" in got[lines]["err"], got[lines]
    small, big = got[10], got[2_000_000]
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    benchmark.extra_info.update({"lines": 2_000_000, "seconds": round(big["seconds"], 1),
                                 "peak_rss_bytes": big["maxrss_bytes"], "small_peak_rss_bytes": small["maxrss_bytes"]})
    report(benchmark, what="record, a 2,000,000-line prompts file checked through (refused at its last line)",
           measured_s=big["seconds"], budget="peak RSS the 10-line run's + 64 MiB",
           baseline="the same on a 10-line file", baseline_s=small["seconds"], rss_bytes=big["maxrss_bytes"],
           notes=f"peak RSS {big['maxrss_bytes'] / 1e6:.0f} MB against {small['maxrss_bytes'] / 1e6:.0f} MB")
    assert big["maxrss_bytes"] <= small["maxrss_bytes"] + (64 << 20)
