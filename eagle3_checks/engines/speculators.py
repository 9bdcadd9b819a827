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

from ..drafter.config_values import SPECULATORS_DEFAULTS, TLC, class_defaults
from ..drafter.layout import PEAGLE, SPECULATORS
from . import reading
from .capture import vllm_ids_for, vllm_input
from .profile import Profile, Release
from .reading import Reading, lookup
from .record import (
    Call,
    Count,
    Fact,
    Ids,
    Refuse,
    Rule,
    Source,
    Stop,
    Tensors,
    Value,
    Walk,
    all_of,
    also,
    any_of,
    const,
    is_switch,
    layout_is,
    midlayer_style,
    name_is,
    no,
    prefixed,
    reading_of,
    stated,
    unknown,
)

VERSION = "0.9.0"
NAME = "speculators"


# The EAGLE-3 flags each release has a config field and a computation for (older releases keep an unknown key,
# extra="allow", and compute as if it were False).
FLAGS = ("norm_before_fc", "fc_norm", "norm_output")
SINCE = {"norm_before_fc": "0.5.0", "fc_norm": "0.7.0", "norm_output": "0.7.0", "aux_from_ids": "0.7.0"}
# What read() does unless a release states otherwise (RELEASES): ``lenient``, the trainer reading, takes any naming
# of a role (the computation the drafter was trained to do), otherwise speculators' own non-strict loader; the
# transformers class a transformer_layer_config without model_type becomes; the flags the release has; whether fc
# takes one state per stated id (else always 3); the layer types it builds; the drafters it builds
# (speculators_model_type: P-EAGLE from 0.6.0 on, models/peagle/, whose mask_hidden is a parameter, core.py:44-53).
SWITCHES = (("lenient", False), ("default_type", "qwen3"), ("flags", FLAGS), ("aux_from_ids", True),
            ("layer_types", ("llama", "qwen3")), ("kinds", ("eagle3", PEAGLE)), ("windows", True))


def _not_eagle3(w: Walk) -> bool:
    return w.raw.get("speculators_model_type") not in w.switch("kinds") and not w.switch("lenient")


def _peagle(w: Walk) -> bool:
    return w.raw.get("speculators_model_type") == PEAGLE and PEAGLE in w.switch("kinds")


def _no_layer_config(w: Walk) -> bool:
    return not isinstance(w.raw.get(TLC), dict)


def _model_type(w: Walk) -> str:
    return reading.model_type_of(w.r, w.fields, w.switch("default_type"))


def _unbuilt_type(w: Walk) -> str:
    return (f"speculators has no EAGLE-3 layer for model_type {w.facts['model_type']!r} (KeyError in "
            f"model_classes: {' and '.join(w.switch('layer_types'))} only)")


def _both_fc_norms(w: Walk) -> bool:
    return w.raw.get("norm_before_fc") is True and w.raw.get("fc_norm") is True and "fc_norm" in w.switch("flags")


def _layer_defaults(w: Walk) -> None:
    """models/eagle3/config.py: the transformers class of the layer's model_type (by default the release's)."""
    head_dim, max_position, cls = class_defaults(w.facts["model_type"])
    w.facts["class_defaults"] = (head_dim, max_position, cls)


def _read_layer(w: Walk) -> None:
    head_dim, max_position, cls = w.facts["class_defaults"]
    reading.read_layer(w.r, w.fields, f"{TLC}.", (head_dim, cls), max_position)
    model_type = w.facts["model_type"]
    w.r.set("qk_norm", model_type == "qwen3", f"model_type {model_type!r}" +
            ("" if "model_type" in w.fields else f" (default: speculators builds a {cls.split()[-1]})"))


def _flag(name: str, attr: str) -> Call:
    """An EAGLE-3 flag: as stated (null or absent: False), or False in a release without it (the key kept, unread)."""
    def read_flag(w: Walk) -> None:
        found, value, key = lookup(w.raw, (name,))
        if name != "norm_before_residual" and name not in w.switch("flags"):
            w.r.set(attr, False, f"speculators before {SINCE[name]} has no {name}: computed without it"
                    + (f" (config.json's {key} is kept and not read)" if found else ""))
            return
        w.r.set(attr, bool(value) if found and value is not None else False,
                f"config.json: {key}" if found else "speculators default: False")
    return Call(read_flag)


def _feedback(w: Walk) -> None:
    found, value, _ = lookup(w.raw, ("norm_output",))
    if "norm_output" not in w.switch("flags"):
        w.r.set("feedback", "prenorm", f"speculators before {SINCE['norm_output']} has no norm_output: the pre-norm "
                "state is fed back" + (" (config.json's norm_output is kept and not read)" if found else ""))
    else:
        w.r.set("feedback", "normed" if (found and value) else "prenorm",
                "config.json: norm_output" if found else "speculators default: norm_output False")


def _later_norm(w: Walk) -> None:
    w.r.sources["later_norm"] = "speculators model_definitions.py: layers >= 1 are normed by input_layernorm"


