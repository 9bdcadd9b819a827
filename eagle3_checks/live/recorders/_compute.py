"""The engine's own drafter compute, the recorder's side: the inputs, the attention stand-in and the record.

Imported by record_vllm.py and record_sglang.py (run in the engine's interpreter, beside _probe.py); the project
loads it by path for the inputs (eagle3_checks/live/compute.py), so both sides feed the drafter the same numbers.

After a drafter is built and loaded, the recorder runs the engine's own drafter forward for K draft steps, float32,
on CPU: the engine's fc / embedding / decoder layer / norms / RoPE / MLP / lm_head / d2t code, driven as that
release's proposer drives it (the state, the token and the position fed to each later step are cited in each
recorder). One computation is not the engine's: the attention kernel, which needs a GPU (or a CPU kernel the CUDA
wheel does not build). :class:`StandIn` replaces it, written here once for both engines:

* plain softmax attention with the layer's own number of query heads, KV heads (grouped-query attention: each KV
  head serves ``num_heads / num_kv_heads`` consecutive query heads), head size and softmax scale, as the engine's
  attention module states them;
* a per-layer KV cache across draft steps. The T rows of the inputs draft in parallel, each as its own request:
  step 0 is causal over the T positions (a prefill of the prefix ending at row t), and at step k row t attends to
  the step-0 keys of positions <= t and to its own keys of steps 1..k (the decode of that request). For the last
  row this is exactly one request's prefill and decodes; every other row is the request whose prompt ends there.
* nothing else: no sliding window, no logit soft-cap, no attention sinks, no tree attention (one draft per step,
  greedy). A layer that asks for any of them raises :class:`CannotJudge`; the record then says the compute cannot
  be judged, never a figure.

The inputs (:func:`seeded_inputs`) come from a generator written in integer arithmetic, so that any torch release
gives the same numbers: aux states, token ids, positions 0..T-1 and, for a drafter that serves with the target's
embedding, a seeded table in its place. A live run (``--engine NAME@installed``) passes the gate's own inputs as a
safetensors file instead (:func:`file_inputs`). Later draft steps are fed each step's greedy draft (its argmax over
the target vocabulary), or the ``later_tokens`` the inputs give (teacher forcing, the acceptance level).

The record of one drafter (:func:`summary`): per step, the top-:data:`TOPK` target ids and logits of each row, the
number of finite logits per row and a hash of which target ids they are (the -inf pattern outside the draft
vocabulary), a sha256 of the float32 logits' bytes, and the state fed forward (each row's L2 norm and a sha256).
Compact and deterministic: a rerun on one machine reproduces it byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import torch

STEPS = 3  # draft steps (the recorders' NUM_SPECULATIVE_TOKENS)
TOKENS = 8  # rows of the seeded inputs
SEED = 0
TOPK = 4
_P = 2147483647  # 2**31 - 1


class CannotJudge(Exception):
    """The stand-in cannot compute what this drafter's attention asks for (the message says what)."""


def uniform(n: int, seed: int) -> torch.Tensor:
    """n numbers in [-sqrt(3), sqrt(3)) (mean 0, variance 1), float64, the same under every torch release: integer
    arithmetic below 2**62, two squaring rounds modulo 2**31 - 1."""
    i = torch.arange(n, dtype=torch.int64)
    x = (i * 48271 + (seed % 1000003) * 7919 + 12345) % _P
    x = (x * x + 1013904223) % _P
    x = (x * x + 2654435) % _P
    return (x.to(torch.float64) / _P * 2.0 - 1.0) * math.sqrt(3.0)


def integers(n: int, high: int, seed: int) -> torch.Tensor:
    """n integers in [0, high), int64, from the same generator."""
    i = torch.arange(n, dtype=torch.int64)
    x = (i * 69621 + (seed % 1000003) * 104729 + 54321) % _P
    x = (x * x + 1013904223) % _P
    return x % high


def seeded_inputs(width: int, vocab: int, hidden: int | None = None, tokens: int = TOKENS,
                  seed: int = SEED) -> dict[str, torch.Tensor]:
    """aux_hidden_states (T, width) float32, input_ids (T,) in [0, vocab), position_ids 0..T-1, and with ``hidden``
    an embedding table (vocab, hidden) float32 that stands in for the target's (a drafter without embed_tokens)."""
    out = {"aux_hidden_states": uniform(tokens * width, seed).view(tokens, width).float(),
           "input_ids": integers(tokens, vocab, seed),
           "position_ids": torch.arange(tokens, dtype=torch.int64)}
    if hidden is not None:
        out["embed_table"] = uniform(vocab * hidden, seed + 1).view(vocab, hidden).float()
    return out


