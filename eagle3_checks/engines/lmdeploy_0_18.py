"""lmdeploy 0.18.0's reading of an EAGLE-3 drafter (its PyTorch engine; files are ``lmdeploy/`` in the 0.18.0 wheel
from PyPI, uploaded 2026-09-28). Read from the wheel's source: lmdeploy has no CPU device (``messages.py:568,622``,
``pytorch/backends/selector.py:7-27``), so its loader cannot be recorded here.

- ``pytorch/configurations/llama.py:9-11, 18-23``: a draft reaches the Llama EAGLE-3 class only when
  ``architectures[0]`` is exactly ``LlamaForCausalLM`` (renamed in memory to ``Eagle3LlamaForCausalLM``); any other
  name (``LlamaForCausalLMEagle3`` included) gets the default builder and ``pytorch/models/patch.py:165-196`` raises
  ``RuntimeError('Can not found rewrite for architectures')``; a speculators config has no top-level
  ``hidden_size`` and fails at ``pytorch/configurations/default.py:18`` (``transformer_layer_config`` is read nowhere);
- ``pytorch/models/llama_eagle3.py``: one layer only (``:172-173``); ``draft_vocab_size`` read without a default
  (``:179``); fc is ``3 x target_hidden_size`` without bias (``:97-104``); q/k/v without bias (``:37-47``), o_proj with
  ``attention_bias`` and the MLP with ``mlp_bias`` (``pytorch/models/llama.py:61-67, 119-140``); SiLU hard-coded
  (``llama.py:131``); no norm flags: the residual is the un-normed state and the pre-norm state is fed back
  (``:60-63``, ``spec_decode/proposers/eagle3.py:113-115``);
- ``load_weights`` (``llama_eagle3.py:278-318``): every name but ``lm_head.weight`` gets ``model.`` and is looked up in
  ``params_dict`` (``:297-298, 313, 317``): a ``layers.0.*`` name, a ``model.``-prefixed one, a bias or norm it does
  not build is a KeyError; ``d2t`` becomes ``draft_id_to_target_id = d2t + arange`` in a buffer of zeros (``:184,
  291-296``), so a checkpoint without d2t maps every draft token to target id 0; ``t2d`` is skipped (``:301-302``);
  with ``tie_word_embeddings`` ``lm_head.weight`` is skipped and never tied (``:307-308``: an uninitialised head);
  missing tensors are not detected (``pytorch/nn/linear/default.py:113``: ``torch.empty``);
- ``spec_decode/proposers/eagle3.py:34-37``: without ``embed_tokens`` in the checkpoint the target's is used;
- ``pytorch/configurations/llama.py:24-29``: the TARGET captures ``(2, N//2, N-3)``, never the drafter's ids; id L is
  the input of layer L (``pytorch/models/llama.py:264-267``); only Llama and Kimi-K2 targets are wired for EAGLE-3;
- ``pytorch/models/kimi_k25_eagle3.py``: the MLA drafter (``Eagle3DeepseekV2ForCausalLM``), not modelled here.
"""

from __future__ import annotations

from ..drafter.layout import SPECULATORS, str_list
from . import launch as launching
from .profile import Capture, Profile, Release, Target, default_ids, input_of
from .reading import Reading, is_int
from .record import (
    Call,
    Fact,
    Layer,
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
    fact_is,
    fmt,
    is_true,
    layers_style,
    layout_is,
    model_type_of,
    prefixed,
    read_as,
    reading_of,
    role_ends,
    role_is,
    role_starts,
    stated,
    unknown,
)

VERSION = "0.18.0"
NAME = "lmdeploy"
FILE = "pytorch/models/llama_eagle3.py"
# pytorch/configurations/llama.py:24-29 (Llama targets) and configurations/kimi_k2.py:77-83 (Kimi-K2/K2.5) set the
# aux layers; no other target builder does for eagle3 (Qwen targets: configurations/default.py).
TARGETS = ("LlamaForCausalLM", "KimiK25ForConditionalGeneration", "DeepseekV3ForCausalLM")


def _archs(w: Walk) -> list[str]:
    return str_list(w.raw.get("architectures")) or []


def _mla_first(w: Walk) -> bool:
    return w.facts["archs"][:1] == ["Eagle3DeepseekV2ForCausalLM"]


def _built(w: Walk) -> str | None:
    archs = w.facts["archs"]
    return "Eagle3LlamaForCausalLM" if archs[:1] == ["LlamaForCausalLM"] else archs[0] if archs else None


def _not_llama_first(w: Walk) -> bool:
    return w.facts["archs"][:1] != ["LlamaForCausalLM"]


def _target_unwired(w: Walk) -> bool:
    t = w.target
    return t is not None and bool(t.architectures) and t.architectures[0] not in TARGETS


