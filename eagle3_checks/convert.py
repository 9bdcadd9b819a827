"""Convert a drafter between the speculators and the flat layout, byte-exact and atomically.

``convert(SRC, DST, to="vllm"|"sglang"|"speculators")``:

* **Names** follow the target layout: ``layers.N.*`` for speculators; for the flat layout the first layer is
  ``midlayer.*`` (SGLang 0.5.6 reads only that name, and vLLM maps it to ``layers.0.``, so one file serves both;
  later layers stay ``layers.N.*``, which is what vLLM builds).
* **Tensor data** is copied as byte ranges (``copy_file_range``): the header is rewritten, the data streamed in
  the kernel, so the output tensors are bit-identical and memory stays flat whatever the size. A
  ``pytorch_model.bin`` source is read in place like a safetensors one: its zip directory and pickle opcodes are
  parsed, never unpickled (:mod:`eagle3_checks.storage.torch_bin`).
* **The config** keeps every semantic field and writes the engine-sensitive ones explicitly (``head_dim``,
  ``norm_before_residual``, ``rope_theta`` and ``rope_parameters``, the aux ids in ``eagle_config`` and at the
  top level, ``draft_vocab_size``, ``vocab_size`` = the verifier's, ``target_hidden_size`` only as a number). The
  original config is kept beside the output (``config_<layout>.json``), and a small
  ``eagle3_checks_provenance`` block records the trainer and its aux-id convention, which the flat layout cannot
  otherwise say.
* **d2t/t2d** are kept, or embedded from ``--vocab-mapping``; never made up.
* **Aux ids** are written for the layers the drafter was trained on, each engine's ids where that engine reads
  them (vLLM the top level, SGLang ``eagle_config``: ``engines.ids_where_read``, the rule the gate's fixes follow),
  and the trained layers are recorded in the provenance block; where the trained layers are unknown (a flat
  source whose trainer's convention is not given) the ids are copied as they are. ``shift_aux_ids`` is accepted
  and has no effect: the ids are always written per engine.
* **Safety**: SRC is never modified; DST is written to a temporary sibling, verified (the gate, and forward
  equivalence against SRC), and only then moved into place, by an atomic exchange when it replaces an existing DST
  (``--force``). On any failure or SIGINT/SIGTERM nothing new is left at DST; a stale temporary from a killed run
  is removed by the next run.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from dataclasses import field
from pathlib import Path
from typing import Any

from . import engines
from .basis import READ
from .drafter.checkpoint import Checkpoint, open_checkpoint
from .drafter.config_values import PROVENANCE, TLC
from .drafter.layout import FLAT, MLA, SPECULATORS, str_list
from .engines.launch import window_launch
from .errors import UsageError
from .fast_dataclass import dataclass
from .gate import GateOptions, GateResult, gate_checkpoint, open_target, run_gate
from .numerics import torch_missing
from .registry import Finding, Severity
from .storage.output import (
    check_paths,
    copy_range,
    move_into_place,
    remove_stale,
    signals_raise,
    temporary_sibling,
)
from .storage.safetensors import RawTensor, encode_header, from_numpy

# The layout convert writes for each engine it converts for (Profile.converts_to: speculators its own; vLLM, SGLang
# and llama.cpp's converter the flat one). The others need more than a layout: TensorRT-LLM its launch layers,
# lmdeploy the architectures name LlamaForCausalLM, mlx-vlm particular targets: eagle3-checks recipe says what.
TARGETS = {p.name: p.converts_to for p in engines.PROFILES if p.converts_to}
# The engine-agnostic checks a source must pass before it is worth converting.
SOURCE_CHECKS = ("files", "keys", "shapes", "dtypes", "vocab.d2t", "vocab.t2d", "config.fields", "config.layers",
                 "config.vocab-sizes", "config.aux-layers", "config.head-dim", "config.tied-embeddings", "config.rope")


class ConvertRefused(Exception):
    """The source cannot be converted (or the result failed verification): exit 1, with the reasons."""

    def __init__(self, message: str, findings: list[Finding] | None = None) -> None:
        super().__init__(message)
        self.findings = findings or []


@dataclass
class Plan:
    src: Checkpoint
    to: str
    layout: str
    config: dict
    names: dict[str, str]  # source on-disk name -> output name, in output order
    replaced: dict[str, RawTensor] = field(default_factory=dict)  # output name -> data from --vocab-mapping
    notes: list[str] = field(default_factory=list)


# ----- reading inputs ------------------------------------------------------------------------------------------

def load_vocab_mapping(path: str | os.PathLike) -> tuple[Any, Any]:
    """(d2t, t2d) from an .npz, a folder with d2t.npy and t2d.npy, or a SpecForge torch file (weights_only)."""
    import numpy as np

    p = Path(path)
    try:
        if p.is_dir():
            d2t, t2d = np.load(p / "d2t.npy", allow_pickle=False), np.load(p / "t2d.npy", allow_pickle=False)
        elif p.suffix == ".npz":
            with np.load(p, allow_pickle=False) as z:
                _require_mapping(path, z.files)
                d2t, t2d = z["d2t"], z["t2d"]
        else:
            data = _torch_load(p)
            if not isinstance(data, dict):
                raise ValueError("expected a dict holding d2t and t2d")
            _require_mapping(path, list(data))
            d2t, t2d = data["d2t"].numpy(), data["t2d"].numpy()
    except UsageError:
        raise
    except FileNotFoundError as exc:
        raise UsageError(f"--vocab-mapping {path}: no such file ({exc.filename})") from exc
    except ImportError as exc:
        raise UsageError(f"--vocab-mapping {path}: a torch file needs torch installed ({exc})") from exc
    except Exception as exc:  # (any unreadable mapping is a usage error, never a traceback)
        raise UsageError(f"--vocab-mapping {path}: cannot read d2t and t2d: {_load_error(exc)}") from exc
    if d2t.ndim != 1 or t2d.ndim != 1 or d2t.dtype.kind not in "iu" or t2d.dtype.kind not in "biu":
        raise UsageError(f"--vocab-mapping {path}: d2t must be 1-D integer offsets and t2d a 1-D mask, found "
                         f"{d2t.dtype}{list(d2t.shape)} and {t2d.dtype}{list(t2d.shape)}")
    return d2t.astype(np.int64), t2d.astype(bool)


def _require_mapping(path: Any, names: list) -> None:
    missing = [n for n in ("d2t", "t2d") if n not in names]
    if missing:
        raise UsageError(f"--vocab-mapping {path}: holds no {' and no '.join(missing)} (it needs d2t and t2d; "
                         f"found {', '.join(map(str, names[:5])) or 'nothing'})")


def _load_error(exc: BaseException) -> str:
    """Why a mapping or a pytorch_model.bin could not be read, in one line. torch's weights_only refusal suggests
    loading with weights_only=False; this tool never does, so that advice is not passed on."""
    import pickle

    text = str(exc)
    if isinstance(exc, pickle.UnpicklingError) or "Weights only load failed" in text:
        return ("torch.load(weights_only=True) refused it: it holds more than plain tensors (eagle3-checks never "
                "unpickles code); save the tensors as .npz or safetensors")
    if isinstance(exc, EOFError) and not text:
        return "EOFError: the file is empty or ends early"
    return f"{type(exc).__name__}: {text.splitlines()[0] if text.strip() else 'no detail'}"


def _torch_load(path: Path) -> Any:
    """``torch.load(weights_only=True)``, without torch's note on the pickle protocol: a file it cannot read
    raises, and the caller turns that into one clear message."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected pickle protocol")
        return torch.load(path, map_location="cpu", weights_only=True)