def file_inputs(path: str) -> dict[str, torch.Tensor]:
    """The gate's own inputs (aux_hidden_states, input_ids, position_ids; optional later_tokens (K-1, T) and
    embed_table (V, H)), written by eagle3_checks/live/compute.py."""
    from safetensors.torch import load_file

    return load_file(path)


def inputs_of(entry: dict[str, Any], root: Any, width: int, vocab: int, hidden: int | None) -> Any:
    """(inputs, where to write every logit or None) for each run the manifest entry asks for: its
    ``compute_inputs`` files (a live run; ``compute_full`` the output files, in order), else the seeded inputs once."""
    files = entry.get("compute_inputs")
    if not files:
        yield seeded_inputs(width, vocab, hidden), None
        return
    files = [files] if isinstance(files, str) else files
    outs = entry.get("compute_full") or [None] * len(files)
    outs = [outs] if isinstance(outs, str) else outs
    for path, out in zip(files, outs, strict=True):
        yield file_inputs(str(root / path)), None if out is None else str(root / out)


def note_inputs(out: dict[str, Any], inputs: dict[str, torch.Tensor]) -> None:
    """Note what the first run is fed (before it runs: a run that raises is recorded with its inputs)."""
    if "inputs_sha256" not in out:
        out["inputs_sha256"] = {k: digest(v) for k, v in sorted(inputs.items())}


def keep(out: dict[str, Any], inputs: dict[str, torch.Tensor], logits: list, fed: list, tokens: list,
         full_path: str | None) -> None:
    """Add one run to the record: the first run's inputs digests and compact summary, and every logit of each run to
    its file (a live run)."""
    if "steps" not in out and "computes_nan" not in out:
        out.update(summary_or_nan(logits, fed, tokens))
    if full_path is not None:
        from safetensors.torch import save_file

        save_file(full(logits, fed, tokens), full_path)


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()


class StandIn:
    """The attention stand-in (see the module docstring): one per drafter run; ``step`` is set by the caller."""

    def __init__(self) -> None:
        self.step = 0
        self.cache: dict[int, dict[str, Any]] = {}

    def attend(self, layer: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_heads: int,
               num_kv_heads: int, head_size: int, head_size_v: int, scale: float) -> torch.Tensor:
        """q (T, num_heads * head_size), k (T, num_kv_heads * head_size), v (T, num_kv_heads * head_size_v), the
        layer's own sizes and scale -> (T, num_heads * head_size_v)."""
        t = q.shape[0]
        q = q.reshape(t, num_heads, head_size).transpose(0, 1).float()
        k = k.reshape(t, num_kv_heads, head_size).transpose(0, 1).float()
        v = v.reshape(t, num_kv_heads, head_size_v).transpose(0, 1).float()
        group = num_heads // num_kv_heads
        k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        cache = self.cache.setdefault(id(layer), {"k": None, "v": None, "own_k": [], "own_v": []})
        if self.step == 0:
            if cache["k"] is not None:
                raise RuntimeError("harness: the stand-in's cache was filled twice at step 0")
            cache["k"], cache["v"] = k, v
        else:
            cache["own_k"].append(k)
            cache["own_v"].append(v)
        scores = (q @ cache["k"].transpose(1, 2)) * scale  # (nh, T, T)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        own = [(q * ko).sum(-1, keepdim=True) * scale for ko in cache["own_k"]]
        probs = torch.softmax(torch.cat([scores, *own], dim=-1), dim=-1)
        out = probs[..., :t] @ cache["v"]
        for j, vo in enumerate(cache["own_v"]):
            out = out + probs[..., t + j:t + j + 1] * vo
        return out.transpose(0, 1).reshape(t, num_heads * head_size_v)


def summary(logits: list[torch.Tensor], fed: list[torch.Tensor], tokens: list[torch.Tensor],
            topk: int = TOPK) -> list[dict[str, Any]]:
    """The compact record of each step (see the module docstring): ``logits`` (T, V) over the target vocabulary,
    ``fed`` the state the step hands to the next one, ``tokens`` the ids the next step is fed."""
    out = []
    for step, (lg, state, tok) in enumerate(zip(logits, fed, tokens, strict=True)):
        lg = lg.float()
        finite = torch.isfinite(lg)
        k = min(topk, lg.shape[-1])
        values, ids = lg.topk(k, dim=-1)
        row_finite = finite.sum(-1).tolist()
        out.append({
            "step": step,
            "top_ids": ids.tolist(),
            "top_values": [[float(f"{x:.9g}") for x in row] for row in values.tolist()],
            "finite": row_finite[0] if len(set(row_finite)) == 1 else row_finite,
            "finite_ids_sha256": digest(finite[0].nonzero().flatten().to(torch.int64)),
            "sha256": digest(lg),
            "fed_norm": [float(f"{x:.9g}") for x in state.float().norm(dim=-1).tolist()],
            "fed_sha256": digest(state.float()),
            "next_tokens": tok.tolist(),
        })
    return out


