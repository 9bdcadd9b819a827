"""The acceptance level: what each reading of the drafter accepts on the user's recorded target states (``--data``),
and which semantics its weights were trained with.

One pass over the data runs every reading at once (:func:`eagle3_checks.acceptance.evaluate`): the trainer's, each
selected engine release's, and the resolver's candidates (:mod:`eagle3_checks.acceptance.resolve`), K =
:data:`~eagle3_checks.options.ACCEPT_STEPS` draft steps, teacher-forced. With ``--target`` (a local folder) the labels
are the target's argmax and alpha is measured (a folder, or hf://ORG/NAME read by range); without it the recorded next
tokens are the labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import live
from ..basis import ASSUMED, INFERRED, MEASURED, READ
from ..engines.reading import effect, fix_for, patch_for
from ..errors import UsageError
from ..live.compute import run_live
from ..numerics import torch_missing
from ..options import ACCEPT_STEPS, MIN_COVERAGE, NOTHING
from ..registry import CONFIG, Context, Data, NotApplicable, check, config_cause, error, info, note, warning
from ._common import live_target_config, release

_KEY = ("acceptance",)
FC_ORDER = "fc-order:"  # the repair of fc's block order (fix.repair reads it: "fc-order:2,0,1")
_SLUG = {"rope_theta": "rope-theta", "norm_before_residual": "norm-before-residual", "feedback": "norm-output",
         "aux_order": "aux-order"}


def _evaluation(ctx: Context) -> dict[str, Any]:
    """The figures of every reading and the resolver's answers, computed once per gate run."""
    if _KEY in ctx.cache:
        got = ctx.cache[_KEY]
        if isinstance(got, NotApplicable):
            raise got
        return got
    try:
        ctx.cache[_KEY] = _evaluate(ctx)
    except NotApplicable as exc:
        ctx.cache[_KEY] = exc
        raise
    return ctx.cache[_KEY]


def _evaluate(ctx: Context) -> dict[str, Any]:
    from ..acceptance import AcceptanceError, DataError, LossMasks, expect_of, load_head, readings, samples
    from ..acceptance.resolve import measure

    ckpt, options = ctx.ckpt, ctx.options
    if not options.data:
        raise NotApplicable("no recorded target states (--data)")
    if ckpt.config is None or not ckpt.complete or ckpt.past_end or ckpt.problems:
        raise NotApplicable("the checkpoint's files are incomplete or broken (see files)")
    try:
        named = readings(ckpt, options.engines(), options.optional_engines, launch=options.launch_for)
    except AcceptanceError as exc:
        raise NotApplicable(str(exc)) from None
    trained = named[0][1]
    expect = expect_of(trained)
    head = None
    if options.target:
        try:
            head = load_head(options.target, expect.hidden, expect.vocab, revision=options.revision)
        except (DataError, UsageError) as exc:
            raise NotApplicable(str(exc)) from None
    own: dict[str, list] = {}
    said: dict[str, str] = {}
    try:
        masks = LossMasks(Path(options.loss_mask), options.loss_mask_start) if options.loss_mask else None
        folder = Path(options.data)
        listed: list | None = None  # the samples, held in memory only when an installed engine computes them too
        target_config = Path(live_target_config(ctx) or "")
        if options.live and target_config.is_file():  # each installed engine's own code, beside its modelled reading
            listed = list(samples(folder, expect, masks))
            own, said = with_own_compute(ckpt, named, options.live, target_config, listed, ACCEPT_STEPS,
                                         ctx.target_embedding, options.max_model_len)

        def fresh() -> Any:  # a new pass over the samples for each pass the resolver makes
            return iter(listed) if listed is not None else samples(folder, expect, masks)

        result, answers = measure(ckpt, named, fresh, ACCEPT_STEPS, target=head, embedding=ctx.target_embedding,
                                  own=own, launch=options.launch_for)
    except (AcceptanceError, DataError) as exc:
        raise NotApplicable(f"--data {options.data}: {exc}") from None
    result.max_drop, result.min_acceptance = options.max_drop, options.min_acceptance
    return evaluation(named, result, answers, said)


