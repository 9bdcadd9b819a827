"""SGLang 0.5.6's reading of an EAGLE-3 drafter (the version the AQ-MedAI drafter is served with).

Mirrors the 0.5.6 wheel from PyPI (files are ``sglang/srt/`` in it):
- ``srt/models/llama_eagle3.py``: one class, ``LlamaForCausalLMEagle3``, for flat configs; ``num_hidden_layers``
  other than 1 raises; parameters are ``model.midlayer.*``, ``model.fc``, ``model.norm``, ``model.embed_tokens``
  and ``lm_head``; a checkpoint name is used as is or with ``model.`` prepended, and any name that matches neither
  is **dropped silently** (so ``layers.0.*`` names load nothing, and ``model.lm_head.weight`` is lost); ``d2t`` becomes
  ``hot_token_id = d2t + arange``; ``t2d`` is ignored; q/k/v and the MLP are built without bias; there is no
  ``input_norm``, ``fc_norm`` or ``norm_before_residual`` (the residual is the un-normed fc output) and the state
  fed back to later steps is the pre-norm one; fc takes ``3 x hidden_size_in``, where ``hidden_size_in`` is
  ``target_hidden_size`` whenever the config has that attribute (a null breaks it), with a bias when the config says
  ``"bias": true`` (``:130-139``); with ``tie_word_embeddings``
  lm_head *is* the embedding (V rows) while logits are cut to ``draft_vocab_size``;
- ``srt/models/llama.py``: ``head_dim = getattr(config, "head_dim", hidden_size // heads)`` and
  ``rope_theta = getattr(config, "rope_theta", 10000)``: with the transformers 4.57.1 that 0.5.6 pins, a config
  that carries its theta only in ``rope_parameters`` runs with 10000;
- ``srt/model_executor/model_runner.py:540-552``: aux ids only from ``eagle_config``; every target class adds 1
  (``srt/models/llama.py:730-742``, ``deepseek_v2.py:4097-4101``, ``gpt_oss.py:1091-1103``) and captures the input of
  layer i for i < N only, so the last id that captures anything is N-2;
- ``srt/configs/model_config.py:286-311``: a served context (``--context-length``, else the target's) longer than
  the context derived from the draft's config (``srt/utils/hf_transformers_utils.py:327-353``) stops the server
  (ValueError) unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``: ``read_context`` and ``context_refusal``, which
  engine.serving reports (the reading itself does not refuse for it).

What 0.5.23 still reads the same way is here, and ``sglang_0_5_23`` imports it: ``flat_reading``, ``read_llama_layer``,
``read_biases`` (each release's sources side by side), ``read_fc_input_and_embedding``, ``read_context`` and
``context_refusal``.
"""

from __future__ import annotations

import math
from typing import Any

from ..drafter.checkpoint import Checkpoint
from ..drafter.config_values import class_defaults
from ..drafter.expected import fmt_shape
from ..drafter.layout import FLAT, MLA_ARCHITECTURES, SPECULATORS, eagle3_class, str_list
from . import launch as launching
from . import reading
from .profile import Capture, Limit, Profile, Release, Target, output_of
from .reading import Reading, is_int

VERSION = "0.5.6"
NAME = "sglang"
# What read_biases reads, and where each release builds it: field -> (0.5.6's source, 0.5.23's). llama_eagle3.py
# rebuilds q/k/v; o_proj stays llama.py's.
LLAMA_LAYER_SOURCES = {
    "qk_norm": ("SGLang 0.5.6 builds Llama layers only",
                "SGLang 0.5.23 builds Llama layers for LlamaForCausalLMEagle3 (no q/k norms)"),
    "attention_bias": ("SGLang 0.5.6 builds q/k/v without bias", "llama_eagle3.py:66-75 rebuilds q/k/v without bias"),
    "o_bias": ("srt/models/llama.py: o_proj bias = attention_bias",
               "srt/models/llama.py:216-222: o_proj bias = attention_bias or bias"),
    "mlp_bias": ("SGLang 0.5.6 builds the MLP without bias", "srt/models/llama.py:98-110: the MLP has no bias"),
    "fc_bias": ("llama_eagle3.py:135-139: fc bias = config bias", "llama_eagle3.py:163-167: fc bias = config bias"),
    "norm_before_residual": ("SGLang 0.5.6: the residual is the un-normed fc output (no such flag)",
                             "SGLang 0.5.23: the residual is the un-normed fc output (no such flag)"),
}
RELEASES = ("0.5.6", "0.5.23")  # the order of each LLAMA_LAYER_SOURCES pair