# ----- planning ------------------------------------------------------------------------------------------------

def _gate_source(src: Checkpoint, mapping_given: bool) -> None:

    result = gate_checkpoint(src, GateOptions(reference="none", level="header"))
    bad = [f for r in result.results if r.check.id in SOURCE_CHECKS for f in r.findings
           if f.severity is Severity.ERROR and not (mapping_given and f.key in ("d2t", "t2d")
                                                    and "is missing" in f.message)]
    if bad:
        raise ConvertRefused(f"{src.display} is not a valid drafter ({len(bad)} error(s)); nothing was written", bad)


def _rope_fields(trained) -> dict:
    """rope_theta and rope_scaling as transformers 4 and SGLang 0.5.6 read them, rope_parameters as transformers 5
    does: the same values in both places."""
    params = {"rope_theta": trained.rope_theta, **(trained.rope_scaling or {"rope_type": "default"})}
    return {"rope_theta": trained.rope_theta, "rope_scaling": trained.rope_scaling, "rope_parameters": params}


# Fields that are not the decoder layer's own: never carried into the layer config of the other layout.
_LAYER_SKIP = {"architectures", "auto_map", "eagle_config", "speculators_config", TLC,
               "speculators_model_type", "speculators_version", PROVENANCE, "transformers_version", "dtype",
               "torch_dtype", "eagle_aux_hidden_state_layer_ids", "rope_parameters", "rope_scaling", "rope_theta",
               "draft_vocab_size", "norm_before_residual", "norm_before_fc", "fc_norm", "norm_output",
               "target_hidden_size", "num_aux_hidden_states", "embed_requires_grad"}


