"""Reference specs: what a known-good drafter looks like, as versioned JSON, and the diff against one.

A spec holds canonical tensor roles with shapes and dtypes (and which are optional), the
semantic config fields (those that change shapes or the math; not bookkeeping such as
``transformers_version``), the aux-layer ids with the convention they were counted in, and the
"shape family" (hidden_size, vocab_size). Because roles are layout-independent, the same drafter in the speculators
and the flat layout diffs clean.

``--reference auto`` picks a shipped spec only where it is evidence for the candidate: a published drafter's spec
(``published``) when the candidate is built like it (its tensors, both vocabularies) for the same target family
(``target``: the verifier's class and sizes, from ``--target-config`` or the verifier the drafter's config names); a
spec of no published drafter (the demo's) only for a checkpoint it describes exactly. Any other drafter of the same
width is not diffed against a drafter it is not.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..fast_dataclass import dataclass
from ..storage.hub import cache_snapshot, is_hub, parse
from .checkpoint import Checkpoint, open_any, open_checkpoint
from .config_values import TargetConfig, normalized_rope_scaling
from .layout import AUX_CONVENTIONS, FLAT, MLA, MLA_CONFIG_FIELDS, SPECULATORS

SCHEMA = "eagle3-checks/reference-spec"
SCHEMA_VERSION = 1

# Config fields that change shapes or the computation.
SEMANTIC_FIELDS = (
    "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
    "vocab_size", "draft_vocab_size", "num_hidden_layers", "target_hidden_size", "aux_layer_ids",
    "rms_norm_eps", "rope_theta", "rope_scaling", "hidden_act", "attention_bias", "mlp_bias",
    "tie_word_embeddings", "norm_before_residual", "norm_before_fc", "fc_norm", "norm_output",
)
# The MLA family's attention sizes (drafter/families/mla.py): semantic for an MLA drafter, absent from other specs.
MLA_SEMANTIC_FIELDS = MLA_CONFIG_FIELDS
# Tensors engines can do without: the target's embedding is shared; t2d is never read by an engine.
OPTIONAL_ROLES = ("embed_tokens.weight", "t2d")
# fields where None is a value, not "unknown": no scaling; q_lora_rank null, the q_proj MLA variant
NULLABLE = {"rope_scaling", "q_lora_rank"}
# The target sizes a published spec's ``target`` may state (beside its architectures).
TARGET_SIZES = ("hidden_size", "vocab_size", "num_hidden_layers")
AUX_MEANING = {
    "vllm": "id L = the residual stream entering layer L (output of layer L-1)",
    "sglang": "id X = the output of layer X (SGLang adds 1 internally)",
}


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str
    optional: bool = False
    present: bool = True  # False: an optional tensor the spec's source does not ship


@dataclass
class Spec:
    name: str
    config: dict[str, Any]
    tensors: dict[str, TensorSpec]
    layout: str | None = None
    aux_convention: str | None = None
    aux_convention_note: str = ""
    description: str = ""
    source: str = ""
    origin: str = ""  # where this spec was read from, for messages
    family: dict[str, int] = field(default_factory=dict)
    # the published drafter the spec describes ("AQ-MedAI/Kimi-K2-Instruct-eagle3"); "" for one that is not
    # published (the demo's): --reference auto picks such a spec only for a checkpoint it describes exactly
    published: str = ""
    # the target family the published drafter was trained for: {"architectures": [...], "hidden_size": N,
    # "vocab_size": N, "num_hidden_layers": N, "note": "..."}; --reference auto needs the candidate's target to match
    target: dict[str, Any] = field(default_factory=dict)
    # the target layers the aux ids select under this side's counting (set by the caller that knows the counting
    # and the target: engines.trained_aux for a checkpoint, engines.trainer_capture for a spec); None: not known.
    # Not part of the JSON: the diff compares aux ids by these layers, not by their numbers.
    aux_layers: tuple[int, ...] | None = None
    aux_how: str = ""  # how aux_layers was known (the counting and why), for messages

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "layout": self.layout,
            "family": self.family,
            **({"published": self.published} if self.published else {}),
            **({"target": self.target} if self.target else {}),
            "aux_layer_convention": {"value": self.aux_convention, "note": self.aux_convention_note},
            "config": {k: self.config.get(k) for k in config_fields(self.config)},
            "tensors": {
                role: {"shape": list(t.shape), "dtype": t.dtype,
                       **({"optional": True} if t.optional else {}), **({} if t.present else {"present": False})}
                for role, t in sorted(self.tensors.items())
            },
        }

    def dumps(self) -> str:
        """The spec as committed JSON: indented, with lists of scalars (shapes, ids) on one line."""
        return _dumps(self.to_json()) + "\n"

    @classmethod
    def from_json(cls, data: Any, origin: str) -> Spec:
        def bad(why: str) -> UsageError:
            return UsageError(f"{origin}: not a usable reference spec: {why}")

        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise bad(f'"schema" must be "{SCHEMA}"')
        if data.get("schema_version") != SCHEMA_VERSION:
            raise bad(f"schema_version {data.get('schema_version')!r}; this eagle3-checks reads {SCHEMA_VERSION}")
        config, tensors = data.get("config"), data.get("tensors")
        if not isinstance(data.get("name"), str) or not data["name"].strip() or not isinstance(config, dict) \
                or not isinstance(tensors, dict):
            raise bad("needs a non-empty string name and objects config and tensors")
        if data.get("layout") not in (None, SPECULATORS, FLAT):
            raise bad(f"layout {data.get('layout')!r}: {SPECULATORS!r}, {FLAT!r} or null")
        parsed: dict[str, TensorSpec] = {}
        for role, t in tensors.items():
            if not (isinstance(t, dict) and isinstance(t.get("shape"), list) and isinstance(t.get("dtype"), str)
                    and all(isinstance(d, int) and d >= 0 for d in t["shape"])):
                raise bad(f"tensor {role!r} needs a shape (list of integers) and a dtype")
            parsed[role] = TensorSpec(tuple(t["shape"]), t["dtype"], bool(t.get("optional")), t.get("present", True))
        ids = config.get("aux_layer_ids")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool)
                                                                   and i >= 0 for i in ids)):
            raise bad(f"config.aux_layer_ids must be a list of non-negative integers or null, not {ids!r}")
        for key, value in config.items():
            if key in (*SEMANTIC_FIELDS, *MLA_SEMANTIC_FIELDS) and \
                    not isinstance(value, (int, float, str, bool, list, dict, type(None))):
                raise bad(f"config.{key} has an unusable value {value!r}")
        conv = data.get("aux_layer_convention")
        conv = {} if conv is None else conv
        if not isinstance(conv, dict):
            raise bad(f'aux_layer_convention must be an object {{"value": ..., "note": ...}}, not {conv!r}')
        value = conv.get("value")
        if value not in (None, *AUX_CONVENTIONS):
            raise bad(f"aux_layer_convention.value {value!r}: one of {AUX_CONVENTIONS} or null")
        family: dict[str, int] = data["family"] if isinstance(data.get("family"), dict) else {}
        published = data.get("published", "")
        if not isinstance(published, str):
            raise bad(f"published must be the published drafter's name (a string), not {published!r}")
        target = data.get("target", {})
        target = {} if target is None else target
        archs = target.get("architectures") if isinstance(target, dict) else None
        if not isinstance(target, dict) or (target and not (
                isinstance(archs, list) and archs and all(isinstance(a, str) and a for a in archs)
                and all(isinstance(target.get(k), int) and not isinstance(target.get(k), bool) and target[k] > 0
                        for k in TARGET_SIZES if k in target))):
            raise bad("target must be an object with a non-empty list of architectures and positive integer "
                      f"{', '.join(TARGET_SIZES)}")
        return cls(data["name"], {k: config.get(k) for k in config_fields(config)}, parsed, data.get("layout"), value,
                   conv.get("note", "") if isinstance(conv, dict) else "", data.get("description", ""),
                   data.get("source", ""), origin, family, published, dict(target))


def config_fields(config: dict) -> tuple[str, ...]:
    """The semantic fields a spec's config holds: every family's, and the MLA family's when it states them."""
    return SEMANTIC_FIELDS + (MLA_SEMANTIC_FIELDS if any(k in config for k in MLA_SEMANTIC_FIELDS) else ())


