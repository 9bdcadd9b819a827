"""Effective config values of a drafter, each with where it came from.

Both layouts are read into one :class:`DraftConfig`: the value a field has for the drafter,
read from the file where the file states it, else the default its *trainer* reading applies
(speculators 0.9 for the speculators layout, EAGLE/SpecForge/transformers for the flat one).
Each :class:`Value` records its source, so a report can say "head_dim 112 (default:
hidden_size / num_attention_heads)" rather than just "112". Where serving engines default
differently from the trainer is the engine profiles' business, not this module's.

A field present with the wrong type is recorded as a problem and taken as unknown (``None``),
never as a default: a check then says nothing it cannot back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import field
from enum import Enum
from typing import Any, TypeGuard

from ..fast_dataclass import dataclass
from ..storage.safetensors import CONFIG_DTYPES, Problem
from .layout import SPECULATORS, drafter_family, str_list

TLC = "transformer_layer_config"  # where the speculators layout nests the decoder layer's fields
PROVENANCE = "eagle3_checks_provenance"  # what eagle3-checks convert records about a converted drafter
# speculators 0.9.0 Eagle3SpeculatorConfig's defaults for fields a speculators config may leave out
SPECULATORS_DEFAULTS = {"draft_vocab_size": 32000, "norm_before_residual": False, "norm_output": False}


class Origin(str, Enum):
    """Where an effective config value came from."""

    FILE = "file"  # stated in the config file, at Value.key
    CLASS_DEFAULT = "class default"  # the transformers config class's default, which every engine gets
    TRAINER_DEFAULT = "trainer default"  # what the trainer (speculators, EAGLE/SpecForge) assumes when it is absent
    DERIVED = "derived"  # computed from other fields (head_dim from hidden_size / heads, a count of ids)


@dataclass(frozen=True)
class Value:
    """One effective config value, with its provenance as data: checks read ``key`` and ``origin``, never the prose
    of ``source`` (which is for people)."""

    value: Any
    origin: Origin
    key: str | None = None  # the dotted key path in the file: where the value is stated (FILE), or counted from
    note: str = ""  # why this default, or what is special about the stated value ("invalid", "count")
    file: str = "config.json"

    @property
    def explicit(self) -> bool:
        """Stated in the file (or counted from a list the file states)."""
        return self.key is not None

    @property
    def source(self) -> str:
        """Where it came from, in words: ``config.json: transformer_layer_config.head_dim``, ``default: ...``."""
        if self.key is None:
            return f"default: {self.note}"
        return f"{self.file}: {self.key}" + (f" ({self.note})" if self.note else "")


# Defaults of the transformers config class a model_type parses as (transformers 5.x; the same in
# 4.57 for these fields). vLLM parses model_type "kimi_k2" as DeepseekV3Config.
_MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"num_hidden_layers": 32, "max_position_embeddings": 2048},
    "qwen3": {"num_hidden_layers": 32, "max_position_embeddings": 32768, "head_dim": 128},
    "deepseek_v3": {"num_hidden_layers": 61, "max_position_embeddings": 4096, "head_dim": 64},
    "kimi_k2": {"num_hidden_layers": 61, "max_position_embeddings": 4096, "head_dim": 64},
}
_CLASS_NAME = {"llama": "LlamaConfig", "qwen3": "Qwen3Config", "deepseek_v3": "DeepseekV3Config",
               "kimi_k2": "DeepseekV3Config"}


def class_defaults(model_type: str) -> tuple[int | None, int, str]:
    """(head_dim or None for hidden_size / heads, max_position_embeddings, class name) of the transformers config
    class a flat config of ``model_type`` parses as: what an engine reading the config object gets by default."""
    mt = model_type if model_type in _MODEL_TYPE_DEFAULTS else "llama"
    table = _MODEL_TYPE_DEFAULTS[mt]
    return table.get("head_dim"), table["max_position_embeddings"], f"transformers {_CLASS_NAME[mt]}"


# Sizes beyond this are not a drafter's (and would overflow float arithmetic in the checks).
_SIZE_LIMIT = 2**40


def _pos_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v < _SIZE_LIMIT


def _nonneg_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < _SIZE_LIMIT


def positive_number(v: Any) -> TypeGuard[int | float]:
    """A finite positive int or float (not a bool): what rope_theta, eps and factors must be."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return 0 < float(v) < 1e300
    except OverflowError:
        return False


