"""reference.diff: the candidate is built like a known-good reference drafter.

What breaks and what differs are apart. A structural difference (a tensor one side lacks, a shape, a config field
that sizes tensors, a dtype engines do not cast like a weight) means the candidate is not built like the reference:
an error. A semantic value (eps, rope, the norm flags, the activation, head_dim, tied embeddings) is what the drafter
computes with: every engine serves the value the checkpoint states, which is the value it was trained with unless an
export changed it, and the reference's value is another drafter's, no evidence for this one. Such a difference is a
warning that says what each selected engine release computes with either value and what the difference costs against
the forward tolerance; its fix never takes the reference's value. A floating dtype engines cast on load is a note, and
aux ids are compared by the target layers they select under each side's counting, not by their numbers.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Iterable
from typing import Any

from .. import engines
from ..basis import INFERRED, READ
from ..drafter.checkpoint import Checkpoint
from ..drafter.config_values import TLC
from ..drafter.families.mla import eps_mean_square_bound, eps_scale_change
from ..drafter.layout import SPECULATORS
from ..drafter.spec import (
    AUX_MEANING,
    CHOICE,
    NULLABLE,
    OPTIONAL_ROLES,
    TRAINER_CHOICES,
    Spec,
    chosen,
    config_fields,
    same_value,
    snapshot,
)
from ..engines import trainer_capture
from ..engines.reading import effect
from ..numerics import RTOL
from ..registry import (
    CONFIG,
    Context,
    Finding,
    check,
    config_cause,
    error,
    info,
    note,
    warning,
)
from ._common import config_of, reference_of, require_complete


@check(
    "reference.diff",
    "Tensors and semantic config match the reference spec",
    example="rope-theta-off-reference",
    modelled_only=True,
    needs=("reference",),
    guards="A conversion that changed a tensor, a shape or a size relative to a drafter known to serve well (for "
    "Kimi-sized drafters: the AQ-MedAI Kimi-K2 drafter); a semantic value (eps, rope, norm flags) that differs from "
    "the reference's is a warning that says what each engine computes with either value and what it costs; the "
    "trainer's own choices (draft vocabulary, intermediate size, aux ids) and dtypes engines cast on load are notes.",
    fix="restore the reference's tensors and shapes, or diff against the right reference; keep the semantic values "
    "the drafter was trained with",
    codes={
        "layouts-differ": note("the layouts differ: compared by tensor role"),
        "trainer-shape": note("a shape that differs only by the trainer's own choices"),
        "shape": "a tensor of another shape than the reference's",
        "optional-tensor": note("an optional tensor on one side only"),
        "draft-vocab-tensor": note("d2t/t2d on one side only, following the draft vocabulary"),
        "tensor-presence": "a tensor on one side only",
        "dtype": "tensors in a dtype engines do not cast like a floating weight, where the reference's is another",
        "dtype-accepted": note("floating weights in another dtype than the reference's, which engines cast on load"),
        "aux-convention": note("aux ids that select other target layers than the reference's"),
        "aux-not-compared": note("aux ids that differ in number where one side's counting is unknown"),
        "trainer-choice": note("a config field the trainer chooses differs"),
        "config-field": "a config field that sizes tensors differs",
        "semantic": "a semantic value (eps, rope, norm flags, head_dim, ...) differs: what each engine computes with "
        "either, and what the difference costs",
    },
)
def reference_diff(ctx: Context) -> Iterable[Finding]:
    # Against a checkpoint that cannot be read whole, every field and tensor would "differ": the files check
    # already says what is wrong, and the diff would bury it.
    config_of(ctx)  # skips when config.json is missing or unreadable
    require_complete(ctx)
    option = ctx.options.aux_convention if ctx.options else None
    target = engines.target_of(ctx.ckpt, ctx.target)
    candidate = with_aux_layers(snapshot(ctx.ckpt, ctx.ckpt.display), ctx.ckpt, option, target)
    reference = with_aux_layers(reference_of(ctx), None, None, target)
    return diff(candidate, reference, engine_computation(ctx.ckpt, ctx.options.engines(), ctx.target))


def with_aux_layers(spec: Spec, ckpt: Checkpoint | None, option: str | None, target: Any) -> Spec:
    """A copy of ``spec`` with the target layers its aux ids select under its side's counting: a checkpoint's as
    ``engines.trained_aux`` reads them (the ids its trainer wrote, its convention, convert's provenance), a spec's
    from the convention it states (``engines.trainer_capture``). Unknown counting: no layers."""
    if ckpt is not None:
        trained = engines.trained_aux(ckpt, option, target)
        convention, how = engines.trainer_convention(ckpt, option)
        return dataclasses.replace(spec, aux_convention=convention, aux_convention_note=how,
                                   aux_layers=trained.layers, aux_how=trained.how)
    ids = spec.config.get("aux_layer_ids")
    if spec.aux_convention is None or not ids:
        return dataclasses.replace(spec, aux_layers=None, aux_how=spec.aux_convention_note or "counting not stated")
    return dataclasses.replace(spec, aux_layers=trainer_capture(list(ids), spec.aux_convention, target).layers,
                               aux_how=f"{spec.aux_convention} convention: {spec.aux_convention_note}")


# ----- what each engine computes with a semantic value -----------------------------------------------------------

# The semantic config fields a diff reports as warnings, and the fields of an engine's reading that hold what it
# computes with (engines/reading.py Reading). Every other config field the diff compares sizes tensors.
READ_AS = {"rms_norm_eps": ("rms_norm_eps",), "rope_theta": ("rope_theta",), "rope_scaling": ("rope_scaling",),
           "head_dim": ("head_dim",), "hidden_act": ("hidden_act",),
           "norm_before_residual": ("norm_before_residual",), "norm_before_fc": ("input_norm",),
           "fc_norm": ("fc_norm",), "norm_output": ("feedback", "final_norm"),
           "tie_word_embeddings": ("lm_head_from_embed",), "attention_bias": ("attention_bias",),
           "mlp_bias": ("mlp_bias",)}
# Fields of the decoder layer: a speculators config keeps them in transformer_layer_config.
_LAYER_FIELDS = {"rms_norm_eps", "rope_theta", "rope_scaling", "head_dim", "hidden_act", "attention_bias", "mlp_bias"}
# The questions the acceptance level's resolver scores on recorded data (acceptance/resolve.py).
_MEASURED_BY_DATA = {"rope_theta", "norm_before_residual", "norm_output"}

# (field, the candidate's value, the reference's value) -> one statement per engine release
Computes = Callable[[str, Any, Any], list[str]]


def _holders(raw: dict, name: str, layout: str | None) -> list[dict]:
    """The objects of config.json a reader may take ``name`` from: each that states it (top level,
    transformer_layer_config, eagle_config), else where the layout keeps it."""
    nodes = [raw, *(raw[k] for k in (TLC, "eagle_config") if isinstance(raw.get(k), dict))]
    stating = [n for n in nodes if name in n]
    if stating:
        return stating
    if layout == SPECULATORS and name in _LAYER_FIELDS:
        return [raw.setdefault(TLC, {})] if isinstance(raw.get(TLC, {}), dict) else []
    return [raw]


def stating(raw: dict, name: str, value: Any, layout: str | None) -> dict:
    """A copy of config.json that states ``value`` for ``name`` wherever a reader may take it (None: the field left
    unstated, as a config without it), for reading it as each engine would."""
    raw = copy.deepcopy(raw)
    for holder in _holders(raw, name, layout):
        if name == "rope_scaling":
            theta = next((d["rope_theta"] for d in (holder, holder.get("rope_parameters"), holder.get("rope_scaling"))
                          if isinstance(d, dict) and "rope_theta" in d), None)
            scaling = {"rope_type": "default"} if value is None else dict(value)
            if theta is not None:
                scaling["rope_theta"] = theta
            holder["rope_scaling"] = scaling
            if isinstance(holder.get("rope_parameters"), dict):
                holder["rope_parameters"] = dict(scaling)
            continue
        if value is None:
            holder.pop(name, None)
        else:
            holder[name] = value
        if name == "rope_theta":  # a rope_theta inside the rope dicts wins over the top-level one
            for key in ("rope_parameters", "rope_scaling"):
                if isinstance(holder.get(key), dict) and "rope_theta" in holder[key] and value is not None:
                    holder[key]["rope_theta"] = value
    return raw


def engine_computation(ckpt: Checkpoint, specs: Iterable[str], target: Any = None) -> Computes:
    """For a semantic field: what each release in ``specs`` computes with the candidate's value (its config as it
    is) and with the reference's (the same config stating the reference's value), read by the release's own
    reading of the checkpoint (engines.read)."""
    specs = tuple(specs)
    raw = ckpt.config_raw or {}

    def reading(spec: str, config: dict | None, fields: tuple[str, ...]) -> tuple[Any, str] | str:
        r = engines.read(ckpt if config is None else ckpt.with_config(config), spec, target)
        if r.not_modelled or not r.layout_ok or r.class_refusal:
            return "builds no drafter from this checkpoint (see engine.loads)"
        return ({f: getattr(r, f) for f in fields}, "; ".join(dict.fromkeys(r.sources.get(f, "?") for f in fields)))

    def computes(name: str, mine: Any, theirs: Any) -> list[str]:
        fields = READ_AS[name]
        out = []
        for spec in specs:
            label = spec.replace("@", " ")
            as_is, other = reading(spec, None, fields), reading(spec, stating(raw, name, theirs, ckpt.layout), fields)
            if isinstance(as_is, str) or isinstance(other, str):
                out.append(f"{label} {as_is if isinstance(as_is, str) else other}")
            elif as_is[0] == other[0]:
                out.append(f"{label} computes with {_values(as_is[0])} either way ({as_is[1]}): the difference does "
                           "not reach it")
            else:
                out.append(f"{label} computes with {_values(as_is[0])} as the candidate states it ({as_is[1]}), and "
                           f"with {_values(other[0])} where the reference's value is stated")
        return out

    return computes


def _values(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v!r}" for k, v in values.items())


def cost(name: str, mine: Any, theirs: Any, head_dim: Any) -> str:
    """What the difference does to the computation, against the forward tolerance (numerics.RTOL)."""
    if name == "rms_norm_eps" and _positive(mine) and _positive(theirs):
        m = eps_mean_square_bound(mine, theirs, RTOL)
        return (f"an eps of {mine:g} instead of {theirs:g} changes each RMS-normed vector's length only, by "
                f"|sqrt((m + {mine:g}) / (m + {theirs:g})) - 1| ({eps_scale_change(mine, theirs, 1.0):.2g} at unit "
                f"RMS): within the forward tolerance ({RTOL:g} relative) for inputs of mean square m >= {m:.3g} (RMS "
                f">= {math.sqrt(m):.3g}); forward.equivalence (--level forward) measures the logits on this "
                "checkpoint's weights")
    if name == "rope_theta" and _positive(mine) and _positive(theirs) and isinstance(head_dim, int) and head_dim > 2:
        half = head_dim // 2
        step = max(abs(mine ** (-i / half) - theirs ** (-i / half)) for i in range(half))
        if step > 0:
            first = max(1, math.ceil(RTOL / step))
            return (f"with head_dim {head_dim}, the rotation angles differ by up to {step:.3g} radian per position: "
                    f"beyond the forward tolerance ({RTOL:g}) from position {first} on, so attention over the context "
                    "changes")
    reading_field = READ_AS.get(name, (name,))[0]
    return f"{effect(reading_field)}: a change of the computation, beyond the forward tolerance ({RTOL:g})"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


# ----- the diff of two specs -------------------------------------------------------------------------------------

# The config fields that size tensors, in the order a shape difference is put down to them (hidden_size sizes most).
_SIZING = ("hidden_size", "vocab_size", "target_hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
           "intermediate_size", "draft_vocab_size")
# Floating dtypes both engines load into parameters of the served dtype by copying (torch's copy_ casts): vLLM 0.33.0
# model_executor/model_loader/weight_utils.py:1543 (default_weight_loader) and layers/linear.py:412, 606 (the linear
# loaders); SGLang 0.5.23 srt/model_loader/weight_utils.py:1586 and srt/layers/linear.py:379, 582.
CAST_ON_LOAD = ("F32", "F16", "BF16")
_CASTS = ("vLLM 0.33.0 and SGLang 0.5.23 copy each weight into a parameter of the dtype they serve in, and the copy "
          "casts (vLLM model_executor/model_loader/weight_utils.py:1543, layers/linear.py:412; SGLang "
          "srt/model_loader/weight_utils.py:1586, srt/layers/linear.py:379)")
# Integer index tensors: vLLM 0.33.0 copies d2t into an int64 parameter (model_executor/models/llama_eagle3.py:340-343,
# then the same copy), SGLang 0.5.23 adds it to an int64 arange (srt/models/llama_eagle3.py:352); t2d no engine reads.
_INDEX = ("vLLM 0.33.0 copies d2t into an int64 parameter (model_executor/models/llama_eagle3.py:340-343), SGLang "
          "0.5.23 adds it to an int64 arange (srt/models/llama_eagle3.py:352), and no engine reads t2d")
_INTEGER = ("I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64", "BOOL")


def _accepted(found: str, want: str) -> str | None:
    """Why engines load ``found`` where the reference has ``want`` and compute with the same values (None: they do
    not: another kind of tensor, or a floating dtype they do not cast like a weight)."""
    if found in CAST_ON_LOAD and want in CAST_ON_LOAD:
        return (f"{_CASTS}: either dtype is served as the engine's own; the stored precision (and the size on disk) "
                "differs, not a structure")
    if found in _INTEGER and want in _INTEGER:
        return f"{_INDEX}: the same ids in either integer type (dtypes judges a narrow one)"
    return None


def _sized_by(c: tuple, r: tuple, c_cfg: dict, r_cfg: dict) -> str | None:
    """The sizing field that differs between the two configs and explains a differing dimension (both sides hold the
    same multiple of their own value there: 2 x hidden_size in a q_proj of two hidden states), or None."""
    if len(c) != len(r):
        return None
    for name in _SIZING:
        a, b = c_cfg.get(name), r_cfg.get(name)
        if not (isinstance(a, int) and isinstance(b, int) and a > 0 and b > 0 and a != b):
            continue
        if any(x != y and x % a == 0 and y % b == 0 and x // a == y // b for x, y in zip(c, r, strict=True)):
            return name
    return None


def diff(candidate: Spec, reference: Spec, computes: Computes | None = None) -> list[Finding]:
    """Differences between a candidate and a reference, as findings (no check id yet). ``computes``: what each
    selected engine release computes with a semantic value (:func:`engine_computation`); without it (a spec on both
    sides) the warning says what the value does, not what an engine reads."""
    out: list[Finding] = []
    ref = reference.name
    dv_differs = not same_value(candidate.config.get("draft_vocab_size"), reference.config.get("draft_vocab_size"))
    if candidate.layout and reference.layout and candidate.layout != reference.layout:
        out.append(info(f"layouts differ: {candidate.layout} vs {ref}'s {reference.layout}; compared by tensor role",
                        code="layouts-differ", expected=reference.layout, found=candidate.layout, basis=READ))

    dtype_changes: dict[tuple[str, str], list[str]] = {}
    for role in sorted(set(candidate.tensors) | set(reference.tensors)):
        c, r = candidate.tensors.get(role), reference.tensors.get(role)
        c_has, r_has = bool(c and c.present), bool(r and r.present)
        if c is not None and r is not None and c_has and r_has:
            picked = chosen(role, c.shape, r.shape, candidate.config, reference.config) if c.shape != r.shape else []
            if picked:
                out.append(info(f"{role}: shape {list(c.shape)}, {ref} has {list(r.shape)} (follows "
                                f"{', '.join(picked)}: {CHOICE})", key=role, expected=str(list(r.shape)),
                                found=str(list(c.shape)), code="trainer-shape", basis=READ))
            elif c.shape != r.shape:
                sized_by = _sized_by(c.shape, r.shape, candidate.config, reference.config)
                out.append(error(f"{role}: shape {list(c.shape)}, {ref} has {list(r.shape)}", code="shape", key=role,
                                 expected=str(list(r.shape)), found=str(list(c.shape)),
                                 cause=config_cause(sized_by) if sized_by else None, basis=READ,
                                 why="a drafter of another shape family: it cannot be served where the reference is",
                                 fix="compare against the reference of this drafter's size, or fix the export"))
            if c.dtype != r.dtype:
                dtype_changes.setdefault((c.dtype, r.dtype), []).append(role)
        elif c_has or r_has:
            optional = bool((r and r.optional) or (c and c.optional and role in OPTIONAL_ROLES))
            where = "the candidate" if c_has else ref
            if optional:
                out.append(info(f"{role}: only {where} has it (optional)", code="optional-tensor", key=role,
                                basis=READ))
            elif role in ("d2t", "t2d") and dv_differs:
                out.append(info(f"{role}: only {where} has it (follows draft_vocab_size: {CHOICE})",
                                code="draft-vocab-tensor", key=role, basis=READ))
            else:
                out.append(error(f"{role}: only {where} has it", code="tensor-presence", key=role, basis=READ,
                                 expected="present" if r_has else "absent", found="present" if c_has else "absent",
                                 why="the drafter is not built like the reference: a tensor was dropped or added",
                                 fix="re-export the missing tensor" if r_has else "remove the extra tensor or the "
                                 "config flag that asks for it"))
    out += _dtype_findings(dtype_changes, ref)

    for name in dict.fromkeys(config_fields(candidate.config) + config_fields(reference.config)):
        c, r = candidate.config.get(name), reference.config.get(name)
        if name == "aux_layer_ids":
            out += _aux(candidate, reference)
            continue
        if same_value(c, r):
            continue
        shown = {k: "unknown (missing or invalid)" if v is None and name not in NULLABLE else repr(v)
                 for k, v in (("c", c), ("r", r))}
        if name in TRAINER_CHOICES and c is not None:
            out.append(info(f"config {name}: {shown['c']}, {ref} has {shown['r']} ({CHOICE})", key=name,
                            expected=shown["r"], found=shown["c"], code="trainer-choice", basis=READ))
        elif name in READ_AS:
            out.append(_semantic(name, c, r, shown, ref, candidate, computes))
        else:
            out.append(error(f"config {name}: {shown['c']}, {ref} has {shown['r']}", key=name, expected=shown["r"],
                             found=shown["c"], file=CONFIG, basis=READ,
                             why=f"another {name} than the reference's: {name} sizes tensors, so the drafter is not "
                             "built like the reference",
                             fix=f"state {name} as the drafter was built, or diff against the right reference",
                             code="config-field"))
    return out


def _dtype_findings(changes: dict[tuple[str, str], list[str]], ref: str) -> list[Finding]:
    out = []
    for (found, want), roles in changes.items():
        listing = ", ".join(roles[:4]) + (f", ... ({len(roles) - 4} more)" if len(roles) > 4 else "")
        message = f"{len(roles)} tensor(s) are {found}, {ref} has {want}: {listing}"
        accepted = _accepted(found, want)
        if accepted:
            out.append(info(message, code="dtype-accepted", key=roles[0], expected=want, found=found, basis=READ,
                            why=accepted))
            continue
        out.append(error(message, code="dtype", key=roles[0], expected=want, found=found, basis=READ,
                         why=f"{found} where {ref} has {want} is another kind of tensor, not a weight engines cast "
                         f"on load ({', '.join(CAST_ON_LOAD)}: {_CASTS}): a float d2t stays float (SGLang 0.5.23 "
                         "srt/models/llama_eagle3.py:352 adds an int64 arange to it as loaded), quantised data needs "
                         "its scales",
                         fix=f"save these tensors as {want}"))
    return out


def _semantic(name: str, c: Any, r: Any, shown: dict[str, str], ref: str, candidate: Spec,
              computes: Computes | None) -> Finding:
    """A semantic value that differs: a warning stating what each engine computes with either value and what the
    difference costs. Its fix keeps the drafter's own value: the reference's is another drafter's."""
    head_dim = candidate.config.get("head_dim") or candidate.config.get("qk_rope_head_dim")
    if not isinstance(head_dim, int):
        h, n = candidate.config.get("hidden_size"), candidate.config.get("num_attention_heads")
        head_dim = h // n if isinstance(h, int) and isinstance(n, int) and n else None
    engines_say = computes(name, c, r) if computes is not None else []
    said = ("; ".join(engines_say) + ". ") if engines_say else ""
    settle = "--source ORIGINAL (the forward level compares this drafter with the checkpoint it was converted from)"
    if name in _MEASURED_BY_DATA:
        settle += "; --data (the acceptance level scores what the weights were trained with: acceptance.trained-with)"
    return warning(
        f"config {name}: {shown['c']}, {ref} has {shown['r']}", key=name, expected=shown["r"], found=shown["c"],
        file=CONFIG, code="semantic", basis=READ, settle=settle,
        why=f"{said}{_sentence(cost(name, c, r, head_dim))}. A semantic value, not a structure: engines serve the "
        "value the checkpoint states, which is the one it was trained with unless an export changed it",
        fix=f"keep {name} as the drafter was trained: {ref}'s value is another drafter's, no evidence for this one; if "
        "an export changed it, restore the original's (--source compares the two)")


