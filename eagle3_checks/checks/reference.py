"""reference.diff: the candidate is built like a known-good reference drafter."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from .. import engines
from ..drafter.spec import AUX_MEANING, NULLABLE, OPTIONAL_ROLES, Spec, config_fields, snapshot
from ..engines import trainer_capture
from ..registry import CONFIG, Context, Finding, check, config_cause, error, info, note
from ._common import config_of, reference_of, require_complete


@check(
    "reference.diff",
    "Tensors and semantic config match the reference spec",
    example="rope-theta-off-reference",
    modelled_only=True,
    needs=("reference",),
    guards="A conversion that changed a shape, a dtype or a semantic config field the target fixes, relative to a "
    "drafter known to serve well (for Kimi-sized drafters: the AQ-MedAI Kimi-K2 drafter); the trainer's own "
    "choices (draft vocabulary, intermediate size, aux ids) are notes.",
    fix="restore the reference's shapes, dtypes and semantic fields, or diff against the right reference",
    codes={
        "layouts-differ": note("the layouts differ: compared by tensor role"),
        "trainer-shape": note("a shape that differs only by the trainer's own choices"),
        "shape": "a tensor of another shape than the reference's",
        "optional-tensor": note("an optional tensor on one side only"),
        "draft-vocab-tensor": note("d2t/t2d on one side only, following the draft vocabulary"),
        "tensor-presence": "a tensor on one side only",
        "dtype": "tensors in another dtype than the reference's",
        "aux-convention": note("aux ids that capture other layers than the reference's"),
        "trainer-choice": note("a config field the trainer chooses differs"),
        "config-field": "a semantic config field differs",
    },
)
def reference_diff(ctx: Context) -> Iterable[Finding]:
    # Against a checkpoint that cannot be read whole, every field and tensor would "differ": the files check
    # already says what is wrong, and the diff would bury it.
    config_of(ctx)  # skips when config.json is missing or unreadable
    require_complete(ctx)
    candidate = snapshot(ctx.ckpt, ctx.ckpt.display)
    # The candidate's own convention (inferred, or --aux-convention): with the reference's, ids compare as layers.
    candidate.aux_convention, candidate.aux_convention_note = engines.trainer_convention(
        ctx.ckpt, ctx.options.aux_convention if ctx.options else None)
    return diff(candidate, reference_of(ctx))


# ----- the diff of two specs -------------------------------------------------------------------------------------

def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        try:
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
        except OverflowError:
            return a == b
    return a == b


# The trainer's own choices: not fixed by the target, so another value than the reference's is a note. Everything
# else the diff compares (hidden size, vocabulary, heads, head_dim, fc's input width, rope, ...) the target or the
# serving math fixes: an error.
TRAINER_CHOICES = ("draft_vocab_size", "intermediate_size", "aux_layer_ids")
_CHOICE = "the trainer's choice, not fixed by the target"
# Which dimension of a tensor each trainer choice sizes.
_CHOICE_DIMS = {"lm_head.weight": (("draft_vocab_size", 0),), "d2t": (("draft_vocab_size", 0),),
                "mlp.gate_proj.weight": (("intermediate_size", 0),), "mlp.up_proj.weight": (("intermediate_size", 0),),
                "mlp.down_proj.weight": (("intermediate_size", 1),), "mlp.gate_proj.bias": (("intermediate_size", 0),),
                "mlp.up_proj.bias": (("intermediate_size", 0),)}


# The config fields that size tensors, in the order a shape difference is put down to them (hidden_size sizes most).
_SIZING = ("hidden_size", "vocab_size", "target_hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
           "intermediate_size", "draft_vocab_size")


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


def _chosen(role: str, c: tuple, r: tuple, c_cfg: dict, r_cfg: dict) -> list[str]:
    """The trainer choices that explain a shape difference entirely (empty: they do not)."""
    dims = next((d for suffix, d in _CHOICE_DIMS.items() if role == suffix or role.endswith("." + suffix)), ())
    if len(c) != len(r):
        return []
    want, used = list(r), []
    for name, dim in dims:
        if want[dim] == r_cfg.get(name) and c_cfg.get(name) is not None and c_cfg[name] != r_cfg[name]:
            want[dim] = c_cfg[name]
            used.append(name)
    return used if used and tuple(want) == tuple(c) else []


def diff(candidate: Spec, reference: Spec) -> list[Finding]:
    """Differences between a candidate and a reference, as findings (no check id yet)."""
    out: list[Finding] = []
    ref = reference.name
    dv_differs = not _same(candidate.config.get("draft_vocab_size"), reference.config.get("draft_vocab_size"))
    if candidate.layout and reference.layout and candidate.layout != reference.layout:
        out.append(info(f"layouts differ: {candidate.layout} vs {ref}'s {reference.layout}; compared by tensor role",
                        code="layouts-differ", expected=reference.layout, found=candidate.layout))

    dtype_changes: dict[tuple[str, str], list[str]] = {}
    for role in sorted(set(candidate.tensors) | set(reference.tensors)):
        c, r = candidate.tensors.get(role), reference.tensors.get(role)
        c_has, r_has = bool(c and c.present), bool(r and r.present)
        if c is not None and r is not None and c_has and r_has:
            chosen = _chosen(role, c.shape, r.shape, candidate.config, reference.config) if c.shape != r.shape else []
            if chosen:
                out.append(info(f"{role}: shape {list(c.shape)}, {ref} has {list(r.shape)} (follows "
                                f"{', '.join(chosen)}: {_CHOICE})", key=role, expected=str(list(r.shape)),
                                found=str(list(c.shape)), code="trainer-shape"))
            elif c.shape != r.shape:
                sized_by = _sized_by(c.shape, r.shape, candidate.config, reference.config)
                out.append(error(f"{role}: shape {list(c.shape)}, {ref} has {list(r.shape)}", code="shape", key=role,
                                 expected=str(list(r.shape)), found=str(list(c.shape)),
                                 cause=config_cause(sized_by) if sized_by else None,
                                 why="a drafter of another shape family: it cannot be served where the reference is",
                                 fix="compare against the reference of this drafter's size, or fix the export"))
            if c.dtype != r.dtype:
                dtype_changes.setdefault((c.dtype, r.dtype), []).append(role)
        elif c_has or r_has:
            optional = bool((r and r.optional) or (c and c.optional and role in OPTIONAL_ROLES))
            where = "the candidate" if c_has else ref
            if optional:
                out.append(info(f"{role}: only {where} has it (optional)", code="optional-tensor", key=role))
            elif role in ("d2t", "t2d") and dv_differs:
                out.append(info(f"{role}: only {where} has it (follows draft_vocab_size: {_CHOICE})",
                                code="draft-vocab-tensor", key=role))
            else:
                out.append(error(f"{role}: only {where} has it", code="tensor-presence", key=role,
                                 expected="present" if r_has else "absent", found="present" if c_has else "absent",
                                 why="the drafter is not built like the reference: a tensor was dropped or added",
                                 fix="re-export the missing tensor" if r_has else "remove the extra tensor or the "
                                 "config flag that asks for it"))

    for (found, want), roles in dtype_changes.items():
        listing = ", ".join(roles[:4]) + (f", ... ({len(roles) - 4} more)" if len(roles) > 4 else "")
        out.append(error(f"{len(roles)} tensor(s) are {found}, {ref} has {want}: {listing}", code="dtype", key=roles[0],
                         expected=want, found=found,
                         why="the export changed precision: memory, speed and numerics differ from the reference "
                         "the deployment was sized for", fix=f"save these tensors as {want}"))

    cc, rc = candidate.aux_convention, reference.aux_convention
    for name in dict.fromkeys(config_fields(candidate.config) + config_fields(reference.config)):
        c, r = candidate.config.get(name), reference.config.get(name)
        if name == "aux_layer_ids" and c and r and cc and rc and cc != rc:
            conventions = (cc, rc)
            c_layers, r_layers = (list(trainer_capture(ids, conv, None).layers or ())
                                  for ids, conv in ((c, conventions[0]), (r, conventions[1])))
            if c_layers != r_layers:
                out.append(info(
                    f"aux layers: the candidate's ids {c} ({conventions[0]} convention) capture the outputs of target "
                    f"layers {c_layers}, {ref}'s ids {r} ({conventions[1]} convention) capture layers {r_layers}",
                    code="aux-convention", key="aux_layer_ids", expected=f"outputs of layers {r_layers}",
                    found=f"outputs of layers {c_layers}",
                    why=f"{conventions[0]}: {AUX_MEANING[conventions[0]]}; {conventions[1]}: "
                    f"{AUX_MEANING[conventions[1]]}. One layer off cost ~35 points of first-token acceptance "
                    f"(vLLM PR #43671). Which layers: {_CHOICE}; engine.aux-layers checks the serving side",
                    fix="confirm which layers the drafter was trained on and state them in the serving engine's "
                    "convention"))
            continue
        if not _same(c, r):
            shown = {k: "unknown (missing or invalid)" if v is None and name not in NULLABLE else repr(v)
                     for k, v in (("c", c), ("r", r))}
            if name in TRAINER_CHOICES and c is not None:
                out.append(info(f"config {name}: {shown['c']}, {ref} has {shown['r']} ({_CHOICE})", key=name,
                                expected=shown["r"], found=shown["c"], code="trainer-choice"))
                continue
            out.append(error(f"config {name}: {shown['c']}, {ref} has {shown['r']}", key=name, expected=shown["r"],
                             found=shown["c"], file=CONFIG,
                             why="a semantic field (it sizes tensors or changes the computation) differs from the "
                             "reference", fix=f"state {name} as the drafter was trained, or diff against the right "
                             "reference", code="config-field"))
    return out