# What the flat config states itself (the layer's fields, the trained semantics, the ids): kept from the source
# only through those.
_LAYER_SKIP_FLAT = _LAYER_SKIP - {"speculators_version", "transformers_version", "embed_requires_grad"}


def _layer_base(src: Checkpoint) -> dict:
    """Bookkeeping fields of the source's layer config (token ids, initializer range, ...), carried over."""
    raw = src.config_raw or {}
    base = raw.get(TLC, {}) if src.layout == SPECULATORS else raw
    return {k: copy.deepcopy(v) for k, v in (base if isinstance(base, dict) else {}).items() if k not in _LAYER_SKIP}


# The fields of a speculators config that make it one (a flat config holding them is read as a speculators config):
# never carried into a flat one.
_STRUCTURE = {"speculators_config", "speculators_model_type", TLC, "architectures", "auto_map", PROVENANCE}


def _kept(src: Checkpoint) -> dict:
    """The source's own top-level fields a conversion to the flat layout has no reason to change, carried over as
    they are: speculators_version (which trainer release wrote the weights), embed_requires_grad, transformers_version
    and any field of a trainer or tool the gate does not read."""
    raw = src.config_raw or {}
    if src.layout != SPECULATORS:
        return {}
    return {k: copy.deepcopy(v) for k, v in raw.items() if k not in _STRUCTURE and k not in _LAYER_SKIP_FLAT}