def _aux(candidate: Spec, reference: Spec) -> list[Finding]:
    """Aux ids, compared by the target layers each side's ids select under its own counting; by their numbers only
    where one side's counting is not known (a note that says so)."""
    ref = reference.name
    c, r = candidate.config.get("aux_layer_ids"), reference.config.get("aux_layer_ids")
    cl, rl = candidate.aux_layers, reference.aux_layers
    rests_on = f"the candidate: {candidate.aux_how or 'counting unknown'}; {ref}: {reference.aux_how or 'unknown'}"
    if c and r and cl is not None and rl is not None:
        if cl == rl:
            return []
        cc, rc = candidate.aux_convention, reference.aux_convention
        meaning = "; ".join(f"{conv}: {AUX_MEANING[conv]}" for conv in dict.fromkeys((cc, rc)) if conv in AUX_MEANING)
        return [info(
            f"aux layers: the candidate's ids {c} ({cc} convention) capture the outputs of target layers {list(cl)}, "
            f"{ref}'s ids {r} ({rc} convention) capture layers {list(rl)}",
            code="aux-convention", key="aux_layer_ids", expected=f"outputs of layers {list(rl)}",
            found=f"outputs of layers {list(cl)}", basis=INFERRED, rests_on=rests_on,
            settle="--aux-convention (how the candidate's trainer counted)",
            why=f"{meaning + '. ' if meaning else ''}One layer off cost ~35 points of first-token acceptance (vLLM PR "
            f"#43671). Which layers: {CHOICE}; engine.aux-layers checks the serving side",
            fix="confirm which layers the drafter was trained on and state them in the serving engine's convention")]
    if same_value(c, r):
        return []
    unknown = [side for side, layers in (("the candidate", cl), (ref, rl)) if layers is None]
    return [info(f"config aux_layer_ids: {c!r}, {ref} has {r!r}; which target layers {' and '.join(unknown)} "
                 f"select{'s' if len(unknown) == 1 else ''} is not known: compared as numbers",
                 code="aux-not-compared", key="aux_layer_ids", expected=repr(r), found=repr(c), basis=INFERRED,
                 rests_on=rests_on, settle="--aux-convention (how the candidate's trainer counted)",
                 why=f"ids are counted differently by trainers and engines (vllm: {AUX_MEANING['vllm']}; sglang: "
                 f"{AUX_MEANING['sglang']}): equal numbers may select other layers, and other numbers the same. "
                 f"Which layers: {CHOICE}; engine.aux-layers checks the serving side")]
