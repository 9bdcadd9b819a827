"""TensorRT-LLM 1.4.0rc1's reading of an EAGLE-3 drafter (its PyTorch backend, ``eagle3_one_model``, the default).

Read from source, not from the released wheel: PyPI's tensorrt-llm 1.4.0rc1 (2026-10-21) is a stub whose PKG-INFO
names the release's commit 0372799d, and the wheel is on NVIDIA's index, which the gate's build machine cannot
reach; the files below are ``tensorrt_llm/`` at the nearest commits read (``_torch/models/modeling_speculative.py``
@00679c66, ``_torch/models/modeling_auto.py`` @01bffee1, ``llmapi/llm_args.py``), cited by function. Every statement
is therefore "read", none "recorded".

- ``llmapi/llm_args.py`` ``Eagle3DecodingConfig``: the aux layers are the launch option ``eagle3_layers_to_capture``
  (a set); ``num_capture_layers`` is its size, else 3, with the default layers ``{1, N//2-1, N-4}``; nothing reads the
  drafter's ``eagle_aux_hidden_state_layer_ids``; id X is the output of decoder layer X (``_torch/speculative/
  eagle3.py`` ``Eagle3SpecMetadata.maybe_capture_hidden_states``), SGLang's way of counting;
- ``modeling_speculative.py`` ``Eagle3DraftModel.__init__``: fc is ``Linear(Ht x num_capture_layers -> H,
  bias=config.bias)``; ``norm_before_fc`` only from ``eagle_config``; ``fc_norm`` only from the top level (with both,
  only fc_norm runs); ``norm_output`` from the top level or ``eagle_config.return_hidden_post_norm``;
  ``attention_bias`` / ``mlp_bias`` at the top level; the drafter's own embedding only when Ht != H, else the
  target's; ``d2t`` an int32 parameter only when draft_vocab_size != vocab_size; no t2d;
- ``Eagle3DecoderLayer.forward``: later layers are normed by ``hidden_norm`` (SGLang 0.5.23's convention, not
  vLLM's); the residual is the un-normed state (``norm_before_residual`` is not read);
- ``Eagle3ForCausalLM.load_weights``: ``layers.0.`` becomes ``midlayer.``, every key without ``lm_head`` gets
  ``model.``; loading goes module by module, so a tensor it has no module for (t2d, Qwen3 q/k norms, an own
  embedding when Ht == H) is skipped silently; lm_head comes from the target unless a key contains ``lm_head``;
- ``_ensure_draft_vocab_size``: a null draft_vocab_size becomes vocab_size.
"""

from __future__ import annotations

from ..drafter.layout import MLA_ARCHITECTURES, SPECULATORS, str_list
from . import launch as launching
from .profile import Capture, Profile, Release, Target, output_of
from .reading import Reading, is_int, valid_ids
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
    const,
    fact_is,
    fmt,
    is_true,
    layout_is,
    model_type_of,
    reading_of,
    role_ends,
    role_is,
    role_starts,
    same,
    unknown,
)

VERSION = "1.4.0rc1"
NAME = "trtllm"
SPEC = "_torch/models/modeling_speculative.py"
ARGS = "llmapi/llm_args.py Eagle3DecodingConfig"
LAUNCH_IDS = "eagle3_layers_to_capture"


def launch_layers(launch: dict | None) -> list[int] | None:
    """The layers the launch settings name (``speculative_config.eagle3_layers_to_capture``, or at the top level)."""
    if not isinstance(launch, dict):
        return None
    nested = launch.get("speculative_config")
    spec: dict = nested if isinstance(nested, dict) else launch
    value = spec.get(LAUNCH_IDS)
    return sorted(set(value)) if isinstance(value, list) and valid_ids(value) else None


def _mla(w: Walk) -> bool:
    return bool(w.raw.get("kv_lora_rank")) or any(a in MLA_ARCHITECTURES
                                                  for a in str_list(w.raw.get("architectures")) or [])


def _eagle(w: Walk) -> dict:
    given = w.raw.get("eagle_config")
    return given if isinstance(given, dict) else {}


def _launch_layers(w: Walk) -> None:
    """The aux layers come from the launch option, never from the drafter's config."""
    r, layers = w.r, launch_layers(w.launch)
    if layers is not None:
        r.set("aux_layer_ids", layers, f"the launch option {LAUNCH_IDS}", key=f"launch: {LAUNCH_IDS}")
    else:
        r.set("aux_layer_ids", None, f"no launch option {LAUNCH_IDS}: TensorRT-LLM captures its default layers and "
              "reads no ids from the drafter's config")
    r.set("num_aux", len(layers) if layers else 3,
          f"the size of {LAUNCH_IDS}" if layers else f"TensorRT-LLM default: 3 ({ARGS} num_capture_layers)")


