"""What an engine makes of a checkpoint: a :class:`Reading`.

A reading is the answer to "if this engine loaded this directory, what would it compute?": which
on-disk tensor fills each parameter (and which parameters stay unfilled), the tensors it skips,
the hard load errors it would raise, and the semantic values it uses (sizes, norms, rope,
feedback between draft steps), each with where the value came from. The forward
implementation (:mod:`eagle3_checks.numerics.draft_steps`) runs a reading; the engine profiles report on it.

Each engine module (``vllm``, ``sglang``, ``speculators``, ``specforge``) builds readings from
the raw config and tensor names, mirroring that engine's own loader; the helpers here are the
parts they share.
"""

from __future__ import annotations

from dataclasses import field, fields
from typing import Any

from ..drafter.checkpoint import Checkpoint
from ..drafter.config_values import (
    PROVENANCE,
    TLC,
    class_defaults,
    normalized_rope_scaling,
    positive_number,
    rope_scaling_problems,
)
from ..drafter.expected import OPTIONAL, Dims, expected_tensors, fmt_shape, shape_matches
from ..drafter.families.mla import MlaReader, MlaShape, effective
from ..drafter.layout import parse_name
from ..fast_dataclass import dataclass

# What each knob means, for messages that compare two readings.
SEMANTIC_FIELDS = (
    "hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size", "num_layers", "rms_norm_eps",
    "hidden_act", "rope_theta", "rope_scaling", "num_aux", "target_hidden_size", "input_norm", "fc_norm",
    "norm_before_residual", "feedback", "final_norm", "qk_norm", "attention_bias", "o_bias", "mlp_bias",
    "lm_head_from_embed", "vocab_size", "draft_vocab_size", "later_norm", "fc_bias", "family", "mla",
    "sliding_window",
)
# Fields compared only where both readings read them (a release whose handling of them is not read says nothing).
READ_ONLY_WHERE_KNOWN = ("sliding_window",)


