"""How each engine reads a checkpoint, one module per engine, shared by the forward pass and the checks.

``read(ckpt, engine)`` returns a :class:`~eagle3_checks.engines.reading.Reading`; ``trainer(ckpt)`` returns the
reading of the program that trained a checkpoint of that layout (speculators for the speculators layout,
EAGLE/SpecForge for the flat one), with lenient names: the computation the drafter was trained to do.
"""

from __future__ import annotations

from typing import Any

from ..layout import SPECULATORS
from . import sglang, specforge, speculators, vllm
from .reading import Reading

# The serving engines a gate can target, and the trainers whose readings define "what was trained".
ENGINES = {"vllm": vllm, "sglang": sglang, "speculators": speculators}
TRAINERS = {"speculators": speculators, "specforge": specforge}
MIRRORED = {name: module.VERSION for name, module in {**ENGINES, **TRAINERS}.items()}


def describe() -> str:
    return ", ".join(f"{name} {version}" for name, version in MIRRORED.items())


def read(ckpt: Any, engine: str) -> Reading:
    return ENGINES[engine].read(ckpt)


def trainer(ckpt: Any) -> Reading:
    reading = speculators.read(ckpt, lenient=True) if ckpt.layout == SPECULATORS else specforge.read(ckpt)
    reading.engine = f"{reading.engine} (trainer)"
    return reading


__all__ = ["ENGINES", "TRAINERS", "MIRRORED", "Reading", "describe", "read", "trainer"]
