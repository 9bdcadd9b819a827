"""The one reader of every engine release: it walks a release's steps (:mod:`eagle3_checks.engines.record`) for a
checkpoint and returns the :class:`~eagle3_checks.engines.reading.Reading`. What each step means is here, once; what
each release does is its record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..drafter.checkpoint import Checkpoint
from ..drafter.config_values import class_defaults
from ..drafter.layout import SPECULATORS, Name
from . import reading
from .reading import Reading, is_int, lookup
from .record import (
    Branch,
    Call,
    Count,
    Fact,
    Ids,
    Layer,
    Refuse,
    Stop,
    Tensors,
    Value,
    Walk,
)

TLC_WHERE = "transformer_layer_config."


def read(name: str, version: str, steps: tuple, ckpt: Checkpoint, target: Any = None, launch: dict | None = None,
         switches: dict[str, Any] | None = None, judged: str | None = None) -> Reading:
    """Release ``name`` ``version``'s reading of ``ckpt`` (``version``: the release the record was read from;
    ``judged``: the release judged, which messages name): ``steps`` walked in order, with the release's stated
    differences ``switches``."""
    raw = ckpt.config_raw or {}
    nested = ckpt.layout == SPECULATORS
    w = Walk(ckpt, raw, Reading(name, version, ckpt.layout), target, launch, dict(switches or {}),
             fields=reading.layer_fields(raw, nested), where=TLC_WHERE if nested else "", judged=judged or version)
    walk(w, steps)
    return w.r


def walk(w: Walk, steps: tuple) -> None:
    for step in steps:
        _STEPS[type(step)](w, step)
        if w.stopped:
            return


def _stop(w: Walk, step: Stop) -> None:
    if not step.when(w):
        return
    if step.refusal:
        w.r.refusals.append(w.say(step.refusal))
    if step.not_modelled:
        w.r.not_modelled = w.say(step.not_modelled)
    if step.layout:
        w.r.layout_ok = False
    w.stopped = True


def _branch(w: Walk, step: Branch) -> None:
    if step.when(w):
        walk(w, step.steps)
        w.stopped = True


def _layer(w: Walk, step: Layer) -> None:
    nested = w.ckpt.layout == SPECULATORS
    defaults = (step.nested_defaults if nested and step.nested_defaults else step.defaults) or \
        class_defaults(w.facts["model_type"])
    head_dim, max_position, cls = defaults
    reading.read_layer(w.r, w.fields, w.where, (head_dim, cls), max_position, legacy_rope=step.legacy_rope)


def _value(w: Walk, step: Value) -> None:
    if step.when is not None and not step.when(w):
        return
    for dotted in step.at:
        found, value, key = lookup(w.fields if step.in_layer else w.raw, tuple(dotted.split(".")))
        if found and not (step.null_absent and value is None) and (step.valid is None or step.valid(value)):
            w.r.set(step.attr, step.take(value), w.say(step.says, key=key), key=key if step.key else None)
            return
    default = step.default(w) if callable(step.default) else step.default
    w.r.set(step.attr, default, w.say(step.why))


def _count(w: Walk, step: Count) -> None:
    if step.when is not None and not step.when(w):
        return
    for source in step.sources:
        if source.when is not None and not source.when(w):
            continue
        found, value, key = lookup(w.raw, tuple(source.at.split(".")))
        if source.kind == "int":
            counted = value if found and is_int(value) else None
        else:
            usable = isinstance(value, list) and (bool(value) or source.kind == "list")
            counted = len(value) if usable else None
        if counted is not None:
            w.r.set(step.attr, counted, w.say(source.says, key=key), key=key if source.key else None)
            return
    w.r.set(step.attr, step.default, w.say(step.why))


def _ids(w: Walk, step: Ids) -> None:
    if step.when is not None and not step.when(w):
        return
    reading.read_aux_ids(w.r, w.raw, tuple(tuple(at.split(".")) for at in step.at), w.say(step.why))


def _refuse(w: Walk, step: Refuse) -> None:
    if step.when is not None and not step.when(w):
        return
    message = w.say(step.says)
    if step.architecture:
        w.r.refuse_class(message)
    else:
        w.r.refuse(message, at=step.at)


def _fact(w: Walk, step: Fact) -> None:
    w.facts[step.name] = step.compute(w)


def _call(w: Walk, step: Call) -> None:
    step.run(w)


def _taken(w: Walk, step: Tensors) -> Callable[[str, Name], tuple[str | None, str]]:
    """The tensor rules as map_roles' accept: the first rule matching decides; none matching loads the role."""
    def accept(name: str, n: Name) -> tuple[str | None, str]:
        if step.rename is not None:
            n = step.rename(w, name, n)
        for rule in step.rules:
            if not rule.when(w, name, n):
                continue
            if rule.refuse:
                w.r.refuse(w.say(rule.refuse, name=name, n=n), at=name)
            if rule.load:
                return (rule.role(w, name, n) if rule.role else n.role), ""
            return None, w.say(rule.why, name=name, n=n)
        return n.role, ""
    return accept


def _tensors(w: Walk, step: Tensors) -> None:
    reading.map_roles(w.r, w.ckpt, _taken(w, step))
    if step.refuse_skipped:
        reading.refuse_skipped(w.r)
    if step.loaded is not None:
        step.loaded(w)
    reading.finish(w.r, w.ckpt, w.say(step.missing), narrows=step.narrows)


_STEPS: dict[type, Callable[[Walk, Any], None]] = {
    Stop: _stop, Branch: _branch, Layer: _layer, Value: _value, Count: _count, Ids: _ids, Refuse: _refuse,
    Fact: _fact, Call: _call, Tensors: _tensors,
}
