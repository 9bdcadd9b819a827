"""SGLang 0.5.23's reading of an EAGLE-3 drafter (October 2026; files are ``sglang/srt/`` in the 0.5.23 wheel).

What changed from 0.5.6 (``sglang_0_5_6``), each read from the wheel:
- ``models/llama_eagle3.py``: ``num_hidden_layers`` layers (``:198-204``), layer 0 on
  ``cat(input_layernorm(embeds), hidden_norm(h))`` with a 2H q/k/v input, **later layers normed by hidden_norm**
  (``:97-105``; their ``input_layernorm`` is built but unused); names ``layers.N.*`` load natively and the legacy
  ``midlayer`` / ``aux_norm_low|mid|high`` are renamed ``layers.0`` / ``fc_norm.0|1|2`` (``:337-348``); fc takes
  ``target_hidden_size`` x (``num_aux_hidden_states``, else len(``eagle_config`` ids), else 3), with a bias when the
  config says ``"bias": true`` (``:151-167``); ``norm_before_fc`` (eagle_config first, then the top level) builds
  ``input_norm`` (``:169-182``); ``fc_norm`` or the legacy ``use_aux_norm`` builds one norm per aux state
  (``:184-196``); ``norm_output: true`` feeds the **normed** state back (``:207, 263-269``); an absent
  ``draft_vocab_size`` raises AttributeError under transformers 5.19, only an explicit null takes the target's lm_head
  (``:303-314``); a name that matches no parameter is still dropped silently (``:358-378``);
- ``models/llama.py:322-334``: the theta comes from ``rope_parameters`` (which transformers 5.19 always fills), so a
  config with its theta only there is read right; ``layers/rotary_embedding/factory.py:36-53, 311-332``: YaRN without
  ``original_max_position_embeddings`` is only warned about, and ``mscale`` / ``mscale_all_dim`` are honoured;
- ``models/registry.py:134-148``: ``Eagle3DeepseekV2ForCausalLM`` (``models/kimi_k25_eagle3.py``, MLA) is registered:
  :func:`read_mla`; ``configs/model_config.py:1032-1036``: a draft naming ``DeepseekV3ForCausalLM``
  is rewritten to the MTP class ``DeepseekV3ForCausalLMNextN``;
- aux ids: read from ``eagle_config`` only
  (``model_executor/model_runner_components/spec_aux_hidden_state.py:185-196``), then counted by the TARGET's rule:
  ``+1`` on Llama/Qwen targets (``models/llama.py:929-941``), ``+1`` only when the first id is 1 on DeepSeek-V2/V3,
  Kimi-K2/K2.5 and GLM-4-MoE-Lite (``models/deepseek_v2.py:3458-3473``, ``kimi_k25.py:928-939``,
  ``glm4_moe_lite.py:805-820``; SGLang PR #25454), raw when the largest id equals the layer count on GPT-OSS
  (``models/gpt_oss.py:1337-1352``, which also captures after its last layer).
Unchanged from 0.5.6: no speculators configs, no ``norm_before_residual``, q/k/v and MLP without bias, o_proj's bias
from ``attention_bias or bias``, ``hot_token_id = d2t + arange`` with t2d ignored, the target's embedding unless
``target_hidden_size`` differs from ``hidden_size``, silu only, the context-length refusal
(``configs/model_config.py:1291-1316``, against the context ``utils/hf_transformers/common.py:668-695`` derives from
the draft's config; engine.serving reports it, the reading does not refuse for it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..drafter.families.mla import YARN_DEFAULTS, MlaReader, number, yarn_get_mscale
from ..drafter.layout import FLAT, SPECULATORS, Name
from . import counting, reading
from . import launch as launching
from . import sglang_common as sglang
from .profile import Capture, Profile, Release, Target, input_of, output_of
from .reading import Reading, is_int
from .record import (
    Branch,
    Call,
    Count,
    Fact,
    Ids,
    Refuse,
    Rule,
    Source,
    Stop,
    Tensors,
    Value,
    Walk,
    all_of,
    also,
    any_of,
    const,
    fact_is,
    fc_norm_unbuilt,
    fmt,
    is_switch,
    layer_beyond,
    layout_is,
    model_type_of,
    name_ends,
    name_has,
    no,
    normed,
    normed_if_true,
    prefixed,
    reading_of,
    role_ends,
    role_is,
    stated,
    unknown,
)

VERSION = "0.5.23"
NAME = sglang.NAME
CITES = sglang.Cites(
    qk_norm=fmt("SGLang {release} builds Llama layers for LlamaForCausalLMEagle3 (no q/k norms)"),
    attention_bias="llama_eagle3.py:66-75 rebuilds q/k/v without bias",
    o_bias="srt/models/llama.py:216-222: o_proj bias = attention_bias or bias",
    mlp_bias="srt/models/llama.py:98-110: the MLP has no bias",
    fc_bias="llama_eagle3.py:163-167: fc bias = config bias",
    norm_before_residual=fmt("SGLang {release}: the residual is the un-normed fc output (no such flag)"),
    context_check="srt/configs/model_config.py:1291-1316",
    context_derive="srt/utils/hf_transformers/common.py:668-695",
    context_handoff="srt/speculative/eagle_worker_v2.py:222-232, managers/tp_worker.py:465-482",
    context_flag="srt/arg_groups/fields/model.py:110-117",
    embed_loader="srt/layers/vocab_parallel_embedding.py:436-447",
)
MLA_ARCHS = {"Eagle3DeepseekV2ForCausalLM"}
NEXTN_ARCHS = {"DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"}
# Target-model classes SGLang registers under the same names (srt/models/*.py EntryClass): a drafter naming one is
# built as that plain model, not as a drafter.
TARGET_CLASSES = {"LlamaForCausalLM": "srt/models/llama.py:968-973", "Qwen2ForCausalLM": "srt/models/qwen2.py:797",
                  "Qwen3ForCausalLM": "srt/models/qwen3.py:808"}
# Legacy tensor names renamed by substring before the lookup (llama_eagle3.py:337-348).
LEGACY_NAMES = {"aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1", "aux_norm_high": "fc_norm.2"}
# Target classes whose set_eagle3_layers_to_capture adds 1 only when the first id is 1 (otherwise ids are used raw).
FIRST_ID_RULE = {"DeepseekV2ForCausalLM": "models/deepseek_v2.py:3458-3473",
                 "DeepseekV3ForCausalLM": "models/deepseek_v2.py:3458-3473",
                 "DeepseekV32ForCausalLM": "models/deepseek_v2.py:3458-3473",
                 "KimiK25ForConditionalGeneration": "models/kimi_k25.py:928-939 -> deepseek_v2.py:3458-3473",
                 "Glm4MoeLiteForCausalLM": "models/glm4_moe_lite.py:805-820"}
GPT_OSS = {"GptOssForCausalLM": "models/gpt_oss.py:1337-1352"}
GPT_OSS_0_5_14 = "0.5.14 models/gpt_oss.py:1273-1285, always +1; its forward captures layer inputs only (:692-697)"
PLUS_ONE = "models/llama.py:929-941 (and qwen3.py:778-791, qwen3_moe.py:1128-1143)"
# The worker replaces a drafter's embedding with the target's after load, unless the drafter states a
# target_hidden_size other than its hidden_size (speculative/eagle_worker_v2.py:353-363, models/llama.py:910-924).
AFTER_LOAD = reading.AFTER_LOAD  # what serving does to a parameter once the loader is done
TARGET_EMBED = "the target's embedding serves instead: set_embed after load (eagle_worker_v2.py:353-363)"
MLA_FILE = "srt/models/kimi_k25_eagle3.py"


def _no_class(w: Walk) -> str:
    archs = w.facts["archs"]
    nextn = [a for a in archs if a in NEXTN_ARCHS]
    target_cls = [a for a in archs if a in TARGET_CLASSES]
    if nextn:
        return (f"architectures {archs}: SGLang {w.release} rewrites {nextn[0]} to DeepseekV3ForCausalLMNextN, an MTP "
                f"head, not an EAGLE-3 drafter ({w.lines}configs/model_config.py:1032-1036)")
    if target_cls:
        return (f"architectures {archs}: SGLang {w.release} builds {target_cls[0]}, the target model's own class "
                f"({TARGET_CLASSES[target_cls[0]]}), from the drafter's weights: no fc, no aux-state input; the "
                "drafter's tensors find no parameter (\"Parameter ... not found in params_dict\", "
                f"{w.lines}llama.py:772-779) and the drafter fails to serve (its EAGLE-3 class is "
                "LlamaForCausalLMEagle3)")
    return (f"SGLang {w.release}'s Llama-layer EAGLE-3 class is LlamaForCausalLMEagle3; architectures {archs} falls "
            f"to the Transformers backend, which raises \"Cannot find model module\" ({w.lines}model_loader/utils.py:"
            "224-231)")


def _fc_norm(cite: str, default: str) -> Value:
    """fc_norm, or the legacy use_aux_norm: one norm per aux state."""
    return Value("fc_norm", (), lambda w: bool(w.raw.get("fc_norm") or w.raw.get("use_aux_norm")),
                 lambda w: cite if "fc_norm" in w.raw or "use_aux_norm" in w.raw else default)


def _legacy_name(w: Walk, name: str, n: Name) -> Name:
    """llama_eagle3.py:337-348: aux_norm_low/mid/high are renamed fc_norm.0/1/2 by substring."""
    for legacy, new in LEGACY_NAMES.items():
        if legacy in name and n.role is None:
            return dataclasses.replace(n, role=name[name.index(legacy):].replace(legacy, new))
    return n


def _set_embed(w: Walk) -> None:
    """Loaded, then set_embed replaces it (the loader still checks its shape first)."""
    r = w.r
    for name in [n for n, why in r.ignored.items() if why == TARGET_EMBED]:
        r.replaced[name] = r.ignored.pop(name)
    sglang.replaced_embedding(CITES, list(r.replaced), w)


def _loaded(w: Walk) -> None:
    _set_embed(w)
    r = w.r
    for role in [x for x in r.tensors if x.endswith("input_layernorm.weight") and not x.startswith("layers.0.")]:
        r.unused[role] = ("loaded into a norm SGLang 0.5.23 never uses: layers >= 1 are normed by hidden_norm "
                          "(llama_eagle3.py:103-105)")


def _heads(w: Walk, no_vocab: bool, why: str) -> None:
    """After load: no embedding slot left unfilled where set_embed puts the target's; a tied lm_head is the embedding
    set_embed replaces; ``no_vocab``: the lm_head the target's (load_lm_head_from_target)."""
    r, tied = w.r, w.facts["tied"]
    if r.replaced:
        r.unfilled.pop("embed_tokens.weight", None)
    if tied and not w.facts["own_embed"]:
        r.unfilled["lm_head.weight"] = (AFTER_LOAD + "the target's embedding (tied: lm_head is the embedding "
                                        "set_embed replaces)")
    if no_vocab and not tied:
        r.unfilled["lm_head.weight"] = why