ROPE_NUMBERS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings", "beta_fast",
                "beta_slow", "attention_factor", "attn_factor", "rope_theta")
ROPE_SCALES = ("mscale", "mscale_all_dim")  # DeepSeek-style yarn: 0 means "no scaling", so only >= 0


@dataclass(frozen=True)
class RopeProblem:
    """A value in a rope_scaling / rope_parameters object that the engines cannot use as meant. ``fatal``: the
    rope init raises on it (a type no arithmetic or lookup accepts); otherwise it computes inf/NaN or nonsense
    frequencies without an error."""

    key: str
    value: Any
    expected: str
    fatal: bool

    def __str__(self) -> str:
        return f"{self.key} is {json.dumps(self.value)}, not {self.expected}"


def rope_scaling_problems(scaling: Any) -> list[RopeProblem]:
    """The problems of a rope scaling object; null values mean unset."""
    if not isinstance(scaling, dict):
        return []
    out = [RopeProblem(k, scaling[k], "a string", True) for k in ("rope_type", "type")
           if scaling.get(k) is not None and not isinstance(scaling[k], str)]
    for k in (*ROPE_NUMBERS, *ROPE_SCALES):
        v = scaling.get(k)
        if v is None or (k in ROPE_SCALES and v == 0) or positive_number(v):
            continue
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        out.append(RopeProblem(k, v, "a number >= 0" if k in ROPE_SCALES else "a positive number", not number
                               and not isinstance(v, bool)))
    return out


def _int_list(v: Any) -> bool:
    return isinstance(v, list) and all(_nonneg_int(x) for x in v)


def _str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "pos_int": (_pos_int, "a positive integer"),
    "number": (positive_number, "a positive number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "str_list": (_str_list, "a list of strings"),
    "int_list": (_int_list, "a list of non-negative integers"),
    "dict": (lambda v: isinstance(v, dict), "an object"),
    "dtype": (lambda v: isinstance(v, str), "a dtype name such as \"bfloat16\""),
}

# name -> (kind, paths in a speculators config, paths in a flat config). A path is a tuple of keys.
# The first path present wins; later ones are fallbacks.


def _L(name: str) -> tuple:
    """A field of the speculators decoder layer config."""
    return ((TLC, name),)


def _T(name: str) -> tuple:
    """A top-level field."""
    return ((name,),)


