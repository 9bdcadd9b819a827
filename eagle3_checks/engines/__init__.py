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


AUX_CONVENTIONS = ("vllm", "sglang")
PROVENANCE = "eagle3_checks_provenance"  # what eagle3-checks convert records about a converted drafter
# Fields SpecForge's Kimi-K2 config template carries (configs/kimi-k2-eagle3.json; Qwen2-style leftovers) and
# speculators and EAGLE exports do not.
SPECFORGE_MARKERS = ("max_window_layers", "use_sliding_window")


def trainer_convention(ckpt: Any, option: str | None = None) -> tuple[str | None, str]:
    """How the drafter's trainer counted aux ids: (convention or None when unknown, why)."""
    if option:
        return option, "--aux-convention"
    provenance = (ckpt.config_raw or {}).get(PROVENANCE)
    if isinstance(provenance, dict) and provenance.get("aux_layer_convention") in AUX_CONVENTIONS:
        return provenance["aux_layer_convention"], f"{PROVENANCE} in config.json (written by eagle3-checks convert)"
    if ckpt.layout == SPECULATORS:
        return "vllm", "a speculators checkpoint: speculators captures its training states through vLLM"
    raw = ckpt.config_raw or {}
    markers = [m for m in SPECFORGE_MARKERS if m in raw]
    if markers:
        return "sglang", (f"SpecForge template fields in config.json ({', '.join(markers)}): SpecForge trains on "
                          "states captured the SGLang way")
    return None, "unknown: a flat config does not say how its trainer counted (pass --aux-convention)"


def captured_layers(ids: list[int], convention: str) -> list[int]:
    """The target layer whose output each id captures."""
    return [i - 1 for i in ids] if convention == "vllm" else list(ids)


def ids_for(layers: list[int], convention: str) -> list[int]:
    """The ids that capture the outputs of ``layers`` under ``convention``."""
    return [i + 1 for i in layers] if convention == "vllm" else list(layers)


def trainer(ckpt: Any) -> Reading:
    """The reading of the program that trained the drafter. A flat checkpoint converted by eagle3-checks from the
    speculators layout keeps speculators' meaning of norm_output (the state fed back), which its provenance says."""
    if ckpt.layout == SPECULATORS:
        reading = speculators.read(ckpt, lenient=True)
    else:
        provenance = (ckpt.config_raw or {}).get(PROVENANCE)
        trained_by = provenance.get("trainer") if isinstance(provenance, dict) else None
        reading = specforge.read(ckpt, speculators_meaning=trained_by == "speculators")
    reading.engine = f"{reading.engine} (trainer)"
    return reading


__all__ = ["ENGINES", "TRAINERS", "MIRRORED", "AUX_CONVENTIONS", "Reading", "describe", "read", "trainer",
           "trainer_convention", "captured_layers", "ids_for"]
