"""llama.cpp's reading of an EAGLE-3 drafter: its converter (``convert_hf_to_gguf.py``) and its runtime
(``src/models/eagle3.cpp``), at ggml-org/llama.cpp commit 0c1e57098, the build llama-cpp-python 0.3.36 vendors
(its sdist on PyPI, 2026-10-01; ``CHANGELOG.md:10-12``). Paths are ``vendor/llama.cpp/`` in that sdist. The
converter is Python: conformance/record_llamacpp.py ran it on CPU on the whole conformance set (122 checkpoints,
2026-12-03), and the default tests hold this profile to that recording; the runtime is C++ and is read.

- ``conversion/llama.py:17-30, 50``: the converter takes LlamaForCausalLMEagle3, Eagle3LlamaForCausalLM,
  Eagle3Speculator and Eagle3DraftModel, and writes an EAGLE-3 GGUF only when the config has ``draft_vocab_size`` and
  ``num_hidden_layers`` is 1 (a speculators ``transformer_layer_config`` is flattened first, ``:211-213``); otherwise
  it converts a plain Llama and fails on ``d2t`` ("Can not map tensor");
- ``:74-83``: the aux ids are the top-level ``eagle_aux_hidden_state_layer_ids`` only (``eagle_config`` is read
  nowhere), copied as they are, else ``[2, N//2, N-3]`` of the target; ``src/models/eagle3.cpp:6-11``: exactly 3;
  ``common/speculative.cpp:540-549``: id L is the input of target layer L;
- ``:95-104``: ``norm_before_residual`` and ``norm_before_fc`` are read (``input_norm.weight`` becomes
  ``enc.output_norm.weight``, ``:238-240``); ``fc_norm`` and ``norm_output`` are read nowhere (silently ignored): the
  pre-norm state is fed back (``eagle3.cpp:286-288``) and the final norm always applied (``:66, 290-305``);
- ``:217-252``: ``midlayer.*`` and ``layers.0.*`` both load; ``hidden_norm`` is ``blk.0.attn_norm_2``; t2d is skipped;
  ``:241-246, 338-354``: d2t is written as absolute I64 ids, out-of-range or duplicate ids refused;
- ``src/models/eagle3.cpp:77-100, 156``: one layer, no biases (a bias the converter writes fails the load:
  ``src/llama-model-loader.cpp:1392-1398``), no q/k norms (``gguf-py/gguf/constants.py:5270-5288``: the converter
  refuses them); SwiGLU with SiLU; embed_tokens and lm_head optional, the target's otherwise (``:67-75``);
- the launch needs ``--spec-type draft-eagle3``: EAGLE-3 is not detected from the GGUF (``common/common.h:373``,
  ``common/speculative.cpp:2270-2303``).
"""

from __future__ import annotations

from ..drafter.layout import FLAT, SPECULATORS, str_list
from . import counting, reading
from . import launch as launching
from .profile import Capture, Profile, Release, Target, input_of
from .reading import Reading, is_int
from .record import (
    Call,
    Ids,
    Layer,
    Refuse,
    Rule,
    Tensors,
    Value,
    Walk,
    all_of,
    also,
    any_of,
    const,
    fmt,
    is_true,
    model_type_of,
    reading_of,
    role_ends,
    role_is,
    role_starts,
    same,
    stated,
    unknown,
)

# llama.cpp names builds by commit; the release judged is the one llama-cpp-python 0.3.36 vendors (commit 0c1e57098),
# named by that package's version, whose installed version selects it
VERSION = "0.3.36"
COMMIT = "0c1e57098"
NAME = "llamacpp"
CONVERTER = "conversion/llama.py"
RUNTIME = "src/models/eagle3.cpp"
# conversion/llama.py:17-30: the names its LlamaModel class is registered for, the EAGLE-3 ones among them; whether a
# drafter converts as EAGLE-3 is then decided by draft_vocab_size and the layer count (:50), not by the name
ARCHS = ("LLaMAForCausalLM", "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "VLlama3ForCausalLM",
         "LlavaForConditionalGeneration", "VoxtralForConditionalGeneration", "LlamaForCausalLMEagle3",
         "Eagle3LlamaForCausalLM", "Eagle3Speculator", "Eagle3DraftModel", "IQuestCoderForCausalLM", "LlamaModel")


