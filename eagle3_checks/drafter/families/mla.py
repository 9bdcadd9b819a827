"""The MLA family: EAGLE-3 drafters whose decoder layer has DeepSeek multi-latent attention (Kimi-K2.5 / K2.6,
``Eagle3DeepseekV2ForCausalLM``: vLLM 0.33 ``model_executor/models/deepseek_eagle3.py``, also registered as
``Eagle3DeepseekV3ForCausalLM``; SGLang 0.5.23 ``srt/models/kimi_k25_eagle3.py``). The draft KV cache then has the
target's MLA layout.

Everything but the attention is the EAGLE-3 layer every family shares: fc over the aux states (with ``fc_norm`` per
state in the eagle3.1 variant), ``input_layernorm(embeds) ‖ hidden_norm(h)`` into the first layer, the MLP, the final
norm, lm_head and d2t. The attention's tensors (``layers.N.self_attn.`` +)::

    q_a_proj            (q_lora_rank, in)                   q_lora_rank stated
    q_a_layernorm       (q_lora_rank,)
    q_b_proj            (nh·(qk_nope + qk_rope), q_lora_rank)
    q_proj              (nh·(qk_nope + qk_rope), in)        q_lora_rank null (vLLM only: SGLang raises)
    kv_a_proj_with_mqa  (kv_lora_rank + qk_rope, in)
    kv_a_layernorm      (kv_lora_rank,)
    kv_b_proj           (nh·(qk_nope + v_head_dim), kv_lora_rank)
    o_proj              (H, nh·v_head_dim)

where ``in`` is 2H on the first layer (its input is the concatenation) and H on later ones. The shapes come from
:func:`expected_attention_shapes` here, the one source of truth. This module is the family's arithmetic, torch-free: the
shape (:class:`MlaShape`, as each reader builds it from the config), the yarn factors and the softmax scale; the
attention itself, in torch, is :func:`eagle3_checks.numerics.mla_attention.mla_qkv`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

from ...fast_dataclass import dataclass
from ..layout import MLA, MLA_CONFIG_FIELDS, MLA_LAYER_SUFFIXES
from .base import Add, Family

# transformers 5.19 DeepseekV3Config defaults (TF/models/deepseek_v3/configuration_deepseek_v3.py:87-114), what both
# engines see for an absent key since they load the config through that class (model_type kimi_k2 is an alias).
CONFIG_DEFAULTS: dict[str, Any] = {
    "num_attention_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,  # TF/modeling_rope_utils.py:739 default_theta
    "max_position_embeddings": 4096,
    "rope_interleave": True,
}
DEEPSEEK_LATENT_NORM_EPS = 1e-6  # DeepseekV3RMSNorm's default, used by transformers for q_a/kv_a_layernorm
# Where transformers builds q_a_layernorm and kv_a_layernorm, and with which eps (the engines' readers, in
# eagle3_checks.engines, say where theirs are built: MlaReader.latent_source)
TRANSFORMERS_LATENT_NORMS = ("transformers 5.19 models/deepseek_v3/modeling_deepseek_v3.py:381, 393: "
                             "DeepseekV3RMSNorm(...) with its default eps 1e-6 (:38), whatever rms_norm_eps says")
YARN_DEFAULTS: dict[str, float] = {"beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.0}

ATTENTION_KEYS = ("q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight", "q_proj.weight",
                  "kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight", "kv_b_proj.weight", "o_proj.weight")
"""Every weight key :func:`mla_attention` may read, relative to the layer's ``self_attn.``."""