_DRAFT_VOCAB = SPECULATORS_DEFAULTS["draft_vocab_size"]

# One walk: models/eagle3/config.py (Eagle3SpeculatorConfig), core.py (the model), its non-strict load.
def _window(w: Walk) -> None:
    """speculators 0.9.0 builds layer i with a sliding window when transformer_layer_config's ``layer_types[i]`` is
    "sliding_attention", of ``sliding_window`` tokens (models/eagle3/core.py:96-105, 225-233), the window of its
    training mask measured from the context row at every draft step (models/eagle3/attention.py:16-19:
    ``kv_idx > q_idx - sliding_window``, the draft tokens on the diagonal). Its train CLI writes such a layer by
    default (train/cli.py:212-230: layer_types ["sliding_attention"], sliding_window 2048). The switch ``windows``
    False: releases before 0.7.0, which build one causal mask for every layer (0.6.0 models/eagle3/core.py:161,
    attention.py:11-29)."""
    if not w.switch("windows"):
        reading.no_window(w.r, "speculators before 0.7.0 builds one causal mask, no window (0.6.0 "
                          "models/eagle3/core.py:161, attention.py:11-29)")
        return
    reading.read_window(w.r, w.fields, w.where, f"speculators {w.release}: {w.lines}models/eagle3/core.py:96-105, "
                        "attention.py:16-19", window_from="row")


STEPS = (
    Stop(no(layout_is(SPECULATORS)), "speculators reads speculators configs only (speculators_model_type, "
         "transformer_layer_config); this is a flat config"),
    Refuse(_not_eagle3, lambda w: f"speculators_model_type {w.raw.get('speculators_model_type')!r}: speculators "
           f"builds its EAGLE-3 models only for {' and '.join(repr(k) for k in w.switch('kinds'))}"),
    const("architecture", "Eagle3DraftModel", "speculators_model_type", when=no(_peagle)),
    const("architecture", "PEagleDraftModel", "speculators_model_type \"peagle\" (models/peagle/core.py:20-53)",
          when=_peagle),
    const("kind", PEAGLE, "speculators_model_type \"peagle\"", when=_peagle),
    Stop(_no_layer_config, "config.json has no transformer_layer_config object", layout=False),
    Fact("model_type", _model_type),
    Refuse(lambda w: w.facts["model_type"] not in w.switch("layer_types"), _unbuilt_type),
    Refuse(_both_fc_norms, "speculators rejects norm_before_fc together with fc_norm (\"mutually exclusive\")"),
    Call(_layer_defaults),
    Call(_read_layer),
    Call(_window),
    _flag("norm_before_residual", "norm_before_residual"),
    _flag("norm_before_fc", "input_norm"),
    _flag("fc_norm", "fc_norm"),
    Call(_feedback),
    const("final_norm", True, "speculators applies the final norm before lm_head"),
    const("lm_head_from_embed", False, "speculators keeps a separate lm_head"),
    stated("draft_vocab_size", lambda w: _DRAFT_VOCAB, f"speculators default: {_DRAFT_VOCAB}"),
    Value("target_hidden_size", (), reading_of("hidden_size"), "speculators 0.9: fc takes num_aux x hidden_size"),
    Ids(("eagle_aux_hidden_state_layer_ids",), "speculators default layers (no ids in the config)"),
    const("aux_convention", "vllm", "speculators captures its training states through vLLM"),
    const("num_aux", 3, f"speculators before {SINCE['aux_from_ids']}: fc takes 3 states whatever the ids",
          when=no(is_switch("aux_from_ids"))),
    Count((Source("len", "eagle_aux_hidden_state_layer_ids", "config.json: eagle_aux_hidden_state_layer_ids (count)"),),
          3, "speculators default: 3", when=is_switch("aux_from_ids")),
    Call(_later_norm),
    Tensors((
        Rule(all_of(name_is("mask_hidden"), also(_peagle)), load=True, role=lambda w, name, n: "mask_hidden"),
        Rule(unknown, "ignored: speculators loads non-strictly"),
        Rule(all_of(also(lambda w: not w.switch("lenient")), any_of(prefixed, midlayer_style)),
             "ignored: speculators loads non-strictly and has no parameter of that name"),
    ), "random initialisation (speculators loads non-strictly)"),
)


def _serving(r: Reading, want: int | None, target: Any = None) -> None:
    return None  # speculators is a trainer: no serving context


# The releases this reading holds for, oldest first, each read from its wheel on PyPI (0.9.0 also runs in the default
# tests); each difference from 0.9.0 is one of SWITCHES. 0.2.0 has no EAGLE-3 forward pass
# (models/eagle3.py:466 raises NotImplementedError): a checkpoint stating it was converted by it, not trained.
_LLAMA_DEFAULT = "transformer_layer_config without model_type is a LlamaConfig"
_FIXED_AUX = "fc takes 3 x hidden_size states whatever eagle_aux_hidden_state_layer_ids says"
_POST = ("a post-release of {0}: only {1} changed, not models/ or config.py (its wheel diffed against {0}'s, "
         "2026-12-06): it reads a checkpoint as {0} does")