def _config(src: Checkpoint, trained, to: str, ids: dict[str, list[int] | None], aux: engines.TrainedAux,
            speculative_tokens: int, verifier: str | None, target: Any, identity: Any) -> dict:
    cfg = src.config
    assert cfg is not None  # plan() gated the source: its config.json is read
    dtype = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}.get(cfg.dtype or "", None)
    layer = {
        **_layer_base(src),
        "model_type": "qwen3" if trained.qk_norm else "llama",
        "hidden_size": trained.hidden_size, "num_attention_heads": trained.num_heads,
        "num_key_value_heads": trained.num_kv_heads, "head_dim": trained.head_dim,
        "intermediate_size": trained.intermediate_size, "num_hidden_layers": trained.num_layers,
        "rms_norm_eps": trained.rms_norm_eps, "hidden_act": trained.hidden_act,
        "max_position_embeddings": trained.max_position_embeddings,
        "attention_bias": trained.attention_bias, "mlp_bias": trained.mlp_bias,
        "tie_word_embeddings": False, "vocab_size": trained.vocab_size,
    }
    # A source converted before keeps its first trainer, and the verifier a speculators config named (the flat
    # layout has no field for it), so that converting back restores both.
    prior = (src.config_raw or {}).get(PROVENANCE)
    prior = prior if isinstance(prior, dict) else {}
    # who trained it, only as far as the source's evidence states it (an inferred or unknown trainer is not written:
    # the next reader would take it for a statement)
    provenance: dict[str, Any] = {"converted_from": src.layout}
    if identity.name is not None and identity.basis == READ:
        provenance["trainer"] = identity.name
        if identity.version:
            provenance["trainer_version"] = identity.version
    if aux.convention is not None:
        provenance["aux_layer_convention"] = aux.convention
    if aux.layers is not None:  # the trained layers, held: the written ids are each engine's, not the trainer's
        provenance[engines.HELD] = aux.record()
    spec_cfg = (src.config_raw or {}).get("speculators_config")
    named = spec_cfg.get("verifier") if src.layout == SPECULATORS and isinstance(spec_cfg, dict) else prior.get(
        "verifier")
    if isinstance(named, dict) and isinstance(named.get("name_or_path"), str):
        provenance["verifier"] = {"name_or_path": named["name_or_path"],
                                  "architectures": [a for a in named.get("architectures") or [] if isinstance(a, str)]
                                  if isinstance(named.get("architectures"), list) else []}
    target_hidden = trained.target_hidden_size if trained.target_hidden_size != trained.hidden_size else None
    if TARGETS[to] == FLAT:
        out = {
            "architectures": ["Eagle3Qwen3ForCausalLM" if trained.qk_norm else "LlamaForCausalLMEagle3"],
            **layer,
            **_rope_fields(trained),
            "draft_vocab_size": trained.draft_vocab_size,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids.get(NESTED), "use_aux_hidden_state": True,
                             **({"norm_before_fc": True} if trained.input_norm else {})},
            "eagle_aux_hidden_state_layer_ids": ids.get(TOP),
            "num_aux_hidden_states": trained.num_aux,
            "norm_before_residual": trained.norm_before_residual,
            "norm_before_fc": trained.input_norm,
            "fc_norm": trained.fc_norm,
            **_kept(src),
            PROVENANCE: provenance,
        }
        # norm_output means "feed the normed state back" to vLLM and speculators, but "apply the final norm" to
        # SpecForge (default true). Written only when it must be true; absent, every reader gets the usual drafter.
        if trained.feedback == "normed":
            out["norm_output"] = True
        if ids.get(NESTED) is None:
            del out["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
        if ids.get(TOP) is None:
            del out["eagle_aux_hidden_state_layer_ids"]
        if target_hidden is not None:
            out["target_hidden_size"] = target_hidden
        if dtype:
            out["torch_dtype"] = dtype
        return out
    recorded = provenance.get("verifier", {})
    verifier_archs = list(target.architectures or []) if target is not None else recorded.get("architectures", [])
    verifier = verifier or (target.name_or_path if target is not None else None) or recorded.get("name_or_path")
    out = {
        "architectures": ["Eagle3DraftModel"],
        "speculators_model_type": "eagle3",
        "speculators_version": engines.newest("speculators").version,
        "draft_vocab_size": trained.draft_vocab_size,
        "eagle_aux_hidden_state_layer_ids": ids.get(TOP),
        "norm_before_residual": trained.norm_before_residual,
        "norm_before_fc": trained.input_norm,
        "fc_norm": trained.fc_norm,
        "norm_output": trained.feedback == "normed",
        "target_hidden_size": target_hidden,
        "tie_word_embeddings": False,
        **({"dtype": dtype} if dtype else {}),
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens,
                                  "accept_tolerance": 0.0, "verifier_accept_k": 1}],
            "verifier": {"name_or_path": verifier, "architectures": verifier_archs},
        },
        TLC: {**layer, "rope_parameters": _rope_fields(trained)["rope_parameters"]},
        PROVENANCE: provenance,
    }
    return out


