"""A checkpoint folder's file facts: which files it holds, the parsed config.json, the tensors' headers, and
everything wrong with them.

Reads ``config.json`` and the safetensors headers (single file or a sharded
``model.safetensors.index.json``), never tensor data: a tensor's bytes are read only when asked for
(:meth:`CheckpointFiles.load_bytes`, through :func:`~eagle3_checks.storage.safetensors.load_array`). No torch on
this path. Without any safetensors file, ``pytorch_model.bin`` (or a sharded ``pytorch_model.bin.index.json``) is
read the same way, its zip directory and pickle opcodes parsed without unpickling
(:mod:`eagle3_checks.storage.torch_bin`).

What the files mean (layout, roles, family, the effective config) is the drafter layer's view of these facts:
:class:`eagle3_checks.drafter.checkpoint.Checkpoint`. What cannot be a checkpoint at all (a missing path, a file,
a folder with neither config.json nor safetensors) raises :class:`~eagle3_checks.errors.UsageError`; everything
wrong inside one is collected in :attr:`CheckpointFiles.problems` for the ``files`` check to report.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Callable
from dataclasses import field
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import UsageError
from ..fast_dataclass import dataclass
from .safetensors import FileHeader, Problem, TensorEntry, json_type, read_header

CONFIG = "config.json"
# The config the trainer saved, when another config.json was written for serving: eagle3-checks convert keeps the
# speculators original under this name beside the flat one, and users copy it there by hand (the seeds' Kimi-K2.5
# drafter). Read like config.json (JSON only, never executed); it is evidence of who trained the weights.
BESIDE_CONFIGS = ("config_speculators.json",)
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
BIN = "pytorch_model.bin"
BIN_INDEX = "pytorch_model.bin.index.json"


class TensorReadError(Exception):
    """A tensor's bytes could not be read (truncated file, I/O error, unloadable dtype)."""


@dataclass
class CheckpointFiles:
    """The files of one checkpoint folder (or Hub snapshot), as read: no meaning attached yet."""

    path: Path
    display: str
    config_raw: dict | None = None  # config.json parsed, when it is a JSON object
    files: list[FileHeader] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    tensors: dict[str, TensorEntry] = field(default_factory=dict)  # on-disk name -> entry
    # False when a header did not parse or an indexed shard is missing: the tensor list is partial.
    complete: bool = True
    # why the weights' bytes are not readable here (a Hub checkpoint opened from its headers): the scan and forward
    # levels skip with this note
    weights_elsewhere: str | None = None
    # the names in the folder (a Hub checkpoint: the files looked up), and the trainer's own config saved beside
    # config.json (BESIDE_CONFIGS: name -> its JSON object; unreadable ones are left out, with the reason in
    # ``beside_problems``). Neither is a problem of the checkpoint: they are evidence of its trainer.
    names: list[str] = field(default_factory=list)
    beside: dict[str, dict] = field(default_factory=dict)
    beside_problems: dict[str, str] = field(default_factory=dict)

    @property
    def weight_files(self) -> list[str]:
        return [f.file for f in self.files]

    def file_size(self, e: TensorEntry) -> int:
        return next((f.size for f in self.files if f.path == e.path), 0)

    def ends_past_file(self, e: TensorEntry) -> bool:
        """Whether a tensor's bytes run past the end of its file (a truncated file: the files check's finding)."""
        return e.offset + e.nbytes > self.file_size(e)

    @property
    def past_end(self) -> list[str]:
        """The tensors whose bytes are not all in their file."""
        return [name for name, e in self.tensors.items() if self.ends_past_file(e)]

    # ----- where the bytes are (a Hub checkpoint overrides these: eagle3_checks.storage.hub.HubFiles) -----
    def load_bytes(self, e: TensorEntry) -> bytes | None:
        """The bytes of one tensor, or None to read them from ``e.path`` on this disk."""
        return None

    def shard_status(self, root: Path, shard: str) -> tuple[bool, str | None, str]:
        """Whether a weight file is there, and if not why and the kind of problem."""
        return _is_file(root / shard)

    def read_shard(self, reader: Any, root: Path, shard: str) -> FileHeader:
        return reader(root / shard, shard)


