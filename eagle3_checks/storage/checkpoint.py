"""Open a drafter checkpoint directory and present one normalized view of it.

Reads ``config.json`` and the safetensors headers (single file or a sharded
``model.safetensors.index.json``), never tensor data: a tensor is loaded only when a check asks
for it (:meth:`Checkpoint.array`), once, and kept. No torch on this path. Without any safetensors
file, ``pytorch_model.bin`` (or a sharded ``pytorch_model.bin.index.json``) is read the same way,
its zip directory and pickle opcodes parsed without unpickling (:mod:`eagle3_checks.storage.torch_bin`).

What cannot be a checkpoint at all (a missing path, a file, a folder with neither config.json
nor safetensors) raises :class:`~eagle3_checks.errors.UsageError`; everything wrong inside a
checkpoint is collected in :attr:`Checkpoint.problems` for the ``files`` check to report.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from ..drafter.config import DraftConfig, read_config
from ..drafter.layout import (
    FLAT,
    LLAMA,
    SPECULATORS,
    UNKNOWN,
    Name,
    detect_layout,
    drafter_family,
    parse_name,
    unmodelled_drafter,
)
from ..errors import UsageError
from .safetensors import FileHeader, Problem, TensorEntry, json_type, load_array, read_header
from .torch_bin import read_bin

CONFIG = "config.json"
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
BIN = "pytorch_model.bin"
BIN_INDEX = "pytorch_model.bin.index.json"


class TensorReadError(Exception):
    """A tensor's bytes could not be read (truncated file, I/O error, unloadable dtype)."""


@dataclass
class Checkpoint:
    path: Path
    display: str
    config_raw: dict | None = None
    config: DraftConfig | None = None
    layout: str = UNKNOWN
    layout_source: str = ""
    files: list[FileHeader] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    tensors: dict[str, TensorEntry] = field(default_factory=dict)  # on-disk name -> entry
    names: dict[str, Name] = field(default_factory=dict)  # on-disk name -> what it means
    roles: dict[str, str] = field(default_factory=dict)  # role -> on-disk name
    duplicate_roles: dict[str, list[str]] = field(default_factory=dict)
    # False when a header did not parse or an indexed shard is missing: the tensor list is partial.
    complete: bool = True
    # why the weights' bytes are not readable here (a Hub checkpoint opened from its headers): the scan and forward
    # levels skip with this note
    weights_elsewhere: str | None = None
    family: str = LLAMA  # the decoder layer's family (drafter/families/), from the config, else the tensor names
    _arrays: dict[str, Any] = field(default_factory=dict, repr=False)

    def with_config(self, raw: dict) -> Checkpoint:
        """The same tensors under another config.json: what ``fix`` gates before it writes anything."""
        ckpt = replace(self, config_raw=raw, _arrays={})
        ckpt.layout, ckpt.layout_source = detect_layout(raw), f"{CONFIG} structure"
        ckpt.config = read_config(raw, ckpt.layout)
        ckpt.names, ckpt.roles, ckpt.duplicate_roles = {}, {}, {}
        _classify_names(ckpt)
        return ckpt

    # ----- views -------------------------------------------------------------------------------
    def entry(self, role: str) -> TensorEntry | None:
        name = self.roles.get(role)
        return None if name is None else self.tensors[name]

    def shape(self, role: str) -> tuple[int, ...] | None:
        e = self.entry(role)
        return None if e is None else e.shape

    def has(self, role: str) -> bool:
        return role in self.roles

    @property
    def layers(self) -> list[int]:
        """Decoder layer indices that have at least one tensor."""
        return sorted({n.layer for n in self.names.values() if n.layer is not None and n.role})

    @property
    def not_modelled(self) -> tuple[str, str] | None:
        """(class, what it is) when eagle3-checks does not model the drafter's family (an MLA drafter), else None."""
        return unmodelled_drafter(self.config_raw, self.layout, tuple(self.names))

    @property
    def weight_files(self) -> list[str]:
        return [f.file for f in self.files]

    def ends_past_file(self, e: TensorEntry) -> bool:
        """Whether a tensor's bytes run past the end of its file (a truncated file: the files check's finding)."""
        return e.offset + e.nbytes > next((f.size for f in self.files if f.path == e.path), 0)

    @property
    def past_end(self) -> list[str]:
        """The tensors whose bytes are not all in their file."""
        return [name for name, e in self.tensors.items() if self.ends_past_file(e)]

    def array(self, role: str):
        """The tensor of ``role`` as a numpy array, read on first use and cached."""
        if role not in self._arrays:
            e = self.entry(role)
            if e is None:
                raise TensorReadError(f"no tensor for {role}")
            if self.ends_past_file(e):
                size = next((f.size for f in self.files if f.path == e.path), 0)
                raise TensorReadError(f"{e.file}: {e.name} ends at byte {e.offset + e.nbytes}, past the end of the "
                                      f"file ({size} bytes)")
            try:
                self._arrays[role] = load_array(e, self.load_bytes(e))
            except (OSError, EOFError, ValueError, OverflowError, MemoryError) as exc:
                raise TensorReadError(f"{e.file}: cannot read {e.name}: {exc}") from exc
        return self._arrays[role]

    # ----- where the bytes are (a Hub checkpoint overrides these: eagle3_checks.storage.hub.HubCheckpoint) -----
    def load_bytes(self, e: TensorEntry) -> bytes | None:
        """The bytes of one tensor, or None to read them from ``e.path`` on this disk."""
        return None

    def shard_status(self, root: Path, shard: str) -> tuple[bool, str | None]:
        """Whether a weight file is there, and if not why."""
        return _is_file(root / shard)

    def read_shard(self, reader: Any, root: Path, shard: str) -> FileHeader:
        return reader(root / shard, shard)


