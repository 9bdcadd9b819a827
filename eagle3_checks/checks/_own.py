"""The installed engine's own compute at the forward level (``--engine NAME@installed``): one engine run per gate
records the candidate's load and computes it with the engine's own drafter code (eagle3_checks.live.compute), on the
forward level's inputs; engine.live holds the modelled reading to it and forward.equivalence judges its logits. No
check lives here (the checks' modules register in report order)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import live
from ..fast_dataclass import dataclass
from ..live.compute import _Table, recorder_module, run_live
from ..numerics import torch_missing
from ..registry import Context
from ._common import LOADED_BY_COMPUTE, _as_read, live_target_config
from ._common import served as served_by

if TYPE_CHECKING:
    from ..numerics.draft_steps import Weights

# the forward level's draft steps, random tokens and seed (forward.equivalence)
STEPS = 2
TOKENS = 16
SEED = 0


def _weights(ctx: Context, ckpt) -> Weights:
    from ..numerics.draft_steps import Weights

    key = ("weights", id(ckpt))
    if key not in ctx.cache:
        ctx.cache[key] = Weights(ckpt)
    return ctx.cache[key]


TABLE_LIMIT = 1 << 26  # elements of an embedding table written for the engine (256 MB in float32)


@dataclass
class LiveRun:
    """The installed engine's own compute of the candidate on the forward level's inputs (``computed``: a
    live.compute.Computed, or the live.CannotJudge that says why there is none), those inputs as both readings run
    them, and as the recorder takes them (``runs``)."""

    computed: Any
    inputs: Any
    runs: list


def _embed_table(ctx: Context, served) -> tuple[str, Any] | None:
    """What the engine embeds with where it serves the target's embedding (served has no embed_tokens): ("table",
    the target's, --target, up to TABLE_LIMIT elements), ("own", the checkpoint's own embed_tokens: a trained drafter
    ships a copy of the target's, which the engine loads and the recorder puts back in place, nothing sent), or
    ("table", a seeded stand-in), or ("none", why not). None where it embeds with the drafter's own."""
    import torch

    if "embed_tokens.weight" in served.tensors:
        return None
    vocab, hidden = served.vocab_size, served.hidden_size
    if ctx.target_embedding is not None and vocab * hidden <= TABLE_LIMIT:
        try:
            if tuple(ctx.target_embedding.shape) == (vocab, hidden):
                return "table", torch.from_numpy(ctx.target_embedding.rows(list(range(vocab))))
        except Exception:
            pass
    own = next(iter(served.replaced), None)
    entry = ctx.ckpt.tensors.get(own) if own else None
    if own and entry is not None and tuple(entry.shape) == (vocab, hidden):
        return "own", own
    if vocab * hidden <= TABLE_LIMIT:
        return "table", recorder_module().uniform(vocab * hidden, SEED + 1).view(vocab, hidden).float()
    return "none", (f"{served.engine} embeds with the target's embed_tokens ({vocab} x {hidden}), which this gate has "
                    "no copy of to give it (--target)")


class _Rows:
    """A checkpoint tensor as an embedding table the forward pass reads rows of (only the rows it needs)."""

    def __init__(self, weights: Weights, name: str, shape: tuple[int, ...]) -> None:
        self.weights, self.name, self.shape = weights, name, shape

    def rows(self, ids: list[int]) -> Any:
        import torch

        return self.weights.rows(self.name, torch.tensor(ids, dtype=torch.int64)).cpu().numpy()


def live_run(ctx: Context, spec: str) -> LiveRun | None:
    """For a release judged live at the forward level: the installed engine's own compute of the candidate, run once
    per gate (engine.live and forward.equivalence both use it). None when the release is not judged live or the
    forward level does not run here."""
    from ..numerics.draft_steps import random_inputs

    options = ctx.options
    if options is None or spec not in dict(options.live) or "forward" not in options.levels() or torch_missing():
        return None
    key = ("live-compute", spec)
    if key in ctx.cache:
        return ctx.cache[key]
    served = served_by(ctx, spec, modelled=True)
    run: LiveRun | None = None
    if served.target_hidden_size is not None and served.hidden_size is not None and served.vocab_size is not None:
        inputs = random_inputs(served.num_aux * served.target_hidden_size, served.hidden_size, served.vocab_size,
                               TOKENS, SEED)
        table = _embed_table(ctx, served)
        runs = [{"aux_hidden_states": inputs.aux_hidden_states, "input_ids": inputs.input_ids,
                 "position_ids": inputs.position_ids}]
        if table is not None and table[0] == "table":
            runs[0]["embed_table"] = table[1]
            inputs.target_embedding = _Table(table[1])
        elif table is not None and table[0] == "own":  # the engine keeps the drafter's own copy in place
            inputs.target_embedding = _Rows(_weights(ctx, ctx.ckpt), table[1], (served.vocab_size, served.hidden_size))
        target = live_target_config(ctx)
        computed: Any
        if table is not None and table[0] == "none":
            computed = live.CannotJudge(table[1])
        elif ctx.ckpt.source.weights_elsewhere or not target or not os.path.isfile(target):
            computed = live.CannotJudge("the engine computes a local checkpoint beside a local target config: "
                                        + (ctx.ckpt.source.weights_elsewhere or "--target-config is not a local file"))
        else:
            try:
                with _as_read(ctx) as folder:
                    computed = run_live(spec.split("@", 1)[0], dict(options.live)[spec], folder, Path(target), runs,
                                        STEPS, options.max_model_len)
            except live.CannotJudge as exc:
                computed = exc
        run = LiveRun(computed, inputs, runs)
        made = getattr(computed, "loading", None)
        if made is not None and "harness_error" not in made:  # the same run recorded the load (engine.live)
            ctx.cache[("live", spec)] = live.Live(computed.engine, computed.version, dict(options.live)[spec], made,
                                                  computed.seconds)
    ctx.cache[key] = run
    return run


LOADED_BY_COMPUTE.append(live_run)


def _computed(run: LiveRun) -> bool:
    """The engine computed logits the forward level can compare (not refused, raised, NaN or unjudged)."""
    return not isinstance(run.computed, Exception) and "steps" in run.computed.record and bool(run.computed.outputs)


def _own_logits(run: LiveRun, modelled: list, eng: str) -> tuple[list, str]:
    """The logits the verdict is on (the engine's own where it computed them, else the modelled reading's) and the
    words that go beside it: who computed them, and the modelled reading's figure against them."""
    from ..numerics.draft_steps import compare

    if isinstance(run.computed, Exception):
        return modelled, f" (the modelled reading: the installed engine could not compute it: {run.computed})"
    rec = run.computed.record
    if not _computed(run):
        raised = rec.get("raised") or {}
        why = rec.get("cannot_judge") or (f"its own code raised {raised['type']}: {raised['message'][:160]}" if raised
                                          else "it computes NaN with parameters it leaves unwritten"
                                          if "computes_nan" in rec else rec.get("not_computed", ""))
        return modelled, f" (the modelled reading: {run.computed.said_by} did not compute it: {why}; engine.live)"
    own = run.computed.logits(0)
    steps = [compare(a, b, k, ("the modelled reading", run.computed.said_by))
             for k, (a, b) in enumerate(zip(modelled, own, strict=True))]
    bad = [d for d in steps if not d.ok]
    said = "gives the same logits" if not bad else f"differs from them ({bad[0].describe()}; engine.live)"
    return own, (f"; computed by {run.computed.said_by} (live, {run.computed.seconds:.0f} s; the modelled {eng} "
                 f"reading {said})")


