"""``pytorch_model.bin`` checkpoints, read at header level without unpickling.

``torch.save`` (the default since torch 1.6) writes a zip archive: ``<prefix>/data.pkl`` (the pickle of the state
dict, with each tensor's storage replaced by a persistent id), ``<prefix>/data/<key>`` (each storage's raw bytes,
stored uncompressed), ``<prefix>/byteorder`` and ``<prefix>/version``. This module parses the zip central directory
and the local file headers by hand, and walks the opcodes of ``data.pkl`` with :func:`pickletools.genops` as a
small symbolic machine that never imports, calls or constructs anything. It accepts only what torch writes for a
plain state dict:

* a ``dict`` (``EMPTY_DICT``) or ``collections.OrderedDict()`` of string keys to tensors;
* a tensor is ``torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
  OrderedDict())`` (or ``_rebuild_tensor_v3(..., dtype)`` for the dtypes without a legacy storage class, such as
  fp8), optionally wrapped in ``torch._utils._rebuild_parameter(tensor, requires_grad, OrderedDict())``;
* a storage is the persistent id ``('storage', torch.<X>Storage, key, location, numel)``;
* ``model.state_dict()`` saved as it is carries a ``_metadata`` attribute (module versions): a final ``BUILD`` of
  the top-level dict with ``{'_metadata': <dicts of strings and integers>}`` is accepted as data and ignored.

Any other global (``os.system``, ``builtins.eval``, ...), a call of anything else, ``BUILD`` of anything else,
``INST``, ``OBJ``, ``NEWOBJ`` and every other opcode are refused with a :class:`Problem` naming the file and the
byte offset. Strides must be contiguous row-major. Each tensor becomes a
:class:`~eagle3_checks.storage.safetensors.TensorEntry` whose offset is the absolute position of its first byte in the
``.bin`` file, so everything that reads tensors by byte range reads these unchanged. Legacy (pre-zip) torch
pickles are refused: they cannot be read without unpickling.

Nothing in this module raises on bad input.
"""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path
from typing import Any, BinaryIO, cast

from ..fast_dataclass import dataclass
from .safetensors import DTYPES, FileHeader, Problem, TensorEntry

PICKLE_LIMIT = 100_000_000  # bytes of data.pkl; a real state dict's pickle is a few hundred bytes per tensor
DIRECTORY_LIMIT = 100_000_000  # bytes of zip central directory
_EOCD = b"PK\x05\x06"
_EOCD64 = b"PK\x06\x06"
_LOCATOR64 = b"PK\x06\x07"
_CENTRAL = b"PK\x01\x02"
_LOCAL = b"PK\x03\x04"

# torch's legacy storage classes (what torch.save names for each dtype) -> safetensors dtype
STORAGE_DTYPES = {
    "DoubleStorage": "F64",
    "FloatStorage": "F32",
    "HalfStorage": "F16",
    "BFloat16Storage": "BF16",
    "LongStorage": "I64",
    "IntStorage": "I32",
    "ShortStorage": "I16",
    "CharStorage": "I8",
    "ByteStorage": "U8",
    "BoolStorage": "BOOL",
}
# torch dtypes named by _rebuild_tensor_v3 (for an UntypedStorage) -> safetensors dtype
TORCH_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64", "int32": "I32",
    "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL", "uint16": "U16", "uint32": "U32", "uint64": "U64",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "float8_e8m0fnu": "F8_E8M0",
}
_REBUILDS = {"_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter"}

_FIX_CODE = ("re-save the tensors alone (a dict of name -> tensor) with safetensors.torch.save_file; never load "
             "this file with torch.load(weights_only=False), which would run that code")
_WHY_CODE = ("a plain state dict pickles nothing but tensors; anything else runs code when unpickled (vLLM and SGLang "
             "load .bin weights with torch.load(weights_only=True), which refuses it too)")
_FIX_COPY = "copy the file again from its source, or re-save it with safetensors.torch.save_file"
_WHY_BIN = ("vLLM and SGLang load .bin weights with torch.load, which fails on a file like this or reads other bytes "
            "than its index says; this tool reads tensors in place only from an archive it has checked")


class _Refused(Exception):
    """What the archive reader refuses, where, and its kind (safetensors.KINDS): a pickle that holds more than a state
    dict (``why`` _WHY_CODE) is "wrong-format", a site that finds the file cut short says "truncated", anything else
    that does not parse is "corrupt"."""

    def __init__(self, message: str, pos: int | None, fix: str | None = None, why: str | None = None,
                 kind: str | None = None) -> None:
        super().__init__(message)
        self.message, self.pos, self.fix, self.why = message, pos, fix, why
        self.kind = kind or ("wrong-format" if why is _WHY_CODE else "corrupt")