@dataclass
class Reading:
    """One engine's reading of one checkpoint. Semantic values are plain fields; ``sources`` says where each
    came from for this engine ("config.json: head_dim", "vLLM default: True when absent", ...)."""

    engine: str
    version: str
    layout: str
    # semantics
    hidden_size: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    intermediate_size: int | None = None
    num_layers: int = 1
    rms_norm_eps: float = 1e-6
    hidden_act: str = "silu"
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    num_aux: int = 3
    target_hidden_size: int | None = None
    input_norm: bool = False  # one RMSNorm over the fused aux states before fc (norm_before_fc)
    fc_norm: bool = False  # one RMSNorm per aux state before fc
    norm_before_residual: bool = False  # the first layer's residual is hidden_norm(h), not h
    feedback: str = "prenorm"  # what later draft steps get back: "prenorm" or "normed" (norm_output)
    final_norm: bool = True  # the final norm before lm_head
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3 layers)
    attention_bias: bool = False  # q/k/v (and o_proj, unless o_bias says otherwise) carry a bias
    mlp_bias: bool = False
    o_bias: bool | None = None  # o_proj's bias, where an engine builds it apart from q/k/v (SGLang 0.5.6)
    lm_head_from_embed: bool = False  # tie_word_embeddings: lm_head is the embedding
    later_norm: str = "input_layernorm"  # the pre-attention norm of layers >= 1 (SGLang 0.5.23: hidden_norm)
    fc_bias: bool = False  # fc carries a bias (SGLang: config "bias")
    vocab_size: int | None = None
    draft_vocab_size: int | None = None
    # the target layers the engine captures: the ids it reads (None: it falls back to its default), and how it
    # counts them ("vllm": id L = the residual stream entering layer L; "sglang": id X = the output of layer X)
    aux_layer_ids: list[int] | None = None
    aux_convention: str = "vllm"
    architecture: str | None = None  # the model class the engine builds
    max_position_embeddings: int | None = None
    # the context the engine derives for the drafter from its config, where it checks the served context against it
    # (SGLang's get_context_length: the first context key it finds, times a rope factor); None: not derived
    context_length: int | None = None
    sources: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # field -> the config key path it was read from
    # loading
    tensors: dict[str, str] = field(default_factory=dict)  # role -> on-disk name loaded into it
    unfilled: dict[str, str] = field(default_factory=dict)  # role -> what the engine has there instead
    ignored: dict[str, str] = field(default_factory=dict)  # on-disk name -> why the engine skips it
    # on-disk name -> how the engine's linear weight loader cut a tensor larger than the parameter it builds
    # (loaded without an error; each profile's ``narrows_at`` cites where)
    narrowed: dict[str, str] = field(default_factory=dict)
    # on-disk name -> the shape the loader keeps of a narrowed tensor: the leading rows (and columns) of each cut
    # dimension, as its narrow(dim, 0, size) at tensor-parallel rank 0 keeps them
    narrowed_to: dict[str, tuple[int, ...]] = field(default_factory=dict)
    unused: dict[str, str] = field(default_factory=dict)  # role -> why: loaded into a parameter never computed with
    # on-disk name -> what serves in its place: loaded, then replaced after load by the serving worker (SGLang's
    # set_embed puts the target's embedding there); not used by the computation, not ignored by the loader
    replaced: dict[str, str] = field(default_factory=dict)
    refusals: list[str] = field(default_factory=list)  # hard load errors
    refused_at: dict[str, str] = field(default_factory=dict)  # refusal -> the config key or tensor it is about
    # the refusal due to the architecture name alone (the release builds no EAGLE-3 drafter class from it), also in
    # refusals: config.architectures asks each release this, so the engine-independent check never contradicts one
    class_refusal: str | None = None
    layout_ok: bool = True  # False: the engine does not read this layout at all (nothing else is filled in)
    # The engine builds a drafter class eagle3-checks does not model (an MLA drafter, say): what it is, and why no
    # prediction is made. Nothing else is filled in; the engine checks skip with this reason.
    not_modelled: str | None = None
    # the decoder layer's family (drafter/families/: "llama" or "mla"), as the class the engine builds decides it
    family: str = "llama"
    # the drafter the engine builds: "eagle3", or "peagle" (P-EAGLE: EAGLE-3 with mask_hidden for the positions it
    # drafts in parallel; drafter/layout.py SPECULATORS_KINDS)
    kind: str = "eagle3"
    # the MLA family's attention as this reader computes it (a drafter.families.mla.MlaShape: sizes, rope, yarn factors,
    # softmax scale); None for the Llama family
    mla: Any = None
    # sliding-window attention (:func:`read_window`): the keys a query attends, itself included (q - k < W, as
    # transformers, speculators and vLLM's flash-attention (W - 1, 0) count), in the layers ``window_layers``; None:
    # full attention. ``window_from``: where the window is measured from at a later draft step: "query", the query's
    # position (a KV cache by position, as engines serve), or "row", the context row the draft started from
    # (speculators' training mask, models/eagle3/attention.py:16-19)
    sliding_window: int | None = None
    window_layers: tuple[int, ...] = ()
    window_from: str = "query"

    def idle_roles(self) -> set[str]:
        """The pre-attention norm each layer >= 1 builds and never uses: both engines build input_layernorm and
        hidden_norm in every layer (vLLM 0.33 llama_eagle3.py:98; SGLang 0.5.23 llama.py:366, llama_eagle3.py:86)
        and use one of them (``later_norm``); a checkpoint need not fill the other."""
        idle = "hidden_norm" if self.later_norm == "input_layernorm" else "input_layernorm"
        return {f"layers.{i}.{idle}.weight" for i in range(1, self.num_layers)}

    def semantics(self) -> dict[str, Any]:
        """The values that decide the computation (the MLA attention as the numbers it computes with, a window with
        the layers it applies to)."""
        out = {f: getattr(self, f) for f in SEMANTIC_FIELDS}
        if self.mla is not None:
            out["mla"] = effective(self.mla)
        out["sliding_window"] = self.window()
        return out

    def window(self) -> tuple[int, tuple[int, ...]] | None:
        """(window, the layers it applies to), or None: full attention in every layer."""
        return (self.sliding_window, self.window_layers) if self.sliding_window and self.window_layers else None

    def set(self, name: str, value: Any, source: str | None = None, key: str | None = None) -> None:
        """Record what the engine reads for ``name``: the value, the config key path it was read from (``key``, as
        data: checks and fixes use it), and where it came from in words (``source``; ``config.json: KEY`` by
        default)."""
        setattr(self, name, value)
        self.sources[name] = source if source is not None else f"config.json: {key}"
        if key is not None:
            self.keys[name] = key
        else:
            self.keys.pop(name, None)

    def refuse(self, why: str, at: str | None = None) -> None:
        """A hard load error, and the config key or tensor name it is about (``at``), when there is one."""
        self.refusals.append(why)
        if at is not None:
            self.refused_at[why] = at

    def refuse_class(self, why: str) -> None:
        """The release builds no EAGLE-3 drafter class from the architectures: ``class_refusal``, also a refusal."""
        self.class_refusal = why
        self.refusals.append(why)

    @property
    def servable(self) -> bool:
        """The engine loads the checkpoint and fills every parameter it computes with."""
        return not self.narrowed and self.computable

    @property
    def computable(self) -> bool:
        """The engine serves something: it loads the checkpoint (narrowed tensors cut as its loader cuts them) and
        fills every parameter it computes with (shared from the target, or put there by the worker after load: SGLang's
        tied lm_head is the target's embedding, which its own compute showed it serves with)."""
        return not self.refusals and not [r for r, how in self.unfilled.items() if not how.startswith(SERVED)]


