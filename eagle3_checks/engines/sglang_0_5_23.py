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

from typing import Any

from ..drafter.checkpoint import Checkpoint
from ..drafter.layout import FLAT
from . import launch as launching
from . import reading
from .profile import Capture, Profile, Release, Target, input_of, output_of
from .reading import Reading, is_int, lookup
from .sglang_0_5_6 import (
    check_replaced_embedding,
    context_refusal,
    flat_reading,
    read_biases,
    read_context,
    read_fc_input_and_embedding,
    read_llama_layer,
    simple_yarn,
)

VERSION = "0.5.23"
NAME = "sglang"
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
AFTER_LOAD = "after load, the worker puts "  # what serving does to a parameter once the loader is done
TARGET_EMBED = "the target's embedding serves instead: set_embed after load (eagle_worker_v2.py:353-363)"


WINDOW_OPTION = "speculative-draft-window-size"


def window(r: Reading, launch: dict | None) -> None:
    """SGLang 0.5.23 reads no layer_types or sliding_window of the drafter (srt/models/llama.py reads neither); the
    drafter's attention slides only when the launch gives ``--speculative-draft-window-size N``, set on every layer
    (srt/models/llama_eagle3.py:284-299; validated at arg_groups/speculative_hook.py:197-219; 0.5.14's
    llama_eagle3.py:259-271 alike). A key at most N positions before the query is attended
    (layers/attention/torch_native_backend.py:36-48: k >= q - N): N + 1 keys, the query included, so a drafter
    trained with a window of W tokens is served alike with N = W - 1."""
    given: dict = launch or {}
    args: dict = given["args"] if isinstance(given.get("args"), dict) else given
    n = args.get(WINDOW_OPTION, args.get(WINDOW_OPTION.replace("-", "_")))
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        r.sliding_window, r.window_layers = n + 1, tuple(range(r.num_layers))
        r.sources["sliding_window"] = (f"the launch's --{WINDOW_OPTION} {n}: keys within {n} positions of the query "
                                       "(srt/models/llama_eagle3.py:284-299, torch_native_backend.py:36-48)")
    else:
        reading.no_window(r, "SGLang 0.5.23 ignores the drafter's layer_types and sliding_window (srt/models/llama.py "
                          f"reads neither); without --{WINDOW_OPTION} it serves full attention "
                          "(srt/models/llama_eagle3.py:284-299)")