# ----- the symbolic values of the pickle walk ---------------------------------------------------------------------

@dataclass(frozen=True)
class _Global:
    module: str
    name: str

    def __str__(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class _Storage:
    key: str
    dtype: str | None  # None: an UntypedStorage (bytes), typed by _rebuild_tensor_v3
    numel: int  # elements of dtype, or bytes when untyped
    pos: int


@dataclass(frozen=True)
class _Tensor:
    storage: _Storage
    dtype: str
    offset: int  # in elements
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    pos: int


class _Dict:
    def __init__(self, pos: int) -> None:
        self.items: dict[str, Any] = {}
        self.pos = pos


class _List:
    def __init__(self, pos: int) -> None:
        self.items: list[Any] = []
        self.pos = pos


def row_major_strides(shape: tuple[int, ...] | list[int]) -> list[int]:
    """The strides, in elements, of a contiguous row-major tensor of ``shape`` (what this tool reads)."""
    expected, acc = [], 1
    for d in reversed(shape):
        expected.append(acc)
        acc *= d
    return expected[::-1]

def _records(result: Any, pos: int) -> list[dict[str, Any]]:
    """A records pickle's value checked: a dict, or a list of dicts, of tensors and plain scalars."""
    dicts = result.items if isinstance(result, _List) else [result]
    out = []
    for d in dicts:
        if not isinstance(d, _Dict):
            raise _Refused(f"holds {_describe(d)}, not a dict of tensors (or a list of them)", pos, _FIX_CODE,
                           _WHY_CODE)
        for key, value in d.items.items():
            if not (isinstance(value, _Tensor) or value is None or isinstance(value, (str, int))):
                raise _Refused(f"holds more than tensors and plain values: {key!r} is {_describe(value)}", d.pos,
                               _FIX_CODE, _WHY_CODE)
        out.append(dict(d.items))
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _describe(v: Any) -> str:
    if isinstance(v, _Global):
        return str(v)
    if isinstance(v, _Dict):
        return "a dict"
    if isinstance(v, _List):
        return "a list"
    if isinstance(v, _Storage):
        return "a bare storage"
    if isinstance(v, tuple):
        return "a tuple"
    return type(v).__name__


def _allowed_global(g: _Global) -> bool:
    if g.module == "collections" and g.name == "OrderedDict":
        return True
    if g.module == "torch._utils" and g.name in _REBUILDS:
        return True
    if g.module == "torch" and (g.name in STORAGE_DTYPES or g.name in TORCH_DTYPES):
        return True
    return g.module == "torch.storage" and g.name == "UntypedStorage"


def _pure_data(value: Any) -> bool:
    """Strings, integers, booleans, None and dicts of them (a state dict's ``_metadata``). Each dict is visited
    once, so memo references shared many times over (or a dict holding itself) cost nothing more."""
    seen: set[int] = set()
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, _Dict):
            if id(v) not in seen:
                seen.add(id(v))
                todo.extend(v.items.values())
        elif not (v is None or isinstance(v, (str, int))):
            return False
    return True


# An opcode dispatch: one branch per pickle opcode a torch state dict uses, each with its refusal. A table of
# handlers would share the stack, marks and memo all the same; the complexity is the opcode count.
def walk_pickle(data: bytes) -> dict[str, _Tensor]:
    """The tensors of a torch state-dict pickle, by name, found by walking its opcodes (never executing them).
    Raises :class:`_Refused` (with the opcode's position in ``data``) for anything else."""
    return _walk(data, records=False)


def walk_records(data: bytes) -> list[dict[str, Any]]:
    """The records of a ``torch.save`` of recorded samples: a dict, or a list of dicts, of string keys to tensors
    (and, in a dict, plain integers, strings, booleans or None, such as TensorRT-LLM's request ``id``), found by
    walking the opcodes like :func:`walk_pickle`. Raises :class:`_Refused` for anything else."""
    return _walk(data, records=True)