def yarn_get_mscale(scale: float = 1.0, mscale: float = 1.0) -> float:
    """DeepSeek's yarn magnitude: 1 when ``scale <= 1``, else ``0.1 * mscale * ln(scale) + 1``."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


@dataclass(frozen=True)
class MlaShape:
    """The numbers one MLA attention layer computes with.

    Sizes: ``num_heads``; ``q_lora_rank`` (None: q is one ``q_proj`` from the input, no q_a/q_b); ``kv_lora_rank``
    (the latent width); ``qk_nope_head_dim`` and ``qk_rope_head_dim`` (q/k per head = nope then rope part;
    ``qk_rope_head_dim`` even); ``v_head_dim``.

    ``rms_norm_eps``: the config's eps. ``latent_norm_eps``: the eps of ``q_a_layernorm`` and ``kv_a_layernorm``
    (None: ``rms_norm_eps``, as both engines; transformers uses 1e-6).

    Rope: ``rope_theta`` (base); ``rope_scaling`` None for plain RoPE, else DeepSeek yarn with the keys ``factor``,
    ``original_max_position_embeddings`` (both required) and ``beta_fast`` (32), ``beta_slow`` (1), ``mscale`` (1),
    ``mscale_all_dim`` (0) - defaults as DeepSeek's ``DeepseekScalingRotaryEmbedding``; ``max_position_embeddings``
    (kept for the checks; yarn's ramp uses ``original_max_position_embeddings``). ``rope_interleave``: True pairs
    rotary dims (0,1), (2,3), ... (DeepSeek's layout, GPT-J style); False pairs (i, i + d/2) (rotate-half, neox).

    Reader knobs (see the module docstring for who does what): ``softmax_mscale`` (False: the softmax scale stays
    ``qk_head_dim ** -0.5`` even with yarn); ``rope_attention_factor`` (the factor on cos/sin; None: DeepSeek's
    ``yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)``); ``yarn_extrapolation_factor``
    (scales the extrapolation mask, 1 = DeepSeek); ``yarn_truncate`` (floor/ceil the correction range, True =
    DeepSeek). The knobs apply only with ``rope_scaling``.

    The instance is immutable but holds a dict, so it is not hashable.
    """

    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, float] | None = None
    max_position_embeddings: int = 4096
    rope_interleave: bool = True
    latent_norm_eps: float | None = None
    softmax_mscale: bool = True
    rope_attention_factor: float | None = None
    yarn_extrapolation_factor: float = 1.0
    yarn_truncate: bool = True

    def __post_init__(self) -> None:
        for name in ("num_heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                     "max_position_embeddings"):
            value = getattr(self, name)
            if not _is_int(value) or value < (0 if name == "qk_nope_head_dim" else 1):
                raise ValueError(f"MLA {name} must be a positive integer, found {value!r}")
        if self.q_lora_rank is not None and (not _is_int(self.q_lora_rank) or self.q_lora_rank < 1):
            raise ValueError(f"MLA q_lora_rank must be a positive integer or None, found {self.q_lora_rank!r}")
        if self.qk_rope_head_dim % 2:
            raise ValueError(f"MLA qk_rope_head_dim must be even (rotary pairs), found {self.qk_rope_head_dim}")
        for name in ("rms_norm_eps", "rope_theta"):
            if not _is_num(getattr(self, name)) or getattr(self, name) <= 0:
                raise ValueError(f"MLA {name} must be a positive number, found {getattr(self, name)!r}")
        if self.rope_scaling is not None:
            for key in ("factor", "original_max_position_embeddings"):
                if not _is_num(self.rope_scaling.get(key)) or self.rope_scaling[key] <= 0:
                    raise ValueError(f"MLA yarn rope_scaling needs a positive {key}, found "
                                     f"{self.rope_scaling.get(key)!r}")
            for key in YARN_DEFAULTS:
                if key in self.rope_scaling and not _is_num(self.rope_scaling[key]):
                    raise ValueError(f"MLA yarn rope_scaling {key} must be a number, found {self.rope_scaling[key]!r}")

    @property
    def qk_head_dim(self) -> int:
        """``qk_nope_head_dim + qk_rope_head_dim``: the per-head width of q and k."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, reader: MlaReader | None = None) -> MlaShape:
        """The shape ``reader`` builds from a plain config dict (``config.json``): :data:`TRANSFORMERS` by default
        (transformers 5.19, the reference: what the config states); the engines' readers are their releases'
        (eagle3_checks.engines: vLLM 0.33.0's and SGLang 0.5.23's).

        An absent key takes transformers 5.19's ``DeepseekV3Config`` default (:data:`CONFIG_DEFAULTS`: so an absent
        ``q_lora_rank`` is 1536 and only an explicit null means ``q_proj``). Rope comes from ``rope_parameters``
        (transformers 5) or else ``rope_scaling`` plus ``rope_theta``; ``rope_type`` (or legacy ``type``)
        ``default`` means plain RoPE; a ``yarn`` dict without ``original_max_position_embeddings`` gets
        ``max_position_embeddings``, as transformers' ``standardize_rope_params`` does for every reader.
        Raises :class:`ValueError` for a value the reader cannot use (the message says which and why).

        Only the attention's numbers are read here: which configs an engine refuses outright (SGLang 0.5.23's EAGLE-3
        MLA layer raises on a null ``q_lora_rank``, ``SG23/models/kimi_k25_eagle3.py:113-117``) is the config
        checks' business, so SGLang's reader still builds a ``q_proj`` shape.
        """
        reader = reader or TRANSFORMERS

        def get(key: str) -> Any:
            return config.get(key, CONFIG_DEFAULTS[key])

        q_lora_rank = config["q_lora_rank"] if "q_lora_rank" in config else CONFIG_DEFAULTS["q_lora_rank"]
        max_pos = get("max_position_embeddings")
        eps = get("rms_norm_eps")
        theta, rope_type, params = _rope_parameters(config, max_pos)
        knobs: dict[str, Any] = {}
        scaling: dict[str, float] | None = None
        if rope_type != "default":
            scaling, knobs = reader.yarn(params, rope_type, max_pos)
        interleave = reader.interleave if reader.interleave is not None else bool(get("rope_interleave"))
        latent_eps = reader.latent_eps
        return cls(num_heads=get("num_attention_heads"), q_lora_rank=q_lora_rank, kv_lora_rank=get("kv_lora_rank"),
                   qk_nope_head_dim=get("qk_nope_head_dim"), qk_rope_head_dim=get("qk_rope_head_dim"),
                   v_head_dim=get("v_head_dim"), rms_norm_eps=eps, rope_theta=theta, rope_scaling=scaling,
                   max_position_embeddings=max_pos, rope_interleave=interleave, latent_norm_eps=latent_eps, **knobs)


def eps_scale_change(eps_a: float, eps_b: float, mean_square: float) -> float:
    """How much an RMS-normed vector changes when its norm's eps is ``eps_b`` instead of ``eps_a``: the output is
    ``w * x / sqrt(m + eps)`` with ``m = mean(x ** 2)``, so only its length changes, by ``sqrt((m + a) / (m + b))``;
    returns ``|that - 1|`` (relative)."""
    return abs(math.sqrt((mean_square + eps_a) / (mean_square + eps_b)) - 1.0)


def eps_mean_square_bound(eps_a: float, eps_b: float, tolerance: float) -> float:
    """The smallest mean square ``m`` of a norm's input from which ``eps_scale_change(eps_a, eps_b, m) <= tolerance``
    (0.0 when that holds for every input). With ``a = max``, ``b = min`` the factor ``f = sqrt((m + a) / (m + b)) >= 1``
    falls as ``m`` grows, and ``f - 1 <= t  <=>  m + a <= (1 + t)**2 (m + b)  <=>  m >= (a - (1 + t)**2 b) /
    ((1 + t)**2 - 1)``; the change the other way (``1 - 1/f``) is smaller still."""
    a, b = max(eps_a, eps_b), min(eps_a, eps_b)
    grow = (1.0 + tolerance) ** 2
    return max(0.0, (a - grow * b) / (grow - 1.0))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def number(params: Mapping[str, Any], key: str, default: float | None, who: str) -> float:
    value = params.get(key, default)
    if isinstance(value, bool):  # vLLM's own default for mscale_all_dim is False: float(False) == 0
        value = float(value)
    if not _is_num(value):
        raise ValueError(f"rope {key} = {value!r}: {who} needs a number here")
    return float(value)


def _rope_parameters(config: Mapping[str, Any], max_pos: Any) -> tuple[float, str, dict[str, Any]]:
    raw = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"rope parameters must be a mapping, found {raw!r}")
    params = dict(raw)
    theta = params.get("rope_theta", config.get("rope_theta", CONFIG_DEFAULTS["rope_theta"]))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "yarn" and "original_max_position_embeddings" not in params:
        params["original_max_position_embeddings"] = max_pos
    return theta, str(rope_type), params


