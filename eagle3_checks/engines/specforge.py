"""The flat layout's own meaning, as its trainers (EAGLE, SpecForge) compute it: the trainer reading of flat
checkpoints.

Mirrors SpecForge 0.2.0 (``modeling/draft/llama3_eagle.py``, the PyPI wheel) and the transformers ``LlamaConfig`` it
reads: head_dim as stated, else hidden_size / heads (whatever the ``model_type``: SpecForge builds a LlamaConfig);
rope from ``rope_parameters`` or ``rope_theta``/``rope_scaling``; the first layer's residual is the un-normed fc
output; later draft steps get the pre-norm layer output back; fc takes ``3 x target_hidden_size`` (default
hidden_size), with one ``fc_norm`` per aux state when ``fc_norm``. SpecForge's ``norm_output`` means "apply the
final norm before lm_head" (default True), not what speculators and SGLang mean by it. Fields SpecForge does not
have but the flat format states explicitly (``norm_before_fc``, ``norm_before_residual``, set by converters from
speculators) are taken as stated. Names are read leniently (``midlayer.`` or ``layers.0.``): this reading defines
the computation a drafter was trained to do, not one loader's quirks.
"""

from __future__ import annotations

from typing import Any

from ..drafter.checkpoint import Checkpoint
from ..drafter.families.mla import TRANSFORMERS
from ..drafter.layout import FLAT, MLA, has_qk_norm, str_list
from . import reader, reading
from .profile import Capture, Release, Target, input_of, output_of
from .reading import Reading, lookup
from .record import Branch, Call, Layer, Rule, Stop, Tensors, Value, Walk, const, layout_is, no, unknown

VERSION = "0.2.0"
RELEASED = "2026-08-10"  # its upload date on PyPI
NAME = "specforge"
# The releases whose reading of a flat checkpoint is known, oldest first, each difference one of SWITCHES.
# SpecForge writes no version into the configs it saves: which one trained a drafter is not in the checkpoint.
RELEASES = (
    Release("0.1.0", "2025-08-01", differs=(("rope_base_10000", True), ("no_eagle31", True)),
            why="before PR #270 (d3472dde, 2025-10-30) and #287 / #702: _init_rope builds every rotary embedding "
            "without a base, so 10000 whatever rope_theta says (specforge/modeling/draft/llama3_eagle.py in the "
            "0.1.0 sdist: rope_scaling null :248-252, default base :99; linear :256-261, :151; dynamic :262-267, "
            ":183), a llama3 rope_scaling as plain RoPE without its scaling (:268-272), and a rope_scaling "
            "without rope_type fails (:254-255, KeyError); no norm_output or fc_norm: the final norm always "
            "applies (:651-652) and the pre-norm state is fed back (core/eagle3.py:204-229)"),
    Release(VERSION, RELEASED, peer=True),
)
# Merged changes in no release on PyPI that change what a saved checkpoint means (a drafter trained from SpecForge's
# main branch after them): readings the trainer-release check states beside the releases', never the default one.
UNRELEASED = (
    Release("main after PR #879", "", differs=(("pr_879", True),),
            why="PR #879 (\"Fix eagle3/eagle3.1 hidden states normalisation\", opened 2026-09-15, after 0.2.0; its "
            "merged source is not reachable here, so this follows the PR's description): the final norm always "
            "applies before lm_head, norm_output true feeds the normed state back (EAGLE-3.1) and false the "
            "pre-norm one, and the default becomes false; in 0.2.0 norm_output false drops the final norm "
            "(llama3_eagle.py:1772-1776) and the pre-norm state is always fed back (algorithms/eagle3/"
            "model.py:386-400)"),
)