def _problem(ckpt: CheckpointFiles, file: str, message: str, kind: str, **kw: Any) -> None:
    ckpt.problems.append(Problem(file=file, message=message, kind=kind, **kw))


_UNUSABLE: Any = object()


def _read_json(ckpt: CheckpointFiles, path: Path, display: str) -> Any:
    """Parse a JSON file, recording any problem; returns ``_UNUSABLE`` when it cannot be parsed (a JSON ``null``
    is a value, and the caller says it is not an object)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except IsADirectoryError:
        _problem(ckpt, display, "is a directory, not a file", "directory")
        return _UNUSABLE
    except UnicodeDecodeError as exc:
        _problem(ckpt, display, "is not valid UTF-8", "invalid-json", offset=exc.start,
                 fix="re-save the file as UTF-8 JSON")
        return _UNUSABLE
    except OSError as exc:
        _problem(ckpt, display, f"cannot be read: {exc.strerror or exc}", "unreadable")
        return _UNUSABLE

    def no_dupes(pairs: list[tuple[str, Any]]) -> dict:
        out: dict = {}
        for k, v in pairs:
            if k in out:
                _problem(ckpt, display, f"states {k!r} more than once; readers keep only the last", "duplicate-key",
                         key=k,
                         fix=f"keep one {k!r}")
            out[k] = v
        return out

    try:
        return json.loads(text, object_pairs_hook=no_dupes)
    except RecursionError:
        _problem(ckpt, display, "nests JSON too deeply to be read", "invalid-json", fix="repair or regenerate the file")
        return _UNUSABLE
    except ValueError as exc:
        pos = getattr(exc, "pos", None)
        _problem(ckpt, display, f"is not valid JSON: {getattr(exc, 'msg', exc)}", "invalid-json",
                 offset=len(text[:pos].encode()) if isinstance(pos, int) else None,  # a byte offset, not a char's
                 fix="repair or regenerate the file")
        return _UNUSABLE


def _is_file(path: Path) -> tuple[bool, str | None, str]:
    """Follow symlinks (a Hugging Face cache points into blobs/) to a regular file: (whether it is one, why not, the
    kind of problem)."""
    try:
        resolved = path.resolve(strict=True)
    except FileNotFoundError:
        if path.is_symlink():
            return False, "is a broken symlink", "broken-symlink"
        return False, "does not exist", "missing-file"
    except (RuntimeError, OSError, ValueError) as exc:  # symlink loop, name too long, NUL byte
        return False, f"cannot be resolved ({exc.__class__.__name__}: {exc})", "unreadable"
    if resolved.is_dir():
        return False, "is a directory, not a file", "directory"
    if not resolved.is_file():
        return False, "is not a regular file", "corrupt"
    return True, None, ""


def read_folder(path: str | os.PathLike) -> CheckpointFiles:
    """Read a checkpoint directory's file facts. Raises UsageError when ``path`` cannot be a checkpoint."""
    root, children, st_files = locate(path)
    return build(CheckpointFiles(path=root, display=str(path)), root, children, st_files)


def build(ckpt: CheckpointFiles, root: Path, children: list[str], st_files: list[str]) -> CheckpointFiles:
    """Fill ``ckpt`` from the files ``children`` names in ``root`` (a directory, or a Hub snapshot whose weight
    files ``ckpt`` reads by range)."""
    _read_config(ckpt, root, children)
    _read_beside(ckpt, root, children)
    _read_weights(ckpt, root, children, st_files)
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


def _read_config(ckpt: CheckpointFiles, root: Path, children: list[str]) -> None:
    if CONFIG not in children:
        _problem(ckpt, CONFIG, "is missing: engines cannot build the drafter without it", "config-missing",
                 expected="config.json beside the weights", found="no config.json",
                 fix="copy the drafter's config.json into the checkpoint directory")
        return
    ok, why, kind = _is_file(root / CONFIG)
    if not ok:
        _problem(ckpt, CONFIG, why or "is not a file", kind)
        return
    raw = _read_json(ckpt, root / CONFIG, CONFIG)
    if raw is _UNUSABLE:
        return
    if not isinstance(raw, dict):
        _problem(ckpt, CONFIG, f"is a JSON {json_type(raw)}, not an object", "invalid-json",
                 expected="a JSON object", found=json_type(raw))
        return
    ckpt.config_raw = raw