def _walk(data: bytes, records: bool) -> Any:  # noqa: C901
    import pickletools  # with pickle, 5 ms of every start-up otherwise; only a pytorch_model.bin needs them

    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}
    storages: dict[str, _Storage] = {}
    ops = pickletools.genops(data)
    pos, name = 0, ""  # the opcode being walked: its position and name, for pop's and pop_mark's messages

    def pop() -> Any:
        if not stack or (marks and len(stack) <= marks[-1]):
            raise _Refused(f"data.pkl: {name} finds an empty stack: not a valid pickle", pos, _FIX_COPY)
        return stack.pop()

    def pop_mark() -> list[Any]:
        if not marks:
            raise _Refused(f"data.pkl: {name} without a MARK: not a valid pickle", pos, _FIX_COPY)
        start = marks.pop()
        items = stack[start:]
        del stack[start:]
        return items

    while True:
        try:
            op, arg, at = next(ops)
        except Exception as exc:  # (genops on arbitrary bytes: ValueError, struct.error, ...)
            raise _Refused(f"data.pkl is not a valid pickle after byte {pos}: {str(exc)[:200]}", pos,
                           _FIX_COPY) from None
        pos = at or 0
        name = op.name

        if name in ("PROTO", "FRAME"):
            continue
        if name == "STOP":
            result = pop()
            if stack or marks:
                raise _Refused("data.pkl stops with values left on its stack: not a valid pickle", pos, _FIX_COPY)
            if records:
                return _records(result, pos)
            if not isinstance(result, _Dict):
                raise _Refused(f"holds {_describe(result)}, not a state dict (a dict of tensors)", pos,
                               "re-save a dict of name -> tensor (model.state_dict()) with safetensors")
            for key, value in result.items.items():
                if not isinstance(value, _Tensor):
                    raise _Refused(f"holds more than plain tensors: {key!r} is {_describe(value)}", result.pos,
                                   _FIX_CODE, _WHY_CODE)
            return dict(result.items)
        if name == "MARK":
            marks.append(len(stack))
        elif name == "EMPTY_DICT":
            stack.append(_Dict(pos))
        elif name == "EMPTY_LIST" and records:
            stack.append(_List(pos))
        elif name in ("APPEND", "APPENDS") and records:
            values = [pop()] if name == "APPEND" else pop_mark()
            lst = stack[-1] if stack and not (marks and len(stack) <= marks[-1]) else None
            if not isinstance(lst, _List):
                raise _Refused(f"data.pkl: {name} on {_describe(lst)}, not a list", pos, _FIX_CODE, _WHY_CODE)
            lst.items.extend(values)
        elif name == "EMPTY_TUPLE":
            stack.append(())
        elif name == "TUPLE":
            stack.append(tuple(pop_mark()))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            items = [pop() for _ in range(n)][::-1]
            stack.append(tuple(items))
        elif name in ("BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "BININT", "BININT1", "BININT2", "LONG1"):
            if name == "LONG1" and not _is_int(arg):
                raise _Refused("data.pkl: LONG1 without an integer", pos, _FIX_COPY)
            stack.append(arg)
        elif name in ("NEWTRUE", "NEWFALSE"):
            stack.append(name == "NEWTRUE")
        elif name == "NONE":
            stack.append(None)
        elif name in ("BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE"):
            if not stack or (marks and len(stack) <= marks[-1]):
                raise _Refused(f"data.pkl: {name} finds an empty stack: not a valid pickle", pos, _FIX_COPY)
            memo[len(memo) if name == "MEMOIZE" else int(cast(int, arg))] = stack[-1]  # PUT's argument is an int
        elif name in ("BINGET", "LONG_BINGET", "GET"):
            slot = int(cast(int, arg))  # pickletools gives the GET opcodes an int argument
            if slot not in memo:
                raise _Refused(f"data.pkl: {name} {arg} reads a memo slot never written: not a valid pickle", pos,
                               _FIX_COPY)
            stack.append(memo[slot])
        elif name in ("GLOBAL", "STACK_GLOBAL"):
            if name == "GLOBAL":
                module, _, attr = str(arg).partition(" ")
            else:
                attr, module = pop(), pop()
                if not isinstance(module, str) or not isinstance(attr, str):
                    raise _Refused("data.pkl: STACK_GLOBAL without two strings", pos, _FIX_COPY)
            g = _Global(module, attr)
            if not _allowed_global(g):
                raise _Refused(f"holds more than plain tensors: {g} (never run here)", pos, _FIX_CODE, _WHY_CODE)
            stack.append(g)
        elif name == "BINPERSID":
            stack.append(_persistent(pop(), pos, storages))
        elif name == "REDUCE":
            args = pop()
            func = pop()
            stack.append(_reduce(func, args, pos))
        elif name in ("SETITEM", "SETITEMS"):
            pairs = [pop(), pop()][::-1] if name == "SETITEM" else pop_mark()
            if len(pairs) % 2:
                raise _Refused("data.pkl: SETITEMS with an odd number of values: not a valid pickle", pos, _FIX_COPY)
            target = stack[-1] if stack and not (marks and len(stack) <= marks[-1]) else None
            if not isinstance(target, _Dict):
                raise _Refused(f"data.pkl: {name} on {_describe(target)}, not a dict", pos, _FIX_CODE, _WHY_CODE)
            for k, v in zip(pairs[::2], pairs[1::2], strict=True):
                if not isinstance(k, str):
                    raise _Refused(f"holds a key that is not a string ({_describe(k)})", pos,
                                   "re-save a dict of name -> tensor with safetensors")
                target.items[k] = v
        elif name == "BUILD":
            state = pop()
            obj = stack[-1] if stack and not (marks and len(stack) <= marks[-1]) else None
            metadata_only = (len(stack) == 1 and not marks and isinstance(obj, _Dict) and isinstance(state, _Dict)
                             and set(state.items) == {"_metadata"} and _pure_data(state.items["_metadata"]))
            if not metadata_only:
                raise _Refused(f"holds more than plain tensors: BUILD sets the state of {_describe(obj)}", pos,
                               _FIX_CODE, _WHY_CODE)
        else:
            raise _Refused(f"holds more than plain tensors: the pickle opcode {name}, which torch does not write "
                           "for a state dict (never run here)", pos, _FIX_CODE, _WHY_CODE)


def _persistent(pid: Any, pos: int, storages: dict[str, _Storage]) -> _Storage:
    if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _Global)
            and isinstance(pid[2], str) and isinstance(pid[3], str) and _is_int(pid[4]) and pid[4] >= 0):
        raise _Refused("holds a persistent id that is not ('storage', torch.<X>Storage, key, location, numel)", pos,
                       _FIX_CODE, _WHY_CODE)
    cls: _Global = pid[1]
    if cls.module == "torch" and cls.name in STORAGE_DTYPES:
        dtype: str | None = STORAGE_DTYPES[cls.name]
    elif cls.module == "torch.storage" and cls.name == "UntypedStorage":
        dtype = None
    else:
        raise _Refused(f"names storage {pid[2]!r} of class {cls}, which is not a storage class this tool reads", pos,
                       "re-save the weights with safetensors.torch.save_file")
    storage = _Storage(pid[2], dtype, pid[4], pos)
    seen = storages.setdefault(storage.key, storage)
    if (seen.dtype, seen.numel) != (storage.dtype, storage.numel):
        raise _Refused(f"names storage {storage.key!r} twice with different types or sizes", pos, _FIX_COPY)
    return storage