def _problem(ckpt: Checkpoint, file: str, message: str, **kw: Any) -> None:
    ckpt.problems.append(Problem(file=file, message=message, **kw))


_UNUSABLE: Any = object()


def _read_json(ckpt: Checkpoint, path: Path, display: str) -> Any:
    """Parse a JSON file, recording any problem; returns ``_UNUSABLE`` when it cannot be parsed (a JSON ``null``
    is a value, and the caller says it is not an object)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except IsADirectoryError:
        _problem(ckpt, display, "is a directory, not a file")
        return _UNUSABLE
    except UnicodeDecodeError as exc:
        _problem(ckpt, display, "is not valid UTF-8", offset=exc.start, fix="re-save the file as UTF-8 JSON")
        return _UNUSABLE
    except OSError as exc:
        _problem(ckpt, display, f"cannot be read: {exc.strerror or exc}")
        return _UNUSABLE

    def no_dupes(pairs: list[tuple[str, Any]]) -> dict:
        out: dict = {}
        for k, v in pairs:
            if k in out:
                _problem(ckpt, display, f"states {k!r} more than once; readers keep only the last", key=k,
                         fix=f"keep one {k!r}")
            out[k] = v
        return out

    try:
        return json.loads(text, object_pairs_hook=no_dupes)
    except RecursionError:
        _problem(ckpt, display, "nests JSON too deeply to be read", fix="repair or regenerate the file")
        return _UNUSABLE
    except ValueError as exc:
        pos = getattr(exc, "pos", None)
        _problem(ckpt, display, f"is not valid JSON: {getattr(exc, 'msg', exc)}",
                 offset=len(text[:pos].encode()) if isinstance(pos, int) else None,  # a byte offset, not a char's
                 fix="repair or regenerate the file")
        return _UNUSABLE


def _is_file(path: Path) -> tuple[bool, str | None]:
    """Follow symlinks (a Hugging Face cache points into blobs/) to a regular file."""
    try:
        resolved = path.resolve(strict=True)
    except FileNotFoundError:
        return False, "does not exist" if not path.is_symlink() else "is a broken symlink"
    except (RuntimeError, OSError, ValueError) as exc:  # symlink loop, name too long, NUL byte
        return False, f"cannot be resolved ({exc.__class__.__name__}: {exc})"
    if resolved.is_dir():
        return False, "is a directory, not a file"
    if not resolved.is_file():
        return False, "is not a regular file"
    return True, None


def open_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Open a drafter directory. Raises UsageError when ``path`` cannot be a checkpoint."""
    root, children, st_files = locate(path)
    return build(Checkpoint(path=root, display=str(path)), root, children, st_files)


def build(ckpt: Checkpoint, root: Path, children: list[str], st_files: list[str]) -> Checkpoint:
    """Fill ``ckpt`` from the files ``children`` names in ``root`` (a directory, or a Hub snapshot whose weight
    files ``ckpt`` reads by range)."""
    _read_config(ckpt, root, children)
    _read_weights(ckpt, root, children, st_files)
    _classify(ckpt)
    return ckpt


