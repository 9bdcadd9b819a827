"""shapes: every tensor has the shape the config implies."""

from __future__ import annotations

from collections.abc import Iterable

from .. import engines
from ..drafter.expected import expected_tensors, fmt_shape, layers_to_judge, shape_matches
from ..registry import Context, Finding, check, config_cause, error
from ._common import config_of


@check(
    "shapes",
    "Tensor shapes agree with the config",
    example="transposed-q-proj",
    modelled_only=True,
    guards="A lost head_dim (112 instead of 128 on Kimi-K2), transposed projections, fc sized for the wrong "
    "number of aux layers, lm_head over the full vocabulary, GQA heads miscounted.",
    evidence=("transformers LlamaConfig: head_dim defaults to hidden_size / num_attention_heads",
              "SGLang #32226 (fc width 8640 vs 5760: aux count)"),
    fix="state head_dim, draft_vocab_size and the aux-layer ids the drafter was trained with; store weights as "
    "(out_features, in_features)",
    codes={
        "mismatch": "a tensor's shape is not the one the config implies",
    },
)
def shapes(ctx: Context) -> Iterable[Finding]:
    cfg = config_of(ctx)
    ckpt = ctx.ckpt
    for role, exp in expected_tensors(cfg, layers_to_judge(ckpt)).items():
        entry = ckpt.entry(role)
        if entry is None or shape_matches(exp.shape, entry.shape):
            continue
        fix, field = _fix(role, exp.shape, entry.shape, cfg)
        yield error(
            f"{entry.name}: shape {fmt_shape(entry.shape)}, the config implies {fmt_shape(exp.shape)} {exp.dims}",
            code="mismatch", file=entry.file, key=entry.name, expected=f"{fmt_shape(exp.shape)} {exp.dims}",
            found=fmt_shape(entry.shape),
            why=_WHY,
            fix=fix, cause=config_cause(field) if field else None,
        )


# one cited fact, the one engine.loads and config.head-dim use: the linear loaders of the releases narrow a
# projection larger than the parameter they build, without an error (each profile's narrows_at)
_WHY = ("a drafter built from a config that disagrees with its weights computes something else than was trained: "
        + "; ".join(f"{p.name} {p.version} narrows a projection larger than it builds, without an error "
                    f"({p.narrows_at})" for p in (engines.newest("vllm"), engines.newest("sglang")))
        + "; what each release does with this tensor is engine.loads' finding")


def _fix(role: str, want: tuple, got: tuple, cfg) -> tuple[str, str | None]:
    """The fix, and the config field it sets when that field is the root cause (see causes.py): engines cut or
    refuse the tensor because of it, and every check that sees it is reported under it."""
    if len(want) != len(got):
        return f"the tensor has {len(got)} dimension(s), the role has {len(want)}: it is not this tensor", None
    if len(want) == 2 and shape_matches(want, got[::-1]):
        return "the tensor is transposed: store it as (out_features, in_features), as nn.Linear does", None
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    if role.endswith(("q_proj.weight", "o_proj.weight", "k_proj.weight", "v_proj.weight")) and len(got) == 2:
        heads = nkv if role.endswith(("k_proj.weight", "v_proj.weight")) else nh
        width = got[1] if role.endswith("o_proj.weight") else got[0]
        if heads and width % heads == 0 and width // heads != hd:
            stated = "" if cfg.explicit("head_dim") else " (not stated: the config's head_dim is a default)"
            return (f"the tensor holds {heads} heads of {width // heads}: set head_dim: {width // heads} in "
                    f"config.json{stated}"), "head_dim"
    if role == "fc.weight" and len(got) == 2 and cfg.target_hidden and got[1] % cfg.target_hidden == 0:
        k = got[1] // cfg.target_hidden
        if k != cfg.num_aux:
            return (f"fc takes {k} aux hidden states of {cfg.target_hidden}, the config names {cfg.num_aux}: "
                    "state the aux layer ids the drafter was trained with"), None
    if role == "lm_head.weight" and got and cfg["vocab_size"] == got[0]:
        return ("lm_head covers the full target vocabulary: export the draft-vocabulary rows (or set "
                "draft_vocab_size to vocab_size if the drafter has no draft vocabulary)"), None
    if role in ("lm_head.weight", "d2t") and got:
        return (f"the tensor has {got[0]} draft-vocabulary rows: set draft_vocab_size: {got[0]} if that is the "
                "draft vocabulary"), "draft_vocab_size"
    if role in ("embed_tokens.weight", "t2d") and got:
        return f"the tensor covers {got[0]} tokens: vocab_size must be the target (verifier) vocabulary", None
    return "re-export the tensor from the trained model, or correct the config field that sizes it", None
