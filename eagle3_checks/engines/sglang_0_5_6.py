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

What 0.5.23 still reads the same way is in ``sglang_common``, each step taking this release's citations
(:data:`CITES`).
"""

from __future__ import annotations

from ..drafter.layout import FLAT, MLA_ARCHITECTURES, SPECULATORS, eagle3_class
from . import launch as launching
from . import sglang_common as sglang
from .profile import Capture, Profile, Release, Target, output_of
from .reading import Reading, is_int
from .record import (
    Call,
    Ids,
    Refuse,
    Rule,
    Stop,
    Tensors,
    Walk,
    all_of,
    also,
    any_of,
    const,
    fact_is,
    layers_style,
    layout_is,
    name_has,
    prefixed,
    read_as,
    reading_of,
    role_ends,
    role_is,
    role_starts,
    stated,
    unknown,
)

VERSION = "0.5.6"
NAME = sglang.NAME
CITES = sglang.Cites(
    qk_norm="SGLang 0.5.6 builds Llama layers only",
    attention_bias="SGLang 0.5.6 builds q/k/v without bias",
    o_bias="srt/models/llama.py: o_proj bias = attention_bias",
    mlp_bias="SGLang 0.5.6 builds the MLP without bias",
    fc_bias="llama_eagle3.py:135-139: fc bias = config bias",
    norm_before_residual="SGLang 0.5.6: the residual is the un-normed fc output (no such flag)",
    context_check="srt/configs/model_config.py:286-311",
    context_derive="srt/utils/hf_transformers_utils.py:327-353",
    context_handoff="srt/speculative/eagle_worker.py:100-101",
    context_flag="srt/server_args.py:2117-2122",
    embed_loader="srt/layers/vocab_parallel_embedding.py:446-460",
)
REPLACED = "replaced by the target's embedding (eagle_worker.py set_embed)"


def _no_class(w: Walk) -> str:
    archs = w.facts["archs"]
    why = (f"SGLang 0.5.6's EAGLE-3 drafter class is LlamaForCausalLMEagle3; architectures {archs} "
           "builds another model (or none) from the drafter's weights")
    if any(eagle3_class(a) in MLA_ARCHITECTURES for a in archs):
        why += (": SGLang 0.5.6 has no MLA drafter class (the 0.5.6 wheel has no "
                "srt/models/kimi_k25_eagle3.py and registers Eagle3DeepseekV2ForCausalLM nowhere; "
                "0.5.23 added it)")
    return why


def _yarn(w: Walk) -> None:
    """srt/layers/rotary_embedding.py get_rope: YaRN needs original_max_position_embeddings (KeyError without it)."""
    if not sglang.is_yarn(w):
        return
    if "original_max_position_embeddings" not in (w.r.rope_scaling or {}):
        w.r.refusals.append("rope_scaling yarn without original_max_position_embeddings: SGLang raises KeyError")
    sglang.simple_yarn(w.r, "srt/layers/rotary_embedding.py get_rope")


def _loaded(w: Walk) -> None:
    """set_embed replaces the drafter's embedding after load; its loader still checks the shape first."""
    sglang.replaced_embedding(CITES, [n for n, why in w.r.ignored.items() if why.startswith("replaced by the target")],
                              w)


def _unfilled_heads(w: Walk) -> None:
    """A tied lm_head is the target's embedding, no draft_vocab_size the target's lm_head."""
    r = w.r
    if w.facts["tied"] and not w.facts["own_embed"]:
        r.unfilled["lm_head.weight"] = "the target's embedding (tied, after set_embed)"
    if not is_int(w.raw.get("draft_vocab_size")) and not w.facts["tied"]:
        r.unfilled["lm_head.weight"] = "the target's lm_head (load_lm_head_from_target: no draft_vocab_size)"


_NO_PARAMETER = "dropped silently: SGLang 0.5.6 builds no such parameter"

