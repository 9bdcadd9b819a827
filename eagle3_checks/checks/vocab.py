"""vocab.d2t and vocab.t2d: the draft <-> target vocabulary mapping is valid and consistent.

``d2t[i]`` is an *offset*: draft id i means target id ``i + d2t[i]`` (EAGLE cnets.py, SpecForge
preprocessing, speculators vocab_mapping, vLLM compute_logits, SGLang hot_token_id). Builders
take the DV most frequent target tokens sorted ascending, so the target ids are strictly
increasing and inside [0, V); ``t2d`` marks exactly those ids.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import compress, count, islice
from operator import add, eq, itemgetter, lt, ne, sub
from typing import Any

from ..drafter.checkpoint import Checkpoint
from ..registry import Context, Finding, NotApplicable, check, error, warning
from ..storage.folder import TensorReadError
from ..storage.safetensors import TensorEntry
from ._common import config_of

_OFFSETS = "d2t holds offsets: target id of draft id i = i + d2t[i] (identity is all zeros)"
# Absolute ids are strictly increasing everywhere; real offsets repeat a value whenever two consecutive
# draft tokens are consecutive target ids, which the dense low-id region of any tokenizer guarantees.
_ABSOLUTE_MIN_LEN = 16
_I64 = 2**63


# Two readings of the mapping, each giving the checks the same answers (tests/test_header_path.py): the standard
# library's, on plain Python numbers (Checkpoint.values), and numpy's (Checkpoint.array). The header level reads a
# vocabulary of real size with the first, and so never imports numpy, whose import alone takes longer than the
# standard library's passes over any real vocabulary (at most 262k target ids and as many draft ids). A mapping of
# NUMPY_FROM values or more (d2t and t2d together, as their headers say, so that both checks read it one way) is read
# with numpy: measured on two cores, the standard library's passes then take longer than numpy's import and passes.
# Values are int64 for both: a U64 value past it wraps, as an engine's int64 copy does; numpy's int64 sums and
# differences are exact for offsets within +-2**62 (beyond, the standard library's are, and a message may differ).
NUMPY_FROM = 1_500_000


class PythonReading:
    """The passes over d2t and t2d in the standard library."""

    @staticmethod
    def load(ckpt: Checkpoint, role: str) -> Sequence[Any]:
        return ckpt.values(role)

    @staticmethod
    def ids(raw: Sequence[Any], entry: TensorEntry) -> list[int] | None:
        """d2t as int64 ids if every value is an integer (a float d2t is still judged on its values)."""
        if entry.kind == "f":
            if not all(map(float.is_integer, raw)):  # NaN and inf are not integers either
                return None
            return list(map(int, raw))
        ids = list(raw)
        if entry.dtype == "U64" and max(ids, default=0) >= _I64:
            ids = [x - 2 * _I64 if x >= _I64 else x for x in ids]
        return ids

    @staticmethod
    def targets(ids: list[int]) -> list[int]:
        """i + ids[i]."""
        return list(map(add, range(len(ids)), ids))

    @staticmethod
    def is_arange(ids: list[int]) -> bool:
        return all(map(eq, ids, range(len(ids))))

    @staticmethod
    def outside(ids: list[int], v: int) -> list[int]:
        """The indices of the values outside [0, v)."""
        if not ids or (min(ids) >= 0 and max(ids) < v):
            return []
        return _where(x < 0 or x >= v for x in ids)

    @staticmethod
    def below(ids: list[int], v: int) -> bool:
        return max(ids, default=v - 1) < v

    @staticmethod
    def increasing(ids: list[int]) -> bool:
        """Strictly increasing (an empty or one-value sequence is)."""
        return all(map(lt, ids, islice(ids, 1, None)))

    @staticmethod
    def rising(ids: list[int]) -> bool:
        """Whether the targets i + ids[i] rise strictly: whether the offsets never decrease."""
        return ids == sorted(ids)

    @staticmethod
    def repeats_and_descents(targets: list[int]) -> tuple[list[int], list[int]]:
        """The indices i where targets[i + 1] == targets[i], and where targets[i + 1] < targets[i]."""
        steps = list(map(sub, targets[1:], targets))
        return _where(s == 0 for s in steps), _where(s < 0 for s in steps)

    @staticmethod
    def constant(ids: list[int]) -> bool:
        return ids.count(ids[0]) == len(ids)

    @staticmethod
    def is_mask(t2d: Sequence[Any]) -> bool:
        """Every value 0 or 1 (0.0, -0.0 and 1.0 are; NaN is not)."""
        if isinstance(t2d, bytes):  # BOOL (read as 0 and 1) and U8
            return not t2d.translate(None, b"\x00\x01")
        return set(t2d) <= {0, 1}

    @staticmethod
    def marks(mask: Sequence[Any]) -> int:
        """How many ids a 0/1 mask marks."""
        return len(mask) - mask.count(0)

    @classmethod
    def marks_exactly(cls, mask: Sequence[Any], ids: list[int], targets: list[int]) -> bool:
        """Whether a 0/1 mask marking len(targets) ids marks exactly ``targets`` (nonzero(mask) == targets), without
        listing nonzero(mask): the targets rise, lie inside the mask, and each is marked."""
        if len(targets) < 2:
            return [i for i, m in enumerate(mask) if m] == targets
        return targets[0] >= 0 and targets[-1] < len(mask) and cls.rising(ids) \
            and 0 not in itemgetter(*targets)(mask)

    @staticmethod
    def marked(mask: Sequence[Any]) -> list[int]:
        return _where(mask)

    @staticmethod
    def equal(a: list[int], b: list[int]) -> bool:
        return a == b

    @staticmethod
    def differ(a: list[int], b: list[int]) -> list[int]:
        """The indices where two sequences of one length differ."""
        return _where(map(ne, a, b))


class NumpyReading:
    """The same passes in numpy (imported on first use), for a mapping of NUMPY_FROM values or more."""

    @staticmethod
    def load(ckpt: Checkpoint, role: str) -> Any:
        return ckpt.array(role).reshape(-1)

    @staticmethod
    def ids(raw: Any, entry: TensorEntry) -> Any:
        import numpy as np

        if raw.dtype.kind == "f" and not (np.all(np.isfinite(raw)) and np.all(raw == np.round(raw))):
            return None
        return raw.astype(np.int64)

    @staticmethod
    def targets(ids: Any) -> Any:
        import numpy as np

        return np.arange(len(ids), dtype=np.int64) + ids

    @staticmethod
    def is_arange(ids: Any) -> bool:
        import numpy as np

        return bool(np.array_equal(ids, np.arange(len(ids))))

    @staticmethod
    def outside(ids: Any, v: int) -> list[int]:
        import numpy as np

        return np.flatnonzero((ids < 0) | (ids >= v)).tolist()

    @staticmethod
    def below(ids: Any, v: int) -> bool:
        import numpy as np

        return bool(np.all(ids < v))

    @staticmethod
    def increasing(ids: Any) -> bool:
        import numpy as np

        return bool(np.all(np.diff(ids) > 0))

    @staticmethod
    def rising(ids: Any) -> bool:
        import numpy as np

        return bool(np.all(np.diff(ids) >= 0))

    @staticmethod
    def repeats_and_descents(targets: Any) -> tuple[list[int], list[int]]:
        import numpy as np

        steps = np.diff(targets)
        return np.flatnonzero(steps == 0).tolist(), np.flatnonzero(steps < 0).tolist()

    @staticmethod
    def constant(ids: Any) -> bool:
        import numpy as np

        return bool(np.all(ids == ids[0]))

    @staticmethod
    def is_mask(t2d: Any) -> bool:
        import numpy as np

        return bool(np.all((t2d == 0) | (t2d == 1)))

    @staticmethod
    def marks(mask: Any) -> int:
        import numpy as np

        return int(np.count_nonzero(mask))

    @staticmethod
    def marks_exactly(mask: Any, ids: Any, targets: Any) -> bool:
        import numpy as np

        return bool(np.array_equal(np.flatnonzero(mask), targets))

    @staticmethod
    def marked(mask: Any) -> Any:
        import numpy as np

        return np.flatnonzero(mask)

    @staticmethod
    def equal(a: Any, b: Any) -> bool:
        import numpy as np

        return bool(np.array_equal(a, b))

    @staticmethod
    def differ(a: Any, b: Any) -> list[int]:
        import numpy as np

        return np.flatnonzero(a != b).tolist()


Reading = type[PythonReading] | type[NumpyReading]


def reading(ckpt: Checkpoint) -> Reading:
    """The reading of ``ckpt``'s mapping: numpy's from NUMPY_FROM values (d2t and t2d together), else the standard
    library's."""
    size = sum(math.prod(e.shape) for e in (ckpt.entry("d2t"), ckpt.entry("t2d")) if e is not None)
    return NumpyReading if size >= NUMPY_FROM else PythonReading