# How SpecForge 0.2.0 counted the aux ids of the drafters it trained: it captures the training states through SGLang's
# own target model (offline_capture/sglang_backend/capture.py:86-87 calls the target's set_eagle3_layers_to_capture),
# of the release it pins (METADATA: Requires-Dist sglang==0.5.14). SGLang 0.5.14 counts by the target's class:
SGLANG_PIN = "0.5.14"
# ... ids used raw (id L = the input of layer L) unless the first is 1, then +1:
FIRST_ID_RULE = {"DeepseekV2ForCausalLM": "sglang 0.5.14 srt/models/deepseek_v2.py:2799-2814",
                 "DeepseekV3ForCausalLM": "sglang 0.5.14 srt/models/deepseek_v2.py:2829 (a DeepseekV2ForCausalLM)",
                 "DeepseekV32ForCausalLM": "sglang 0.5.14 srt/models/deepseek_v2.py:2833 (a DeepseekV2ForCausalLM)",
                 "KimiK25ForConditionalGeneration": "sglang 0.5.14 srt/models/kimi_k25.py:834-845 (delegates to its "
                                                    "DeepseekV3ForCausalLM, :660)",
                 "Glm4MoeLiteForCausalLM": "sglang 0.5.14 srt/models/glm4_moe_lite.py:1023-1038"}
# ... every other class adds 1 (id X = the output of layer X), GPT-OSS included (0.5.23 counts GPT-OSS otherwise):
PLUS_ONE = ("sglang 0.5.14 srt/models/llama.py:812-824 (and qwen2.py:652-665, qwen3.py:692-705, "
            "gpt_oss.py:1273-1285)")
CONVENTION = (f"SpecForge {VERSION} captures its states through SGLang {SGLANG_PIN}'s target model "
              "(offline_capture/sglang_backend/capture.py:86-87), which counts by the target's class")


def capture(ids: list[int], target: Target | None) -> Capture:
    """The target layers whose outputs SpecForge 0.2.0 trained a drafter on, from the ids it was trained with: SGLang
    0.5.14's rule for the target's class. ``layers`` is None (with both ``outcomes``) when the target's class is
    unknown and the rules give different layers (a first id other than 1)."""
    plus, raw = output_of(sorted(set(ids))), input_of(sorted(set(ids)))
    arch = target.architecture if target is not None else None
    if arch is not None:
        if arch in FIRST_ID_RULE and not (ids and ids[0] == 1):
            return Capture(raw, f"{CONVENTION}: on {arch} the ids are used raw, id L = the input of layer L "
                           f"({FIRST_ID_RULE[arch]})")
        cite = FIRST_ID_RULE.get(arch, PLUS_ONE)
        return Capture(plus, f"{CONVENTION}: on {arch} id X = the output of layer X ({cite})")
    if not ids or ids[0] == 1:
        return Capture(plus, f"{CONVENTION}: id X = the output of layer X on every target class ({PLUS_ONE})")
    return Capture(None, f"{CONVENTION}, and the target's class is unknown (pass --target-config)", None,
                   ((f"Llama/Qwen-style and GPT-OSS targets (+1, {PLUS_ONE})", plus),
                    ("DeepSeek-V2/V3, Kimi-K2/K2.5, GLM-4-MoE-Lite targets (ids used raw when the first is not 1, "
                     f"{FIRST_ID_RULE['DeepseekV2ForCausalLM']})", raw)))


def _window(w: Walk) -> None:
    """SpecForge 0.2.0 trains an EAGLE-3 drafter with full causal attention whatever the config says: its mask is
    causal plus the draft diagonal (specforge/modeling/draft/flex_attention.py:108-127, generate_eagle3_mask;
    llama3_eagle.py:47-75 for the eager path); sliding_window and use_sliding_window are only carried over from the
    target's config (training/model_loading.py:65-66). A flat drafter converted from speculators (the switch
    ``speculators_meaning``) keeps speculators' meaning: the window its layer_types state, measured from the context
    row."""
    if w.switch("speculators_meaning"):
        reading.read_window(w.r, w.raw, "", "a speculators drafter (eagle3_checks_provenance): speculators' meaning "
                            "(0.9.0's models/eagle3/core.py:96-105, attention.py:16-19)", window_from="row")
    else:
        reading.no_window(w.r, "SpecForge 0.2.0 trains EAGLE-3 with full attention (specforge/modeling/draft/"
                          "flex_attention.py:108-127; sliding_window is carried, not used: "
                          "training/model_loading.py:65-66)")


