"""Safetensors files, read and written without torch.

A safetensors file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON
(``{name: {"dtype", "shape", "data_offsets": [begin, end]}}`` plus an optional string-only
``__metadata__``), then the tensor data, offsets relative to byte 8 + N. The header is parsed
here by hand so that a structural check never touches tensor data; data is read by byte range,
one tensor at a time, only when a check asks for it.

Everything wrong with a file is returned as a :class:`Problem` naming the file and the byte
offset; nothing in this module raises on bad input.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import field
from pathlib import Path
from typing import Any

from ..fast_dataclass import dataclass

# safetensors refuses headers above this size (MAX_HEADER_SIZE in safetensors/src/tensor.rs).
HEADER_LIMIT = 100_000_000

# dtype name -> (itemsize in bytes, kind: f float, i signed, u unsigned, b bool, numpy dtype or None)
DTYPES: dict[str, tuple[int, str, str | None]] = {
    "BOOL": (1, "b", "bool"),
    "U8": (1, "u", "uint8"),
    "I8": (1, "i", "int8"),
    "U16": (2, "u", "uint16"),
    "I16": (2, "i", "int16"),
    "U32": (4, "u", "uint32"),
    "I32": (4, "i", "int32"),
    "U64": (8, "u", "uint64"),
    "I64": (8, "i", "int64"),
    "F16": (2, "f", "float16"),
    "BF16": (2, "f", None),
    "F32": (4, "f", "float32"),
    "F64": (8, "f", "float64"),
    "F8_E4M3": (1, "f", None),
    "F8_E5M2": (1, "f", None),
    "F8_E8M0": (1, "f", None),
}

# Spellings a config.json uses for a dtype (torch_dtype / dtype), mapped to safetensors names.
CONFIG_DTYPES = {
    "bfloat16": "BF16",
    "float16": "F16",
    "half": "F16",
    "float32": "F32",
    "float": "F32",
    "float64": "F64",
}

_ZIP_MAGIC = b"PK\x03\x04"
_U64 = 2**64  # safetensors sizes and offsets are 64-bit


# What kind of problem a reader found, said where it finds it: the files check maps each kind to its finding code
# (checks/files.py), so that rewording a message never changes the code users waive by name.
KINDS = ("config-missing", "directory", "broken-symlink", "missing-shard", "missing-file", "truncated",
         "duplicate-key", "invalid-json", "wrong-format", "byte-ranges", "duplicate-tensor", "index-mismatch",
         "bad-header", "unreadable", "corrupt")


@dataclass(frozen=True)
class Problem:
    """Something wrong with a file, found while reading it (not while judging it): its ``kind`` (one of
    :data:`KINDS`) and what it is, in words."""

    file: str
    message: str
    kind: str = "corrupt"
    key: str | None = None
    offset: int | None = None
    expected: str | None = None
    found: str | None = None
    fix: str | None = None
    why: str | None = None


@dataclass(frozen=True)
class TensorEntry:
    """One tensor as its header describes it. ``offset`` is absolute in ``path``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str
    path: Path
    offset: int
    nbytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def kind(self) -> str:
        return DTYPES[self.dtype][1]


@dataclass
class FileHeader:
    """The parsed header of one safetensors file."""

    file: str
    path: Path
    size: int = 0
    data_start: int = 0
    entries: dict[str, TensorEntry] = field(default_factory=dict)
    metadata: dict[str, str] | None = None
    problems: list[Problem] = field(default_factory=list)
    # True once the header parsed as a JSON object; entries may still point past a truncated end.
    parsed: bool = False


class _DuplicateKey(ValueError):
    pass


Source = tuple[int, Callable[[int, int], bytes]]  # (file size, read(offset, n) -> bytes)


@contextmanager
def _opened(path: Path, source: Source | None) -> Iterator[Source]:
    """The file's size and a reader of its bytes: ``source`` when given, else the file on disk."""
    if source is not None:
        yield source
        return
    with open(path, "rb") as fh:
        def read(offset: int, n: int) -> bytes:
            fh.seek(offset)
            return fh.read(n)

        yield os.fstat(fh.fileno()).st_size, read


def json_type(value: Any) -> str:
    """A parsed value's JSON type name: object, array, string, number, boolean or null."""
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _disguise(head: bytes) -> str | None:
    """What a file that fails to parse as safetensors really is, judged by its first bytes."""
    if head.startswith(_ZIP_MAGIC):
        return "a zip archive (what torch.save writes)"
    if head[:1] == b"\x80" and head[1:2] in {bytes([p]) for p in range(2, 6)}:
        return "a Python pickle"
    return None