def _flatten(w: Walk) -> None:
    """The converter flattens a speculators transformer_layer_config over the top level (conversion/llama.py:211-213);
    every layer field is then read without a prefix."""
    if w.ckpt.layout == SPECULATORS:
        w.fields = {**w.raw, **reading.layer_fields(w.raw, True)}
    w.where = ""
    archs = str_list(w.raw.get("architectures")) or []
    w.facts["archs"], w.facts["known"] = archs, [a for a in archs if a in ARCHS]


def _not_eagle3_gguf(w: Walk) -> bool:
    return "draft_vocab_size" not in w.raw or w.r.num_layers != 1


def _not_three_ids(w: Walk) -> bool:
    ids = w.raw.get("eagle_aux_hidden_state_layer_ids")
    return isinstance(ids, list) and bool(ids) and len(ids) != 3


def _three_ids(w: Walk) -> str:
    return (f"{len(w.raw['eagle_aux_hidden_state_layer_ids'])} aux-layer ids: llama.cpp's runtime requires exactly 3 "
            f"('EAGLE3 requires exactly 3 entries in extract_layers', {RUNTIME}:6-11)")


def _gguf_refusal(w: Walk) -> None:
    """The converter writes an EAGLE-3 GGUF only with draft_vocab_size and one layer."""
    if not _not_eagle3_gguf(w):
        return
    at = "num_hidden_layers" if "draft_vocab_size" in w.raw else "draft_vocab_size"
    w.r.refuse(f"the converter writes an EAGLE-3 GGUF only with draft_vocab_size and num_hidden_layers 1 "
               f"({CONVERTER}:50); otherwise it converts a plain Llama and raises \"Can not map tensor 'd2t'\"", at=at)


def _prefixed_global(w: Walk, name: str, n) -> bool:
    # modify_tensors matches the bare names d2t, fc.weight, input_norm.weight (conversion/llama.py:233-246)
    return n.prefixed and n.role in ("d2t", "fc.weight", "fc.bias", "input_norm.weight")


_NO_BIAS = f"llama.cpp builds no biases ({RUNTIME}:77-100)"

