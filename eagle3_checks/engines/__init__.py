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

import functools
import os
import sys
from typing import Any, NamedTuple

from ..basis import READ, RECORDED
from ..drafter.checkpoint import Checkpoint
from ..drafter.layout import AUX_CONVENTIONS
from ..errors import UsageError
from . import (
    llamacpp,
    lmdeploy_0_18,
    mlx_vlm_0_7,
    sglang_0_5_6,
    sglang_0_5_23,
    specforge,
    speculators,
    trainers,
    trtllm_1_4,
    vllm_0_33,
)
from .profile import Capture, Profile, Release, Target, version_key
from .reading import Reading, valid_ids
from .trained_aux import (
    HELD,
    NESTED_IDS,
    TOP_IDS,
    TrainedAux,
    named_verifier,
    target_of,
    trained_aux,
    trainer_capture,
    trainer_convention,
)

# Every modelled release, in the order reports list them (each engine's newest first).
PROFILES: tuple[Profile, ...] = (vllm_0_33.PROFILE, sglang_0_5_23.PROFILE, sglang_0_5_6.PROFILE,
                                 trtllm_1_4.PROFILE, llamacpp.PROFILE, lmdeploy_0_18.PROFILE, mlx_vlm_0_7.PROFILE,
                                 speculators.PROFILE)
# The serving engines (and speculators, which also loads drafters), in report order.
ENGINE_NAMES: tuple[str, ...] = tuple(dict.fromkeys(p.name for p in PROFILES))
_BY_SPEC = {p.spec: p for p in PROFILES}
# The trainers whose readings define "what was trained".
TRAINERS = {"speculators": speculators, "specforge": specforge}
DEFAULT_ENGINE = "vllm"


def describe() -> str:
    """'vllm 0.32.0 to 0.33.0, sglang 0.5.23, ...': the releases this release of eagle3-checks models (--version)."""
    ranges = [f"{p.name} {p.range}" for p in PROFILES]
    return ", ".join([*ranges, f"specforge {_trainer_range()}"])


def versions(name: str) -> list[Profile]:
    """The modelled readings of one engine (a profile each, named by the release its citations are read from),
    newest first."""
    return sorted((p for p in PROFILES if p.name == name), key=lambda p: p.key, reverse=True)


def releases(name: str) -> list[tuple[Release, Profile]]:
    """Every release of one engine a profile holds for, with that profile, oldest first."""
    return sorted(((rel, p) for p in PROFILES if p.name == name for rel in p.holds_for), key=lambda x: x[0].key)


def newest(name: str) -> Profile:
    """The newest release any profile of the engine holds for."""
    rel, p = releases(name)[-1]
    return p.at(rel.version, rel.differs)


class Judged(NamedTuple):
    profile: Profile  # the profile for the release (its ``version`` is the release judged)
    note: str  # which profile judges it, and why
    warning: str | None  # set when no recording covers the release: it is judged by the nearest recorded one
    release: str = ""  # the modelled release whose reading (and stated differences) judges it


def judge(name: str, version: str) -> Judged:
    """Which profile judges release ``version`` of engine ``name``: the one that holds for it; inside a profile's
    range between two recorded releases that agree, that profile; otherwise (between releases whose readings
    differ, or outside every range) the nearest recorded release below it (above it, for one older than all), with a
    warning that names the recorded releases around it."""
    known = releases(name)
    for rel, p in known:
        if rel.version == version:
            own = "" if version == p.version else f"; the {name} {p.version} profile, which holds for {p.range}"
            return Judged(p.at(version, rel.differs), f"{name} {version} ({rel.how}{own})", None, rel.version)
    key = version_key(version)
    for rel, p in known:  # a build of a modelled release (0.33.0+cpu, 0.9.0.dev1): its numbers are that release's
        if rel.key == key:
            return Judged(p.at(version, rel.differs), f"{name} {version}, a build of {rel.version}: judged as "
                          f"{rel.version} ({rel.how})", None, rel.version)
    older = [x for x in known if x[0].key < key]
    newer = [x for x in known if x[0].key > key]
    if older and newer and older[-1][1] is newer[0][1] and older[-1][0].differs == newer[0][0].differs:
        (low, p), high = older[-1], newer[0][0]
        return Judged(p.at(version, low.differs), f"{name} {version} is not "
                      f"{'recorded' if low.recorded else 'modelled'}: it lies inside the {name} "
                      f"{p.version} profile's range ({p.range}), whose releases {low.version} and {high.version} "
                      "around it read drafters alike", None, low.version)
    rel, p = older[-1] if older else newer[0]
    known_as = "recorded" if rel.recorded else "modelled"
    around = " and ".join(x[0].version for x in (older[-1:] + newer[:1]))
    if older and newer:
        where = f"between {around}, which read drafters differently"
    elif older:
        where = f"newer than every {known_as} release (the newest is {around})"
    else:
        where = f"older than every {known_as} release (the oldest is {around})"
    how_to = f"record it: conformance/run.sh {name}@{version}" if rel.recorded else \
        "read its package and state its differences as a Release of the profile"
    warning = (f"{name} {version} is {where}: judged as {rel.version} ({rel.how}), the nearest; what changed "
               f"in {version} is not modelled ({how_to})")
    return Judged(p.at(version, rel.differs), warning, warning, rel.version)