def _after_load(w: Walk) -> None:
    """What lmdeploy serves where the checkpoint has nothing: a zero d2t buffer, an untied head, the target's
    embedding."""
    r = w.r
    if "d2t" not in r.tensors:
        r.unfilled["d2t"] = f"zeros: every draft token is taken as target id 0 ({FILE}:184)"
    if w.facts["tied"]:
        r.unfilled["lm_head.weight"] = f"uninitialised memory (tie_word_embeddings: {FILE}:307-308 skips it)"
    if "embed_tokens.weight" in r.unfilled:
        r.unfilled["embed_tokens.weight"] = "shared from the target model (spec_decode/proposers/eagle3.py:34-37)"


# pytorch/models/llama_eagle3.py:297-298, 313: every name but lm_head.weight gets "model." and is looked up in
# params_dict: a name it builds no parameter for is a KeyError
_REFUSED = fmt("refused: lmdeploy raises KeyError: it builds no parameter model.{name} (" + FILE + ":297-298, 313; "
               "it reads midlayer.* names only)")
_O_BIAS = role_ends("self_attn.o_proj.bias")
_MLP_BIAS = all_of(role_ends(".bias"), lambda w, name, n: ".mlp." in (n.role or ""))

# One walk, in the loader's order: config (pytorch/configurations/, llama_eagle3.py __init__), then load_weights.
STEPS = (
    Stop(layout_is(SPECULATORS), "lmdeploy 0.18.0 reads flat configs only: a speculators config has no top-level "
         "hidden_size and fails with AttributeError (pytorch/configurations/default.py:18)"),
    Fact("archs", _archs),
    Stop(_mla_first, not_modelled="lmdeploy 0.18.0 builds its MLA drafter (pytorch/models/kimi_k25_eagle3.py), "
         "which eagle3-checks reads from source but does not model", layout=False),
    Value("architecture", (), _built, fmt("architectures {archs} (pytorch/configurations/llama.py:9-11 renames "
                                          "exactly LlamaForCausalLM)")),
    Refuse(_not_llama_first, fmt("lmdeploy 0.18.0 builds its EAGLE-3 drafter only for architectures[0] "
                                 "'LlamaForCausalLM' (pytorch/configurations/llama.py:9-11); {archs} raises "
                                 "RuntimeError('Can not found rewrite for architectures') "
                                 "(pytorch/models/patch.py:196)"),
           architecture=True),
    model_type_of("llama"),
    Layer(),  # configurations/default.py:17-21: head_dim = config head_dim or hidden_size // heads
    const("hidden_act", "silu", "lmdeploy 0.18.0 hard-codes SiLU (pytorch/models/llama.py:131): hidden_act is not "
          "read"),
    Refuse(lambda w: w.r.num_layers != 1, fmt("lmdeploy raises ValueError('eagle3 only supports 1 decode layer') ("
                                              + FILE + ":172-173; num_hidden_layers {r.num_layers})"),
           at="num_hidden_layers"),
    Refuse(lambda w: not is_int(w.raw.get("draft_vocab_size")),
           f"config.json has no draft_vocab_size: lmdeploy reads it without a default ({FILE}:179) and raises "
           "AttributeError", at="draft_vocab_size"),
    stated("draft_vocab_size", reading_of("vocab_size"), f"no default ({FILE}:179)"),
    Refuse(lambda w: "target_hidden_size" in w.raw and not is_int(w.raw["target_hidden_size"]),
           fmt("target_hidden_size {raw[target_hidden_size]!r}: lmdeploy builds fc from it and raises TypeError ("
               + FILE + ":97-104)"), at="target_hidden_size"),
    Value("target_hidden_size", ("target_hidden_size",), reading_of("hidden_size"),
          f"lmdeploy default: hidden_size ({FILE}:97)", take=lambda v: v, valid=is_int,
          says="config.json: target_hidden_size"),
    const("num_aux", 3, f"lmdeploy: fc takes 3 x target_hidden_size ({FILE}:97-104)"),
    const("fc_bias", False, f"lmdeploy builds fc without bias ({FILE}:100-104)"),
    const("qk_norm", False, "lmdeploy builds Llama layers (no q/k norms)"),
    const("attention_bias", False, f"lmdeploy rebuilds q/k/v without bias ({FILE}:37-47)"),
    Value("o_bias", ("attention_bias",), False, "pytorch/models/llama.py:61-67: o_proj bias = attention_bias",
          take=is_true, says="pytorch/models/llama.py:61-67: o_proj bias = attention_bias"),
    Value("mlp_bias", ("mlp_bias",), False, "pytorch/models/llama.py:119: mlp bias = mlp_bias", take=is_true,
          says="pytorch/models/llama.py:119: mlp bias = mlp_bias"),
    *(const(attr, False, f"lmdeploy 0.18.0 has no {flag} (read nowhere in the wheel)")
      for attr, flag in (("input_norm", "norm_before_fc"), ("fc_norm", "fc_norm"),
                         ("norm_before_residual", "norm_before_residual"))),
    const("feedback", "prenorm", "lmdeploy feeds the pre-norm state back (spec_decode/proposers/eagle3.py:113-115; "
          "norm_output is not read)"),
    const("final_norm", True, f"lmdeploy applies the final norm before lm_head ({FILE}:143)"),
    Fact("tied", lambda w: w.raw.get("tie_word_embeddings") is True),
    const("lm_head_from_embed", False, f"lmdeploy never ties lm_head ({FILE}:307-308 skips it)"),
    const("aux_layer_ids", None, "lmdeploy 0.18.0 reads no ids from the drafter: the target captures (2, N/2, N-3) "
          "(pytorch/configurations/llama.py:24-29)"),
    const("aux_convention", "vllm", "lmdeploy: id L is the input of target layer L (pytorch/models/llama.py:264-267)"),
    Refuse(_target_unwired, fmt("the target {w.target.architectures[0]} is not wired for EAGLE-3 in lmdeploy 0.18.0: "
                                "only Llama and Kimi-K2 target builders set aux_hidden_state_layers (pytorch/"
                                "configurations/llama.py:24-29, kimi_k2.py:77-83)"), at="--target-config"),
    Tensors((
        Rule(role_is("t2d"), f"lmdeploy skips t2d ({FILE}:301-302)"),
        Rule(all_of(role_is("lm_head.weight"), also(fact_is("tied"))),
             f"skipped: tie_word_embeddings ({FILE}:307-308), and nothing ties it"),
        Rule(any_of(unknown, prefixed, layers_style), _REFUSED),
        Rule(all_of(_O_BIAS, also(read_as("o_bias"))), load=True),
        Rule(_O_BIAS, _REFUSED),
        Rule(all_of(_MLP_BIAS, also(read_as("mlp_bias"))), load=True),
        Rule(_MLP_BIAS, _REFUSED),
        Rule(any_of(role_ends(".bias", "q_norm.weight", "k_norm.weight"), role_is("input_norm.weight"),
                    role_starts("fc_norm.")), _REFUSED),
    ), "uninitialised memory (lmdeploy does not detect missing tensors, pytorch/nn/linear/default.py:113)",
        refuse_skipped=True),
    Call(_after_load),
)