def flat_reading(ckpt: Checkpoint, version: str, why_not_speculators: str) -> tuple[Reading, list[str]]:
    """The start every SGLang release's reading shares: SGLang reads flat configs only (``speculators_config`` and
    ``transformer_layer_config`` appear nowhere in ``srt/``), and builds the class ``architectures`` names. Returns
    the reading (``layout_ok`` False for a speculators config) and the architectures."""
    r = Reading(NAME, version, ckpt.layout)
    if ckpt.layout == SPECULATORS:
        r.refusals.append(why_not_speculators)
        r.layout_ok = False
        return r, []
    archs = str_list((ckpt.config_raw or {}).get("architectures")) or []
    r.set("architecture", archs[0] if archs else None, key="architectures")
    return r, archs


# One flat walk, in the order SGLang's own loader reads the config (its file:line sources beside each step), so
# that it can be held to the engine's source line by line: not split for the complexity count.
def simple_yarn(r: Reading, cite: str) -> None:
    """A YaRN rope_scaling as SGLang's YaRNScalingRotaryEmbedding reads it (``cite``): factor, extrapolation_factor,
    attn_factor, beta_fast and beta_slow only, scaled by 0.1 ln(factor) + 1 (mscale and mscale_all_dim ignored)."""
    scaling = dict(r.rope_scaling or {})
    factor = float(scaling.get("factor", 1.0))
    mscale = (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0) * float(scaling.get("attn_factor", 1))
    kept = {k: v for k, v in scaling.items() if k in ("rope_type", "factor", "original_max_position_embeddings",
                                                      "beta_fast", "beta_slow")}
    r.set("rope_scaling", {**kept, "attention_factor": mscale},
          f"config.json: rope_scaling (as SGLang's YaRNScalingRotaryEmbedding reads it, {cite})")


