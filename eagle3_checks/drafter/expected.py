"""What a drafter with a given config must hold: each tensor role, its shape, and whether it is
required, optional or required because of a config flag. The key-set and shape checks both
read this one table.

Notation (as in the fact sheet): H hidden_size, nh / nkv attention / KV heads, hd head_dim,
I intermediate_size, V vocab_size, DV draft_vocab_size, Ht target_hidden_size, A aux layers.
"""

from __future__ import annotations

from ..fast_dataclass import dataclass
from .config_values import DraftConfig
from .families import FAMILIES
from .families.base import CONDITIONAL, OPTIONAL, REQUIRED
from .families.base import product as _mul
from .layout import LLAMA, MAX_LAYERS, MLA, MLP_PROJ, has_qk_norm


@dataclass(frozen=True)
class Expected:
    role: str
    shape: tuple[int | None, ...]  # None: a dimension the config does not determine
    dims: str  # the same shape in symbols, for messages: "(nh·hd, 2H)"
    presence: str  # REQUIRED, OPTIONAL or CONDITIONAL
    reason: str = ""  # for CONDITIONAL: the config flag that asks for it


@dataclass(frozen=True)
class Dims:
    """The sizes and flags that decide a drafter's tensors, from a config or from an engine's reading."""

    hidden_size: int | None
    num_heads: int | None
    num_kv_heads: int | None
    head_dim: int | None
    intermediate_size: int | None
    vocab_size: int | None
    draft_vocab_size: int | None
    target_hidden_size: int | None
    num_aux: int
    num_layers: int
    input_norm: bool = False
    fc_norm: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    tied: bool = False
    qk_reason: str = ""
    o_bias: bool | None = None  # o_proj's bias where an engine builds it apart from q/k/v; None: as attention_bias
    later_norm: str = "input_layernorm"  # the pre-attention norm of layers >= 1 (SGLang 0.5.23: hidden_norm)
    fc_bias: bool = False
    family: str = LLAMA  # the decoder layer's family (drafter/families/)
    mla: MlaDims | None = None  # the MLA family's attention sizes

    @classmethod
    def of_config(cls, cfg: DraftConfig, n_layers: int | None = None) -> Dims:
        if cfg.family == MLA:
            return cls(cfg["hidden_size"], cfg["num_attention_heads"], None, None, cfg["intermediate_size"],
                       cfg["vocab_size"], cfg["draft_vocab_size"], cfg.target_hidden, cfg.num_aux,
                       n_layers or cfg["num_hidden_layers"] or 1, bool(cfg["norm_before_fc"]),
                       bool(cfg["fc_norm"] or cfg["use_aux_norm"]), tied=bool(cfg["tie_word_embeddings"]),
                       fc_bias=bool(cfg["bias"]), family=MLA, mla=MlaDims.of_config(cfg))
        qk = has_qk_norm(cfg.layout, cfg["model_type"], cfg["architectures"])
        return cls(cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                   cfg["intermediate_size"], cfg["vocab_size"], cfg["draft_vocab_size"], cfg.target_hidden,
                   cfg.num_aux, n_layers or cfg["num_hidden_layers"] or 1, bool(cfg["norm_before_fc"]),
                   bool(cfg["fc_norm"]), bool(cfg["attention_bias"]), bool(cfg["mlp_bias"]), qk,
                   bool(cfg["tie_word_embeddings"]),
                   (f"model_type qwen3 ({cfg.fields['model_type'].source})" if cfg.layout == "speculators"
                    else "architecture Eagle3Qwen3ForCausalLM") if qk else "", fc_bias=bool(cfg["bias"]))

    @classmethod
    def of_reading(cls, r) -> Dims:
        if r.family == MLA:
            return cls(r.hidden_size, r.num_heads, None, None, r.intermediate_size, r.vocab_size, r.draft_vocab_size,
                       r.target_hidden_size, r.num_aux, r.num_layers, r.input_norm, r.fc_norm,
                       tied=r.lm_head_from_embed, later_norm=r.later_norm, fc_bias=r.fc_bias, family=MLA,
                       mla=MlaDims.of_shape(r.mla))
        return cls(r.hidden_size, r.num_heads, r.num_kv_heads, r.head_dim, r.intermediate_size, r.vocab_size,
                   r.draft_vocab_size, r.target_hidden_size, r.num_aux, r.num_layers, r.input_norm, r.fc_norm,
                   r.attention_bias, r.mlp_bias, r.qk_norm, r.lm_head_from_embed, "qwen3 layers" if r.qk_norm else "",
                   r.o_bias, r.later_norm, r.fc_bias)