assert set(SEMANTIC_FIELDS) <= {f.name for f in fields(Reading)}


# Where each knob lives in config.json, for fixes; and what a difference in it does to the drafter.
_KNOB = {
    "norm_before_residual": "norm_before_residual", "feedback": "norm_output", "final_norm": "norm_output",
    "input_norm": "norm_before_fc", "fc_norm": "fc_norm", "rope_theta": "rope_theta (and rope_parameters)",
    "rope_scaling": "rope_scaling", "head_dim": "head_dim", "num_aux": "the aux-layer ids (eagle_config)",
    "target_hidden_size": "target_hidden_size", "lm_head_from_embed": "tie_word_embeddings",
    "draft_vocab_size": "draft_vocab_size", "rms_norm_eps": "rms_norm_eps", "num_layers": "num_hidden_layers",
}
_EFFECT = {
    "norm_before_residual": "the first layer's residual is the normed state in one and the raw fc output in the other",
    "feedback": "later draft steps get another state back (normed vs pre-norm)",
    "final_norm": "lm_head sees a normed state in one and the raw one in the other",
    "input_norm": "the fused aux states are normed before fc in one and not in the other",
    "fc_norm": "each aux state is normed before fc in one and not in the other",
    "rope_theta": "positions rotate at another frequency: attention over the context changes",
    "rope_scaling": "positions are scaled differently",
    "head_dim": "attention is built with another head size (the weights do not fit, or mean something else)",
    "num_aux": "fc expects another number of captured target states",
    "target_hidden_size": "fc expects captured states of another width",
    "lm_head_from_embed": "logits come from the embedding instead of lm_head",
    "attention_bias": "attention runs with or without its q/k/v biases",
    "o_bias": "attention's output projection runs with or without its bias",
    "mlp_bias": "the MLP runs with or without its biases",
    "qk_norm": "q and k are normed per head in one and not in the other",
    "later_norm": "decoder layers after the first are normed before attention by another weight",
    "fc_bias": "fc runs with or without its bias",
    "family": "the decoder layer is built as another kind of layer (Llama vs MLA attention)",
    "sliding_window": "attention sees another span of the context: the two compute alike while the context fits the "
    "smaller window and differently beyond it",
    "mla": "the MLA attention is computed with other sizes, rope or scales",
}


def differences(served: Reading, trained: Reading) -> list[str]:
    """The semantic fields two readings disagree on (a field of :data:`READ_ONLY_WHERE_KNOWN` only where both read
    it)."""
    theirs = trained.semantics()
    return [name for name, value in served.semantics().items() if value != theirs[name]
            and (name not in READ_ONLY_WHERE_KNOWN or (name in served.sources and name in trained.sources))]


def window_text(r: Reading) -> str:
    """A reading's attention span for messages: ``a sliding window of 2048 tokens (layer 0)``."""
    w = r.window()
    if w is None:
        return "full attention"
    size, layers = w
    return f"a sliding window of {size} tokens (layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))})"


def window_anchor(served: Reading, trained: Reading) -> str | None:
    """How two readings with the same sliding window still differ: one measures it from each draft's position (a KV
    cache by position, as engines serve), the other from the context row the draft starts from (speculators'
    training mask). None when they do not."""
    w = trained.window()
    if w is None or served.window() != w or served.window_from == trained.window_from:
        return None
    where = {"query": "each draft's position", "row": "the context row the draft starts from"}
    return (f"sliding_window: {served.engine} measures the window of {w[0]} tokens from "
            f"{where.get(served.window_from, served.window_from)} ({served.sources.get('sliding_window', '?')}), "
            f"{trained.engine} from {where.get(trained.window_from, trained.window_from)} "
            f"({trained.sources.get('sliding_window', '?')}): draft step k sees k fewer of the oldest context tokens "
            f"once the context exceeds {w[0]} tokens, a difference no config field changes")