def _rope_0_1_0(w: Walk) -> None:
    """SpecForge 0.1.0 (switch ``rope_base_10000``): every rotary embedding built without a base, a llama3
    rope_scaling as plain RoPE, a rope_scaling without rope_type a KeyError."""
    if not w.switch("rope_base_10000"):
        return
    r, raw = w.r, w.raw
    r.version = "0.1.0"
    kind = (r.rope_scaling or {}).get("rope_type")
    stated = raw.get("rope_scaling") if isinstance(raw.get("rope_scaling"), dict) else {}
    # transformers' LlamaConfig copies a legacy "type" to "rope_type" before SpecForge reads it
    if stated and not isinstance(stated.get("rope_type", stated.get("type")), str):
        r.refusals.append("SpecForge 0.1.0 reads rope_scaling[\"rope_type\"] (llama3_eagle.py:254-255): a "
                          "rope_scaling without it fails with a KeyError")
    r.set("rope_theta", 10000.0, "SpecForge 0.1.0: every rotary embedding built without a base, so 10000 "
          "whatever rope_theta says (llama3_eagle.py:248-272, :99, :151, :183)")
    if kind == "llama3":
        r.rope_scaling = None
        r.sources["rope_scaling"] = "SpecForge 0.1.0: a llama3 rope_scaling builds plain RoPE, its scaling " \
            "ignored (llama3_eagle.py:268-272)"


def _unreleased(w: Walk) -> None:
    """SpecForge's main branch after PR #879 (switch ``pr_879``): the reading is of that unreleased state."""
    if w.switch("pr_879"):
        w.r.version = UNRELEASED[0].version


def _qk_norm(w: Walk) -> None:
    archs = str_list(w.raw.get("architectures"))
    w.r.set("qk_norm", has_qk_norm(FLAT, reading.model_type_of(w.r, w.raw, "llama"), archs), "architectures")


def _fc_norm(w: Walk) -> None:
    raw, before = w.raw, w.switch("no_eagle31")
    w.r.set("fc_norm", raw.get("fc_norm") is True and not before,
            "SpecForge before b7ce50cd (0.1.0) has no fc_norm" if before and "fc_norm" in raw else
            "config.json: fc_norm" if "fc_norm" in raw else "default: False")


def _norms(w: Walk) -> None:
    """The final norm and the state fed back: speculators' meaning of norm_output (a converted speculators drafter),
    SpecForge's main branch after PR #879, SpecForge before b7ce50cd (no norm_output), or 0.2.0's."""
    r, raw, meaning = w.r, w.raw, w.switch("speculators_meaning")
    if meaning or w.switch("pr_879"):
        r.set("final_norm", True, "speculators applies the final norm before lm_head" if meaning else
              "SpecForge after PR #879: the final norm always applies")
        r.set("feedback", "normed" if raw.get("norm_output") is True else "prenorm",
              "config.json: norm_output (speculators' meaning, per eagle3_checks_provenance)" if meaning
              else "config.json: norm_output (after PR #879: true feeds the normed state back)" if "norm_output" in raw
              else "SpecForge after PR #879: norm_output defaults to false, the pre-norm state is fed back")
    elif w.switch("no_eagle31"):
        r.set("final_norm", True, "SpecForge before b7ce50cd (0.1.0) has no norm_output: the final norm always "
              "applies (0.1.0 llama3_eagle.py:651-652)")
        r.set("feedback", "prenorm", "SpecForge before b7ce50cd (0.1.0) feeds the pre-norm layer output back (0.1.0 "
              "core/eagle3.py:204-229)")
    else:
        final = raw.get("norm_output", True)
        r.set("final_norm", final is not False, "config.json: norm_output (SpecForge: final norm before lm_head)"
              if "norm_output" in raw else "SpecForge default: final norm before lm_head")
        r.set("feedback", "prenorm", "SpecForge feeds the pre-norm layer output back")