@functools.lru_cache(maxsize=64)
def _judged(spec: str) -> Judged:
    name, _, version = spec.partition("@")
    return judge(name, version)


def profile(spec: str) -> Profile:
    """The profile of ``name@version`` (any release: see :func:`judge`), or of a bare name (its newest release)."""
    if spec in _BY_SPEC:
        return _BY_SPEC[spec]
    if "@" not in spec:
        return newest(spec)
    return _judged(spec).profile


def known_by(spec: str) -> str:
    """What a statement about release ``spec``'s reading rests on: RECORDED when the release that judges it has a
    conformance recording (or the engine's own code runs in the default tests, as speculators'), else READ (its
    released package's source, cited)."""
    name, _, version = spec.partition("@")
    judged = judge(name, version) if version else None
    release = judged.release if judged else newest(name).version
    for rel, _ in releases(name):
        if rel.version == release:
            return RECORDED if rel.recorded or rel.peer else READ
    return READ


def release_warning(spec: str) -> str | None:
    """Why release ``spec`` is judged by another recorded release, when no recording covers it (engine.release)."""
    return _judged(spec).warning if "@" in spec and spec.split("@", 1)[0] in ENGINE_NAMES else None


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
    ranges = ", ".join(f"{p.name} {p.range}" for p in PROFILES)
    return (f"{names} (the installed release, else the newest modelled), NAME@VERSION (modelled: {ranges}; other "
            "releases are judged by the nearest recorded one, with a warning), a comma list, or all")


def _resolve_name(name: str) -> tuple[Profile, str]:
    installed = installed_version(newest(name).package or name)
    if installed is None:
        p = newest(name)
        return p, f"{name} is not installed here: the newest modelled release, {p.version}"
    judged = judge(name, installed)
    return judged.profile, f"the installed {name} {installed}: judged as {judged.note}"


def _release_record(r: Release) -> dict[str, Any]:
    return {"version": r.version, "released": r.released or None, "recorded": r.recorded, "how": r.how,
            "differs": dict(r.differs), "why": r.why}


def _trainer_range() -> str:
    first, last = specforge.RELEASES[0].version, specforge.RELEASES[-1].version
    return first if first == last else f"{first} to {last}"


def catalogue() -> list[dict]:
    """Every modelled engine and trainer release, as data (``list --engines``, the docs' release table): each
    profile, the range it holds for, and each release's date, recording date and stated differences."""
    out: list[dict[str, Any]] = []
    for p in PROFILES:
        kind = "engine and trainer" if p.name in TRAINERS else "engine"
        out.append({"name": p.name, "kind": kind, "profile": p.version, "module": p.module,
                    "holds_for": [p.holds_for[0].version, p.holds_for[-1].version], "reads_ids": p.reads_ids,
                    "families": list(p.families), "releases": [_release_record(r) for r in p.holds_for]})
    for name, module in TRAINERS.items():
        if name not in ENGINE_NAMES:
            rels = module.RELEASES
            out.append({"name": name, "kind": "trainer", "profile": module.VERSION, "module": module.__name__,
                        "holds_for": [rels[0].version, rels[-1].version], "reads_ids": None, "families": [],
                        "releases": [_release_record(r) for r in rels]
                        + [{**_release_record(r), "how": "in no release: read from the change"}
                           for r in getattr(module, "UNRELEASED", ())]})
    return out


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
                name, _, version = item.partition("@")
                if name not in ENGINE_NAMES:
                    raise UsageError(f"--engine {item!r}: no engine {name!r}; choose {choices()}")
                if not version_key(version):
                    raise UsageError(f"--engine {item!r}: {version!r} is no release number (such as "
                                     f"{newest(name).version})")
                spec = f"{name}@{version}"
                specs.setdefault(spec, f"named: {_judged(spec).note}")
                named.add(spec)
            elif item in ENGINE_NAMES:
                p, why = _resolve_name(item)
                specs.setdefault(p.spec, why)
                named.add(p.spec)
            else:
                raise UsageError(f"--engine {item!r}: choose {choices()}")
    return Resolved(tuple(specs), tuple(specs.values()),
                    tuple(spec for spec in specs if spec not in named))