# One walk: the converter (conversion/llama.py), then what the runtime (src/models/eagle3.cpp) builds and loads.
STEPS = (
    Call(_flatten),
    Value("architecture", (), lambda w: "eagle3" if w.facts["known"] else None,
          fmt("architectures {archs} (" + CONVERTER + ":17-30)")),
    Refuse(lambda w: not w.facts["known"], fmt("llama.cpp's converter has no EAGLE-3 drafter class for {archs}: it "
                                               "converts EAGLE-3 drafters through its LlamaModel class ("
                                               + CONVERTER + ":17-30), and refuses other EAGLE-3 names (\"Model "
                                               "Eagle3Qwen3ForCausalLM is not supported\")"), architecture=True),
    model_type_of("llama"),
    Layer(),
    Call(_gguf_refusal),
    const("hidden_act", "silu", f"llama.cpp's EAGLE-3 graph is SwiGLU with SiLU ({RUNTIME}:264-275)"),
    stated("draft_vocab_size", reading_of("vocab_size"), "the target's vocabulary"),
    Value("target_hidden_size", ("target_hidden_size",), reading_of("hidden_size"),
          f"the target's hidden_size ({CONVERTER}:85-93)", take=same, valid=is_int, in_layer=True,
          says="config.json: target_hidden_size"),
    Ids(("eagle_aux_hidden_state_layer_ids",), f"the converter's default [2, N/2, N-3] of the target (the top-level "
        f"ids only; {CONVERTER}:74-83)"),
    Refuse(_not_three_ids, _three_ids, at="eagle_aux_hidden_state_layer_ids"),
    const("num_aux", 3, f"llama.cpp: exactly 3 aux states ({RUNTIME}:6-11)"),
    const("aux_convention", "vllm", "llama.cpp: id L is the input of target layer L (common/speculative.cpp:540-549)"),
    Value("norm_before_residual", ("norm_before_residual",), False, f"config.json: norm_before_residual (default "
          f"false, {CONVERTER}:95-98)", take=is_true, in_layer=True,
          says=f"config.json: norm_before_residual (default false, {CONVERTER}:95-98)"),
    Value("input_norm", ("norm_before_fc",), False, f"config.json: norm_before_fc (default false, "
          f"{CONVERTER}:100-104)", take=is_true, in_layer=True,
          says=f"config.json: norm_before_fc (default false, {CONVERTER}:100-104)"),
    const("fc_norm", False, f"llama.cpp reads no fc_norm (silently ignored; {RUNTIME} has none)"),
    const("feedback", "prenorm", f"llama.cpp feeds the pre-norm state back ({RUNTIME}:286-288; norm_output is not "
          "read)"),
    const("final_norm", True, f"llama.cpp always applies output_norm ({RUNTIME}:66)"),
    const("qk_norm", False, "llama.cpp's EAGLE-3 layer has no q/k norms"),
    *(const(name, False, _NO_BIAS) for name in ("attention_bias", "mlp_bias", "fc_bias", "o_bias")),
    const("lm_head_from_embed", False, "llama.cpp keeps a separate output tensor"),
    Tensors((
        Rule(role_is("t2d"), f"the converter skips t2d ({CONVERTER}:247-249)"),
        Rule(any_of(unknown, _prefixed_global), fmt("refused: the converter raises \"Can not map tensor {name!r}\"")),
        Rule(role_ends("q_norm.weight", "k_norm.weight"),
             fmt("refused: the converter raises \"Can not map tensor {name!r}\" (no q/k norms in llama.cpp)")),
        Rule(role_ends(".bias"), "refused: the converter writes it, the runtime builds no bias and fails the load "
             "('wrong number of tensors', src/llama-model-loader.cpp:1392-1398)"),
        Rule(role_starts("fc_norm."), "refused: the converter raises \"Can not map tensor\" (llama.cpp has no "
             "fc_norm)"),
        Rule(all_of(role_is("input_norm.weight"), also(lambda w: not w.r.input_norm)),
             "refused: enc.output_norm.weight is loaded only with norm_before_fc; the runtime fails the load ('wrong "
             "number of tensors')"),
    ), f"a load error (llama.cpp requires the tensor, {RUNTIME}:77-100)", refuse_skipped=True),
)


def capture(ids: list[int], target: Target | None) -> Capture:
    n = target.num_layers if target else None
    return Capture(input_of(sorted(set(ids))), "llama.cpp: id L is the input of target layer L "
                   "(common/speculative.cpp:540-549)", n - 1 if n else None)


def ids_for(layers: tuple[int, ...], target: Target | None) -> list[int] | None:
    return [x + 1 for x in layers]


def cannot_compute(trained: Reading) -> list[str]:
    return [name for name, on in (("more than one layer", trained.num_layers != 1),
                                  ("fc_norm", trained.fc_norm), ("norm_output", trained.feedback == "normed"),
                                  ("biases", trained.attention_bias or trained.mlp_bias or trained.fc_bias),
                                  ("Qwen3 q/k norms", trained.qk_norm),
                                  ("a number of aux states other than 3", trained.num_aux != 3)) if on]


PROFILE = Profile(
    NAME, VERSION, STEPS, capture, ids_for,
    module=__name__, takes=(),
    releases=(Release(VERSION, "2026-10-01", why=f"llama.cpp commit {COMMIT}, the build llama-cpp-python 0.3.36 "
                      "vendors (CHANGELOG.md:10-12); its converter recorded 2026-12-03 on the conformance set "
                      "(tests/conformance/converters/), its runtime read"),),
    package="llama_cpp_python",
    sources=(CONVERTER, RUNTIME, "common/speculative.cpp", "gguf-py/gguf/constants.py"),
    reads_ids="the top-level eagle_aux_hidden_state_layer_ids (the converter)",
    ids_path=("eagle_aux_hidden_state_layer_ids",),
    cannot_compute=cannot_compute,
    launch=launching.llamacpp,
    converts_to=FLAT,
    counting=counting.LLAMACPP,
)