def _fc_inputs(w: Walk) -> None:
    _read_fc_inputs(w.r, w.ckpt, w.raw)


def _num_aux(w: Walk) -> None:
    _, nested, _ = lookup(w.raw, ("eagle_config", "eagle_aux_hidden_state_layer_ids"),
                          ("eagle_aux_hidden_state_layer_ids",))
    w.r.set("num_aux", len(nested) if isinstance(nested, list) and nested else 3,
            "config.json: aux-layer ids (count)" if isinstance(nested, list) and nested else "default: 3")


def _later_norm(w: Walk) -> None:
    w.r.sources["later_norm"] = "EAGLE/SpecForge (and vLLM): layers >= 1 are normed by input_layernorm"


def _mla(w: Walk) -> bool:
    return w.ckpt.family == MLA


def _mla_trainer(w: Walk) -> None:
    read_mla_trainer(w.ckpt, w.r, w.raw)


# Names are read leniently: every name that means a drafter tensor fills its role.
TENSORS = Tensors((Rule(unknown, "not a drafter tensor"),), "absent")

# The switches a reading takes (False: SpecForge 0.2.0 reading a drafter it trained): ``speculators_meaning``, the
# drafter was trained by speculators and converted to the flat layout (its norm_output means "feed the normed state
# back", its layer_types its window); ``rope_base_10000`` and ``no_eagle31``, what SpecForge computed before a change
# (engines.trainers.CHANGES; 0.1.0, RELEASES, before both); ``pr_879``, SpecForge's main branch after PR #879
# (UNRELEASED).
SWITCHES = (("speculators_meaning", False), ("rope_base_10000", False), ("no_eagle31", False), ("pr_879", False))

# One walk: the flat config as transformers' LlamaConfig reads it (SpecForge builds one), the EAGLE-3 flags, the
# draft vocabulary and fc's inputs, then every tensor by its role; an MLA drafter by read_mla_trainer.
STEPS = (
    Stop(no(layout_is(FLAT)), "the EAGLE/SpecForge reading is for flat configs"),
    Branch(_mla, (Call(_mla_trainer), TENSORS)),
    Layer((None, 2048, "transformers LlamaConfig")),
    Call(_window),
    Call(_rope_0_1_0),
    Call(_unreleased),
    Call(_qk_norm),
    Value("norm_before_residual", ("norm_before_residual",), False,
          "EAGLE/SpecForge: the residual is the un-normed fc output"),
    Value("input_norm", ("eagle_config.norm_before_fc", "norm_before_fc"), False, "EAGLE/SpecForge: none"),
    Call(_fc_norm),
    Call(_norms),
    const("lm_head_from_embed", False, "SpecForge trains a separate draft-vocabulary lm_head"),
    Call(_fc_inputs),
    Call(_num_aux),
    Call(_later_norm),
    TENSORS,
)


def read(ckpt: Checkpoint, target: Any = None, **switches: bool) -> Reading:
    """SpecForge's reading of a flat drafter: :data:`STEPS` walked by the one reader, with ``switches``
    (:data:`SWITCHES`; a release record's ``differs``)."""
    unknown_switches = set(switches) - dict(SWITCHES).keys()
    if unknown_switches:
        raise TypeError(f"not a SpecForge switch: {', '.join(sorted(unknown_switches))}")
    return reader.read(NAME, VERSION, STEPS, ckpt, target, switches={**dict(SWITCHES), **switches})