def read(ckpt: Checkpoint, target: Any = None) -> Reading:  # noqa: C901
    r, archs = flat_reading(ckpt, VERSION, "SGLang 0.5.6 reads flat configs only (LlamaForCausalLMEagle3); a "
                            "speculators config (Eagle3DraftModel, nested transformer_layer_config) is not loadable")
    if not r.layout_ok:
        return r
    if "LlamaForCausalLMEagle3" not in archs:
        why = (f"SGLang 0.5.6's EAGLE-3 drafter class is LlamaForCausalLMEagle3; architectures {archs} "
               "builds another model (or none) from the drafter's weights")
        if any(eagle3_class(a) in MLA_ARCHITECTURES for a in archs):
            why += (": SGLang 0.5.6 has no MLA drafter class (the 0.5.6 wheel has no "
                    "srt/models/kimi_k25_eagle3.py and registers Eagle3DeepseekV2ForCausalLM nowhere; "
                    "0.5.23 added it)")
        r.refuse_class(why)
    raw = ckpt.config_raw or {}
    read_llama_layer(r, raw, legacy_rope=True, silu_cite="")
    window(r)
    if r.rope_scaling and r.rope_scaling.get("rope_type") == "yarn":
        if "original_max_position_embeddings" not in r.rope_scaling:
            r.refusals.append("rope_scaling yarn without original_max_position_embeddings: SGLang raises KeyError")
        simple_yarn(r, "srt/layers/rotary_embedding.py get_rope")
    read_context(r, raw)  # the context the served one must not exceed (engine.serving: context_refusal)
    if r.num_layers != 1:
        r.refusals.append(f"SGLang 0.5.6 raises \"EAGLE3 currently only supports 1 layer\" "
                          f"(num_hidden_layers {r.num_layers})")
    o_bias = read_biases(r, raw)
    r.set("input_norm", False, "SGLang 0.5.6 has no norm_before_fc")
    r.set("fc_norm", False, "SGLang 0.5.6 has no fc_norm")
    r.set("feedback", "prenorm", "SGLang 0.5.6 feeds the pre-norm state back (no norm_output)")
    r.set("final_norm", True, "SGLang applies the final norm before lm_head")
    r.set("num_aux", 3, "SGLang 0.5.6: fc always takes 3 aux states")
    # srt/model_executor/model_runner.py reads eagle_config["eagle_aux_hidden_state_layer_ids"] only.
    reading.read_aux_ids(r, raw, (("eagle_config", "eagle_aux_hidden_state_layer_ids"),),
                         "SGLang default layers (no ids in eagle_config; a top-level list is not read)")
    r.set("aux_convention", "sglang", "SGLang: an explicit id X is the output of layer X (it adds 1 internally)")

    # speculative/eagle_worker.py: set_embed(target's embedding) replaces the draft's, unless the draft declares a
    # target_hidden_size different from hidden_size (models/llama.py set_embed).
    tied, own_embed = read_fc_input_and_embedding(r, raw, fc_cite="")
    reading.read_stated(r, raw, "draft_vocab_size", r.vocab_size,
                        "SGLang default: vocab_size (lm_head from the target)")

    def accept(name: str, n) -> tuple[str | None, str]:
        if "d2t" in name:
            return "d2t", ""
        if "t2d" in name:
            return None, "SGLang ignores t2d"
        if n.role is None:
            return None, "dropped silently: SGLang has no such parameter"
        if n.style == "layers":
            return None, "dropped silently: SGLang 0.5.6 reads only midlayer.* names"
        if n.prefixed and n.role == "lm_head.weight":
            return None, "dropped silently: SGLang looks for lm_head.weight or model.model.lm_head.weight"
        if n.role.endswith("o_proj.bias") and o_bias:
            return n.role, ""
        if n.role == "fc.bias" and r.fc_bias:
            return n.role, ""
        if n.role.endswith(".bias") or n.role.endswith(("q_norm.weight", "k_norm.weight")):
            return None, "dropped silently: SGLang 0.5.6 builds no such parameter"
        if n.role == "embed_tokens.weight" and not own_embed:
            return None, "replaced by the target's embedding (eagle_worker.py set_embed)"
        if n.role in ("input_norm.weight",) or n.role.startswith("fc_norm."):
            return None, "dropped silently: SGLang 0.5.6 has no norm before fc"
        if n.role == "lm_head.weight" and tied:
            return None, "dropped: with tie_word_embeddings lm_head is the embedding"
        return n.role, ""

    reading.map_roles(r, ckpt, accept)
    check_replaced_embedding(r, ckpt, [n for n, why in r.ignored.items() if why.startswith("replaced by the target")])
    reading.finish(r, ckpt, "uninitialised memory (SGLang drops unknown names silently)", narrows=True)
    if tied and not own_embed:
        r.unfilled["lm_head.weight"] = "the target's embedding (tied, after set_embed)"
    if not is_int(raw.get("draft_vocab_size")) and not tied:
        r.unfilled["lm_head.weight"] = "the target's lm_head (load_lm_head_from_target: no draft_vocab_size)"
    return r


def window(r: Reading) -> None:
    """SGLang 0.5.6 builds the drafter's attention without a window: srt/models/llama_eagle3.py and llama.py read no
    layer_types or sliding_window, and its server_args.py has no --speculative-draft-window-size (that came later:
    0.5.14's llama_eagle3.py:259-271)."""
    reading.no_window(r, "SGLang 0.5.6 builds full attention: srt/models/llama_eagle3.py and llama.py read no "
                      "layer_types or sliding_window, server_args.py has no --speculative-draft-window-size")