def _int_tuple(v: Any) -> bool:
    return isinstance(v, tuple) and all(_is_int(x) for x in v)


def _empty_ordered_dict(v: Any) -> bool:
    return isinstance(v, _Dict) and not v.items


def _reduce(func: Any, args: Any, pos: int) -> Any:
    if not isinstance(func, _Global) or not isinstance(args, tuple):
        raise _Refused(f"holds more than plain tensors: a call of {_describe(func)}", pos, _FIX_CODE, _WHY_CODE)
    if func == _Global("collections", "OrderedDict"):
        if args != ():
            raise _Refused("holds an OrderedDict built from arguments, not the empty one torch writes", pos,
                           _FIX_CODE, _WHY_CODE)
        return _Dict(pos)
    if func.module == "torch._utils" and func.name in ("_rebuild_tensor_v2", "_rebuild_tensor_v3"):
        v3 = func.name.endswith("v3")
        if len(args) != (7 if v3 else 6):
            raise _Refused(f"calls {func} with {len(args)} arguments, not the {7 if v3 else 6} torch writes", pos,
                           _FIX_CODE, _WHY_CODE)
        storage, offset, size, stride, requires_grad, hooks = args[:6]
        if not (isinstance(storage, _Storage) and _is_int(offset) and _int_tuple(size) and _int_tuple(stride)
                and isinstance(requires_grad, bool) and _empty_ordered_dict(hooks)):
            raise _Refused(f"calls {func} with arguments other than (storage, offset, size, stride, requires_grad, "
                           "OrderedDict())", pos, _FIX_CODE, _WHY_CODE)
        if v3:
            dt = args[6]
            if not (isinstance(dt, _Global) and dt.module == "torch" and dt.name in TORCH_DTYPES):
                raise _Refused(f"calls {func} with dtype {_describe(dt)}, which this tool does not read", pos,
                               "re-save the weights with safetensors.torch.save_file")
            if storage.dtype is not None:
                raise _Refused(f"calls {func} on a typed storage ({storage.key!r}); torch writes an UntypedStorage",
                               pos, _FIX_COPY)
            dtype = TORCH_DTYPES[dt.name]
        else:
            if storage.dtype is None:
                raise _Refused(f"calls {func} on an UntypedStorage ({storage.key!r}) without a dtype", pos,
                               _FIX_COPY)
            dtype = storage.dtype
        return _Tensor(storage, dtype, offset, size, stride, pos)
    if func == _Global("torch._utils", "_rebuild_parameter"):
        if not (len(args) == 3 and isinstance(args[0], _Tensor) and isinstance(args[1], bool)
                and _empty_ordered_dict(args[2])):
            raise _Refused(f"calls {func} with arguments other than (tensor, requires_grad, OrderedDict())", pos,
                           _FIX_CODE, _WHY_CODE)
        return args[0]
    raise _Refused(f"holds more than plain tensors: a call of {func}", pos, _FIX_CODE, _WHY_CODE)


