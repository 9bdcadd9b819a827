"""forward.equivalence: the drafter, as the serving engine reads it, computes what was trained.

Without ``--source``: the checkpoint under the engine's reading against the same checkpoint under its trainer's
reading (speculators for the speculators layout, EAGLE/SpecForge for the flat one): this catches an engine default
that changes the math, such as vLLM's ``norm_before_residual`` default. With ``--source SRC``: the candidate under
the engine's reading against the source under its trainer's reading: this catches a conversion that changed what
the drafter computes (k and v swapped, norms swapped, aux blocks reordered, rope_theta lost, another vocabulary).
Both sides run the same float32 forward pass (:mod:`eagle3_checks.numerics.draft_steps`) on the same random inputs.
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import engines
from ..basis import INFERRED, READ, RECORDED
from ..engines.reading import describe_difference, differences, remedy, window_anchor
from ..numerics import ATOL, RTOL, torch_missing
from ..registry import Context, Finding, NotApplicable, check, config_cause, error, info, note, refusal_cause, warning
from ._common import release, trained_of, unread_layout
from ._common import served as served_by
from ._own import SEED, STEPS, TOKENS, _computed, _own_logits, _weights, live_run

# The forward pass (numerics.draft_steps) is imported by the functions that run it: a header-level gate imports none
# of it (tests/test_layout.py allows these imports).


def _logits(ctx: Context, ckpt, reading, inputs) -> list:
    """Run a reading once per gate: readings that agree on everything share the result."""
    from ..numerics.draft_steps import run

    used = sorted((role, name) for role, name in reading.tensors.items() if role != "t2d")  # t2d takes no part
    key = ("logits", id(ckpt), repr(sorted(reading.semantics().items())), repr(used),
           inputs.inputs_embeds is not None, inputs.stand_in_seed, id(inputs.target_embedding),
           inputs.aux_hidden_states.shape)
    if key not in ctx.cache:
        ctx.cache[key] = run(reading, _weights(ctx, ckpt), inputs, STEPS)
    return ctx.cache[key]


def _equal(a, b, block: int = 1 << 22) -> bool:
    """Value equality of two tensors of one shape, a block of rows at a time (no whole-tensor upcast)."""
    import torch

    if a.shape != b.shape:
        return False
    a2 = a.reshape(a.shape[0], -1) if a.dim() else a.reshape(1)
    b2 = b.reshape(b.shape[0], -1) if b.dim() else b.reshape(1)
    rows = max(1, block // max(1, a2[0].numel()))
    for start in range(0, a2.shape[0], rows):
        x, y = a2[start:start + rows], b2[start:start + rows]
        if not (torch.equal(x, y) if x.dtype == y.dtype else torch.equal(x.float(), y.float())):
            return False
    return True


def _changed_tensors(ctx: Context, cand, reading, source, ref) -> list[str]:
    """Roles whose values differ between candidate and source, and which source tensor each now equals, if any."""
    wc, ws = _weights(ctx, cand), _weights(ctx, source)
    notes = []
    for role, name in sorted(reading.tensors.items()):
        src_name = ref.tensors.get(role)
        if src_name is None or _equal(wc.raw(name), ws.raw(src_name)):
            continue
        a = wc.raw(name)
        twin = next((r for r, n in ref.tensors.items() if r != role and ws.raw(n).shape == a.shape
                     and _equal(a, ws.raw(n))), None)
        notes.append(f"{role} equals the source's {twin}" if twin else f"{role} differs from the source")
    return notes


def _other_releases(ctx: Context, source, possible, served, got, inputs, width: int, eng: str) -> Iterable[Finding]:
    """Where who trained the drafter (or which release) is not settled and the readings that leaves possible read
    the checkpoint differently (config.trainer-release), the engine's logits against each other reading too: which
    of them it computes."""
    from ..numerics.draft_steps import ForwardError, compare

    trained = possible.reading
    others = [(v, r) for v, r in possible.others if differences(r, trained)]
    if not others:
        return
    said = []
    for version, reading in others:
        if not reading.servable or reading.num_aux * (reading.target_hidden_size or 0) != width:
            said.append(f"{version}: not computed on the same inputs ("
                        + ("; ".join(reading.refusals) or f"fc takes {reading.num_aux} states") + ")")
            continue
        try:
            theirs = _logits(ctx, source, reading, inputs)
        except ForwardError as exc:
            said.append(f"{version}: cannot run ({exc})")
            continue
        steps = [compare(a, b, k, (eng, version)) for k, (a, b) in enumerate(zip(got, theirs, strict=True))]
        bad = [s for s in steps if not s.ok]
        said.append(f"{version}: " + ("agrees" if not bad else f"differs ({bad[0].describe()})"))
    identity = possible.identity
    yield warning(f"{eng}'s reading against each reading of this checkpoint the evidence leaves possible (who "
                  f"trained it: {identity.said()}): {'; '.join(said)}; the finding below compares against "
                  f"{possible.label}'s", code="unknown-release", expected="one trainer and release the evidence "
                  "names", found="; ".join(said), key="speculators_version" if identity.name == "speculators" else None,
                  basis=identity.basis if identity.basis != READ else INFERRED, rests_on=identity.how,
                  settle=identity.settle,
                  why="the readings compute different drafters from the same weights: which one the engine must "
                  "match depends on who trained it (config.trainer-release names the fields)",
                  fix="state the trainer (--trainer, --source) or the fields' values as trained, or gate with "
                  "--data (acceptance.trained-with decides from the weights)")


@check(
    "forward.equivalence",
    "The engine's reading computes what was trained (logits of K draft steps)",
    example="norm-before-residual-absent",
    level="forward",
    per_engine=True,
    requires=torch_missing,
    guards="A conversion or an engine default that changes the computation while every name and shape stays "
    "right: k/v or norms swapped, aux blocks reordered, rope_theta lost, norm_before_residual flipped by vLLM's "
    "default, a vocabulary mapping that points at other tokens.",
    evidence=("vLLM update_eagle3: norm_before_residual defaults to True, speculators to False",
              "vLLM PRs #38111, #46488, #42143 (norm flags not propagated)", "SpecForge #265 (rope_theta)"),
    fix="state every semantic field explicitly; re-export the tensors the finding lists from the trained checkpoint",
    codes={
        "unservable": "the release would not compute this drafter (refused or unfilled parameters)",
        "fc-width": "the release feeds fc another width than trained",
        "non-finite": "NaN or +inf logits",
        "agrees": note("the release's reading computes what was trained"),
        "differs": "the release's reading computes other logits than the trainer's",
        "unknown-release": "the trainer's release is unknown and its releases' readings differ: the engine's logits "
        "against each of them",
    },
)
def equivalence(ctx: Context) -> Iterable[Finding]:
    from ..numerics.draft_steps import ForwardError, compare, random_inputs

    cand = ctx.ckpt
    if cand.config is None or not cand.complete or cand.past_end:
        raise NotApplicable("the checkpoint's files are incomplete or config.json is unreadable (see files)")
    source = ctx.source or cand
    if source.past_end:
        raise NotApplicable(f"the source's files are truncated: {source.past_end[0]} runs past the end of its file")
    served = served_by(ctx, release(ctx))
    if served.not_modelled:
        raise NotApplicable(f"not modelled: {served.not_modelled}")
    why = unread_layout(ctx, served)
    if why:
        raise NotApplicable(why)
    eng = f"{served.engine} {served.version}"
    possible = trained_of(ctx) if ctx.source is None else \
        engines.trained(source, engines.identify(source, stated=ctx.options.trainer if ctx.options else None))
    trained = possible.reading
    against = "the source under its trainer's reading" if ctx.source is not None else "its trainer's reading"
    if not trained.servable:
        raise NotApplicable(f"the trainer's reading ({trained.engine}) cannot run: "
                            + "; ".join(trained.refusals + [f"{r} {how}" for r, how in trained.unfilled.items()]))
    if not served.servable:
        unfilled = [role for role, how in served.unfilled.items() if not how.startswith("shared")]
        cut = [role for role in served.narrowed if role not in unfilled]
        problems = served.refusals + [f"{role}: {served.unfilled[role]}" for role in unfilled] + \
            [f"{role}: narrowed to the shape it builds ({served.narrowed[role]})" for role in cut]
        subject = served.refused_at.get(served.refusals[0]) if served.refusals else (unfilled or cut)[0]
        yield error(
            f"{eng} would not compute this drafter: {problems[0]}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
            code="unservable",
            key=subject, cause=None if subject else refusal_cause(problems[0]),
            expected=f"a drafter {eng} loads completely", found="; ".join(problems),
            why=f"{eng} either refuses the checkpoint at load or serves parameters the checkpoint does not fill",
            # the layout is already the engine's: converting it changes nothing
            fix="fix the tensor names and config fields listed (engine.loads says what for each)" if served.layout_ok
            else "convert the checkpoint to the layout this engine reads (eagle3-checks convert), then fix what "
            "engine.loads lists",
        )
        return
    # servable readings state their sizes
    assert trained.target_hidden_size is not None and served.target_hidden_size is not None
    assert trained.hidden_size is not None and trained.vocab_size is not None
    width = trained.num_aux * trained.target_hidden_size
    if served.num_aux * served.target_hidden_size != width:
        yield error(
            f"{eng} feeds fc {served.num_aux} x {served.target_hidden_size} aux inputs, the drafter was trained "
            f"on {trained.num_aux} x {trained.target_hidden_size}",
            code="fc-width",
            key="fc.weight", expected=str(width), found=str(served.num_aux * served.target_hidden_size),
            why="the captured target states do not fit fc", fix="state the aux-layer ids where the engine reads them")
        return
    no_embed = "embed_tokens.weight" not in served.tensors or "embed_tokens.weight" not in trained.tensors
    # engines embed with the target's embed_tokens what the drafter has none for: with --target, so do both sides
    target_embed = no_embed and ctx.target_embedding is not None
    inputs = random_inputs(width, trained.hidden_size, trained.vocab_size, TOKENS, SEED,
                           with_embeds=no_embed and not target_embed)
    if target_embed:
        inputs.target_embedding = ctx.target_embedding
    own = live_run(ctx, release(ctx))
    beside = ""
    if own is not None and _computed(own):
        inputs = own.inputs  # both readings on what the engine was fed (its embedding table included)
    try:
        got = _logits(ctx, cand, served, inputs)
        want = _logits(ctx, source, trained, inputs)
    except ForwardError as exc:
        raise NotApplicable(f"the forward pass cannot run: {exc}") from exc
    if own is not None:
        got, beside = _own_logits(own, got, eng)
    steps = [compare(a, b, k, (eng, trained.engine)) for k, (a, b) in enumerate(zip(got, want, strict=True))]
    yield from _other_releases(ctx, source, possible, served, got, inputs, width, eng)
    bad = [s for s in steps if not s.ok]
    broken = [s for s in steps if s.nonfinite]
    if broken:
        yield error(
            f"the drafter computes non-finite logits: {broken[0].describe()}",
            code="non-finite", expected="finite logits (-inf only outside the draft vocabulary)",
            found=" | ".join(s.describe() for s in broken),
            why="NaN or +inf logits compare equal to nothing, so the two readings cannot be said to agree; an engine "
            "samples garbage from them (or no token at all). Usually a weight holds NaN or Inf (speculators "
            "initialises embed_tokens and lm_head to NaN until the verifier's are loaded) or overflows in float32",
            fix="gate the checkpoint with --level scan (scan.values names the tensors holding NaN/Inf) and re-export "
            "the trained weights")
        return
    if not bad:
        yield info(f"{eng}'s reading matches {against} ({trained.engine}): {STEPS} draft steps over {TOKENS} "
                   "random tokens agree to float32 rounding"
                   + ("; tokens are embedded with the target's embed_tokens (--target), as engines do" if target_embed
                      else "" if not no_embed or own is not None else "; later steps embed drafted tokens with a "
                      "stand-in table (no embed_tokens in the checkpoint; --target embeds with the target's, as "
                      "engines do)") + beside,
                   code="agrees", basis=RECORDED if own is not None and _computed(own) else None)
        return
    causes = [describe_difference(name, served, trained) for name in differences(served, trained)]
    anchor = window_anchor(served, trained)
    if anchor:
        causes.append(anchor)
    if ctx.source is not None:
        causes += _changed_tensors(ctx, cand, served, source, trained)
    first = bad[0]
    fields = differences(served, trained)
    fixes = [remedy(name, trained, served) for name in fields]
    yield error(
        f"{eng}'s reading differs from {against} ({trained.engine}): {first.describe()}{beside}",
        # one differing field and nothing else: the config field engine.semantics names is the root cause
        cause=config_cause(fields[0]) if len(fields) == 1 and not anchor and ctx.source is None else None,
        code="differs", expected=f"logits equal to float32 rounding (rtol {RTOL}, atol {ATOL} x the largest logit)",
        found=" | ".join(s.describe() for s in steps),
        why=("; ".join(causes) if causes else "no config field or tensor difference explains it: the weights were "
             "changed numerically") + ". The drafter then proposes other tokens than it was trained to, and "
        "acceptance drops without any error",
        fix=("; ".join(fixes) + ", as the drafter was trained" if fixes else
             "no config edit: serve it where the window is measured as trained (the acceptance level measures what "
             "it costs on recorded sequences longer than the window)" if anchor else
             "re-export the tensors listed from the trained checkpoint"),
        # against a reading the evidence does not settle (another is possible and computes otherwise): a warning;
        # else what the engine's own code computed is recorded
        **({"basis": RECORDED} if own is not None and _computed(own) else {})
        if not any(differences(o, trained) for _, o in possible.others) else
        {"basis": possible.identity.basis if possible.identity.basis != READ else INFERRED,
         "rests_on": f"who trained it: {possible.identity.how}", "settle": possible.identity.settle},
    )