def _read_beside(ckpt: CheckpointFiles, root: Path, children: list[str]) -> None:
    """The folder's names, and each trainer config saved beside config.json that parses as a JSON object."""
    ckpt.names = list(children)
    for name in BESIDE_CONFIGS:
        if name not in children:
            continue
        ok, why, _ = _is_file(root / name)
        scratch = CheckpointFiles(path=root, display=ckpt.display)  # its problems are not the checkpoint's
        raw = _read_json(scratch, root / name, name) if ok else _UNUSABLE
        if isinstance(raw, dict):
            ckpt.beside[name] = raw
        else:
            ckpt.beside_problems[name] = (why or (scratch.problems[0].message if scratch.problems else
                                                  f"is a JSON {json_type(raw)}, not an object"))


def _read_weights(ckpt: CheckpointFiles, root: Path, children: list[str], st_files: list[str]) -> None:
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
    elif BIN in children:  # torch.save's zip format, read without unpickling (its reader imported only for it)
        from .torch_bin import read_bin

        reader, shard_names = read_bin, {BIN: None}
    elif BIN_INDEX in children:
        from .torch_bin import read_bin

        reader, index = read_bin, BIN_INDEX
        shard_names = _read_index(ckpt, root, BIN_INDEX)
        if shard_names is None:
            ckpt.complete = False
            return
    else:
        _problem(ckpt, SINGLE, f"is missing and there is no index, other safetensors file or {BIN}", "missing-file",
                 expected=f"{SINGLE}, {INDEX} or {BIN}", found="no weights", fix="copy the weights next to config.json")
        ckpt.complete = False
        return

    for shard, indexed in shard_names.items():
        ok, why, kind = ckpt.shard_status(root, shard)
        if not ok:
            listed = f" (the index puts {len(indexed)} tensors there)" if indexed else ""
            _problem(ckpt, shard, f"{why}{listed}", "missing-shard" if kind == "missing-file" and indexed else kind,
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
                _problem(ckpt, shard, f"tensor {name!r} is also in {ckpt.tensors[name].file}", "duplicate-tensor",
                         key=name,
                         fix="keep each tensor in exactly one shard")
                continue
            ckpt.tensors[name] = entry
        if indexed is not None and header.parsed:
            for name in sorted(set(indexed) - set(header.entries)):
                _problem(ckpt, index, f"puts {name!r} in {shard}, whose header has no such tensor", "index-mismatch",
                         key=name,
                         fix="regenerate the index from the shards")
                ckpt.complete = False
            for name in sorted(set(header.entries) - set(indexed)):
                _problem(ckpt, shard, f"holds {name!r}, which the index does not list", "index-mismatch", key=name,
                         fix="regenerate the index from the shards")


def _read_index(ckpt: CheckpointFiles, root: Path, index: str = INDEX) -> dict[str, list[str]] | None:
    ok, why, kind = _is_file(root / index)
    if not ok:
        _problem(ckpt, index, why or "is not a file", kind)
        return None
    raw = _read_json(ckpt, root / index, index)
    if raw is _UNUSABLE:
        return None
    if not isinstance(raw, dict):
        _problem(ckpt, index, f"is a JSON {json_type(raw)}, not an object", "invalid-json",
                 expected='{"weight_map": {tensor: file}}',
                 found=json_type(raw))
        return None
    weight_map = raw.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        _problem(ckpt, index, "has no weight_map object", "index-mismatch", key="weight_map",
                 expected='{"weight_map": {tensor: file}}', found=json_type(weight_map))
        return None
    shards: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or "\0" in shard:
            _problem(ckpt, index, f"maps {name!r} to {shard!r}, not a file name", "index-mismatch",
                     key=f"weight_map.{name}")
            ckpt.complete = False
            continue
        pure = PurePosixPath(shard.replace("\\", "/"))
        if pure.is_absolute() or os.path.isabs(shard) or ".." in pure.parts:
            _problem(ckpt, index, f"maps {name!r} to {shard!r}, outside the checkpoint directory", "index-mismatch",
                     key=f"weight_map.{name}", expected="a relative path without '..'", found=shard,
                     fix="keep every shard inside the checkpoint directory and name it relatively")
            ckpt.complete = False
            continue
        shards.setdefault(shard, []).append(name)
    return shards