def _feedback(w: Walk) -> None:
    normed = w.raw.get("norm_output") is True or w.facts["eagle"].get("return_hidden_post_norm") is True
    w.r.set("feedback", "normed" if normed else "prenorm",
            "config.json: norm_output / eagle_config.return_hidden_post_norm" if normed
            else "TensorRT-LLM default: the pre-norm state is fed back")


def _counted(w: Walk) -> int | None:
    """How many states of target_hidden_size the checkpoint's fc takes."""
    fc = w.ckpt.shape("fc.weight")
    width = fc[1] if fc and len(fc) == 2 else None
    ht = w.r.target_hidden_size
    return width // ht if width and ht and width % ht == 0 else None


def _after_load(w: Walk) -> None:
    """An fc sized for other than the launch's layers fails the load (one refusal, saying how to launch); a drafter
    without lm_head gets the target's, which cannot serve a draft vocabulary."""
    r, counted = w.r, w.facts["counted"]
    if counted and counted != r.num_aux:
        r.refusals = [x for x in r.refusals if not x.startswith(f"{w.ckpt.roles['fc.weight']}: shape")]
        r.refuse(f"fc.weight takes {counted} states of {r.target_hidden_size}; TensorRT-LLM builds fc for "
                 f"{r.num_aux} ({r.sources['num_aux']}) and fails to load it: launch with {LAUNCH_IDS} naming "
                 f"{counted} layers (eagle3-checks recipe --engine trtllm writes it)", at=f"launch: {LAUNCH_IDS}")
    own_head = w.facts["own_head"]
    if not own_head:
        r.unfilled["lm_head.weight"] = "shared from the target model (load_lm_head_from_target: no lm_head key)"
    if r.draft_vocab_size != r.vocab_size and not own_head:
        r.refuse(f"draft_vocab_size {r.draft_vocab_size} < vocab_size {r.vocab_size} and no lm_head: TensorRT-LLM "
                 "takes the target's full-vocabulary head for a draft vocabulary", at="lm_head.weight")


def _bias_unbuilt(w: Walk, name: str, n) -> bool:
    r = w.r
    return n.role.endswith(".bias") and not (r.fc_bias and n.role == "fc.bias") and not (
        r.attention_bias and ".self_attn." in n.role) and not (r.mlp_bias and ".mlp." in n.role)


