"""The installed engine's verdict in the engine checks: the release's modelled reading of the candidate with what
the engine's own recording of it showed in its place (``conformance/README.md`` describes the recording).

When a release is judged live (``--engine NAME@installed``), ``engine.loads``, ``engine.semantics`` and
``engine.aux-layers`` judge this corrected reading: the refusal the engine raised, the parameters it left unwritten,
the tensors it cut or ignored, the config values it built the drafter with and the target layers it captures are
the engine's; what a recording does not show (which trained role a tensor was, the trainer's reading) stays the
profile's. ``engine.live`` compares the uncorrected reading with the recording and reports each disagreement.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .. import engines
from ..engines.profile import Limit
from ..engines.reading import AFTER_LOAD, Reading
from ..engines.recorded import concatenated, left_unwritten

# recording config field -> (the reading's attribute, how the recorded value becomes the attribute's)
_CONFIG: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "head_dim": ("head_dim", int),
    "num_aux": ("num_aux", int),
    "fc_norm": ("fc_norm", bool),
    "norm_before_fc": ("input_norm", bool),
    "norm_output": ("feedback", lambda v: "normed" if v else "prenorm"),
    "norm_before_residual": ("norm_before_residual", bool),
    "target_hidden_size": ("target_hidden_size", int),
    "num_hidden_layers": ("num_layers", int),
    "rope_theta": ("rope_theta", float),
}


def said_by(r: Reading) -> str:
    return f"the installed {r.engine} {r.version}, live"


def corrected(r: Reading, rec: dict, limit: Limit | None = None) -> Reading:
    """``r`` (the profile's reading) with the recording's facts in place of the profile's predictions. ``limit``:
    engine.serving's verdict on the served context; a refusal it states (SGLang's context check, at the config stage)
    stays that check's, not a load refusal."""
    out = copy.deepcopy(r)
    who = said_by(r)
    refused = rec.get("refused")
    cpu_only = bool(refused and refused.get("cpu_only"))
    context_refusal = bool(refused and limit is not None and limit.refuses and refused.get("stage") == "config")
    if refused and not cpu_only and not context_refusal and not out.class_refusal:
        message = f"{refused['type']}: {refused['message'][:300]} ({who}, at the {refused.get('stage', '?')} stage)"
        out.refusals = [message]
        out.refused_at = {message: refused["at"]} if refused.get("at") and "/" not in refused["at"] else {}
        # nothing serves in the place of a tensor whose load the profile says is refused (engine.loads skips those)
        out.replaced = {k: v for k, v in out.replaced.items() if k not in r.refused_at.values()}
    elif not refused and out.layout_ok and not out.class_refusal:
        out.refusals, out.refused_at = [], {}  # the engine built and loaded it
    # (a class the profile says the release does not build stays refused: the engine.live finding says where the
    # engine did otherwise)
    if not refused:
        _loading(out, rec, who)
    _config(out, rec.get("config") or {}, who)
    return out


def _loading(out: Reading, rec: dict, who: str) -> None:
    """Unwritten parameters, narrowed and ignored tensors: the engine's."""
    unwritten = set(left_unwritten(rec, out))
    # what the profile predicts serving puts there after load (the target's embedding) or shares is not the loader's
    kept = {role: how for role, how in out.unfilled.items() if how.startswith(("shared", AFTER_LOAD))}
    out.unfilled = {**kept, **{role: f"its initial values: left unwritten by {who}" for role in sorted(unwritten)
                               if role not in kept}}
    for role in unwritten:
        out.tensors.pop(role, None)
    narrowed = sorted(name for name, loads in rec.get("loaded", {}).items() if any(x.get("narrowed") for x in loads))
    out.narrowed = {name: out.narrowed.get(name) or f"cut to the parameter's shape by {who}" for name in narrowed}
    out.narrowed_to = {name: shape for name, shape in out.narrowed_to.items() if name in out.narrowed}
    ignored = set(rec.get("ignored", []))
    out.ignored = {name: out.ignored.get(name) or f"ignored by {who}: no parameter received it" for name in
                   sorted(ignored) if name in out.ignored or name not in concatenated(rec)}
    for role in [role for role, name in out.tensors.items() if name in out.ignored]:  # loaded into nothing
        del out.tensors[role]


def _config(out: Reading, cfg: dict, who: str) -> None:
    """The config values the engine built the drafter with, where the recording read them back."""
    recorded = engines.profile(f"{out.engine}@{out.version}").recorded_config
    for field, (attr, convert) in _CONFIG.items():
        value = cfg.get(field)
        if value is None or (field == "head_dim" and out.family == "mla"):
            continue
        if field == "norm_before_residual" and field not in recorded:
            continue  # read back from the built model by vLLM's recorder only
        new = convert(value)
        if getattr(out, attr) != new:
            setattr(out, attr, new)
            out.sources[attr] = f"{who}: {field} {value!r}"


def captured(rec: dict) -> tuple[int, ...] | None:
    """The target layers the engine captures (outputs of X; the recording counts inputs of layer X+1), or None
    where the drafter uses no aux states or the recording has none."""
    aux = rec.get("aux") or {}
    if not aux.get("requires_aux_hidden_states") or aux.get("capture_before_layer") is None:
        return None
    return tuple(sorted({x - 1 for x in aux["capture_before_layer"]}))


__all__ = ["captured", "corrected", "said_by"]
