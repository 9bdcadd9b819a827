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

from ..basis import ASSUMED, READ, RECORDED
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
    trainers,
    trtllm_1_4,
    vllm_0_33,
)
from .capture import vllm_input
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


def _convention(ckpt: Checkpoint, option: str | None,
                identity: trainers.Identity | None = None) -> tuple[str | None, str, str, str]:
    """(convention, why, how it was known: "option", "provenance", "trainer" or "unknown", its basis)."""
    if option:
        return option, "--aux-convention", "option", READ
    provenance = (ckpt.config_raw or {}).get(PROVENANCE)
    if isinstance(provenance, dict) and provenance.get("aux_layer_convention") in AUX_CONVENTIONS:
        return (provenance["aux_layer_convention"], f"{PROVENANCE} in config.json (written by eagle3-checks convert)",
                "provenance", READ)
    identity = identity or trainers.identify(ckpt)
    if identity.name == speculators.NAME:
        return "vllm", (f"trained by speculators ({identity.how}): speculators captures its training states "
                        "through vLLM"), "trainer", identity.basis
    if identity.name == specforge.NAME:
        return "sglang", (f"trained by SpecForge ({identity.how}): SpecForge trains on states captured the SGLang "
                          "way"), "trainer", identity.basis
    return None, (f"unknown: the trainer is unknown ({identity.how}), and with it how the ids were counted (pass "
                  "--aux-convention, --trainer or --source)"), "unknown", ASSUMED


def trainer_convention(ckpt: Checkpoint, option: str | None = None) -> tuple[str | None, str]:
    """How the drafter's trainer counted aux ids: (convention or None when unknown, why). "vllm": id L is the
    input of target layer L (speculators, through vLLM); "sglang": id X is the output of layer X (SGLang's +1; see
    :func:`trainer_capture` for the releases that count DeepSeek-style targets otherwise)."""
    convention, how, _, _ = _convention(ckpt, option)
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
    basis: str = READ  # what the convention rests on (READ: stated; INFERRED: from the trainer's identity)
    # where ``layers`` is None but the ids are known: each counting the evidence leaves possible and the layers the
    # drafter was trained on under it (a conclusion the same under all of them is known: engine.aux-layers)
    readings: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def possible(self) -> dict[str, tuple[int, ...]]:
        """The trained layers under each reading the evidence leaves possible (one entry when they are known)."""
        if self.layers is not None:
            return {self.convention or "stated": self.layers}
        return dict(self.readings)

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
        return vllm_input(ids, target)
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


def _countings(ids: list[int], target: Target | None) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The trained layers under each counting a trainer of the modelled ones used (who trained it unknown)."""
    out = []
    for convention, said in (("vllm", "counted as vLLM does (id L = the input of layer L)"),
                             ("sglang", "counted as SGLang did before PR #25454 (id X = the output of layer X)")):
        layers = trainer_capture(ids, convention, target).layers
        if layers is None:
            return ()
        out.append((said, layers))
    return tuple(out)


def _held(raw: dict) -> dict | None:
    provenance = raw.get(PROVENANCE)
    record = provenance.get(HELD) if isinstance(provenance, dict) else None
    if not isinstance(record, dict) or not valid_ids(record.get("ids")) or record.get("convention") not in \
            AUX_CONVENTIONS or not isinstance(record.get("layers"), list) or \
            not all(type(x) is int and x >= -1 for x in record["layers"]):
        return None
    return record


def trained_aux(ckpt: Checkpoint, option: str | None = None, target: Target | None = None,
                identity: trainers.Identity | None = None) -> TrainedAux:
    """The trained layers, from the ids in the field the trainer writes for its own engine: a vLLM-counting trainer
    (speculators) writes the top level, which vLLM reads; an SGLang-counting one (SpecForge) writes eagle_config,
    which SGLang reads. The ids are read from the config the trainer saved (``config_speculators.json`` beside the
    checkpoint, or ``--source``) when there is one. A fix that rewrites that field first records the trained layers
    in the provenance block (:meth:`TrainedAux.hold`), so following the gate's advice never changes what the drafter
    was trained on."""
    identity = identity or trainers.identify(ckpt)
    convention, how, known_by, basis = _convention(ckpt, option, identity)
    raw = ckpt.config_raw or {}
    held = _held(raw)
    if held is not None and option in (None, held["convention"]):
        return TrainedAux(list(held["ids"]), str(held["field"]), held["convention"],
                          f"held in {PROVENANCE}.{HELD} (written by eagle3-checks convert or fix), from "
                          f"{held['field']} "
                          f"{held['ids']} ({held['convention']} convention)",
                          tuple(sorted(set(held["layers"]))), held=True)
    own = identity.config if identity.config is not None and known_by != "provenance" else None
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
            found, value, key = lookup(own if own is not None else raw, path)
            if found and valid_ids(value):
                break
        else:
            return TrainedAux(None, "", convention, how, None, dotted, basis=basis)
        if own is not None:
            key = f"{identity.config_from}: {key}"
            how = f"{how}; the ids of {identity.config_from}"
    if not convention:
        return TrainedAux(list(value), key, convention, how, None, dotted, basis=basis,
                          readings=_countings(list(value), target))
    if convention == "sglang" and known_by == "trainer" and identity.name == specforge.NAME and \
            identity.version == specforge.VERSION and identity.known:
        # a stated release settles what its pins settle: SpecForge 0.2.0 captures through SGLang 0.5.14's target
        # model (specforge.capture)
        pinned = specforge.capture(list(value), target)
        if pinned.layers is not None:
            return TrainedAux(list(value), key, convention, f"{how}; {pinned.rule}", pinned.layers, dotted,
                              basis=basis)
    undecided = _specforge_era(list(value), target) if convention == "sglang" and known_by == "trainer" else None
    if undecided:
        pinned = specforge.capture(list(value), target)
        plus = output_of(sorted(set(value)))
        era: tuple[tuple[str, tuple[int, ...]], ...] = (
            ("SpecForge with an SGLang before PR #25454 (id X = the output of layer X)", plus),)
        if pinned.layers is not None:
            era += ((f"SpecForge {specforge.VERSION} ({pinned.rule})", pinned.layers),)
        return TrainedAux(list(value), key, convention, f"{how}; {undecided}", None, dotted, basis=basis,
                          readings=era)
    return TrainedAux(list(value), key, convention, how, trainer_capture(list(value), convention, target).layers,
                      dotted, basis=basis)


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
           "ids_where_read"]