def _read_transformers(params: dict[str, Any], rope_type: str, max_pos: int) -> tuple[dict[str, float], dict]:
    """transformers 5.19: ``_compute_yarn_parameters`` (TF/modeling_rope_utils.py:412-483) and ``yarn_apply_mscale``."""
    who = "transformers 5.19 DeepseekV3Attention"
    if rope_type != "yarn":
        raise ValueError(f"rope_type {rope_type!r}: only 'yarn' is modelled for {who}")
    factor = number(params, "factor", None, who)
    original = number(params, "original_max_position_embeddings", None, who)
    mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        if mscale and mscale_all:
            attention_factor = yarn_get_mscale(factor, float(mscale)) / yarn_get_mscale(factor, float(mscale_all))
        else:
            attention_factor = yarn_get_mscale(factor)
    scaling = {"factor": factor, "original_max_position_embeddings": original,
               "beta_fast": float(params.get("beta_fast") or 32), "beta_slow": float(params.get("beta_slow") or 1),
               "mscale": float(mscale or 1.0), "mscale_all_dim": float(mscale_all or 0.0)}
    return scaling, {"rope_attention_factor": float(attention_factor),
                     "yarn_truncate": bool(params.get("truncate", True))}




@dataclass(frozen=True)
class MlaReader:
    """How one reader builds the MLA attention from a config: its yarn reading (params, rope_type, max_position ->
    (rope_scaling, MlaShape knobs); raises ValueError for a value it cannot use), whether it pairs rope dimensions
    interleaved whatever the config says (None: ``rope_interleave`` as stated), the eps of its latent norms (None:
    ``rms_norm_eps``) and where it builds them."""

    name: str
    yarn: Callable[[dict[str, Any], str, int], tuple[dict[str, float], dict]]
    interleave: bool | None = None
    latent_eps: float | None = None
    latent_source: str = ""


