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

from typing import Any

from ..drafter.checkpoint import Checkpoint
from ..drafter.config_values import class_defaults
from ..drafter.layout import SPECULATORS, str_list
from . import launch as launching
from . import reading
from .profile import Capture, Profile, Release, Target, default_ids, input_of
from .reading import Reading, is_int

VERSION = "0.18.0"
NAME = "lmdeploy"
FILE = "pytorch/models/llama_eagle3.py"
# pytorch/configurations/llama.py:24-29 (Llama targets) and configurations/kimi_k2.py:77-83 (Kimi-K2/K2.5) set the
# aux layers; no other target builder does for eagle3 (Qwen targets: configurations/default.py).
TARGETS = ("LlamaForCausalLM", "KimiK25ForConditionalGeneration", "DeepseekV3ForCausalLM")


def read(ckpt: Checkpoint, target: Any = None) -> Reading:  # noqa: C901 - one walk, in the loader's order
    raw = ckpt.config_raw or {}
    r = Reading(NAME, VERSION, ckpt.layout)
    if ckpt.layout == SPECULATORS:
        r.refusals.append("lmdeploy 0.18.0 reads flat configs only: a speculators config has no top-level "
                          "hidden_size and fails with AttributeError (pytorch/configurations/default.py:18)")
        r.layout_ok = False
        return r
    archs = str_list(raw.get("architectures")) or []
    if archs[:1] == ["Eagle3DeepseekV2ForCausalLM"]:
        r.not_modelled = ("lmdeploy 0.18.0 builds its MLA drafter (pytorch/models/kimi_k25_eagle3.py), which "
                          "eagle3-checks reads from source but does not model")
        return r
    built = "Eagle3LlamaForCausalLM" if archs[:1] == ["LlamaForCausalLM"] else archs[0] if archs else None
    r.set("architecture", built,
          f"architectures {archs} (pytorch/configurations/llama.py:9-11 renames exactly LlamaForCausalLM)")
    if archs[:1] != ["LlamaForCausalLM"]:
        r.refuse_class(f"lmdeploy 0.18.0 builds its EAGLE-3 drafter only for architectures[0] "
                       f"'LlamaForCausalLM' (pytorch/configurations/llama.py:9-11); {archs} raises "
                       "RuntimeError('Can not found rewrite for architectures') (pytorch/models/patch.py:196)")
    hd, max_pos, cls = class_defaults(reading.model_type_of(r, raw, "llama"))
    # configurations/default.py:17-21: head_dim = config head_dim or hidden_size // heads
    reading.read_layer(r, raw, "", (hd, cls), max_pos)
    r.set("hidden_act", "silu", "lmdeploy 0.18.0 hard-codes SiLU (pytorch/models/llama.py:131): hidden_act is not read")
    if r.num_layers != 1:
        r.refuse(f"lmdeploy raises ValueError('eagle3 only supports 1 decode layer') ({FILE}:172-173; "
                 f"num_hidden_layers {r.num_layers})", at="num_hidden_layers")
    if not is_int(raw.get("draft_vocab_size")):
        r.refuse(f"config.json has no draft_vocab_size: lmdeploy reads it without a default ({FILE}:179) and "
                 "raises AttributeError", at="draft_vocab_size")
    reading.read_stated(r, raw, "draft_vocab_size", r.vocab_size, f"no default ({FILE}:179)")
    if "target_hidden_size" in raw and not is_int(raw["target_hidden_size"]):
        r.refuse(f"target_hidden_size {raw['target_hidden_size']!r}: lmdeploy builds fc from it and raises "
                 f"TypeError ({FILE}:97-104)", at="target_hidden_size")
    ht = raw.get("target_hidden_size")
    r.set("target_hidden_size", ht if is_int(ht) else r.hidden_size,
          "config.json: target_hidden_size" if is_int(ht) else f"lmdeploy default: hidden_size ({FILE}:97)")
    r.set("num_aux", 3, f"lmdeploy: fc takes 3 x target_hidden_size ({FILE}:97-104)")
    r.set("fc_bias", False, f"lmdeploy builds fc without bias ({FILE}:100-104)")
    r.set("qk_norm", False, "lmdeploy builds Llama layers (no q/k norms)")
    o_bias = raw.get("attention_bias") is True
    r.set("attention_bias", False, f"lmdeploy rebuilds q/k/v without bias ({FILE}:37-47)")
    r.set("o_bias", o_bias, "pytorch/models/llama.py:61-67: o_proj bias = attention_bias")
    r.set("mlp_bias", raw.get("mlp_bias") is True, "pytorch/models/llama.py:119: mlp bias = mlp_bias")
    for attr, flag in (("input_norm", "norm_before_fc"), ("fc_norm", "fc_norm"),
                       ("norm_before_residual", "norm_before_residual")):
        r.set(attr, False, f"lmdeploy 0.18.0 has no {flag} (read nowhere in the wheel)")
    r.set("feedback", "prenorm", "lmdeploy feeds the pre-norm state back (spec_decode/proposers/eagle3.py:113-115; "
          "norm_output is not read)")
    r.set("final_norm", True, f"lmdeploy applies the final norm before lm_head ({FILE}:143)")
    tied = raw.get("tie_word_embeddings") is True
    r.set("lm_head_from_embed", False, f"lmdeploy never ties lm_head ({FILE}:307-308 skips it)")
    r.set("aux_layer_ids", None, "lmdeploy 0.18.0 reads no ids from the drafter: the target captures (2, N/2, N-3) "
          "(pytorch/configurations/llama.py:24-29)")
    r.set("aux_convention", "vllm", "lmdeploy: id L is the input of target layer L (pytorch/models/llama.py:264-267)")
    if target is not None and target.architectures and target.architectures[0] not in TARGETS:
        r.refuse(f"the target {target.architectures[0]} is not wired for EAGLE-3 in lmdeploy 0.18.0: only Llama and "
                 "Kimi-K2 target builders set aux_hidden_state_layers (pytorch/configurations/llama.py:24-29, "
                 "kimi_k2.py:77-83)", at="--target-config")

    def accept(name: str, n) -> tuple[str | None, str]:
        if n.role == "t2d":
            return None, f"lmdeploy skips t2d ({FILE}:301-302)"
        if n.role == "lm_head.weight" and tied:
            return None, f"skipped: tie_word_embeddings ({FILE}:307-308), and nothing ties it"
        refused = (f"refused: lmdeploy raises KeyError: it builds no parameter model.{name} ({FILE}:297-298, 313; it "
                   "reads midlayer.* names only)")
        if n.role is None or n.prefixed or n.style == "layers":
            return None, refused
        if n.role.endswith("self_attn.o_proj.bias"):
            return (n.role, "") if o_bias else (None, refused)
        if ".mlp." in n.role and n.role.endswith(".bias"):
            return (n.role, "") if r.mlp_bias else (None, refused)
        if n.role.endswith(".bias") or n.role.endswith(("q_norm.weight", "k_norm.weight")) or \
                n.role == "input_norm.weight" or n.role.startswith("fc_norm."):
            return None, refused
        return n.role, ""

    reading.map_roles(r, ckpt, accept)
    reading.refuse_skipped(r)
    reading.finish(r, ckpt, "uninitialised memory (lmdeploy does not detect missing tensors, "
                   "pytorch/nn/linear/default.py:113)")
    if "d2t" not in r.tensors:
        r.unfilled["d2t"] = f"zeros: every draft token is taken as target id 0 ({FILE}:184)"
    if tied:
        r.unfilled["lm_head.weight"] = f"uninitialised memory (tie_word_embeddings: {FILE}:307-308 skips it)"
    if "embed_tokens.weight" in r.unfilled:
        r.unfilled["embed_tokens.weight"] = "shared from the target model (spec_decode/proposers/eagle3.py:34-37)"
    return r


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
    NAME, VERSION, read, capture, ids_for,
    releases=(Release(VERSION, "2026-09-28"),),
    sources=(FILE, "pytorch/models/llama.py", "pytorch/configurations/llama.py", "pytorch/models/patch.py",
             "spec_decode/proposers/eagle3.py", "cli/utils.py"),
    reads_ids="nowhere: the target captures (2, N/2, N-3) whatever the drafter says",
    ids_path=(),
    cannot_compute=cannot_compute,
    default_rule=default_rule,
    launch=launching.lmdeploy,
)
