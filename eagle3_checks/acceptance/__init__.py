"""Acceptance, measured: each reading of a drafter run teacher-forced on recorded target states
(``eagle3-checks accept``). :mod:`.samples` reads the producers' formats, :mod:`.evaluate` scores the readings."""

from __future__ import annotations

from .evaluate import FAIL_SHARE, AcceptanceError, Figures, Result, evaluate, expect_of, readings, render_text
from .samples import DataError, Expect, LossMasks, Sample, detect, samples
from .target_head import TargetHead, load_head

__all__ = ["FAIL_SHARE", "AcceptanceError", "DataError", "Expect", "Figures", "LossMasks", "Result", "Sample",
           "TargetHead", "detect", "evaluate", "expect_of", "load_head", "readings", "render_text", "samples"]
