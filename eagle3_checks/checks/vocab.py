"""vocab.d2t and vocab.t2d: the draft <-> target vocabulary mapping is valid and consistent.

``d2t[i]`` is an *offset*: draft id i means target id ``i + d2t[i]`` (EAGLE cnets.py, SpecForge
preprocessing, speculators vocab_mapping, vLLM compute_logits, SGLang hot_token_id). Builders
take the DV most frequent target tokens sorted ascending, so the target ids are strictly
increasing and inside [0, V); ``t2d`` marks exactly those ids.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..registry import Context, Finding, NotApplicable, check, error, warning
from ..storage.folder import TensorReadError
from ._common import config_of

_OFFSETS = "d2t holds offsets: target id of draft id i = i + d2t[i] (identity is all zeros)"
# Absolute ids are strictly increasing everywhere; real offsets repeat a value whenever two consecutive
# draft tokens are consecutive target ids, which the dense low-id region of any tokenizer guarantees.
_ABSOLUTE_MIN_LEN = 16


def _load(ctx: Context, role: str):
    import numpy as np

    try:
        values = ctx.ckpt.array(role)
    except TensorReadError as exc:
        raise NotApplicable(f"cannot read {role}: {exc}") from exc
    return np, values.reshape(-1)


def _as_ids(np, d2t):
    """d2t as int64 if every value is an integer (a float d2t is still judged on its values)."""
    if d2t.dtype.kind == "f":
        if not np.all(np.isfinite(d2t)) or not np.all(d2t == np.round(d2t)):
            return None
    return d2t.astype(np.int64)


def _preview(values, limit: int = 6) -> str:
    items = [str(int(v)) for v in values[:limit]]
    return "[" + ", ".join(items) + (", ..." if len(values) > limit else "") + "]"


@check(
    "vocab.d2t",
    "d2t: present when the draft vocabulary is smaller, offsets in range and strictly increasing",
    example="d2t-arange",
    guards="A missing d2t (draft id i taken as target id i: acceptance ~0), an all-zero d2t without t2d and with a "
    "smaller draft vocabulary (a mapping never filled in: the same effect), d2t written as absolute ids or as arange "
    "(target = 2i, out-of-range ids crash a CUDA kernel in vLLM), unsorted or duplicated ids.",
    evidence=("NVIDIA-NeMo/Automodel PR #2447 (missing d2t)", "verl-SpeCo PR #67 (d2t = arange)",
              "verl-SpeCo PR #66 (d2t all zeros: the draft vocabulary is target ids 0..DV-1)",
              "vLLM PR #18909 (d2t dropped: 0.11 acceptance)"),
    fix="embed the d2t the drafter was trained with, as offsets: d2t = sorted_target_ids - arange(DV)",
    codes={
        "non-integer": "d2t holds non-integer values",
        "arange": "d2t equals arange(DV): draft id i maps to target id 2i",
        "out-of-range": "draft ids map outside the target vocabulary",
        "duplicate-ids": "two draft ids map to one target id",
        "unsorted": "the target ids are not increasing",
        "absolute-ids": "d2t looks like absolute target ids, not offsets (no t2d to tell for sure)",
        "all-zero": "d2t is all zeros (no t2d) with a smaller draft vocabulary: a mapping never filled in (draft "
                    "id i -> target id i)",
        "constant": "d2t is one value throughout (no t2d): the draft vocabulary would be one contiguous run of "
                    "target ids",
    },
)
def d2t_check(ctx: Context) -> Iterable[Finding]:
    cfg = config_of(ctx)
    v, dv = cfg["vocab_size"], cfg["draft_vocab_size"]
    entry = ctx.ckpt.entry("d2t")
    if entry is None:
        # A missing d2t with DV < V is reported by the keys check; nothing to judge here.
        raise NotApplicable("no d2t tensor" + ("" if v is None or dv is None or dv >= v else " (see keys)"))
    if v is None:
        raise NotApplicable("vocab_size unknown (see config.fields)")
    np, raw = _load(ctx, "d2t")
    where = dict(file=entry.file, key=entry.name)
    d2t = _as_ids(np, raw)
    if d2t is None:
        yield error(f"{entry.name}: holds non-integer values", code="non-integer", **where, expected="integer offsets",
                    found=_preview(raw), why="a drafted id must map to one target token",
                    fix="rebuild d2t from the training vocabulary mapping, as int64")
        return
    n = len(d2t)
    idx = np.arange(n, dtype=np.int64)
    target = idx + d2t

    if n >= _ABSOLUTE_MIN_LEN and np.array_equal(d2t, idx):
        yield error(
            f"{entry.name}: equals arange({n}), so draft id i maps to target id 2i",
            code="arange", **where, expected=_OFFSETS, found=_preview(d2t),
            why="ids past V/2 fall outside the target vocabulary (vLLM never range-checks d2t: a CUDA kernel "
            "faults) and the rest point at the wrong tokens (verl-SpeCo PR #67)",
            fix="write offsets: d2t = sorted_target_ids - arange(DV); all zeros for the identity",
        )
        return

    out = np.flatnonzero((target < 0) | (target >= v))
    if len(out):
        i = int(out[0])
        absolute = bool(np.all((d2t >= 0) & (d2t < v))) and bool(np.all(np.diff(d2t) > 0))
        yield error(
            f"{entry.name}: {len(out)} of {n} draft ids map outside the target vocabulary [0, {v}); first: "
            f"draft id {i} -> {int(target[i])}",
            code="out-of-range",
            **where, expected=f"0 <= i + d2t[i] < {v}", found=f"i + d2t[i] = {int(target[i])} at i = {i}",
            why="vLLM never range-checks d2t: an out-of-range id faults a CUDA kernel or reads another row",
            fix=("d2t looks like absolute target ids: write offsets, d2t = ids - arange(DV)" if absolute
                 else "rebuild d2t from the vocabulary mapping the drafter was trained with"),
        )
    steps = np.diff(target)
    dup = np.flatnonzero(steps == 0)
    if len(dup):
        i = int(dup[0])
        yield error(
            f"{entry.name}: {len(dup)} draft ids map to a target id another draft id already has; first: draft ids "
            f"{i} and {i + 1} -> {int(target[i])}",
            **where, expected="each target id at most once", found=f"target id {int(target[i])} twice",
            why="two draft logits compete for one target token while another token the drafter learned is "
            "unreachable; vLLM's scatter keeps only one",
            code="duplicate-ids", fix="rebuild d2t from the vocabulary mapping the drafter was trained with",
        )
    down = np.flatnonzero(steps < 0)
    if len(down):
        i = int(down[0])
        yield error(
            f"{entry.name}: target ids are not increasing; first at draft id {i + 1}: {int(target[i])} then "
            f"{int(target[i + 1])}",
            code="unsorted", **where, expected="i + d2t[i] strictly increasing", found=f"decreases at i = {i + 1}",
            why="every builder sorts the draft vocabulary ascending; an unsorted d2t was written by a different "
            "mapping than the one lm_head rows were trained with",
            fix="rebuild d2t from the training vocabulary mapping (sorted target ids minus arange)",
        )
    if ctx.ckpt.has("t2d") or len(out) or n < _ABSOLUTE_MIN_LEN:
        return  # with t2d the vocab.t2d check decides; out-of-range already reported
    if n < v and np.all(d2t == d2t[0]):
        yield _constant(entry.name, where, int(d2t[0]), n, v)
        return  # one offset throughout: strictly increasing targets, nothing else to report
    if np.all(np.diff(d2t) > 0) and np.all(d2t < v):
        yield warning(
            f"{entry.name}: strictly increasing everywhere, as absolute target ids are; offsets repeat wherever two "
            "draft tokens are adjacent target ids",
            code="absolute-ids", **where, expected=_OFFSETS, found=_preview(d2t),
            why="if these are absolute ids, every drafted token maps to the wrong target token and acceptance "
            "collapses without an error",
            fix="check how d2t was built; embed t2d so the mapping can be verified exactly",
        )


# What the engines do with d2t, as each release reads it: vLLM 0.33.0 scatters draft logit i to target id
# i + d2t[i] (vllm/model_executor/models/llama_eagle3.py:385-394); SGLang 0.5.23 and 0.5.6 propose
# hot_token_id = d2t + arange (sglang/srt/models/llama_eagle3.py:350-352 in 0.5.23, :244 in 0.5.6).
_ENGINES_MAP = ("vLLM 0.33.0 scatters draft logit i to target id i + d2t[i] (llama_eagle3.py:385-394) and SGLang "
                "0.5.23 proposes hot_token_id = d2t + arange (llama_eagle3.py:350-352; 0.5.6: :244)")
_FILL = ("embed the d2t the drafter was trained with, as offsets (d2t = sorted_target_ids - arange(DV)), with its t2d, "
         "from the training vocabulary mapping (speculators: model.load_vocab_mappings(t2d, d2t) before "
         "save_pretrained)")


def _constant(name: str, where: dict, value: int, n: int, v: int) -> Finding:
    """A d2t without t2d that is one offset throughout while the draft vocabulary is smaller than the target's: the
    drafter's n tokens would be the contiguous target ids value..value+n-1, which no vocabulary built from token
    frequencies is. All zeros is what an unfilled mapping holds: speculators 0.9.0 starts d2t and t2d as zeros until
    load_vocab_mappings fills them (speculators/model.py:51-55, 81-121), and vLLM 0.33.0 starts
    draft_id_to_target_id as zeros for a checkpoint that has none (llama_eagle3.py:339-343). With t2d, vocab.t2d
    decides (speculators' unfilled all-False t2d fails its count); a t2d that marks exactly the same run agrees
    with d2t, and two tensors saying the same thing are not second-guessed."""
    last = value + n - 1
    if value == 0:
        return error(
            f"{name}: all {n} values are 0 while the draft vocabulary ({n}) is smaller than the target's ({v}): "
            f"draft id i maps to target id i, so the drafter can only propose target ids 0..{last}",
            code="all-zero", **where, expected=_OFFSETS + ", for the DV tokens the drafter was trained on",
            found=f"all zeros: target ids 0..{last}, a contiguous run",
            why="an all-zero d2t is a vocabulary mapping never filled in (speculators 0.9.0 starts it as zeros, "
            "speculators/model.py:51-55; verl-SpeCo PR #66). " + _ENGINES_MAP + ": each draft row past the first "
            "target id the training vocabulary skips proposes another token than the one it was trained for, so "
            "nearly every drafted token is rejected (acceptance ~0) and no engine raises",
            fix=_FILL,
        )
    return warning(
        f"{name}: all {n} values are {value}: the draft vocabulary would be the contiguous target ids "
        f"{value}..{last} of {v}",
        code="constant", **where, expected=_OFFSETS + ", for the DV tokens the drafter was trained on",
        found=f"{value} throughout: target ids {value}..{last}, a contiguous run",
        why="no draft vocabulary built from token frequencies is one contiguous run of ids; if this is not the "
        "mapping the drafter was trained with, " + _ENGINES_MAP + ": every draft row proposes another token than "
        "the one it was trained for and acceptance collapses with no error",
        fix="check how d2t was built; " + _FILL,
    )


@check(
    "vocab.t2d",
    "t2d: a mask of exactly the draft tokens, consistent with d2t",
    example="d2t-absolute",
    guards="A t2d that disagrees with d2t (a mapping from another run, or d2t written as absolute ids), "
    "the wrong length or count.",
    evidence=("SpecForge core/compact_teacher.py validate_vocab_mapping_consistency",),
    fix="embed d2t and t2d from the same vocabulary-mapping file the drafter was trained with",
    codes={
        "length": "t2d is not vocab_size long",
        "not-a-mask": "t2d holds values other than 0 and 1",
        "count": "t2d marks another number of tokens than draft_vocab_size",
        "absolute-ids": "d2t holds absolute target ids (it equals nonzero(t2d)), not offsets",
        "disagrees": "t2d and d2t describe different vocabularies",
    },
)
def t2d_check(ctx: Context) -> Iterable[Finding]:
    cfg = config_of(ctx)
    entry = ctx.ckpt.entry("t2d")
    if entry is None:
        raise NotApplicable("no t2d tensor (optional: engines ignore it; it lets d2t be verified exactly)")
    np, t2d = _load(ctx, "t2d")
    where = dict(file=entry.file, key=entry.name)
    v, dv = cfg["vocab_size"], cfg["draft_vocab_size"]
    if v is not None and len(t2d) != v:
        yield error(f"{entry.name}: length {len(t2d)}, vocab_size is {v}", code="length", **where, expected=str(v),
                    found=str(len(t2d)), why="t2d is a mask over the target vocabulary",
                    fix="rebuild t2d over the verifier's full vocabulary")
        return
    if not np.all((t2d == 0) | (t2d == 1)):
        yield error(f"{entry.name}: holds values other than 0 and 1", **where, expected="a boolean mask",
                    found=_preview(t2d), why="t2d marks which target tokens are in the draft vocabulary",
                    fix="save t2d as a bool mask", code="not-a-mask")
        return
    marked = np.flatnonzero(t2d)
    if dv is not None and len(marked) != dv:
        yield error(f"{entry.name}: marks {len(marked)} tokens, draft_vocab_size is {dv}", code="count", **where,
                    expected=f"t2d.sum() == {dv}", found=str(len(marked)),
                    why="the mask and the draft vocabulary describe different vocabularies",
                    fix="rebuild t2d and d2t together from the training vocabulary mapping")
        return
    d2t_entry = ctx.ckpt.entry("d2t")
    if d2t_entry is None:
        return
    _, raw = _load(ctx, "d2t")
    d2t = _as_ids(np, raw)
    if d2t is None or len(d2t) != len(marked):
        return  # reported by vocab.d2t / shapes
    target = np.arange(len(d2t), dtype=np.int64) + d2t
    if np.array_equal(marked, target):
        return
    if np.array_equal(marked, d2t):
        yield error(
            f"{d2t_entry.name}: holds absolute target ids (it equals nonzero(t2d)), not offsets",
            code="absolute-ids", file=d2t_entry.file, key=d2t_entry.name, expected=_OFFSETS, found=_preview(d2t),
            why="engines add arange(DV) to d2t: every drafted token maps to a wrong (or out-of-range) target id "
            "and acceptance collapses",
            fix="write offsets: d2t = nonzero(t2d) - arange(DV)",
        )
        return
    bad = np.flatnonzero(marked != target)
    i = int(bad[0])
    yield error(
        f"{entry.name} and {d2t_entry.name} disagree on {len(bad)} of {len(d2t)} draft ids; first: draft id {i} -> "
        f"{int(target[i])} by d2t, {int(marked[i])} by t2d",
        code="disagrees", **where, expected="nonzero(t2d) == arange(DV) + d2t", found=f"differs at draft id {i}",
        why="one of the two comes from another vocabulary mapping; lm_head rows were trained for exactly one",
        fix="embed d2t and t2d from the same vocabulary-mapping file the drafter was trained with",
    )
