"""speculators 0.9.0's reading of an EAGLE-3 drafter: the trainer of the speculators layout.

Mirrors the 0.9.0 wheel from PyPI:
- ``models/eagle3/config.py``: ``Eagle3SpeculatorConfig`` defaults ``norm_before_residual``, ``norm_before_fc``,
  ``fc_norm`` and ``norm_output`` to False; ``transformer_layer_config`` without ``model_type`` is a ``Qwen3Config``
  (head_dim default 128), with one the matching transformers class (Llama: hidden_size / heads);
- ``models/eagle3/core.py``: fc takes ``num_aux x hidden_size`` (``target_hidden_size`` is not used), num_aux =
  len(``eagle_aux_hidden_state_layer_ids``) or 3; ``input_norm`` when ``norm_before_fc``, one ``fc_norm`` per aux
  state when ``fc_norm``; with ``norm_output`` the normed state is fed back to later steps; lm_head always gets
  the final norm; loading is non-strict: a missing tensor keeps its random initialisation (embed_tokens and
  lm_head start as NaN), an unknown one is ignored;
- ``models/eagle3/model_definitions.py``: the first layer's residual is ``hidden_norm(h)`` with
  ``norm_before_residual``, else ``h``.
"""

from __future__ import annotations

from typing import Any

from ..drafter.checkpoint import Checkpoint
from ..drafter.config_values import SPECULATORS_DEFAULTS, TLC, class_defaults
from ..drafter.layout import SPECULATORS
from . import reading, vllm_0_33
from .profile import Profile, Release
from .reading import Reading, lookup

VERSION = "0.9.0"
NAME = "speculators"


def read(ckpt: Checkpoint, target: Any = None, lenient: bool = False) -> Reading:
    """``lenient``: the trainer reading, which takes any naming of a role (the computation the drafter was
    trained to do); otherwise speculators' own non-strict loader."""
    raw = ckpt.config_raw or {}
    r = Reading(NAME, VERSION, ckpt.layout)
    if ckpt.layout != SPECULATORS:
        r.refusals.append("speculators reads speculators configs only (speculators_model_type, "
                          "transformer_layer_config); this is a flat config")
        r.layout_ok = False
        return r
    if raw.get("speculators_model_type") != "eagle3" and not lenient:
        r.refusals.append(f"speculators_model_type {raw.get('speculators_model_type')!r}: speculators builds its "
                          "EAGLE-3 model only for \"eagle3\"")
    r.set("architecture", "Eagle3DraftModel", "speculators_model_type")
    fields_ = reading.layer_fields(raw, True)
    if not isinstance(raw.get(TLC), dict):
        r.refusals.append("config.json has no transformer_layer_config object")
        return r
    model_type = reading.model_type_of(r, fields_, "qwen3")
    if model_type not in ("llama", "qwen3"):  # model_definitions.py model_classes
        r.refusals.append(f"speculators has no EAGLE-3 layer for model_type {model_type!r} (KeyError in "
                          "model_classes: llama and qwen3 only)")
    if raw.get("norm_before_fc") is True and raw.get("fc_norm") is True:
        r.refusals.append("speculators rejects norm_before_fc together with fc_norm (\"mutually exclusive\")")
    head_dim, max_position, cls = class_defaults(model_type)
    reading.read_layer(r, fields_, f"{TLC}.", (head_dim, cls), max_position)
    r.set("qk_norm", model_type == "qwen3", f"model_type {model_type!r}" +
          ("" if "model_type" in fields_ else " (default: speculators builds a Qwen3Config)"))

    for name, attr in (("norm_before_residual", "norm_before_residual"), ("norm_before_fc", "input_norm"),
                       ("fc_norm", "fc_norm")):
        found, value, key = lookup(raw, (name,))
        r.set(attr, bool(value) if found and value is not None else False,
              f"config.json: {key}" if found else "speculators default: False")
    found, value, _ = lookup(raw, ("norm_output",))
    r.set("feedback", "normed" if (found and value) else "prenorm",
          "config.json: norm_output" if found else "speculators default: norm_output False")
    r.set("final_norm", True, "speculators applies the final norm before lm_head")
    r.set("lm_head_from_embed", False, "speculators keeps a separate lm_head")
    default = SPECULATORS_DEFAULTS["draft_vocab_size"]
    reading.read_stated(r, raw, "draft_vocab_size", default, f"speculators default: {default}")
    r.set("target_hidden_size", r.hidden_size, "speculators 0.9: fc takes num_aux x hidden_size")
    reading.read_aux_ids(r, raw, (("eagle_aux_hidden_state_layer_ids",),),
                         "speculators default layers (no ids in the config)")
    r.set("aux_convention", "vllm", "speculators captures its training states through vLLM")
    ids = raw.get("eagle_aux_hidden_state_layer_ids")
    r.set("num_aux", len(ids) if isinstance(ids, list) and ids else 3,
          "config.json: eagle_aux_hidden_state_layer_ids (count)" if isinstance(ids, list) and ids
          else "speculators default: 3")

    def accept(name: str, n) -> tuple[str | None, str]:
        if n.role is None:
            return None, "ignored: speculators loads non-strictly"
        if not lenient and (n.prefixed or n.style == "midlayer"):
            return None, "ignored: speculators loads non-strictly and has no parameter of that name"
        if n.role in ("d2t", "t2d"):
            return n.role, ""
        return n.role, ""

    r.sources["later_norm"] = "speculators model_definitions.py: layers >= 1 are normed by input_layernorm"
    reading.map_roles(r, ckpt, accept)
    reading.finish(r, ckpt, "random initialisation (speculators loads non-strictly)")
    return r


def _serving(r: Reading, want: int | None, target: Any = None) -> None:
    return None  # speculators is a trainer: no serving context


# speculators captures its training states through vLLM, so it counts ids vLLM's way.
PROFILE = Profile(
    NAME, VERSION, read, vllm_0_33.capture, vllm_0_33.ids_for,
    releases=(Release(VERSION, "2026-10-16", peer=True),),
    sources=("speculators/models/eagle3/config.py", "speculators/models/eagle3/core.py",
             "speculators/models/eagle3/model_definitions.py"),
    reads_ids="the top-level eagle_aux_hidden_state_layer_ids",
    ids_path=("eagle_aux_hidden_state_layer_ids",),
    serving=_serving,
    converts_to=SPECULATORS,
)