def _after_llama(w: Walk) -> None:
    _heads(w, w.raw.get("draft_vocab_size") is None and "draft_vocab_size" in w.raw,
           "the target's lm_head (load_lm_head_from_target: draft_vocab_size null)")


def _after_mla(w: Walk) -> None:
    _heads(w, not is_int(w.raw.get("draft_vocab_size")),
           f"the target's lm_head (load_lm_head_from_target: no draft_vocab_size, {MLA_FILE}:355-358)")


def _simple_yarn(w: Walk) -> None:
    if not w.switch("yarn_mscale") and sglang.is_yarn(w):
        sglang.simple_yarn(w.r, "0.5.14 layers/rotary_embedding/factory.py:242-247, yarn.py:94")


def _mla_yarn(params: dict[str, Any], rope_type: str, max_pos: int) -> tuple[dict[str, float], dict]:
    """SGLang 0.5.23: SG23/models/deepseek_v2.py:2064-2178, layers/rotary_embedding/factory.py:371-401."""
    who = "SGLang 0.5.23 (deepseek_yarn)"
    scaling = {"factor": number(params, "factor", 1.0, who),
               "original_max_position_embeddings": number(params, "original_max_position_embeddings", max_pos, who)}
    for key, default in YARN_DEFAULTS.items():
        scaling[key] = number(params, key, default, who)
    knobs: dict[str, Any] = {
        "softmax_mscale": bool(params.get("apply_yarn_scaling", True)) and bool(params.get("apply_scale", True)),
        "yarn_extrapolation_factor": number(params, "extrapolation_factor", 1.0, who)}
    attn_factor = number(params, "attn_factor", 1.0, who)
    if attn_factor != 1.0:
        f = scaling["factor"]
        knobs["rope_attention_factor"] = (yarn_get_mscale(f, scaling["mscale"])
                                          / yarn_get_mscale(f, scaling["mscale_all_dim"]) * attn_factor)
    return scaling, knobs