DERIVED = ("num_aux",)  # fields computed from others (the aux count: from the ids, else the count field, else 3)
FIELDS: dict[str, tuple[str, tuple, tuple]] = {
    "architectures": ("str_list", _T("architectures"), _T("architectures")),
    "model_type": ("str", _L("model_type"), _T("model_type")),
    "hidden_size": ("pos_int", _L("hidden_size"), _T("hidden_size")),
    "num_attention_heads": ("pos_int", _L("num_attention_heads"), _T("num_attention_heads")),
    "num_key_value_heads": ("pos_int", _L("num_key_value_heads"), _T("num_key_value_heads")),
    "head_dim": ("pos_int", _L("head_dim"), _T("head_dim")),
    "intermediate_size": ("pos_int", _L("intermediate_size"), _T("intermediate_size")),
    "num_hidden_layers": ("pos_int", _L("num_hidden_layers"), _T("num_hidden_layers")),
    "vocab_size": ("pos_int", _L("vocab_size"), _T("vocab_size")),
    "draft_vocab_size": ("pos_int", _T("draft_vocab_size"), _T("draft_vocab_size")),
    "target_hidden_size": ("pos_int", _T("target_hidden_size"), _T("target_hidden_size")),
    "aux_layer_ids": (
        "int_list",
        _T("eagle_aux_hidden_state_layer_ids"),
        (("eagle_config", "eagle_aux_hidden_state_layer_ids"), ("eagle_aux_hidden_state_layer_ids",)),
    ),
    "num_aux_hidden_states": ("pos_int", (), _T("num_aux_hidden_states")),
    "rms_norm_eps": ("number", _L("rms_norm_eps"), _T("rms_norm_eps")),
    "rope_theta": (
        "number",
        ((TLC, "rope_theta"), (TLC, "rope_parameters", "rope_theta")),
        (("rope_theta",), ("rope_parameters", "rope_theta")),
    ),
    "rope_scaling": ("dict", ((TLC, "rope_scaling"), (TLC, "rope_parameters")),
                     (("rope_scaling",), ("rope_parameters",))),
    "max_position_embeddings": ("pos_int", _L("max_position_embeddings"), _T("max_position_embeddings")),
    "hidden_act": ("str", _L("hidden_act"), _T("hidden_act")),
    "attention_bias": ("bool", _L("attention_bias"), _T("attention_bias")),
    "mlp_bias": ("bool", _L("mlp_bias"), _T("mlp_bias")),
    "bias": ("bool", (), _T("bias")),  # EAGLE's flat configs: fc's bias (SGLang builds fc with it)
    "tie_word_embeddings": (
        "bool",
        (("tie_word_embeddings",), (TLC, "tie_word_embeddings")),
        _T("tie_word_embeddings"),
    ),
    "norm_before_residual": ("bool", _T("norm_before_residual"), _T("norm_before_residual")),
    "norm_before_fc": ("bool", _T("norm_before_fc"), (("eagle_config", "norm_before_fc"), ("norm_before_fc",))),
    "fc_norm": ("bool", _T("fc_norm"), _T("fc_norm")),
    "norm_output": ("bool", _T("norm_output"), _T("norm_output")),
    "dtype": (
        "dtype",
        (("dtype",), ("torch_dtype",), (TLC, "dtype"), (TLC, "torch_dtype")),
        (("dtype",), ("torch_dtype",)),
    ),
    # The MLA family's attention sizes (DeepseekV3Config; flat configs only: speculators has no MLA drafter). A
    # null q_lora_rank is a value to the MLA readers (q_proj instead of q_a/q_b): see DraftConfig.nulls.
    "q_lora_rank": ("pos_int", (), _T("q_lora_rank")),
    "kv_lora_rank": ("pos_int", (), _T("kv_lora_rank")),
    "qk_nope_head_dim": ("pos_int", (), _T("qk_nope_head_dim")),
    "qk_rope_head_dim": ("pos_int", (), _T("qk_rope_head_dim")),
    "v_head_dim": ("pos_int", (), _T("v_head_dim")),
    "rope_interleave": ("bool", (), _T("rope_interleave")),
    "use_aux_norm": ("bool", (), _T("use_aux_norm")),  # SGLang's legacy name for fc_norm (MLA drafters)
}

# Fields a drafter cannot be understood without: no default is meaningful.
REQUIRED = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")


def _lookup(raw: dict, path: tuple) -> tuple[bool, Any]:
    node: Any = raw
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False, None
        node = node[key]
    return True, node


@dataclass(eq=False)
class DraftConfig(Mapping[str, Any]):
    """The effective config of a drafter, a read-only mapping of field name to effective value: ``cfg["head_dim"]``
    and ``cfg.get("head_dim")`` give the value, ``cfg.entry("head_dim")`` the :class:`Value` with where it came from.
    Its keys are the fields that have a value (stated, derived, or the default the drafter's format gives); ``in``,
    iteration, ``len``, ``items()`` and ``dict(cfg)`` go by them. A field the format knows and the file leaves unset
    (or states with the wrong type) reads as None, and is not ``in`` it; a name no drafter config has raises
    KeyError."""

    layout: str
    raw: dict
    fields: dict[str, Value] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    # fields the file states as null (transformers reads null as "not set"), name -> key path
    nulls: dict[str, str] = field(default_factory=dict)
    family: str = "llama"  # the decoder layer's family (drafter/families/; the checkpoint refines it by its names)

    def __getitem__(self, name: str) -> Any:
        v = self.fields.get(name)
        if v is not None:
            return v.value
        if name in FIELDS or name in DERIVED:  # known, unset
            return None
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        v = self.fields.get(name) if isinstance(name, str) else None
        return v is not None and v.value is not None

    def __iter__(self) -> Iterator[str]:
        return (name for name, v in self.fields.items() if v.value is not None)

    def __len__(self) -> int:
        return sum(1 for v in self.fields.values() if v.value is not None)

    def get(self, name: str, default: Any = None) -> Any:
        v = self.fields.get(name)
        return default if v is None else v.value

    def entry(self, name: str) -> Value | None:
        """The field's :class:`Value` (its value, where it came from, whether the file states it), None when unset."""
        return self.fields.get(name)

    def __repr__(self) -> str:
        return f"DraftConfig({self.layout}, {dict(self)!r})"

    def explicit(self, name: str) -> bool:
        v = self.fields.get(name)
        return bool(v and v.explicit)

    @property
    def num_aux(self) -> int:
        """Number of aux hidden states the fc layer takes (ids stated, else the count field, else 3)."""
        return self["num_aux"]

    @property
    def target_hidden(self) -> int | None:
        return self["target_hidden_size"]

    @property
    def dtype(self) -> str | None:
        """The config's dtype as a safetensors dtype name (``BF16``), None when not stated."""
        v = self["dtype"]
        return CONFIG_DTYPES.get(v) if isinstance(v, str) else None


