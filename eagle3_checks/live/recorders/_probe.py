"""What both recorders share: the record format, sentinel-filled parameters, tapped weight loaders.

Runs inside an engine's virtualenv (torch is there; eagle3_checks is not, so nothing is imported from it).

A recording answers, for one checkpoint and one engine: did the engine refuse it (at which stage, with which
exception), which checkpoint tensor went into which parameter (and shard), at which shape and whether the engine
narrowed it to fit, which tensors went nowhere and which parameters were never written. "Never written" is
observed, not inferred: every parameter is filled with a NaN sentinel with an odd payload before loading and
compared bit for bit afterwards.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

# One bit pattern per element size: a quiet NaN with payload 0xA5F (bf16: payload 5) for floats; for integer
# parameters (d2t) the same bits read as an implausible id.
SENTINEL_BITS = {1: 0xA5, 2: 0x7FC5, 4: 0x7FC00A5F, 8: 0x7FF8000000000A5F}
_BITS_DTYPE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

# Fused parameters: engine module name -> the checkpoint projection each shard id stands for.
FUSED = {
    "qkv_proj": {"q": "q_proj", "k": "k_proj", "v": "v_proj"},
    "gate_up_proj": {0: "gate_proj", 1: "up_proj"},
    "fused_qkv_a_proj": {0: "q_a_proj", 1: "kv_a_proj_with_mqa"},
    "fused_qkv_a_proj_with_mqa": {0: "q_a_proj", 1: "kv_a_proj_with_mqa"},
}
# Engine parameter names that are a project role under another name (eagle3_checks/layout.py GLOBAL_ROLES).
RENAMED = {"draft_id_to_target_id": "d2t", "hot_token_id": "d2t"}
RECORDED_CONFIG = ("head_dim", "num_aux", "norm_before_residual", "norm_before_fc", "fc_norm", "norm_output",
                   "vocab_size", "draft_vocab_size", "target_hidden_size", "num_hidden_layers", "rope_theta",
                   "rope_scaling", "max_position_embeddings", "tie_word_embeddings", "hidden_act")


class HarnessError(Exception):
    """A failure of the recorder itself, never of the engine: such a recording is not data."""


@contextmanager
def harness(what: str) -> Iterator[None]:
    """Run recorder bookkeeping: any exception in it is the harness's, not the engine's."""
    try:
        yield
    except HarnessError:
        raise
    except Exception as exc:
        raise HarnessError(f"{what}: {type(exc).__name__}: {exc}") from exc


class Refused(Exception):
    """The engine raised at ``stage``; ``record["refused"]`` says what."""


def new_record(engine: str, version: str, entry: dict[str, Any]) -> dict[str, Any]:
    return {"engine": engine, "version": version, "checkpoint": entry["name"], "source_hash": entry["source_hash"],
            "refused": None, "architecture": None, "loaded": {}, "ignored": [], "unwritten": [],
            "aux": {"ids": None, "capture_before_layer": None},
            "config": dict.fromkeys(RECORDED_CONFIG)}


def scalars(obj: Any) -> dict[str, Any]:
    """An engine object's public scalar attributes (a rotary embedding's base, scaling factor, ...)."""
    return {k: v for k, v in vars(obj).items()
            if not k.startswith("_") and k != "training" and isinstance(v, (bool, int, float, str))}


def read_built_model(cfg: dict[str, Any], model: Any) -> None:
    """The config values both engines' built drafters expose alike (their ``model.model``): layer count, head size,
    the rotary embedding, the norm flags, the vocabulary sizes. Each recorder adds what is its engine's own."""
    inner = model.model
    # SGLang 0.5.23's MLA drafter holds its one layer as midlayer (srt/models/kimi_k25_eagle3.py:245-250)
    layers = inner.layers if hasattr(inner, "layers") else [inner.midlayer]
    cfg["num_hidden_layers"] = len(layers)
    attn = layers[0].self_attn
    cfg["head_dim"] = getattr(attn, "head_dim", None) or getattr(attn, "qk_head_dim", None)
    rotary = getattr(attn, "rotary_emb", None)
    if rotary is not None:
        cfg["rope_theta"] = getattr(rotary, "base", None)
        cfg["max_position_embeddings"] = getattr(rotary, "max_position_embeddings", None)
        cfg["rope_scaling"] = {"class": type(rotary).__name__, **scalars(rotary)}
    cfg["norm_before_fc"] = bool(getattr(inner, "norm_before_fc", False))
    cfg["fc_norm"] = getattr(inner, "fc_norm", None) is not None
    cfg["norm_output"] = bool(getattr(inner, "norm_output", False))
    cfg["vocab_size"] = getattr(inner.embed_tokens, "org_vocab_size", cfg["vocab_size"])
    cfg["draft_vocab_size"] = getattr(model.lm_head, "org_vocab_size", cfg["draft_vocab_size"])
    # MLA attention: the eps its latent norms were built with, beside the layer's own norm (both engines' RMSNorm
    # keep it as variance_epsilon)
    latent = {name: getattr(getattr(attn, name), "variance_epsilon", None)
              for name in ("q_a_layernorm", "kv_a_layernorm") if getattr(attn, name, None) is not None}
    if latent:
        cfg["norm_eps"] = {**latent, "input_layernorm": getattr(getattr(layers[0], "input_layernorm", None),
                                                                 "variance_epsilon", None)}


