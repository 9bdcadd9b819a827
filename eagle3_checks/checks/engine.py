"""engine.*: what the serving engine would silently do with the drafter, predicted from headers and config.

One result per ``--engine`` release (``engine.loads[sglang@0.5.23]``). Each check compares the release's reading
(its profile in ``eagle3_checks/engines/``, a versioned model of its loader) with the drafter's trainer reading, and
fails where the engine would compute something other than what was trained or would refuse the checkpoint. No
torch: the forward check proves the same numerically.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

from .. import engines, live
from ..basis import ASSUMED, INFERRED, KNOWN, READ, RECORDED, weakest
from ..drafter.families.mla import TRANSFORMERS_LATENT_NORMS, eps_mean_square_bound, eps_scale_change
from ..drafter.layout import SPECULATORS
from ..engines.launch import preconditions
from ..engines.profile import Capture, Target
from ..engines.reading import (
    SEMANTIC_FIELDS,
    Reading,
    describe_difference,
    differences,
    effect,
    patch_for,
    remedy,
    shown,
    window_anchor,
    window_text,
)
from ..engines.recorded import disagreements, left_unwritten
from ..live import verdict
from ..live.compute import compare_live
from ..numerics import RTOL
from ..registry import (
    PREFIX_CAUSE,
    Context,
    Finding,
    NotApplicable,
    Severity,
    add,
    check,
    error,
    info,
    note,
    refusal_cause,
    warning,
)
from ._common import (
    CONFIG,
    config_of,
    draft_rows,
    engine_captures,
    identity_of,
    live_recording,
    release,
    require_complete,
    trained_of,
    unread_layout,
)
from ._common import served as served_by
from ._own import STEPS, TOKENS, _weights, live_run

# huggingface_hub's repo id rule (validate_repo_id): "name" or "namespace/name".


def _listing(items: list[str], limit: int = 4) -> str:
    return ", ".join(items[:limit]) + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def label(r: Reading) -> str:
    """'sglang 0.5.23': the release a finding speaks for."""
    return f"{r.engine} {r.version}"


def _builds_drafter(served: Reading) -> None:
    """Skip a check of what the engine would compute when it builds no drafter from this checkpoint."""
    if not served.layout_ok:
        raise NotApplicable(f"{label(served)} does not read this layout (see engine.loads)")
    if served.class_refusal:
        raise NotApplicable(f"{label(served)} builds no EAGLE-3 drafter from these architectures (see engine.loads)")


def _readings(ctx: Context):
    config_of(ctx)
    require_complete(ctx)
    served = served_by(ctx, release(ctx))
    if served.not_modelled:
        raise NotApplicable(f"not modelled: {served.not_modelled}")
    why = unread_layout(ctx, served)
    if why:
        raise NotApplicable(why)
    trained = trained_of(ctx).reading
    if not trained.layout_ok or trained.hidden_size is None:
        raise NotApplicable(f"the trainer's reading cannot run: {'; '.join(trained.refusals)}")
    return served, trained


@check(
    "engine.loads",
    "The engine loads every trained tensor: nothing refused, dropped or left uninitialised",
    example="head-dim-missing",
    per_engine=True,
    guards="Parameters an engine leaves at their initial values without an error (vLLM 0.33: missing tensors, a "
    "config with more layers than the file; SGLang 0.5.23: a hidden_norm of a later layer, which speculators-style "
    "drafters do not carry), tensors dropped silently (SGLang 0.5.6: layers.0.* names, biases, fc norms), a hard "
    "load error (a `model.` prefix in vLLM, an architecture the engine does not register, a flat config in "
    "speculators, a speculators config in SGLang).",
    evidence=("vLLM 0.33.0 model_executor/models/llama_eagle3.py:420-470 load_weights",
              "SGLang 0.5.23 srt/models/llama_eagle3.py:324-378 load_weights, :97-105 hidden_norm on layers >= 1",
              "SGLang 0.5.6 srt/models/llama_eagle3.py load_weights", "speculators #1114 / PR #1131",
              "MLA drafters: vLLM 0.33.0 model_executor/models/deepseek_eagle3.py:258-267, 370-398 (a null "
              "q_lora_rank cannot load); SGLang 0.5.23 srt/models/kimi_k25_eagle3.py:113-117, 243-244, 428-501"),
    fix="write the checkpoint in the layout the engine reads (names, architectures) and keep every trained tensor",
    codes={
        "class-refused": "the release builds no EAGLE-3 drafter from the architectures",
        "refused": "the release refuses the checkpoint at load",
        "unfilled": "trained parameters the release leaves unfilled",
        "no-tensor": "parameters the release builds that no tensor fills",
        "dropped": "trained tensors the release drops or never uses",
        "ignored-unknown": "tensors the release has no parameter for and skips (silently, or with a log line)",
        "narrowed": "tensors the release cuts to the (smaller) shapes it builds",
        "shared-from-target": note("tensors the release takes from the target model"),
        "target-tensor-used": note("the release uses the target's tensor instead of the checkpoint's"),
        "replaced": note("the release replaces a checkpoint tensor with the target's"),
    },
)
def loads(ctx: Context) -> Iterable[Finding]:
    served, trained = _readings(ctx)
    name = label(served)
    if served.class_refusal:  # another model (or none) is built: what it would do with the tensors is moot
        yield error(f"{name} refuses the drafter: {served.class_refusal}", code="class-refused", key="architectures",
                    expected=f"an architecture {name} builds an EAGLE-3 drafter for", found=served.architecture,
                    why="the server fails to start, or serves a model that is not the drafter",
                    fix="name the drafter class this engine registers in architectures")
        return
    names = ctx.ckpt.names
    for refusal in served.refusals:
        at = served.refused_at.get(refusal)
        prefixed = at is not None and at in names and names[at].prefixed
        yield error(f"{name} refuses the drafter: {refusal}", key=at,
                    cause=PREFIX_CAUSE if prefixed else None if at else refusal_cause(refusal),
                    code="refused", expected=f"a drafter {name} loads", found=refusal,
                    why="speculators fails to load it" if served.engine == "speculators" else
                    "the server fails to start, or fails at the first request",
                    fix="write the checkpoint in the layout this engine reads" if not served.layout_ok else
                    "fix the tensor name or config field named")
    if not served.layout_ok:
        return
    unfilled = sorted(role for role, how in served.unfilled.items() if not how.startswith("shared"))
    lost = [role for role in unfilled if role in trained.tensors]
    if lost:
        # every tensor it did not read carries a `model.` prefix: the prefix is the cause
        prefix = all(trained.tensors[r] in names and names[trained.tensors[r]].prefixed for r in lost)
        yield error(
            f"{name} leaves {len(lost)} trained parameter(s) unfilled: {_listing(lost)}",
            code="unfilled", key=trained.tensors[lost[0]], expected="every trained tensor loaded",
            cause=PREFIX_CAUSE if prefix else None,
            found=f"{served.unfilled[lost[0]]} ({', '.join(trained.tensors[r] for r in lost[:4])} not read)",
            why=f"{name} serves those parameters with {served.unfilled[lost[0]]}; nothing is reported and "
            "acceptance collapses",
            fix=f"rename the tensors to the names {name} reads (see its notes on why each is not read)")
    absent = [role for role in unfilled if role not in trained.tensors]
    if absent:
        yield error(
            f"{name} builds {len(absent)} parameter(s) that no tensor fills: {_listing(absent)}",
            key=absent[0], expected="a tensor for every parameter the engine builds", found=served.unfilled[absent[0]],
            why=f"{name} raises nothing and serves them as {served.unfilled[absent[0]]}: the drafter computes "
            "something it was never trained to",
            fix="add the missing tensors from the trained model, or fix the config field that makes the engine "
            "build them (num_hidden_layers, the norm and bias flags, draft_vocab_size)", code="no-tensor")
    # trained tensors the engine skips, or loads into a parameter its computation never reads
    unused = {**{n: why for n, why in served.ignored.items()
                 if ctx.ckpt.names[n].role in trained.tensors and ctx.ckpt.names[n].role != "t2d"
                 and ctx.ckpt.names[n].role not in served.tensors
                 and ctx.ckpt.names[n].role not in served.unfilled and not why.startswith("refused")},
              **{served.tensors[role]: why for role, why in served.unused.items() if role in trained.tensors}}
    dropped = sorted(unused)
    if dropped:
        yield error(
            f"{name} drops {len(dropped)} trained tensor(s): {_listing(dropped)}",
            code="dropped", key=dropped[0], expected="every trained tensor used", found=unused[dropped[0]],
            why=f"{name} computes without them, so the drafter runs without what it was trained with",
            fix="serve with an engine that computes with these tensors, or convert the drafter so that it needs none")
    # tensors no drafter role matches (keys reports what they are): an engine that refuses them says so above; one
    # that skips them (SGLang's loaders: no parameter, no error) serves without them
    skipped = sorted(n for n, why in served.ignored.items()
                     if ctx.ckpt.names[n].role is None and not why.startswith("refused"))
    if skipped:
        yield error(
            f"{name} skips {len(skipped)} tensor(s) it has no parameter for: {_listing(skipped)}",
            code="ignored-unknown", key=skipped[0], expected="every tensor of the checkpoint loaded into the drafter",
            found=served.ignored[skipped[0]],
            why=f"{name} loads the drafter without them and raises nothing: if the drafter was trained with them it "
            "computes something else, and if they are leftovers the file is not what the config describes (keys "
            "names them)",
            fix="remove the tensors if they are not part of the drafter, or rename each to the parameter it fills")
    if served.narrowed:
        cut = sorted(served.narrowed)
        yield error(
            f"{name} silently cuts {len(cut)} tensor(s) to the shapes it builds: {_listing(cut)}",
            key=cut[0], expected="tensors of the shapes the config implies", found=served.narrowed[cut[0]],
            why=f"{name}'s linear weight loaders narrow a larger checkpoint tensor to the parameter instead of "
            f"refusing it ({engines.profile(release(ctx)).narrows_at}): the server starts, and attention runs on the "
            "first rows of each projection with the "
            f"head size it derived (head_dim {served.head_dim}, {served.sources.get('head_dim', '?')}), which is "
            "not what was trained: almost no drafted token is accepted",
            fix="state the config field that sizes these tensors (head_dim, the head counts, intermediate_size) as "
            "the drafter was trained", code="narrowed")
    shared = sorted(role for role, how in served.unfilled.items() if how.startswith("shared"))
    not_here = [role for role in shared if not ctx.ckpt.has(role)]
    if not_here:
        yield info(f"{name} shares {', '.join(not_here)} from the target model (not in the checkpoint)",
                   code="shared-from-target")
    for role in shared:
        if ctx.ckpt.has(role):
            yield info(f"{name} uses the target model's {role}, not the checkpoint's {ctx.ckpt.roles[role]}",
                       code="target-tensor-used", key=ctx.ckpt.roles[role])
    for on_disk, how in sorted(served.replaced.items()):
        if on_disk in served.refused_at.values():  # its load is refused: nothing serves in its place
            continue
        yield info(f"{name} uses the target model's {ctx.ckpt.names[on_disk].role}, not the checkpoint's "
                   f"{on_disk}: {how}", code="replaced", key=on_disk)


@check(
    "engine.semantics",
    "The engine reads every config value as the drafter was trained",
    example="norm-before-residual-absent",
    per_engine=True,
    guards="An engine default that changes the math: vLLM's norm_before_residual True for a speculators config "
    "without the field, SGLang 0.5.6 reading rope_theta 10000 when the theta is only in rope_parameters, head_dim "
    "defaulting (kimi_k2 parsed as DeepseekV3Config: 64), norm_output / fc_norm / norm_before_fc meaning different "
    "things or nothing to an engine, tied embeddings with a draft vocabulary.",
    evidence=("vLLM update_eagle3 (norm_before_residual default True)", "SpecForge #265 (rope_theta)",
              "vLLM PRs #38111, #46488, #42143 (norm flags)"),
    fix="state every semantic field explicitly in config.json, where the engine reads it",
    codes={**{field.replace("_", "-"): f"the release reads {field} otherwise than the trainer"
              for field in SEMANTIC_FIELDS},
           "sliding-window-within-context": note("the release's attention window differs from the trainer's, "
                                                 "beyond the served context (--max-model-len)"),
           "window-anchor": note("the same sliding window, measured from the draft's position by the release and from "
                                 "the context row by the trainer: later draft steps see fewer of the oldest tokens "
                                 "past the window"),
           "latent-norm-eps": note("the MLA latent norms' eps differs from the trainer reading's: a change below "
                                   "the forward tolerance for latents of the size stated, measured by "
                                   "forward.equivalence")},
)
def semantics(ctx: Context) -> Iterable[Finding]:
    served, trained = _readings(ctx)
    _builds_drafter(served)
    possible = trained_of(ctx)
    fields = list(differences(served, trained))
    fields += [f for _, other in possible.others for f in differences(served, other) if f not in fields]
    for field in fields:
        if field == "mla" and _latent_eps_only(served, trained):
            yield _latent_eps_note(served, trained)
            continue
        if field == "sliding_window" and not possible.depends(field):  # every possible trainer trained it alike
            yield _window_finding(ctx, served, trained)
            continue
        yield _semantic(ctx, field, served, trained, possible)
    anchor = window_anchor(served, trained)
    if anchor and "sliding_window" in served.sources:
        yield info(f"{label(served)}: {anchor} (forward.equivalence fails it where its inputs pass the window; the "
                   "acceptance level measures what it costs on recorded sequences longer than the window)",
                   code="window-anchor", key="sliding_window", basis=READ)


def _window_finding(ctx: Context, served: Reading, trained: Reading) -> Finding:
    """A drafter trained with a sliding window and served without one, or the reverse (or with another): the two
    compute alike while the context fits the smaller window, from the next token on they do not. An error unless the
    served context (--max-model-len) fits it."""
    sizes = [w[0] for w in (served.window(), trained.window()) if w is not None]
    fits = min(sizes)
    profile = engines.profile(release(ctx))
    if trained.window() is not None and profile.launch_window:
        size, layers = trained.window()  # type: ignore[misc]
        fix = (f"launch with --{profile.launch_window} {size - 1} ({served.engine} {served.version} attends N + 1 "
               f"keys for N; eagle3-checks recipe writes it)" if len(layers) == trained.num_layers else
               f"serve it where layer_types is read per layer (vLLM 0.33.0): --{profile.launch_window} sets every "
               "layer's window")
        patch = None
    elif trained.window() is None:
        fix = ("remove layer_types and sliding_window from config.json: the trainer computed full attention "
               f"({trained.sources.get('sliding_window', '?')})")
        where = "/transformer_layer_config" if trained.layout == SPECULATORS else ""
        patch = [{"op": "remove", "path": f"{where}/layer_types"}, {"op": "remove", "path": f"{where}/sliding_window"}]
    else:
        fix = (f"serve it with a release that reads the window (vLLM 0.33.0 reads layer_types and sliding_window); "
               f"{served.engine} {served.version} cannot compute it as trained")
        patch = None
    served_len = ctx.options.max_model_len if ctx.options else None
    message = (f"{label(served)} serves the drafter with {window_text(served)}, it was trained with "
               f"{window_text(trained)}: the two compute alike on contexts up to {fits} tokens and differently from "
               f"{fits + 1} tokens on")
    expected = f"{window_text(trained)} ({trained.sources.get('sliding_window')})"
    found = f"{window_text(served)} ({served.sources.get('sliding_window')})"
    basis = engines.known_by(release(ctx)) if ctx.engine else READ
    if served_len is not None and served_len <= fits:
        return info(message + f"; served at --max-model-len {served_len}, within that", key="sliding_window",
                    expected=expected, found=found, fix=fix, code="sliding-window-within-context", basis=basis)
    return error(message, key="sliding_window", expected=expected, found=found, fix=fix, patch=patch,
                 code="sliding-window", basis=basis,
                 why=f"{effect('sliding_window')}; a long prompt drafts from another context than the drafter was "
                 f"trained on (the acceptance level measures the cost on recorded sequences longer than {fits} "
                 "tokens)")


def _semantic(ctx: Context, field: str, served: Reading, trained: Reading, possible) -> Finding:
    """The release reads ``field`` otherwise than the drafter was trained: an error when every reading the evidence
    leaves possible trains it alike (its basis read or recorded), else a warning that states each reading's value and
    what would settle it."""
    basis = possible.basis_of(field)
    values = possible.depends(field)
    identity = possible.identity
    engine_basis = engines.known_by(release(ctx)) if ctx.engine else READ
    said = f"{label(served)} reads {field} as {shown(field, served, trained)!r}"
    patch = patch_for(field, trained, ctx.ckpt.config_raw or {})
    fix = remedy(field, trained, served, ctx.ckpt.config_raw or {})
    rows = draft_rows(ctx.ckpt)
    if field == "draft_vocab_size" and rows and trained.draft_vocab_size not in rows:
        # the trainer reading's value is a default the tensors contradict (speculators 0.9.0's 32000,
        # drafter/config_values.py SPECULATORS_DEFAULTS, beside a 128-row lm_head): no drafter was trained with it,
        # and config.vocab-sizes states the rows the tensors hold
        patch, fix = None, f"state draft_vocab_size as the tensors' {min(rows)} rows (config.vocab-sizes)"
    if not values:
        return error(
            f"{said}, the drafter was trained with {shown(field, trained, served)!r}",
            key=field, expected=f"{shown(field, trained, served)!r} ({trained.sources.get(field, '?')})",
            found=f"{shown(field, served, trained)!r} ({served.sources.get(field, '?')})",
            why=f"{effect(field)}; {describe_difference(field, served, trained)}", fix=fix, patch=patch,
            code=field.replace("_", "-"), basis=engine_basis)
    mine = shown(field, served, trained)
    agree = [who for who, v in values.items() if repr(v) == repr(mine)]
    listing = "; ".join(f"{who}: {v!r}" for who, v in values.items())
    return warning(
        f"{said}; what the drafter was trained with depends on who trained it, which the evidence does not settle "
        f"({listing})" + (f": served as trained only if {' or '.join(agree)} trained it" if agree else
                         ": no reading the evidence leaves possible matches it"),
        key=field, expected=f"the value it was trained with ({listing})",
        found=f"{mine!r} ({served.sources.get(field, '?')})", basis=basis,
        rests_on=f"who trained it: {identity.how}", settle=f"{identity.settle}; or --data "
        "(acceptance.trained-with decides from the weights)",
        why=f"{effect(field)}; {describe_difference(field, served, trained)}",
        fix=f"{fix} (not applied by fix until who trained it is known: {identity.settle})", patch=patch,
        code=field.replace("_", "-"))


def _latent_eps_only(served: Reading, trained: Reading) -> bool:
    """The two MLA readings differ in the eps of q_a_layernorm / kv_a_layernorm and in nothing else, by so little
    that latents of unit RMS come out of the norms within the forward tolerance of each other."""
    mine, theirs = served.semantics()["mla"], trained.semantics()["mla"]
    return bool(mine and theirs) and {k for k in mine if mine[k] != theirs[k]} == {"latent_norm_eps"} and \
        eps_scale_change(mine["latent_norm_eps"], theirs["latent_norm_eps"], 1.0) <= RTOL


def _latent_eps_note(served: Reading, trained: Reading) -> Finding:
    """An eps difference is no error by itself: it changes only the length of the normed latents, by a factor the
    forward tolerance bounds for latents of a known size, and what the drafter's trainer used is not known (no
    modelled trainer has an MLA drafter; the trainer reading is transformers' DeepseekV3Attention). Unit-RMS latents
    (the size an RMS-normed input projected at its trained scale has) within the tolerance: a note; beyond it, the
    mla error."""
    a, b = served.semantics()["mla"]["latent_norm_eps"], trained.semantics()["mla"]["latent_norm_eps"]
    m = eps_mean_square_bound(a, b, RTOL)
    return info(
        f"{label(served)} builds the MLA latent norms (q_a_layernorm, kv_a_layernorm) with eps {a:g}, the trainer "
        f"reading with {b:g}: the normed latents differ only in length, by |sqrt((m + {a:g}) / (m + {b:g})) - 1| "
        f"({eps_scale_change(a, b, 1.0):.2g} at unit RMS), within the forward tolerance ({RTOL:g} relative) for "
        f"latents of mean square m >= {m:.3g} (RMS >= {math.sqrt(m):.3g}); forward.equivalence (--level forward) "
        f"measures the logits on this checkpoint's weights and fails beyond the tolerance. "
        f"{served.sources.get('latent_norm_eps', '?')}; "
        f"{TRANSFORMERS_LATENT_NORMS}; the drafter's trainer is not known (SpecForge 0.2.0 and speculators "
        "0.9.0 train no MLA drafter)", code="latent-norm-eps", file=CONFIG, key="rms_norm_eps")


@check(
    "engine.aux-layers",
    "The engine captures the target layers the drafter was trained on",
    example="aux-ids-in-eagle-config-only",
    per_engine=True,
    guards="Aux ids where the engine does not read them (SGLang reads eagle_config only, vLLM 0.33's V2 runner the "
    "top level only), no ids at all (engine defaults), a count that does not fit fc, trainer and server counting "
    "ids one layer apart (vLLM: the residual entering layer L; SGLang 0.5.6 / SpecForge: the output of layer X; "
    "SGLang 0.5.23: by the TARGET's class, raw ids on DeepSeek/Kimi targets unless the first is 1), ids beyond the "
    "last layer the engine can capture (N on vLLM, N-2 on SGLang's +1 targets).",
    evidence=("vLLM PR #43671 (~10% vs ~45% first-token acceptance, one layer off)", "SGLang PR #25454",
              "vLLM PR #50170 (default layers: 1.21% vs 58.9%)", "SGLang #32226 (count vs fc width)"),
    fix="state the ids in the serving engine's convention, where it reads them (eagle_config and the top level)",
    codes={
        "default-matches": note("no ids where the release reads them, but its default captures the trained layers"),
        "ids-not-read": "the ids are not where the release reads them: it captures its default layers",
        "default-undecided": "no ids where the release reads them, and which layers the drafter was trained on is "
        "not known: whether its default layers are those is not known either",
        "no-ids": "no ids at all: the release captures its default layers",
        "count-mismatch": "the release captures another number of layers than fc takes",
        "target-dependent": "what the release captures depends on the target (pass --target-config)",
        "convention-unknown": note("what the release captures, not judged: how the trainer counted is unknown"),
        "undecided": "how the trainer counted is unknown and another selected release captures other layers: at "
        "most one is right",
        "wrong-layers": "the release captures other target layers than the drafter was trained on",
        "beyond-last-layer": "ids past the last layer the release can capture",
        "launch-ids": note("the release takes the aux layers at launch, not from the checkpoint: the ids to launch "
                           "with (no --launch given)"),
    },
)
def aux_layers(ctx: Context) -> Iterable[Finding]:
    target = engines.target_of(ctx.ckpt, ctx.target)
    trained = engines.trained_aux(ctx.ckpt, ctx.options.aux_convention if ctx.options else None, target,
                                  identity_of(ctx))
    # the trained layers unknown, the ids known: judged under every reading the evidence leaves possible
    every = _every_reading(ctx, trained, target) if trained.layers is None and trained.readings else None
    for f in _aux_layers(ctx, trained):
        if every is not None and f.code in _LAYER_VERDICTS:
            continue
        if trained.basis in KNOWN or f.code in ("count-mismatch", "beyond-last-layer", "no-ids"):
            yield f
        else:  # the trained layers rest on an inferred convention: at most a warning, saying what settles it
            yield dataclasses.replace(f, basis=trained.basis, rests_on=f"how the trainer counted: {trained.how}",
                                      settle="--aux-convention vllm or sglang, --trainer or --source",
                                      severity=Severity.WARNING if f.severity is Severity.ERROR else f.severity)
    yield from every or ()


# what engine.aux-layers concludes about the layers fed (the rest, a count or an id out of reach, holds whoever trained)
_LAYER_VERDICTS = ("default-matches", "ids-not-read", "default-undecided", "no-ids", "target-dependent",
                   "convention-unknown", "undecided", "wrong-layers", "launch-ids")


def _every_reading(ctx: Context, trained: engines.TrainedAux, target: Target | None) -> list[Finding] | None:
    """Which layers the release feeds the drafter, judged under each reading of its ids the evidence leaves possible
    (how its trainer counted them; trained.readings): other layers under every one is known (an error, resting on
    the ids read and the release's capture rule); the trained layers under every one, known too; under some only, a
    warning naming the readings and what settles it. The fix writes ids only where every reading asks for the same
    ones. None when what the release captures depends on the target (the usual findings say so)."""
    served, _ = _readings(ctx)
    eng = label(served)
    profile = engines.profile(release(ctx))
    ids = served.aux_layer_ids
    cap = _as_captured_live(ctx, served, profile.default_capture(target, served) if ids is None
                            else profile.capture(ids, target))
    if cap.layers is None:
        return None
    possible = trained.possible()
    captured = cap.layers
    # an id past the last layer the release can capture feeds nothing (beyond-last-layer): no reading is served
    unreached = ids is not None and cap.last_id is not None and any(i > cap.last_id for i in ids)
    matches = [] if unreached else [who for who, layers in possible.items() if layers == captured]
    how = "; ".join(f"{who}: layers {list(layers)}" for who, layers in possible.items())
    where = served.keys.get("aux_layer_ids") if ids is not None else None
    key = where or profile.ids_pointer[1:].replace("/", ".") if profile.ids_path else where or \
        "eagle_aux_hidden_state_layer_ids"
    said = (f"{eng} finds no aux-layer ids where it reads them ({profile.reads_ids}) and falls back to {cap.rule}"
            if ids is None else f"{eng} captures from ids {ids} ({cap.rule})")
    said += f", the outputs of layers {list(captured)}; the config has {trained.ids} ({trained.field})"
    if len(matches) == len(possible):
        return [info(f"{said}: the layers the drafter was trained on under every reading the evidence leaves "
                     f"possible ({how})", code="default-matches" if ids is None else "convention-unknown",
                     file=CONFIG, key=key)]
    rights = {who: (_where_ids_go(profile, layers, target, trained)[0] if layers else None)
              for who, layers in possible.items()}
    if ids is None and _launch_unstated(ctx, profile):
        return [_launch_note(eng, profile, rights)]
    same = {repr(r) for r in rights.values()}
    right = next(iter(rights.values())) if len(same) == 1 else None
    fixes = "; ".join(f"{who}: {r}" for who, r in rights.items())
    fix = (f"write {right} in {profile.reads_ids} (right under every reading)" if right else
           f"write the ids {eng} needs, which depend on how the trainer counted ({fixes}): --aux-convention, "
           "--trainer or --source settles which, and fix writes them then")
    restored = _as_the_source_served(trained, profile, target) if right is None else None
    if restored is not None:  # the conversion's own defect, whoever trained it: serve what the source served
        right, layers_served, reader = restored
        fix = (f"write {right} in {profile.reads_ids}: the layers {list(layers_served)} that {reader} captured from "
               f"the source's {trained.field.split(': ', 1)[-1]} (the drafter then serves as the source did, under "
               f"every reading of who trained it; which reading is right is still {trained.how})")
    patch = [add(profile.ids_pointer, right)] if right and profile.ids_path else None
    basis = weakest(READ, engines.known_by(release(ctx)))
    if not matches:
        return [error(f"{said}: under every reading of those ids the evidence leaves possible the drafter was "
                      f"trained on other layers ({how})", code="ids-not-read" if ids is None else "wrong-layers",
                      file=CONFIG, key=key,
                      expected=f"the trained layers ({how})", found=f"layers {list(captured)}", basis=basis,
                      rests_on=f"the ids read ({trained.field}) and {eng}'s capture rule; how the trainer counted "
                      f"changes which layers were trained, not that these are not them ({trained.how})",
                      why=f"{eng} feeds the drafter states of layers it was not trained on, whoever trained it "
                      "(vLLM PR #50170: 1.21% acceptance instead of 58.9%; PR #43671: ~10% first-token acceptance "
                      "instead of ~45% one layer off)", fix=fix, patch=patch)]
    return [warning(f"{said}: the layers the drafter was trained on only if {' or '.join(matches)}; other layers "
                    f"under the other readings ({how})", code="default-undecided" if ids is None else "undecided",
                    file=CONFIG, key=key,
                    expected=f"the trained layers ({how})", found=f"layers {list(captured)}", basis=ASSUMED,
                    rests_on=f"how the trainer counted: {trained.how}",
                    settle="--aux-convention vllm or sglang, --trainer or --source (and --target-config)",
                    why=f"served as trained under {len(matches)} of {len(possible)} readings; the others feed states "
                    "one layer off (vLLM PR #43671: ~10% first-token acceptance instead of ~45%)", fix=fix)]


def _as_the_source_served(trained: engines.TrainedAux, profile, target: Target | None
                          ) -> tuple[list[int], tuple[int, ...], str] | None:
    """With --source, the ids that make this release capture what the engine reading the source's own field captured
    from it (its top-level ids: vLLM's count; its eagle_config ids: SGLang's rule for the target): a conversion that
    lost or moved the ids is repaired by restoring what the source served, the same under every reading of who
    trained it. None without a source, or where no ids express those layers."""
    if not trained.field.startswith("--source: ") or not trained.ids:
        return None
    field = trained.field.split(": ", 1)[1]
    reader = engines.newest("vllm" if field == ".".join(engines.TOP_IDS) else "sglang")
    served = reader.capture(list(trained.ids), target).layers
    if served is None:
        return None
    right = _where_ids_go(profile, served, target, trained)[0]
    return (right, served, reader.spec) if right else None


def _launch_unstated(ctx: Context, profile) -> bool:
    """The release takes the aux layers at launch (TensorRT-LLM's eagle3_layers_to_capture) and no --launch settings
    were given for it: what it captures is the launch's to say, not the checkpoint's."""
    return bool(profile.launch_ids) and (ctx.options is None or ctx.options.launch_for(profile.spec) is None)


def _launch_note(eng: str, profile, ids: dict[str, list[int] | None]) -> Finding:
    known = {who: r for who, r in ids.items() if r}
    said = "; ".join(f"{who}: {r}" for who, r in known.items()) if len(known) > 1 else \
        (str(next(iter(known.values()))) if known else "")
    return info(f"{eng} reads no aux-layer ids from the checkpoint: it takes them at launch ({profile.launch_ids})"
                + (f"; launch it with {profile.launch_ids}: {said}" if said else
                   "; which ids to launch with needs the layers the drafter was trained on (--aux-convention, "
                   "--trainer or --source, and --target-config)"),
                code="launch-ids", key=f"launch: {profile.launch_ids}",
                fix=f"eagle3-checks recipe --engine {profile.name} writes the launch settings; --launch "
                f"{profile.name}=FILE gates with them")


def _aux_layers(ctx: Context, trained: engines.TrainedAux) -> Iterable[Finding]:
    served, _ = _readings(ctx)
    eng = label(served)
    _builds_drafter(served)
    profile, target = engines.profile(release(ctx)), engines.target_of(ctx.ckpt, ctx.target)
    ids, layers = served.aux_layer_ids, trained.layers
    right, patch, key, fix = _where_ids_go(profile, layers, target, trained)
    if ids is None and _launch_unstated(ctx, profile):
        yield _launch_note(eng, profile, {"trained": right} if layers else {})
        return
    if ids is None:
        default = _as_captured_live(ctx, served, profile.default_capture(target, served))
        if layers and default.layers == layers:
            yield info(f"{eng} finds no aux-layer ids where it reads them ({profile.reads_ids}) and falls back to "
                       f"{default.rule}, which captures the layers the drafter was trained on {list(layers)}",
                       code="default-matches",
                       file=CONFIG, key=key, fix="write the ids where the engine reads them anyway", patch=patch)
        elif trained.ids and layers is None:  # what it was trained on is not known: neither is whether it matters
            yield warning(f"{eng} finds no aux-layer ids where it reads them and falls back to {default.rule}; the "
                          f"config has {trained.ids} ({trained.field}), and which layers the drafter was trained on "
                          f"is not known ({trained.how})", file=CONFIG, key=key,
                          expected=f"ids in {profile.reads_ids}", found=served.sources["aux_layer_ids"],
                          basis=ASSUMED, rests_on=f"how the trainer counted: {trained.how}",
                          settle="--aux-convention vllm or sglang, --trainer or --source (and --target-config)",
                          why=f"{eng} captures its default layers, which need not be the ones the drafter was "
                          "trained on (vLLM PR #50170: 1.21% acceptance instead of 58.9%)",
                          fix=_no_ids_fix(eng, trained, target, profile), code="default-undecided")
        elif trained.ids:
            yield error(f"{eng} finds no aux-layer ids where it reads them; the config has {trained.ids} "
                        f"({trained.field})", file=CONFIG, key=key, expected=f"ids in {profile.reads_ids}",
                        found=served.sources["aux_layer_ids"],
                        why=f"{eng} captures its default layers, not the ones the drafter was trained on "
                        "(vLLM PR #50170: 1.21% acceptance instead of 58.9%)",
                        fix=fix(f"the trained layers {list(layers or ())}, counted {eng}'s way") if right else
                        _no_ids_fix(eng, trained, target, profile),
                        patch=patch, code="ids-not-read")
        else:
            yield warning(f"{eng} finds no aux-layer ids and falls back to its default layers",
                          code="no-ids", file=CONFIG, key=key, found="absent",
                          why="the defaults need not be the layers the drafter was trained on",
                          fix="state the ids the drafter was trained on")
        return
    where = served.keys["aux_layer_ids"]
    fc = ctx.ckpt.shape("fc.weight")
    ht = served.target_hidden_size
    if fc and len(fc) == 2 and ht and fc[1] % ht == 0 and len(ids) != fc[1] // ht:
        yield error(f"{eng} captures {len(ids)} layers {ids}, fc takes {fc[1] // ht} states of {ht}",
                    code="count-mismatch", file=CONFIG, key=where, expected=f"{fc[1] // ht} ids", found=str(ids),
                    why="the fused state does not fit fc: the engine fails at the first draft step (SGLang #32226)",
                    fix="state exactly the ids the drafter was trained on")
    cap = _as_captured_live(ctx, served, profile.capture(ids, target))
    if cap.layers is None:
        outcomes = "; ".join(f"on {which}: the outputs of layers {list(got)}" for which, got in cap.outcomes)
        if layers and any(got != layers for _, got in cap.outcomes):
            yield warning(f"{eng} captures from ids {ids} layers that depend on the target: {outcomes}; the drafter "
                          f"was trained on the outputs of layers {list(layers)} ({trained.convention} convention: "
                          f"{trained.how})", file=CONFIG, key=where, expected=f"layers {list(layers)}",
                          code="target-dependent",
                          found=outcomes, why=f"{cap.rule}: on some targets the drafter is fed states one layer off "
                          "(SGLang PR #25454: about 0.10 accept length on Kimi-K2.5)",
                          fix="pass --target-config (the verifier's config.json) so the gate knows which")
        elif not layers:
            yield _unjudged(ctx, eng, f"{eng} captures from ids {ids} layers that depend on the target: {outcomes}; "
                            f"how the trainer counted is {trained.how}", None, where)
    elif layers is None:
        yield _unjudged(ctx, eng, f"{eng} captures the outputs of layers {list(cap.layers)} from ids {ids} "
                        f"({cap.rule}); how the trainer counted is {trained.how}", cap.layers, where)
    elif cap.layers != layers:
        yield error(
            f"{eng} captures the outputs of layers {list(cap.layers)} from ids {ids}; the drafter was trained on "
            f"layers {list(layers)} ({trained.convention} convention: {trained.how})",
            file=CONFIG, key=where, expected=str(right) if right else f"layers {list(layers)}", found=str(ids),
            why=f"{cap.rule}. States one layer off: vLLM PR #43671 measured ~10% first-token acceptance instead of "
            "~45%; SGLang PR #25454 about 0.10 accept length on Kimi-K2.5",
            fix=f"for {eng}, {fix('the same layers, counted its way')}" if right else
            _no_ids_fix(eng, trained, target, profile),
            patch=patch, code="wrong-layers")
    if cap.last_id is not None:
        above = [i for i in ids if i > cap.last_id]
        if above:
            n = target.num_layers if target else None
            yield error(f"{eng} captures nothing for ids {above}: the target has {n} layers and the last id "
                        f"{eng} can capture is {cap.last_id}", code="beyond-last-layer", file=CONFIG, key=where,
                        expected=f"ids <= {cap.last_id}", found=str(ids),
                        why=f"{cap.rule}; the drafter is fed no state (or the server fails) for those layers",
                        fix="check the ids and that --target-config is the verifier's config")


def _as_captured_live(ctx: Context, served: Reading, cap: Capture) -> Capture:
    """The layers the installed engine captured, for a release judged live (its recording says), else ``cap``."""
    spec = release(ctx)
    if ctx.options is None or spec not in dict(ctx.options.live):
        return cap
    got = live_recording(ctx, spec)
    layers = None if isinstance(got, live.CannotJudge) else verdict.captured(got.record)
    if layers is None:
        return cap
    return dataclasses.replace(cap, layers=layers, outcomes=(), rule=f"{verdict.said_by(served)} captures them "
                               f"(the profile's rule: {cap.rule})")


def _unjudged(ctx: Context, eng: str, said: str, layers: tuple[int, ...] | None, where: str) -> Finding:
    """What a release captures when the trained layers are unknown: a note, unless another selected release
    captures other layers from this file; then at most one of them feeds the trained layers (the warning
    config.aux-layers gives), and the matrix shows it for each."""
    others = {spec: got for spec, (_, _, got) in engine_captures(ctx).items() if spec != release(ctx)}
    differ = {spec: got for spec, got in others.items() if layers is None or got is None or got != layers}
    if not differ:
        return info(said, code="convention-unknown", file=CONFIG, key=where)
    named = "; ".join(f"{spec}: {list(got) if got is not None else 'depends on the target'}"
                      for spec, got in differ.items())
    return warning(said, code="undecided", file=CONFIG, key=where, expected="the layers the drafter was trained on",
                   found=f"this release: {list(layers) if layers is not None else 'depends on the target'}; "
                   f"{named}",
                   why="the selected releases capture different target layers from this file, so at most one of "
                   "them feeds the drafter what it was trained on; the other is one layer off (vLLM PR #43671: ~10% "
                   "first-token acceptance instead of ~45%)",
                   fix="pass --aux-convention vllm or sglang (how the trainer counted) and --target-config, then "
                   "follow this check's fix for each engine")


def _where_ids_go(profile, layers, target, trained):
    """(the ids that make the release capture ``layers``, the config patch that writes them, the key the findings
    name, fix(why) -> the words of the fix): in the config field the release reads, or in the launch option it takes
    them from (TensorRT-LLM), or nowhere (a release that reads no ids)."""
    if profile.ids_path:
        right = engines.ids_where_read([profile.spec], layers, target)[profile.ids_pointer] if layers else None
        patch = [add(profile.ids_pointer, right), *trained.hold(profile.ids_pointer)] if right else None
        return right, patch, profile.ids_pointer[1:].replace("/", "."), \
            lambda why: f"write {right} in {profile.reads_ids} ({why})"
    if profile.launch_ids:
        right = profile.ids_for(layers, target) if layers else None
        if right is not None and not engines.reaches(profile, right, layers, target):
            right = None
        return right, None, f"launch: {profile.launch_ids}", \
            lambda why: (f"launch with {profile.launch_ids}: {right} ({why}; eagle3-checks recipe --engine "
                         f"{profile.name} writes the launch settings; --launch {profile.name}=FILE gates with them)")
    return None, None, "eagle_aux_hidden_state_layer_ids", lambda why: ""


def _no_ids_fix(eng: str, trained: engines.TrainedAux, target: Target | None, profile=None) -> str:
    """What to do when no ids can be advised for a release: say which fact is missing."""
    if profile is not None and not profile.ids_path and not profile.launch_ids:
        return (f"{eng} reads no aux-layer ids ({profile.reads_ids}): serve the drafter with another engine, or "
                "train it on the layers this one captures")
    if trained.convention is None:
        return f"how the trainer counted is unknown ({trained.how}): pass --aux-convention (and --target-config)"
    if trained.layers is None or target is None or target.architecture is None:
        return (f"the ids for {eng} depend on the target's class ({trained.how}): pass --target-config (the "
                "verifier's config.json)")
    return (f"no ids make {eng} capture the trained layers {list(trained.layers)} on {target.architecture}: serve "
            "with another engine or release")


@check(
    "engine.serving",
    "Serving limits: context length, verifier path",
    example="local-verifier",
    per_engine=True,
    guards="A drafter max_position_embeddings below the context the engine serves (SGLang, from the target's "
    "context or --context-length, refuses to start unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1; vLLM 0.33 "
    "raises it for plain RoPE but caps max_model_len for yarn), a speculators verifier that is a "
    "local path (vLLM's `vllm serve DRAFTER` shortcut refuses it).",
    evidence=("vLLM #34734 (no drafting past 2048 tokens)", "SGLang 0.5.23 srt/configs/model_config.py:1291-1316 "
              "(startup ValueError), srt/speculative/eagle_worker_v2.py:222-232 (the draft gets the target's "
              "context), srt/arg_groups/fields/model.py:110-117 (--context-length)", "vLLM 0.33.0 "
              "config/speculative.py _maybe_override_draft_max_position_embeddings"),
    fix="state the max_position_embeddings of the target, and name the verifier by its hub id",
    codes={
        "context-raised": note("the release raises the draft's max_position_embeddings to --max-model-len"),
        "context-too-short": "max_position_embeddings below the served context (--max-model-len, or the target's "
        "on SGLang): the release refuses or caps it",
        "local-verifier": "the speculators verifier is not a hub id (`vllm serve DRAFTER` refuses it)",
        "tp-heads": "the drafter's attention heads do not divide by the tensor-parallel size (--tp)",
        "tp-kv-heads": "the drafter's KV heads and the tensor-parallel size do not divide one another (--tp)",
        "pp-embedding": "pipeline parallelism (--pp) and no embedding in the drafter",
    },
)
def serving(ctx: Context) -> Iterable[Finding]:
    served, _ = _readings(ctx)
    eng = label(served)
    _builds_drafter(served)
    options = ctx.options
    for p in preconditions(engines.profile(release(ctx)).launch, served, options.tensor_parallel if options else None,
                           options.pipeline_parallel if options else None):
        yield error(f"{eng}: {p.message}", code=p.code, key=p.key, expected=p.expected, found=p.found, why=p.why,
                    fix=p.fix, file=CONFIG if not p.key.endswith(".weight") else None)
    want = ctx.options.max_model_len if ctx.options else None
    limit = engines.profile(release(ctx)).serving
    said = limit(served, want, ctx.target) if limit else None  # the one place a context verdict is made
    if said:
        if said.severity == "info":
            yield info(f"{eng} {said.message}", code="context-raised", file=CONFIG, key=said.key)
        else:
            yield error(f"{eng} {said.message}", file=CONFIG, key=said.key, expected=said.expected,
                        found=said.found, why=said.why, fix=said.fix, patch=said.patch, code="context-too-short")
    build = engines.profile(release(ctx)).drafter_launch
    for p in build(ctx.ckpt.config_raw or {}, ctx.ckpt.layout) if build else ():
        yield warning(f"{eng}: {p.message}", code=p.code, file=CONFIG, key=p.key, expected=p.expected,
                      found=p.found, why=p.why, fix=p.fix)


@check(
    "engine.release",
    "The release judged is one a recording covers",
    example="unrecorded-release",
    per_engine=True,
    guards="A verdict about a release the gate has no recording of, given as if it were known: a release between "
    "two recorded ones whose readings differ, or outside every profile's range, is judged by the nearest recorded "
    "release, and what changed in it is not modelled (vLLM changed its aux-id reading, its embedding and lm_head "
    "sharing and its head_dim narrowing from release to release).",
    evidence=("vLLM PR #28549 (before it, the target's lm_head and embedding replaced a drafter's own: mean "
              "acceptance 1.32 instead of 2.49)", "vLLM 0.32.0 v1/worker/gpu/model_runner.py:299-307 vs 0.33.0 "
              "eagle3_utils.py requires_aux_hidden_states (aux states captured for a drafter that uses none)"),
    fix="record the release (conformance/run.sh NAME@VERSION) or judge with a recorded one",
    codes={"nearest": "no recording covers the release: it is judged as the nearest recorded one"},
)
def release_covered(ctx: Context) -> Iterable[Finding]:
    spec = release(ctx)
    said = engines.release_warning(spec)
    if said:
        name = spec.split("@", 1)[0]
        yield warning(said, code="nearest", file=CONFIG, key="--engine", basis=INFERRED,
                      rests_on=f"{spec} read as the nearest recorded release",
                      settle=f"a recording of {spec} (conformance/run.sh {spec})",
                      expected=f"a modelled {name} release ({', '.join(p.range for p in engines.versions(name))})",
                      found=spec.replace("@", " "),
                      why="each recorded release is held to what its loader did; one in between or beyond may load "
                      "drafters otherwise, and the verdict would not know it",
                      fix=f"judge with a recorded release, or record {spec} (conformance/run.sh {spec})")


@check(
    "engine.live",
    "The installed engine's own loader agrees with the modelled release",
    example="live-engine-disagrees",
    per_engine=True,
    live_only=True,
    needs=("target",),
    guards="A verdict about the release on the serving box taken from a model of its source: the installed engine "
    "(--engine vllm@installed, --engine-python for the serving image's interpreter) runs its own config parsing "
    "and weight loading on the candidate, on CPU, with the conformance recorders' instrumentation, and where it "
    "refuses the checkpoint, leaves a parameter unwritten, cuts a tensor or captures other layers than the gate's "
    "profile of that release predicts, the engine's verdict stands and the profile is wrong.",
    evidence=("vLLM 0.32.0 v1/worker/gpu/model_runner.py:299-307 (aux states captured for a drafter that uses "
              "none: found by recording, not by reading)",),
    fix="follow the engine's own verdict; report the profile's disagreement with the recording attached",
    codes={
        "refused": "the installed engine refuses the checkpoint",
        "unwritten": "the installed engine leaves parameters unwritten (they keep their initial values)",
        "narrowed": "the installed engine cuts a tensor larger than its parameter to fit",
        "disagrees": "the modelled release predicts otherwise than the installed engine did",
        "cannot-judge": "the installed release cannot judge this checkpoint live (the reason is given)",
        "agrees": note("the installed engine loaded the candidate as the profile predicts"),
        "computes-otherwise": "the installed engine's own code computes other logits than the modelled reading "
        "(forward level)",
        "computes-as-modelled": note("the installed engine's own code computes what the modelled reading computes "
                                     "(forward level)"),
        "compute-unjudged": note("the installed engine's own compute cannot judge this drafter (the reason is "
                                 "given): the forward level uses the modelled reading"),
    },
)
def engine_live(ctx: Context) -> Iterable[Finding]:
    spec = release(ctx)
    got = live_recording(ctx, spec)
    name = spec.replace("@", " ")
    if isinstance(got, live.CannotJudge):
        yield error(f"cannot judge {name} live: {got}", code="cannot-judge", file=CONFIG, key="--engine",
                    expected="a recording of the candidate by the installed engine", found=str(got),
                    why="the verdicts below are the profile's alone; the installed engine itself said nothing",
                    fix="check --engine-python names the serving environment's interpreter, or record this release "
                    f"with conformance/run.sh {spec} and report what the recorder does not know")
        return
    rec = got.record
    where = f"(live, {got.seconds:.0f} s)"
    if rec.get("refused"):
        refused = rec["refused"]
        yield error(f"{name} refuses the checkpoint {where}: {refused['type']}: {refused['message'][:300]}",
                    code="refused", file=CONFIG, key=refused.get("at") or "--engine",
                    expected="the engine builds and loads the drafter", found=f"{refused['type']} at the "
                    f"{refused.get('stage', '?')} stage ({refused.get('at') or 'no engine frame'})",
                    why="the server fails to start with this drafter", fix="see engine.loads for what to change")
    served = served_by(ctx, spec, modelled=True)
    unwritten = left_unwritten(rec, served)
    if unwritten and not rec.get("refused"):
        yield error(f"{name} leaves {len(unwritten)} parameter(s) unwritten {where}: {_listing(unwritten)}",
                    code="unwritten", key=unwritten[0], expected="every parameter loaded from the checkpoint",
                    found=f"{_listing(unwritten)} keep their initial values",
                    why="the engine raises nothing and computes with uninitialised weights: acceptance collapses",
                    fix="add the missing tensors, or fix the config field that makes the engine build them")
    narrowed = sorted(n for n, loads in rec.get("loaded", {}).items() if any(x.get("narrowed") for x in loads))
    if narrowed:
        yield error(f"{name} cuts {len(narrowed)} tensor(s) to fit their parameters {where}: {_listing(narrowed)}",
                    code="narrowed", key=narrowed[0], expected="each tensor the shape of its parameter",
                    found=f"{_listing(narrowed)} larger than the parameters built from config.json",
                    why="the engine keeps the first rows and serves a different attention or projection",
                    fix="state the config values the tensors were trained with (head_dim, the head counts)")
    serving = engines.profile(spec).serving
    limit = serving(served, ctx.options.max_model_len, ctx.target) if serving else None
    cpu_only = bool(rec.get("refused") and rec["refused"].get("cpu_only"))
    found = disagreements(rec, served, engines.profile(spec), engines.target_of(ctx.ckpt, ctx.target),
                          loaded=not cpu_only, limit=limit)
    if found:
        profile = engines.profile(spec)
        yield error(f"the gate's {profile.name} {profile.judged_by or profile.version} profile disagrees with the "
                    f"installed {name} {where}: {found[0]}", code="disagrees", file=CONFIG, key="--engine",
                    expected="the profile predicts what the engine does", found=" | ".join(found[:4]),
                    why="the engine's own verdict stands: engine.loads, engine.semantics and engine.aux-layers for "
                    "this release take it; the profile predicted otherwise and is wrong there",
                    fix=f"follow the engine; report the disagreement with `conformance/run.sh {spec}` attached so "
                    "the profile can be corrected")
    elif not rec.get("refused") and not unwritten and not narrowed:
        yield info(f"{name} loads the candidate as the profile predicts {where}", code="agrees")
    yield from _own_compute(ctx, spec, served)


def _own_compute(ctx: Context, spec: str, served: Reading) -> Iterable[Finding]:
    """At the forward level: the installed engine's own drafter forward against the modelled reading's, on the same
    inputs (eagle3_checks.live.compute; the recorders' _compute.py says what is the engine's and what is not)."""
    run = live_run(ctx, spec)
    if run is None or isinstance(run.computed, live.CannotJudge):
        return  # not at the forward level, or the engine cannot be run at all (cannot-judge above says why)
    computed = run.computed
    rec = computed.record
    if "cannot_judge" in rec:
        yield info(f"{computed.said_by} cannot be judged on this drafter: {rec['cannot_judge']}",
                   code="compute-unjudged")
        return
    if "not_computed" in rec or "computes_nan" in rec:
        return  # refused or unwritten parameters: reported above
    found = compare_live(computed, served, _weights(ctx, ctx.ckpt), run.runs, STEPS,
                         embedding=run.inputs.target_embedding)
    if found:
        yield error(f"the modelled {served.engine} {served.version} reading computes other logits than "
                    f"{computed.said_by} (live, {computed.seconds:.0f} s): {found[0]}", code="computes-otherwise",
                    file=CONFIG, key="--engine", expected="the modelled reading computes what the engine computes",
                    found=" | ".join(found[:3]),
                    why="the forward and acceptance levels judge the engine's own logits where it computed them; "
                    "the modelled reading, used without --engine NAME@installed, would judge another drafter",
                    fix=f"report the disagreement with `conformance/run.sh {spec}` (its compute recording) attached, "
                    "so the reading can be corrected", basis=RECORDED)
    else:
        yield info(f"{computed.said_by} computes what the modelled reading computes: {STEPS} draft steps over "
                   f"{TOKENS} tokens, every logit to float32 rounding (live, {computed.seconds:.0f} s)",
                   code="computes-as-modelled", basis=RECORDED)