def read_config(raw: dict, layout: str, file: str = "config.json") -> DraftConfig:
    """Read the effective config of a drafter from its parsed config.json."""
    cfg = DraftConfig(layout=layout, raw=raw, family=drafter_family(raw, layout))
    speculators = layout == SPECULATORS
    if speculators and TLC in raw and not isinstance(raw[TLC], dict):
        cfg.problems.append(Problem(file, f"{TLC} is not an object", key=TLC,
                                    expected="an object", found=type(raw[TLC]).__name__))

    for name, (kind, spec_paths, flat_paths) in FIELDS.items():
        valid, expected = KINDS[kind]
        for path in spec_paths if speculators else flat_paths:
            present, value = _lookup(raw, path)
            if not present:
                continue
            dotted = ".".join(path)
            if value is None:
                # An explicit null means "not set" to transformers; note it and fall through.
                cfg.nulls.setdefault(name, dotted)
                continue
            if not valid(value):
                cfg.problems.append(Problem(file, f"{dotted} has the wrong type", key=dotted,
                                            expected=expected, found=repr(value)))
                cfg.fields[name] = Value(None, Origin.FILE, dotted, "invalid", file)
            else:
                cfg.fields[name] = Value(value, Origin.FILE, dotted, file=file)
            break
    _apply_defaults(cfg)
    return cfg


def _default(cfg: DraftConfig, name: str, value: Any, why: str, origin: Origin = Origin.CLASS_DEFAULT) -> None:
    if name not in cfg.fields:
        cfg.fields[name] = Value(value, origin, note=why)