# How 0.5.23 builds the MLA attention: its own yarn reading, rope_interleave as stated, the latent norms at
# rms_norm_eps.
_LATENT = fmt("SGLang {release} norms the latent with rms_norm_eps ({lines}srt/models/deepseek_v2.py:2077, 2163: "
              "RMSNorm(..., eps=config.rms_norm_eps))")
MLA_READER = MlaReader("sglang", _mla_yarn, latent_source=_LATENT)


def _read_mla(w: Walk) -> None:
    reading.read_mla(w.r, w.raw, MLA_READER, f"SGLang {w.release} ({w.lines}{MLA_FILE}:80-107, DeepseekV2AttentionMLA)")
    w.r.sources["latent_norm_eps"] = w.say(_LATENT)


def _own_mla_embed(w: Walk) -> bool:
    return is_int(w.raw.get("target_hidden_size")) and w.raw["target_hidden_size"] != w.r.hidden_size


def _kv_b_fp8(w: Walk) -> bool:
    return w.r.mla is not None and any(w.ckpt.tensors[n].dtype.startswith("F8") for n in w.ckpt.tensors
                                       if n.endswith("self_attn.kv_b_proj.weight"))


def _unpaired(w: Walk, name: str, n: Name) -> bool:
    """q_a_proj or kv_a_proj_with_mqa without its partner: cached and never loaded."""
    if not (n.role or "").endswith(("self_attn.q_a_proj.weight", "self_attn.kv_a_proj_with_mqa.weight")):
        return False
    partner = name.replace("kv_a_proj_with_mqa", "q_a_proj") if "kv_a_proj_with_mqa" in name else \
        name.replace("q_a_proj", "kv_a_proj_with_mqa")
    return partner not in w.ckpt.tensors