def read_llama_layer(r: Reading, raw: dict, legacy_rope: bool, silu_cite: str) -> None:
    """SGLang's Llama layer (srt/models/llama.py, the same in 0.5.6 and 0.5.23): head_dim and max_position_embeddings
    from the config object, so its model_type class's defaults; rope as the pinned transformers reads it
    (``legacy_rope``: 4.57, as 0.5.6 pins); LlamaMLP raises for any activation but silu (``silu_cite``: where)."""
    hd, max_pos, cls = class_defaults(reading.model_type_of(r, raw, "llama"))
    reading.read_layer(r, raw, "", (hd, cls), max_pos, legacy_rope=legacy_rope)
    if r.hidden_act != "silu":
        r.refusals.append(f"SGLang's LlamaMLP raises for hidden_act {r.hidden_act!r} (silu only{silu_cite})")


def read_biases(r: Reading, raw: dict) -> bool:
    """What both releases' llama_eagle3.py builds with or without a bias (each field's source as ``r.version`` says
    it, LLAMA_LAYER_SOURCES): q/k/v and the MLP never, o_proj with attention_bias or bias (llama.py), fc with the
    config's bias; no q/k norms and no norm_before_residual. Returns o_proj's bias."""
    release = RELEASES.index(r.version)
    why = {name: sources[release] for name, sources in LLAMA_LAYER_SOURCES.items()}
    o_bias = raw.get("attention_bias") is True or raw.get("bias") is True
    r.set("qk_norm", False, why["qk_norm"])
    r.set("attention_bias", False, why["attention_bias"])
    r.set("o_bias", o_bias, why["o_bias"])
    r.set("mlp_bias", False, why["mlp_bias"])
    r.set("fc_bias", raw.get("bias") is True, why["fc_bias"])
    r.set("norm_before_residual", False, why["norm_before_residual"])
    return o_bias


def read_fc_input_and_embedding(r: Reading, raw: dict, fc_cite: str) -> tuple[bool, bool]:
    """fc's input width and the embeddings, the same in both releases: fc takes ``target_hidden_size`` whenever the
    config has that attribute (a value that is not a size breaks it; ``fc_cite``: where); a tied lm_head is the
    embedding; the worker's set_embed replaces the draft's embedding with the target's unless the draft states a
    target_hidden_size other than its hidden_size. Returns (tied, the draft keeps its own embedding)."""
    if "target_hidden_size" in raw:
        ht = raw["target_hidden_size"]
        if not is_int(ht):
            r.refuse(f"config.json sets target_hidden_size to {ht!r}: SGLang builds fc from it and fails{fc_cite}",
                     at="target_hidden_size")
        r.set("target_hidden_size", ht if is_int(ht) else r.hidden_size, key="target_hidden_size")
    else:
        r.set("target_hidden_size", r.hidden_size, "SGLang default: hidden_size")
    tied = raw.get("tie_word_embeddings") is True
    r.set("lm_head_from_embed", tied, "config.json: tie_word_embeddings" if tied else "untied")
    return tied, "target_hidden_size" in raw and raw["target_hidden_size"] != r.hidden_size


def capture(ids: list[int], target: Target | None) -> Capture:
    """Every target class adds 1 (srt/models/llama.py:730-742; deepseek_v2.py:4097-4101; gpt_oss.py:1091-1103)
    and captures the input of layer i only for i < N: id X is the output of layer X, the last useful id N-2."""
    n = target.num_layers if target else None
    return Capture(output_of(sorted(set(ids))), "SGLang 0.5.6: id X + 1 on every target (srt/models/llama.py:"
                   "740-742): the output of layer X", n - 2 if n else None)


def ids_for(layers: tuple[int, ...], target: Target | None) -> list[int] | None:
    return list(layers)