def read_window(r: Reading, fields_: dict, where: str, cite: str, window_from: str = "query",
                zero_disables: bool = False) -> None:
    """The window a reader that follows ``layer_types`` builds: layer i slides when ``layer_types[i]`` is
    "sliding_attention", over ``sliding_window`` tokens (None or absent: full attention; ``zero_disables``: 0 too);
    ``use_sliding_window`` is not read (speculators writes it, neither reader computes with it)."""
    types, size = fields_.get("layer_types"), fields_.get("sliding_window")
    layers: tuple[int, ...] = ()
    if isinstance(types, list):
        layers = tuple(i for i, t in enumerate(types[:r.num_layers]) if t == "sliding_attention")
    usable = isinstance(size, int) and not isinstance(size, bool) and size > 0
    r.sliding_window = size if usable and layers else None
    r.window_layers = layers if r.sliding_window else ()
    r.window_from = window_from
    r.sources["sliding_window"] = (f"config.json: {where}layer_types {types!r}, {where}sliding_window {size!r}"
                                   if isinstance(types, list) else f"config.json: no {where}layer_types")
    r.sources["sliding_window"] += f" ({cite})" + ("" if usable or size is None or not zero_disables else
                                                  ": a window of 0 is none")


def no_window(r: Reading, cite: str) -> None:
    """A reader that builds full attention whatever the config says."""
    r.sliding_window, r.window_layers = None, ()
    r.sources["sliding_window"] = cite


def shown(name: str, r: Reading, other: Reading) -> Any:
    """A semantic value for a message: the field's value, or for the MLA attention the numbers that differ."""
    if name != "mla" or r.mla is None or other.mla is None:
        return getattr(r, name)
    mine, theirs = r.semantics()["mla"], other.semantics()["mla"]
    return {k: v for k, v in mine.items() if v != theirs[k]}


def describe_difference(name: str, served: Reading, trained: Reading) -> str:
    if name == "mla" and served.mla is not None and trained.mla is not None:
        mine, theirs = served.semantics()["mla"], trained.semantics()["mla"]
        parts = [f"{k} {mine[k]!r} vs {theirs[k]!r}" for k in mine if mine[k] != theirs[k]]
        return (f"mla: {served.engine} computes the MLA attention differently from {trained.engine}: "
                f"{'; '.join(parts)} ({served.sources.get('mla', '?')}; {trained.sources.get('mla', '?')})")
    return (f"{name}: {served.engine} uses {getattr(served, name)!r} ({served.sources.get(name, '?')}), "
            f"{trained.engine} {getattr(trained, name)!r} ({trained.sources.get(name, '?')})")


def effect(name: str) -> str:
    return _EFFECT.get(name, "the computation differs")


def fix_for(name: str, trained: Reading) -> str | None:
    """How to make config.json say what the trainer computed, for one knob (None: no config fix)."""
    import json

    value = getattr(trained, name)
    if name == "feedback" and trained.layout == "flat":
        # norm_output is ambiguous in a flat config (SpecForge: the final norm; vLLM/speculators: the fed-back
        # state): absent means a pre-norm feedback to every reader; a normed one needs the provenance block.
        return ('remove "norm_output" from config.json (every reader then feeds the pre-norm state back)'
                if value == "prenorm" else 'state "norm_output": true together with "eagle3_checks_provenance": '
                '{"trainer": "speculators"} (eagle3-checks convert writes both)')
    if name == "feedback":
        return f'state "norm_output": {json.dumps(value == "normed")} in config.json'
    if name == "final_norm":
        return None  # vLLM and SGLang always apply it: no config field can say otherwise
    if name in ("norm_before_residual", "fc_norm", "rope_theta", "head_dim", "draft_vocab_size", "rms_norm_eps"):
        return f'state "{name}": {json.dumps(value)} in config.json'
    if name == "input_norm":
        return f'state "norm_before_fc": {json.dumps(value)} in config.json'
    if name in _KNOB:
        return f"state {_KNOB[name]} as {value!r} in config.json"
    return None


_LAYER_KNOBS = {"head_dim", "rms_norm_eps", "rope_theta"}  # in transformer_layer_config for the speculators layout