def poison_unwritten(model: Any, record: dict[str, Any]) -> list[str]:
    """Fill with NaN every floating-point parameter the loading record lists as unwritten (the served build leaves
    them holding whatever memory held): a computation that uses one gives NaN logits, one that never reads it (a
    norm a later layer builds and never uses) is unchanged, and either way the record is deterministic. Integer
    parameters (vLLM's d2t, built with torch.zeros) keep their initial values. Returns the names poisoned."""
    params = dict(model.named_parameters())
    out = []
    for entry in record.get("unwritten", []):
        param = params.get(entry["param"])
        if param is not None and param.is_floating_point():
            param.data.fill_(float("nan"))
            out.append(entry["param"])
    return sorted(set(out))


def few(names: list[str], shown: int = 4) -> list[str]:
    """The first names of a list, and how many more (a record stays short)."""
    return names[:shown] + ([f"... {len(names) - shown} more"] if len(names) > shown else [])


def summary_or_nan(logits: list[torch.Tensor], fed: list[torch.Tensor], tokens: list[torch.Tensor]) -> dict[str, Any]:
    """``{"steps": summary(...)}``, or, where a step's logits hold NaN (a parameter left unwritten is used),
    ``{"computes_nan": first such step}``."""
    for step, lg in enumerate(logits):
        if bool(torch.isnan(lg).any()):
            return {"computes_nan": step}
    return {"steps": summary(logits, fed, tokens)}


def full(logits: list[torch.Tensor], fed: list[torch.Tensor], tokens: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every logit, for a live run (written as safetensors beside the record, never committed)."""
    out = {}
    for step, (lg, state, tok) in enumerate(zip(logits, fed, tokens, strict=True)):
        out[f"logits_step_{step}"] = lg.float().contiguous()
        out[f"fed_step_{step}"] = state.float().contiguous()
        out[f"tokens_step_{step}"] = tok.to(torch.int64).contiguous()
    return out


def dumps(obj: Any) -> str:
    """A compute record as JSON, one step per line (compact, diffable)."""
    return json.dumps(obj, separators=(",", ":"))


# ----- the recorders' plumbing ---------------------------------------------------------------------------------

def compute_option(argv: list[str]) -> tuple[list[str], dict[str, Any] | None]:
    """``--compute FILE`` anywhere in the recorder's arguments: also run each drafter's own compute and write every
    record to FILE. Returns the other arguments and the state the recorder fills (None without the option)."""
    if "--compute" not in argv:
        return argv, None
    at = argv.index("--compute")
    if at + 1 >= len(argv):
        return argv, None  # the usage message
    return argv[:at] + argv[at + 2:], {"path": argv[at + 1], "records": {}}


def computing(record_one: Any, compute_one: Any, state: dict[str, Any] | None) -> Any:
    """``record_one`` (the loading record), followed by ``compute_one`` on the drafter it loaded, into ``state``."""
    if state is None:
        return record_one

    def both(entry: dict, root: Any, record: dict) -> None:
        try:
            record_one(entry, root, record)
        except BaseException:
            state["records"][entry["name"]] = {"checkpoint": entry["name"], "source_hash": entry["source_hash"],
                                               "not_computed": "the engine did not build and load the drafter"}
            raise
        state["records"][entry["name"]] = compute_one(entry, root, record)
    return both


def write(state: dict[str, Any] | None, engine: str, version: str, started: float) -> None:
    """Every compute record of the run in one JSON file, one checkpoint a line (sorted by name)."""
    if state is None:
        return
    import time

    head = {"engine": engine, "version": version, "date": time.strftime("%Y-%m-%d", time.gmtime(started)),
            "steps": STEPS, "tokens": TOKENS, "seed": SEED, "topk": TOPK,
            "computed": sum(1 for r in state["records"].values() if "steps" in r),
            "cannot_judge": sum(1 for r in state["records"].values() if "cannot_judge" in r),
            "raised": sum(1 for r in state["records"].values() if "raised" in r)}
    lines = [f"{json.dumps(name)}:{dumps(rec)}" for name, rec in sorted(state["records"].items())]
    text = "{" + dumps(head)[1:-1] + ',\n"checkpoints":{\n' + ",\n".join(lines) + "\n}}\n"
    with open(state["path"], "w") as fh:
        fh.write(text)
    print(f"{engine} {version}: computed {head['computed']} drafters ({head['cannot_judge']} cannot be judged, "
          f"{head['raised']} raised) into {state['path']}")