def _dumps(value: Any, indent: str = "") -> str:
    if isinstance(value, dict) and value:
        inner = indent + "  "
        items = [f"{inner}{json.dumps(k)}: {_dumps(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        inner = indent + "  "
        return "[\n" + ",\n".join(inner + _dumps(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value)


def same_value(a: Any, b: Any) -> bool:
    """Two config values are the same: numbers to 1e-9 relative (1e-6 written as 0.000001), the rest equal."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        try:
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
        except OverflowError:
            return a == b
    return a == b


# The trainer's own choices: not fixed by the target, so another value than a reference's is a note. Everything
# else the diff compares (hidden size, vocabulary, heads, fc's input width, ...) the target fixes.
TRAINER_CHOICES = ("draft_vocab_size", "intermediate_size", "aux_layer_ids")
CHOICE = "the trainer's choice, not fixed by the target"
# Which dimension of a tensor each trainer choice sizes.
_CHOICE_DIMS = {"lm_head.weight": (("draft_vocab_size", 0),), "d2t": (("draft_vocab_size", 0),),
                "mlp.gate_proj.weight": (("intermediate_size", 0),), "mlp.up_proj.weight": (("intermediate_size", 0),),
                "mlp.down_proj.weight": (("intermediate_size", 1),), "mlp.gate_proj.bias": (("intermediate_size", 0),),
                "mlp.up_proj.bias": (("intermediate_size", 0),)}


def chosen(role: str, c: tuple, r: tuple, c_cfg: dict, r_cfg: dict) -> list[str]:
    """The trainer choices that explain a shape difference of tensor ``role`` entirely (empty: they do not)."""
    dims = next((d for suffix, d in _CHOICE_DIMS.items() if role == suffix or role.endswith("." + suffix)), ())
    if len(c) != len(r):
        return []
    want, used = list(r), []
    for name, dim in dims:
        if want[dim] == r_cfg.get(name) and c_cfg.get(name) is not None and c_cfg[name] != r_cfg[name]:
            want[dim] = c_cfg[name]
            used.append(name)
    return used if used and tuple(want) == tuple(c) else []


def structure_differences(candidate: Spec, spec: Spec) -> list[str]:
    """What keeps ``candidate`` from being built like ``spec``: a tensor one side has and the other needs (optional
    ones aside), a shape the trainer's choices do not explain. Dtypes and config values are not structure."""
    out = []
    for role in sorted(set(candidate.tensors) | set(spec.tensors)):
        c, r = candidate.tensors.get(role), spec.tensors.get(role)
        c_has, r_has = bool(c and c.present), bool(r and r.present)
        if c is not None and r is not None and c_has and r_has:
            if c.shape != r.shape and not chosen(role, c.shape, r.shape, candidate.config, spec.config):
                out.append(f"{role} {list(c.shape)} vs {list(r.shape)}")
        elif (c_has or r_has) and not ((r and r.optional) or (c and c.optional and role in OPTIONAL_ROLES)):
            out.append(f"{role} on {'the candidate' if c_has else spec.name} only")
    return out


def exact_differences(candidate: Spec, spec: Spec) -> list[str]:
    """Everything ``spec`` records that ``candidate`` has otherwise: each semantic config value, each tensor (present
    or not, its shape and dtype). The layout is not recorded as a difference: roles are layout-independent."""
    out = [f"{name} {candidate.config.get(name)!r} vs {spec.config.get(name)!r}"
           for name in dict.fromkeys(config_fields(spec.config) + config_fields(candidate.config))
           if not same_value(candidate.config.get(name), spec.config.get(name))]
    for role in sorted(set(candidate.tensors) | set(spec.tensors)):
        c, r = candidate.tensors.get(role), spec.tensors.get(role)
        mine = (c.shape, c.dtype) if c is not None and c.present else None
        theirs = (r.shape, r.dtype) if r is not None and r.present else None
        if mine != theirs:
            out.append(f"{role} {_tensor_text(mine)} vs {_tensor_text(theirs)}")
    return out


def _tensor_text(t: tuple | None) -> str:
    return "absent" if t is None else f"{t[1]} {list(t[0])}"


def semantic_config(cfg: Any) -> dict[str, Any]:
    """The semantic fields of a DraftConfig, normalized for comparison."""
    out = {name: cfg[name] for name in SEMANTIC_FIELDS}
    out["rope_scaling"] = normalized_rope_scaling(cfg["rope_scaling"])
    if out["rope_theta"] is not None:
        out["rope_theta"] = float(out["rope_theta"])
    if out["rms_norm_eps"] is not None:
        out["rms_norm_eps"] = float(out["rms_norm_eps"])
    if cfg.family == MLA:  # its heads are sized by the MLA fields; head_dim and KV heads mean nothing to it
        out.update({"num_key_value_heads": None, "head_dim": None}, **{name: cfg[name] for name in MLA_SEMANTIC_FIELDS})
    return out


def snapshot(ckpt: Checkpoint, name: str, description: str = "") -> Spec:
    """A spec of an opened checkpoint (trusted by the caller)."""
    cfg = ckpt.config
    config = semantic_config(cfg) if cfg is not None else {}
    tensors: dict[str, TensorSpec] = {}
    for role, disk in sorted(ckpt.roles.items()):
        e = ckpt.tensors[disk]
        tensors[role] = TensorSpec(e.shape, e.dtype, role in OPTIONAL_ROLES)
    floats = [e.dtype for e in ckpt.tensors.values() if e.kind == "f"]
    main = max(set(floats), key=floats.count) if floats else "BF16"
    v, dv, h = config.get("vocab_size"), config.get("draft_vocab_size"), config.get("hidden_size")
    if "embed_tokens.weight" not in tensors and v and h:
        tensors["embed_tokens.weight"] = TensorSpec((v, h), main, True, False)
    if "t2d" not in tensors and v and dv and dv < v:
        tensors["t2d"] = TensorSpec((v,), "BOOL", True, False)
    conv, note = (("vllm", "inferred: a speculators checkpoint is trained on hidden states captured by vLLM")
                  if ckpt.layout == SPECULATORS else (None, "unknown: a flat checkpoint does not say"))
    return Spec(name, config, tensors, ckpt.layout, conv, note, description,
                source=f"snapshot of {ckpt.display}", origin=ckpt.display,
                family={"hidden_size": h, "vocab_size": v} if h and v else {})


# ----- shipped specs and --reference resolution -------------------------------------------------

def _spec_dir() -> Path:
    """reference_specs/ inside an installed package (the wheel puts it there), else at the top of a source
    checkout (an editable install)."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / "reference_specs"
    return packaged if packaged.is_dir() else package.parent / "reference_specs"


def shipped_specs() -> dict[str, Path]:
    d = _spec_dir()
    return {p.stem: p for p in sorted(d.glob("*.json"))} if d.is_dir() else {}


def load_spec(path: Path, origin: str | None = None) -> Spec:
    origin = origin or str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UsageError(f"{origin}: cannot read the reference spec: {type(exc).__name__}: {exc}"[:500]) from exc
    return Spec.from_json(data, origin)


# What makes two drafters the same family, for --reference auto: what the target fixes and the layer's shape. Not
# the trainer's own choices (draft vocabulary, intermediate size, aux ids), which the diff reports as notes.
FAMILY = ("layers", "hidden_size", "vocab_size", "num_attention_heads", "head_dim", "num_hidden_layers")
QWEN3_LAYERS, LLAMA_LAYERS = "Qwen3 (q/k-normed)", "Llama"
# MLA layers (drafter/families/mla.py), with q through q_a_proj / q_b_proj (q_lora_rank) or one q_proj (null): other
# tensors, so another kind. An MLA drafter's head_dim here is its q/k head width, qk_nope_head_dim + qk_rope_head_dim.
MLA_LAYERS, MLA_Q_PROJ_LAYERS = "MLA", "MLA (q_proj)"
_KV_A = "layers.0.self_attn.kv_a_proj_with_mqa.weight"


def _layer_kind(has: Any) -> str:
    if has(_KV_A):
        return MLA_Q_PROJ_LAYERS if has("layers.0.self_attn.q_proj.weight") else MLA_LAYERS
    return QWEN3_LAYERS if has("layers.0.self_attn.q_norm.weight") else LLAMA_LAYERS


def _mla_head(config: Any) -> int | None:
    nope, rope = config.get("qk_nope_head_dim"), config.get("qk_rope_head_dim")
    return nope + rope if isinstance(nope, int) and isinstance(rope, int) else None


def family_of(ckpt: Checkpoint) -> dict[str, Any]:
    """The shape family of a checkpoint: its layer kind, hidden_size and vocab_size (from its config or, failing
    that, its tensors), heads, head_dim and layer count."""
    cfg = ckpt.config
    h = cfg["hidden_size"] if cfg is not None else None
    v = cfg["vocab_size"] if cfg is not None else None
    fc, embed, t2d = ckpt.shape("fc.weight"), ckpt.shape("embed_tokens.weight"), ckpt.shape("t2d")
    h = h or (fc[0] if fc else None)
    v = v or (embed[0] if embed else t2d[0] if t2d else None)
    q, heads = ckpt.shape("layers.0.self_attn.q_proj.weight"), cfg["num_attention_heads"] if cfg is not None else None
    head_dim = q[0] // heads if q and heads and q[0] % heads == 0 else (cfg["head_dim"] if cfg is not None else None)
    if ckpt.family == MLA and cfg is not None:
        head_dim = _mla_head({k: cfg[k] for k in ("qk_nope_head_dim", "qk_rope_head_dim")})
    return {"layers": _layer_kind(ckpt.has),
            "hidden_size": h, "vocab_size": v, "num_attention_heads": heads, "head_dim": head_dim,
            "num_hidden_layers": len(ckpt.layers) or (cfg["num_hidden_layers"] if cfg is not None else None)}


def _spec_family(spec: Spec) -> dict[str, Any]:
    out = {"layers": _layer_kind(lambda role: role in spec.tensors),
           **{k: spec.config.get(k) for k in FAMILY[1:]}, **spec.family}
    if out["layers"] in (MLA_LAYERS, MLA_Q_PROJ_LAYERS):
        out["head_dim"] = _mla_head(spec.config)
    return out


def _describe_family(fam: dict[str, Any]) -> str:
    """``hidden_size 64, vocab_size 512, 4 heads of 24, 1 Llama layer(s)``; what is not known is left out."""
    heads, head_dim, n = fam.get("num_attention_heads"), fam.get("head_dim"), fam.get("num_hidden_layers")
    parts = [f"{k} {fam[k]}" for k in ("hidden_size", "vocab_size") if fam.get(k) is not None]
    if heads is not None:
        parts.append(f"{heads} heads" + (f" of {head_dim}" if head_dim is not None else ""))
    elif head_dim is not None:
        parts.append(f"head_dim {head_dim}")
    parts.append(f"{n} {fam['layers']} layer(s)" if n is not None else f"{fam['layers']} layers")
    return ", ".join(parts)


def _family_difference(spec: Spec, fam: dict[str, Any]) -> list[str] | None:
    """None when the checkpoint is of the spec's family, else what differs."""
    theirs = _spec_family(spec)
    if not spec.family:
        return ["the spec states no family"]
    off = [f"{k} {fam.get(k)} vs {theirs[k]}" for k in FAMILY if theirs.get(k) is not None and fam.get(k) != theirs[k]]
    return off or None


def _exists(path: Path, what: str) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError) as exc:
        raise UsageError(f"{what} {str(path)[:200]}: not a usable path ({type(exc).__name__})") from exc


def check_reference_option(option: str | None) -> None:
    """Validate --reference before any checkpoint is opened (auto needs the checkpoint; the rest does not).
    Raises UsageError."""
    option = option or "auto"
    if option in ("auto", "none"):
        return
    if is_hub(option):  # opened (fetched) when the gate runs
        parse(option, what="--reference")
        return
    path = cache_snapshot(option) or Path(option)
    if _exists(path, "--reference"):
        if path.is_dir():
            open_checkpoint(path)
        else:
            load_spec(path)
    elif option not in shipped_specs():
        raise UsageError(f"--reference {option!r}: no such file, directory or shipped spec "
                         f"(shipped: {', '.join(shipped_specs()) or 'none'}; or auto, none)")


def _target_evidence(target: TargetConfig | None, named: Sequence[str]) -> dict[str, Any] | None:
    """What the candidate's target is known to be: the verifier's config (--target-config, --target), else the
    verifier class the drafter's config names (speculators_config.verifier, convert's provenance); None: not known."""
    if target is not None and target.architectures:
        return {"architectures": list(target.architectures), "hidden_size": target.hidden_size,
                "vocab_size": target.vocab_size, "num_hidden_layers": target.num_hidden_layers, "from": target.path}
    if named:
        return {"architectures": list(named), "from": "the verifier the drafter's config names"}
    return None


def _published_difference(spec: Spec, candidate: Spec, target: dict[str, Any] | None) -> list[str] | None:
    """None when ``candidate`` is built like the published drafter ``spec`` describes (its tensors, both
    vocabularies) for the same target family; else what differs or is not known."""
    off = [f"{k} {candidate.config.get(k)} vs {spec.config.get(k)}" for k in ("vocab_size", "draft_vocab_size")
           if not same_value(candidate.config.get(k), spec.config.get(k))]
    off += structure_differences(candidate, spec)
    if off:
        return off
    family = spec.target
    if not family:
        return [f"{spec.name} states no target family"]
    if target is None:
        return [f"the target is not known (pass --target-config): {spec.name} is the drafter of "
                f"{' / '.join(family['architectures'])} targets, and drafters of other targets are built alike"]
    arch = target["architectures"][0]
    if arch not in family["architectures"]:
        off.append(f"target {arch} ({target['from']}) vs {' / '.join(family['architectures'])}")
    off += [f"target {k} {target[k]} vs {family[k]}" for k in TARGET_SIZES
            if target.get(k) is not None and k in family and target[k] != family[k]]
    return off or None


def _auto(specs: dict[str, Path], ckpt: Checkpoint, target: TargetConfig | None,
          named: Sequence[str]) -> tuple[Spec | None, str]:
    """``--reference auto``: a published drafter's spec the candidate is built like, for its target family; the
    spec of no published drafter (the demo's) for a checkpoint it describes exactly; else none, with the nearest."""
    unmodelled = ckpt.not_modelled
    if unmodelled:
        return None, (f"not modelled: {unmodelled[0]}: no shipped reference spec is of its family (they are all "
                      "Llama-layer drafters); pass --reference SPEC.json or a trusted checkpoint directory")
    if ckpt.config is None:  # no family to match: its sizes would all read None
        return None, "none chosen: config.json is missing or unreadable (see the files check)"
    fam = family_of(ckpt)
    mine = _describe_family(fam)
    candidate = snapshot(ckpt, ckpt.display)
    evidence = _target_evidence(target, named)
    misses = []
    for name, p in specs.items():
        spec = load_spec(p, name)
        off = _family_difference(spec, fam)
        if off is None:
            if spec.published:
                off = _published_difference(spec, candidate, evidence)
                if off is None:
                    assert evidence is not None  # a published spec is picked for a known target only
                    return spec, (f"auto: shipped spec {name}, the published {spec.published} (built like it, both "
                                   f"vocabularies: {mine}; target {evidence['architectures'][0]} from "
                                   f"{evidence['from']})")
            else:
                exact = exact_differences(candidate, spec)
                if not exact:
                    return spec, f"auto: shipped spec {name} (the checkpoint it describes: {mine})"
                off = [f"{name} describes one checkpoint, which this is not: " + ", ".join(exact[:3])
                       + (f", ... ({len(exact) - 3} more)" if len(exact) > 3 else "")]
            misses.append((0, 0, len(off), name, off))
            continue
        # the nearest first: of the same family, of the same kind of layer, then by the fewest differences
        misses.append((1, int(any(d.startswith("layers ") for d in off)), len(off), name, off))
    closest = f" (closest {min(misses)[3]}: {', '.join(min(misses)[4])})" if misses else " (none shipped)"
    return None, (f"no shipped reference spec matches {mine}{closest}; pass --reference SPEC.json, a shipped spec "
                  "name or a checkpoint")


def resolve_reference(option: str, ckpt: Checkpoint, target: TargetConfig | None = None,
                      named_verifier: Sequence[str] = ()) -> tuple[Spec | None, str]:
    """Turn ``--reference`` into a spec. Returns (spec, note); the note says how it was chosen or, with no
    spec, why the diff is skipped. ``target``: the verifier's config, and ``named_verifier``: the verifier classes
    the drafter's config names (for auto: a published drafter's spec is picked for its own target family only).
    Raises UsageError for an option that names nothing usable."""
    option = option or "auto"
    path = Path(option)
    if is_hub(option) or _exists(path, "--reference"):  # an existing path wins over a name
        if is_hub(option) or path.is_dir():  # a folder, a Hugging Face cache folder, hf://ORG/NAME
            ref = open_any(option, what="--reference")
            if ref.problems:
                raise UsageError(f"--reference {option}: the reference checkpoint has integrity problems "
                                 f"({ref.problems[0].file}: {ref.problems[0].message})")
            return snapshot(ref, option.rstrip("/").rsplit("/", 1)[-1] if is_hub(option) else path.name or option), \
                f"checkpoint {option}"
        return load_spec(path), f"spec file {option}"
    if option == "none":
        return None, "no reference (--reference none)"
    specs = shipped_specs()
    if option == "auto":
        return _auto(specs, ckpt, target, named_verifier)
    if option in specs:
        return load_spec(specs[option], option), f"shipped spec {option}"
    raise UsageError(f"--reference {option!r}: no such file, directory or shipped spec "
                     f"(shipped: {', '.join(specs) or 'none'}; or auto, none)")