_SETS_CAPTURE = "SGLang: the target's set_eagle3_layers_to_capture decides (see engine.aux-layers)"
_SKIPPED = ("skipped with a warning: no such parameter (\"Eagle3 MLA: skipping unexpected weight\", "
            f"{MLA_FILE}:494-496)")
_NOT_EMBED = also(lambda w: not w.facts["own_embed"])

# SGLang 0.5.23's MLA drafter, Eagle3DeepseekV2ForCausalLM (srt/models/kimi_k25_eagle3.py, "EAGLE3 / EAGLE3.1 draft
# model with MLA attention for Kimi-K2.x"): one layer, DeepSeek-V2 MLA attention (DeepseekV2AttentionMLA) whose fused
# q_a/kv_a projection is rebuilt for the 2H input. One walk in the order kimi_k25_eagle3.py builds and loads it.
MLA_STEPS = (
    const("architecture", "Eagle3DeepseekV2ForCausalLM", "config.json: architectures"),
    model_type_of("llama"),
    Call(_read_mla),
    Refuse(lambda w: w.r.mla is not None and w.r.mla.q_lora_rank is None,
           f"q_lora_rank is null: SGLang raises \"Eagle3 MLA layer requires q_lora_rank in the draft config\" "
           f"({MLA_FILE}:113-117); its MLA drafter has no q_proj path", at="q_lora_rank"),
    Refuse(lambda w: w.r.num_layers != 1, lambda w: f"num_hidden_layers {w.r.num_layers} "
           f"({w.r.sources.get('num_layers', '?')}): SGLang raises \"EAGLE3 currently only supports 1 layer\" "
           f"({MLA_FILE}:243-244)", at="num_hidden_layers"),
    Refuse(lambda w: w.r.hidden_act != "silu", fmt("SGLang raises \"Unsupported activation: {r.hidden_act}\" "
                                                   "(models/deepseek_v2.py:330-333 DeepseekV2MLP)")),
    Fact("built", lambda w: not w.r.refusals),  # the constructor raised: nothing is loaded
    const("qk_norm", False, "MLA attention (no q/k norms)"),
    const("attention_bias", False, "models/deepseek_v2.py DeepseekV2AttentionMLA: no projection bias"),
    const("o_bias", False, "models/deepseek_v2.py DeepseekV2AttentionMLA: o_proj has no bias"),
    const("mlp_bias", False, "models/deepseek_v2.py:308, 316 DeepseekV2MLP: no bias"),
    Value("fc_bias", ("bias",), False, f"SGLang default: no fc bias ({MLA_FILE}:215)", take=lambda v: v is True,
          says=f"config.json: bias ({MLA_FILE}:212-219: fc bias = config.bias)"),
    const("norm_before_residual", False, fmt("SGLang {release}: the residual is the un-normed fc output ({lines}"
                                             + MLA_FILE + ":159; norm_before_residual is not read)")),
    const("input_norm", False, f"{MLA_FILE} builds no input_norm (norm_before_fc is not read)"),
    _fc_norm(f"config.json: fc_norm / use_aux_norm ({MLA_FILE}:228-241)",
             f"SGLang default: no fc_norm ({MLA_FILE}:230-232)"),
    Value("feedback", ("norm_output",), "prenorm", f"SGLang default: the pre-norm state is fed back ({MLA_FILE}:255, "
          "311)", take=normed, says=f"config.json: norm_output ({MLA_FILE}:253-255, 311)"),
    const("final_norm", True, f"{MLA_FILE}:308-311: the final norm before lm_head"),
    const("later_norm", "input_layernorm", f"{MLA_FILE}:243-244: one layer only"),
    # fc's width: eagle_config's ids, else the top-level ids, else 3; num_aux_hidden_states is not read (:48-59, 211)
    Count((Source("list", "eagle_config.eagle_aux_hidden_state_layer_ids",
                  f"config.json: eagle_config.eagle_aux_hidden_state_layer_ids (count, {MLA_FILE}:48-59)"),
           Source("list", "eagle_aux_hidden_state_layer_ids", "config.json: eagle_aux_hidden_state_layer_ids (count: "
                  f"SGLang's MLA drafter falls back to the top-level ids, {MLA_FILE}:55-56)")),
          3, f"SGLang default: 3 ({MLA_FILE}:57-58; num_aux_hidden_states is not read)"),
    Ids(("eagle_config.eagle_aux_hidden_state_layer_ids",), "SGLang default layers (no ids in eagle_config; a "
        "top-level list is not read: spec_aux_hidden_state.py:185-196)"),
    const("aux_convention", "sglang", _SETS_CAPTURE),
    stated("target_hidden_size", reading_of("hidden_size"),
           f"SGLang: hidden_size (target_hidden_size absent or null, {MLA_FILE}:208-210)"),
    Fact("tied", lambda w: w.raw.get("tie_word_embeddings") is True),
    Value("lm_head_from_embed", (), lambda w: w.facts["tied"],
          lambda w: f"config.json: tie_word_embeddings ({MLA_FILE}:352-353)" if w.facts["tied"] else "untied"),
    Fact("own_embed", _own_mla_embed),  # set_embed keeps it (:404-411)
    stated("draft_vocab_size", reading_of("vocab_size"),
           f"SGLang: vocab_size, lm_head from the target ({MLA_FILE}:351-358)"),
    Refuse(_kv_b_fp8, f"kv_b_proj is fp8: SGLang raises NotImplementedError (\"Eagle3 MLA draft post_load_weights "
           f"only supports float dtypes\", {MLA_FILE}:511-515)"),
    Call(sglang.read_context),  # engine.serving's verdict on the served context (context_refusal)
    Stop(lambda w: not w.facts["built"], layout=False),
    Tensors((
        Rule(any_of(lambda w, name, n: name == "d2t", name_ends(".d2t")), load=True, role=lambda w, name, n: "d2t"),
        Rule(any_of(lambda w, name, n: name == "t2d", name_ends(".t2d")), f"SGLang ignores t2d ({MLA_FILE}:442-443)"),
        Rule(any_of(unknown, prefixed), _SKIPPED),
        Rule(lambda w, name, n: n.layer is not None and n.layer >= 1,
             f"{_SKIPPED}; its MLA drafter has one layer, midlayer (layers.0)"),
        Rule(_unpaired, f"cached and never loaded: SGLang fuses q_a_proj with kv_a_proj_with_mqa only when both are "
             f"present ({MLA_FILE}:467-492)"),
        Rule(role_ends("self_attn.q_proj.weight"), f"{_SKIPPED} (it builds q_a_proj / q_b_proj)"),
        Rule(all_of(role_is("fc.bias"), also(lambda w: not w.r.fc_bias)),
             f"{_SKIPPED} (fc has a bias only with \"bias\": true, {MLA_FILE}:215)"),
        Rule(role_is("input_norm.weight"), _SKIPPED),
        Rule(fc_norm_unbuilt, _SKIPPED),
        Rule(all_of(role_is("embed_tokens.weight"), _NOT_EMBED), TARGET_EMBED),
        Rule(all_of(role_is("lm_head.weight"), also(fact_is("tied"))),
             f"{_SKIPPED} (tied: lm_head is the embedding, {MLA_FILE}:352-353)"),
    ), f"ones or uninitialised memory (SGLang's MLA loader warns about what it skips and never says what it left "
       f"unloaded, {MLA_FILE}:428-501)", narrows=True, loaded=_set_embed),
    Call(_after_mla),
)