# One flat walk, in the order SGLang's own loader reads the config (its file:line sources beside each step), so
# that it can be held to the engine's source line by line: not split for the complexity count.
def read(ckpt: Checkpoint, target: Any = None, norm_before_fc: bool = True,  # noqa: C901
         yarn_mscale: bool = True, launch: dict | None = None) -> Reading:
    """``norm_before_fc`` / ``yarn_mscale`` False: what 0.5.14 does otherwise (:data:`RELEASES`): no input_norm, and
    a YaRN rope_scaling's mscale / mscale_all_dim ignored."""
    r, archs = flat_reading(ckpt, VERSION, "SGLang 0.5.23 reads flat configs only (speculators_config and "
                            "transformer_layer_config appear nowhere in srt/); a speculators config is not loadable")
    if not r.layout_ok:
        return r
    if any(a in MLA_ARCHS for a in archs):
        return read_mla(ckpt, target, r)
    raw = ckpt.config_raw or {}
    if "LlamaForCausalLMEagle3" not in archs:
        nextn = [a for a in archs if a in NEXTN_ARCHS]
        target_cls = [a for a in archs if a in TARGET_CLASSES]
        r.refuse_class(
            f"architectures {archs}: SGLang 0.5.23 rewrites {nextn[0]} to DeepseekV3ForCausalLMNextN, an MTP "
            "head, not an EAGLE-3 drafter (configs/model_config.py:1032-1036)" if nextn else
            f"architectures {archs}: SGLang 0.5.23 builds {target_cls[0]}, the target model's own class "
            f"({TARGET_CLASSES[target_cls[0]]}), from the drafter's weights: no fc, no aux-state input; the "
            "drafter's tensors find no parameter (\"Parameter ... not found in params_dict\", llama.py:772-779) and "
            "the drafter fails to serve (its EAGLE-3 class is LlamaForCausalLMEagle3)" if target_cls else
            f"SGLang 0.5.23's Llama-layer EAGLE-3 class is LlamaForCausalLMEagle3; architectures {archs} falls to "
            "the Transformers backend, which raises \"Cannot find model module\" (model_loader/utils.py:224-231)")
    # the config class's defaults (llama.py:196-198, 336); transformers 5.19 standardizes rope_parameters and
    # llama.py:322-334 reads them first; LlamaMLP (llama.py:116-119) raises for any activation but silu
    read_llama_layer(r, raw, legacy_rope=False, silu_cite="; llama.py:116-119")
    window(r, launch)
    if r.num_layers > 1:
        r.set("later_norm", "hidden_norm", "SGLang 0.5.23 llama_eagle3.py:103-105: layers >= 1 are normed by "
              "hidden_norm")
    o_bias = read_biases(r, raw)  # this release's sources: LLAMA_LAYER_SOURCES
    found, value, key = lookup(raw, ("eagle_config", "norm_before_fc"), ("norm_before_fc",))
    if not norm_before_fc:
        r.set("input_norm", False, "SGLang 0.5.14 has no norm_before_fc: llama_eagle3.py:141-183 builds no input_norm")
    else:
        r.set("input_norm", bool(value) if found else False,
              f"config.json: {key} (llama_eagle3.py:169-182)" if found else "SGLang default: no norm_before_fc")
    if not yarn_mscale and r.rope_scaling and r.rope_scaling.get("rope_type") == "yarn":
        simple_yarn(r, "0.5.14 layers/rotary_embedding/factory.py:242-247, yarn.py:94")
    fc_norm = raw.get("fc_norm") or raw.get("use_aux_norm")
    r.set("fc_norm", bool(fc_norm), "config.json: fc_norm / use_aux_norm (llama_eagle3.py:184-196)"
          if "fc_norm" in raw or "use_aux_norm" in raw else "SGLang default: no fc_norm")
    normed = raw.get("norm_output") is True
    r.set("feedback", "normed" if normed else "prenorm", "config.json: norm_output (llama_eagle3.py:207, 267-269)"
          if "norm_output" in raw else "SGLang default: the pre-norm state is fed back")
    r.set("final_norm", True, "SGLang applies the final norm before lm_head")
    found, value, key = lookup(raw, ("num_aux_hidden_states",))
    _, nested, _ = lookup(raw, ("eagle_config", "eagle_aux_hidden_state_layer_ids"))
    if found and is_int(value):
        r.set("num_aux", value, "config.json: num_aux_hidden_states (llama_eagle3.py:156-161)")
    elif isinstance(nested, list) and nested:
        r.set("num_aux", len(nested), "config.json: eagle_config.eagle_aux_hidden_state_layer_ids (count)")
    else:
        r.set("num_aux", 3, "SGLang default: 3 (llama_eagle3.py:156-161 counts num_aux_hidden_states or "
              "eagle_config's ids, never the top-level ones)")
    reading.read_aux_ids(r, raw, (("eagle_config", "eagle_aux_hidden_state_layer_ids"),),
                         "SGLang default layers (no ids in eagle_config; a top-level list is not read: "
                         "spec_aux_hidden_state.py:185-196)")
    r.set("aux_convention", "sglang",
          "SGLang: the target's set_eagle3_layers_to_capture decides (see engine.aux-layers)")
    # own_embed: models/llama.py:910-924
    tied, own_embed = read_fc_input_and_embedding(r, raw, fc_cite=" (llama_eagle3.py:151-154, 163-164)")
    if not tied and "draft_vocab_size" not in raw:
        r.refuse("config.json has no draft_vocab_size: llama_eagle3.py:306 reads config.draft_vocab_size "
                 "directly and transformers 5.19 raises AttributeError (only an explicit null takes the "
                 "target's lm_head)", at="draft_vocab_size")
    dv = reading.read_stated(r, raw, "draft_vocab_size", r.vocab_size, "SGLang: vocab_size (lm_head from the target)")

    def accept(name: str, n) -> tuple[str | None, str]:
        if "d2t" in name:
            return "d2t", ""
        if "t2d" in name:
            return None, "SGLang ignores t2d"
        role = n.role
        for legacy, new in LEGACY_NAMES.items():
            if legacy in name and role is None:
                role = name[name.index(legacy):].replace(legacy, new)
        if role is None:
            return None, "dropped silently: SGLang has no such parameter (llama_eagle3.py:358-378)"
        if n.prefixed and role == "lm_head.weight":
            return None, "dropped silently: SGLang looks for lm_head.weight or model.lm_head.weight as a parameter"
        if n.layer is not None and n.layer >= r.num_layers:
            return None, f"dropped silently: SGLang builds {r.num_layers} layer(s)"
        if role.endswith("o_proj.bias") and o_bias or role == "fc.bias" and r.fc_bias:
            return role, ""
        if role.endswith(".bias") or role.endswith(("q_norm.weight", "k_norm.weight")):
            return None, "dropped silently: SGLang 0.5.23 builds no such parameter"
        if role == "embed_tokens.weight" and not own_embed:
            return None, TARGET_EMBED
        if role == "input_norm.weight" and not r.input_norm:
            return None, "dropped silently: no input_norm without norm_before_fc"
        if role.startswith("fc_norm.") and (not r.fc_norm or int(role.split(".")[1]) >= r.num_aux):
            return None, "dropped silently: no such fc_norm"
        if role == "lm_head.weight" and tied:
            return None, "dropped: with tie_word_embeddings lm_head is the embedding"
        return role, ""

    # the context a target (or --context-length) must not exceed: engine.serving's verdict (context_refusal)
    read_context(r, raw)
    reading.map_roles(r, ckpt, accept)
    for name in [n for n, why in r.ignored.items() if why == TARGET_EMBED]:  # loaded, then set_embed replaces it
        r.replaced[name] = r.ignored.pop(name)
    check_replaced_embedding(r, ckpt, list(r.replaced))
    for role in [x for x in r.tensors if x.endswith("input_layernorm.weight") and not x.startswith("layers.0.")]:
        r.unused[role] = ("loaded into a norm SGLang 0.5.23 never uses: layers >= 1 are normed by hidden_norm "
                          "(llama_eagle3.py:103-105)")
    reading.finish(r, ckpt, "ones or uninitialised memory (SGLang drops and leaves parameters without a word; "
                            "layers/layernorm.py:481 starts norms at ones)", narrows=True)
    if r.replaced:
        r.unfilled.pop("embed_tokens.weight", None)
    if tied and not own_embed:
        r.unfilled["lm_head.weight"] = (AFTER_LOAD + "the target's embedding (tied: lm_head is the embedding "
                                        "set_embed replaces)")
    if dv is None and "draft_vocab_size" in raw and not tied:
        r.unfilled["lm_head.weight"] = "the target's lm_head (load_lm_head_from_target: draft_vocab_size null)"
    return r