# ----- the zip archive --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _ZipEntry:
    name: str
    method: int
    flags: int
    size: int  # compressed size (== uncompressed when STORED)
    usize: int
    header: int  # offset of the local file header
    central: int  # offset of the central directory record (for messages)


def _read_at(fh: BinaryIO, offset: int, n: int) -> bytes:
    fh.seek(offset)
    return fh.read(n)


def _central_directory(fh: BinaryIO, size: int) -> dict[str, _ZipEntry]:
    tail_len = min(size, 22 + 65535)
    tail = _read_at(fh, size - tail_len, tail_len)
    at = tail.rfind(_EOCD)
    while at >= 0 and len(tail) - at < 22:
        at = tail.rfind(_EOCD, 0, at)
    if at < 0:
        raise _Refused("is a zip archive without its end-of-central-directory record: truncated", size, _FIX_COPY,
                       kind="truncated")
    eocd = size - tail_len + at
    _, _, _, _, count, cd_size, cd_offset, _ = struct.unpack("<4s4H2IH", tail[at:at + 22])
    if count == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
        loc = _read_at(fh, eocd - 20, 20) if eocd >= 20 else b""
        if len(loc) != 20 or not loc.startswith(_LOCATOR64):
            raise _Refused("zip: the end record needs a zip64 locator, which is missing", eocd, _FIX_COPY)
        (_, _, rec_off, _) = struct.unpack("<4sIQI", loc)
        rec = _read_at(fh, rec_off, 56) if rec_off < size else b""
        if len(rec) != 56 or not rec.startswith(_EOCD64):
            raise _Refused(f"zip: no zip64 end record at byte {rec_off}", min(rec_off, size), _FIX_COPY)
        _, _, _, _, _, _, _, count, cd_size, cd_offset = struct.unpack("<4sQ2H2I4Q", rec)
    if cd_size > DIRECTORY_LIMIT or cd_offset + cd_size > size:
        raise _Refused(f"zip: the central directory ({cd_size} bytes at byte {cd_offset}) does not fit in the "
                       f"{size}-byte file: truncated or corrupt", min(cd_offset, size), _FIX_COPY)
    raw = _read_at(fh, cd_offset, cd_size)
    entries: dict[str, _ZipEntry] = {}
    p = 0
    for _ in range(count):
        rec = raw[p:p + 46]
        if len(rec) != 46 or not rec.startswith(_CENTRAL):
            raise _Refused("zip: a central directory record is cut short or malformed", cd_offset + p, _FIX_COPY)
        (_, _, _, flags, method, _, _, _, csize, usize, nlen, xlen, clen, _, _, _, hoff) = struct.unpack(
            "<4s6H3I5H2I", rec)
        name_b = raw[p + 46:p + 46 + nlen]
        extra = raw[p + 46 + nlen:p + 46 + nlen + xlen]
        if len(name_b) != nlen or len(extra) != xlen:
            raise _Refused("zip: a central directory record runs past the directory", cd_offset + p, _FIX_COPY)
        if 0xFFFFFFFF in (csize, usize, hoff):
            usize, csize, hoff = _zip64_extra(extra, usize, csize, hoff, cd_offset + p)
        name = name_b.decode("utf-8", "replace")
        if name not in entries:
            entries[name] = _ZipEntry(name, method, flags, csize, usize, hoff, cd_offset + p)
        p += 46 + nlen + xlen + clen
    return entries