def plan(src: Checkpoint, to: str, *, vocab_mapping: str | None = None, shift_aux_ids: bool = False,
         target: Any = None, speculative_tokens: int = 3, verifier: str | None = None,
         aux_convention: str | None = None, trainer: str | None = None) -> Plan:
    """What the conversion will write. Raises ConvertRefused or UsageError; writes nothing."""
    if to not in TARGETS:
        served = (f"; {to} reads what --to vllm or --to speculators writes, with its launch and preconditions from "
                  f"eagle3-checks recipe --engine {to}" if to in engines.ENGINE_NAMES else "")
        raise UsageError(f"--to {to!r}: choose one of {', '.join(TARGETS)}{served}")
    if aux_convention not in (None, *engines.AUX_CONVENTIONS):
        raise UsageError(f"--aux-convention {aux_convention!r}: {' or '.join(engines.AUX_CONVENTIONS)}")
    cfg = src.config
    if src.family == MLA:
        what = ", ".join(str_list((src.config_raw or {}).get("architectures")) or ["MLA attention tensors"])
        raise UsageError(f"{src.display} is an MLA drafter ({what}): speculators 0.9 has no MLA drafter (its EAGLE-3 "
                         "layers are llama and qwen3 only, speculators/models/eagle3/model_definitions.py:135-141), "
                         "so there is no layout to convert it to; vLLM 0.33 and SGLang 0.5.23 both read it as it is "
                         "(flat): gate it with eagle3-checks check --engine vllm,sglang")
    _gate_source(src, mapping_given=True)  # broken files first; a missing mapping has its own message below
    if (cfg is not None and not vocab_mapping and "d2t" not in src.roles and cfg["vocab_size"]
            and cfg["draft_vocab_size"] and cfg["draft_vocab_size"] < cfg["vocab_size"]):
        raise ConvertRefused(f"the draft vocabulary ({cfg['draft_vocab_size']} of {cfg['vocab_size']} tokens) has no "
                             f"d2t in {src.display}: pass --vocab-mapping with the mapping the drafter was trained "
                             "with (never made up here)")
    identity = engines.identify(src, stated=trainer)
    trained = engines.trainer(src, identity)
    unfilled = [r for r, how in trained.unfilled.items() if not how.startswith("shared")
                and not (vocab_mapping and r == "d2t")]
    if trained.refusals or unfilled:
        raise ConvertRefused(f"{src.display}: its trainer's reading cannot run: "
                             + "; ".join(trained.refusals + unfilled))
    notes: list[str] = []
    layout = TARGETS[to]
    if not trained.final_norm:
        raise ConvertRefused("the source applies no final norm before lm_head (SpecForge norm_output false): neither "
                             "vLLM, SGLang nor speculators can compute that")
    release = engines.profile(engines.resolve(to)[0][0])
    unsupported = release.cannot_compute(trained) if release.cannot_compute else []
    if unsupported:
        raise ConvertRefused(f"{release.name} {release.version} cannot compute this drafter "
                             f"({', '.join(unsupported)}): "
                             "it would drop or ignore what the drafter was trained with; convert --to vllm instead")

    ids, aux = _plan_aux_ids(src, trained, to, aux_convention, target, notes, identity)
    names = _plan_names(src, trained, layout, notes)

    replaced: dict[str, RawTensor] = {}
    v, dv = trained.vocab_size, trained.draft_vocab_size
    if vocab_mapping:
        d2t, t2d = load_vocab_mapping(vocab_mapping)
        if d2t.shape != (dv,) or t2d.shape != (v,):
            raise ConvertRefused(f"--vocab-mapping {vocab_mapping}: d2t has {d2t.shape[0]} entries and t2d "
                                 f"{t2d.shape[0]}; the drafter needs {dv} and {v}")
        import numpy as np

        for role, values in (("d2t", d2t), ("t2d", t2d)):
            if role in src.roles:
                if not np.array_equal(src.array(role).astype(values.dtype), values):
                    raise ConvertRefused(f"--vocab-mapping {vocab_mapping}: its {role} differs from the one in "
                                         f"{src.display}; a drafter's lm_head rows belong to one mapping")
                continue
            replaced[role] = from_numpy(values)
            notes.append(f"{role} embedded from {vocab_mapping}")
    if (layout == SPECULATORS and "t2d" not in src.roles and "t2d" not in replaced and dv is not None
            and v is not None and dv < v):
        notes.append("t2d absent: speculators saves t2d with d2t; embed it with --vocab-mapping to keep the pair")

    config = _config(src, trained, to, ids, aux, speculative_tokens, verifier, target, identity)
    if target is not None and target.vocab_size not in (None, v):
        raise ConvertRefused(f"vocab_size {v} is not the verifier's {target.vocab_size} (--target-config)")
    if layout == SPECULATORS and config["speculators_config"]["verifier"]["name_or_path"] is None:
        notes.append("the verifier is unnamed (speculators_config.verifier.name_or_path null): `vllm serve DRAFTER` "
                     "cannot find it and `eagle3-checks check --strict` fails it (engine.serving); pass --verifier "
                     "ORG/NAME, or a --target-config with its _name_or_path")
    return Plan(src, to, layout, config, names, replaced, notes)


TOP = "/" + "/".join(engines.TOP_IDS)
NESTED = "/" + "/".join(engines.NESTED_IDS)