def patch_for(name: str, trained: Reading, raw: dict) -> list[dict] | None:
    """``fix_for`` as JSON Patch operations on config.json (None: no config edit computes what was trained). Each
    value goes everywhere a reader may take it from, so that fixing one reader never leaves another disagreeing;
    a value the config already states is no fix (the engine does not read that field)."""
    ops = _patch_ops(name, trained, raw)
    ops = [op for op in ops or () if _stated(raw, op) != op]
    return ops or None


def _stated(raw: dict, op: dict) -> dict:
    """The operation that would leave ``raw`` as it is at ``op``'s path (equal to ``op`` when it changes nothing)."""
    node: Any = raw
    for key in op["path"].lstrip("/").split("/"):
        if not isinstance(node, dict) or key not in node:
            return {"op": "remove", "path": op["path"]}
        node = node[key]
    return {"op": "add", "path": op["path"], "value": node}


def _patch_ops(name: str, trained: Reading, raw: dict) -> list[dict] | None:
    """The operations on ``raw``, the checkpoint's own config.json: where a value goes follows that file's layout,
    not the trainer reading's. A flat drafter converted from speculators keeps speculators' config beside it and its
    trainer reading is read from there: a transformer_layer_config written into its flat file made every reader take
    it for speculators' layout (the demo's flat example without head_dim: 7 errors of one cause before fix, 25
    after)."""
    value = getattr(trained, name)
    nested = "speculators_model_type" in raw or isinstance(raw.get(TLC), dict)
    layer = "/transformer_layer_config" if nested and name in _LAYER_KNOBS else ""
    node = raw.get(TLC, {}) if layer else raw
    node = node if isinstance(node, dict) else {}
    if name == "feedback":
        if nested:
            return [{"op": "add", "path": "/norm_output", "value": value == "normed"}]
        if value == "prenorm":
            return [{"op": "remove", "path": "/norm_output"}]
        return [{"op": "add", "path": "/norm_output", "value": True},
                {"op": "add", "path": f"/{PROVENANCE}/trainer", "value": "speculators"}]
    if name == "input_norm":
        ops = [{"op": "add", "path": "/norm_before_fc", "value": value}]
        if not nested and isinstance(raw.get("eagle_config"), dict):
            ops.append({"op": "add", "path": "/eagle_config/norm_before_fc", "value": value})
        return ops
    if name == "rope_theta":
        ops = [{"op": "add", "path": f"{layer}/rope_theta", "value": value}]
        for holder in ("rope_parameters", "rope_scaling"):
            if isinstance(node.get(holder), dict) and "rope_theta" in node[holder]:
                ops.append({"op": "add", "path": f"{layer}/{holder}/rope_theta", "value": value})
        return ops
    if name in ("norm_before_residual", "fc_norm", "head_dim", "draft_vocab_size", "rms_norm_eps"):
        return [{"op": "add", "path": f"{layer}/{name}", "value": value}]
    return None


def remedy(name: str, trained: Reading, served: Reading, raw: dict | None = None) -> str:
    """The fix for a semantic difference: a config change where one exists, else what can be done."""
    fix = fix_for(name, trained)
    if fix and raw is not None and patch_for(name, trained, raw) is None and _patch_ops(name, trained, raw):
        return (f"config.json already states it: {served.engine} {served.version} does not read "
                f"{_KNOB.get(name, name)} ({served.sources.get(name, '?')}); serve the drafter with an engine that "
                "computes it as trained")
    if fix:
        return fix
    if name == "final_norm":
        return ("the drafter was trained without a final norm before lm_head (SpecForge norm_output false); "
                f"{served.engine} always applies one: retrain with it, or serve where it is off")
    return f"{served.engine} cannot compute {name} as trained: serve the drafter with an engine that can"


def lookup(raw: Any, *paths: tuple) -> tuple[bool, Any, str]:
    """The first present path: (found, value, dotted key)."""
    for path in paths:
        node = raw
        for key in path:
            if not isinstance(node, dict) or key not in node:
                break
            node = node[key]
        else:
            return True, node, ".".join(path)
    return False, None, ""


def layer_fields(raw: dict, speculators: bool) -> dict:
    """The dict that holds the decoder-layer fields: transformer_layer_config, or the top level."""
    if speculators:
        tlc = raw.get(TLC)
        return tlc if isinstance(tlc, dict) else {}
    return raw


def model_type_of(r: Reading, fields_: dict, default: str) -> str:
    """The config's model_type; one that is not a string is a refusal (transformers looks it up by name)."""
    value = fields_.get("model_type", default)
    if isinstance(value, str):
        return value
    r.refuse(f"model_type {value!r} is not a string: transformers cannot parse the config "
             "(AutoConfig looks the model_type up by name)", at="model_type")
    return default


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**40


