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

from ..drafter.checkpoint import Checkpoint
from ..drafter.config_values import positive_number as positive
from ..drafter.layout import SPECULATORS
from . import launch as launching
from . import reading
from .profile import Capture, Profile, Release, Target
from .reading import Reading, is_int

VERSION = "0.7.10"
NAME = "mlx"
D3 = "speculative/drafters/eagle3"
TARGET_TYPES = ("gemma4", "glm_moe_dsa", "laguna", "lfm2", "minimax_m3_vl", "muse_glimmer", "nemotron_h", "qwen3_5")
# D3/config.py:8-33 TextConfig defaults
DEFAULTS = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 1, "num_attention_heads": 32,
            "num_key_value_heads": 32, "rms_norm_eps": 1e-6, "vocab_size": 32000, "rope_theta": 10000.0}


def read(ckpt: Checkpoint, target: Any = None) -> Reading:  # noqa: C901 - one walk, in the loader's order
    raw = ckpt.config_raw or {}
    r = Reading(NAME, VERSION, ckpt.layout)
    kind = raw.get("model_type") or raw.get("speculators_model_type")
    if ckpt.layout != SPECULATORS or kind != "eagle3":
        r.refusals.append(f"mlx-vlm 0.7.10 reads the speculators layout only (model_type or speculators_model_type "
                          f"eagle3, utils.py:198-231); model_type {kind!r} loads another model and its strict load "
                          "raises ValueError")
        r.layout_ok = False
        return r
    r.set("architecture", "Eagle3", f"{kind!r} -> mlx_vlm.speculative.drafters.eagle3 (utils.py:257-265)")
    tlc = reading.layer_fields(raw, True)
    where = "transformer_layer_config."
    for attr, key in (("hidden_size", "hidden_size"), ("intermediate_size", "intermediate_size"),
                      ("num_layers", "num_hidden_layers"), ("num_heads", "num_attention_heads"),
                      ("num_kv_heads", "num_key_value_heads"), ("vocab_size", "vocab_size")):
        v = tlc.get(key)
        r.set(attr, v if is_int(v) else DEFAULTS[key], f"config.json: {where}{key}" if is_int(v) else
              f"mlx-vlm default: {DEFAULTS[key]} ({D3}/config.py:8-33)", key=f"{where}{key}" if is_int(v) else None)
    hd = tlc.get("head_dim")
    r.set("head_dim", hd if is_int(hd) else r.hidden_size // r.num_heads if r.hidden_size and r.num_heads else None,
          f"config.json: {where}head_dim" if is_int(hd) else f"mlx-vlm default: hidden_size // heads ({D3}/config.py:"
          "28-29)")
    eps = tlc.get("rms_norm_eps")
    r.set("rms_norm_eps", float(eps) if positive(eps) else 1e-6, f"config.json: {where}rms_norm_eps" if positive(eps)
          else "mlx-vlm default: 1e-6")
    given = tlc.get("rope_parameters")
    params: dict = given if isinstance(given, dict) else {}
    theta = params.get("rope_theta", tlc.get("rope_theta"))
    r.set("rope_theta", float(theta) if positive(theta) else 10000.0, f"config.json: {where}rope_theta" if
          positive(theta) else "mlx-vlm default: 10000")
    r.set("rope_scaling", None, f"mlx-vlm builds nn.RoPE from the theta only ({D3}/eagle3.py:58-62): rope_scaling and "
          "the rope type are not read")
    r.set("hidden_act", "silu", f"mlx-vlm hard-codes SiLU ({D3}/eagle3.py:25): hidden_act is not read")
    r.set("max_position_embeddings", None, "mlx-vlm does not read max_position_embeddings")
    r.set("attention_bias", tlc.get("attention_bias") is True, f"config.json: {where}attention_bias (q/k/v and o)")
    r.set("o_bias", r.attention_bias, f"{D3}/eagle3.py:38-57: o_proj follows attention_bias")
    r.set("mlp_bias", False, f"mlx-vlm builds the MLP without bias ({D3}/eagle3.py:14-22)")
    r.set("fc_bias", False, f"mlx-vlm builds fc without bias ({D3}/eagle3.py:171)")
    r.set("qk_norm", False, "mlx-vlm's EAGLE-3 attention has no q/k norms")
    dv = raw.get("draft_vocab_size")
    r.set("draft_vocab_size", dv if is_int(dv) else 32000, "config.json: draft_vocab_size" if is_int(dv)
          else "mlx-vlm default: 32000")
    ht = raw.get("target_hidden_size")
    r.set("target_hidden_size", ht if is_int(ht) else r.hidden_size, "config.json: target_hidden_size" if is_int(ht)
          else "mlx-vlm default: hidden_size")
    r.set("norm_before_residual", raw.get("norm_before_residual") is True, "config.json: norm_before_residual "
          "(default false)")
    r.set("input_norm", raw.get("norm_before_fc") is True, "config.json: norm_before_fc (default false)")
    r.set("fc_norm", False, "mlx-vlm has no fc_norm (not read)")
    r.set("feedback", "prenorm", f"mlx-vlm feeds the pre-norm state back ({D3}/eagle3.py:267-271; norm_output is not "
          "read)")
    r.set("num_aux", 3, f"mlx-vlm: fc takes 3 x Ht ({D3}/eagle3.py:171)")
    tied = raw.get("tie_word_embeddings") is True
    r.set("lm_head_from_embed", tied and r.draft_vocab_size == r.vocab_size, "config.json: tie_word_embeddings "
          f"({D3}/eagle3.py:187-192)")
    reading.read_aux_ids(r, raw, (("eagle_aux_hidden_state_layer_ids",),),
                         f"mlx-vlm default [2, n//2, max(n-3, 0)] of the drafter's n layers ({D3}/config.py:66-71)")
    r.set("aux_convention", "vllm", f"mlx-vlm: id L is captured at layer max(L-1, 0) ({D3}/config.py:72-73)")
    ids = r.aux_layer_ids or _defaults(r.num_layers)
    if len({max(i - 1, 0) for i in ids}) != 3:
        r.refuse(f"ids {ids} capture {len({max(i - 1, 0) for i in ids})} distinct layers (mlx-vlm collects them as a "
                 f"set, {D3}/config.py:72-73) for an fc of 3 states: the first draft step fails",
                 at="eagle_aux_hidden_state_layer_ids")
    if target is not None and getattr(target, "model_type", None) not in (None, *TARGET_TYPES):
        r.refuse(f"target model_type {target.model_type!r}: mlx-vlm 0.7.10 serves EAGLE-3 only beside targets that "
                 f"capture hidden states and roll back their cache ({', '.join(TARGET_TYPES)}; "
                 "speculative/eagle3.py:366-370 raises RuntimeError)", at="--target-config")
    small = r.draft_vocab_size != r.vocab_size

    def accept(name: str, n) -> tuple[str | None, str]:
        if n.role == "t2d" or name.startswith("verifier_"):
            return None, f"dropped by sanitize ({D3}/eagle3.py:551-565)"
        if n.role == "input_norm.weight" and not r.input_norm:
            return None, f"dropped by sanitize without norm_before_fc ({D3}/eagle3.py:551-565)"
        if n.role == "lm_head.weight" and r.lm_head_from_embed:
            return None, f"dropped by sanitize: tied, the embedding is the head ({D3}/eagle3.py:551-565)"
        refused = ("refused: mlx-vlm's strict load raises ValueError: it has no parameter of that name "
                   "(utils.py:591-610, 699)")
        if n.role is None or n.prefixed or n.style == "midlayer" or (n.role == "d2t" and not small):
            return None, refused
        if n.role.endswith(".bias") and not (r.attention_bias and ".self_attn." in n.role):
            return None, refused
        if n.role.endswith(("q_norm.weight", "k_norm.weight")) or n.role.startswith("fc_norm."):
            return None, refused
        return n.role, ""

    reading.map_roles(r, ckpt, accept)
    reading.refuse_skipped(r)
    reading.finish(r, ckpt, "a ValueError at load (mlx-vlm's load is strict, utils.py:699)")
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
                                         if small else ""))
    return r


def _defaults(n: int) -> list[int]:
    return [2, n // 2, max(n - 3, 0)]


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
    NAME, VERSION, read, capture, ids_for,
    releases=(Release(VERSION, "2026-10-21"),),
    sources=(f"{D3}/config.py", f"{D3}/eagle3.py", "utils.py", "speculative/eagle3.py", "server/cli.py"),
    reads_ids="the top-level eagle_aux_hidden_state_layer_ids",
    ids_path=("eagle_aux_hidden_state_layer_ids",),
    cannot_compute=cannot_compute,
    default_rule=default_rule,
    package="mlx_vlm",
    launch=launching.mlx,
)
