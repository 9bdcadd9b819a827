"""The modelled engine releases, and how a checkpoint is read by each: the one place engines and versions are defined.

Every engine release the gate judges is a :class:`~eagle3_checks.engines.profile.Profile` in one module of this
package (``vllm_0_33``, ``sglang_0_5_23``, ``sglang_0_5_6``, ``speculators``). The CLI's ``--engine`` choices, the
plugin's help, ``convert --to``, ``explain``, the README matrix and ``--version`` all derive from :data:`PROFILES`.
Adding a release is one new module, listed in :data:`PROFILES`, plus its tests.

``read(ckpt, spec)`` returns a :class:`~eagle3_checks.engines.reading.Reading`; ``trainer(ckpt)`` returns the
reading of the program that trained a checkpoint of that layout (speculators for the speculators layout,
EAGLE/SpecForge for the flat one), with lenient names: the computation the drafter was trained to do.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..drafter.config import PROVENANCE
from ..drafter.layout import SPECULATORS
from ..errors import UsageError
from . import sglang_0_5_6, sglang_0_5_23, specforge, speculators, vllm_0_33
from .profile import Capture, Profile, Target, version_key
from .reading import Reading, lookup, valid_ids

# Every modelled release, in the order reports list them (each engine's newest first).
PROFILES: tuple[Profile, ...] = (vllm_0_33.PROFILE, sglang_0_5_23.PROFILE, sglang_0_5_6.PROFILE,
                                 speculators.PROFILE)
# The serving engines (and speculators, which also loads drafters), in report order.
ENGINE_NAMES: tuple[str, ...] = tuple(dict.fromkeys(p.name for p in PROFILES))
_BY_SPEC = {p.spec: p for p in PROFILES}
# The trainers whose readings define "what was trained".
TRAINERS = {"speculators": speculators, "specforge": specforge}
MIRRORED = {**{p.spec: p.version for p in PROFILES}, "specforge@" + specforge.VERSION: specforge.VERSION}
DEFAULT_ENGINE = "vllm"


def describe() -> str:
    """'vllm 0.33.0, sglang 0.5.23, ...': what this release of eagle3-checks mirrors (--version)."""
    return ", ".join(spec.replace("@", " ") for spec in MIRRORED)


def versions(name: str) -> list[Profile]:
    """The modelled releases of one engine, newest first."""
    return sorted((p for p in PROFILES if p.name == name), key=lambda p: p.key, reverse=True)


def newest(name: str) -> Profile:
    return versions(name)[0]


def profile(spec: str) -> Profile:
    """The profile of ``name@version`` (or of a bare name: its newest release)."""
    return _BY_SPEC[spec] if spec in _BY_SPEC else newest(spec)


def installed_version(name: str) -> str | None:
    """The version of an engine installed where the gate runs, from its ``NAME-VERSION.dist-info`` folder on
    sys.path: what importlib.metadata reads, without its import (40 ms, an eighth of the header gate). The engine
    itself is never imported."""
    prefix = name.replace("-", "_").lower() + "-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for folder in names:
            if folder.endswith(".dist-info") and folder.lower().startswith(prefix):
                return folder[len(prefix):-len(".dist-info")]
    return None


def choices() -> str:
    """The accepted --engine values, for help texts and errors."""
    names = ", ".join(ENGINE_NAMES)
    specs = ", ".join(p.spec for p in PROFILES)
    return f"{names} (the newest modelled release, or the installed one), NAME@VERSION ({specs}), a comma list, or all"


def _resolve_name(name: str) -> tuple[Profile, str]:
    known = versions(name)
    installed = installed_version(name)
    if installed is None:
        return known[0], f"{name} is not installed here: the newest modelled release"
    exact = [p for p in known if p.version == installed]
    if exact:
        return exact[0], f"the installed {name} {installed}"
    older = [p for p in known if p.key <= version_key(installed)]
    if older:
        return older[0], (f"{name} {installed} is installed and not modelled: the nearest older modelled release "
                          f"({', '.join(p.version for p in known)} are modelled)")
    return known[-1], (f"{name} {installed} is installed, older than every modelled release: the oldest modelled "
                       "one")


class Resolved(NamedTuple):
    specs: tuple[str, ...]  # the releases to judge, in order
    notes: tuple[str, ...]  # why each release of ``specs`` (same order): "named", "the installed vllm 0.33.0", ...
    optional: tuple[str, ...]  # releases only `all` brought in: a layout they do not read is not applicable


def resolve(values: Any) -> Resolved:
    """``--engine`` values (each NAME, NAME@VERSION, a comma list or all; repeated options add up) -> the releases.
    Raises UsageError."""
    if values is None or values == "" or values == []:
        values = [DEFAULT_ENGINE]
    if isinstance(values, str):
        values = [values]
    specs: dict[str, str] = {}
    named: set[str] = set()
    for value in values:
        if not isinstance(value, str):
            raise UsageError(f"--engine {value!r}: choose {choices()}")
        for item in (part.strip() for part in value.split(",")):
            if not item:
                raise UsageError(f"--engine {value!r}: an empty name in the list; choose {choices()}")
            if item == "all":
                for name in ENGINE_NAMES:
                    p, why = _resolve_name(name)
                    specs.setdefault(p.spec, why)
            elif "@" in item:
                if item not in _BY_SPEC:
                    name = item.split("@", 1)[0]
                    known = ", ".join(p.spec for p in versions(name)) if name in ENGINE_NAMES else ""
                    raise UsageError(f"--engine {item!r} is not modelled" + (f": modelled {name} releases are "
                                     f"{known}" if known else f"; choose {choices()}"))
                specs.setdefault(item, "named")
                named.add(item)
            elif item in ENGINE_NAMES:
                p, why = _resolve_name(item)
                specs.setdefault(p.spec, why)
                named.add(p.spec)
            else:
                raise UsageError(f"--engine {item!r}: choose {choices()}")
    return Resolved(tuple(specs), tuple(specs.values()),
                    tuple(spec for spec in specs if spec not in named))


def read(ckpt: Any, spec: str, target_config: Any = None) -> Reading:
    """How engine release ``spec`` reads the checkpoint (``target_config``: the verifier's, when known)."""
    return profile(spec).read(ckpt, target_config)


AUX_CONVENTIONS = ("vllm", "sglang")
# Fields SpecForge's Kimi-K2 config template carries (configs/kimi-k2-eagle3.json; Qwen2-style leftovers) and
# speculators and EAGLE exports do not.
SPECFORGE_MARKERS = ("max_window_layers", "use_sliding_window")


def trainer_convention(ckpt: Any, option: str | None = None) -> tuple[str | None, str]:
    """How the drafter's trainer counted aux ids: (convention or None when unknown, why). "vllm": id L is the
    input of target layer L; "sglang": id X is the output of layer X (SGLang 0.5.6 and SpecForge)."""
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


@dataclass(frozen=True)
class TrainedAux:
    """Which target layers the drafter was trained on: the one model config.aux-layers and every
    engine.aux-layers judge from. ``layers`` counts outputs (-1: the embeddings); None when the ids or the trainer's
    convention are unknown."""

    ids: list[int] | None  # the ids as the trainer wrote them
    field: str  # where they were read: "eagle_aux_hidden_state_layer_ids" or "eagle_config.eagle_aux_..."
    convention: str | None
    how: str  # why that convention
    layers: tuple[int, ...] | None
    home: str = ""  # the field the convention's trainer writes (a fix that rewrites ``field`` keeps ids there)

    def keep(self, pointer: str) -> list[dict]:
        """Patch operations that keep the trained ids readable when a fix rewrites the field at ``pointer``:
        copy them to their home field, where the next reading takes them from."""
        if self.ids is None or not self.home or pointer != "/" + self.field.replace(".", "/") \
                or self.field == self.home:
            return []
        return [{"op": "add", "path": "/" + self.home.replace(".", "/"), "value": list(self.ids)}]


TOP_IDS = ("eagle_aux_hidden_state_layer_ids",)
NESTED_IDS = ("eagle_config", "eagle_aux_hidden_state_layer_ids")


def trained_aux(ckpt: Any, option: str | None = None) -> TrainedAux:
    """The trained layers, from the ids in the field the trainer writes for its own engine: a vLLM-counting trainer
    (speculators) writes the top level, which vLLM reads; an SGLang-counting one (SpecForge) writes eagle_config,
    which SGLang reads. A fix that writes each engine's ids where that engine reads them therefore never changes
    what the drafter was trained on."""
    convention, how = trainer_convention(ckpt, option)
    raw = ckpt.config_raw or {}
    order: tuple[tuple[str, ...], ...]
    if convention == "vllm" or (convention is None and ckpt.layout == SPECULATORS):
        order = (TOP_IDS, NESTED_IDS)
    else:
        order = (NESTED_IDS, TOP_IDS)
    home = ".".join(order[0]) if convention else ""
    for path in order:
        found, value, key = lookup(raw, path)
        if found and valid_ids(value):
            layers = tuple(sorted(set(captured_layers(value, convention)))) if convention else None
            return TrainedAux(list(value), key, convention, how, layers, home)
    return TrainedAux(None, "", convention, how, None, home)


def captured_layers(ids: list[int], convention: str) -> list[int]:
    """The target layer whose output each id captures, under a trainer's convention."""
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
        if trained_by == "speculators":  # the provenance names the trainer: the reading says so
            reading.engine, reading.version = speculators.NAME, speculators.VERSION
    reading.engine = f"{reading.engine} (trainer)"
    return reading


__all__ = ["PROFILES", "ENGINE_NAMES", "TRAINERS", "MIRRORED", "AUX_CONVENTIONS", "Capture", "Profile", "Reading",
           "Target", "Resolved", "describe", "read", "resolve", "profile", "newest", "versions", "trainer",
           "trainer_convention", "trained_aux", "TrainedAux", "captured_layers", "ids_for"]