def read_sizes(r: Reading, fields_: dict, where: str, head_dim_default: tuple[int | None, str]) -> None:
    """hidden_size, heads, head_dim, intermediate_size, vocab_size and the layer count, as a transformers
    config class would read them. ``head_dim_default`` is (value or None for H/nh, why)."""
    for name, key in (("hidden_size", "hidden_size"), ("num_heads", "num_attention_heads"),
                      ("intermediate_size", "intermediate_size"), ("vocab_size", "vocab_size")):
        v = fields_.get(key)
        if is_int(v):
            r.set(name, v, key=f"{where}{key}")
        else:
            r.refuse(f"config.json has no usable {where}{key}", at=f"{where}{key}")
    kv = fields_.get("num_key_value_heads")
    if is_int(kv):
        r.set("num_kv_heads", kv, key=f"{where}num_key_value_heads")
    else:
        r.set("num_kv_heads", r.num_heads, "default: num_attention_heads")
    hd = fields_.get("head_dim")
    if is_int(hd):
        r.set("head_dim", hd, key=f"{where}head_dim")
    elif head_dim_default[0] is not None:
        r.set("head_dim", head_dim_default[0], f"default: {head_dim_default[1]}")
    elif r.hidden_size and r.num_heads:
        r.set("head_dim", r.hidden_size // r.num_heads,
              f"default: hidden_size / num_attention_heads ({head_dim_default[1]})")
    layers = fields_.get("num_hidden_layers")
    if is_int(layers):
        r.set("num_layers", layers, key=f"{where}num_hidden_layers")
    else:
        r.set("num_layers", 32, "default: transformers Llama/Qwen3 config (32)")
    eps = fields_.get("rms_norm_eps")
    if isinstance(eps, (int, float)) and not isinstance(eps, bool) and 0 < eps < 1:
        r.set("rms_norm_eps", float(eps), key=f"{where}rms_norm_eps")
    else:
        r.set("rms_norm_eps", 1e-6, "default: transformers (1e-6)")
    act = fields_.get("hidden_act")
    r.set("hidden_act", act if isinstance(act, str) else "silu",
          f"config.json: {where}hidden_act" if isinstance(act, str) else "default: silu")
    for name in ("attention_bias", "mlp_bias"):
        v = fields_.get(name)
        r.set(name, v is True, f"config.json: {where}{name}" if isinstance(v, bool) else "default: false")


def read_rope(r: Reading, fields_: dict, where: str, legacy_only: bool = False) -> None:
    """rope_theta and scaling, as transformers 5 standardizes them (``PreTrainedConfig.convert_rope_params_to_dict``
    and ``standardize_rope_params`` in modeling_rope_utils.py): a rope_scaling dict replaces rope_parameters, a
    rope_theta inside the dict wins over the top-level one, and llama3/yarn scaling without
    original_max_position_embeddings gets max_position_embeddings. ``legacy_only`` models a reader that knows only
    rope_theta and rope_scaling (transformers 4.57, as SGLang 0.5.6 pins). Call after read_max_position."""
    params = fields_.get("rope_parameters") if isinstance(fields_.get("rope_parameters"), dict) else None
    scaling = fields_.get("rope_scaling") if isinstance(fields_.get("rope_scaling"), dict) else None
    theta = fields_.get("rope_theta")
    if legacy_only:
        base, key = scaling, "rope_scaling"
        if positive_number(theta):
            r.set("rope_theta", float(theta), key=f"{where}rope_theta")
        else:
            why = " (rope_parameters is not read)" if params else ""
            r.set("rope_theta", 10000.0, f"default: 10000{why}")
    else:
        base, key = (scaling, "rope_scaling") if scaling else (params, "rope_parameters")
        if base and positive_number(base.get("rope_theta")):
            r.set("rope_theta", float(base["rope_theta"]), key=f"{where}{key}.rope_theta")
        elif positive_number(theta):
            r.set("rope_theta", float(theta), key=f"{where}rope_theta")
        else:
            r.set("rope_theta", 10000.0, "default: 10000")
    problems = [p for p in rope_scaling_problems(base) if p.fatal]
    if problems:  # transformers' rope init looks the type up and does arithmetic on the values: it raises
        r.refuse(f"{where}{key}: {problems[0]}; the rope init raises and the rotary embedding is not built",
                 at=f"{where}{key}")
        r.set("rope_scaling", None, f"config.json: {where}{key} (unusable)")
        return
    spec = normalized_rope_scaling(base)
    if spec and not legacy_only and spec["rope_type"] in ("llama3", "yarn", "longrope") \
            and "original_max_position_embeddings" not in spec and r.max_position_embeddings:
        spec["original_max_position_embeddings"] = r.max_position_embeddings
    r.set("rope_scaling", spec, f"config.json: {where}{key}" if spec else "none")