_NO_WINDOW = ("; no sliding window: one causal mask for every layer (0.6.0 models/eagle3/core.py:161, "
              "attention.py:11-29)")
_BEFORE_0_5 = (("default_type", "llama"), ("flags", ()), ("aux_from_ids", False), ("kinds", ("eagle3",)),
               ("windows", False))
_BEFORE_0_7 = (("default_type", "llama"), ("flags", ("norm_before_fc",)), ("aux_from_ids", False), ("windows", False))
RELEASES = (
    Release("0.2.0", "2025-11-03", differs=(*_BEFORE_0_5, ("layer_types", ("llama",))),
            why=f"models/eagle3.py: {_LLAMA_DEFAULT} (:60, 99); {_FIXED_AUX} (:362-387, of target_hidden_size); no "
            "norm_before_fc, fc_norm or norm_output field; it builds a Llama-style layer for any model_type "
            "(:245-253), stated here as llama layers only; no forward (:466): a checkpoint stating 0.2.0 was "
            "converted by it, not trained" + _NO_WINDOW),
    Release("0.3.0", "2025-12-10", differs=(*_BEFORE_0_5, ("layer_types", ("llama",))),
            why=f"models/eagle3/config.py: {_LLAMA_DEFAULT} (:34, 73); core.py:181: {_FIXED_AUX}; no "
            "norm_before_fc, fc_norm or norm_output; model_definitions.py:104-111: llama layers only" + _NO_WINDOW),
    Release("0.4.0", "2026-03-04", differs=_BEFORE_0_5,
            why=f"models/eagle3/config.py: {_LLAMA_DEFAULT} (:34, 78); core.py:213: {_FIXED_AUX}; no "
            "norm_before_fc, fc_norm or norm_output (model_definitions.py:136-143: llama and qwen3 layers)"
            + _NO_WINDOW),
    Release("0.4.0.1", "2026-03-26", differs=_BEFORE_0_5, why=_POST.format("0.4.0", "convert/eagle") + _NO_WINDOW),
    Release("0.5.0", "2026-04-24", differs=(*_BEFORE_0_7, ("kinds", ("eagle3",))),
            why=f"models/eagle3/config.py: {_LLAMA_DEFAULT} (:34, 82); core.py:189: {_FIXED_AUX}; norm_before_fc "
            "(config.py:58-65, core.py:222-228), no fc_norm or norm_output; no P-EAGLE (models/peagle/ from 0.6.0)"
            + _NO_WINDOW),
    Release("0.6.0", "2026-06-16", differs=_BEFORE_0_7,
            why=f"as 0.5.0 (models/eagle3/config.py identical to 0.5.0's: {_LLAMA_DEFAULT}, :34, 82); core.py:55: "
            f"{_FIXED_AUX}" + _NO_WINDOW),
    Release("0.6.0.1", "2026-08-12", differs=_BEFORE_0_7, why=_POST.format("0.6.0", "data_generation") + _NO_WINDOW),
    Release("0.6.0.2", "2026-10-08", differs=_BEFORE_0_7,
            why=_POST.format("0.6.0", "data_generation/vllm_client.py") + _NO_WINDOW),
    Release("0.7.0", "2026-07-30",
            why="as 0.9.0 for a checkpoint (models/eagle3/config.py identical to 0.9.0's; core.py:67-74: fc takes "
            "len(ids) or 3 states); it does not validate the ids (utils.py:30-43)"),
    Release("0.7.0.1", "2026-08-13", why=_POST.format("0.7.0", "data_generation and _vendor/hs_connectors")),
    Release("0.7.0.2", "2026-10-07", why=_POST.format("0.7.0", "data_generation/vllm_client.py and "
                                                   "_vendor/hs_connectors/transfer.py")),
    Release("0.8.0", "2026-09-03", why="as 0.9.0 (models/eagle3/config.py, core.py, model_definitions.py identical)"),
    Release("0.8.1", "2026-10-10", why=_POST.format("0.8.0", "train/cli.py, train/config/schema.py and "
                                                 "version.py") + "; models/eagle3/config.py, core.py, "
            "model_definitions.py identical to 0.9.0's"),
    Release(VERSION, "2026-10-16", peer=True),
)

# speculators captures its training states through vLLM, so it counts ids vLLM's way.
PROFILE = Profile(
    NAME, VERSION, STEPS, vllm_input, vllm_ids_for,
    module=__name__, takes=SWITCHES,
    releases=RELEASES,
    sources=("speculators/models/eagle3/config.py", "speculators/models/eagle3/core.py",
             "speculators/models/eagle3/model_definitions.py"),
    reads_ids="the top-level eagle_aux_hidden_state_layer_ids",
    ids_path=("eagle_aux_hidden_state_layer_ids",),
    serving=_serving,
    converts_to=SPECULATORS,
)