def _zip64_extra(extra: bytes, usize: int, csize: int, hoff: int, where: int) -> tuple[int, int, int]:
    q = 0
    while q + 4 <= len(extra):
        tag, n = struct.unpack("<2H", extra[q:q + 4])
        body = extra[q + 4:q + 4 + n]
        if tag == 1:
            values = [struct.unpack("<Q", body[i:i + 8])[0] for i in range(0, len(body) - 7, 8)]
            out = []
            for v in (usize, csize, hoff):
                if v == 0xFFFFFFFF:
                    if not values:
                        raise _Refused("zip: a zip64 extra field lacks a size or offset", where, _FIX_COPY)
                    v = values.pop(0)
                out.append(v)
            return out[0], out[1], out[2]
        q += 4 + n
    raise _Refused("zip: a record needs a zip64 extra field, which is missing", where, _FIX_COPY)


def _data_span(fh: BinaryIO, size: int, e: _ZipEntry) -> tuple[int, int]:
    """(offset of the entry's bytes in the file, their length), checked: stored, in bounds, headers agree."""
    if e.flags & 1:
        raise _Refused(f"zip entry {e.name!r} is encrypted", e.central, _FIX_COPY)
    if e.method != 0 or e.size != e.usize:
        raise _Refused(f"zip entry {e.name!r} is compressed (method {e.method}); torch.save stores tensor data "
                       "uncompressed, and only then can it be read in place", e.central,
                       "re-save the weights with torch.save or, better, safetensors.torch.save_file")
    local = _read_at(fh, e.header, 30) if e.header < size else b""
    if len(local) != 30 or not local.startswith(_LOCAL):
        raise _Refused(f"zip entry {e.name!r}: no local file header at byte {e.header}", min(e.header, size),
                       _FIX_COPY)
    method, = struct.unpack("<H", local[8:10])
    nlen, xlen = struct.unpack("<2H", local[26:30])
    if method != 0:
        raise _Refused(f"zip entry {e.name!r} is compressed (method {method}) in its local header", e.header,
                       "re-save the weights with torch.save or, better, safetensors.torch.save_file")
    if _read_at(fh, e.header + 30, nlen).decode("utf-8", "replace") != e.name:
        raise _Refused(f"zip entry {e.name!r}: its local header at byte {e.header} names another file",
                       e.header, _FIX_COPY)
    start = e.header + 30 + nlen + xlen
    if start + e.size > size:
        raise _Refused(f"zip entry {e.name!r} ends at byte {start + e.size} but the file is {size} bytes: "
                       "truncated", size, _FIX_COPY, kind="truncated")
    return start, e.size


# ----- the reader -------------------------------------------------------------------------------------------------

def _legacy(head: bytes) -> str | None:
    if head[:1] == b"\x80" and head[1:2] in {bytes([p]) for p in range(2, 6)}:
        return ("is a legacy (non-zip) torch pickle, written by torch before 1.6 or with "
                "_use_new_zipfile_serialization=False: it cannot be read without unpickling, which eagle3-checks "
                "never does")
    if len(head) >= 262 and head[257:262] == b"ustar":
        return ("is a tar-format torch checkpoint (torch before 0.4): it cannot be read without unpickling, which "
                "eagle3-checks never does")
    return None


def read_bin(path: Path, display: str) -> FileHeader:
    """The tensors of a ``torch.save`` zip checkpoint, as a :class:`FileHeader` like a safetensors file's."""
    result = FileHeader(file=display, path=path)

    def problem(message: str, kind: str, offset: int | None, fix: str | None = None,
                why: str | None = None) -> FileHeader:
        result.problems.append(Problem(file=display, message=message, kind=kind, offset=offset, fix=fix or _FIX_COPY,
                                       why=why or _WHY_BIN))
        return result

    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            result.size = size
            head = fh.read(512)
            legacy = _legacy(head)
            if legacy:
                return problem(legacy, "wrong-format", 0, "load it once where you trust it and re-save it with "
                                          "safetensors.torch.save_file (or torch.save, torch >= 1.6)")
            if not head.startswith(_LOCAL):
                what = ("a safetensors file" if len(head) >= 9 and head[8:9] == b"{" else
                        "empty" if not head else "neither a zip archive nor a pickle")
                return problem(f"is {what}, not a torch.save zip checkpoint", "wrong-format", 0,
                               "name safetensors weights model.safetensors; re-save others with safetensors")
            try:
                _read(fh, size, result)
            except _Refused as exc:
                return problem(exc.message, exc.kind, exc.pos, exc.fix, exc.why)
    except IsADirectoryError:
        return problem("is a directory, not a file", "directory", None)
    except OSError as exc:
        return problem(f"cannot be read: {exc.strerror or exc}", "unreadable", None)
    return result


