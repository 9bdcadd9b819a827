"""reference.diff: the candidate is built like a known-good reference drafter."""

from __future__ import annotations

from typing import Iterable

from ..registry import Context, Finding, check
from ..spec import diff, snapshot


@check(
    "reference.diff",
    "Tensors and semantic config match the reference spec",
    needs=("reference",),
    guards="A conversion that changed a shape, a dtype or a semantic config field relative to a drafter known "
    "to serve well (for Kimi-sized drafters: the AQ-MedAI Kimi-K2 drafter).",
)
def reference_diff(ctx: Context) -> Iterable[Finding]:
    return diff(snapshot(ctx.ckpt, ctx.ckpt.display), ctx.reference)