# One walk, in the order SGLang 0.5.23's loader reads the config (srt/models/llama_eagle3.py, llama.py; the file:line
# of each step beside it), then its load_weights.
WINDOW_OPTION = "speculative-draft-window-size"


def _window(w: Walk) -> None:
    """SGLang 0.5.23 reads no layer_types or sliding_window of the drafter (srt/models/llama.py reads neither); the
    drafter's attention slides only when the launch gives ``--speculative-draft-window-size N``, set on every layer
    (srt/models/llama_eagle3.py:284-299; validated at arg_groups/speculative_hook.py:197-219; 0.5.14's
    llama_eagle3.py:259-271 alike). A key at most N positions before the query is attended
    (layers/attention/torch_native_backend.py:36-48: k >= q - N): N + 1 keys, the query included, so a drafter
    trained with a window of W tokens is served alike with N = W - 1."""
    given: dict = w.launch or {}
    args: dict = given["args"] if isinstance(given.get("args"), dict) else given
    n = args.get(WINDOW_OPTION, args.get(WINDOW_OPTION.replace("-", "_")))
    r = w.r
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        r.sliding_window, r.window_layers = n + 1, tuple(range(r.num_layers))
        r.sources["sliding_window"] = (f"the launch's --{WINDOW_OPTION} {n}: keys within {n} positions of the query "
                                       "(srt/models/llama_eagle3.py:284-299, torch_native_backend.py:36-48)")
    else:
        reading.no_window(r, f"SGLang {w.release} ignores the drafter's layer_types and sliding_window (srt/models/"
                          f"llama.py reads neither); without --{WINDOW_OPTION} it serves full attention "
                          f"({w.lines}srt/models/llama_eagle3.py:284-299)")


