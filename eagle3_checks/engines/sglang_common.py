"""What SGLang's releases read alike, as steps each release record takes with its own citations (:class:`Cites`):
flat configs only, the Llama layer (srt/models/llama.py), the biases its llama_eagle3.py builds, fc's input and the
embedding the worker replaces, the context it derives for the drafter and refuses to serve beyond. Not a release:
the release records (``sglang_0_5_6``, ``sglang_0_5_23``) import this, never each other."""

from __future__ import annotations

import math
from typing import Any

from ..drafter.expected import fmt_shape
from ..drafter.layout import str_list
from ..fast_dataclass import dataclass
from .profile import Limit
from .reading import Reading, is_int
from .record import Call, Fact, Layer, Refuse, Value, Walk, const, fmt, is_true, model_type_of

NAME = "sglang"


@dataclass(frozen=True)
class Cites:
    """Where one SGLang release builds what these steps read (its files and lines)."""

    qk_norm: str
    attention_bias: str
    o_bias: str
    mlp_bias: str
    fc_bias: str
    norm_before_residual: str
    # ModelConfig._derive_context_length: a context_length above the derived one raises ValueError, unless
    # SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, which sets the draft's max_position_embeddings to it
    context_check: str
    # get_context_length: the first of CONTEXT_KEYS the config has, times rope_scaling's factor unless the dict holds
    # original_max_position_embeddings or is llama3
    context_derive: str
    # the draft worker is built with the target's context_len
    context_handoff: str
    # the server's context: --context-length, else the target's derived one
    context_flag: str
    # VocabParallelEmbedding.weight_loader: asserts vocab_size rows, then copies into the (vocab_size, hidden_size)
    # parameter; the embedding the worker later replaces with the target's (set_embed) is loaded through it the same
    embed_loader: str


CONTEXT_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")


def _architecture(w: Walk) -> None:
    """SGLang builds the class ``architectures`` names (its first), leaving the names as the fact ``archs``."""
    archs = str_list(w.raw.get("architectures")) or []
    w.facts["archs"] = archs
    w.r.set("architecture", archs[0] if archs else None, key="architectures")


# SGLang reads flat configs only (speculators_config and transformer_layer_config appear nowhere in srt/): the
# release's Stop says so; then the class architectures names.
ARCHITECTURE = Call(_architecture)


def llama_layer(legacy_rope: bool, silu_cite: str) -> tuple:
    """SGLang's Llama layer (srt/models/llama.py, the same in 0.5.6 and 0.5.23): head_dim and max_position_embeddings
    from the config object, so its model_type class's defaults; rope as the pinned transformers reads it
    (``legacy_rope``: 4.57, as 0.5.6 pins); LlamaMLP raises for any activation but silu (``silu_cite``: where)."""
    return (model_type_of("llama"), Layer(legacy_rope=legacy_rope),
            Refuse(lambda w: w.r.hidden_act != "silu",
                   fmt("SGLang's LlamaMLP raises for hidden_act {r.hidden_act!r} (silu only" + silu_cite + ")")))


def biases(cite: Cites) -> tuple:
    """What llama_eagle3.py builds with or without a bias: q/k/v and the MLP never, o_proj with attention_bias or
    bias (llama.py), fc with the config's bias; no q/k norms and no norm_before_residual."""
    return (const("qk_norm", False, cite.qk_norm),
            const("attention_bias", False, cite.attention_bias),
            Value("o_bias", (), lambda w: w.raw.get("attention_bias") is True or w.raw.get("bias") is True,
                  cite.o_bias),
            const("mlp_bias", False, cite.mlp_bias),
            Value("fc_bias", ("bias",), False, cite.fc_bias, take=is_true, says=cite.fc_bias),
            const("norm_before_residual", False, cite.norm_before_residual))


