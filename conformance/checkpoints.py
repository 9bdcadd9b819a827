"""The conformance checkpoint set: tiny EAGLE-3 drafters that the engines' own loaders are run on.

Each checkpoint is the embedded example (``eagle3_checks.drafter.example``) with one thing changed: a loader
behaviour of the engine audit (S1-S19 for SGLang, V1-V12 for vLLM, as tests/test_engine_releases.py names them), an
aux-id capture rule of one target architecture, or one defect of the catalogue (``eagle3_checks.defects``, the one
the test suite and ``eagle3-checks explain`` use; its ``Draft`` and edits make the other checkpoints too). Every
checkpoint comes with the config.json of a target it is served beside.

    python conformance/checkpoints.py OUT_DIR

writes OUT_DIR/<name>/ (config.json + model.safetensors), OUT_DIR/targets/<target>/config.json and
OUT_DIR/manifest.json. Everything is deterministic: :func:`build` rebuilds byte-identical files, and each manifest
entry's ``source_hash`` (config.json plus every safetensors JSON header) identifies what a recording was made from.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from eagle3_checks.defects import (
    DEFECTS,
    REMOVE,
    Draft,
    Edit,
    adding,
    aux_ids,
    combined,
    config,
    eagle_config,
    layer_config,
    without,
)
from eagle3_checks.drafter.example import EXAMPLE, DrafterShape, target_config, vocab_mapping
from eagle3_checks.drafter.layout import FLAT, SPECULATORS
from eagle3_checks.storage.safetensors import from_numpy

SEED = 0


def defect(name: str) -> Edit:
    """The catalogue's defect ``name`` (eagle3_checks/defects.py) as an edit of the drafter."""
    found = DEFECTS[name]
    assert found.after is None and found.shards == 1, f"{name} edits the written files"
    return found.apply


def own_vocabulary(size: int) -> Edit:
    """The drafter states vocab_size == draft_vocab_size == ``size`` (below the target's) and keeps a d2t."""
    def edit(d: Draft) -> None:
        d.layer_config["vocab_size"] = size
        d.add("embed_tokens.weight", (size, d.shape.hidden_size))
        d2t, _ = vocab_mapping(d.shape.vocab_size, size, SEED)
        d.tensors["d2t"] = from_numpy(d2t)
        del d.tensors["t2d"]
    return edit


def legacy_aux_norms(d: Draft) -> None:
    """fc_norm.0/1/2 under their legacy names aux_norm_low/mid/high (SGLang 0.5.23 maps them back)."""
    for i, level in enumerate(("low", "mid", "high")):
        d.tensors[f"aux_norm_{level}.weight"] = d.tensors.pop(f"fc_norm.{i}.weight")


def peagle(d: Draft) -> None:
    """A P-EAGLE drafter as speculators 0.9.0 saves one (models/peagle/config.py, core.py:44-53): the EAGLE-3
    speculators config with speculators_model_type "peagle" and mask_token_id, plus the learned mask_hidden
    (1, 1, num_aux x H) that pads the positions drafted in parallel."""
    d.config["speculators_model_type"] = "peagle"
    d.config["architectures"] = ["PEagleSpeculator"]
    d.config["mask_token_id"] = d.shape.vocab_size - 1
    d.config["speculators_config"]["algorithm"] = "peagle"
    d.add("mask_hidden", (1, 1, 3 * d.shape.ht))


def mask_hidden(d: Draft) -> None:
    """An EAGLE-3 drafter that also carries P-EAGLE's mask_hidden tensor (1, num_aux x Ht)."""
    d.add("mask_hidden", (1, 3 * d.shape.ht))


def rope_parameters_only(d: Draft) -> None:
    """The theta only inside rope_parameters (transformers 5 style), no rope_theta / rope_scaling."""
    d.config.pop("rope_scaling", None)
    d.config["rope_parameters"] = {"rope_type": "default", "rope_theta": d.config.pop("rope_theta")}


def hidden_norm_in_later_layers(d: Draft) -> None:
    """SGLang 0.5.23's multi-layer reading: every layer >= 1 carries a hidden_norm too."""
    for layer in range(1, d.shape.num_layers):
        d.add(f"layers.{layer}.hidden_norm.weight", (d.shape.hidden_size,))