def expected_tensors(source: DraftConfig | Dims, n_layers: int | None = None) -> dict[str, Expected]:
    """Every tensor role a config (or an engine's reading, as Dims) implies, keyed by role. ``n_layers`` overrides
    the config's layer count (the key and shape checks judge the layers present; the layer count is
    config.layers' business)."""
    d = source if isinstance(source, Dims) else Dims.of_config(source, n_layers)
    h = d.hidden_size
    inter, v, dv, ht, a = d.intermediate_size, d.vocab_size, d.draft_vocab_size, d.target_hidden_size, d.num_aux
    n_layers = min(d.num_layers, MAX_LAYERS)  # no tensor can name a layer beyond MAX_LAYERS
    out: dict[str, Expected] = {}

    def add(role: str, shape: tuple, dims: str, presence: str = REQUIRED, reason: str = "") -> None:
        out[role] = Expected(role, shape, dims, presence, reason)

    add("embed_tokens.weight", (v, h), "(V, H)", OPTIONAL)
    add("fc.weight", (h, _mul(a, ht)), "(H, A·Ht)")
    if d.fc_bias:
        add("fc.bias", (h,), "(H,)", CONDITIONAL, "bias is true")
    if d.input_norm:
        add("input_norm.weight", (_mul(a, ht),), "(A·Ht,)", CONDITIONAL, "norm_before_fc is true")
    if d.fc_norm:
        for i in range(a):
            add(f"fc_norm.{i}.weight", (ht,), "(Ht,)", CONDITIONAL, "fc_norm is true")
    add("norm.weight", (h,), "(H,)")
    add("lm_head.weight", (dv, h), "(DV, H)", OPTIONAL if d.tied else REQUIRED)
    if v is None or dv is None:  # sizes unknown (config.fields reports why): nothing to demand
        add("d2t", (dv,), "(DV,)", OPTIONAL)
        add("t2d", (v,), "(V,)", OPTIONAL)
    elif dv < v:
        add("d2t", (dv,), "(DV,)", CONDITIONAL, f"draft_vocab_size {dv} < vocab_size {v}")
        add("t2d", (v,), "(V,)", OPTIONAL)

    for layer in range(n_layers):
        p = f"layers.{layer}."
        # The first layer attends over [embeds ‖ hidden]: its q/k/v take 2H inputs.
        d_in, d_sym = (_mul(2, h), "2H") if layer == 0 else (h, "H")
        # Layer 0 norms the embeddings with input_layernorm and the fc output with hidden_norm; later layers norm
        # their input with input_layernorm (vLLM, speculators) or hidden_norm (SGLang 0.5.23).
        if layer == 0 or d.later_norm == "input_layernorm":
            add(p + "input_layernorm.weight", (h,), "(H,)")
        if layer == 0 or d.later_norm == "hidden_norm":
            add(p + "hidden_norm.weight", (h,), "(H,)")
        FAMILIES[d.family].attention(d, p, d_in, d_sym, add)
        add(p + "post_attention_layernorm.weight", (h,), "(H,)")
        add(p + "mlp.gate_proj.weight", (inter, h), "(I, H)")
        add(p + "mlp.up_proj.weight", (inter, h), "(I, H)")
        add(p + "mlp.down_proj.weight", (h, inter), "(H, I)")
        if d.mlp_bias:
            for proj, rows, sym in zip(MLP_PROJ, (inter, inter, h), ("I", "I", "H"), strict=True):
                add(p + f"mlp.{proj}.bias", (rows,), f"({sym},)", CONDITIONAL, "mlp_bias is true")
    return out


@dataclass(frozen=True)
class MlaDims:
    """The MLA family's attention sizes (None: unknown). ``q_proj``: q_lora_rank is stated null, so q is one q_proj
    from the layer input (no q_a_proj / q_a_layernorm / q_b_proj)."""

    q_lora_rank: int | None
    kv_lora_rank: int | None
    qk_nope_head_dim: int | None
    qk_rope_head_dim: int | None
    v_head_dim: int | None
    q_proj: bool = False

    @classmethod
    def of_config(cls, cfg: DraftConfig) -> MlaDims:
        return cls(cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                   cfg["v_head_dim"], q_proj="q_lora_rank" in cfg.nulls and cfg.entry("q_lora_rank") is None)

    @classmethod
    def of_shape(cls, shape) -> MlaDims | None:
        """From an engine reading's MlaShape (drafter/families/mla.py); None when the reading could not build one."""
        if shape is None:
            return None
        return cls(shape.q_lora_rank, shape.kv_lora_rank, shape.qk_nope_head_dim, shape.qk_rope_head_dim,
                   shape.v_head_dim, q_proj=shape.q_lora_rank is None)


def layers_to_judge(ckpt) -> int | None:
    """The decoder layers the key and shape checks expect: those up to the highest one present."""
    layers = ckpt.layers
    return layers[-1] + 1 if layers else None


def shape_matches(expected: tuple[int | None, ...], found: tuple[int, ...]) -> bool:
    return len(expected) == len(found) and all(e is None or e == f for e, f in zip(expected, found, strict=True))


def fmt_shape(shape: tuple | None) -> str:
    if shape is None:
        return "?"
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