def evaluation(named: list[tuple[str, Any]], result: Any, answers: list, said: dict[str, str]) -> dict[str, Any]:
    """What the acceptance level's checks judge, from figures measured (``acceptance.measure`` over ``named``, the
    readings in its order): the result without the engines' own-code figures (they stand in for their release's
    reading, ``served`` maps each name to its figures), the resolver's answers, and who computed what."""
    served = {name: fig for (name, _), fig in zip(named, result.readings, strict=False)}
    modelled = [f for f in result.readings if not f.reading.endswith(OWN)]
    judged = dataclasses.replace(result, readings=modelled) if len(modelled) < len(result.readings) else result
    return {"result": judged, "served": served, "answers": answers, "trained": named[0][1], "said": said}


def measured(ctx: Context, got: dict[str, Any]) -> Context:
    """``ctx`` with figures already measured (:func:`evaluation`): the acceptance level's checks judge them instead of
    measuring again (``accept`` measures with its own draft steps and device, and runs the checks through the gate)."""
    ctx.cache[_KEY] = got
    return ctx


OWN = ", own code"  # the figures of an engine's own compute are named SPEC + OWN


def with_own_compute(ckpt: Any, named: list[tuple[str, Any]], live: Any, target_config: Path, data: list,
                     steps: int, embedding: Any = None, context_length: int | None = None
                     ) -> tuple[dict[str, list], dict[str, str]]:
    """Each installed engine's own compute (``live``: (spec, its python) pairs) on ``data``: the logits of those that
    computed, by the name SPEC + OWN, which is inserted into ``named`` after SPEC (its reading the modelled one); and
    for each spec who computed, or why its own code did not."""
    own: dict[str, list] = {}
    said: dict[str, str] = {}
    for spec, python in live:
        reading = dict(named).get(spec)
        got, said[spec] = (None, f"{spec} does not read the checkpoint") if reading is None else own_logits(
            ckpt, spec, python, target_config, data, steps, reading, embedding, context_length)
        if got is not None:
            own[spec + OWN] = got
            named.insert([n for n, _ in named].index(spec) + 1, (spec + OWN, reading))
    return own, said


def own_logits(ckpt: Any, spec: str, python: str, target_config: Path, data: list, steps: int, reading: Any,
               embedding: Any = None, context_length: int | None = None) -> tuple[list | None, str]:
    """The installed engine's own compute (live.compute.run_live) of the drafter on every sample the acceptance level
    scores (acceptance.evaluate.evaluated, teacher-forced as it is), in one engine run: the logits per sample and
    step, and who computed them; or None and why not. ``embedding``: the target's embed_tokens
    (storage.target_weights.TargetEmbedding), what it embeds with where it serves the target's (``reading`` has no
    embed_tokens)."""
    import torch

    from ..acceptance.evaluate import evaluated, sample_inputs

    runs = []
    table = None
    for sample in evaluated(data, steps):
        inputs, _, _, _ = sample_inputs(sample, steps)
        run: dict[str, Any] = {"aux_hidden_states": inputs.aux_hidden_states, "input_ids": inputs.input_ids,
                               "position_ids": inputs.position_ids}
        if steps > 1:
            run["later_tokens"] = torch.stack(list(inputs.later_tokens or []))
        if "embed_tokens.weight" not in reading.tensors:
            if embedding is None:
                return None, (f"{spec} embeds with the target's embed_tokens, which acceptance was not given "
                              "(--target)")
            if table is None:
                table = torch.from_numpy(embedding.rows(list(range(reading.vocab_size))))
            run["embed_table"] = table
        runs.append(run)
    if not runs:
        return None, "no sample to compute"
    try:
        computed = run_live(spec.split("@", 1)[0], python, Path(ckpt.source.path), target_config, runs, steps,
                            context_length)
    except live.CannotJudge as exc:
        return None, str(exc)
    rec = computed.record
    if "steps" not in rec or len(computed.outputs) != len(runs):
        raised = rec.get("raised") or {}
        return None, (rec.get("cannot_judge") or rec.get("not_computed") or
                      (f"its own code raised {raised.get('type')}: {raised.get('message', '')[:200]}" if raised else
                       "it computes NaN with parameters it leaves unwritten"))
    return [computed.logits(i) for i in range(len(runs))], (f"computed by {computed.said_by} (live, "
                                                            f"{computed.seconds:.0f} s)")


