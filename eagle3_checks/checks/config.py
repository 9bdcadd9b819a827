"""config.*: the config's own semantics, and its agreement with the tensors it describes."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .. import engines
from ..basis import INFERRED, READ
from ..drafter.config_values import TLC, missing_required, rope_scaling_problems
from ..drafter.families.mla import CONFIG_DEFAULTS
from ..drafter.layout import (
    FLAT,
    FLAT_ARCHITECTURES,
    MLA,
    MLA_ARCHITECTURES,
    MLA_CONFIG_FIELDS,
    SPECULATORS,
    SPECULATORS_ARCHITECTURES,
    SPECULATORS_KINDS,
    eagle3_class,
    speculators_kind,
)
from ..engines.reading import SEMANTIC_FIELDS, shown
from ..registry import (
    Context,
    Finding,
    NotApplicable,
    add,
    check,
    error,
    info,
    modelled_only,
    note,
    warning,
)
from ..storage.safetensors import json_type
from ._common import (
    CONFIG,
    config_key,
    config_of,
    draft_rows,
    engine_captures,
    identity_of,
    pointer,
    require_complete,
    served,
    trained_of,
)


@check(
    "config.fields",
    "config.json has the fields a drafter needs, with the right types",
    example="intermediate-size-missing",
    guards="Hand-edited or half-converted configs: a missing hidden_size or vocab_size, a string where a number "
    "belongs, a speculators config without the structure vLLM validates.",
    evidence=("vLLM transformers_utils/configs/speculators/base.py validate_speculators_config",),
    fix="write every required field (hidden_size, num_attention_heads, intermediate_size, vocab_size) with its JSON "
    "type; keep a speculators config's structure as save_pretrained writes it",
    codes={
        "invalid-field": "a field of the wrong JSON type or value",
        "missing-field": "a required field is missing",
        "eagle-config-not-object": "eagle_config is not a JSON object",
        "null-target-hidden-size": "target_hidden_size is null",
        "speculators-model-type": "speculators_model_type is not eagle3",
        "speculative-tokens": "speculators_config's speculative_tokens is missing or invalid",
        "verifier-missing": "speculators_config.verifier.name_or_path is missing",
        "mla-field-missing": "an MLA drafter's config lacks an MLA attention size (kv_lora_rank, ...)",
        "mla-rope-odd": "an odd qk_rope_head_dim (rope rotates pairs)",
        "mla-q-proj": note("q_lora_rank null: one q_proj, which the engines' MLA drafters cannot load"),
    },
)
def fields(ctx: Context) -> Iterable[Finding]:
    cfg = config_of(ctx)
    for p in cfg.problems:
        yield error(f"{CONFIG}: {p.message}", file=CONFIG, key=p.key, expected=p.expected, found=p.found,
                    why="engines read the field with this type; anything else fails at load or is misread",
                    fix=f"write {p.key} as {p.expected}", code="invalid-field")
    for name in missing_required(cfg):
        if cfg.entry(name) is not None:
            continue  # present but invalid: reported above
        yield error(f"{CONFIG}: {config_key(cfg, name)} is missing", file=CONFIG, key=config_key(cfg, name),
                    expected="a positive integer", found="absent",
                    why="engines fall back to transformers' LlamaConfig defaults (hidden_size 4096, vocab_size 32000), "
                    "which are not this drafter's",
                    fix=f"state {name} explicitly", code="missing-field")
    if cfg.family == MLA:
        yield from _mla_fields(cfg)
    if cfg.layout == FLAT and cfg.raw.get("eagle_config") is not None and not isinstance(cfg.raw["eagle_config"],
                                                                                          dict):
        found = cfg.raw["eagle_config"]  # (null means unset, as for other fields)
        yield error(f"{CONFIG}: eagle_config is a JSON {json_type(found)} ({json.dumps(found)[:60]}), not an object",
                    file=CONFIG, key="eagle_config", expected='an object ({"eagle_aux_hidden_state_layer_ids": [...]})',
                    code="eagle-config-not-object", found=json_type(found),
                    why="SGLang 0.5.6 reads the aux-layer ids only from eagle_config; anything but an object gives it "
                    "none, and it captures its default layers",
                    fix='write "eagle_config": {"eagle_aux_hidden_state_layer_ids": [ids]}')
    if cfg.layout == FLAT and "target_hidden_size" in cfg.nulls:
        yield error(f"{CONFIG}: target_hidden_size is null", file=CONFIG, key="target_hidden_size",
                    expected="a number, or no such field", found="null",
                    why="vLLM (getattr) and SGLang (hasattr) take the attribute as it is and compute fc's input as "
                    "None x 3: the drafter fails to load",
                    fix="remove target_hidden_size, or state the target's hidden size", code="null-target-hidden-size")
    if cfg.layout == SPECULATORS:
        raw = cfg.raw
        if speculators_kind(raw) is None:
            yield error(f"{CONFIG}: speculators_model_type is {raw.get('speculators_model_type')!r}",
                        code="speculators-model-type", file=CONFIG, key="speculators_model_type",
                        expected='"eagle3" (or "peagle", a P-EAGLE drafter)',
                        found=repr(raw.get("speculators_model_type")),
                        why="vLLM and speculators pick the drafter class from this field and refuse other values",
                        fix='set "speculators_model_type": "eagle3"')
        spec = raw.get("speculators_config")
        methods = spec.get("proposal_methods") if isinstance(spec, dict) else None
        first = methods[0] if isinstance(methods, list) and methods else None
        tokens = first.get("speculative_tokens") if isinstance(first, dict) else None
        if not (isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0):
            yield error(f"{CONFIG}: speculators_config.proposal_methods[0].speculative_tokens is missing or invalid",
                        file=CONFIG, key="speculators_config.proposal_methods[0].speculative_tokens",
                        code="speculative-tokens", expected="a positive integer", found=repr(tokens),
                        why="vLLM rejects the config (\"Invalid speculators config structure\")",
                        fix="write the speculators_config block as speculators' save_pretrained does")
        verifier = spec.get("verifier") if isinstance(spec, dict) else None
        if not isinstance(verifier, dict) or "name_or_path" not in verifier:
            yield error(f"{CONFIG}: speculators_config.verifier.name_or_path is missing", file=CONFIG,
                        code="verifier-missing",
                        key="speculators_config.verifier.name_or_path", expected="the verifier's name (or null)",
                        found="absent", why="vLLM rejects the config (\"Invalid speculators config structure\")",
                        fix="add the verifier block: {\"name_or_path\": ..., \"architectures\": [...]}")


def _mla_fields(cfg) -> Iterable[Finding]:
    """The MLA family's attention sizes: each stated (a positive integer; q_lora_rank may be null, meaning q_proj),
    qk_rope_head_dim even. A wrong type is reported above with every other field."""
    for name in MLA_CONFIG_FIELDS:
        if name in cfg.raw:
            continue
        default = CONFIG_DEFAULTS[name]
        yield error(f"{CONFIG}: {name} is missing from an MLA drafter's config", file=CONFIG, key=name,
                    expected="a positive integer" + (" or null (q_proj)" if name == "q_lora_rank" else ""),
                    found="absent",
                    why=f"the engines read it from the config class: DeepseekV3Config (model_type kimi_k2 or "
                    f"deepseek_v3) gives {default}, which need not be this drafter's; vLLM 0.33 takes 0 under "
                    "any other class (deepseek_eagle3.py:64-67) and SGLang 0.5.23 raises AttributeError "
                    "(kimi_k25_eagle3.py:91-99): the attention is built with other sizes than the weights",
                    fix=f"state {name} as the drafter was trained", code="mla-field-missing")
    rope = cfg["qk_rope_head_dim"]
    if isinstance(rope, int) and rope % 2:
        yield error(f"{CONFIG}: qk_rope_head_dim {rope} is odd", file=CONFIG, key="qk_rope_head_dim",
                    expected="an even number", found=str(rope),
                    why="rotary embeddings rotate pairs of dimensions: no engine builds the MLA rope with an odd width",
                    fix="state the qk_rope_head_dim the drafter was trained with", code="mla-rope-odd")
    if "q_lora_rank" in cfg.nulls:
        yield info(f"{CONFIG}: q_lora_rank is null: q is one q_proj from the layer input (no q_a_proj / q_b_proj); "
                   "vLLM 0.33 builds that attention (deepseek_v2.py:1090-1097) but its MLA drafter's loader cannot "
                   "load it (deepseek_eagle3.py:258-267), SGLang 0.5.23 refuses it (kimi_k25_eagle3.py:113-117): see "
                   "engine.loads", file=CONFIG, key="q_lora_rank", code="mla-q-proj")


@check(
    "config.architectures",
    "architectures names a drafter class of the config's layout",
    example="speculators-class-in-flat",
    guards="A flat config still naming Eagle3DraftModel (vLLM: architecture not supported), or a speculators "
    "config renamed to LlamaForCausalLMEagle3 without converting its structure. Another name is judged per selected "
    "engine release (vLLM serves LlamaForCausalLM as Eagle3LlamaForCausalLM; SGLang builds the target's class): an "
    "error only when none serves it. A drafter family eagle3-checks does not model (MLA) is one not-modelled "
    "warning, and the checks assuming Llama-shaped layers skip.",
    evidence=("vLLM model_executor/models/registry.py", "SGLang 0.5.6 models/llama_eagle3.py EntryClass"),
    fix='name the drafter class of the layout: ["LlamaForCausalLMEagle3"] for a flat config, ["Eagle3DraftModel"] '
    'for a speculators one',
    codes={
        "not-modelled": "a drafter family eagle3-checks does not model (MLA): its Llama-shaped checks skip",
        "flat-class-in-speculators": "a speculators config names a flat-layout class",
        "not-speculators-class": "a speculators config names no speculators EAGLE-3 class",
        "missing": "a flat config without architectures",
        "speculators-class-in-flat": "a flat config names a speculators class",
        "not-a-drafter-class": "no selected engine release serves the named class",
        "refused-by-some": "some selected engine releases refuse the named class",
        "served-as-named": note("not a drafter class name, but every selected release serves it"),
        "mla-class": "an MLA drafter whose architectures names no MLA drafter class",
    },
)
def architectures(ctx: Context) -> Iterable[Finding]:
    cfg = config_of(ctx)
    archs = cfg["architectures"] or []
    key = "architectures"
    family = ctx.ckpt.not_modelled
    if family:
        # One finding for the whole family, a warning: nothing is known to be wrong, and nothing was checked
        # (--strict fails on it). Every check that assumes a Llama-shaped layer skips with the same reason.
        skipped = ", ".join(modelled_only())
        yield warning(f"not modelled: {family[0]} ({family[1]}); these checks skipped: {skipped}", file=CONFIG, key=key,
                      expected="an EAGLE-3 drafter with Llama or Qwen3 decoder layers (what eagle3-checks models)",
                      found=str(archs),
                      why="the structural, engine and forward checks describe Llama-shaped layers; on this drafter "
                      "they would report its own tensors as errors. It is not verified: it may serve well or not",
                      fix="verify this drafter by other means (its engine's own load and an acceptance run); "
                      "--strict fails on it", code="not-modelled")
        return
    if ctx.ckpt.family == MLA:
        yield from _mla_architectures(ctx, archs, key)
        return
    if cfg.layout == SPECULATORS:
        kinds = SPECULATORS_KINDS.get(speculators_kind(cfg.raw) or "eagle3", SPECULATORS_ARCHITECTURES)
        if any(a in FLAT_ARCHITECTURES for a in archs):
            yield error(f"{CONFIG}: architectures {archs} names a flat-layout class in a speculators config",
                        code="flat-class-in-speculators",
                        file=CONFIG, key=key, expected=" or ".join(sorted(SPECULATORS_ARCHITECTURES)), found=str(archs),
                        why="the config is half-converted: vLLM still reads it as a speculators config (it has "
                        "speculators_config), other tools take the name at its word and misread the nested fields",
                        fix="convert the whole config to the flat layout, or restore [\"Eagle3DraftModel\"]")
        elif not any(a in kinds for a in archs):
            yield warning(f"{CONFIG}: architectures {archs} is not a speculators EAGLE-3 class", file=CONFIG, key=key,
                          expected=" or ".join(sorted(kinds)), found=str(archs),
                          why="vLLM derives the class from speculators_model_type, but other tools read architectures",
                          fix='set "architectures": ["Eagle3DraftModel"]', code="not-speculators-class")
        return
    if not archs:
        yield error(f"{CONFIG}: architectures is missing", file=CONFIG, key=key, expected='["LlamaForCausalLMEagle3"]',
                    found="absent", why="vLLM and SGLang choose the model class from architectures",
                    fix='add "architectures": ["LlamaForCausalLMEagle3"]', code="missing")
    elif any(a in SPECULATORS_ARCHITECTURES for a in archs):
        yield error(f"{CONFIG}: architectures {archs} is a speculators class in a flat config", file=CONFIG, key=key,
                    expected='["LlamaForCausalLMEagle3"]', found=str(archs),
                    why="vLLM raises \"Model architectures [...] are not supported\" for a flat config with this "
                    "name; SGLang has no such class",
                    fix='set "architectures": ["LlamaForCausalLMEagle3"]', code="speculators-class-in-flat")
    elif not any(a in FLAT_ARCHITECTURES for a in archs):
        yield _per_engine_architecture(ctx, archs, key)


MLA_CLASS = "Eagle3DeepseekV2ForCausalLM"  # the name both engines register (vLLM 0.33 also Eagle3DeepseekV3...)


def _mla_architectures(ctx: Context, archs: list, key: str) -> Iterable[Finding]:
    """An MLA drafter (drafter/families/mla.py): its class must be an MLA drafter class, and the selected releases
    must build it (SGLang 0.5.6 has none; SGLang 0.5.23 registers only Eagle3DeepseekV2ForCausalLM)."""
    if not any(eagle3_class(a) in MLA_ARCHITECTURES for a in archs):
        stated = "kv_lora_rank" in (ctx.ckpt.config_raw or {})
        why = "its config states MLA attention sizes (kv_lora_rank, ...)" if stated \
            else "its tensors are MLA attention (q_a_proj, kv_a_proj_with_mqa, ...)"
        yield error(f"{CONFIG}: architectures {archs} names no MLA drafter class, but the drafter is one: {why}",
                    file=CONFIG, key=key, expected=f'["{MLA_CLASS}"]', found=str(archs),
                    why="the engines build the layer the class names: vLLM 0.33's Llama-layer class raises for the MLA "
                    "tensors (\"There is no module or parameter named\"), SGLang's LlamaForCausalLMEagle3 drops them "
                    "silently and serves an attention it never loaded",
                    fix=f'set "architectures": ["{MLA_CLASS}"] (vLLM 0.33 deepseek_eagle3.py, SGLang 0.5.23 '
                    "kimi_k25_eagle3.py)", patch=[add("/architectures", [MLA_CLASS])], code="mla-class")
        return
    readers = [(spec, served(ctx, spec))
               for spec in (ctx.options.engines() if ctx.options else engines.resolve(None)[0])]
    if any(r.class_refusal for _, r in readers if r.layout_ok):
        yield _per_engine_architecture(ctx, archs, key)


def _per_engine_architecture(ctx: Context, archs: list, key: str) -> Finding:
    """A flat config naming no known drafter class: what each selected release that reads the flat layout builds
    from it. vLLM prefixes any name lacking Eagle3 (transformers_utils/configs/eagle.py:55-64: LlamaForCausalLM ->
    Eagle3LlamaForCausalLM), SGLang builds the name as it is (llama.py:968-973: the target's class). The
    engine-independent check must not contradict engine.loads: an error only when no selected release serves it."""
    readers = [(spec, served(ctx, spec))
               for spec in (ctx.options.engines() if ctx.options else engines.resolve(None)[0])]
    readers = [(spec, r) for spec, r in readers if r.layout_ok and not r.not_modelled]
    serving = [f"{spec} (builds {r.architecture})" for spec, r in readers if r.class_refusal is None]
    refusing = [f"{spec}: {r.class_refusal}" for spec, r in readers if r.class_refusal is not None]
    fix = 'set "architectures": ["LlamaForCausalLMEagle3"] (the name every engine release reads)'
    if ctx.ckpt.family == MLA:
        fix = f'set "architectures": ["{MLA_CLASS}"] (the MLA drafter class vLLM 0.33 and SGLang 0.5.23 register; ' \
              "SGLang 0.5.6 has none)"
    if not serving:
        return error(f"{CONFIG}: architectures {archs} is not an EAGLE-3 drafter class"
                     + (f"; no selected engine serves it ({'; '.join(refusing)})" if refusing else ""),
                     file=CONFIG, key=key, expected='["LlamaForCausalLMEagle3"]', found=str(archs),
                     why="an engine either refuses the name or builds a plain model from the drafter's weights",
                     fix=fix, code="not-a-drafter-class")
    if refusing:
        return warning(f"{CONFIG}: architectures {archs} is served by {', '.join(serving)}, refused by "
                       f"{'; '.join(refusing)}", file=CONFIG, key=key, expected='["LlamaForCausalLMEagle3"]',
                       found=str(archs), why="the drafter serves on some of the selected engine releases only "
                       "(engine.loads fails for the others)", fix=fix, code="refused-by-some")
    return info(f"{CONFIG}: architectures {archs} is not a drafter class name, but every selected engine release "
                f"serves it: {', '.join(serving)}; SGLang's releases read only LlamaForCausalLMEagle3 (they build "
                "any other name as it is: LlamaForCausalLM is the target model's class)", file=CONFIG, key=key,
                expected='["LlamaForCausalLMEagle3"]', found=str(archs), fix=fix, code="served-as-named")


@check(
    "config.layers",
    "num_hidden_layers matches the decoder layers present",
    example="num-hidden-layers-off",
    guards="A config without num_hidden_layers (transformers defaults to 32: vLLM builds 31 uninitialised layers "
    "without an error), or one that disagrees with the layers in the file.",
    fix='state num_hidden_layers as the number of decoder layers in the checkpoint',
    codes={
        "layer-gap": "a middle decoder layer has no tensors",
        "count-mismatch": "num_hidden_layers is not the number of layers in the file",
    },
)
def layers(ctx: Context) -> Iterable[Finding]:
    cfg = config_of(ctx)
    require_complete(ctx)
    present = ctx.ckpt.layers
    v = cfg.entry("num_hidden_layers")
    if v is None or v.value is None:
        raise NotApplicable("num_hidden_layers is invalid (see config.fields)")
    key = config_key(cfg, "num_hidden_layers")
    if present and present != list(range(len(present))):
        gaps = sorted(set(range(present[-1] + 1)) - set(present))
        yield error(f"decoder layers {gaps} have no tensors, but layers up to {present[-1]} do",
                    code="layer-gap", key="layers.*", expected=f"layers 0..{present[-1]}", found=f"layers {present}",
                    why="a missing middle layer is served uninitialised by vLLM without an error",
                    fix="re-export every decoder layer")
    if len(present) != v.value:
        source = "" if v.explicit else f" ({v.source}: the file does not state it)"
        yield error(f"{CONFIG}: num_hidden_layers is {v.value}{source}, the checkpoint has {len(present)} decoder "
                    f"layer(s)", file=CONFIG, key=key, expected=str(len(present)), found=str(v.value),
                    why="engines build num_hidden_layers layers: missing ones stay uninitialised in vLLM (no error), "
                    "SGLang 0.5.6 refuses anything but 1, SGLang 0.5.23 leaves them at ones or uninitialised, extra "
                    "tensors are refused or dropped",
                    fix=f"set num_hidden_layers: {len(present)}", code="count-mismatch")


@check(
    "config.vocab-sizes",
    "vocab_size and draft_vocab_size agree with the tensors",
    example="draft-vocab-size-off",
    guards="draft_vocab_size missing or off (vLLM defaults it to vocab_size and builds a full-vocabulary "
    "lm_head), vocab_size that is not the verifier's vocabulary.",
    evidence=("speculators PR #188 (transformer_layer_config.vocab_size must be the verifier's)",),
    fix="state vocab_size as the verifier's vocabulary and draft_vocab_size as lm_head's rows",
    codes={
        "vocab-size-mismatch": "vocab_size is not the embedding's (or t2d's) length",
        "draft-exceeds-vocab": "draft_vocab_size exceeds vocab_size",
        "draft-vocab-unstated": "draft_vocab_size is not stated and defaults to vocab_size",
        "draft-vocab-mismatch": "draft_vocab_size is not lm_head's (or d2t's) length",
    },
)
def vocab_sizes(ctx: Context) -> Iterable[Finding]:
    cfg = config_of(ctx)
    ckpt = ctx.ckpt
    v, dv = cfg["vocab_size"], cfg["draft_vocab_size"]
    if v is None:
        raise NotApplicable("vocab_size is missing or invalid (see config.fields)")
    v_key, dv_key = config_key(cfg, "vocab_size"), config_key(cfg, "draft_vocab_size")
    for role in ("embed_tokens.weight", "t2d"):
        shape = ckpt.shape(role)
        if shape and shape[0] != v:
            yield error(f"{CONFIG}: vocab_size {v}, but {ckpt.roles[role]} covers {shape[0]} tokens", file=CONFIG,
                        code="vocab-size-mismatch", key=v_key, expected=str(shape[0]), found=str(v),
                        why="vocab_size must be the verifier's vocabulary: engines size the embedding and the target "
                        "logits with it and reject or misalign the drafter otherwise",
                        fix=f"set vocab_size to the verifier's vocabulary ({shape[0]} if the tensors are right)")
    if dv is None:
        return
    rows = draft_rows(ckpt)  # read from the tensors: fix states them where lm_head and d2t agree
    if not cfg.explicit("draft_vocab_size") and rows and rows != {dv}:
        role, n = next((r, s[0]) for r in ("lm_head.weight", "d2t") if (s := ckpt.shape(r)))
        entry = cfg.entry("draft_vocab_size")
        source = (entry.source if entry is not None else None) or "default"
        yield error(f"{CONFIG}: draft_vocab_size is not stated and defaults to {dv} ({source}), but "
                    f"{ckpt.roles[role]} has {n} rows", file=CONFIG, key=dv_key, expected=str(n),
                    found=f"absent (default {dv})",
                    why="engines size lm_head and d2t from draft_vocab_size: built with the default, the lm_head "
                    f"does not fit its {n} rows (vLLM fails on the weight shape) and no d2t mapping is created",
                    fix=f"add \"draft_vocab_size\": {n}", code="draft-vocab-unstated",
                    patch=[add(pointer(dv_key), n)] if len(rows) == 1 else None)
        return
    if dv > v:
        yield error(f"{CONFIG}: draft_vocab_size {dv} exceeds vocab_size {v}", file=CONFIG, key=dv_key,
                    expected=f"<= {v}", found=str(dv), why="the draft vocabulary is a subset of the target's",
                    fix="state the two sizes the drafter was trained with", code="draft-exceeds-vocab")
    for role in ("lm_head.weight", "d2t"):
        shape = ckpt.shape(role)
        if not shape or shape[0] == dv:
            continue
        yield error(f"{CONFIG}: draft_vocab_size {dv}, but {ckpt.roles[role]} has {shape[0]} rows", file=CONFIG,
                    key=dv_key, expected=str(shape[0]), found=str(dv),
                    why="engines size lm_head and d2t from draft_vocab_size; a mismatch fails at load or "
                    "maps logits to the wrong tokens",
                    fix=f"set draft_vocab_size: {shape[0]} if the tensors are right", code="draft-vocab-mismatch")
        break


@check(
    "config.aux-layers",
    "aux-layer ids are stated once, consistently, and match the fc width",
    example="aux-ids-repeated",
    guards="No explicit aux ids (engines fall back to their defaults: 1.21% acceptance instead of 58.9%), ids in "
    "two places that disagree, an id count that does not match fc's input width.",
    evidence=("vLLM PR #50170 (default aux layers: 1.21% vs 58.9%)", "SGLang #32226 (aux count vs fc width)"),
    fix='state the aux-layer ids the drafter was trained on, once, ascending, one per fc input block',
    codes={
        "convention-unknown": "the engines capture different layers and how the trainer counted is unknown",
        "two-places": note("eagle_config and the top level state different ids, each for the engine reading it"),
        "missing": "no aux-layer ids are stated",
        "repeated": "an aux-layer id repeats",
        "unsorted": "aux-layer ids are not ascending",
        "count-mismatch": "num_aux_hidden_states is not the number of ids",
        "fc-width": "fc's input width is not the number of ids x the target's hidden size",
    },
)
def aux_layers(ctx: Context) -> Iterable[Finding]:
    cfg = config_of(ctx)
    key = config_key(cfg, "aux_layer_ids")
    yield from _aux_captures(ctx, cfg)
    ids = cfg["aux_layer_ids"]
    if cfg.entry("aux_layer_ids") is not None and ids is None:
        return  # wrong type: config.fields reports it
    if not ids:
        yield warning(f"{CONFIG}: no aux-layer ids are stated", code="missing", file=CONFIG, key=key,
                      expected="the target layer ids the drafter was trained on", found="absent or empty",
                      why="engines then capture their default layers, which need not be the ones the drafter was "
                      "trained on (vLLM PR #50170: 1.21% acceptance instead of 58.9%)",
                      fix=f"state {key} explicitly")
    else:
        if len(set(ids)) != len(ids):
            yield error(f"{CONFIG}: aux-layer ids {ids} repeat a layer", code="repeated", file=CONFIG, key=key,
                        expected="distinct layer ids", found=str(ids),
                        why="engines capture each layer once; the fc input is then shorter than trained",
                        fix="state the distinct ids the drafter was trained with")
        elif ids != sorted(ids):
            yield warning(f"{CONFIG}: aux-layer ids {ids} are not ascending", code="unsorted", file=CONFIG, key=key,
                          expected=str(sorted(ids)), found=str(ids),
                          why="engines concatenate aux states in layer order, whatever the list order",
                          fix=f"write them ascending: {sorted(ids)}",
                          patch=[add(pointer(k), sorted(ids)) for k in _id_keys(cfg) if _at(cfg.raw, k) == ids])
        count = cfg["num_aux_hidden_states"]
        if count is not None and count != len(ids):
            yield error(f"{CONFIG}: num_aux_hidden_states {count} but {len(ids)} aux-layer ids", file=CONFIG,
                        code="count-mismatch", key="num_aux_hidden_states", expected=str(len(ids)), found=str(count),
                        why="vLLM sizes fc from num_aux_hidden_states first; the captured states then do not fit",
                        fix=f"set num_aux_hidden_states to {len(ids)}", patch=[add("/num_aux_hidden_states", len(ids))])
    fc = ctx.ckpt.shape("fc.weight")
    ht = cfg.target_hidden
    if fc and len(fc) == 2 and ht:
        a = cfg.num_aux
        if fc[1] != a * ht:
            k = fc[1] / ht
            fits = f"{int(k)} aux states" if k == int(k) else f"no whole number of {ht}-wide aux states"
            yield error(f"fc.weight takes {fc[1]} inputs = {fits}, but the config implies {a} x {ht} = {a * ht}",
                        file=ctx.ckpt.file_of("fc.weight"), key="fc.weight", expected=f"(H, {a * ht})",
                        found=str(fc), why="fc was trained on as many captured states as there are aux ids; a "
                        "drafter whose config names another count cannot be served with the layers it was trained "
                        "on (SGLang #32226: 8640 vs 5760; how each engine sizes fc is the forward check's business)",
                        fix="state exactly the aux-layer ids the drafter was trained with (and target_hidden_size "
                        "when the target is wider than the drafter)", code="fc-width")


def _id_keys(cfg) -> tuple[str, ...]:
    return ("eagle_aux_hidden_state_layer_ids",) if cfg.layout == SPECULATORS else \
        ("eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids")


def _at(raw: dict, key: str):
    node: Any = raw
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _aux_captures(ctx: Context, cfg) -> Iterable[Finding]:
    """The layers each selected engine release captures from the field it reads, judged from the one model of the
    trained layers (engines.trained_aux) that engine.aux-layers uses too: ids that differ between the top level and
    eagle_config are right when each is right for the release that reads it."""
    raw = cfg.raw
    nested = raw.get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids") \
        if isinstance(raw.get("eagle_config"), dict) else None
    top = raw.get("eagle_aux_hidden_state_layer_ids")
    target = engines.target_of(ctx.ckpt, ctx.target)
    trained = engines.trained_aux(ctx.ckpt, ctx.options.aux_convention if ctx.options else None, target,
                                  identity_of(ctx))
    captures = engine_captures(ctx)
    said = "; ".join(f"{spec} reads {field} {ids}: the outputs of layers "
                     f"{list(layers) if layers is not None else '(depends on the target)'}"
                     for spec, (field, ids, layers) in captures.items())
    differ = cfg.layout == FLAT and nested is not None and top is not None and nested != top
    distinct = {layers for _, _, layers in captures.values() if layers is not None}
    if trained.layers is None and len(distinct) > 1:
        yield warning(f"{CONFIG}: the engines capture different target layers from these ids ({said or 'none read'})"
                      + (f"; eagle_config has {nested}, the top level {top}" if differ else "")
                      + f", and how the trainer counted is {trained.how}", code="convention-unknown", file=CONFIG,
                      key=config_key(cfg, "aux_layer_ids"),
                      expected="the trainer's convention, to know which engine is fed the trained layers",
                      found="unknown", why="at most one of the captures is what the drafter was trained on; the "
                      "other engine feeds it states one layer off (vLLM PR #43671: ~10% first-token acceptance "
                      "instead of ~45%)",
                      fix="pass --aux-convention vllm or sglang (how the trainer counted), then follow "
                      "engine.aux-layers' fix for each engine")
    elif differ:
        trained_on = f"the drafter was trained on the outputs of layers {list(trained.layers)}" if trained.layers \
            else f"how the trainer counted is {trained.how}"
        yield info(f"{CONFIG}: eagle_config has {nested} and the top level {top}: each engine reads one ({said}); "
                   f"{trained_on} (engine.aux-layers judges each engine)", code="two-places", file=CONFIG,
                   key=config_key(cfg, "aux_layer_ids"))


@check(
    "config.head-dim",
    "head_dim is stated whenever it differs from hidden_size / num_attention_heads",
    example="head-dim-missing",
    modelled_only=True,
    guards="A config without head_dim for a drafter whose heads are not H/nh wide: Kimi-K2's 128 becomes 112 "
    "(transformers LlamaConfig) or 64 (model_type kimi_k2, parsed as DeepseekV3Config).",
    evidence=("the AQ-MedAI Kimi-K2 drafter (reference_specs/aq-medai-kimi-k2-eagle3.json): head_dim 128 where "
              "hidden_size / num_attention_heads is 7168 / 64 = 112, transformers LlamaConfig's default",),
    fix='state head_dim explicitly',
    codes={
        "missing": "head_dim is not stated and the default differs from the tensors' head size",
        "class-default": "head_dim is not stated and only the model_type's class default matches",
        "mla-head-dims": note("an MLA drafter's q/k and v head widths (head_dim is not read)"),
    },
)
def head_dim(ctx: Context) -> Iterable[Finding]:
    cfg = config_of(ctx)
    if cfg.family == MLA:
        yield from _mla_head_dims(cfg)
        return
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    q = ctx.ckpt.shape("layers.0.self_attn.q_proj.weight")
    if not (h and nh and q):
        raise NotApplicable("needs hidden_size, num_attention_heads and layers.0 q_proj")
    if q[0] % nh:
        raise NotApplicable(f"q_proj has {q[0]} rows, not a multiple of {nh} heads (see shapes)")
    implied = q[0] // nh
    v = cfg.entry("head_dim")
    assert v is not None  # read_config gives head_dim a value, stated or derived
    if v.explicit:
        return  # agreement with the tensors is the shapes check's
    key = config_key(cfg, "head_dim")
    if implied != v.value:
        yield error(f"{CONFIG}: head_dim is not stated; engines would use {v.value} ({v.source}) but q_proj holds "
                    f"{nh} heads of {implied}", file=CONFIG, key=key, expected=str(implied), found="absent",
                    why=f"vLLM and SGLang build attention with head_dim {v.value} and cut the q/k/v weights to fit "
                    "without an error (their linear weight loaders narrow; see engine.loads), or "
                    "with a matching default compute different attention than was trained",
                    fix=f"add \"head_dim\": {implied}", patch=[add(pointer(key), implied)], code="missing")
    elif implied != h // nh:
        yield warning(f"{CONFIG}: head_dim is not stated; {implied} matches only the {cfg['model_type']} class "
                      "default, "
                      f"not hidden_size / num_attention_heads = {h // nh}", code="class-default", file=CONFIG, key=key,
                      expected=str(implied), found="absent",
                      why="another reader (a different model_type, a Llama config) derives a different head_dim",
                      fix=f"add \"head_dim\": {implied}", patch=[add(pointer(key), implied)])


def _mla_head_dims(cfg) -> Iterable[Finding]:
    """An MLA drafter's heads are sized by its MLA fields, not head_dim: q and k are qk_nope_head_dim +
    qk_rope_head_dim wide, v is v_head_dim (vLLM 0.33 deepseek_v2.py, SGLang 0.5.23 DeepseekV2AttentionMLA; neither
    reads head_dim for them). config.fields demands the fields; shapes holds the tensors to them."""
    nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    if None in (nope, rope, v):
        return  # missing or invalid: config.fields says which
    stated = cfg.entry("head_dim")
    note = (f"; head_dim {stated.value} is stated and read by neither engine's MLA attention"
            if stated is not None and stated.explicit else "")
    yield info(f"{CONFIG}: MLA heads: q and k {nope} + {rope} = {nope + rope} wide (qk_nope_head_dim + "
               f"qk_rope_head_dim), v {v} wide (v_head_dim){note}", file=CONFIG, key="qk_nope_head_dim",
               code="mla-head-dims")


@check(
    "config.tied-embeddings",
    "tie_word_embeddings is compatible with the draft vocabulary",
    example="tied-embeddings",
    guards="tie_word_embeddings true with a draft vocabulary: SGLang makes lm_head the embedding (V rows) while "
    "cutting logits to the draft vocabulary, so drafted ids point at the wrong tokens.",
    fix='set tie_word_embeddings: false and ship lm_head.weight with the draft-vocabulary rows',
    codes={
        "draft-vocab": "tie_word_embeddings with a draft vocabulary",
        "own-lm-head": "tie_word_embeddings with a separate lm_head.weight",
        "target-head": note("tied embeddings, neither lm_head nor embed_tokens: the target's embedding is the head"),
    },
)
def tied_embeddings(ctx: Context) -> Iterable[Finding]:
    cfg = config_of(ctx)
    if not cfg["tie_word_embeddings"]:
        return
    v, dv = cfg["vocab_size"], cfg["draft_vocab_size"]
    key = config_key(cfg, "tie_word_embeddings")
    if v and dv and dv < v:
        yield error(f"{CONFIG}: tie_word_embeddings is true with draft_vocab_size {dv} < vocab_size {v}", file=CONFIG,
                    code="draft-vocab", key=key, expected="false", found="true",
                    why="SGLang uses the V-row embedding as lm_head and keeps the first DV logits: draft ids no "
                    "longer match d2t; vLLM loads the separate lm_head: the engines disagree",
                    fix="set tie_word_embeddings: false and ship lm_head.weight with the draft-vocabulary rows")
    elif ctx.ckpt.has("lm_head.weight"):
        yield warning(f"{CONFIG}: tie_word_embeddings is true but the checkpoint has its own lm_head.weight",
                      code="own-lm-head", file=CONFIG, key=key, expected="false (or no lm_head.weight)", found="true",
                      why="SGLang ties lm_head to the embedding and drops lm_head.weight, vLLM loads it: the two "
                      "engines compute different logits unless the tensors are equal",
                      fix="set tie_word_embeddings: false")
    elif not ctx.ckpt.has("embed_tokens.weight"):
        yield info("tie_word_embeddings is true and neither lm_head nor embed_tokens is in the checkpoint: engines "
                   "use the target's embedding as the head", code="target-head", file=CONFIG, key=key)


@check(
    "config.rope",
    "rope settings are stated, and stated once",
    example="rope-theta-conflict",
    modelled_only=True,
    guards="A legacy rope_theta and transformers 5's rope_parameters that disagree, unusable rope scaling, or no "
    "rope_theta where the trainer and the engines default differently (all using 10000 is a note; a theta lost in "
    "conversion, as 1e6 on Kimi drafters, is caught by reference.diff and forward.equivalence --source).",
    evidence=("SpecForge #265 (rope_theta ignored)", "Automodel PR #2920", "speculators PR #574 (rope_scaling lost)"),
    fix="state rope_theta (and rope_scaling) as the target model's config does, in rope_theta and rope_parameters "
    "alike",
    codes={
        "theta-conflict": "rope_theta and rope_parameters.rope_theta differ",
        "unusable-scaling": "rope scaling transformers' rope init refuses",
        "suspect-scaling": "rope scaling that loads but computes wrong frequencies",
        "theta-default": note("no rope_theta: the trainer and every selected engine use the same default"),
        "theta-unstated": "no rope_theta, and the trainer and the engines default differently",
        "mla-rope-type": "an MLA drafter's rope_type other than yarn or default",
        "mla-yarn-factor": "an MLA drafter's yarn rope without a factor",
    },
)
def rope(ctx: Context) -> Iterable[Finding]:
    cfg = config_of(ctx)
    raw = cfg.raw.get(TLC, {}) if cfg.layout == SPECULATORS else cfg.raw
    if not isinstance(raw, dict):
        raise NotApplicable("transformer_layer_config is not an object (see config.fields)")
    prefix = "transformer_layer_config." if cfg.layout == SPECULATORS else ""
    legacy = raw.get("rope_theta")
    params = raw.get("rope_parameters") if isinstance(raw.get("rope_parameters"), dict) else None
    scaling = raw.get("rope_scaling") if isinstance(raw.get("rope_scaling"), dict) else None
    nested = (params or {}).get("rope_theta", (scaling or {}).get("rope_theta"))
    if legacy is None and nested is None:
        yield _unstated_theta(ctx, f"{prefix}rope_theta")
    elif legacy is not None and nested is not None and legacy != nested:
        yield error(f"{CONFIG}: rope_theta {legacy} and rope_parameters.rope_theta {nested} differ", file=CONFIG,
                    key=f"{prefix}rope_parameters.rope_theta", expected="one value", found=f"{legacy} vs {nested}",
                    why="transformers 4 and SGLang 0.5.6 read rope_theta, transformers 5 reads rope_parameters: "
                    "engines disagree on positions",
                    fix="write the trained value in both places", code="theta-conflict")
    if cfg.family == MLA:
        yield from _mla_rope(cfg, raw)
    for name in ("rope_scaling", "rope_parameters"):
        for problem in rope_scaling_problems(raw.get(name)):
            make = error if problem.fatal else warning
            yield make(f"{CONFIG}: {name}.{problem}", file=CONFIG, key=f"{prefix}{name}.{problem.key}",
                       code="unusable-scaling" if problem.fatal else "suspect-scaling",
                       expected=problem.expected, found=json.dumps(problem.value),
                       why=("transformers' rope init (which vLLM and SGLang use) fails on it: an engine reading this "
                            "object refuses the drafter at load" if problem.fatal else
                            "the rope init accepts it without an error and computes infinite, NaN or unscaled "
                            "frequencies: positions are wrong and acceptance drops"),
                       fix="copy the rope settings from the target model's config")


def _mla_rope(cfg, raw: dict) -> Iterable[Finding]:
    """An MLA drafter's rope is DeepSeek's: plain, or yarn (both engines build DeepSeek yarn for any other rope_type,
    vLLM 0.33 deepseek_v2.py:1115-1120, SGLang 0.5.23 deepseek_v2.py:2064-2066) whose factor vLLM reads without a
    default (KeyError; SGLang takes 1.0: no scaling)."""
    for name in ("rope_parameters", "rope_scaling"):
        scaling = raw.get(name)
        if not isinstance(scaling, dict):
            continue
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind == "default":
            return
        if kind != "yarn":
            yield warning(f"{CONFIG}: {name}.rope_type {kind!r} on an MLA drafter", file=CONFIG,
                          key=f"{name}.rope_type", expected='"yarn" (or "default")', found=json.dumps(kind),
                          why="vLLM 0.33 and SGLang 0.5.23 build DeepSeek's yarn rope for any rope_type but default: "
                          f"the {kind} parameters are read as yarn's, and transformers' DeepSeek-V3 attention (what "
                          "the config states) does not model it",
                          fix="state the rope the drafter was trained with, as the target's config does",
                          code="mla-rope-type")
        if "factor" not in scaling:
            yield error(f"{CONFIG}: {name} is yarn without a factor", file=CONFIG, key=f"{name}.factor",
                        expected="the yarn factor (Kimi-K2.x: 64)", found="absent",
                        why="vLLM 0.33 reads rope_parameters['factor'] without a default and fails at load "
                        "(KeyError, deepseek_v2.py:1115-1136); SGLang 0.5.23 takes 1.0: no scaling at all",
                        fix="copy the rope scaling from the target model's config", code="mla-yarn-factor")
        return


def _unstated_theta(ctx: Context, key: str) -> Finding:
    """No rope_theta anywhere: judged by what the trainer and each selected engine release actually use. Where they
    all default alike (EAGLE's cnets.py and SpecForge build the rotary embedding with base 10000, as transformers'
    LlamaConfig/Qwen3Config do; vLLM 0.33 get_rope and SGLang llama.py:322-334 default to 10000) the drafter is
    served as it was trained: a note. Whether it was trained with that base is what reference.diff (a spec
    stating 1e6) and forward.equivalence --source (a source stating it) tell. Readers that differ: an error."""
    trained = trained_of(ctx).reading
    used: dict[str, tuple[float, str]] = {}
    if trained.layout_ok:
        used[trained.engine] = (trained.rope_theta, trained.sources.get("rope_theta", "default"))
    for spec in (ctx.options.engines() if ctx.options else engines.resolve(None)[0]):
        reading_ = served(ctx, spec)
        if reading_.layout_ok and not reading_.not_modelled:
            used[spec] = (reading_.rope_theta, reading_.sources.get("rope_theta", "default"))
    values = {theta for theta, _ in used.values()}
    listing = "; ".join(f"{who}: {theta:g} ({src})" for who, (theta, src) in used.items())
    if len(values) <= 1:
        theta = f"{next(iter(values)):g}" if values else "their default"
        return info(f"{CONFIG}: no rope_theta stated; the trainer and every selected engine use {theta} ({listing}): "
                    f"served as trained if it was trained with {theta} (a reference spec or --source says)",
                    code="theta-default", file=CONFIG, key=key, expected="rope_theta stated", found="absent",
                    fix="state rope_theta (and rope_scaling, if any) as in the target model's config")
    return error(f"{CONFIG}: no rope_theta stated, and its readers default differently: {listing}", file=CONFIG,
                 code="theta-unstated", key=key, expected="the rope_theta the drafter was trained with", found="absent",
                 why="engines that use another base than the trainer rotate positions at another frequency: "
                 "acceptance drops without an error (SpecForge #265)",
                 fix="state rope_theta (and rope_scaling, if any) as in the target model's config")


@check(
    "config.trainer-release",
    "Who trained the drafter is known from evidence, or what depends on it is said",
    example="trainer-release-unknown",
    guards="A checkpoint judged by a guess of its trainer: a field more than one trainer writes taken for proof of "
    "one (speculators 0.9.0's train CLI writes use_sliding_window, as SpecForge's templates do), then that "
    "trainer's conventions stated as fact and 'fixed' into a drafter that was right. Or a checkpoint whose "
    "meaning changed between trainer releases judged by the newest one's reading without saying so: SpecForge "
    "before PR #270 trained its rotary embedding with base 10000 whatever rope_theta said, and saves no release "
    "number.",
    evidence=("speculators 0.9.0 train/cli.py:211-231 (use_sliding_window, layer_types) and SpecForge 0.2.0 "
              "training/model_loading.py:47-68 (use_sliding_window, max_window_layers copied from the target)",
              "SpecForge 0.1.0 specforge/modeling/draft/llama3_eagle.py:248-252 (LlamaRotaryEmbedding without a "
              "base; its default 10000, :99) vs 0.2.0 :569-578 (base rope_theta); SpecForge d3472dde (PR #270, "
              "2025-10-30), 41bdd2a2 (PR #287), 1712b656 (PR #702)",
              "a published drafter stating rope_theta 1000000, trained with 10000 (the field survey)"),
    fix="gate with --source (the checkpoint it was converted from) or --trainer NAME@VERSION; or with --data: "
    "acceptance.trained-with decides the ambiguous fields from the weights",
    codes={
        "detected": note("the trainer and release, and how they were known"),
        "unknown-trainer": "nothing names the trainer and the candidates read this checkpoint differently: each "
        "reading is stated",
        "inferred": "the trainer is inferred from what only it writes, and another trainer would read this "
        "checkpoint differently",
        "unknown-release": "the trainer's releases read this checkpoint differently and it does not say which "
        "trained it: each reading is stated",
        "not-modelled": "a trainer release the gate does not model: the modelled release's reading judges it",
    },
)
def trainer_release(ctx: Context) -> Iterable[Finding]:
    config_of(ctx)
    identity = identity_of(ctx)
    trained = trained_of(ctx)
    if identity.name is not None and identity.version is not None:
        module = engines.TRAINERS[identity.name]
        known = [r.version for r in (*module.RELEASES, *getattr(module, "UNRELEASED", ()))]
        judged = engines.judge(identity.name, identity.version) if identity.name in engines.ENGINE_NAMES and \
            engines.version_key(identity.version) else None
        if identity.version not in known and (judged is None or judged.warning):
            yield warning(f"trained with {identity.name} {identity.version} ({identity.how}); "
                          + (str(judged.warning) if judged else
                             f"not a modelled release ({', '.join(known)}): judged as {module.VERSION}"),
                          code="not-modelled", file=CONFIG, key="speculators_version",
                          expected=f"a modelled {identity.name} release", found=identity.version, basis=INFERRED,
                          rests_on=f"the nearest modelled release's reading stands for {identity.version}",
                          settle="read that release's package and state its differences as a Release record",
                          why="speculators' defaults moved between releases (the EAGLE-3.1 flags, the layer config "
                          "class, fc's width): the trained computation may differ from the nearest release's",
                          fix="gate with --data: acceptance.trained-with decides the ambiguous fields from the weights")
            return
    differ = [name for name in SEMANTIC_FIELDS if trained.depends(name)]
    if not differ:
        said = identity.said() if identity.name else f"{trained.label} (every candidate reads it alike; " \
            f"{identity.how})"
        against = engines.judge(identity.name, identity.version).note if identity.version and \
            identity.name in engines.ENGINE_NAMES and engines.version_key(identity.version) else \
            f"{trained.label}'s reading"
        yield info(f"trained with {said}: judged against {against}", code="detected",
                   basis=identity.basis if identity.name else READ)
        return
    code = "unknown-trainer" if identity.name is None else "inferred" if identity.basis != READ else "unknown-release"
    readings = [(trained.label, trained.reading), *trained.others]
    said = "; ".join(f"{name}: " + ", ".join(f"{label} {shown(name, r, trained.reading)!r}" for label, r in readings)
                     for name in differ)
    who = {"unknown-trainer": f"the trainer is unknown ({identity.how})",
           "inferred": f"the trainer is {identity.name}, {identity.how}",
           "unknown-release": f"trained with {identity.name}, release unknown ({identity.how})"}[code]
    first = differ[0]
    yield warning(f"{who}, and the readings that leaves possible differ: {said}. The checks judge against "
                  f"{trained.label}'s reading; a finding that depends on the difference is a warning",
                  code="unknown-trainer" if identity.name is None else "inferred" if identity.basis != READ else
                  "unknown-release", file=CONFIG, key=first, basis=trained.basis_of(first), rests_on=identity.how,
                  settle=identity.settle + "; or --data (acceptance.trained-with decides from the weights)",
                  expected="a value that means the same under every reading the evidence leaves possible",
                  found=", ".join(f"{label}: {shown(first, r, trained.reading)!r}" for label, r in readings),
                  why="an engine serves one value; a drafter trained with another accepts less (the rope base: "
                  "alpha 0.792 vs 0.829 on the tests' trained world; the fed-back state: top-1 agreement 11 of 16 "
                  "at step 1)",
                  fix="state who trained it (--trainer, --source), or the value it was trained with, or gate with "
                  "--data (acceptance.trained-with decides from the weights)")