def fc_input_and_embedding(fc_cite: str) -> tuple:
    """fc's input width and the embeddings, the same in both releases: fc takes ``target_hidden_size`` whenever the
    config has that attribute (a value that is not a size breaks it; ``fc_cite``: where); a tied lm_head is the
    embedding; the worker's set_embed replaces the draft's embedding with the target's unless the draft states a
    target_hidden_size other than its hidden_size. Leaves the facts ``tied`` and ``own_embed``."""
    def target_hidden_size(w: Walk) -> None:
        r, raw = w.r, w.raw
        if "target_hidden_size" in raw:
            ht = raw["target_hidden_size"]
            if not is_int(ht):
                r.refuse(f"config.json sets target_hidden_size to {ht!r}: SGLang builds fc from it and fails{fc_cite}",
                         at="target_hidden_size")
            r.set("target_hidden_size", ht if is_int(ht) else r.hidden_size, key="target_hidden_size")
        else:
            r.set("target_hidden_size", r.hidden_size, "SGLang default: hidden_size")

    return (Call(target_hidden_size),
            Fact("tied", lambda w: w.raw.get("tie_word_embeddings") is True),
            Value("lm_head_from_embed", (), lambda w: w.facts["tied"],
                  lambda w: "config.json: tie_word_embeddings" if w.facts["tied"] else "untied"),
            Fact("own_embed", _own_embed))


def _own_embed(w: Walk) -> bool:
    return "target_hidden_size" in w.raw and w.raw["target_hidden_size"] != w.r.hidden_size


def replaced_embedding(cite: Cites, names: list[str], w: Walk) -> None:
    """Refuse an embedding of another shape than (vocab_size, hidden_size) among ``names`` (the tensors set_embed
    replaces after load): the loader raises on it first (AssertionError for the rows, a copy error for the width)."""
    r = w.r
    want = (r.vocab_size, r.hidden_size)
    if None in want:
        return
    for name in names:
        shape = tuple(w.ckpt.tensors[name].shape)
        if shape != want:
            r.refuse(f"{name}: shape {fmt_shape(shape)}, SGLang {w.release} builds the embedding as "
                     f"{fmt_shape(want)} (vocab_size, hidden_size) and its weight loader raises "
                     f"({w.lines}{cite.embed_loader}: AssertionError on the rows) before the worker replaces it with "
                     "the target's", at=name)


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


def is_yarn(w: Walk) -> bool:
    return (w.r.rope_scaling or {}).get("rope_type") == "yarn"


def read_context(w: Walk) -> None:
    """The drafter's context as SGLang derives it (get_context_length, the same code in 0.5.6 and 0.5.23): the first
    of CONTEXT_KEYS the config holds, times the rope factor, which does not apply when the rope dict holds
    original_max_position_embeddings or is llama3. The rope dict is the reading's, as the release's transformers
    leaves it: 0.5.23's transformers 5.19 fills original_max_position_embeddings into llama3 / yarn / longrope
    parameters (modeling_rope_utils.py:812-820), so only linear / dynamic factors count there; 0.5.6's 4.57.1 does
    not. Runs after the rope and max_position_embeddings are read; engine.serving's verdict (:func:`context_refusal`)
    compares the served context with it, the reading does not refuse for it."""
    r, raw = w.r, w.raw
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


def context_refusal(cite: Cites):
    """SGLang refuses to start when the context it serves exceeds the drafter's derived context (the same in 0.5.6 and
    0.5.23; ``cite``: the release's files). The served context is ``--context-length`` (the gate's --max-model-len
    stands for it), else the target's own (its max_position_embeddings: the target's rope factor, which
    get_context_length would also apply, is not read here). The config edit that lifts it: the key the context is
    derived from, raised so that the derived context covers the served one (what SGLANG_ALLOW_OVERWRITE_LONGER_
    CONTEXT_LEN=1 does to the draft's max_position_embeddings at startup)."""

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
            f"(ValueError in {cite.context_check})",
            f"the server's context is --context-length, else the target's ({cite.context_flag}); the draft worker "
            f"builds the drafter's model config with it ({cite.context_handoff}), which raises when it exceeds the "
            f"context get_context_length derives from the drafter's config ({cite.context_derive}), unless "
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, which instead sets the draft's max_position_embeddings to "
            "the served context",
            f"state \"{key}\": {needed} (the override SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 makes at startup), "
            f"or start SGLang with --context-length {have} or less, so that the whole server serves at most {have} "
            f"tokens (check that with --max-model-len {have})",
            key=key, expected=f"a context of {context} or more", found=f"{have}: {r.sources.get('context_length')}",
            patch=[{"op": "add", "path": f"/{key}", "value": needed}], refuses=True)

    return serving