def valid_ids(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                  for i in v)


def read_aux_ids(r: Reading, raw: dict, paths: tuple[tuple, ...], why_none: str) -> None:
    """The aux ids from the first of ``paths`` that holds a usable list (where the engine looks, in its order)."""
    for path in paths:
        found, value, key = lookup(raw, path)
        if found and valid_ids(value):
            r.set("aux_layer_ids", list(value), key=key)
            return
    r.set("aux_layer_ids", None, why_none)


def read_layer(r: Reading, fields_: dict, where: str, head_dim_default: tuple[int | None, str], max_position: int,
               legacy_rope: bool = False) -> None:
    """The decoder layer's config as a transformers config class reads it: ``read_sizes``, then
    ``read_max_position`` (``max_position`` its default), then ``read_rope`` (``legacy_rope``: its ``legacy_only``)."""
    read_sizes(r, fields_, where, head_dim_default)
    read_max_position(r, fields_, where, max_position)
    read_rope(r, fields_, where, legacy_only=legacy_rope)


def read_stated(r: Reading, raw: dict, key: str, default: Any, why_default: str) -> Any:
    """``key`` as config.json states it when that is a usable integer, else ``default`` (``why_default`` says whose);
    returns the raw value (None when absent)."""
    value = raw.get(key)
    r.set(key, value if is_int(value) else default, f"config.json: {key}" if is_int(value) else why_default)
    return value


def read_max_position(r: Reading, fields_: dict, where: str, default: int) -> None:
    v = fields_.get("max_position_embeddings")
    r.set("max_position_embeddings", v if is_int(v) else default,
          f"config.json: {where}max_position_embeddings" if is_int(v) else f"default: {default}")


def map_roles(r: Reading, ckpt: Checkpoint, accept) -> None:
    """Fill ``r.tensors`` / ``r.ignored`` from the checkpoint's names. ``accept(name, parsed)`` returns the role
    the engine loads the tensor into, or (None, why) to skip it. Duplicate roles: the first wins. Names are parsed for
    the family of the class the engine builds (``r.family``): an MLA tensor means nothing to a Llama layer."""
    for name in ckpt.tensors:
        role, why = accept(name, parse_name(name, r.family))
        if role is None:
            r.ignored[name] = why
        elif role in r.tensors:
            r.ignored[name] = f"a second tensor for {role} ({r.tensors[role]} is loaded)"
        else:
            r.tensors[role] = name


# What serving does to a parameter once the loader is done (SGLang's worker puts the target's embedding there): an
# unfilled reason that starts so is no parameter the loader left (live.compare, live.verdict).
AFTER_LOAD = "after load, the worker puts "
# How a reading's ``unfilled`` says a parameter is served all the same: shared from the target, or put there after load.
SERVED = ("shared", AFTER_LOAD)
REFUSED = "refused: "  # a map_roles skip reason that is a load error of the engine (what follows says which)


def refuse_skipped(r: Reading) -> None:
    """Turn every tensor ``map_roles`` skipped with a REFUSED reason into a refusal at that tensor: the engines whose
    loaders raise on a name they have no parameter for (lmdeploy's KeyError, mlx-vlm's strict load, llama.cpp's
    converter)."""
    for name, why in r.ignored.items():
        if why.startswith(REFUSED):
            r.refuse(f"{name}: {why[len(REFUSED):]}", at=name)


