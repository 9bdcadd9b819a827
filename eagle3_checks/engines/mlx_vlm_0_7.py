"""mlx-vlm 0.7.10's reading of an EAGLE-3 drafter (files are ``mlx_vlm/`` in the 0.7.10 wheel from PyPI,
2026-10-21; ``D3/`` is ``mlx_vlm/speculative/drafters/eagle3/``). Read from the wheel's source.

- ``utils.py:198-231``: the module is chosen by ``model_type``, else ``speculators_model_type``; ``eagle3`` is the
  drafter. A flat config (``model_type`` llama) loads as a plain Llama and fails the strict load; the speculators
  layout only is read;
- ``D3/config.py:8-33``: the layer from ``transformer_layer_config`` with mlx-vlm's own defaults; ``rope_theta``
  only (``rope_scaling`` is dropped, ``rope_parameters`` gives its theta alone); hidden_act, mlp_bias and
  max_position_embeddings are not read (SiLU, no MLP bias); ``D3/config.py:36-91``: ``draft_vocab_size``,
  ``target_hidden_size``, ``norm_before_residual`` and ``norm_before_fc`` (default false); no fc_norm, no
  norm_output; the top-level ``eagle_aux_hidden_state_layer_ids`` only, else ``[2, n//2, max(n-3, 0)]`` of the
  DRAFTER's n layers (``:66-71``), captured at ``max(id-1, 0)`` (``:72-73``), collected as a set;
- ``D3/eagle3.py``: fc is ``3 x Ht`` without bias (``:171``); q/k/v/o with ``attention_bias`` (``:38-57``); later
  layers normed by ``input_layernorm`` (``:128-152``); the pre-norm state is fed back (``:267-271``); positions from 1;
  ``sanitize`` (``:551-565``) drops t2d, verifier_*, ``input_norm`` without norm_before_fc and a tied lm_head; the
  load is strict (``utils.py:591-610, 699``): a tensor it has no parameter for, or a missing one, raises ValueError,
  except a whole top-level module with no tensors, which is dropped (``utils.py:299-320``): no embed_tokens crashes
  at the first draft, no lm_head uses the embedding as head; d2t exists (and is required) only when the draft
  vocabulary is smaller (``:194-198``); an embed_tokens of the target's shape is replaced by the target's
  (``:211-233``);
- ``speculative/eagle3.py:366-370``: the target must capture hidden states and roll back its cache: gemma4,
  glm_moe_dsa, laguna, lfm2, minimax_m3_vl, muse_glimmer, nemotron_h, qwen3_5 (not Llama or Qwen3 targets).
"""

from __future__ import annotations

from typing import Any

from ..drafter.config_values import positive_number as positive
from ..drafter.layout import SPECULATORS
from . import launch as launching
from .profile import Capture, Profile, Release, Target
from .reading import Reading, is_int
from .record import (
    Call,
    Fact,
    Ids,
    Refuse,
    Rule,
    Stop,
    Tensors,
    Value,
    Walk,
    all_of,
    also,
    any_of,
    const,
    fmt,
    is_true,
    midlayer_style,
    name_starts,
    prefixed,
    read_as,
    reading_of,
    role_ends,
    role_is,
    role_starts,
    same,
    unknown,
)

VERSION = "0.7.10"
NAME = "mlx"
D3 = "speculative/drafters/eagle3"
TARGET_TYPES = ("gemma4", "glm_moe_dsa", "laguna", "lfm2", "minimax_m3_vl", "muse_glimmer", "nemotron_h", "qwen3_5")
# D3/config.py:8-33 TextConfig defaults
DEFAULTS = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 1, "num_attention_heads": 32,
            "num_key_value_heads": 32, "rms_norm_eps": 1e-6, "vocab_size": 32000, "rope_theta": 10000.0}
TLC = "transformer_layer_config"


def _kind(w: Walk) -> Any:
    return w.raw.get("model_type") or w.raw.get("speculators_model_type")


def _not_eagle3_speculators(w: Walk) -> bool:
    return w.ckpt.layout != SPECULATORS or w.facts["kind"] != "eagle3"


def _size(attr: str, key: str) -> Value:
    """A layer size from transformer_layer_config, else mlx-vlm's TextConfig default."""
    return Value(attr, (f"{TLC}.{key}",), DEFAULTS[key], f"mlx-vlm default: {DEFAULTS[key]} ({D3}/config.py:8-33)",
                 take=same, valid=is_int, key=True)


def _head_dim(w: Walk) -> None:
    hd, r = w.fields.get("head_dim"), w.r
    r.set("head_dim", hd if is_int(hd) else r.hidden_size // r.num_heads if r.hidden_size and r.num_heads else None,
          f"config.json: {w.where}head_dim" if is_int(hd) else f"mlx-vlm default: hidden_size // heads ({D3}/config.py:"
          "28-29)")


