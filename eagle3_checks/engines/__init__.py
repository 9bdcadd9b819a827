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
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..drafter.checkpoint import Checkpoint
from ..drafter.config_values import PROVENANCE
from ..drafter.layout import AUX_CONVENTIONS, SPECULATORS
from ..errors import UsageError
from . import (
    llamacpp,
    lmdeploy_0_18,
    mlx_vlm_0_7,
    sglang_0_5_6,
    sglang_0_5_23,
    specforge,
    speculators,
    trtllm_1_4,
    vllm_0_33,
)
from .profile import Capture, Profile, Release, Target, output_of, version_key
from .reading import Reading, lookup, valid_ids

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
        out.append({"name": p.name, "kind": kind, "profile": p.version, "module": p.read.__module__,
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
    the launch settings, for a release that takes the aux layers from its launch rather than the config)."""
    p = profile(spec)
    if p.launch_ids or p.launch_window:
        return p.read(ckpt, target_config, launch=launch)
    return p.read(ckpt, target_config)


# Fields SpecForge's Kimi-K2 config template carries (configs/kimi-k2-eagle3.json; Qwen2-style leftovers) and
# speculators and EAGLE exports do not.
SPECFORGE_MARKERS = ("max_window_layers", "use_sliding_window")


def _convention(ckpt: Checkpoint, option: str | None) -> tuple[str | None, str, str]:
    """(convention, why, how it was known: "option", "provenance", "layout", "specforge-fields" or "unknown")."""
    if option:
        return option, "--aux-convention", "option"
    provenance = (ckpt.config_raw or {}).get(PROVENANCE)
    if isinstance(provenance, dict) and provenance.get("aux_layer_convention") in AUX_CONVENTIONS:
        return (provenance["aux_layer_convention"], f"{PROVENANCE} in config.json (written by eagle3-checks convert)",
                "provenance")
    if ckpt.layout == SPECULATORS:
        return "vllm", "a speculators checkpoint: speculators captures its training states through vLLM", "layout"
    raw = ckpt.config_raw or {}
    markers = [m for m in SPECFORGE_MARKERS if m in raw]
    if markers:
        return "sglang", (f"SpecForge template fields in config.json ({', '.join(markers)}): SpecForge trains on "
                          "states captured the SGLang way"), "specforge-fields"
    return None, "unknown: a flat config does not say how its trainer counted (pass --aux-convention)", "unknown"


def trainer_convention(ckpt: Checkpoint, option: str | None = None) -> tuple[str | None, str]:
    """How the drafter's trainer counted aux ids: (convention or None when unknown, why). "vllm": id L is the
    input of target layer L (speculators, through vLLM); "sglang": id X is the output of layer X (SGLang's +1; see
    :func:`trainer_capture` for the releases that count DeepSeek-style targets otherwise)."""
    convention, how, _ = _convention(ckpt, option)
    return convention, how


TOP_IDS = ("eagle_aux_hidden_state_layer_ids",)
NESTED_IDS = ("eagle_config", "eagle_aux_hidden_state_layer_ids")
# Where `fix` keeps the trained ids when it rewrites the field they were read from: the layers a drafter was trained
# on are a fact of its training, not of the ids an engine needs (which differ by engine and target).
HELD = "trained_aux"


@dataclass(frozen=True)
class TrainedAux:
    """Which target layers the drafter was trained on: the one model config.aux-layers and every
    engine.aux-layers judge from. ``layers`` counts outputs (-1: the embeddings); None when the ids, the trainer's
    convention or (for a convention that counts by the target's class) the target are unknown."""

    ids: list[int] | None  # the ids as the trainer wrote them
    field: str  # where they were read: "eagle_aux_hidden_state_layer_ids" or "eagle_config.eagle_aux_..."
    convention: str | None
    how: str  # why that convention, and how the ids became layers
    layers: tuple[int, ...] | None
    order: tuple[str, ...] = ()  # the ids fields in the order they were looked up (dotted)
    held: bool = False  # read from the provenance record a fix wrote

    def record(self) -> dict:
        return {"ids": list(self.ids or ()), "field": self.field, "convention": self.convention,
                "layers": list(self.layers or ())}

    def hold(self, pointer: str) -> list[dict]:
        """Patch operations that keep the trained layers when a fix writes the ids field at ``pointer``: a record in
        the provenance block, when the field written is the one the trained ids came from or one looked up before
        it (the next reading would otherwise take the rewritten ids for the trained ones)."""
        if self.held or self.layers is None or self.field not in self.order:
            return []
        written = pointer.lstrip("/").replace("/", ".")
        if written not in self.order or self.order.index(written) > self.order.index(self.field):
            return []
        return [{"op": "add", "path": f"/{PROVENANCE}/{HELD}", "value": self.record()}]


def trainer_capture(ids: list[int], convention: str, target: Target | None) -> Capture:
    """The target layers a trainer of ``convention`` trained on, from its ids: "vllm", id L = the input of layer L
    on any target (vLLM's capture, through which speculators 0.9 records its training states); "sglang", id X = the
    output of layer X on any target, as SGLang counted on every target class before PR #25454 (0.5.6:
    srt/models/llama.py:740-742, deepseek_v2.py:4097-4101). SpecForge 0.2.0's SGLang 0.5.14 already counts
    DeepSeek-style targets raw, which is the "vllm" convention (:func:`specforge.capture`)."""
    if convention == "vllm":
        return vllm_0_33.capture(ids, target)
    return Capture(output_of(sorted(set(ids))), "id X = the output of layer X (SGLang's +1, on every target before "
                   "PR #25454: 0.5.6 srt/models/llama.py:740-742, deepseek_v2.py:4097-4101)")


def _specforge_era(ids: list[int], target: Target | None) -> str | None:
    """Why an inferred SGLang convention is undecided: on a DeepSeek-style target whose first id is not 1, SpecForge
    before SGLang PR #25454 trained on the outputs of the ids' layers, SpecForge 0.2.0 (SGLang 0.5.14) on the
    inputs. None when both count alike."""
    raw = specforge.capture(ids, target)
    plus = output_of(sorted(set(ids)))
    if target is None or target.architecture is None or raw.layers is None or raw.layers == plus:
        return None
    return (f"on {target.architecture}, SpecForge with an SGLang before PR #25454 trained on the outputs of layers "
            f"{list(plus)}, and {raw.rule} on the outputs of layers {list(raw.layers)}: pass --aux-convention sglang "
            f"(the older) or vllm (SpecForge {specforge.VERSION}'s raw ids)")


def _held(raw: dict) -> dict | None:
    provenance = raw.get(PROVENANCE)
    record = provenance.get(HELD) if isinstance(provenance, dict) else None
    if not isinstance(record, dict) or not valid_ids(record.get("ids")) or record.get("convention") not in \
            AUX_CONVENTIONS or not isinstance(record.get("layers"), list) or \
            not all(type(x) is int and x >= -1 for x in record["layers"]):
        return None
    return record


def trained_aux(ckpt: Checkpoint, option: str | None = None, target: Target | None = None) -> TrainedAux:
    """The trained layers, from the ids in the field the trainer writes for its own engine: a vLLM-counting trainer
    (speculators) writes the top level, which vLLM reads; an SGLang-counting one (SpecForge) writes eagle_config,
    which SGLang reads. A fix that rewrites that field first records the trained layers in the provenance block
    (:meth:`TrainedAux.hold`), so following the gate's advice never changes what the drafter was trained on."""
    convention, how, known_by = _convention(ckpt, option)
    raw = ckpt.config_raw or {}
    held = _held(raw)
    if held is not None and option in (None, held["convention"]):
        return TrainedAux(list(held["ids"]), str(held["field"]), held["convention"],
                          f"held in {PROVENANCE}.{HELD} (written by eagle3-checks convert or fix), from "
                          f"{held['field']} "
                          f"{held['ids']} ({held['convention']} convention)",
                          tuple(sorted(set(held["layers"]))), held=True)
    order: tuple[tuple[str, ...], ...]
    if convention == "vllm" or (convention is None and ckpt.layout == SPECULATORS):
        order = (TOP_IDS, NESTED_IDS)
    else:
        order = (NESTED_IDS, TOP_IDS)
    dotted = tuple(".".join(path) for path in order)
    if held is not None:  # an explicit --aux-convention other than the recorded one: recount the recorded ids
        value, key = held["ids"], str(held["field"])
    else:
        value, key = None, ""
        for path in order:
            found, value, key = lookup(raw, path)
            if found and valid_ids(value):
                break
        else:
            return TrainedAux(None, "", convention, how, None, dotted)
    if not convention:
        return TrainedAux(list(value), key, convention, how, None, dotted)
    undecided = _specforge_era(list(value), target) if known_by == "specforge-fields" else None
    if undecided:
        return TrainedAux(list(value), key, convention, f"{how}; {undecided}", None, dotted)
    return TrainedAux(list(value), key, convention, how, trainer_capture(list(value), convention, target).layers,
                      dotted)


def named_verifier(raw: dict | None) -> list[str]:
    """The verifier's architectures as the drafter's config names them: speculators_config.verifier, or the
    provenance block convert writes into a flat config."""
    raw = raw or {}
    for holder in (raw.get("speculators_config"), raw.get(PROVENANCE)):
        verifier = holder.get("verifier") if isinstance(holder, dict) else None
        archs = verifier.get("architectures") if isinstance(verifier, dict) else None
        if isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs):
            return list(archs)
    return []


def target_of(ckpt: Checkpoint, target_config: Any = None) -> Target | None:
    """What the capture rules count by: the verifier's config (--target-config), else the verifier the drafter's
    config names (its class, not its depth)."""
    target = Target.of(target_config)
    if target is not None and target.architecture:
        return target
    named = named_verifier(ckpt.config_raw)
    if named:
        return Target(named[0], target.num_layers if target is not None else None)
    return target


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


class TrainerRelease(NamedTuple):
    """Which trainer and release the checkpoint shows it was trained with, and how that is known."""

    name: str | None  # "speculators", "specforge", or None: the checkpoint does not say
    version: str | None  # None: the trainer writes no release into what it saves
    how: str


def trainer_release(ckpt: Checkpoint) -> TrainerRelease:
    """The trainer release, from what the checkpoint shows: speculators writes ``speculators_version`` (a flat copy
    converted by eagle3-checks keeps its trainer in the provenance block), SpecForge's saved configs carry its
    template's fields and no version."""
    raw = ckpt.config_raw or {}
    provenance = raw.get(PROVENANCE)
    by_provenance = isinstance(provenance, dict) and provenance.get("trainer") == speculators.NAME
    if ckpt.layout == SPECULATORS or by_provenance:
        stated = raw.get("speculators_version")
        if isinstance(stated, str) and stated:
            return TrainerRelease(speculators.NAME, stated, "speculators_version in config.json")
        return TrainerRelease(speculators.NAME, None, "a speculators checkpoint without speculators_version"
                              if not by_provenance else f"{PROVENANCE}.trainer, without speculators_version")
    markers = [m for m in SPECFORGE_MARKERS if m in raw]
    if markers:
        return TrainerRelease(specforge.NAME, None, f"SpecForge template fields in config.json ({', '.join(markers)}); "
                              "SpecForge saves no release number")
    return TrainerRelease(None, None, "the checkpoint names no trainer")


def trainer_said(ckpt: Checkpoint) -> tuple[TrainerRelease, str]:
    """What every report says of the trainer: the release the checkpoint shows (and how that was known), and the
    trainer reading the engine, forward and acceptance levels compare against ("speculators 0.9.0")."""
    found = trainer_release(ckpt)
    r = trainer(ckpt)
    name = r.engine.removesuffix(" (trainer)")
    if found.name == name and found.version and r.version == found.version and name in ENGINE_NAMES:
        judged = judge(name, found.version)  # a release judged by another's reading names that one
        if judged.release and judged.release != found.version:
            return found, f"{name} {judged.release}"
    return found, f"{name} {r.version}"


def trainer_readings(ckpt: Checkpoint) -> list[tuple[str, Reading]]:
    """For a checkpoint whose trainer is known and its release not, each known release's reading (oldest first;
    one per distinct reading, the newest release of each): where they differ, what the weights mean depends on a
    release the checkpoint does not state."""
    found = trainer_release(ckpt)
    if found.version is not None:
        return []
    if found.name == specforge.NAME:  # the newest release last: the default reading
        return [(rel.version, specforge.read(ckpt, **dict(rel.differs)))
                for rel in (*specforge.RELEASES[:-1], *specforge.UNRELEASED, specforge.RELEASES[-1])]
    if found.name == speculators.NAME and ckpt.layout == SPECULATORS:
        out: dict[tuple, tuple[str, Reading]] = {}
        for rel in speculators.RELEASES:
            out[rel.differs] = (rel.version, speculators.PROFILE.at(rel.version, rel.differs).read(ckpt, lenient=True))
        return sorted(out.values(), key=lambda x: version_key(x[0]))
    return []


def trainer(ckpt: Checkpoint) -> Reading:
    """The reading of the program that trained the drafter. A flat checkpoint converted by eagle3-checks from the
    speculators layout keeps speculators' meaning of norm_output (the state fed back), which its provenance says."""
    if ckpt.layout == SPECULATORS:
        # the release the checkpoint states (speculators_version), judged as judge() judges any release; else 0.9.0
        stated = trainer_release(ckpt).version
        p = judge(speculators.NAME, stated).profile if stated and version_key(stated) else speculators.PROFILE
        reading = p.read(ckpt, lenient=True)
    else:
        provenance = (ckpt.config_raw or {}).get(PROVENANCE)
        trained_by = provenance.get("trainer") if isinstance(provenance, dict) else None
        reading = specforge.read(ckpt, speculators_meaning=trained_by == "speculators")
        if trained_by == "speculators":  # the provenance names the trainer: the reading says so
            reading.engine, reading.version = speculators.NAME, speculators.VERSION
    reading.engine = f"{reading.engine} (trainer)"
    return reading


__all__ = ["PROFILES", "ENGINE_NAMES", "TRAINERS", "Release", "Judged", "judge", "releases", "release_warning",
           "catalogue", "TrainerRelease", "trainer_release", "trainer_readings", "trainer_said", "AUX_CONVENTIONS",
           "Capture", "Profile", "Reading",
           "Target", "Resolved", "describe", "read", "resolve", "profile", "newest", "versions", "trainer",
           "trainer_convention", "trained_aux", "TrainedAux", "trainer_capture", "target_of", "named_verifier",
           "ids_where_read"]