def _read(fh: BinaryIO, size: int, result: FileHeader) -> None:
    entries = _central_directory(fh, size)
    pickles = sorted(n for n in entries if n.endswith("/data.pkl") and n.count("/") == 1)
    if len(pickles) != 1:
        found = f"{len(pickles)}: {', '.join(pickles[:3])}" if pickles else "none"
        raise _Refused(f"is a zip archive but not a torch.save checkpoint: it needs one <name>/data.pkl (found "
                       f"{found})", 0, "re-save the weights with safetensors.torch.save_file", kind="wrong-format")
    prefix = pickles[0][: -len("data.pkl")]
    pkl = entries[pickles[0]]
    if pkl.size > PICKLE_LIMIT:
        raise _Refused(f"{pkl.name} is {pkl.size} bytes, above the {PICKLE_LIMIT}-byte limit for a state dict's "
                       "pickle", pkl.central, "re-save the weights with safetensors.torch.save_file")
    pkl_start, pkl_len = _data_span(fh, size, pkl)
    order = entries.get(prefix + "byteorder")
    if order is not None:
        o_start, o_len = _data_span(fh, size, order)
        value = _read_at(fh, o_start, min(o_len, 16))
        if value != b"little":
            raise _Refused(f"{order.name} says {value[:16]!r}: only little-endian checkpoints are read", o_start,
                           "re-save the weights on a little-endian machine, with safetensors")
    data = _read_at(fh, pkl_start, pkl_len)
    try:
        tensors = walk_pickle(data)
    except _Refused as exc:
        raise _Refused(f"{pkl.name}: {exc.message}" if not exc.message.startswith("data.pkl") else
                       prefix + exc.message, None if exc.pos is None else pkl_start + exc.pos, exc.fix,
                       exc.why, exc.kind) from None
    result.parsed = True
    spans: dict[str, tuple[int, int]] = {}
    for name, t in tensors.items():
        at = pkl_start + t.pos
        entry_name = f"{prefix}data/{t.storage.key}"
        e = entries.get(entry_name)

        def bad(message: str, offset: int = at, fix: str = _FIX_COPY, key: str = name, kind: str = "corrupt") -> None:
            result.problems.append(Problem(file=result.file, message=message, kind=kind, key=key, offset=offset,
                                           fix=fix, why=_WHY_BIN))

        if e is None:
            bad(f"tensor {name!r} is in storage {t.storage.key!r}, but the archive has no {entry_name}")
            continue
        if entry_name not in spans:
            try:
                spans[entry_name] = _data_span(fh, size, e)
            except _Refused as exc:
                bad(exc.message, exc.pos if exc.pos is not None else at, exc.fix or _FIX_COPY, kind=exc.kind)
                spans[entry_name] = (-1, -1)
        start, length = spans[entry_name]
        if start < 0:
            continue
        itemsize = DTYPES[t.dtype][0]
        storage_bytes = t.storage.numel * (DTYPES[t.storage.dtype][0] if t.storage.dtype else 1)
        if storage_bytes != length:
            bad(f"tensor {name!r}: storage {t.storage.key!r} is declared as {storage_bytes} bytes but {entry_name} "
                f"holds {length}", start)
            continue
        if any(d < 0 for d in t.shape) or len(t.stride) != len(t.shape) or t.offset < 0:
            bad(f"tensor {name!r} has an invalid size {list(t.shape)}, stride {list(t.stride)} or offset "
                f"{t.offset}")
            continue
        numel = math.prod(t.shape)
        expected = row_major_strides(t.shape)
        if numel and any(d > 1 and s != x for d, s, x in zip(t.shape, t.stride, expected, strict=True)):
            bad(f"tensor {name!r} has stride {list(t.stride)} for size {list(t.shape)}: not contiguous row-major "
                f"(expected {expected}), which this tool does not read",
                fix="save contiguous tensors ({k: v.contiguous() for k, v in state.items()}), with safetensors")
            continue
        begin, nbytes = t.offset * itemsize, numel * itemsize
        if begin + nbytes > length:
            bad(f"tensor {name!r} (offset {t.offset}, size {list(t.shape)}, {t.dtype}) ends at byte "
                f"{begin + nbytes} of storage {t.storage.key!r}, which holds {length}", start)
            continue
        result.entries[name] = TensorEntry(name, t.dtype, tuple(t.shape), result.file, result.path, start + begin,
                                           nbytes)