STEPS = (
    Stop(layout_is(SPECULATORS), fmt("SGLang {release} reads flat configs only (speculators_config and "
         "transformer_layer_config appear nowhere in srt/); a speculators config is not loadable")),
    sglang.ARCHITECTURE,
    Branch(lambda w: any(a in MLA_ARCHS for a in w.facts["archs"]), MLA_STEPS),
    Refuse(lambda w: "LlamaForCausalLMEagle3" not in w.facts["archs"], _no_class, architecture=True),
    # the config class's defaults (llama.py:196-198, 336); transformers 5.19 standardizes rope_parameters and
    # llama.py:322-334 reads them first; LlamaMLP (llama.py:116-119) raises for any activation but silu
    *sglang.llama_layer(legacy_rope=False, silu_cite="; llama.py:116-119"),
    Call(_window),
    const("later_norm", "hidden_norm", fmt("SGLang {release} ({lines}llama_eagle3.py:103-105): layers >= 1 are normed "
                                           "by hidden_norm"),
          when=lambda w: w.r.num_layers > 1),
    *sglang.biases(CITES),
    const("input_norm", False, fmt("SGLang {release} has no norm_before_fc: 0.5.14's llama_eagle3.py:141-183 builds "
                                   "no input_norm"),
          when=no(is_switch("norm_before_fc"))),
    Value("input_norm", ("eagle_config.norm_before_fc", "norm_before_fc"), False, "SGLang default: no norm_before_fc",
          says=fmt("config.json: {key} (llama_eagle3.py:169-182)"), when=is_switch("norm_before_fc")),
    Call(_simple_yarn),
    _fc_norm("config.json: fc_norm / use_aux_norm (llama_eagle3.py:184-196)", "SGLang default: no fc_norm"),
    Value("feedback", ("norm_output",), "prenorm", "SGLang default: the pre-norm state is fed back",
          take=normed_if_true,
          says="config.json: norm_output (llama_eagle3.py:207, 267-269)"),
    const("final_norm", True, "SGLang applies the final norm before lm_head"),
    Count((Source("int", "num_aux_hidden_states", "config.json: num_aux_hidden_states (llama_eagle3.py:156-161)"),
           Source("len", "eagle_config.eagle_aux_hidden_state_layer_ids",
                  "config.json: eagle_config.eagle_aux_hidden_state_layer_ids (count)")),
          3, "SGLang default: 3 (llama_eagle3.py:156-161 counts num_aux_hidden_states or eagle_config's ids, never "
          "the top-level ones)"),
    Ids(("eagle_config.eagle_aux_hidden_state_layer_ids",), "SGLang default layers (no ids in eagle_config; a "
        "top-level list is not read: spec_aux_hidden_state.py:185-196)"),
    const("aux_convention", "sglang", _SETS_CAPTURE),
    *sglang.fc_input_and_embedding(" (llama_eagle3.py:151-154, 163-164)"),  # own_embed: models/llama.py:910-924
    Refuse(lambda w: not w.facts["tied"] and "draft_vocab_size" not in w.raw,
           "config.json has no draft_vocab_size: llama_eagle3.py:306 reads config.draft_vocab_size directly and "
           "transformers 5.19 raises AttributeError (only an explicit null takes the target's lm_head)",
           at="draft_vocab_size"),
    stated("draft_vocab_size", reading_of("vocab_size"), "SGLang: vocab_size (lm_head from the target)"),
    # the context a target (or --context-length) must not exceed: engine.serving's verdict (context_refusal)
    Call(sglang.read_context),
    Tensors((
        Rule(name_has("d2t"), load=True, role=lambda w, name, n: "d2t"),
        Rule(name_has("t2d"), "SGLang ignores t2d"),
        Rule(unknown, "dropped silently: SGLang has no such parameter (llama_eagle3.py:358-378)"),
        Rule(all_of(prefixed, role_is("lm_head.weight")),
             "dropped silently: SGLang looks for lm_head.weight or model.lm_head.weight as a parameter"),
        Rule(layer_beyond, fmt("dropped silently: SGLang builds {r.num_layers} layer(s)")),
        Rule(any_of(all_of(role_ends("o_proj.bias"), also(lambda w: bool(w.r.o_bias))),
                    all_of(role_is("fc.bias"), also(lambda w: w.r.fc_bias))), load=True),
        Rule(role_ends(".bias", "q_norm.weight", "k_norm.weight"),
             "dropped silently: SGLang 0.5.23 builds no such parameter"),
        Rule(all_of(role_is("embed_tokens.weight"), _NOT_EMBED), TARGET_EMBED),
        Rule(all_of(role_is("input_norm.weight"), also(lambda w: not w.r.input_norm)),
             "dropped silently: no input_norm without norm_before_fc"),
        Rule(fc_norm_unbuilt, "dropped silently: no such fc_norm"),
        Rule(all_of(role_is("lm_head.weight"), also(fact_is("tied"))),
             "dropped: with tie_word_embeddings lm_head is the embedding"),
    ), "ones or uninitialised memory (SGLang drops and leaves parameters without a word; layers/layernorm.py:481 "
       "starts norms at ones)", narrows=True, rename=_legacy_name, loaded=_loaded),
    Call(_after_llama),
)


