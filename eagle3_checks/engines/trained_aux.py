"""Which target layers a drafter was trained on: how its trainer counted the aux-layer ids (the trainers' conventions),
from what the checkpoint, an option or the trainer's identity states, and every counting the evidence leaves possible
where it states none. config.aux-layers and every engine.aux-layers judge from one :class:`TrainedAux`; ``fix`` keeps
it in the provenance block when it rewrites the field the ids came from."""

from __future__ import annotations

from typing import Any

from ..basis import ASSUMED, READ
from ..drafter.checkpoint import Checkpoint
from ..drafter.config_values import PROVENANCE
from ..drafter.layout import AUX_CONVENTIONS, SPECULATORS
from ..fast_dataclass import dataclass
from . import specforge, speculators, trainers
from .capture import vllm_input
from .profile import Capture, Target, output_of
from .reading import lookup, valid_ids


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