def finish(r: Reading, ckpt: Checkpoint, missing: str, narrows: bool = False) -> None:
    """Shared end of every engine reading: the parameters the reading builds that no tensor fills (and what the
    engine has there instead), and the loaded tensors whose shape the engine's loader rejects, or, where the engine's
    linear loaders narrow (``narrows``: vLLM, SGLang), cuts to fit."""

    if r.o_bias is None:
        r.set("o_bias", r.attention_bias, "with attention_bias (Llama: o_proj's bias follows it)")
    if r.hidden_size is None or r.num_heads is None or (r.family == "mla" and r.mla is None):
        return  # sizes unknown: the refusals already say why
    if r.num_kv_heads and r.num_heads % r.num_kv_heads:
        r.refusals.append(f"{r.num_heads} attention heads do not divide into {r.num_kv_heads} KV heads: "
                          f"{r.engine} cannot build the attention")
    if r.head_dim and r.head_dim % 2:
        r.refusals.append(f"head_dim {r.head_dim} is odd: rotary embeddings rotate pairs of dimensions")
    expected = expected_tensors(Dims.of_reading(r))
    for role, exp in expected.items():
        if role == "t2d":
            continue
        if role not in r.tensors:
            if role == "d2t":
                r.unfilled[role] = "zeros: draft id i is taken as target id i"
            else:
                r.unfilled[role] = "shared from the target model" if exp.presence == OPTIONAL else missing
            continue
        entry = ckpt.tensors[r.tensors[role]]
        if shape_matches(exp.shape, entry.shape):
            continue
        if narrows and _narrows(role, exp.shape, entry.shape):
            r.narrowed[entry.name] = (f"{fmt_shape(entry.shape)} cut to the {fmt_shape(exp.shape)} {exp.dims} "
                                      f"{r.engine} builds")
            r.narrowed_to[entry.name] = tuple(f if b is None else b for b, f in zip(exp.shape, entry.shape,
                                                                                     strict=True))
        else:
            r.refuse(f"{entry.name}: shape {fmt_shape(entry.shape)}, {r.engine} builds "
                     f"{fmt_shape(exp.shape)} {exp.dims} and its weight loader fails", at=entry.name)


# Projections both engines build as (fused) parallel linear layers, whose weight loaders narrow a larger checkpoint
# tensor to the parameter's rows and columns instead of refusing it; every other parameter is copied with a shape
# assertion (fc, the norms, the vocabulary layers).
_NARROWING = tuple(f"self_attn.{p}.weight" for p in ("q_proj", "k_proj", "v_proj", "o_proj")) + \
    tuple(f"mlp.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj"))


def _narrows(role: str, built: tuple, found: tuple) -> bool:
    return role.endswith(_NARROWING) and len(built) == len(found) and \
        all(b is None or f >= b for b, f in zip(built, found, strict=True))


# transformers 5.19 config classes that carry DeepSeek's MLA sizes (with DeepseekV3Config's defaults for an absent
# one); model_type kimi_k2 is DeepseekV3Config (SGLang 0.5.23 utils/hf_transformers/common.py:229-233; vLLM parses
# it with the same transformers).
MLA_MODEL_TYPES = ("deepseek_v3", "kimi_k2", "deepseek_v2")


def read_mla(r: Reading, raw: dict, reader: MlaReader, cite: str) -> None:
    """The MLA family's attention as ``reader`` (MlaShape.from_config: a release's MlaReader, or transformers')
    computes it, into ``r.mla`` (with its source); a value the reader cannot use is a refusal. Also the sizes the
    shared parts read (hidden size, heads, MLP, vocabulary, layers, eps, act, rope for the rope checks)."""
    r.set("family", "mla", cite)
    model_type: str = raw["model_type"] if isinstance(raw.get("model_type"), str) else "llama"
    _, max_pos, cls = class_defaults(model_type)
    read_sizes(r, raw, "", (None, cls))
    layers = raw.get("num_hidden_layers")
    if not is_int(layers) and model_type in MLA_MODEL_TYPES:
        r.set("num_layers", 61, f"default: transformers {cls} (61)")
    r.set("num_kv_heads", None, "MLA: one latent KV shared by every head (no num_key_value_heads)")
    r.set("head_dim", None, "MLA: heads are qk_nope_head_dim + qk_rope_head_dim wide (q, k), v_head_dim (v)")
    read_max_position(r, raw, "", max_pos)
    read_rope(r, raw, "")
    config = dict(raw)
    if model_type not in MLA_MODEL_TYPES:
        absent = [k for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
                  if k not in raw]
        if absent:
            r.refuse(f"config.json has no {', '.join(absent)} and model_type {model_type!r} parses as "
                              f"{cls}, which has no MLA sizes: the MLA attention cannot be built as trained")
            return
    try:
        shape = MlaShape.from_config(config, reader=reader)
    except (ValueError, TypeError) as exc:
        r.refuse(f"the MLA attention cannot be built: {exc}")
        return
    r.set("mla", shape, f"config.json: the MLA fields, as {cite} reads them")
    r.sources["latent_norm_eps"] = reader.latent_source