def _figures(fig: Any) -> str:
    alpha = "" if fig.alpha is None else f", alpha {fig.interval('alpha').shown()}"
    return (f"acceptance length {fig.interval('acceptance_length').shown()} over {fig.verify_steps} verify steps, "
            f"as a server counts it (per position {' '.join(f'{r:.3f}' for r in fig.per_position)}; per start, the "
            f"trainers' metric: {fig.interval('per_start_acceptance_length').shown()} over {fig.positions} "
            f"positions; step accuracy {' '.join(f'{a:.3f}' for a in fig.step_accuracy)}{alpha}; 95% intervals over "
            f"{sum(1 for s in fig.sequences if s.positions)} sequences)")


@check(
    "acceptance.figures",
    "The drafter, read as trained, accepts drafts on the recorded target states",
    example="lm-head-rows-shuffled",
    level="acceptance",
    requires=torch_missing,
    guards="A drafter whose every name, shape and flag is right and that still accepts almost nothing: weights "
    "from another run, an untrained or broken export (the story this project comes from: 15% acceptance under "
    "vLLM, found hours into serving).",
    evidence=("field survey rows A2-A8, B1, G2, G4-G5, H6: weights load cleanly, acceptance collapses",
              "unslothai/unsloth#10401: an untrained drafter scored alpha 0.01",
              "SpecForge PR #534: a d2t regenerated on fine-tuning silently broke acceptance"),
    fix="retrain or re-export the drafter from the trained run; record states from the target it serves with",
    codes={"figures": note("the trainer reading's acceptance on the data"),
           "accepts-nothing": f"read as trained, the drafter's acceptance length is at or below 1 + {NOTHING:g}",
           "below-minimum": "a reading's acceptance length is below --min-acceptance (a warning)",
           "low-coverage": f"the draft vocabulary expresses under {100 * MIN_COVERAGE:g}% of the data's labels "
           "(a warning)"},
)
def figures(ctx: Context) -> Iterable[Any]:
    got = _evaluation(ctx)
    result = got["result"]
    base = result.readings[0]
    yield info(f"read as trained: {_figures(base)}; labels: {result.labels}"
               + (f"; {result.skipped} positions skipped for non-finite states" if result.skipped else ""),
               file=ctx.options.data, code="figures", basis=MEASURED)
    yield Data(acceptance={**result.record(), "readings": [f.extended() for f in got["served"].values()]})
    nothing = result.accepts_nothing()
    if nothing:
        yield error(
            nothing, file=ctx.options.data, expected=f"acceptance length above 1 + {NOTHING:g}", found=_figures(base),
            code="accepts-nothing", basis=MEASURED,
            why=f"each verify step of {base.steps} drafts yields only the target's own token: speculative decoding "
            "costs the drafter's time and gains nothing",
            fix="check that the weights are the trained run's, that d2t maps the draft vocabulary the drafter was "
            "trained with and that the data comes from the target the drafter was trained for; then retrain or "
            "re-export")
    minimum = ctx.options.min_acceptance
    if minimum is not None and base.acceptance_length < minimum:
        yield warning(
            f"read as trained, the drafter reaches acceptance length {base.acceptance_length:.3f} on the data, "
            f"below the minimum {minimum:g}",
            file=ctx.options.data, expected=f"acceptance length >= {minimum:g} (--min-acceptance)",
            found=_figures(base), code="below-minimum", basis=MEASURED,
            why=f"each verify step of {base.steps} drafts would yield {base.acceptance_length:.2f} tokens: "
            "speculative decoding gains little or costs time",
            fix="check that the weights are the trained run's and that the data comes from the target the drafter "
            "was trained for; then retrain or re-export")
    low = result.low_coverage()
    if low:
        yield warning(low, file=ctx.options.data, key="d2t", code="low-coverage", basis=MEASURED,
                      expected=f"at least {100 * MIN_COVERAGE:g}% of the labels inside the draft vocabulary",
                      found=f"{100 * (base.coverage or 0):.1f}%",
                      why="a label outside the draft vocabulary is a rejection whatever the drafter computes",
                      fix="build d2t/t2d from token frequencies of data like the served traffic, and train with it")