def real_path(path: str | os.PathLike, what: str) -> Path:
    """``path`` with every symlink resolved, for comparing locations; a loop or an unusable name is a UsageError
    naming the option ``what``."""
    try:
        return Path(os.path.realpath(path, strict=False))
    except (OSError, ValueError, RuntimeError) as exc:
        raise UsageError(f"{what} {str(path)[:200]}: not a usable path ({type(exc).__name__})") from exc


def not_there(path: str | os.PathLike) -> str:
    """Why ``path``, which does not exist as a file or folder, is not there: a symbolic link loop (the path or a
    folder on it links back to itself; pathlib says it does not exist), a symbolic link to a missing target, or
    nothing of that name."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop (it, or a folder on the way, links back to itself): give the real path"
        with contextlib.suppress(OSError, ValueError):
            if os.path.islink(path):
                return f"a symbolic link to {os.readlink(os.fspath(path))}, which does not exist"
    except ValueError:
        pass
    return "no such file or directory"


def within(path: str | os.PathLike, folder: str | os.PathLike, what: str) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it, symlinks resolved."""
    p, f = real_path(path, what), real_path(folder, what)
    return p == f or f in p.parents


def unique_paths(paths: list[str]) -> list[str]:
    """The paths in order, each checkpoint once (the same folder named twice, or by a symlink, is gated once)."""
    seen: set[str] = set()
    out = []
    for p in paths:
        try:
            key = os.path.realpath(p)
        except (OSError, ValueError):  # an unusable name: locate() says so
            key = str(p)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def locate(path: str | os.PathLike) -> tuple[Path, list[str], list[str]]:
    """The checkpoint directory, its entries and its safetensors files, without reading any. Raises UsageError
    when ``path`` cannot be a checkpoint: missing, not a directory, or holding neither config nor weights."""
    root = Path(path)
    display = str(path)
    try:
        exists, is_dir = root.exists(), root.is_dir()
    except (OSError, ValueError) as exc:
        raise UsageError(f"{display[:200]}: not a usable path ({exc.__class__.__name__})") from exc
    if not exists:
        raise UsageError(f"{display}: {not_there(root)}")
    if not is_dir:
        raise UsageError(f"{display}: not a directory (give the folder that holds config.json and the "
                         "safetensors files)")
    try:
        children = sorted(p.name for p in root.iterdir())
    except OSError as exc:
        raise UsageError(f"{display}: cannot list the directory: {exc.strerror or exc}") from exc
    st_files = [n for n in children if n.endswith(".safetensors")]
    if CONFIG not in children and not st_files and BIN not in children and BIN_INDEX not in children:
        raise UsageError(f"{display}: holds neither {CONFIG} nor a safetensors file (nor {BIN}); is this a "
                         "drafter checkpoint directory?")
    return root, children, st_files


def _read_config(ckpt: Checkpoint, root: Path, children: list[str]) -> None:
    if CONFIG not in children:
        _problem(ckpt, CONFIG, "is missing: engines cannot build the drafter without it",
                 expected="config.json beside the weights", found="no config.json",
                 fix="copy the drafter's config.json into the checkpoint directory")
        return
    ok, why = _is_file(root / CONFIG)
    if not ok:
        _problem(ckpt, CONFIG, why or "is not a file")
        return
    raw = _read_json(ckpt, root / CONFIG, CONFIG)
    if raw is _UNUSABLE:
        return
    if not isinstance(raw, dict):
        _problem(ckpt, CONFIG, f"is a JSON {json_type(raw)}, not an object",
                 expected="a JSON object", found=json_type(raw))
        return
    ckpt.config_raw = raw