# One walk: Eagle3DecodingConfig and Eagle3DraftModel.__init__ ({SPEC}), then Eagle3ForCausalLM.load_weights.
STEPS = (
    Stop(layout_is(SPECULATORS), not_modelled="TensorRT-LLM reads a flat config through transformers; how it takes a "
         "speculators config (nested transformer_layer_config) was not settled from its source", layout=False),
    Stop(_mla, not_modelled="TensorRT-LLM builds an MLA drafter (Eagle3MLAttention: kv_lora_rank is set), which "
         f"eagle3-checks reads from source ({SPEC}) but does not model", layout=False),
    const("architecture", "Eagle3ForCausalLM", f"eagle3_one_model builds Eagle3ForCausalLM whatever the "
          f"architectures say ({SPEC})"),
    model_type_of("llama"),
    Layer(),
    Refuse(lambda w: w.r.hidden_act != "silu", fmt("TensorRT-LLM's Eagle3 MLP is gated SiLU: hidden_act "
                                                   "{r.hidden_act!r} is not computed (" + SPEC +
                                                   " Eagle3DecoderLayer)")),
    Fact("eagle", _eagle),
    Value("target_hidden_size", ("target_hidden_size",), reading_of("hidden_size"),
          f"TensorRT-LLM default: hidden_size ({SPEC})", take=same, valid=is_int,
          says="config.json: target_hidden_size"),
    Call(_launch_layers),
    const("aux_convention", "sglang", "TensorRT-LLM: id X is the output of target layer X"),
    Value("input_norm", (), lambda w: w.facts["eagle"].get("norm_before_fc") is True and
          w.raw.get("fc_norm") is not True,
          f"eagle_config.norm_before_fc (the top level is not read; fc_norm wins over it, {SPEC} apply_eagle3_fc)"),
    Value("fc_norm", ("fc_norm",), False, "config.json: fc_norm (the top level only)", take=is_true,
          says="config.json: fc_norm (the top level only)"),
    Call(_feedback),
    const("norm_before_residual", False, f"TensorRT-LLM: the residual is the un-normed state ({SPEC}; the flag is "
          "not read)"),
    const("later_norm", "hidden_norm", f"TensorRT-LLM norms layers >= 1 with hidden_norm ({SPEC} "
          "Eagle3DecoderLayer.forward)", when=lambda w: w.r.num_layers > 1),
    const("qk_norm", False, "TensorRT-LLM's Eagle3 attention has no q/k norms"),
    Value("fc_bias", ("bias",), False, "config.json: bias (fc)", take=is_true, says="config.json: bias (fc)"),
    Value("o_bias", (), reading_of("attention_bias"), "o_proj follows attention_bias"),
    Value("draft_vocab_size", ("draft_vocab_size",), reading_of("vocab_size"),
          f"_ensure_draft_vocab_size: vocab_size ({SPEC})", take=same, valid=is_int,
          says="config.json: draft_vocab_size"),
    Fact("has_d2t", lambda w: w.r.draft_vocab_size != w.r.vocab_size),
    Fact("own_head", lambda w: any("lm_head" in name for name in w.ckpt.tensors)),
    Fact("own_embed", lambda w: w.r.target_hidden_size != w.r.hidden_size),
    const("lm_head_from_embed", False, "TensorRT-LLM keeps a separate lm_head"),
    Fact("counted", _counted),
    Tensors((
        Rule(role_is("t2d"), "TensorRT-LLM has no t2d parameter"),
        Rule(all_of(role_is("d2t"), also(fact_is("has_d2t"))), load=True),
        Rule(role_is("d2t"), "skipped: no d2t parameter when draft_vocab_size equals vocab_size"),
        Rule(unknown, "skipped silently: TensorRT-LLM loads module by module and has no such module"),
        Rule(all_of(role_is("embed_tokens.weight"), also(lambda w: not w.facts["own_embed"])),
             "replaced by the target's embedding (the drafter builds its own only when Ht != H)"),
        Rule(role_ends("q_norm.weight", "k_norm.weight"),
             "skipped silently: TensorRT-LLM's Eagle3 attention has no q/k norms"),
        Rule(all_of(role_is("input_norm.weight"), also(lambda w: not w.r.input_norm)),
             "skipped: input_norm is built only for eagle_config.norm_before_fc"),
        Rule(all_of(role_starts("fc_norm."), also(lambda w: not w.r.fc_norm)),
             "skipped: fc_norm is built only for a top-level fc_norm"),
        Rule(_bias_unbuilt, "skipped silently: TensorRT-LLM builds no such bias"),
    ), "uninitialised (or a KeyError at load: not settled from the source)"),
    Call(_after_load),
)


def capture(ids: list[int], target: Target | None) -> Capture:
    n = target.num_layers if target else None
    return Capture(output_of(sorted(set(ids))), f"TensorRT-LLM: {LAUNCH_IDS} X captures the output of decoder layer "
                   "X (_torch/speculative/eagle3.py)", n - 1 if n else None)


def default_rule(target: Target | None, drafter: Reading | None = None) -> Capture:
    if target is None or not target.num_layers:
        return Capture(None, f"TensorRT-LLM's default {{1, N/2-1, N-4}} of the target's N layers, N unknown ({ARGS})")
    n = target.num_layers
    layers = tuple(sorted({1, n // 2 - 1, n - 4})) if n > 5 else (0,)
    return Capture(layers, f"TensorRT-LLM's default {LAUNCH_IDS} {list(layers)} ({ARGS}: {{1, N/2-1, N-4}})", n - 1)


def ids_for(layers: tuple[int, ...], target: Target | None) -> list[int] | None:
    return list(layers)


def cannot_compute(trained: Reading) -> list[str]:
    later = trained.num_layers != 1 and trained.later_norm != "hidden_norm"
    return [name for name, on in (("more than one layer normed by input_layernorm (TensorRT-LLM norms layers >= 1 "
                                   "with hidden_norm)", later),
                                  ("norm_before_residual", trained.norm_before_residual),
                                  ("Qwen3 q/k norms", trained.qk_norm),
                                  ("norm_before_fc together with fc_norm", trained.input_norm and trained.fc_norm))
            if on]


PROFILE = Profile(
    NAME, VERSION, STEPS, capture, ids_for,
    module=__name__, takes=(),
    releases=(Release(VERSION, "2026-10-21", why="read from source at commit 00679c66 (the release's own commit, "
                      "0372799d, is not reachable from the build machine)"),),
    sources=(SPEC, "_torch/models/modeling_auto.py", "llmapi/llm_args.py", "_torch/speculative/eagle3.py"),
    reads_ids=f"the launch option {LAUNCH_IDS} (never the drafter's config)",
    ids_path=(),
    cannot_compute=cannot_compute,
    default_rule=default_rule,
    launch_ids=LAUNCH_IDS,
    package="tensorrt_llm",
    launch=launching.trtllm,
)