def _plan_aux_ids(src: Checkpoint, trained: Any, to: str, aux_convention: str | None, target: Any,
                  notes: list[str], identity: Any = None) -> tuple[dict[str, list[int] | None], engines.TrainedAux]:
    """The aux ids to write, by the field's JSON pointer: each engine's ids where that engine reads them, for the
    trained layers (the rule every engine.aux-layers fix follows: engines.ids_where_read), so that one file serves
    every engine it is meant for as trained. Without the trained layers (the trainer's convention, or the target
    class it counts by, unknown) the ids are copied as they are. Says what it did in ``notes``."""
    aux = engines.trained_aux(src, aux_convention, engines.target_of(src, target), identity)
    ids = trained.aux_layer_ids
    if not ids:
        return {}, aux
    if aux.layers is None:
        notes.append(f"aux-layer ids {ids} copied as they are: the layers they were trained on are unknown "
                     f"({aux.how})")
        return ({TOP: ids} if TARGETS[to] == SPECULATORS else {TOP: ids, NESTED: ids}), aux
    readers = ["speculators"] if TARGETS[to] == SPECULATORS else ["vllm", "sglang"]
    specs = {name: engines.resolve(name).specs[0] for name in readers}
    counted_by = engines.target_of(src, target)
    written = engines.ids_where_read(specs.values(), aux.layers, counted_by)
    for name, spec in specs.items():
        pointer = engines.profile(spec).ids_pointer
        field = pointer[1:].replace("/", ".")
        if written.get(pointer) is None:
            known = counted_by is not None and counted_by.architecture is not None
            deep = counted_by.num_layers if counted_by is not None else None
            past = [x for x in aux.layers if deep is not None and x >= deep]
            why = (f"no ids make {spec} capture the trained layers {list(aux.layers)} on this target"
                   + (f" (layer {past[0]} is past its last layer, {deep - 1})" if past and deep else "") if known else
                   f"{spec} counts aux ids by the target's class: pass --target-config (the verifier's config.json)")
            if name == to:
                told = "" if not known or past else (
                    f" (the trained layers {list(aux.layers)} rest on how the trainer counted: {aux.how}; if it "
                    "counted otherwise, --aux-convention vllm or sglang says so)")
                raise ConvertRefused(f"aux-layer ids: {why}{told}; nothing was written")
            notes.append(f"{field} not written: {why}; {name} then captures its default layers")
        else:
            notes.append(f"aux-layer ids {written[pointer]} in {field}, where {spec} reads them (the trained layers "
                         f"{list(aux.layers)}; {aux.convention} convention: {aux.how})")
    return written, aux


def _plan_names(src: Checkpoint, trained: Any, layout: str, notes: list[str]) -> dict[str, str]:
    """Source tensor name -> written name, in a stable order: the source's own. What is not copied goes in notes."""
    names: dict[str, str] = {}
    for name in src.tensors:
        role = src.names[name].role
        if role is None or role not in trained.tensors or trained.tensors[role] != name:
            notes.append(f"{name}: not part of the drafter's computation, not copied")
            continue
        out = role
        if layout == FLAT and role.startswith("layers.0."):
            out = "midlayer." + role[len("layers.0."):]
        names[name] = out
    return names


# ----- writing ---------------------------------------------------------------------------------------------------

def write(p: Plan, out_dir: Path, original: str | None = "") -> None:
    """Write config.json, the original config (as ``original``; "": ``config_LAYOUT.json``, the trainer's own config
    beside the converted one; None: not written), and model.safetensors (header rewritten, data copied as bytes)."""
    out_dir.mkdir(parents=True)
    (out_dir / "config.json").write_text(json.dumps(p.config, indent=2) + "\n")
    if original is not None:
        (out_dir / (original or f"config_{p.src.layout}.json")).write_text(json.dumps(p.src.config_raw, indent=2)
                                                                            + "\n")
    layout = {out: RawTensor(p.src.tensors[name].dtype, p.src.tensors[name].shape) for name, out in p.names.items()}
    layout.update(p.replaced)
    with open(out_dir / "model.safetensors", "wb") as fh:
        fh.write(encode_header(layout, {"format": "pt", "converted_by": "eagle3-checks"}))
        fh.flush()
        for name in p.names:  # tensor data copied as bytes, in the kernel where it can
            e = p.src.tensors[name]
            with open(e.path, "rb") as src:
                at = fh.tell()
                copy_range(src, fh, e.offset, at, e.nbytes)
                fh.seek(at + e.nbytes)
        for t in p.replaced.values():
            assert t.data is not None  # replaced tensors come from from_numpy, with their bytes
            fh.write(t.data)