# Where each release derives and checks a drafter's context: field -> (0.5.6's source, 0.5.23's).
CONTEXT_SOURCES = {
    # ModelConfig._derive_context_length: a context_length above the derived one raises ValueError, unless
    # SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, which sets the draft's max_position_embeddings to it
    "check": ("srt/configs/model_config.py:286-311", "srt/configs/model_config.py:1291-1316"),
    # get_context_length: the first of CONTEXT_LENGTH_KEYS the config has, times rope_scaling's factor unless the
    # dict holds original_max_position_embeddings or is llama3
    "derive": ("srt/utils/hf_transformers_utils.py:327-353", "srt/utils/hf_transformers/common.py:668-695"),
    # the draft worker is built with the target's context_len
    "handoff": ("srt/speculative/eagle_worker.py:100-101", "srt/speculative/eagle_worker_v2.py:222-232, "
                "managers/tp_worker.py:465-482"),
    # the server's context: --context-length, else the target's derived one
    "flag": ("srt/server_args.py:2117-2122", "srt/arg_groups/fields/model.py:110-117"),
}
CONTEXT_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")


# VocabParallelEmbedding.weight_loader: asserts vocab_size rows, then copies into the (vocab_size, hidden_size)
# parameter; the embedding the worker later replaces with the target's (set_embed) is loaded through it all the same
EMBED_LOADER = ("srt/layers/vocab_parallel_embedding.py:446-460", "srt/layers/vocab_parallel_embedding.py:436-447")


def check_replaced_embedding(r: Reading, ckpt: Checkpoint, names: list[str]) -> None:
    """Refuse an embedding of another shape than (vocab_size, hidden_size) among ``names`` (the tensors set_embed
    replaces after load): the loader raises on it first (AssertionError for the rows, a copy error for the width)."""
    want = (r.vocab_size, r.hidden_size)
    if None in want:
        return
    for name in names:
        shape = tuple(ckpt.tensors[name].shape)
        if shape != want:
            r.refuse(f"{name}: shape {fmt_shape(shape)}, SGLang {r.version} builds the embedding as "
                     f"{fmt_shape(want)} (vocab_size, hidden_size) and its weight loader raises "
                     f"({EMBED_LOADER[RELEASES.index(r.version)]}: AssertionError on the rows) before the worker "
                     "replaces it with the target's", at=name)


def read_context(r: Reading, raw: dict) -> None:
    """The drafter's context as SGLang derives it (get_context_length, the same code in 0.5.6 and 0.5.23): the first
    of CONTEXT_KEYS the config holds, times the rope factor, which does not apply when the rope dict holds
    original_max_position_embeddings or is llama3. The rope dict is the reading's, as the release's transformers
    leaves it: 0.5.23's transformers 5.19 fills original_max_position_embeddings into llama3 / yarn / longrope
    parameters (modeling_rope_utils.py:812-820), so only linear / dynamic factors count there; 0.5.6's 4.57.1 does
    not. Call after the rope and max_position_embeddings are read."""
    key = next((k for k in CONTEXT_KEYS[:-1] if is_int(raw.get(k)) and raw[k] > 0), "max_position_embeddings")
    base = raw[key] if key != "max_position_embeddings" else r.max_position_embeddings
    if not isinstance(base, int) or isinstance(base, bool):
        return
    factor = _context_factor(r)
    how = f"{key} {base}" + (f" x rope factor {factor:g}" if factor != 1 else "")
    where = f"config.json: {key}" if key in raw else r.sources.get("max_position_embeddings", "?")
    r.set("context_length", int(factor * base), f"{how} ({where})", key=key)


def _context_factor(r: Reading) -> float:
    """get_context_length's rope factor: rope_scaling's factor, 1 when the dict holds original_max_position_embeddings
    or is llama3 (or states no usable factor)."""
    scaling = r.rope_scaling or {}
    factor = scaling.get("factor", 1)
    if "original_max_position_embeddings" in scaling or scaling.get("rope_type") == "llama3" or \
            not isinstance(factor, (int, float)) or isinstance(factor, bool) or not 0 < factor < math.inf:
        return 1
    return factor