def _engine_frame(exc: BaseException, roots: tuple[str, ...]) -> str | None:
    """package/path.py:line of the innermost traceback frame in one of the installed packages ``roots``."""
    where = None
    for frame in traceback.extract_tb(exc.__traceback__):
        _, found, inside = frame.filename.replace(os.sep, "/").rpartition("site-packages/")
        if found and inside.split("/", 1)[0] in roots:
            where = f"{inside}:{frame.lineno}"
    return where


@contextmanager
def engine_stage(record: dict[str, Any], stage: str, roots: tuple[str, ...]) -> Iterator[None]:
    """Run engine code: an exception is the engine refusing the checkpoint at ``stage`` (config or load)."""
    try:
        yield
    except HarnessError:
        raise
    except Exception as exc:
        message = str(exc) or repr(exc)
        record["refused"] = {"type": type(exc).__name__, "message": message[:4000], "stage": stage,
                             "at": _engine_frame(exc, roots)}
        raise Refused(stage) from exc


def fill_sentinel(tensor: torch.Tensor) -> None:
    size = tensor.element_size()
    tensor.data.view(_BITS_DTYPE[size]).fill_(_signed(SENTINEL_BITS[size], size))


def sentinel_mask(tensor: torch.Tensor) -> torch.Tensor:
    size = tensor.element_size()
    return tensor.data.view(_BITS_DTYPE[size]) == _signed(SENTINEL_BITS[size], size)


def _signed(bits: int, size: int) -> int:
    """The bit pattern as the signed integer torch's int views hold (uint8 stays unsigned)."""
    if size == 1:
        return bits
    return bits - (1 << (8 * size)) if bits >= 1 << (8 * size - 1) else bits


def role_name(param: str, shard: Any = None, prefixes: tuple[str, ...] = ("model.",)) -> str | None:
    """Best-effort project role (eagle3_checks/layout.py) of an engine parameter, or of one shard of a fused one:
    ``model.layers.0.self_attn.qkv_proj.weight`` shard ``q`` is ``layers.0.self_attn.q_proj.weight``."""
    name = param
    for prefix in prefixes:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    name = re.sub(r"^midlayer\.", "layers.0.", name)
    if name in RENAMED:
        return RENAMED[name]
    parts = name.split(".")
    if len(parts) >= 2 and parts[-2] in FUSED:
        if shard is None:
            return None
        parts[-2] = FUSED[parts[-2]].get(shard)
        if parts[-2] is None:
            return None
    return ".".join(parts)