# ----- verification, and the move into place ------------------------------------------------------------------------

def verify(out_dir: Path, src: Checkpoint, to: str, level: str, target: Any = None,
           target_config: str | None = None) -> GateResult:
    """The gate, for the target engine, on the written checkpoint: with the target's config when given (the
    target.* checks: aux ids in range, vocabulary, hidden size); at the forward level, against SRC too."""

    # the converter copies tensor bytes exactly (and the forward level proves it): scanning the values is the
    # source's gate's job, not a second multi-gigabyte read here
    written = open_checkpoint(out_dir)
    specs = engines.resolve(to)[0]
    # a release that takes the drafter's attention window only at launch is verified as launched with it (what
    # eagle3-checks recipe writes for it)
    trained = engines.trainer(written)
    launch = tuple((spec.split("@", 1)[0], json.dumps(settings)) for spec in specs
                   if (settings := window_launch(engines.profile(spec).launch_window, trained)) is not None)
    options = GateOptions(reference="none", level=level, engine=specs, target_config=target_config, launch=launch,
                          omit=(("scan.values", "not run: the converter copies tensor bytes unchanged; gate the "
                                 "source"),))
    return run_gate(written, options, reference_note="not used when converting", target=target,
                    source=src if level == "forward" else None)


@dataclass
class Result:
    dst: Path
    plan: Plan
    verification: GateResult
    level: str
    removed_stale: list[Path]


def convert(src: str | os.PathLike, dst: str | os.PathLike, to: str, *, force: bool = False,
            target_config: str | None = None, vocab_mapping: str | None = None, verify_level: str | None = None,
            shift_aux_ids: bool = False, speculative_tokens: int = 3, verifier: str | None = None,
            aux_convention: str | None = None, trainer: str | None = None) -> Result:
    """Convert SRC to DST for engine ``to``. Raises UsageError (exit 2) or ConvertRefused (exit 1); DST is then
    untouched."""

    src_path, dst_path = Path(src), Path(dst)
    if verify_level not in (None, "header", "forward"):
        raise UsageError(f"--verify {verify_level!r}: header or forward")
    if to == "speculators" and (isinstance(speculative_tokens, bool) or not isinstance(speculative_tokens, int)
                                or speculative_tokens < 1):
        raise UsageError(f"--speculative-tokens {speculative_tokens!r}: the number of drafted tokens, at least 1")
    level = verify_level or ("forward" if torch_missing() is None else "header")
    if level == "forward" and torch_missing():
        raise UsageError(f"--verify forward: {torch_missing()}")
    check_paths(src_path, dst_path, force)  # before reading anything: a refusal should be quick
    with signals_raise():
        source = open_checkpoint(src_path)
        target, _ = open_target(target_config, None)
        p = plan(source, to, vocab_mapping=vocab_mapping, shift_aux_ids=shift_aux_ids, target=target,
                 speculative_tokens=speculative_tokens, verifier=verifier, aux_convention=aux_convention,
                 trainer=trainer)
        removed = remove_stale(dst_path)
        tmp = temporary_sibling(dst_path)
        try:
            write(p, tmp)
            result = verify(tmp, source, to, level, target, target_config)
            if result.exit_code:
                bad = [f for f in result.findings() if f.severity is Severity.ERROR]
                raise ConvertRefused(f"the converted checkpoint failed verification ({len(bad)} error(s)); "
                                     "nothing was written to DST", bad)
            move_into_place(tmp, dst_path)
        except OSError as exc:  # a read-only folder, a name too long with the temporary's suffix, a full disk
            shutil.rmtree(tmp, ignore_errors=True)
            raise UsageError(f"DST {dst_path}: cannot write the converted checkpoint: {exc.strerror or exc}"
                             + (f" ({exc.filename})" if exc.filename else "") + "; nothing was written") from exc
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return Result(dst_path, p, result, level, removed)