def context_refusal(version: str):
    """SGLang refuses to start when the context it serves exceeds the drafter's derived context (the same in 0.5.6 and
    0.5.23; ``version`` picks CONTEXT_SOURCES' citations). The served context is ``--context-length`` (the gate's
    --max-model-len stands for it), else the target's own (its max_position_embeddings: the target's rope factor, which
    get_context_length would also apply, is not read here). The config edit that lifts it: the key the context is
    derived from, raised so that the derived context covers the served one (what SGLANG_ALLOW_OVERWRITE_LONGER_
    CONTEXT_LEN=1 does to the draft's max_position_embeddings at startup)."""
    cite = {name: sources[RELEASES.index(version)] for name, sources in CONTEXT_SOURCES.items()}

    def serving(r: Reading, want: int | None, target: Any = None) -> Limit | None:
        context = want or getattr(target, "max_position_embeddings", None)
        have = r.context_length
        if not context or not have or have >= context:
            return None
        served = f"--max-model-len {context} (as SGLang's --context-length)" if want else \
            f"the target's context {context}"
        key = r.keys.get("context_length", "max_position_embeddings")
        factor = _context_factor(r)
        needed = math.ceil(context / factor)
        while int(factor * needed) < context:  # get_context_length truncates factor x value
            needed += 1
        return Limit(
            "error", f"refuses to start: {served} exceeds the context {have} it derives from the drafter's config "
            f"(ValueError in {cite['check']})",
            f"the server's context is --context-length, else the target's ({cite['flag']}); the draft worker builds "
            f"the drafter's model config with it ({cite['handoff']}), which raises when it exceeds the context "
            f"get_context_length derives from the drafter's config ({cite['derive']}), unless "
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, which instead sets the draft's max_position_embeddings to "
            "the served context",
            f"state \"{key}\": {needed} (the override SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 makes at startup), "
            f"or start SGLang with --context-length {have} or less, so that the whole server serves at most {have} "
            f"tokens (check that with --max-model-len {have})",
            key=key, expected=f"a context of {context} or more", found=f"{have}: {r.sources.get('context_length')}",
            patch=[{"op": "add", "path": f"/{key}", "value": needed}], refuses=True)

    return serving


def cannot_compute(trained: Reading) -> list[str]:
    """What SGLang 0.5.6 has no parameter or flag for (llama_eagle3.py builds one Llama layer, no norm flags)."""
    return [name for name, on in (("more than one layer", trained.num_layers != 1),
                                  ("attention or MLP biases", trained.attention_bias or trained.mlp_bias),
                                  ("norm_before_fc", trained.input_norm), ("fc_norm", trained.fc_norm),
                                  ("norm_before_residual", trained.norm_before_residual),
                                  ("norm_output (normed feedback)", trained.feedback == "normed"),
                                  ("Qwen3 q/k norms", trained.qk_norm),
                                  (f"{trained.num_aux} aux states", trained.num_aux != 3)) if on]


PROFILE = Profile(
    NAME, VERSION, read, capture, ids_for,
    releases=(Release(VERSION, "2025-12-03"),),
    narrows_at="srt/layers/linear.py:528, 589-644 (narrow, no size check)",
    sources=("srt/models/llama_eagle3.py", "srt/models/llama.py", "srt/model_executor/model_runner.py",
             "srt/speculative/eagle_worker.py", "srt/configs/model_config.py"),
    reads_ids="eagle_config.eagle_aux_hidden_state_layer_ids",
    ids_path=("eagle_config", "eagle_aux_hidden_state_layer_ids"),
    serving=context_refusal(VERSION),
    cannot_compute=cannot_compute,
    launch=launching.sglang,
    converts_to=FLAT,
)