TRANSFORMERS = MlaReader("transformers", _read_transformers, latent_eps=DEEPSEEK_LATENT_NORM_EPS,
                         latent_source=TRANSFORMERS_LATENT_NORMS)


def yarn_param(shape: MlaShape, key: str) -> float:
    assert shape.rope_scaling is not None
    return float(shape.rope_scaling.get(key, YARN_DEFAULTS.get(key)))  # type: ignore[arg-type]


def yarn_softmax_scale(shape: MlaShape) -> float:
    """The attention logits' scale: ``qk_head_dim ** -0.5``, times ``m * m`` with ``m = yarn_get_mscale(factor,
    mscale_all_dim)`` under yarn when ``shape.softmax_mscale`` (m = 1 when ``mscale_all_dim`` is 0 or absent)."""
    scale = shape.qk_head_dim ** -0.5
    if shape.rope_scaling is not None and shape.softmax_mscale:
        m = yarn_get_mscale(yarn_param(shape, "factor"), yarn_param(shape, "mscale_all_dim"))
        scale = scale * m * m
    return scale


def rope_cos_sin_factor(shape: MlaShape) -> float:
    """The factor on cos and sin: 1 without yarn; ``shape.rope_attention_factor`` when set; else DeepSeek's
    ``yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)`` (1 when they are equal)."""
    if shape.rope_scaling is None:
        return 1.0
    if shape.rope_attention_factor is not None:
        return float(shape.rope_attention_factor)
    factor = yarn_param(shape, "factor")
    return (yarn_get_mscale(factor, yarn_param(shape, "mscale"))
            / yarn_get_mscale(factor, yarn_param(shape, "mscale_all_dim")))


def expected_attention_shapes(shape: MlaShape, hidden_size: int, in_dim: int) -> dict[str, tuple[int, ...]]:
    """Each weight's shape, keyed relative to the layer's ``self_attn.`` (torch Linear layout: (out, in)).

    ``in_dim`` is the layer's input width (2 * hidden_size for the first EAGLE-3 layer); it changes only
    ``q_a_proj`` / ``q_proj`` and ``kv_a_proj_with_mqa``. With ``q_lora_rank`` None the q path is ``q_proj`` alone
    (no ``q_a_proj``, ``q_a_layernorm``, ``q_b_proj``)."""
    nh, qk = shape.num_heads, shape.qk_head_dim
    shapes: dict[str, tuple[int, ...]] = {}
    if shape.q_lora_rank is None:
        shapes["q_proj.weight"] = (nh * qk, in_dim)
    else:
        shapes["q_a_proj.weight"] = (shape.q_lora_rank, in_dim)
        shapes["q_a_layernorm.weight"] = (shape.q_lora_rank,)
        shapes["q_b_proj.weight"] = (nh * qk, shape.q_lora_rank)
    shapes["kv_a_proj_with_mqa.weight"] = (shape.kv_lora_rank + shape.qk_rope_head_dim, in_dim)
    shapes["kv_a_layernorm.weight"] = (shape.kv_lora_rank,)
    shapes["kv_b_proj.weight"] = (nh * (shape.qk_nope_head_dim + shape.v_head_dim), shape.kv_lora_rank)
    shapes["o_proj.weight"] = (hidden_size, nh * shape.v_head_dim)
    return shapes