def _rule(ids: list[int], target: Target | None, gpt_oss_raw: bool = True) -> tuple[str, str] | None:
    """('raw' or 'plus_one', cite) on a known target class; None when the target is unknown."""
    if target is None or target.architecture is None:
        return None
    arch = target.architecture
    if arch in FIRST_ID_RULE:
        return ("plus_one" if ids and ids[0] == 1 else "raw"), FIRST_ID_RULE[arch]
    if arch in GPT_OSS and gpt_oss_raw:
        n = target.num_layers
        return ("raw" if n is not None and ids and max(ids) == n else "plus_one"), GPT_OSS[arch]
    if arch in GPT_OSS:
        return "plus_one", GPT_OSS_0_5_14
    return "plus_one", PLUS_ONE


def _last_id(kind: str, target: Target, gpt_oss_raw: bool = True) -> int | None:
    n = target.num_layers
    if n is None:
        return None
    end_capture = target.architecture in GPT_OSS and gpt_oss_raw  # gpt_oss.py also captures after its last layer
    return (n if end_capture else n - 1) if kind == "raw" else (n - 1 if end_capture else n - 2)


def capture(ids: list[int], target: Target | None, gpt_oss_raw: bool = True) -> Capture:
    """The target layers SGLang 0.5.23 captures from explicit ids: the TARGET class decides how to count.
    ``gpt_oss_raw`` False: 0.5.14's GPT-OSS, which always adds 1 and captures layer inputs only."""
    rule = _rule(ids, target, gpt_oss_raw)
    if rule is None:
        plus, raw = output_of(sorted(set(ids))), input_of(sorted(set(ids)))
        if plus == raw:
            return Capture(plus, "SGLang 0.5.23 (any target)")
        first = "first id 1: +1 as well" if ids and ids[0] == 1 else "ids used raw"
        outcomes = [(f"Llama/Qwen-style targets (+1, {PLUS_ONE})", plus)]
        if ids and ids[0] != 1:
            outcomes.append(("DeepSeek-V2/V3, Kimi-K2/K2.5, GLM-4-MoE-Lite targets (ids used raw when the first "
                             "is not 1, deepseek_v2.py:3458-3473)", raw))
        return Capture(None if len(outcomes) > 1 else plus, f"SGLang 0.5.23 counts by the target's class ({first} on "
                       "DeepSeek-style targets)", None, tuple(outcomes))
    kind, cite = rule
    assert target is not None  # a rule comes from the target's class
    layers = output_of(sorted(set(ids))) if kind == "plus_one" else input_of(sorted(set(ids)))
    how = ("adds 1: id X is the output of layer X" if kind == "plus_one"
           else "uses the ids raw: id L is the input of layer L")
    return Capture(layers, f"SGLang 0.5.23 on {target.architecture} {how} ({cite})",
                   _last_id(kind, target, gpt_oss_raw))


def ids_for(layers: tuple[int, ...], target: Target | None) -> list[int] | None:
    """The ids that would make SGLang 0.5.23 capture ``layers`` on this target: raw on a first-id-rule target, the
    +1 ids otherwise (which every class counts alike when the first is 1). engines.ids_where_read reads them back
    through :func:`capture` and writes none that miss: on a first-id-rule target the output of layer 0 is
    unreachable (id 1 switches to the +1 path), and with the target's class unknown ids whose first is not 1 count
    differently by class."""
    if target is not None and target.architecture in FIRST_ID_RULE:
        return [x + 1 for x in layers]
    return list(layers)