# One walk, in the order SGLang 0.5.6's loader reads the config (srt/models/llama_eagle3.py, llama.py), then its
# load_weights: a name is used as is or with model. prepended, any other is dropped silently.
STEPS = (
    Stop(layout_is(SPECULATORS), "SGLang 0.5.6 reads flat configs only (LlamaForCausalLMEagle3); a speculators "
         "config (Eagle3DraftModel, nested transformer_layer_config) is not loadable"),
    sglang.ARCHITECTURE,
    Refuse(lambda w: "LlamaForCausalLMEagle3" not in w.facts["archs"], _no_class, architecture=True),
    *sglang.llama_layer(legacy_rope=True, silu_cite=""),
    Call(_yarn),
    Call(sglang.read_context),  # the context the served one must not exceed (engine.serving: context_refusal)
    Refuse(lambda w: w.r.num_layers != 1, lambda w: f"SGLang 0.5.6 raises \"EAGLE3 currently only supports 1 layer\" "
           f"(num_hidden_layers {w.r.num_layers})"),
    *sglang.biases(CITES),
    const("input_norm", False, "SGLang 0.5.6 has no norm_before_fc"),
    const("fc_norm", False, "SGLang 0.5.6 has no fc_norm"),
    const("feedback", "prenorm", "SGLang 0.5.6 feeds the pre-norm state back (no norm_output)"),
    const("final_norm", True, "SGLang applies the final norm before lm_head"),
    const("num_aux", 3, "SGLang 0.5.6: fc always takes 3 aux states"),
    # srt/model_executor/model_runner.py reads eagle_config["eagle_aux_hidden_state_layer_ids"] only.
    Ids(("eagle_config.eagle_aux_hidden_state_layer_ids",),
        "SGLang default layers (no ids in eagle_config; a top-level list is not read)"),
    const("aux_convention", "sglang", "SGLang: an explicit id X is the output of layer X (it adds 1 internally)"),
    # speculative/eagle_worker.py: set_embed(target's embedding) replaces the draft's, unless the draft declares a
    # target_hidden_size different from hidden_size (models/llama.py set_embed).
    *sglang.fc_input_and_embedding(""),
    stated("draft_vocab_size", reading_of("vocab_size"), "SGLang default: vocab_size (lm_head from the target)"),
    Tensors((
        Rule(name_has("d2t"), load=True, role=lambda w, name, n: "d2t"),
        Rule(name_has("t2d"), "SGLang ignores t2d"),
        Rule(unknown, "dropped silently: SGLang has no such parameter"),
        Rule(layers_style, "dropped silently: SGLang 0.5.6 reads only midlayer.* names"),
        Rule(all_of(prefixed, role_is("lm_head.weight")),
             "dropped silently: SGLang looks for lm_head.weight or model.model.lm_head.weight"),
        Rule(all_of(role_ends("o_proj.bias"), also(read_as("o_bias"))), load=True),
        Rule(all_of(role_is("fc.bias"), also(read_as("fc_bias"))), load=True),
        Rule(role_ends(".bias", "q_norm.weight", "k_norm.weight"), _NO_PARAMETER),
        Rule(all_of(role_is("embed_tokens.weight"), also(lambda w: not w.facts["own_embed"])), REPLACED),
        Rule(any_of(role_is("input_norm.weight"), role_starts("fc_norm.")),
             "dropped silently: SGLang 0.5.6 has no norm before fc"),
        Rule(all_of(role_is("lm_head.weight"), also(fact_is("tied"))),
             "dropped: with tie_word_embeddings lm_head is the embedding"),
    ), "uninitialised memory (SGLang drops unknown names silently)", narrows=True, loaded=_loaded),
    Call(_unfilled_heads),
)


def capture(ids: list[int], target: Target | None) -> Capture:
    """Every target class adds 1 (srt/models/llama.py:730-742; deepseek_v2.py:4097-4101; gpt_oss.py:1091-1103)
    and captures the input of layer i only for i < N: id X is the output of layer X, the last useful id N-2."""
    n = target.num_layers if target else None
    return Capture(output_of(sorted(set(ids))), "SGLang 0.5.6: id X + 1 on every target (srt/models/llama.py:"
                   "740-742): the output of layer X", n - 2 if n else None)


def ids_for(layers: tuple[int, ...], target: Target | None) -> list[int] | None:
    return list(layers)


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
    NAME, VERSION, STEPS, capture, ids_for,
    module=__name__,
    releases=(Release(VERSION, "2025-12-03"),),
    narrows_at="srt/layers/linear.py:528, 589-644 (narrow, no size check)",
    sources=("srt/models/llama_eagle3.py", "srt/models/llama.py", "srt/model_executor/model_runner.py",
             "srt/speculative/eagle_worker.py", "srt/configs/model_config.py"),
    reads_ids="eagle_config.eagle_aux_hidden_state_layer_ids",
    ids_path=("eagle_config", "eagle_aux_hidden_state_layer_ids"),
    serving=sglang.context_refusal(CITES),
    cannot_compute=cannot_compute,
    launch=launching.sglang,
    converts_to=FLAT,
)