def read(ckpt: Checkpoint, spec: str, target_config: Any = None, launch: dict | None = None) -> Reading:
    """How engine release ``spec`` reads the checkpoint (``target_config``: the verifier's, when known; ``launch``:
    the launch settings it is started with, which a release's reading may read: TensorRT-LLM's aux layers, vLLM's
    speculative config)."""
    return profile(spec).read(ckpt, target_config, launch=launch)


def ids_where_read(specs: Any, layers: tuple[int, ...], target: Target | None) -> dict[str, list[int] | None]:
    """The one rule by which the aux ids are written, for ``convert`` and every engine.aux-layers fix alike: for
    each release, the JSON pointer of the field it reads -> the ids that make it capture ``layers`` on ``target``
    (None where no ids can, or where that depends on a target class that is not known). Two releases that read
    one field get the first one's ids: give one release per field."""
    out: dict[str, list[int] | None] = {}
    for spec in specs:
        p = profile(spec)
        if p.ids_pointer not in out:
            ids = p.ids_for(layers, target)
            out[p.ids_pointer] = ids if ids is not None and reaches(p, ids, layers, target) else None
    return out


def reaches(p: Profile, ids: list[int], layers: tuple[int, ...], target: Target | None) -> bool:
    """Whether ``ids``, read back by the release as the gate reads them, make it capture ``layers``: ids the gate's
    readers take (non-negative integers; SGLang 0.5.23 would turn a -1, for the embeddings' output, into
    layers_to_capture 0, srt/models/llama.py:941, which no recording covers), the layers its capture rule gives
    back, and none past the last id that captures anything on this target. An edit that fails this would be
    proposed again by the next round of ``fix``: no ids are written instead, and the finding says that no ids can."""
    if not valid_ids(ids):
        return False
    got = p.capture(ids, target)
    return got.layers == tuple(sorted(set(layers))) and (got.last_id is None or max(ids) <= got.last_id)


def identify(ckpt: Checkpoint, source: Checkpoint | None = None, stated: str | None = None) -> trainers.Identity:
    """Who trained the drafter, from evidence only (:func:`eagle3_checks.engines.trainers.identify`)."""
    return trainers.identify(ckpt, source, stated)


def trained(ckpt: Checkpoint, identity: trainers.Identity | None = None) -> trainers.Trained:
    """What the drafter was trained to compute: the reading the gate judges against, and every other reading the
    evidence leaves possible."""
    return trainers.readings(ckpt, identity or trainers.identify(ckpt))


def trainer(ckpt: Checkpoint, identity: trainers.Identity | None = None) -> Reading:
    """The reading the gate judges the drafter against (:func:`trained`'s first)."""
    return trained(ckpt, identity).reading


def trainer_said(ckpt: Checkpoint, identity: trainers.Identity | None = None) -> tuple[trainers.Identity, str]:
    """What every report says of the trainer: who trained it, as far as the evidence goes, and the trainer reading the
    engine, forward and acceptance levels compare against ("speculators 0.9.0")."""
    identity = identity or trainers.identify(ckpt)
    return identity, trained(ckpt, identity).label


__all__ = ["PROFILES", "ENGINE_NAMES", "TRAINERS", "Release", "Judged", "judge", "releases", "release_warning",
           "catalogue", "identify", "trained", "trainer_said", "known_by", "AUX_CONVENTIONS",
           "Capture", "Profile", "Reading",
           "Target", "Resolved", "describe", "read", "resolve", "profile", "newest", "versions", "trainer",
           "trainer_convention", "trained_aux", "TrainedAux", "trainer_capture", "target_of", "named_verifier",
           "ids_where_read", "HELD", "NESTED_IDS", "TOP_IDS"]