@check(
    "acceptance.engine-drop",
    "The engine's reading keeps the acceptance the drafter reaches as trained",
    example="norm-before-residual-absent-measured",
    level="acceptance",
    per_engine=True,
    requires=torch_missing,
    guards="An engine reading that computes the drafter differently from its trainer: measured on the user's own "
    "data, in acceptance length, rather than in logits on random inputs.",
    evidence=("vLLM update_eagle3: norm_before_residual defaults to True, speculators to False",
              "vLLM PR #28549: the target's lm_head replaced the drafter's, mean acceptance 1.32 instead of 2.49"),
    fix="state what the trainer computed in config.json (the finding's difference says which field)",
    codes={"drop": "the release's reading loses more than --max-drop of the trained acceptance length (the drop's "
           "interval lies beyond it)",
           "unservable": "the release's reading cannot compute the drafter",
           "inconclusive": "the drop's interval straddles --max-drop: more data would decide (a warning)",
           "window-unmeasured": note("the release's attention window differs from the trainer's and no recorded "
                                     "sequence is long enough to measure it"),
           "holds": note("the release's reading keeps the trained acceptance")},
)
def engine_drop(ctx: Context) -> Iterable[Any]:
    spec = release(ctx)
    got = _evaluation(ctx)
    modelled = got["served"].get(spec)
    fig = got["served"].get(spec + OWN) or modelled  # the installed engine's own compute, where it ran
    if fig is None:
        raise NotApplicable(f"{spec} does not read the {ctx.ckpt.layout} layout (name it to require it)")
    if spec in got["said"]:  # judged live: who computed the figure, and the modelled reading's beside it
        spec = (f"{spec} ({got['said'][spec]}; the modelled reading: {_figures(modelled)})" if fig is not modelled
                else f"{spec} (the modelled reading: its own code did not compute the drafter: {got['said'][spec]})")
    result = got["result"]
    base = result.readings[0]
    verdict, d = result.verdict(fig)
    if verdict == "unservable":
        yield error(f"{spec} cannot run the drafter on the data: {fig.problem}", code="unservable", basis=READ,
                    expected="a reading that computes the drafter", found=fig.problem,
                    why="the engine refuses the drafter, maps its draft ids past the vocabulary or serves parameters "
                    "it does not fill (forward.equivalence, engine.loads and the vocab checks say which)",
                    fix="fix what engine.loads and the vocab checks list")
        return
    assert d is not None
    unmeasured = result.window_unmeasured(fig)
    if unmeasured:
        yield info(f"{spec}: {unmeasured}", file=ctx.options.data, code="window-unmeasured", basis=INFERRED,
                   rests_on="engine.semantics: the readings' windows", settle=f"recorded sequences longer than "
                   f"{fig.window_fits} tokens")
    shown = f"{100 * d.value:.1f}%" + (f" [{100 * d.lo:.1f}%, {100 * d.hi:.1f}%]" if d.known else "")
    if verdict == "fails":
        causes = "; ".join(fig.causes) or "no modelled field (see forward.equivalence)"
        yield error(
            f"{spec} reaches acceptance length {fig.acceptance_length:.3f} on the data, {shown} below "
            f"the {base.acceptance_length:.3f} the drafter reaches as trained; the readings differ in {causes}",
            # one differing field: the config field engine.semantics names is the root cause of the drop
            cause=config_cause(fig.fields[0]) if len(fig.fields) == 1 else None,
            file=ctx.options.data, expected=f"at most {100 * ctx.options.max_drop:g}% below "
            f"{base.acceptance_length:.3f} (--max-drop)", found=_figures(fig), code="drop", basis=MEASURED,
            why=f"served by {spec}, each verify step of {base.steps} drafts yields {fig.acceptance_length:.2f} "
            f"tokens instead of {base.acceptance_length:.2f}",
            fix="make config.json state what the trainer computed: forward.equivalence and engine.semantics give "
            "the field and its patch (eagle3-checks fix applies them)")
    elif verdict == "inconclusive":
        why = result.inconclusive(fig) or ""
        yield warning(f"{spec}: acceptance length {fig.acceptance_length:.3f} against {base.acceptance_length:.3f} "
                      f"as trained: {why}", file=ctx.options.data, code="inconclusive", basis=INFERRED,
                      expected=f"a drop whose interval lies within {100 * ctx.options.max_drop:g}% (--max-drop)",
                      found=shown, rests_on=f"the drop measured over {d.n} sequences", settle=why,
                      why="the data cannot tell this drop from noise", fix="record more sequences (--data)")
    else:
        yield info(f"{spec}: {_figures(fig)}, {shown} below the trained reading", code="holds", basis=MEASURED)