# DeepSeek-V3 attention sizes shared by the MLA drafter and the DeepSeek / Kimi targets.
MLA = {"q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}


def mla_drafter(d: Draft) -> None:
    """A one-layer MLA drafter (Eagle3DeepseekV2ForCausalLM) in place of the Llama layer: the example's globals,
    DeepSeek-V3 attention with layer 0 taking [embeds ‖ hidden] (2H), a dense MLP."""
    h, heads, m = d.shape.hidden_size, d.shape.num_attention_heads, MLA
    d.tensors = {n: t for n, t in d.tensors.items() if not n.startswith("midlayer.self_attn.")}
    d.add("midlayer.self_attn.q_a_proj.weight", (m["q_lora_rank"], 2 * h))
    d.add("midlayer.self_attn.q_a_layernorm.weight", (m["q_lora_rank"],))
    d.add("midlayer.self_attn.q_b_proj.weight",
          (heads * (m["qk_nope_head_dim"] + m["qk_rope_head_dim"]), m["q_lora_rank"]))
    d.add("midlayer.self_attn.kv_a_proj_with_mqa.weight", (m["kv_lora_rank"] + m["qk_rope_head_dim"], 2 * h))
    d.add("midlayer.self_attn.kv_a_layernorm.weight", (m["kv_lora_rank"],))
    d.add("midlayer.self_attn.kv_b_proj.weight",
          (heads * (m["qk_nope_head_dim"] + m["v_head_dim"]), m["kv_lora_rank"]))
    d.add("midlayer.self_attn.o_proj.weight", (h, heads * m["v_head_dim"]))
    d.config.update(architectures=["Eagle3DeepseekV2ForCausalLM"], model_type="kimi_k2", **MLA)
    for key in ("head_dim", "num_key_value_heads", "attention_bias", "mlp_bias"):
        d.config.pop(key)


_MLA_Q = EXAMPLE.num_attention_heads * (MLA["qk_nope_head_dim"] + MLA["qk_rope_head_dim"])
_MLA_LAYER_1 = {
    "layers.1.input_layernorm.weight": (EXAMPLE.hidden_size,), "layers.1.hidden_norm.weight": (EXAMPLE.hidden_size,),
    "layers.1.self_attn.q_a_proj.weight": (MLA["q_lora_rank"], EXAMPLE.hidden_size),
    "layers.1.self_attn.q_a_layernorm.weight": (MLA["q_lora_rank"],),
    "layers.1.self_attn.q_b_proj.weight": (_MLA_Q, MLA["q_lora_rank"]),
    "layers.1.self_attn.kv_a_proj_with_mqa.weight": (MLA["kv_lora_rank"] + MLA["qk_rope_head_dim"],
                                                      EXAMPLE.hidden_size),
    "layers.1.self_attn.kv_a_layernorm.weight": (MLA["kv_lora_rank"],),
    "layers.1.self_attn.kv_b_proj.weight": (EXAMPLE.num_attention_heads * (MLA["qk_nope_head_dim"] + MLA["v_head_dim"]),
                                            MLA["kv_lora_rank"]),
    "layers.1.self_attn.o_proj.weight": (EXAMPLE.hidden_size, EXAMPLE.num_attention_heads * MLA["v_head_dim"]),
    "layers.1.post_attention_layernorm.weight": (EXAMPLE.hidden_size,),
    "layers.1.mlp.gate_proj.weight": (EXAMPLE.intermediate_size, EXAMPLE.hidden_size),
    "layers.1.mlp.up_proj.weight": (EXAMPLE.intermediate_size, EXAMPLE.hidden_size),
    "layers.1.mlp.down_proj.weight": (EXAMPLE.hidden_size, EXAMPLE.intermediate_size),
}
_FC_NORMS = {f"fc_norm.{i}.weight": (EXAMPLE.ht,) for i in range(3)}
# (name, why, edit applied after mla_drafter): each disagreement between vLLM 0.33's and SGLang 0.5.23's MLA class
MLA_VARIANTS: list[tuple[str, str, Edit]] = [
    ("q-proj", "q_lora_rank null and q_proj (SGLang raises; vLLM builds the attention, its loader raises)",
     combined(config(q_lora_rank=None), without("layers.0.self_attn.q_a_proj.weight",
                                                "layers.0.self_attn.q_a_layernorm.weight",
                                                "layers.0.self_attn.q_b_proj.weight"),
              adding({"midlayer.self_attn.q_proj.weight": (_MLA_Q, 2 * EXAMPLE.hidden_size)}))),
    ("two-layers", "two layers (vLLM builds them, SGLang raises)",
     combined(config(num_hidden_layers=2), adding(_MLA_LAYER_1))),
    ("norm-before-residual", "norm_before_residual true (vLLM reads it, SGLang does not)",
     config(norm_before_residual=True)),
    ("fc-bias", "\"bias\": true and fc.bias (SGLang builds fc with it, vLLM skips it)",
     combined(config(bias=True), adding({"fc.bias": (EXAMPLE.hidden_size,)}))),
    ("use-aux-norm", "use_aux_norm and fc_norm.N (SGLang reads it, vLLM raises for the norms)",
     combined(config(use_aux_norm=True), adding(_FC_NORMS))),
    ("fc-norm-norm-output", "the eagle3.1 variant: fc_norm and norm_output (both read them)",
     combined(config(fc_norm=True, norm_output=True), adding(_FC_NORMS))),
    ("unknown-tensor", "a tensor no MLA layer has (SGLang warns and skips it, vLLM raises)",
     adding({"midlayer.self_attn.extra_scale.weight": (4,)})),
    ("aux-top-only", "four ids at the top level only, fc over four states (SGLang counts them, vLLM does not)",
     combined(aux_ids(top=[1, 2, 4, 6]), adding({"fc.weight": (EXAMPLE.hidden_size, 4 * EXAMPLE.ht)}))),
    ("null-target-hidden-size", "target_hidden_size null (vLLM fails, SGLang takes hidden_size)",
     config(target_hidden_size=None)),
]


@dataclass(frozen=True)
class Target:
    """The verifier a drafter is served beside: only its config.json is needed (no weights are loaded)."""

    architecture: str = "LlamaForCausalLM"
    num_layers: int = EXAMPLE.target_layers
    hidden_size: int = EXAMPLE.ht
    vocab_size: int = EXAMPLE.vocab_size
    max_position_embeddings: int = EXAMPLE.max_position_embeddings

    @property
    def slug(self) -> str:
        return (f"{self.architecture}-L{self.num_layers}-H{self.hidden_size}-V{self.vocab_size}"
                f"-P{self.max_position_embeddings}")

    def config(self) -> dict[str, Any]:
        shape = replace(EXAMPLE, target_hidden_size=self.hidden_size, target_layers=self.num_layers,
                        vocab_size=self.vocab_size)
        text = {**target_config(shape), "architectures": [self.architecture],
                "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 160,
                "max_position_embeddings": self.max_position_embeddings, "rms_norm_eps": 1e-6,
                "torch_dtype": "bfloat16", "tie_word_embeddings": False}
        kind = self.architecture
        if kind == "LlamaForCausalLM":
            return {**text, "model_type": "llama", "head_dim": self.hidden_size // 4}
        if kind == "Qwen3ForCausalLM":
            return {**text, "model_type": "qwen3", "head_dim": self.hidden_size // 4}
        if kind == "GptOssForCausalLM":
            return {**text, "model_type": "gpt_oss", "head_dim": self.hidden_size // 4, "num_local_experts": 4,
                    "num_experts_per_tok": 2, "sliding_window": 128}
        deepseek = {**text, "model_type": "deepseek_v3", "num_key_value_heads": 4, "n_routed_experts": 4,
                    "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_shared_experts": 1,
                    "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, **MLA}
        if kind == "DeepseekV3ForCausalLM":
            return deepseek
        if kind == "KimiK25ForConditionalGeneration":
            # Kimi-K2.5 wraps a DeepSeek-V3 text model (both engines delegate to a DeepseekV3ForCausalLM).
            deepseek["architectures"] = ["DeepseekV3ForCausalLM"]
            # KimiK25Config derives vocab_size from text_config (transformers: a read-only property).
            return {"architectures": [kind], "model_type": "kimi_k25", "text_config": deepseek,
                    "tie_word_embeddings": False}
        raise ValueError(f"no target config for {kind}")


LLAMA = Target()
QWEN3 = Target("Qwen3ForCausalLM")
DEEPSEEK = Target("DeepseekV3ForCausalLM")
DEEPSEEK_61 = Target("DeepseekV3ForCausalLM", num_layers=61)  # Kimi-K2 / DeepSeek-V3's depth (only the count is read)
KIMI_K25 = Target("KimiK25ForConditionalGeneration")
GPT_OSS = Target("GptOssForCausalLM")


@dataclass(frozen=True)
class Case:
    name: str
    why: str
    layout: str = FLAT
    edit: Edit | None = None
    shape: DrafterShape = EXAMPLE
    target: Target = LLAMA
    first_layer: str = "midlayer"
    # the context the server is started with (SGLang --context-length, vLLM --max-model-len); None: the target's
    context_length: int | None = None


TWO_LAYERS = replace(EXAMPLE, num_layers=2)
QWEN3_LAYER = replace(EXAMPLE, model_type="qwen3")
FOUR_AUX = replace(EXAMPLE, aux_layer_ids=(1, 2, 4, 6))
MISSING_KINDS = {
    "q-proj": "layers.0.self_attn.q_proj.weight", "k-proj": "layers.0.self_attn.k_proj.weight",
    "v-proj": "layers.0.self_attn.v_proj.weight", "o-proj": "layers.0.self_attn.o_proj.weight",
    "gate-proj": "layers.0.mlp.gate_proj.weight", "up-proj": "layers.0.mlp.up_proj.weight",
    "down-proj": "layers.0.mlp.down_proj.weight", "input-layernorm": "layers.0.input_layernorm.weight",
    "post-attention-layernorm": "layers.0.post_attention_layernorm.weight", "norm": "norm.weight",
    "fc": "fc.weight",
}
H, HT = EXAMPLE.hidden_size, EXAMPLE.ht


def cases() -> list[Case]:
    """Every checkpoint of the set, in manifest order."""
    both_layouts = [
        ("example", "the embedded example (clean baseline)", None, EXAMPLE),
        ("two-layers", "S1/S3: two decoder layers; later layers carry input_layernorm only (speculators style)",
         None, TWO_LAYERS),
        ("no-num-hidden-layers", "S2 / config.layers: num_hidden_layers absent (transformers default 32)",
         layer_config(num_hidden_layers=REMOVE), EXAMPLE),
        ("num-hidden-layers-2-one-layer", "defect config.layers: num_hidden_layers 2 over the tensors of 1 layer",
         defect("num-hidden-layers-off"), EXAMPLE),
        ("fc-norm", "S5: fc_norm true with fc_norm.N tensors", None, replace(EXAMPLE, fc_norm=True)),
        ("norm-before-fc", "S6: norm_before_fc true with input_norm", None, replace(EXAMPLE, norm_before_fc=True)),
        ("four-aux", "S8: 4 aux ids, num_aux_hidden_states 4, fc over 4 aux states",
         config(num_aux_hidden_states=4), FOUR_AUX),
        ("qwen3-layer", "Qwen3 decoder layer (q_norm/k_norm)", None, QWEN3_LAYER),
        ("head-dim-missing", "defect config.head-dim: head_dim absent, q_proj holds 4 heads of 24 (H/nh = 16)",
         defect("head-dim-missing"), EXAMPLE),
        ("d2t-missing", "defect vocab.d2t: no d2t with a 128-token draft vocabulary", defect("d2t-missing"), EXAMPLE),
        ("model-prefix", "defect keys: every tensor name carries a model. prefix", defect("model-prefix"), EXAMPLE),
        ("lm-head-missing", "V1: no lm_head.weight (draft vocabulary 128 of 512)", without("lm_head.weight"), EXAMPLE),
        ("embed-tokens-missing", "defect/clean: no embed_tokens (engines share the target's)",
         without("embed_tokens.weight"), EXAMPLE),
        ("norm-output", "S7: norm_output true", config(norm_output=True), EXAMPLE),
    ]
    out = [Case(f"{name}-{layout}", why, layout, edit, shape)
           for name, why, edit, shape in both_layouts for layout in (SPECULATORS, FLAT)]

    out += [
        # ----- layers and names
        Case("two-layers-hidden-norm-flat", "S3: two layers, layer 1 also carries hidden_norm (SGLang 0.5.23 style)",
             FLAT, hidden_norm_in_later_layers, TWO_LAYERS),
        Case("layers-0-names-flat", "S4: flat drafter naming its first layer layers.0.* (not midlayer.*)",
             first_layer="layers"),
        Case("peagle-speculators", "P-EAGLE: speculators_model_type peagle, mask_token_id and mask_hidden (vLLM "
             "0.33.0 builds it, 0.34.0 refuses the config)", SPECULATORS, peagle),
        Case("mask-hidden-flat", "an EAGLE-3 drafter with P-EAGLE's mask_hidden (vLLM skips it with a warning)",
             edit=mask_hidden),
        Case("midlayer-names-speculators", "defect keys: speculators config over midlayer.* tensor names",
             SPECULATORS, defect("midlayer-names-in-speculators")),
        Case("hidden-norm-missing-flat", "defect keys: layer 0 without hidden_norm",
             edit=defect("hidden-norm-missing")),
        Case("transposed-q-proj-flat", "defect shapes: q_proj stored transposed", edit=defect("transposed-q-proj")),
        Case("fc-two-aux-flat", "defect shapes: fc sized for 2 aux states while 3 ids are stated",
             edit=defect("fc-two-aux")),
        Case("unknown-tensor-flat", "defect keys: a tensor no engine parameter matches (not a .bias)",
             edit=defect("unknown-tensor")),
        Case("unknown-layer-tensor-flat", "a tensor inside the layer that no engine parameter matches",
             edit=defect("unknown-layer-tensor")),
        Case("embed-tokens-short-flat", "embed_tokens with vocab_size - 1 rows",
             edit=defect("embed-tokens-short")),
        *[Case(f"missing-{kind}-flat", f"defect keys: {role} missing", edit=without(role))
          for kind, role in MISSING_KINDS.items()],
        Case("missing-up-proj-speculators", "defect keys: layers.0.mlp.up_proj.weight missing (speculators)",
             SPECULATORS, defect("missing-up-proj")),
        # ----- norms
        Case("use-aux-norm-flat", "S5: use_aux_norm true (legacy flag) with fc_norm.N tensors",
             edit=config(fc_norm=REMOVE, use_aux_norm=True), shape=replace(EXAMPLE, fc_norm=True)),
        Case("aux-norm-legacy-flat", "S5: use_aux_norm with legacy aux_norm_low/mid/high tensors",
             edit=combined(config(fc_norm=REMOVE, use_aux_norm=True), legacy_aux_norms),
             shape=replace(EXAMPLE, fc_norm=True)),
        Case("norm-before-fc-eagle-config-flat", "S6: norm_before_fc stated in eagle_config only",
             edit=combined(config(norm_before_fc=REMOVE), eagle_config(norm_before_fc=True)),
             shape=replace(EXAMPLE, norm_before_fc=True)),
        Case("input-norm-undeclared-flat", "defect keys: input_norm.weight without norm_before_fc",
             edit=defect("input-norm-undeclared")),
        Case("norm-before-residual-null-speculators", 'V4: speculators config with "norm_before_residual": null',
             SPECULATORS, config(norm_before_residual=None)),
        Case("norm-before-residual-absent-speculators", "V4: speculators config without norm_before_residual",
             SPECULATORS, defect("norm-before-residual-absent")),
        Case("norm-before-residual-true-flat", "V4: flat config with norm_before_residual true",
             shape=replace(EXAMPLE, norm_before_residual=True)),
        # ----- aux count and fc width
        Case("four-aux-wider-target-flat", "S8 / target.hidden-size: fc_norm, 4 aux ids of a 96-wide target",
             edit=config(num_aux_hidden_states=4),
             shape=replace(EXAMPLE, fc_norm=True, aux_layer_ids=(1, 2, 4, 6), target_hidden_size=96),
             target=replace(LLAMA, hidden_size=96)),
        Case("num-aux-layers-qwen3-flat", "V7: Eagle3Qwen3ForCausalLM, fc over 4 aux states, only num_aux_layers 4",
             edit=combined(aux_ids(), config(num_aux_layers=4)),
             shape=replace(QWEN3_LAYER, aux_layer_ids=(1, 2, 4, 6))),
        Case("num-aux-layers-llama-flat", "V7: Llama drafter, fc over 4 aux states, only num_aux_layers 4",
             edit=combined(aux_ids(), config(num_aux_layers=4)), shape=FOUR_AUX),
        Case("use-aux-hidden-state-false-flat", "V11: eagle_config.use_aux_hidden_state false (fc present)",
             edit=eagle_config(use_aux_hidden_state=False)),
        # ----- rope and positions
        Case("rope-parameters-only-flat", "S9: rope_theta only inside rope_parameters", edit=rope_parameters_only),
        Case("rope-theta-absent-flat", "config.rope: no rope_theta anywhere (engines use 10000)",
             edit=config(rope_theta=REMOVE)),
        Case("yarn-no-original-max-flat", "S10: yarn rope_scaling without original_max_position_embeddings",
             edit=config(rope_scaling={"rope_type": "yarn", "factor": 4.0})),
        Case("yarn-mscale-flat", "S11: yarn with mscale / mscale_all_dim",
             edit=config(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024,
                                       "mscale": 1.0, "mscale_all_dim": 1.0})),
        Case("target-longer-context-flat", "S16: target context 32768 above the drafter's 4096",
             target=replace(LLAMA, max_position_embeddings=32768)),
        Case("target-longer-context-at-4096-flat", "target context 32768, drafter 4096, the server "
             "started with a context of 4096 (SGLang --context-length, vLLM --max-model-len)",
             target=replace(LLAMA, max_position_embeddings=32768), context_length=4096),
        Case("target-longer-context-raised-flat", "target context 32768, the drafter's "
             "max_position_embeddings raised to 32768 (the config edit for S16)",
             edit=config(max_position_embeddings=32768), target=replace(LLAMA, max_position_embeddings=32768)),
        Case("target-longer-context-yarn-flat", "target context 8192, drafter 4096 with yarn factor 4 and "
             "no original_max_position_embeddings (does the derived context count the factor?)",
             edit=config(rope_scaling={"rope_type": "yarn", "factor": 4.0}),
             target=replace(LLAMA, max_position_embeddings=8192)),
        # ----- vocabulary
        Case("draft-vocab-absent-flat", "S14: draft_vocab_size key absent (lm_head has 128 rows)",
             edit=config(draft_vocab_size=REMOVE)),
        Case("draft-vocab-null-flat", "S14: draft_vocab_size explicit null", edit=config(draft_vocab_size=None)),
        Case("full-vocab-flat", "vocab: draft vocabulary = target vocabulary, no d2t",
             shape=replace(EXAMPLE, draft_vocab_size=EXAMPLE.vocab_size)),
        Case("own-vocab-below-target-flat", "V10: drafter vocab_size = draft_vocab_size 128 < target's 512, with d2t",
             edit=own_vocabulary(EXAMPLE.draft_vocab_size)),
        Case("tied-embeddings-flat", "defect config.tied-embeddings: tied with a draft vocabulary, no lm_head",
             edit=defect("tied-embeddings-without-lm-head")),
        Case("lm-head-full-vocab-flat", "defect shapes: lm_head over the full 512-token vocabulary",
             edit=defect("lm-head-full-vocab")),
        Case("d2t-absolute-flat", "defect vocab.d2t: d2t written as absolute target ids", edit=defect("d2t-absolute")),
        Case("d2t-float-flat", "defect dtypes: d2t stored as F32", edit=defect("d2t-float")),
        # ----- biases
        Case("bias-key-flat", 'S18/V9: "bias": true with fc.bias and o_proj.bias',
             edit=combined(config(bias=True), adding({"fc.bias": (H,), "midlayer.self_attn.o_proj.bias": (H,)}))),
        Case("fc-bias-undeclared-flat", "V2: fc.bias without any bias key (unknown *.bias tensor)",
             edit=adding({"fc.bias": (H,)})),
        Case("attention-mlp-bias-flat", "attention_bias and mlp_bias true with q/k/v/o and MLP biases",
             shape=replace(EXAMPLE, attention_bias=True, mlp_bias=True)),
        Case("qwen3-o-proj-bias-flat", "V3: Eagle3Qwen3ForCausalLM with attention_bias (q/k/v/o biases)",
             shape=replace(QWEN3_LAYER, attention_bias=True)),
        # ----- architectures and config classes
        *[Case(f"arch-{arch}-flat", f"V12 / config.architectures: flat config naming {arch}",
               edit=config(architectures=[arch]))
          for arch in ("PEagleDraftModel", "LlamaForCausalLM", "MistralForCausalLM", "Eagle3LlamaForCausalLM")],
        Case("qwen3-no-head-dim-flat", "S17/V5: Eagle3Qwen3ForCausalLM, model_type qwen3, no head_dim",
             edit=layer_config(head_dim=REMOVE), shape=QWEN3_LAYER),
        Case("qwen3-type-llama-arch-no-head-dim-flat",
             "S17/V5: LlamaForCausalLMEagle3 with model_type qwen3 and no head_dim",
             edit=layer_config(model_type="qwen3", head_dim=REMOVE)),
        Case("qwen3-no-max-position-speculators", "V6: Qwen3 speculators config without max_position_embeddings",
             SPECULATORS, layer_config(max_position_embeddings=REMOVE), QWEN3_LAYER),
        Case("mla-flat", "S15: Eagle3DeepseekV2ForCausalLM (MLA) drafter, model_type kimi_k2", edit=mla_drafter,
             target=DEEPSEEK),
        *[Case(f"mla-eps-1e-5{suffix}-flat", f"MLA drafter, rms_norm_eps 1e-5{why} (the eps of "
               "q_a_layernorm / kv_a_layernorm as built)",
               edit=combined(mla_drafter, config(rms_norm_eps=1e-5, **rope)), target=DEEPSEEK)
          for suffix, why, rope in (("", "", {}),
                                    ("-yarn", ", Kimi-style yarn rope (SGLang builds its rotary on a CPU only for it)",
                                     {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                       "original_max_position_embeddings": 1024, "mscale": 1.0,
                                                       "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}}))],
        # ----- the MLA family's engine disagreements
        *[Case(f"mla-{name}-flat", f"MLA drafter, {why}", edit=combined(mla_drafter, edit), target=DEEPSEEK)
          for name, why, edit in MLA_VARIANTS],
        # ----- aux-layer ids: where they are stated, and each target's capture rule
        Case("aux-top-only-flat", "config.aux-layers: ids at the top level only", edit=aux_ids(top=[1, 3, 5])),
        Case("aux-eagle-config-only-flat", "config.aux-layers: ids in eagle_config only",
             edit=defect("aux-ids-in-eagle-config-only")),
        Case("aux-disagree-flat", "config.aux-layers: top-level [1,3,5] vs eagle_config [2,4,6]",
             edit=aux_ids(top=[1, 3, 5], eagle=[2, 4, 6])),
        Case("aux-none-flat", "config.aux-layers: no ids anywhere (engine defaults)", edit=aux_ids()),
        Case("aux-last-layer-flat", "S13: ids [1,3,7] on an 8-layer Llama target (id N-1)",
             edit=aux_ids([1, 3, 7], [1, 3, 7])),
        Case("aux-unsorted-flat", "aux ids written unsorted [5,1,3]", edit=aux_ids([5, 1, 3], [5, 1, 3])),
        Case("aux-qwen3-target-flat", "S12: Qwen3ForCausalLM target, ids [1,3,5]", target=QWEN3),
        *[Case(f"aux-deepseek-{ids[0]}-{where}-flat", f"S12: DeepseekV3ForCausalLM target, ids {ids} {where}",
               edit=aux_ids(ids if where != "eagle-config-only" else None, ids if where != "top-only" else None),
               target=DEEPSEEK)
          for ids in ([1, 3, 5], [2, 4, 6]) for where in ("both", "top-only", "eagle-config-only")],
        Case("aux-deepseek-none-flat", "S12: DeepseekV3ForCausalLM target, no ids", edit=aux_ids(), target=DEEPSEEK),
        Case("aux-deepseek-2-speculators", "S12: DeepseekV3ForCausalLM target, speculators ids [2,4,6]",
             SPECULATORS, config(eagle_aux_hidden_state_layer_ids=[2, 4, 6]), target=DEEPSEEK),
        *[Case(f"aux-kimi-k25-{ids[0]}-flat", f"S12: KimiK25ForConditionalGeneration target, ids {ids}",
               edit=aux_ids(ids, ids), target=KIMI_K25) for ids in ([1, 3, 5], [2, 4, 6])],
        Case("aux-gpt-oss-max-n-flat", "S12: GptOssForCausalLM target (8 layers), ids [2,4,8]: max id == N",
             edit=aux_ids([2, 4, 8], [2, 4, 8]), target=GPT_OSS),
        Case("aux-gpt-oss-below-n-flat", "S12: GptOssForCausalLM target (8 layers), ids [1,3,5]: max id < N",
             target=GPT_OSS),
        # ----- Kimi-K2-shaped ids on a 61-layer DeepSeek-V3 target, trained (SGLang's counting) on the
        # outputs of layers 2, 30, 58: as `fix` writes them, and as a trainer may have left them
        Case("aux-kimi-3-31-59-both-flat", "ids [3,31,59] top level and eagle_config on a 61-layer "
             "DeepSeek-V3 target (trained outputs [2,30,58], written for both engines)",
             edit=aux_ids([3, 31, 59], [3, 31, 59]), target=DEEPSEEK_61),
        *[Case(f"aux-kimi-2-30-58-{where}-flat", f"ids [2,30,58] {where} on a 61-layer DeepSeek-V3 target",
               edit=aux_ids([2, 30, 58] if where != "eagle-config-only" else None,
                            [2, 30, 58] if where != "top-only" else None), target=DEEPSEEK_61)
          for where in ("eagle-config-only", "both", "top-only")],
    ]
    names = [c.name for c in out]
    assert len(names) == len(set(names)), "duplicate checkpoint names"
    return out


def source_hash(directory: Path) -> str:
    """sha256 over config.json's bytes, then each safetensors file's JSON header (sorted by file name)."""
    digest = hashlib.sha256((directory / "config.json").read_bytes())
    for path in sorted(directory.glob("*.safetensors")):
        with open(path, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            digest.update(fh.read(length))
    return digest.hexdigest()


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def build(out_dir: Path | str) -> list[dict[str, Any]]:
    """Write every checkpoint, its target config and manifest.json into ``out_dir`` (which must be empty or
    absent, so nothing stale survives); return the manifest entries."""
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} is not empty")
    manifest = []
    for case in cases():
        draft = Draft.example(case.layout, case.shape, SEED, case.first_layer)
        if case.edit:
            case.edit(draft)
        draft.save(out_dir / case.name)
        target = Path("targets") / case.target.slug / "config.json"
        if not (out_dir / target).exists():
            _write_json(out_dir / target, case.target.config())
        manifest.append({"name": case.name, "dir": case.name, "layout": case.layout,
                         "target_config": target.as_posix(), "target_architecture": case.target.architecture,
                         "why": case.why, "source_hash": source_hash(out_dir / case.name),
                         **({"context_length": case.context_length} if case.context_length else {})})
    _write_json(out_dir / "manifest.json", manifest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path, help="empty or absent directory to write the set into")
    args = parser.parse_args(argv)
    manifest = build(args.out_dir)
    print(f"{len(manifest)} checkpoints in {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