MLA_FILE = "srt/models/kimi_k25_eagle3.py"


# One flat walk in the order kimi_k25_eagle3.py builds and loads the drafter (file:line beside each step).
def read_mla(ckpt: Checkpoint, target: Any, r: Reading) -> Reading:  # noqa: C901
    """SGLang 0.5.23's MLA drafter, ``Eagle3DeepseekV2ForCausalLM`` (srt/models/kimi_k25_eagle3.py, "EAGLE3 /
    EAGLE3.1 draft model with MLA attention for Kimi-K2.x"): one layer, DeepSeek-V2 MLA attention
    (``DeepseekV2AttentionMLA``) whose fused q_a/kv_a projection is rebuilt for the 2H input."""
    raw = ckpt.config_raw or {}
    r.set("architecture", "Eagle3DeepseekV2ForCausalLM", "config.json: architectures")
    reading.model_type_of(r, raw, "llama")
    reading.read_mla(r, raw, "sglang", f"SGLang 0.5.23 {MLA_FILE}:80-107 (DeepseekV2AttentionMLA)")
    if r.mla is not None and r.mla.q_lora_rank is None:
        r.refuse(f"q_lora_rank is null: SGLang raises \"Eagle3 MLA layer requires q_lora_rank in the draft "
                          f"config\" ({MLA_FILE}:113-117); its MLA drafter has no q_proj path", at="q_lora_rank")
    if r.num_layers != 1:
        r.refuse(f"num_hidden_layers {r.num_layers} ({r.sources.get('num_layers', '?')}): SGLang raises "
                          f"\"EAGLE3 currently only supports 1 layer\" ({MLA_FILE}:243-244)", at="num_hidden_layers")
    if r.hidden_act != "silu":
        r.refuse(f"SGLang raises \"Unsupported activation: {r.hidden_act}\" (models/deepseek_v2.py:330-333 "
                          "DeepseekV2MLP)")
    built = not r.refusals  # the constructor raised: the config is read, nothing is loaded
    r.set("qk_norm", False, "MLA attention (no q/k norms)")
    r.set("attention_bias", False, "models/deepseek_v2.py DeepseekV2AttentionMLA: no projection bias")
    r.set("o_bias", False, "models/deepseek_v2.py DeepseekV2AttentionMLA: o_proj has no bias")
    r.set("mlp_bias", False, "models/deepseek_v2.py:308, 316 DeepseekV2MLP: no bias")
    r.set("fc_bias", raw.get("bias") is True, f"config.json: bias ({MLA_FILE}:212-219: fc bias = config.bias)"
          if "bias" in raw else f"SGLang default: no fc bias ({MLA_FILE}:215)")
    r.set("norm_before_residual", False, f"SGLang 0.5.23: the residual is the un-normed fc output ({MLA_FILE}:159; "
          "norm_before_residual is not read)")
    r.set("input_norm", False, f"{MLA_FILE} builds no input_norm (norm_before_fc is not read)")
    fc_norm = raw.get("fc_norm") or raw.get("use_aux_norm")
    r.set("fc_norm", bool(fc_norm), f"config.json: fc_norm / use_aux_norm ({MLA_FILE}:228-241)"
          if "fc_norm" in raw or "use_aux_norm" in raw else f"SGLang default: no fc_norm ({MLA_FILE}:230-232)")
    normed = bool(raw.get("norm_output"))
    r.set("feedback", "normed" if normed else "prenorm", f"config.json: norm_output ({MLA_FILE}:253-255, 311)"
          if "norm_output" in raw else f"SGLang default: the pre-norm state is fed back ({MLA_FILE}:255, 311)")
    r.set("final_norm", True, f"{MLA_FILE}:308-311: the final norm before lm_head")
    r.set("later_norm", "input_layernorm", f"{MLA_FILE}:243-244: one layer only")
    # fc's width: eagle_config's ids, else the top-level ids, else 3; num_aux_hidden_states is not read (:48-59, 211)
    _, nested, _ = lookup(raw, ("eagle_config", "eagle_aux_hidden_state_layer_ids"))
    _, top_ids, _ = lookup(raw, ("eagle_aux_hidden_state_layer_ids",))
    if isinstance(nested, list):
        r.set("num_aux", len(nested), f"config.json: eagle_config.eagle_aux_hidden_state_layer_ids (count, "
              f"{MLA_FILE}:48-59)")
    elif isinstance(top_ids, list):
        r.set("num_aux", len(top_ids), f"config.json: eagle_aux_hidden_state_layer_ids (count: SGLang's MLA drafter "
              f"falls back to the top-level ids, {MLA_FILE}:55-56)")
    else:
        r.set("num_aux", 3, f"SGLang default: 3 ({MLA_FILE}:57-58; num_aux_hidden_states is not read)")
    reading.read_aux_ids(r, raw, (("eagle_config", "eagle_aux_hidden_state_layer_ids"),),
                         "SGLang default layers (no ids in eagle_config; a top-level list is not read: "
                         "spec_aux_hidden_state.py:185-196)")
    r.set("aux_convention", "sglang",
          "SGLang: the target's set_eagle3_layers_to_capture decides (see engine.aux-layers)")
    ht = reading.read_stated(r, raw, "target_hidden_size", r.hidden_size,
                             f"SGLang: hidden_size (target_hidden_size absent or null, {MLA_FILE}:208-210)")
    tied = raw.get("tie_word_embeddings") is True
    r.set("lm_head_from_embed", tied, f"config.json: tie_word_embeddings ({MLA_FILE}:352-353)" if tied else "untied")
    own_embed = is_int(ht) and ht != r.hidden_size  # set_embed keeps the draft's (:404-411)
    dv = reading.read_stated(r, raw, "draft_vocab_size", r.vocab_size,
                             f"SGLang: vocab_size, lm_head from the target ({MLA_FILE}:351-358)")
    if r.mla is not None and any(ckpt.tensors[n].dtype.startswith("F8") for n in ckpt.tensors
                                 if n.endswith("self_attn.kv_b_proj.weight")):
        r.refuse(f"kv_b_proj is fp8: SGLang raises NotImplementedError (\"Eagle3 MLA draft post_load_weights "
                          f"only supports float dtypes\", {MLA_FILE}:511-515)")
    q_names = [n for n in ckpt.tensors
               if n.endswith(("self_attn.q_a_proj.weight", "self_attn.kv_a_proj_with_mqa.weight"))]
    skipped = ("skipped with a warning: no such parameter (\"Eagle3 MLA: skipping unexpected weight\", "
               f"{MLA_FILE}:494-496)")

    def accept(name: str, n) -> tuple[str | None, str]:
        if name == "d2t" or name.endswith(".d2t"):
            return "d2t", ""
        if name == "t2d" or name.endswith(".t2d"):
            return None, f"SGLang ignores t2d ({MLA_FILE}:442-443)"
        role = n.role
        if role is None or n.prefixed:
            return None, skipped
        if n.layer is not None and n.layer >= 1:
            return None, f"{skipped}; its MLA drafter has one layer, midlayer (layers.0)"
        if role.endswith(("self_attn.q_a_proj.weight", "self_attn.kv_a_proj_with_mqa.weight")):
            partner = name.replace("kv_a_proj_with_mqa", "q_a_proj") if "kv_a_proj_with_mqa" in name else \
                name.replace("q_a_proj", "kv_a_proj_with_mqa")
            if partner not in q_names:
                return None, (f"cached and never loaded: SGLang fuses q_a_proj with kv_a_proj_with_mqa only when both "
                              f"are present ({MLA_FILE}:467-492)")
            return role, ""
        if role.endswith("self_attn.q_proj.weight"):
            return None, f"{skipped} (it builds q_a_proj / q_b_proj)"
        if role == "fc.bias" and not r.fc_bias:
            return None, f"{skipped} (fc has a bias only with \"bias\": true, {MLA_FILE}:215)"
        if role == "input_norm.weight":
            return None, skipped
        if role.startswith("fc_norm.") and (not r.fc_norm or int(role.split(".")[1]) >= r.num_aux):
            return None, skipped
        if role == "embed_tokens.weight" and not own_embed:
            return None, TARGET_EMBED
        if role == "lm_head.weight" and tied:
            return None, f"{skipped} (tied: lm_head is the embedding, {MLA_FILE}:352-353)"
        return role, ""

    read_context(r, raw)  # engine.serving's verdict on the served context (context_refusal)
    if not built:
        return r
    reading.map_roles(r, ckpt, accept)
    for name in [n for n, why in r.ignored.items() if why == TARGET_EMBED]:  # loaded, then set_embed replaces it
        r.replaced[name] = r.ignored.pop(name)
    check_replaced_embedding(r, ckpt, list(r.replaced))
    reading.finish(r, ckpt, f"ones or uninitialised memory (SGLang's MLA loader warns about what it skips and never "
                            f"says what it left unloaded, {MLA_FILE}:428-501)", narrows=True)
    if r.replaced:
        r.unfilled.pop("embed_tokens.weight", None)
    if tied and not own_embed:
        r.unfilled["lm_head.weight"] = (AFTER_LOAD + "the target's embedding (tied: lm_head is the embedding "
                                        "set_embed replaces)")
    if not is_int(dv) and not tied:
        r.unfilled["lm_head.weight"] = f"the target's lm_head (load_lm_head_from_target: no draft_vocab_size, " \
                                       f"{MLA_FILE}:355-358)"
    return r


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
    Release("0.5.14", "2026-06-26", recorded="2026-12-03",
            differs=(("norm_before_fc", False), ("yarn_mscale", False), ("gpt_oss_raw", False)),
            why="the release SpecForge 0.2.0 pins; models/llama_eagle3.py:141-183 builds no input_norm (norm_before_fc "
            "is not read; input_norm.weight is dropped silently, :342-350); YaRN reads factor, extrapolation_factor, "
            "attn_factor, beta_fast and beta_slow only (layers/rotary_embedding/factory.py:242-247, yarn.py:94); "
            "GPT-OSS targets always add 1 (models/gpt_oss.py:1273-1285) and capture layer inputs only (:692-697). "
            "Its aux ids come from eagle_config only, inline in model_executor/model_runner.py:458-472, and it "
            "already has the DeepSeek first-id rule (models/deepseek_v2.py:2799-2814)"),
    Release("0.5.20", "2026-09-18", recorded="2026-12-03",
            why="as 0.5.23: models/llama_eagle3.py and kimi_k25_eagle3.py differ only in imports, layer_stack and the "
            "parallel spec, gpt_oss.py counts and captures as 0.5.23 (:1349-1364, :739-757); its runner sets up its "
            "process group with distributed/bootstrap.py:70-172 init_torch_distributed, without launcher placement"),
    Release("0.5.22", "2026-10-16", recorded="2026-12-03",
            why="as 0.5.23: its models/llama_eagle3.py and kimi_k25_eagle3.py differ from 0.5.23's only by the "
            "draft_parallel_spec attribute 0.5.23 adds (diffed wheel against wheel)"),
    Release(VERSION, "2026-10-30", recorded="2026-12-01"),
)