class LoadProbe:
    """Sentinel-fill a freshly built model, tap every parameter's weight loader, and report after loading.

    ``shards(module)`` returns the fused layout of a module's weight along dim 0 as [(shard id, rows)], or None.
    ``default_loader`` is what the engine calls for a parameter without a ``weight_loader`` attribute.
    """

    def __init__(self, model: torch.nn.Module, shards: Callable[[torch.nn.Module], list | None],
                 default_loader: Callable, role_prefixes: tuple[str, ...] = ("model.",)) -> None:
        self.model, self.shards, self.prefixes = model, shards, role_prefixes
        self.names: dict[int, str] = {}  # id(checkpoint tensor) -> checkpoint name
        self.kept: list[torch.Tensor] = []  # keeps tagged tensors alive, so ids stay unique
        self.loaded: dict[str, list[dict[str, Any]]] = {}
        self.errors: list[str] = []
        with harness("preparing the model"):
            self.params = dict(model.named_parameters())
            self.param_names = {id(p): n for n, p in self.params.items()}
            self.layout: dict[str, list | None] = {}
            for module_name, module in model.named_modules():
                for pname, _param in module.named_parameters(recurse=False):
                    full = f"{module_name}.{pname}" if module_name else pname
                    self.layout[full] = self.shards(module) if pname == "weight" else None
            for param in self.params.values():
                fill_sentinel(param)
                original = getattr(param, "weight_loader", default_loader)
                param.weight_loader = self._tap(original)

    def tag(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
        """Pass the checkpoint's (name, tensor) stream through, remembering which tensor is which."""
        for name, tensor in weights:
            self.names[id(tensor)] = name
            self.kept.append(tensor)
            yield name, tensor

    def _tap(self, original: Callable) -> Callable:
        def weight_loader(param: torch.Tensor, loaded_weight: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            note = self._note(param, loaded_weight, args, kwargs)
            try:
                return original(param, loaded_weight, *args, **kwargs)
            except Exception:
                if note is not None:
                    note["raised"] = True
                raise
        return weight_loader

    def _note(self, param, loaded_weight, args, kwargs) -> dict[str, Any] | None:
        try:
            pname = self.param_names.get(id(param), "?")
            shard = args[0] if args else kwargs.get("loaded_shard_id", kwargs.get("shard_id"))
            shard = shard if isinstance(shard, (str, int)) else None
            dest = list(param.shape)
            layout = self.layout.get(pname)
            if shard is not None and layout:
                dest[0] = dict(layout).get(shard, dest[0])
            shape = list(loaded_weight.shape)
            narrowed = len(shape) == len(dest) and any(s > d for s, d in zip(shape, dest, strict=True))
            note = {"param": pname, "shard": shard, "shape": shape, "param_shape": list(param.shape),
                    "narrowed": narrowed}
            name = self.names.get(id(loaded_weight), "(not a checkpoint tensor)")
            self.loaded.setdefault(name, []).append(note)
            return note
        except Exception as exc:  # never let bookkeeping change what the engine does
            self.errors.append(f"noting a load into {getattr(param, 'shape', '?')}: {type(exc).__name__}: {exc}")
            return None

    def unwritten(self) -> list[dict[str, Any]]:
        """Parameters (or shards of fused ones) whose every element still holds the sentinel; ``partial`` marks
        those where only some do."""
        out = []
        with harness("comparing sentinels"):
            for name, param in self.params.items():
                mask = sentinel_mask(param)
                if param.numel() == 0 or not bool(mask.any()):
                    continue
                layout = self.layout.get(name)
                if layout and param.dim() >= 1 and sum(rows for _, rows in layout) == param.shape[0]:
                    start = 0
                    for shard, rows in layout:
                        region = mask[start:start + rows]
                        start += rows
                        if bool(region.any()):
                            out.append(self._entry(name, shard, partial=not bool(region.all())))
                else:
                    out.append(self._entry(name, None, partial=not bool(mask.all())))
        return out

    def _entry(self, name: str, shard: Any, partial: bool) -> dict[str, Any]:
        entry = {"param": name, "shard": shard, "role": role_name(name, shard, self.prefixes)}
        if partial:
            entry["partial"] = True
        return entry

    def finish(self, record: dict[str, Any], checkpoint_names: Iterable[str]) -> None:
        """Fill loaded / ignored / unwritten into the record (call right after the model's load_weights)."""
        if self.errors:
            raise HarnessError("; ".join(self.errors))
        record["loaded"] = {name: self.loaded[name] for name in sorted(self.loaded)}
        record["ignored"] = sorted(set(checkpoint_names) - set(self.loaded))
        record["unwritten"] = self.unwritten()


def checkpoint_tensor_names(directory: Path) -> list[str]:
    """Every tensor name in the checkpoint's safetensors headers (read without the engine)."""
    names = []
    for path in sorted(directory.glob("*.safetensors")):
        with open(path, "rb") as fh:
            length = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(length))
        names += [n for n in header if n != "__metadata__"]
    return sorted(names)


def free_port() -> int:
    """A free local TCP port, for the one-process group's rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def jsonable(value: Any) -> Any:
    """Config values as JSON: tensors, tuples, numpy scalars and non-finite floats made plain."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if isinstance(value, torch.Tensor):
        return jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item"):
        return value.item()
    return repr(value)


def _scrub(text: str, root: Path) -> str:
    """Recordings hold no path of the machine that made them: engine messages name the checkpoint directory
    (a temporary one) and tracebacks the virtualenv."""
    for path, placeholder in ((str(root.resolve()), "<checkpoints>"), (str(root), "<checkpoints>"),
                              (sys.prefix, "<venv>")):
        text = text.replace(json.dumps(path)[1:-1], placeholder)
    return text


def run_all(manifest_path: Path, out_dir: Path, engine: str, version: str,
            record_one: Callable[[dict[str, Any], Path, dict[str, Any]], None], started: float) -> int:
    """Record every manifest entry into out_dir/<name>.json, then index.json (``started``: when the process
    started, imports included). ``record_one(entry, root, record)`` fills ``record`` and may raise Refused (the
    engine refused: data) or anything else (a harness error)."""
    root = manifest_path.parent
    manifest = json.loads(manifest_path.read_text())
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = {"refused": 0, "cpu_only": 0, "harness_error": 0}
    for entry in manifest:
        record = new_record(engine, version, entry)
        try:
            record_one(entry, root, record)
        except Refused:
            summary["refused"] += 1
        except Exception as exc:  # the engine did not refuse: the recorder broke (HarnessError or worse)
            record["harness_error"] = {"type": type(exc).__name__, "message": str(exc)[:4000],
                                       "traceback": traceback.format_exc()[-4000:]}
            summary["harness_error"] += 1
        if record["refused"] and record["refused"].get("cpu_only"):
            summary["cpu_only"] += 1
        (out_dir / f"{entry['name']}.json").write_text(_scrub(json.dumps(jsonable(record), indent=1), root) + "\n")
        status = "harness_error" if "harness_error" in record else (
            f"refused at {record['refused']['stage']}" if record["refused"] else "loaded")
        print(f"{entry['name']}: {status}", flush=True)
    index = {"engine": engine, "version": version, "date": time.strftime("%Y-%m-%d", time.gmtime(started)),
             "run_seconds": round(time.time() - started, 1), "checkpoints": len(manifest), **summary,
             "records": sorted(f"{e['name']}.json" for e in manifest)}
    (out_dir / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    print(f"{engine} {version}: {len(manifest)} checkpoints, {summary['refused']} refused "
          f"({summary['cpu_only']} only on CPU), {summary['harness_error']} harness errors, {index['run_seconds']} s")
    return 1 if summary["harness_error"] else 0