def _read_fc_inputs(r: Reading, ckpt: Checkpoint, raw: dict) -> None:
    """What fc and the vocabulary layers are built from, the same for every family the trainers build: fc's bias,
    the draft vocabulary, the width of the captured states, and the aux ids."""
    # EAGLE's own flat configs say "bias": true for fc's bias (SpecForge builds fc without one): the trained fc
    # has one exactly when the checkpoint carries fc.bias under that flag.
    r.set("fc_bias", raw.get("bias") is True and "fc.bias" in ckpt.roles,
          "config.json: bias, with fc.bias in the checkpoint" if raw.get("bias") is True else "no fc bias")
    reading.read_stated(r, raw, "draft_vocab_size", r.vocab_size, "default: vocab_size")
    reading.read_stated(r, raw, "target_hidden_size", r.hidden_size, "default: hidden_size")
    reading.read_aux_ids(r, raw, (("eagle_config", "eagle_aux_hidden_state_layer_ids"),
                                  ("eagle_aux_hidden_state_layer_ids",)), "no ids in the config")


def read_mla_trainer(ckpt: Checkpoint, r: Reading, raw: dict) -> Reading:
    """The trainer reading of an MLA drafter's config (its tensors are then taken as :data:`STEPS`' ``TENSORS``
    take them): what its config states, read as transformers 5.19's DeepSeek-V3 modules compute it
    (``DeepseekV3Attention`` and its yarn rope, MlaShape's reading "transformers"), in the EAGLE-3 layer every family
    shares. The flags mean what both serving engines' MLA classes take them to mean (the eagle3.1 variant, SGLang
    0.5.23 srt/models/kimi_k25_eagle3.py:9-15): ``fc_norm`` (or SGLang's legacy ``use_aux_norm``) norms each aux
    state before fc, ``norm_output`` feeds the normed state back (the final norm always applies);
    ``norm_before_residual``, ``norm_before_fc``, ``bias`` and the layer count are as stated. Names are read
    leniently."""
    r.engine, r.version = "transformers", "5.19.0"  # DeepSeek-V3's modules: what the config states
    reading.read_mla(r, raw, TRANSFORMERS, "the config as stated (transformers 5.19 DeepseekV3Attention)")
    r.set("qk_norm", False, "MLA attention")
    for name in ("attention_bias", "mlp_bias"):
        r.set(name, False, "MLA: no projection biases")
    r.set("o_bias", False, "MLA: o_proj has no bias")
    found, value, key = lookup(raw, ("norm_before_residual",))
    r.set("norm_before_residual", bool(value) if found else False,
          f"config.json: {key}" if found else "default: the residual is the un-normed fc output")
    found, value, key = lookup(raw, ("eagle_config", "norm_before_fc"), ("norm_before_fc",))
    r.set("input_norm", bool(value) if found else False, f"config.json: {key}" if found else "default: none")
    fc_norm = raw.get("fc_norm") is True or raw.get("use_aux_norm") is True
    r.set("fc_norm", fc_norm, "config.json: fc_norm / use_aux_norm" if "fc_norm" in raw or "use_aux_norm" in raw
          else "default: False")
    r.set("feedback", "normed" if raw.get("norm_output") is True else "prenorm",
          "config.json: norm_output (the eagle3.1 meaning: the normed state is fed back)" if "norm_output" in raw
          else "default: the pre-norm state is fed back")
    r.set("final_norm", True, "the final norm before lm_head")
    r.set("lm_head_from_embed", False, "a separate draft-vocabulary lm_head")
    _read_fc_inputs(r, ckpt, raw)
    cfg = ckpt.config
    num_aux = cfg.num_aux if cfg is not None else 3
    r.set("num_aux", num_aux, cfg.fields["num_aux"].source if cfg is not None else "default: 3")
    r.sources["later_norm"] = "layers >= 1 are normed by input_layernorm"
    return r