# How each attention tensor's shape reads, in symbols (``{in}``: the layer's input width).
SYMBOLS = {
    "q_a_proj.weight": "(q_lora_rank, {in})",
    "q_a_layernorm.weight": "(q_lora_rank,)",
    "q_b_proj.weight": "(nh·(qk_nope_head_dim + qk_rope_head_dim), q_lora_rank)",
    "q_proj.weight": "(nh·(qk_nope_head_dim + qk_rope_head_dim), {in})",
    "kv_a_proj_with_mqa.weight": "(kv_lora_rank + qk_rope_head_dim, {in})",
    "kv_a_layernorm.weight": "(kv_lora_rank,)",
    "kv_b_proj.weight": "(nh·(qk_nope_head_dim + v_head_dim), kv_lora_rank)",
    "o_proj.weight": "(H, nh·v_head_dim)",
}


class _Unknown:
    """A size the config does not state: any arithmetic with it is unknown too (a shape dimension None)."""

    def __add__(self, other: Any) -> _Unknown:
        return self

    __radd__ = __mul__ = __rmul__ = __add__


_UNKNOWN = _Unknown()


def _known(v: int | None) -> Any:
    return _UNKNOWN if v is None else v


def attention(d: Any, p: str, d_in: int | None, d_sym: str, add: Add) -> None:
    """The layer's MLA attention tensors, sized by expected_attention_shapes."""
    m = d.mla
    if m is None:  # the reading could not build the attention (its refusals say why): sizes unknown
        m = SimpleNamespace(q_lora_rank=None, kv_lora_rank=None, qk_nope_head_dim=None, qk_rope_head_dim=None,
                            v_head_dim=None, q_proj=False)
    nope, rope = _known(m.qk_nope_head_dim), _known(m.qk_rope_head_dim)
    shape = SimpleNamespace(num_heads=_known(d.num_heads), q_lora_rank=None if m.q_proj else _known(m.q_lora_rank),
                            kv_lora_rank=_known(m.kv_lora_rank), qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                            v_head_dim=_known(m.v_head_dim), qk_head_dim=nope + rope)
    shapes = expected_attention_shapes(shape, _known(d.hidden_size), _known(d_in))  # type: ignore[arg-type]
    for key, dims in shapes.items():
        add(p + "self_attn." + key, tuple(None if isinstance(x, _Unknown) else x for x in dims),
            SYMBOLS[key].replace("{in}", d_sym))


def effective(shape: Any) -> dict[str, Any] | None:
    """What an MLA reading computes with, as numbers (no torch): two readers that agree here compute the same
    attention, however they arrived at it (an eps left to the config's vs stated, a cos/sin factor of 1 given or
    derived). The engine semantics compare this."""
    if shape is None:
        return None
    scaling = shape.rope_scaling
    return {
        "num_heads": shape.num_heads, "q_lora_rank": shape.q_lora_rank, "kv_lora_rank": shape.kv_lora_rank,
        "qk_nope_head_dim": shape.qk_nope_head_dim, "qk_rope_head_dim": shape.qk_rope_head_dim,
        "v_head_dim": shape.v_head_dim,
        "latent_norm_eps": float(shape.rms_norm_eps if shape.latent_norm_eps is None else shape.latent_norm_eps),
        "rope_theta": float(shape.rope_theta), "rope_interleave": shape.rope_interleave,
        "yarn": None if scaling is None else {k: float(v) for k, v in sorted(scaling.items()) if k != "mscale"
                                              and k != "mscale_all_dim"},
        "yarn_extrapolation_factor": float(shape.yarn_extrapolation_factor) if scaling else None,
        "yarn_truncate": shape.yarn_truncate if scaling else None,
        "rope_cos_sin_factor": round(rope_cos_sin_factor(shape), 12),
        "softmax_scale": round(yarn_softmax_scale(shape), 12),
    }


FAMILY = Family(MLA, "DeepSeek multi-latent attention (MLA) decoder layers", MLA_LAYER_SUFFIXES,
                ("num_attention_heads", *MLA_CONFIG_FIELDS, "rope_theta", "rope_scaling", "rope_interleave",
                 "rms_norm_eps", "max_position_embeddings"),
                attention, classes="Eagle3DeepseekV2ForCausalLM, Eagle3DeepseekV3ForCausalLM")