# The header's validation, one rule after another in the file's byte order (length, JSON, entries, spans): each
# branch is one refusal with its own message; splitting it would only scatter the order the rules apply in.
def read_header(path: Path, display: str, source: Source | None = None) -> FileHeader:  # noqa: C901
    """Parse the header of ``path``; ``display`` is the name findings use for the file. ``source``: the file's size
    and a ``read(offset, n)`` of its bytes, for a file that is not on this disk (a Hub checkpoint's, by range)."""
    result = FileHeader(file=display, path=path)
    head = b""

    def problem(message: str, kind: str, offset: int | None = 0, **kw: Any) -> FileHeader:
        result.problems.append(Problem(file=display, message=message, kind=kind, offset=offset, **kw))
        return result

    def unparsable(message: str, kind: str, offset: int | None = 0, **kw: Any) -> FileHeader:
        # A file that does not parse may be something else in disguise: say so rather than "truncated".
        what = _disguise(head)
        if what:
            return problem(f"is {what}, not safetensors", "wrong-format", offset=0,
                           fix="re-save the weights with safetensors.torch.save_file; never load an untrusted "
                           "torch.save file outside weights_only=True")
        return problem(message, kind, offset, **kw)

    try:
        with _opened(path, source) as (size, read):
            result.size = size
            head = read(0, 8)
            if len(head) < 8:
                return unparsable(
                    f"is {size} bytes, too short for the 8-byte header length: truncated", "truncated",
                    expected="at least 8 bytes",
                    found=f"{size} bytes",
                    fix="copy the file again from its source",
                )
            (n,) = struct.unpack("<Q", head)
            if n > HEADER_LIMIT:
                return unparsable(
                    f"declares a {n}-byte header, above safetensors' cap of {HEADER_LIMIT} bytes", "bad-header",
                    expected=f"<= {HEADER_LIMIT}",
                    found=str(n),
                    fix="the file is not a valid safetensors file; re-export it",
                )
            if 8 + n > size:
                return unparsable(
                    f"declares a {n}-byte header but the file is only {size} bytes: truncated", "truncated",
                    expected=f"at least {8 + n} bytes",
                    found=f"{size} bytes",
                    fix="copy the file again from its source",
                )
            raw = read(8, n)
    except IsADirectoryError:
        return problem("is a directory, not a file", "directory", offset=None)
    except OSError as exc:
        return problem(f"cannot be read: {exc.strerror or exc}", "unreadable", offset=None)

    result.data_start = 8 + n
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return unparsable(f"header is not valid UTF-8 at byte {8 + exc.start}", "invalid-json", offset=8 + exc.start)
    try:
        header = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as exc:
        return problem(f"header names tensor {exc.args[0]!r} twice", "bad-header", key=str(exc.args[0]), offset=8)
    except RecursionError:
        return problem("header nests JSON too deeply to be a safetensors header", "invalid-json", offset=8)
    except ValueError as exc:
        pos = getattr(exc, "pos", 0)
        return unparsable(f"header is not valid JSON ({getattr(exc, 'msg', exc)})", "invalid-json",
                          offset=8 + len(text[:pos].encode()))  # a byte offset, not a character's
    if not isinstance(header, dict):
        return problem(f"header is a JSON {json_type(header)}, not an object", "invalid-json", offset=8)
    surrogate = _lone_surrogate(header)
    if surrogate is not None:  # "\ud800": valid JSON to Python, not Unicode; serde_json (safetensors) refuses it
        escapes = [p for p in (raw.find(b"\\ud"), raw.find(b"\\uD")) if p >= 0]
        return problem(f"header holds {surrogate!r}, a lone UTF-16 surrogate escape: not Unicode text, and "
                       "safetensors refuses the header", "bad-header", offset=8 + min(escapes, default=0),
                       fix="re-save the file with safetensors")
    result.parsed = True

    def at(name: str) -> int:
        """The byte offset of a tensor's entry in the header (8, the header's start, if not found verbatim)."""
        for spelling in (json.dumps(name, ensure_ascii=False).encode(), json.dumps(name).encode()):
            pos = raw.find(spelling + b":")
            if pos < 0:
                pos = raw.find(spelling)
            if pos >= 0:
                return 8 + pos
        return 8

    def located(name: str) -> Any:
        """``problem`` at the offset of ``name``'s entry in the header (whatever offset the caller gives)."""
        return lambda message, kind, offset=0, **kw: problem(message, kind, at(name), **kw)

    data_len = size - result.data_start
    spans: list[tuple[int, int, str]] = []
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in info.items()
            ):
                problem("__metadata__ must map strings to strings", "bad-header", key=name, offset=8)
            else:
                result.metadata = info
            continue
        entry = _entry(name, info, display, path, result.data_start, located(name))
        if entry is None:
            continue
        begin = entry.offset - result.data_start
        spans.append((begin, begin + entry.nbytes, name))
        result.entries[name] = entry

    spans.sort()
    cursor = 0
    for begin, end, name in spans:
        if begin < cursor:
            problem(f"tensor {name!r} overlaps the tensor before it", "byte-ranges", key=name,
                    offset=result.data_start + begin)
        elif begin > cursor:
            problem(f"{begin - cursor} unused bytes (a hole) before tensor {name!r}", "byte-ranges", key=name,
                    offset=result.data_start + cursor)
        cursor = max(cursor, end)
    if cursor > data_len:
        last = max(spans, key=lambda s: s[1])
        problem(
            f"tensor {last[2]!r} ends at byte {result.data_start + last[1]} but the file is "
            f"{size} bytes: truncated",
            "truncated",
            key=last[2],
            offset=size,
            expected=f"{result.data_start + cursor} bytes",
            found=f"{size} bytes",
            fix="copy the file again from its source",
        )
    elif cursor < data_len:
        problem(f"{data_len - cursor} bytes after the last tensor", "byte-ranges", offset=result.data_start + cursor)
    return result