def capture(ids: list[int], target: Target | None) -> Capture:
    """lmdeploy never reads the drafter's ids; ``ids`` are only what the gate would compare."""
    n = target.num_layers if target else None
    return Capture(input_of(sorted(set(ids))), "lmdeploy 0.18.0: id L is the input of layer L "
                   "(pytorch/models/llama.py:264-267)", n)


def default_rule(target: Target | None, drafter: Reading | None = None) -> Capture:
    if target is None or not target.num_layers:
        return Capture(None, "lmdeploy's target captures (2, N/2, N-3) of its N layers, N unknown "
                       "(pytorch/configurations/llama.py:24-29)")
    ids = default_ids(target.num_layers)
    return Capture(input_of(ids), f"lmdeploy's target captures the inputs of layers {ids} whatever the drafter says "
                   "(pytorch/configurations/llama.py:24-29)", target.num_layers)


def ids_for(layers: tuple[int, ...], target: Target | None) -> list[int] | None:
    return None  # no field of the drafter's config is read: no ids make lmdeploy capture other layers


def cannot_compute(trained: Reading) -> list[str]:
    return [name for name, on in (("more than one layer", trained.num_layers != 1),
                                  ("norm_before_fc", trained.input_norm), ("fc_norm", trained.fc_norm),
                                  ("norm_output", trained.feedback == "normed"),
                                  ("norm_before_residual", trained.norm_before_residual),
                                  ("q/k/v biases", trained.attention_bias), ("Qwen3 q/k norms", trained.qk_norm),
                                  ("an fc bias", trained.fc_bias)) if on]


PROFILE = Profile(
    NAME, VERSION, STEPS, capture, ids_for, module=__name__,
    releases=(Release(VERSION, "2026-09-28"),),
    sources=(FILE, "pytorch/models/llama.py", "pytorch/configurations/llama.py", "pytorch/models/patch.py",
             "spec_decode/proposers/eagle3.py", "cli/utils.py"),
    reads_ids="nowhere: the target captures (2, N/2, N-3) whatever the drafter says",
    ids_path=(),
    cannot_compute=cannot_compute,
    default_rule=default_rule,
    launch=launching.lmdeploy,
)