def _read_weights(ckpt: Checkpoint, root: Path, children: list[str], st_files: list[str]) -> None:
    reader: Callable[[Path, str], FileHeader] = read_header
    index = INDEX
    shard_names: dict[str, Any] | None  # file -> the tensors the index puts there (None: not indexed)
    if SINGLE in children:
        shard_names = {SINGLE: None}
    elif INDEX in children:
        shard_names = _read_index(ckpt, root)
        if shard_names is None:
            ckpt.complete = False
            return
    elif st_files:
        shard_names = {n: None for n in st_files}
    elif BIN in children:  # torch.save's zip format, read without unpickling
        reader, shard_names = read_bin, {BIN: None}
    elif BIN_INDEX in children:
        reader, index = read_bin, BIN_INDEX
        shard_names = _read_index(ckpt, root, BIN_INDEX)
        if shard_names is None:
            ckpt.complete = False
            return
    else:
        _problem(ckpt, SINGLE, f"is missing and there is no index, other safetensors file or {BIN}",
                 expected=f"{SINGLE}, {INDEX} or {BIN}", found="no weights", fix="copy the weights next to config.json")
        ckpt.complete = False
        return

    for shard, indexed in shard_names.items():
        ok, why = ckpt.shard_status(root, shard)
        if not ok:
            listed = f" (the index puts {len(indexed)} tensors there)" if indexed else ""
            _problem(ckpt, shard, f"{why}{listed}",
                     expected="a safetensors file" if reader is read_header else "a torch.save file", found=why,
                     fix="copy the missing shard, or regenerate the index to match the files")
            ckpt.complete = False
            continue
        header = ckpt.read_shard(reader, root, shard)
        ckpt.files.append(header)
        ckpt.problems.extend(header.problems)
        if not header.parsed:
            ckpt.complete = False
        for name, entry in header.entries.items():
            if name in ckpt.tensors:
                _problem(ckpt, shard, f"tensor {name!r} is also in {ckpt.tensors[name].file}", key=name,
                         fix="keep each tensor in exactly one shard")
                continue
            ckpt.tensors[name] = entry
        if indexed is not None and header.parsed:
            for name in sorted(set(indexed) - set(header.entries)):
                _problem(ckpt, index, f"puts {name!r} in {shard}, whose header has no such tensor", key=name,
                         fix="regenerate the index from the shards")
                ckpt.complete = False
            for name in sorted(set(header.entries) - set(indexed)):
                _problem(ckpt, shard, f"holds {name!r}, which the index does not list", key=name,
                         fix="regenerate the index from the shards")


def _read_index(ckpt: Checkpoint, root: Path, index: str = INDEX) -> dict[str, list[str]] | None:
    ok, why = _is_file(root / index)
    if not ok:
        _problem(ckpt, index, why or "is not a file")
        return None
    raw = _read_json(ckpt, root / index, index)
    if raw is _UNUSABLE:
        return None
    if not isinstance(raw, dict):
        _problem(ckpt, index, f"is a JSON {json_type(raw)}, not an object", expected='{"weight_map": {tensor: file}}',
                 found=json_type(raw))
        return None
    weight_map = raw.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        _problem(ckpt, index, "has no weight_map object", key="weight_map",
                 expected='{"weight_map": {tensor: file}}', found=json_type(weight_map))
        return None
    shards: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or "\0" in shard:
            _problem(ckpt, index, f"maps {name!r} to {shard!r}, not a file name", key=f"weight_map.{name}")
            ckpt.complete = False
            continue
        pure = PurePosixPath(shard.replace("\\", "/"))
        if pure.is_absolute() or os.path.isabs(shard) or ".." in pure.parts:
            _problem(ckpt, index, f"maps {name!r} to {shard!r}, outside the checkpoint directory",
                     key=f"weight_map.{name}", expected="a relative path without '..'", found=shard,
                     fix="keep every shard inside the checkpoint directory and name it relatively")
            ckpt.complete = False
            continue
        shards.setdefault(shard, []).append(name)
    return shards


def _classify(ckpt: Checkpoint) -> None:
    if ckpt.config_raw is not None:
        ckpt.layout = detect_layout(ckpt.config_raw)
        ckpt.layout_source = f"{CONFIG} structure"
        ckpt.config = read_config(ckpt.config_raw, ckpt.layout)
        _classify_names(ckpt)
    else:
        _classify_names(ckpt)
        styles = {n.style for n in ckpt.names.values() if n.style}
        ckpt.layout = FLAT if styles == {"midlayer"} else SPECULATORS if styles == {"layers"} else UNKNOWN
        ckpt.layout_source = "tensor names (no readable config.json)"


def _classify_names(ckpt: Checkpoint) -> None:
    """Each tensor's role, for the decoder layer of the checkpoint's family (decided from the config and the names)."""
    ckpt.family = drafter_family(ckpt.config_raw, ckpt.layout, tuple(ckpt.tensors))
    if ckpt.config is not None:
        ckpt.config.family = ckpt.family
    for name in ckpt.tensors:
        parsed = parse_name(name, ckpt.family)
        ckpt.names[name] = parsed
        if parsed.role is None:
            continue
        if parsed.role in ckpt.roles:
            ckpt.duplicate_roles.setdefault(parsed.role, [ckpt.roles[parsed.role]]).append(name)
            continue
        ckpt.roles[parsed.role] = name