def _lone_surrogate(value: Any) -> str | None:
    """The first string (key or value) in a parsed JSON document that is not encodable Unicode."""
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return v
    return None


def _entry(name: str, info: Any, display: str, path: Path, data_start: int, problem: Any) -> TensorEntry | None:
    if not isinstance(info, dict):
        problem(f"entry for {name!r} is not an object", "bad-header", key=name, offset=8)
        return None
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        problem(f"tensor {name!r} has unknown dtype {dtype!r}", "bad-header", key=name, offset=8,
                expected="one of " + ", ".join(DTYPES), found=repr(dtype))
        return None
    if not isinstance(shape, list) or not all(_is_int(d) and 0 <= d < _U64 for d in shape):
        problem(f"tensor {name!r} has an invalid shape {shape!r}", "bad-header", key=name, offset=8,
                expected="a list of non-negative integers", found=repr(shape))
        return None
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_int(o) and 0 <= o < _U64 for o in offsets)
        or offsets[0] > offsets[1]
    ):
        problem(f"tensor {name!r} has invalid data_offsets {offsets!r}", "bad-header", key=name, offset=8,
                expected="[begin, end] with 0 <= begin <= end", found=repr(offsets))
        return None
    nbytes = math.prod(shape) * DTYPES[dtype][0]
    if nbytes >= _U64:
        problem(f"tensor {name!r}: shape {shape} x {dtype} overflows 64 bits", "bad-header", key=name, offset=8,
                expected="a size below 2**64 bytes", found=f"{nbytes} bytes")
        return None
    if nbytes != offsets[1] - offsets[0]:
        problem(
            f"tensor {name!r}: shape {shape} x {dtype} is {nbytes} bytes but its offsets span "
            f"{offsets[1] - offsets[0]}", "bad-header",
            key=name, offset=8, expected=f"{nbytes} bytes", found=f"{offsets[1] - offsets[0]} bytes",
        )
        return None
    return TensorEntry(name, dtype, tuple(shape), display, path, data_start + offsets[0], nbytes)


def read_bytes(entry: TensorEntry) -> bytes:
    """The raw bytes of one tensor. Raises OSError or EOFError when they cannot be read."""
    with open(entry.path, "rb") as fh:
        fh.seek(entry.offset)
        data = fh.read(entry.nbytes)
    if len(data) != entry.nbytes:
        raise EOFError(f"{entry.file}: {entry.name} needs {entry.nbytes} bytes, got {len(data)}")
    return data