def _apply_defaults(cfg: DraftConfig) -> None:
    speculators = cfg.layout == SPECULATORS
    # speculators builds a Qwen3Config when transformer_layer_config has no model_type
    # (Eagle3SpeculatorConfig.validate_transformer_config); flat configs are Llama configs.
    _default(cfg, "model_type", "qwen3" if speculators else "llama",
             "speculators reads a transformer_layer_config without model_type as Qwen3Config"
             if speculators else "a flat EAGLE-3 config is a Llama config", Origin.TRAINER_DEFAULT)
    mt = cfg["model_type"] if cfg["model_type"] in _MODEL_TYPE_DEFAULTS else "llama"
    table, cls = _MODEL_TYPE_DEFAULTS[mt], _CLASS_NAME[mt]
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]

    if nh is not None:
        _default(cfg, "num_key_value_heads", nh, "num_attention_heads (no GQA)", Origin.DERIVED)
    if "head_dim" in table:
        _default(cfg, "head_dim", table["head_dim"], f"transformers {cls} (model_type {mt!r})")
    elif h is not None and nh is not None and cfg.entry("head_dim") is None:
        _default(cfg, "head_dim", h // nh, f"hidden_size / num_attention_heads (transformers {cls})", Origin.DERIVED)
    for name in ("num_hidden_layers", "max_position_embeddings"):
        _default(cfg, name, table[name], f"transformers {cls}")
    _default(cfg, "rms_norm_eps", 1e-6, f"transformers {cls}")
    _default(cfg, "hidden_act", "silu", f"transformers {cls}")
    _default(cfg, "rope_theta", 10000.0, f"transformers {cls}")
    for name in ("attention_bias", "mlp_bias", "bias", "tie_word_embeddings", "norm_before_fc", "fc_norm"):
        class_field = "bias" in name or "tie" in name
        _default(cfg, name, False, f"transformers {cls}" if class_field else "off unless stated",
                 Origin.CLASS_DEFAULT if class_field else Origin.TRAINER_DEFAULT)
    # Trainer readings: speculators' Eagle3SpeculatorConfig defaults norm_before_residual and
    # norm_output to False; EAGLE/SpecForge have no norm_before_residual (residual = fc output)
    # and apply the final norm before lm_head only (norm_output in SGLang's sense: off).
    _default(cfg, "norm_before_residual", False,
             "speculators Eagle3SpeculatorConfig" if speculators else "EAGLE/SpecForge keep the un-normed residual",
             Origin.TRAINER_DEFAULT)
    _default(cfg, "norm_output", False, "speculators / SGLang: feed back the pre-norm state", Origin.TRAINER_DEFAULT)
    if speculators:
        _default(cfg, "draft_vocab_size", SPECULATORS_DEFAULTS["draft_vocab_size"],
                 f"speculators Eagle3SpeculatorConfig ({SPECULATORS_DEFAULTS['draft_vocab_size']})",
                 Origin.TRAINER_DEFAULT)
    elif cfg["vocab_size"] is not None:
        _default(cfg, "draft_vocab_size", cfg["vocab_size"], "vocab_size (no draft vocabulary)", Origin.DERIVED)
    if h is not None:
        _default(cfg, "target_hidden_size", h, "hidden_size", Origin.DERIVED)
    ids = cfg["aux_layer_ids"]
    if ids:
        stated = cfg.fields["aux_layer_ids"]
        cfg.fields["num_aux"] = Value(len(ids), Origin.DERIVED, stated.key, "count", stated.file)
    elif cfg["num_aux_hidden_states"] is not None:
        cfg.fields["num_aux"] = cfg.fields["num_aux_hidden_states"]
    else:
        cfg.fields["num_aux"] = Value(3, Origin.TRAINER_DEFAULT, note="3 aux layers (no ids stated)")


def missing_required(cfg: DraftConfig) -> list[str]:
    return [name for name in REQUIRED if cfg.entry(name) is None]


@dataclass(frozen=True)
class TargetConfig:
    """The verifier (target) model's config.json, the fields a drafter must agree with."""

    path: str
    num_hidden_layers: int | None
    hidden_size: int | None
    vocab_size: int | None
    source: dict[str, str]
    architectures: list | None = None
    name_or_path: str | None = None
    # the target's context: what both engines serve it with by default (its config's max_position_embeddings)
    max_position_embeddings: int | None = None
    model_type: str | None = None  # text_config's, else the top level's (mlx-vlm serves some target types only)


def read_target_config(raw: Any, path: str) -> TargetConfig:
    """Read a target config; a multimodal config's ``text_config`` wins over the top level.
    Raises ValueError with a message when the file is not a usable model config."""
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: not a JSON object")
    values: dict[str, Any] = {}
    source: dict[str, str] = {}
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else None
    for name in ("num_hidden_layers", "hidden_size", "vocab_size"):
        for where, node in (("text_config.", text), ("", raw)):
            if node is not None and name in node:
                if not _pos_int(node[name]):
                    raise ValueError(f"{path}: {where}{name} is {node[name]!r}, not a positive integer")
                values[name], source[name] = node[name], f"{path}: {where}{name}"
                break
    if not values:
        raise ValueError(f"{path}: has none of num_hidden_layers, hidden_size, vocab_size; "
                         "is it a model's config.json?")
    archs = str_list(raw.get("architectures"))
    name_or_path = raw.get("_name_or_path") if isinstance(raw.get("_name_or_path"), str) else None
    context = next((node["max_position_embeddings"] for node in (text, raw)
                    if node is not None and _pos_int(node.get("max_position_embeddings"))), None)
    model_type = next((node["model_type"] for node in (text, raw)
                       if node is not None and isinstance(node.get("model_type"), str)), None)
    return TargetConfig(path, values.get("num_hidden_layers"), values.get("hidden_size"),
                        values.get("vocab_size"), source, archs, name_or_path, context, model_type)


def normalized_rope_scaling(value: Any) -> dict | None:
    """rope_scaling / rope_parameters as engines read it: without rope_theta, and None for plain (default) RoPE,
    whatever else the dict holds (transformers' default rope init ignores it)."""
    if not isinstance(value, dict):
        return None
    kind = value.get("rope_type", value.get("type", "default"))
    rest = {k: v for k, v in value.items() if k not in ("rope_theta", "type", "rope_type")}
    if kind == "default":
        return None
    return {"rope_type": kind, **rest}