def _rope_theta(w: Walk) -> None:
    """D3/config.py: the theta of rope_parameters, else rope_theta (rope_scaling is dropped)."""
    given = w.fields.get("rope_parameters")
    params: dict = given if isinstance(given, dict) else {}
    theta = params.get("rope_theta", w.fields.get("rope_theta"))
    w.r.set("rope_theta", float(theta) if positive(theta) else 10000.0, f"config.json: {w.where}rope_theta" if
            positive(theta) else "mlx-vlm default: 10000")


def _defaults(n: int) -> list[int]:
    return [2, n // 2, max(n - 3, 0)]


def _distinct_captured(w: Walk) -> int:
    ids = w.r.aux_layer_ids or _defaults(w.r.num_layers)
    w.facts["ids"] = ids
    return len({max(i - 1, 0) for i in ids})


def _target_type_unserved(w: Walk) -> bool:
    return w.target is not None and getattr(w.target, "model_type", None) not in (None, *TARGET_TYPES)


def _after_load(w: Walk) -> None:
    """The strict load's holes: no embed_tokens crashes at the first draft; the embedding replaced by the target's;
    no lm_head uses the embedding as head."""
    r = w.r
    if "embed_tokens.weight" not in r.tensors:
        r.refuse(f"no embed_tokens.weight: mlx-vlm drops the empty module (utils.py:299-320) and the first draft "
                 f"raises AttributeError ({D3}/eagle3.py:226-232)", at="embed_tokens.weight")
        r.unfilled.pop("embed_tokens.weight", None)
    elif r.vocab_size and r.hidden_size:
        r.replaced[r.tensors["embed_tokens.weight"]] = (f"the target's embedding when its shape is (V, H) "
                                                        f"({D3}/eagle3.py:211-233)")
    if "lm_head.weight" not in r.tensors and not r.lm_head_from_embed:
        r.unfilled["lm_head.weight"] = (f"the drafter's embed_tokens as head (utils.py:313, {D3}/eagle3.py:267-277)" +
                                        ("; with a smaller draft vocabulary d2t then indexes out of range"
                                         if w.facts["small"] else ""))


def _not_attention_bias(w: Walk, name: str, n) -> bool:
    return not (w.r.attention_bias and ".self_attn." in (n.role or ""))


_REFUSED = ("refused: mlx-vlm's strict load raises ValueError: it has no parameter of that name (utils.py:591-610, "
            "699)")
_SANITIZE = f"({D3}/eagle3.py:551-565)"

# One walk, in the loader's order: utils.py's module choice, D3/config.py, the Eagle3 model, sanitize, the strict load.
STEPS = (
    Fact("kind", _kind),
    Stop(_not_eagle3_speculators, fmt("mlx-vlm 0.7.10 reads the speculators layout only (model_type or "
                                      "speculators_model_type eagle3, utils.py:198-231); model_type {kind!r} loads "
                                      "another model and its strict load raises ValueError")),
    const("architecture", "Eagle3", fmt("{kind!r} -> mlx_vlm.speculative.drafters.eagle3 (utils.py:257-265)")),
    *(_size(attr, key) for attr, key in (("hidden_size", "hidden_size"), ("intermediate_size", "intermediate_size"),
                                         ("num_layers", "num_hidden_layers"), ("num_heads", "num_attention_heads"),
                                         ("num_kv_heads", "num_key_value_heads"), ("vocab_size", "vocab_size"))),
    Call(_head_dim),
    Value("rms_norm_eps", (f"{TLC}.rms_norm_eps",), 1e-6, "mlx-vlm default: 1e-6", take=float, valid=positive),
    Call(_rope_theta),
    const("rope_scaling", None, f"mlx-vlm builds nn.RoPE from the theta only ({D3}/eagle3.py:58-62): rope_scaling and "
          "the rope type are not read"),
    const("hidden_act", "silu", f"mlx-vlm hard-codes SiLU ({D3}/eagle3.py:25): hidden_act is not read"),
    const("max_position_embeddings", None, "mlx-vlm does not read max_position_embeddings"),
    Value("attention_bias", (f"{TLC}.attention_bias",), False, f"config.json: {TLC}.attention_bias (q/k/v and o)",
          take=is_true, says=f"config.json: {TLC}.attention_bias (q/k/v and o)"),
    Value("o_bias", (), reading_of("attention_bias"), f"{D3}/eagle3.py:38-57: o_proj follows attention_bias"),
    const("mlp_bias", False, f"mlx-vlm builds the MLP without bias ({D3}/eagle3.py:14-22)"),
    const("fc_bias", False, f"mlx-vlm builds fc without bias ({D3}/eagle3.py:171)"),
    const("qk_norm", False, "mlx-vlm's EAGLE-3 attention has no q/k norms"),
    Value("draft_vocab_size", ("draft_vocab_size",), 32000, "mlx-vlm default: 32000", take=same, valid=is_int),
    Value("target_hidden_size", ("target_hidden_size",), reading_of("hidden_size"), "mlx-vlm default: hidden_size",
          take=same, valid=is_int),
    Value("norm_before_residual", ("norm_before_residual",), False, "config.json: norm_before_residual (default "
          "false)", take=is_true, says="config.json: norm_before_residual (default false)"),
    Value("input_norm", ("norm_before_fc",), False, "config.json: norm_before_fc (default false)", take=is_true,
          says="config.json: norm_before_fc (default false)"),
    const("fc_norm", False, "mlx-vlm has no fc_norm (not read)"),
    const("feedback", "prenorm", f"mlx-vlm feeds the pre-norm state back ({D3}/eagle3.py:267-271; norm_output is "
          "not read)"),
    const("num_aux", 3, f"mlx-vlm: fc takes 3 x Ht ({D3}/eagle3.py:171)"),
    Value("lm_head_from_embed", (), lambda w: w.raw.get("tie_word_embeddings") is True and
          w.r.draft_vocab_size == w.r.vocab_size, f"config.json: tie_word_embeddings ({D3}/eagle3.py:187-192)"),
    Ids(("eagle_aux_hidden_state_layer_ids",), f"mlx-vlm default [2, n//2, max(n-3, 0)] of the drafter's n layers "
        f"({D3}/config.py:66-71)"),
    const("aux_convention", "vllm", f"mlx-vlm: id L is captured at layer max(L-1, 0) ({D3}/config.py:72-73)"),
    Fact("distinct", _distinct_captured),
    Refuse(lambda w: w.facts["distinct"] != 3, fmt("ids {ids} capture {distinct} distinct layers (mlx-vlm collects "
                                                   "them as a set, " + D3 + "/config.py:72-73) for an fc of 3 "
                                                   "states: the first draft step fails"),
           at="eagle_aux_hidden_state_layer_ids"),
    Refuse(_target_type_unserved, fmt("target model_type {w.target.model_type!r}: mlx-vlm 0.7.10 serves EAGLE-3 only "
                                      "beside targets that capture hidden states and roll back their cache ("
                                      + ", ".join(TARGET_TYPES) + "; speculative/eagle3.py:366-370 raises "
                                      "RuntimeError)"), at="--target-config"),
    Fact("small", lambda w: w.r.draft_vocab_size != w.r.vocab_size),
    Tensors((
        Rule(any_of(role_is("t2d"), name_starts("verifier_")), f"dropped by sanitize {_SANITIZE}"),
        Rule(all_of(role_is("input_norm.weight"), also(lambda w: not w.r.input_norm)),
             f"dropped by sanitize without norm_before_fc {_SANITIZE}"),
        Rule(all_of(role_is("lm_head.weight"), also(read_as("lm_head_from_embed"))),
             f"dropped by sanitize: tied, the embedding is the head {_SANITIZE}"),
        Rule(any_of(unknown, prefixed, midlayer_style, all_of(role_is("d2t"), also(lambda w: not w.facts["small"]))),
             _REFUSED),
        Rule(all_of(role_ends(".bias"), _not_attention_bias), _REFUSED),
        Rule(any_of(role_ends("q_norm.weight", "k_norm.weight"), role_starts("fc_norm.")), _REFUSED),
    ), "a ValueError at load (mlx-vlm's load is strict, utils.py:699)", refuse_skipped=True),
    Call(_after_load),
)


def capture(ids: list[int], target: Target | None) -> Capture:
    n = target.num_layers if target else None
    return Capture(tuple(sorted({max(i - 1, 0) for i in ids})), f"mlx-vlm: id L is captured at layer max(L-1, 0) "
                   f"({D3}/config.py:72-73)", n if n else None)


def default_rule(target: Target | None, drafter: Reading | None = None) -> Capture:
    n = drafter.num_layers if drafter is not None else 1
    ids = _defaults(n)
    return Capture(tuple(sorted({max(i - 1, 0) for i in ids})), f"mlx-vlm's default ids {ids}, from the drafter's "
                   f"{n} layer(s), not the target's ({D3}/config.py:66-73)", target.num_layers if target else None)


def ids_for(layers: tuple[int, ...], target: Target | None) -> list[int] | None:
    return [x + 1 for x in layers] if 0 not in layers or len(layers) == 1 else None


def cannot_compute(trained: Reading) -> list[str]:
    return [name for name, on in (("fc_norm", trained.fc_norm), ("norm_output", trained.feedback == "normed"),
                                  ("rope scaling", bool(trained.rope_scaling)),
                                  ("MLP or fc biases", trained.mlp_bias or trained.fc_bias),
                                  ("Qwen3 q/k norms", trained.qk_norm),
                                  ("more than one layer normed by hidden_norm",
                                   trained.num_layers != 1 and trained.later_norm == "hidden_norm"),
                                  ("a number of aux states other than 3", trained.num_aux != 3)) if on]


PROFILE = Profile(
    NAME, VERSION, STEPS, capture, ids_for,
    module=__name__, takes=(),
    releases=(Release(VERSION, "2026-10-21"),),
    sources=(f"{D3}/config.py", f"{D3}/eagle3.py", "utils.py", "speculative/eagle3.py", "server/cli.py"),
    reads_ids="the top-level eagle_aux_hidden_state_layer_ids",
    ids_path=("eagle_aux_hidden_state_layer_ids",),
    cannot_compute=cannot_compute,
    default_rule=default_rule,
    package="mlx_vlm",
    launch=launching.mlx,
)