def load_array(entry: TensorEntry, data: bytes | None = None):  # -> numpy.ndarray
    """One tensor as a numpy array (BF16 widened to float32), from ``data`` (its bytes) or read from its file.
    Raises ValueError for fp8."""
    import numpy as np

    if data is None:
        data = read_bytes(entry)
    np_dtype = DTYPES[entry.dtype][2]
    if entry.dtype == "BF16":
        wide = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        return wide.view(np.float32).reshape(entry.shape)
    if np_dtype is None:
        raise ValueError(f"{entry.dtype} tensors cannot be loaded as numpy arrays")
    return np.frombuffer(data, dtype=np.dtype(np_dtype).newbyteorder("<")).reshape(entry.shape)


# dtype name -> the struct format of one little-endian item (standard sizes under "<")
_STRUCT = {"U8": "B", "I8": "b", "U16": "H", "I16": "h", "U32": "I", "I32": "i", "U64": "Q", "I64": "q", "F16": "e",
           "F32": "f", "F64": "d"}
_NONZERO = bytes([0] + [1] * 255)  # a bool byte as numpy and torch read it: any nonzero byte is True


def load_values(entry: TensorEntry, data: bytes | None = None) -> Sequence[int] | Sequence[float]:
    """One tensor's values, flattened in C order, as Python numbers decoded by the standard library (no numpy): the
    values :func:`load_array` gives, as ints for the integer and bool dtypes (a bool as 0 or 1) and floats for the
    floating ones (BF16 and F16 exactly). ``data``: its bytes, else read from its file. Raises ValueError for fp8."""
    if data is None:
        data = read_bytes(entry)
    if len(data) != entry.nbytes:
        raise ValueError(f"{len(data)} bytes for shape {list(entry.shape)} x {entry.dtype} ({entry.nbytes} bytes)")
    if entry.dtype == "BOOL":
        return bytes(data).translate(_NONZERO)
    if entry.dtype == "U8":
        return bytes(data)
    if entry.dtype == "BF16":  # the two bytes of each value become the high half of a float32
        wide = bytearray(2 * len(data))
        wide[2::4], wide[3::4] = data[0::2], data[1::2]
        data, fmt = bytes(wide), "f"
    elif entry.dtype in _STRUCT:
        fmt = _STRUCT[entry.dtype]
    else:
        raise ValueError(f"{entry.dtype} tensors cannot be read as numbers")
    return struct.unpack(f"<{len(data) // struct.calcsize('<' + fmt)}{fmt}", data)


# ---------------------------------------------------------------------------------------------
# Writing (tiny example drafters, test fixtures, sparse benchmark files)


@dataclass(frozen=True)
class RawTensor:
    """Tensor bytes to write. ``data=None`` writes zeros as a sparse hole (no disk used)."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes | None = None

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPES[self.dtype][0]


_NUMPY_TO_ST = {v[2]: k for k, v in DTYPES.items() if v[2] is not None}


def from_numpy(array: Any, dtype: str | None = None) -> RawTensor:
    """Wrap a numpy array; ``dtype='BF16'`` rounds float32 to bfloat16 (nearest even)."""
    import numpy as np

    array = np.ascontiguousarray(array)
    if dtype == "BF16":
        bits = array.astype(np.float32).view(np.uint32)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return RawTensor("BF16", tuple(array.shape), rounded.astype("<u2").tobytes())
    name = dtype or _NUMPY_TO_ST[array.dtype.name]
    np_name = DTYPES[name][2]
    return RawTensor(name, tuple(array.shape), array.astype(np.dtype(np_name).newbyteorder("<")).tobytes())


def encode_header(tensors: Mapping[str, RawTensor], metadata: Mapping[str, str] | None = None) -> bytes:
    """Length prefix + JSON header (space-padded to 8 bytes) for tensors laid out in order."""
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    cursor = 0
    for name, t in tensors.items():
        header[name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [cursor, cursor + t.nbytes]}
        cursor += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def write_safetensors(path: Path, tensors: Mapping[str, RawTensor], metadata: Mapping[str, str] | None = None) -> None:
    """Write a safetensors file; tensors with ``data=None`` become sparse zero-filled holes."""
    head = encode_header(tensors, metadata)
    with open(path, "wb") as fh:
        fh.write(head)
        for name, t in tensors.items():
            if t.data is None:
                fh.seek(t.nbytes, os.SEEK_CUR)
            else:
                if len(t.data) != t.nbytes:
                    raise ValueError(f"{name}: {len(t.data)} bytes for shape {t.shape} {t.dtype}")
                fh.write(t.data)
        fh.truncate(fh.tell())