# ----- recorded samples (torch.save of dicts or lists of dicts) --------------------------------------------------

@dataclass(frozen=True)
class RecordTensor:
    """One tensor of a record, its bytes copied out of the archive (contiguous, little-endian)."""

    dtype: str  # a safetensors dtype name
    shape: tuple[int, ...]
    data: bytes


class RecordsRefused(ValueError):
    """A ``torch.save`` file that is not a dict (or a list of dicts) of tensors; the message says why and where."""


def read_records(raw: bytes, display: str) -> list[dict[str, Any]]:
    """The records of a ``torch.save`` zip archive held in memory (a sample file, or a gzip one decompressed): each
    a dict of its keys to :class:`RecordTensor` or plain values. Nothing is unpickled. Raises
    :class:`RecordsRefused`."""
    import io

    fh = io.BytesIO(raw)
    size = len(raw)
    try:
        legacy = _legacy(raw[:512])
        if legacy:
            raise _Refused(legacy, 0)
        if not raw.startswith(_LOCAL):
            raise _Refused("is empty" if not raw else "is not a torch.save zip archive", 0)
        entries = _central_directory(fh, size)
        pickles = sorted(n for n in entries if n.endswith("/data.pkl") and n.count("/") == 1)
        if len(pickles) != 1:
            raise _Refused(f"is a zip archive but not a torch.save file: it needs one <name>/data.pkl (found "
                           f"{len(pickles)})", 0)
        prefix = pickles[0][: -len("data.pkl")]
        pkl = entries[pickles[0]]
        if pkl.size > PICKLE_LIMIT:
            raise _Refused(f"{pkl.name} is {pkl.size} bytes, above the {PICKLE_LIMIT}-byte limit", pkl.central)
        start, length = _data_span(fh, size, pkl)
        order = entries.get(prefix + "byteorder")
        if order is not None:
            o_start, o_len = _data_span(fh, size, order)
            if raw[o_start:o_start + min(o_len, 16)] != b"little":
                raise _Refused("is big-endian: only little-endian files are read", o_start)
        try:
            records = walk_records(raw[start:start + length])
        except _Refused as exc:
            raise _Refused(f"{pkl.name}: {exc.message}", None if exc.pos is None else start + exc.pos) from None
        out = []
        for record in records:
            out.append({key: _record_tensor(value, key, prefix, entries, fh, size)
                        if isinstance(value, _Tensor) else value for key, value in record.items()})
        return out
    except _Refused as exc:
        at = f" (byte {exc.pos})" if exc.pos is not None else ""
        raise RecordsRefused(f"{display}: {exc.message}{at}") from None


def _record_tensor(t: _Tensor, key: str, prefix: str, entries: dict[str, _ZipEntry], fh: BinaryIO,
                   size: int) -> RecordTensor:
    entry = entries.get(f"{prefix}data/{t.storage.key}")
    if entry is None:
        raise _Refused(f"tensor {key!r} is in storage {t.storage.key!r}, which the archive lacks: truncated?", None)
    start, length = _data_span(fh, size, entry)
    itemsize = DTYPES[t.dtype][0]
    numel = math.prod(t.shape)
    if any(d < 0 for d in t.shape) or len(t.stride) != len(t.shape) or t.offset < 0:
        raise _Refused(f"tensor {key!r} has an invalid size, stride or offset", t.pos)
    expected = row_major_strides(t.shape)
    if numel and any(d > 1 and s != x for d, s, x in zip(t.shape, t.stride, expected, strict=True)):
        raise _Refused(f"tensor {key!r} is not contiguous row-major (stride {list(t.stride)})", t.pos)
    begin, nbytes = t.offset * itemsize, numel * itemsize
    if begin + nbytes > length:
        raise _Refused(f"tensor {key!r} ends past its storage {t.storage.key!r}: truncated", start)
    fh.seek(start + begin)
    return RecordTensor(t.dtype, tuple(t.shape), fh.read(nbytes))
