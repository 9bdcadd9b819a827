"""reference.diff: the candidate is built like a known-good reference drafter."""

from __future__ import annotations

from collections.abc import Iterable

from .. import engines
from ..drafter.spec import diff, snapshot
from ..registry import Context, Finding, check
from ._common import config_of, require_complete


@check(
    "reference.diff",
    "Tensors and semantic config match the reference spec",
    modelled_only=True,
    needs=("reference",),
    guards="A conversion that changed a shape, a dtype or a semantic config field the target fixes, relative to a "
    "drafter known to serve well (for Kimi-sized drafters: the AQ-MedAI Kimi-K2 drafter); the trainer's own "
    "choices (draft vocabulary, intermediate size, aux ids) are notes.",
    fix="restore the reference's shapes, dtypes and semantic fields, or diff against the right reference",
    codes={
        "layouts-differ": "(note) the layouts differ: compared by tensor role",
        "trainer-shape": "(note) a shape that differs only by the trainer's own choices",
        "shape": "a tensor of another shape than the reference's",
        "optional-tensor": "(note) an optional tensor on one side only",
        "draft-vocab-tensor": "(note) d2t/t2d on one side only, following the draft vocabulary",
        "tensor-presence": "a tensor on one side only",
        "dtype": "tensors in another dtype than the reference's",
        "aux-convention": "(note) aux ids that capture other layers than the reference's",
        "trainer-choice": "(note) a config field the trainer chooses differs",
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
    return diff(candidate, ctx.reference)
