"""target.*: the drafter fits the verifier (target) model it will be served with."""

from __future__ import annotations

from collections.abc import Iterable

from ..registry import Context, Finding, NotApplicable, check, error, info, note
from ._common import CONFIG, config_key, config_of, target_of


@check(
    "target.aux-layers",
    "aux-layer ids exist in the target model",
    example="aux-id-beyond-target",
    needs=("target",),
    guards="Aux ids above the target's layer count: the engine captures nothing (or crashes) for them.",
    evidence=("speculators models/utils.py resolve_target_layer_ids: ids in [0, N]", "vLLM PR #46788"),
    fix="state the ids of target layers that exist; check --target-config is the verifier's",
    codes={
        "out-of-range": "aux-layer ids beyond the target's layers",
        "last-layer": note("an aux-layer id is the target's last layer"),
    },
)
def aux_in_range(ctx: Context) -> Iterable[Finding]:
    cfg, t = config_of(ctx), target_of(ctx)
    ids = cfg["aux_layer_ids"]
    if not ids:
        raise NotApplicable("no aux-layer ids stated (see config.aux-layers)")
    if t.num_hidden_layers is None:
        raise NotApplicable(f"{t.path} states no num_hidden_layers")
    n = t.num_hidden_layers
    above = [i for i in ids if i > n]
    if above:
        yield error(f"aux-layer ids {above} exceed the target's {n} layers", code="out-of-range", file=CONFIG,
                    key=config_key(cfg, "aux_layer_ids"), expected=f"ids in [0, {n}] ({t.source['num_hidden_layers']})",
                    found=str(ids),
                    why="the engine never reaches that layer: the aux state is never captured and the drafter is "
                    "fed nothing (or the server fails at the first step)",
                    fix="state the ids of the target layers the drafter was trained on; check that --target-config is "
                    "the verifier's config")
    elif n in ids:
        yield info(f"aux-layer id {n} is the target's last layer: vLLM and speculators capture the final output "
                   f"there; under SGLang's +1 rule {n - 2} is the last id that captures anything (layer i's input is "
                   "captured for i < N only: SGLang 0.5.23 srt/models/llama.py:485-494; engine.aux-layers judges each "
                   "release)",
                   code="last-layer", file=CONFIG, key=config_key(cfg, "aux_layer_ids"))


@check(
    "target.vocab",
    "vocab_size equals the target's vocabulary",
    example="vocab-size-above-target",
    needs=("target",),
    guards="A drafter built for another tokenizer or a config whose vocab_size is the draft vocabulary: logits "
    "and d2t index the wrong tokens.",
    evidence=("speculators PR #188",),
    fix="set vocab_size to the verifier's vocabulary",
    codes={
        "mismatch": "vocab_size is not the target's",
    },
)
def vocab_matches(ctx: Context) -> Iterable[Finding]:
    cfg, t = config_of(ctx), target_of(ctx)
    v = cfg["vocab_size"]
    if t.vocab_size is None or v is None:
        raise NotApplicable("vocab_size unknown on one side")
    if v != t.vocab_size:
        yield error(f"vocab_size {v}, the target's is {t.vocab_size}", file=CONFIG, key=config_key(cfg, "vocab_size"),
                    code="mismatch", expected=f"{t.vocab_size} ({t.source['vocab_size']})", found=str(v),
                    why="vLLM scatters draft logits into a vocab_size-wide tensor and compares them with the target's; "
                    "speculators rejects the verifier at load (PR #188)",
                    fix="set vocab_size to the verifier's vocabulary (and rebuild t2d/embed_tokens if they follow it)")


@check(
    "target.hidden-size",
    "fc takes A x the target's hidden size",
    example="target-hidden-size-off",
    needs=("target",),
    guards="A drafter trained on another target (fc input width differs) or a config without target_hidden_size "
    "when the target is wider than the drafter.",
    fix='serve the drafter with the target it was trained for; state target_hidden_size when it differs from '
    'hidden_size',
    codes={
        "target-hidden-size": "target_hidden_size is not the target's hidden_size",
        "fc-width": "fc's input is not the number of aux layers x the target's hidden size",
    },
)
def hidden_matches(ctx: Context) -> Iterable[Finding]:
    cfg, t = config_of(ctx), target_of(ctx)
    if t.hidden_size is None:
        raise NotApplicable(f"{t.path} states no hidden_size")
    fc = ctx.ckpt.shape("fc.weight")
    a = cfg.num_aux
    ht = cfg.entry("target_hidden_size")
    if ht is not None and ht.value is not None and ht.value != t.hidden_size:
        yield error(f"target_hidden_size {ht.value} ({ht.source}), the target's hidden_size is {t.hidden_size}",
                    file=CONFIG, key="target_hidden_size", expected=str(t.hidden_size), found=str(ht.value),
                    why="engines size fc's input from target_hidden_size; the captured states will not fit",
                    fix=f"set target_hidden_size: {t.hidden_size}" if ht.explicit else
                    f"add \"target_hidden_size\": {t.hidden_size}", code="target-hidden-size")
    if fc and len(fc) == 2 and fc[1] != a * t.hidden_size:
        yield error(f"fc.weight takes {fc[1]} inputs, the target gives {a} x {t.hidden_size} = {a * t.hidden_size}",
                    file=ctx.ckpt.file_of("fc.weight"), key="fc.weight", expected=f"(H, {a * t.hidden_size})",
                    found=str(fc), why="the fused aux states of this target do not fit fc: the engine fails at the "
                    "first draft step",
                    fix="serve the drafter with the target it was trained for", code="fc-width")