@check(
    "acceptance.trained-with",
    "The config states the semantics the weights were trained with",
    example="norm-before-residual-flipped",
    level="acceptance",
    requires=torch_missing,
    guards="A config that says something else than the trainer computed, which no reader of the config can see: "
    "SpecForge before PR #270 trained with rope base 10000 whatever rope_theta said; a converter wrote the wrong "
    "norm_before_residual or norm_output; fc's input blocks reordered.",
    evidence=("SpecForge PR #270 (2025-10-30): rope base 10000 when rope_scaling was null",
              "SpecForge PR #879 (2026-09): norm_output changed meaning",
              "vLLM update_eagle3: norm_before_residual defaults to True, speculators to False"),
    fix="state the value the weights were trained with (the finding's patch); eagle3-checks fix applies it",
    codes={"rope-theta": "the weights score better with another rope base than the config states",
           "norm-before-residual": "the weights score better with the other norm_before_residual",
           "norm-output": "the weights score better with the other norm_output (fed-back state)",
           "aux-order": "the weights score better with fc's input blocks in another order",
           "confirmed": note("the data confirms what the config states"),
           "undecided": note("the data cannot tell the candidates apart")},
)
def trained_with(ctx: Context) -> Iterable[Any]:
    from ..acceptance.resolve import CONFIRMED, CONTRADICTED, value_text

    got = _evaluation(ctx)
    raw = ctx.ckpt.config.raw if ctx.ckpt.config is not None else {}
    for a in got["answers"]:
        if a.verdict == CONFIRMED:
            yield info(f"{a.question}: the data confirms the config ({a.evidence()})", code="confirmed",
                       key=a.question, basis=MEASURED)
        elif a.verdict != CONTRADICTED:
            yield info(f"{a.question}: undecided: {a.why} ({a.shown()})", code="undecided", key=a.question,
                       basis=ASSUMED, rests_on=f"config.json states {value_text(a.question, a.stated)}",
                       settle=a.settle or None)
        elif a.question == "aux_order":
            order = tuple(a.best)
            yield error(
                f"fc's input blocks score best fed the aux states in order {order}, not in the recorded order "
                f"({a.evidence()})", code="aux-order", key="fc.weight", expected="fc's column blocks in the order of "
                "the aux layers", found=f"blocks ordered as aux {order}", basis=MEASURED,
                why="every engine feeds the captured states in layer order: the drafter sees them permuted",
                fix=f"reorder fc.weight's {len(order)} column blocks: new block i = old block j where order[j] = i, "
                f"order {order} (eagle3-checks fix --data rewrites fc.weight so and keeps it if the data, measured "
                "again, confirms it; or re-export from the trained run)",
                repair=f"{FC_ORDER}{','.join(map(str, order))}")
        else:
            cand = a.reading
            patch = patch_for(a.question, cand, raw)
            best, stated = value_text(a.question, a.best), value_text(a.question, a.stated)
            t = a.decided_by
            yield error(
                f"the weights were trained with {best}, the config states {stated} ({a.evidence()})",
                code=_SLUG[a.question], file=CONFIG, key=a.question, patch=patch, expected=best, found=stated,
                basis=MEASURED,
                why=f"{effect(a.question)}: every engine that reads the config computes what the weights were not "
                f"trained for" + (f", {t.figure} {t.gain.value:.3f} lower" if t else ""),
                fix=fix_for(a.question, cand) or "state the value the weights were trained with")
