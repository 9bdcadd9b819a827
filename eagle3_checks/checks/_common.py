"""Small helpers shared by the checks."""

from __future__ import annotations

from ..config import DraftConfig
from ..registry import Context, NotApplicable

CONFIG = "config.json"


def config_of(ctx: Context) -> DraftConfig:
    """The effective config, or skip the check when config.json is unreadable."""
    cfg = ctx.ckpt.config
    if cfg is None:
        raise NotApplicable("config.json is missing or unreadable (see the files check)")
    return cfg


def require_complete(ctx: Context) -> None:
    """Skip a check that needs the whole tensor list when a header or shard could not be read."""
    if not ctx.ckpt.complete:
        raise NotApplicable("the tensor list is incomplete: a header or shard could not be read (see the files check)")


def config_key(cfg: DraftConfig, name: str) -> str:
    """The key path a field has (or would have) in config.json, for findings."""
    v = cfg.get(name)
    if v is not None and v.explicit and ": " in v.source:
        return v.source.split(": ", 1)[1].replace(" (invalid)", "").replace(" (count)", "")
    if cfg.layout == "speculators" and name in {"hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                                                 "intermediate_size", "num_hidden_layers", "vocab_size", "rms_norm_eps",
                                                 "max_position_embeddings", "attention_bias", "mlp_bias", "model_type"}:
        return f"transformer_layer_config.{name}"
    if name == "aux_layer_ids":
        return "eagle_aux_hidden_state_layer_ids" if cfg.layout == "speculators" else \
            "eagle_config.eagle_aux_hidden_state_layer_ids"
    return name
