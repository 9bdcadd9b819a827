"""What a drafter with a given config must hold: each tensor role, its shape, and whether it is
required, optional or required because of a config flag. The key-set and shape checks both
read this one table.

Notation (as in the fact sheet): H hidden_size, nh / nkv attention / KV heads, hd head_dim,
I intermediate_size, V vocab_size, DV draft_vocab_size, Ht target_hidden_size, A aux layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import DraftConfig
from .layout import ATTN_PROJ, MLP_PROJ

REQUIRED, OPTIONAL, CONDITIONAL = "required", "optional", "conditional"


@dataclass(frozen=True)
class Expected:
    role: str
    shape: tuple[int | None, ...]  # None: a dimension the config does not determine
    dims: str  # the same shape in symbols, for messages: "(nh·hd, 2H)"
    presence: str  # REQUIRED, OPTIONAL or CONDITIONAL
    reason: str = ""  # for CONDITIONAL: the config flag that asks for it


def _mul(*xs: int | None) -> int | None:
    out = 1
    for x in xs:
        if x is None:
            return None
        out *= x
    return out


def expected_tensors(cfg: DraftConfig, n_layers: int | None = None) -> dict[str, Expected]:
    """Every tensor role the config implies, keyed by role. ``n_layers`` overrides the config's layer count
    (the key and shape checks judge the layers present; the layer count is config.layers' business)."""
    h, nh, nkv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    inter, v, dv, ht, a = cfg["intermediate_size"], cfg["vocab_size"], cfg["draft_vocab_size"], cfg.target_hidden, cfg.num_aux
    n_layers = n_layers or cfg["num_hidden_layers"] or 1
    out: dict[str, Expected] = {}

    def add(role: str, shape: tuple, dims: str, presence: str = REQUIRED, reason: str = "") -> None:
        out[role] = Expected(role, shape, dims, presence, reason)

    add("embed_tokens.weight", (v, h), "(V, H)", OPTIONAL)
    add("fc.weight", (h, _mul(a, ht)), "(H, A·Ht)")
    if cfg["norm_before_fc"]:
        add("input_norm.weight", (_mul(a, ht),), "(A·Ht,)", CONDITIONAL, "norm_before_fc is true")
    if cfg["fc_norm"]:
        for i in range(a):
            add(f"fc_norm.{i}.weight", (ht,), "(Ht,)", CONDITIONAL, "fc_norm is true")
    add("norm.weight", (h,), "(H,)")
    tied = cfg["tie_word_embeddings"]
    add("lm_head.weight", (dv, h), "(DV, H)", OPTIONAL if tied else REQUIRED)
    if v is None or dv is None:  # sizes unknown (config.fields reports why): nothing to demand
        add("d2t", (dv,), "(DV,)", OPTIONAL)
        add("t2d", (v,), "(V,)", OPTIONAL)
    elif dv < v:
        add("d2t", (dv,), "(DV,)", CONDITIONAL, f"draft_vocab_size {dv} < vocab_size {v}")
        add("t2d", (v,), "(V,)", OPTIONAL)

    qk_norm = cfg["model_type"] == "qwen3"
    qk_reason = f"model_type qwen3 ({cfg.get('model_type').source})" if qk_norm else ""
    for layer in range(n_layers):
        p = f"layers.{layer}."
        # The first layer attends over [embeds ‖ hidden]: its q/k/v take 2H inputs.
        d_in, d_sym = (_mul(2, h), "2H") if layer == 0 else (h, "H")
        add(p + "input_layernorm.weight", (h,), "(H,)")
        if layer == 0:
            add(p + "hidden_norm.weight", (h,), "(H,)")
        add(p + "self_attn.q_proj.weight", (_mul(nh, hd), d_in), f"(nh·hd, {d_sym})")
        add(p + "self_attn.k_proj.weight", (_mul(nkv, hd), d_in), f"(nkv·hd, {d_sym})")
        add(p + "self_attn.v_proj.weight", (_mul(nkv, hd), d_in), f"(nkv·hd, {d_sym})")
        add(p + "self_attn.o_proj.weight", (h, _mul(nh, hd)), "(H, nh·hd)")
        if cfg["attention_bias"]:
            for proj, rows, sym in zip(ATTN_PROJ, (_mul(nh, hd), _mul(nkv, hd), _mul(nkv, hd), h),
                                       ("nh·hd", "nkv·hd", "nkv·hd", "H")):
                add(p + f"self_attn.{proj}.bias", (rows,), f"({sym},)", CONDITIONAL, "attention_bias is true")
        if qk_norm:
            add(p + "self_attn.q_norm.weight", (hd,), "(hd,)", CONDITIONAL, qk_reason)
            add(p + "self_attn.k_norm.weight", (hd,), "(hd,)", CONDITIONAL, qk_reason)
        add(p + "post_attention_layernorm.weight", (h,), "(H,)")
        add(p + "mlp.gate_proj.weight", (inter, h), "(I, H)")
        add(p + "mlp.up_proj.weight", (inter, h), "(I, H)")
        add(p + "mlp.down_proj.weight", (h, inter), "(H, I)")
        if cfg["mlp_bias"]:
            for proj, rows, sym in zip(MLP_PROJ, (inter, inter, h), ("I", "I", "H")):
                add(p + f"mlp.{proj}.bias", (rows,), f"({sym},)", CONDITIONAL, "mlp_bias is true")
    return out


def layers_to_judge(ckpt) -> int | None:
    """The decoder layers the key and shape checks expect: those up to the highest one present."""
    layers = ckpt.layers
    return layers[-1] + 1 if layers else None


def shape_matches(expected: tuple[int | None, ...], found: tuple[int, ...]) -> bool:
    return len(expected) == len(found) and all(e is None or e == f for e, f in zip(expected, found))


def fmt_shape(shape: tuple | None) -> str:
    if shape is None:
        return "?"
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