PROFILE = Profile(
    NAME, VERSION, read, capture, ids_for,
    releases=RELEASES,
    narrows_at="srt/layers/linear.py:739, 840-868 (narrow, no size check)",
    families=("llama", "mla"),
    sources=("srt/models/llama_eagle3.py", MLA_FILE, "srt/models/llama.py", "srt/models/deepseek_v2.py",
             "srt/models/gpt_oss.py", "srt/model_executor/model_runner_components/spec_aux_hidden_state.py",
             "srt/speculative/eagle_worker_v2.py", "srt/configs/model_config.py",
             "srt/layers/rotary_embedding/factory.py"),
    reads_ids="eagle_config.eagle_aux_hidden_state_layer_ids",
    ids_path=("eagle_config", "eagle_aux_hidden_state_layer_ids"),
    serving=context_refusal(VERSION),
    cannot_compute=cannot_compute,
    launch=launching.sglang,
    converts_to=FLAT,
    launch_window=WINDOW_OPTION,
    d2t_past_vocab="SGLang 0.5.23 maps draft id i to d2t[i] + i (srt/models/llama_eagle3.py:350-352, hot_token_id) "
    "and drafts those ids (speculative/eagle_worker_v2.py:757-758, 810-822): ids past the target vocabulary, "
    "which the next draft step embeds out of range",
)