def cannot_compute(trained: Reading) -> list[str]:
    """What SGLang 0.5.23 has no parameter or flag for: q/k/v and MLP biases, norm_before_residual, Qwen3 q/k norms
    (llama_eagle3.py:66-75, 97-99); and later layers normed by input_layernorm, as every trainer does (it norms
    them with hidden_norm, :103-105)."""
    return [name for name, on in (("more than one layer (SGLang 0.5.23 norms layers >= 1 with hidden_norm)",
                                   trained.num_layers != 1 and trained.later_norm != "hidden_norm"),
                                  ("attention or MLP biases", trained.attention_bias or trained.mlp_bias),
                                  ("norm_before_residual", trained.norm_before_residual),
                                  ("Qwen3 q/k norms", trained.qk_norm)) if on]


# The releases this reading holds for, each recorded (conformance/run.sh) and held to it by the default test run.
RELEASES = (
    Release("0.5.14", "2026-06-26", recorded="2026-12-06",
            differs=(("norm_before_fc", False), ("yarn_mscale", False), ("gpt_oss_raw", False)),
            why="the release SpecForge 0.2.0 pins; models/llama_eagle3.py:141-183 builds no input_norm (norm_before_fc "
            "is not read; input_norm.weight is dropped silently, :342-350); YaRN reads factor, extrapolation_factor, "
            "attn_factor, beta_fast and beta_slow only (layers/rotary_embedding/factory.py:242-247, yarn.py:94); "
            "GPT-OSS targets always add 1 (models/gpt_oss.py:1273-1285) and capture layer inputs only (:692-697). "
            "Its aux ids come from eagle_config only, inline in model_executor/model_runner.py:458-472, and it "
            "already has the DeepSeek first-id rule (models/deepseek_v2.py:2799-2814)"),
    Release("0.5.20", "2026-09-18", recorded="2026-12-06",
            why="as 0.5.23: models/llama_eagle3.py and kimi_k25_eagle3.py differ only in imports, layer_stack and the "
            "parallel spec, gpt_oss.py counts and captures as 0.5.23 (:1349-1364, :739-757); its runner sets up its "
            "process group with distributed/bootstrap.py:70-172 init_torch_distributed, without launcher placement"),
    Release("0.5.21", "2026-10-01", recorded="2026-12-06",
            why="as 0.5.23: its models/llama_eagle3.py differs from 0.5.20's only in taking the pipeline group from "
            "runtime_context.get_parallel (:41, :273), from 0.5.22's by the layer_stack and stage_boundaries 0.5.22 "
            "adds; kimi_k25_eagle3.py is 0.5.22's; gpt_oss.py counts and captures as 0.5.20 (:1324-1339, :724-744) "
            "(diffed wheel against wheel)"),
    Release("0.5.22", "2026-10-16", recorded="2026-12-03",
            why="as 0.5.23: its models/llama_eagle3.py and kimi_k25_eagle3.py differ from 0.5.23's only by the "
            "draft_parallel_spec attribute 0.5.23 adds (diffed wheel against wheel)"),
    Release(VERSION, "2026-10-30", recorded="2026-12-06"),
)

PROFILE = Profile(
    NAME, VERSION, STEPS, capture, ids_for,
    module=__name__, takes=(("norm_before_fc", True), ("yarn_mscale", True)),
    releases=RELEASES,
    narrows_at="srt/layers/linear.py:739, 840-868 (narrow, no size check)",
    families=("llama", "mla"),
    sources=("srt/models/llama_eagle3.py", MLA_FILE, "srt/models/llama.py", "srt/models/deepseek_v2.py",
             "srt/models/gpt_oss.py", "srt/model_executor/model_runner_components/spec_aux_hidden_state.py",
             "srt/speculative/eagle_worker_v2.py", "srt/configs/model_config.py",
             "srt/layers/rotary_embedding/factory.py"),
    reads_ids="eagle_config.eagle_aux_hidden_state_layer_ids",
    ids_path=("eagle_config", "eagle_aux_hidden_state_layer_ids"),
    serving=sglang.context_refusal(CITES),
    cannot_compute=cannot_compute,
    launch=launching.sglang,
    converts_to=FLAT,
    launch_window=WINDOW_OPTION,
    d2t_past_vocab="SGLang {release} maps draft id i to d2t[i] + i (0.5.23's srt/models/llama_eagle3.py:350-352, "
    "hot_token_id) and drafts those ids (speculative/eagle_worker_v2.py:757-758, 810-822): ids past the target "
    "vocabulary, which the next draft step embeds out of range",
    counting=counting.SGLANG,
)