def _load(ctx: Context, r: Reading, role: str) -> Any:
    try:
        return r.load(ctx.ckpt, role)
    except TensorReadError as exc:
        raise NotApplicable(f"cannot read {role}: {exc}") from exc


def _d2t(ctx: Context, r: Reading, entry: TensorEntry) -> tuple[Any, Any, Any]:
    """d2t as read (raw), as ids (None: not integers) and its targets i + d2t[i]: computed once for both checks."""
    key = ("vocab.d2t", r.__name__)
    if key not in ctx.cache:
        raw = _load(ctx, r, "d2t")
        ids = r.ids(raw, entry)
        ctx.cache[key] = raw, ids, None if ids is None else r.targets(ids)
    return ctx.cache[key]


def _where(flags: Iterable[Any]) -> list[int]:
    """The indices of the true flags."""
    return list(compress(count(), flags))


def _preview(values, limit: int = 6) -> str:
    items = [str(int(v)) if math.isfinite(v) else str(float(v)) for v in values[:limit]]  # nan, inf: no int
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
    r = reading(ctx.ckpt)
    raw, d2t, target = _d2t(ctx, r, entry)
    where = dict(file=entry.file, key=entry.name)
    if d2t is None:
        yield error(f"{entry.name}: holds non-integer values", code="non-integer", **where, expected="integer offsets",
                    found=_preview(raw), why="a drafted id must map to one target token",
                    fix="rebuild d2t from the training vocabulary mapping, as int64")
        return
    n = len(d2t)

    if n >= _ABSOLUTE_MIN_LEN and r.is_arange(d2t):
        yield error(
            f"{entry.name}: equals arange({n}), so draft id i maps to target id 2i",
            code="arange", **where, expected=_OFFSETS, found=_preview(d2t),
            why="ids past V/2 fall outside the target vocabulary (vLLM never range-checks d2t: a CUDA kernel "
            "faults) and the rest point at the wrong tokens (verl-SpeCo PR #67)",
            fix="write offsets: d2t = sorted_target_ids - arange(DV); all zeros for the identity",
        )
        return

    out = r.outside(target, v)
    if out:
        i = out[0]
        absolute = not r.outside(d2t, v) and r.increasing(d2t)
        yield error(
            f"{entry.name}: {len(out)} of {n} draft ids map outside the target vocabulary [0, {v}); first: "
            f"draft id {i} -> {int(target[i])}",
            code="out-of-range",
            **where, expected=f"0 <= i + d2t[i] < {v}", found=f"i + d2t[i] = {int(target[i])} at i = {i}",
            why="vLLM never range-checks d2t: an out-of-range id faults a CUDA kernel or reads another row",
            fix=("d2t holds absolute target ids (strictly increasing, every one inside the target vocabulary, "
                 "while as offsets they are not): write offsets, d2t = ids - arange(DV) (eagle3-checks fix repairs "
                 "it)" if absolute else "rebuild d2t from the vocabulary mapping the drafter was trained with"),
            repair="d2t-offsets" if absolute else None,
        )
    dup, down = ([], []) if r.rising(d2t) else r.repeats_and_descents(target)
    if dup:
        i = dup[0]
        yield error(
            f"{entry.name}: {len(dup)} draft ids map to a target id another draft id already has; first: draft ids "
            f"{i} and {i + 1} -> {int(target[i])}",
            **where, expected="each target id at most once", found=f"target id {int(target[i])} twice",
            why="two draft logits compete for one target token while another token the drafter learned is "
            "unreachable; vLLM's scatter keeps only one",
            code="duplicate-ids", fix="rebuild d2t from the vocabulary mapping the drafter was trained with",
        )
    if down:
        i = down[0]
        yield error(
            f"{entry.name}: target ids are not increasing; first at draft id {i + 1}: {int(target[i])} then "
            f"{int(target[i + 1])}",
            code="unsorted", **where, expected="i + d2t[i] strictly increasing", found=f"decreases at i = {i + 1}",
            why="every builder sorts the draft vocabulary ascending; an unsorted d2t was written by a different "
            "mapping than the one lm_head rows were trained with",
            fix="rebuild d2t from the training vocabulary mapping (sorted target ids minus arange)",
        )
    if ctx.ckpt.has("t2d") or out or n < _ABSOLUTE_MIN_LEN:
        return  # with t2d the vocab.t2d check decides; out-of-range already reported
    if n < v and r.constant(d2t):
        yield _constant(entry.name, where, int(d2t[0]), n, v)
        return  # one offset throughout: strictly increasing targets, nothing else to report
    if r.increasing(d2t) and r.below(d2t, v):
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
    r = reading(ctx.ckpt)
    t2d = _load(ctx, r, "t2d")
    where = dict(file=entry.file, key=entry.name)
    v, dv = cfg["vocab_size"], cfg["draft_vocab_size"]
    if v is not None and len(t2d) != v:
        yield error(f"{entry.name}: length {len(t2d)}, vocab_size is {v}", code="length", **where, expected=str(v),
                    found=str(len(t2d)), why="t2d is a mask over the target vocabulary",
                    fix="rebuild t2d over the verifier's full vocabulary")
        return
    if not r.is_mask(t2d):
        yield error(f"{entry.name}: holds values other than 0 and 1", **where, expected="a boolean mask",
                    found=_preview(t2d), why="t2d marks which target tokens are in the draft vocabulary",
                    fix="save t2d as a bool mask", code="not-a-mask")
        return
    marks = r.marks(t2d)
    if dv is not None and marks != dv:
        yield error(f"{entry.name}: marks {marks} tokens, draft_vocab_size is {dv}", code="count", **where,
                    expected=f"t2d.sum() == {dv}", found=str(marks),
                    why="the mask and the draft vocabulary describe different vocabularies",
                    fix="rebuild t2d and d2t together from the training vocabulary mapping")
        return
    d2t_entry = ctx.ckpt.entry("d2t")
    if d2t_entry is None:
        return
    _, d2t, target = _d2t(ctx, r, d2t_entry)
    if d2t is None or len(d2t) != marks:
        return  # reported by vocab.d2t / shapes
    if r.marks_exactly(t2d, d2t, target):
        return
    marked = r.marked(t2d)
    if r.equal(marked, d2t):
        yield error(
            f"{d2t_entry.name}: holds absolute target ids (it equals nonzero(t2d)), not offsets",
            code="absolute-ids", file=d2t_entry.file, key=d2t_entry.name, expected=_OFFSETS, found=_preview(d2t),
            why="engines add arange(DV) to d2t: every drafted token maps to a wrong (or out-of-range) target id "
            "and acceptance collapses",
            fix="write offsets: d2t = nonzero(t2d) - arange(DV) (eagle3-checks fix repairs it)", repair="d2t-offsets",
        )
        return
    bad = r.differ(marked, target)
    i = bad[0]
    yield error(
        f"{entry.name} and {d2t_entry.name} disagree on {len(bad)} of {len(d2t)} draft ids; first: draft id {i} -> "
        f"{int(target[i])} by d2t, {int(marked[i])} by t2d",
        code="disagrees", **where, expected="nonzero(t2d) == arange(DV) + d2t", found=f"differs at draft id {i}",
        why="one of the two comes from another vocabulary mapping; lm_head rows were trained for exactly one",
        fix="embed d2t and t2d from the same vocabulary-mapping file the drafter was trained with",
    )
