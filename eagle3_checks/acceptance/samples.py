"""Recorded target states, read in the three producers' formats and streamed one file at a time.

The format is detected from the folder (searched recursively):

* speculators 0.9.0: ``hs_{i}.safetensors`` (``speculators/data_generation/offline.py:45-46, 83``), with
  ``hidden_states`` [T, L, Ht] (the aux layers in capture order, then the last layer's output before the final norm)
  and ``token_ids`` int64 [T] (``speculators/train/data.py:309-332`` splits them: ``hidden_states[:, :-1]`` the aux
  states, ``hidden_states[:, -1]`` the verifier's last state). The FP8 variant stores ``hidden_states`` as
  ``float8_e4m3fn`` with per-token float32 ``hidden_states_scales`` [T, 1, 1]
  (``hs_connectors/fp8_hidden_states_connector.py:31-56``, hs-connectors 0.9.0), dequantised as
  ``dequantize_fp8_tensor`` does: ``fp8.to(bfloat16) * scale.to(bfloat16)`` (``hs_connectors/fp8_utils.py:54-61``).
  The loss mask lives in the prepared-data folder speculators trains from (``prepare_data``'s ``save_to_disk``: Arrow
  files with ``input_ids`` and ``loss_mask`` per row; row i pairs with ``hs_{i + start}``, ``train/data.py:199-200,
  313-332``), read with ``--loss-mask DIR`` (:class:`LossMasks`, with pyarrow); without it every position counts.
* SpecForge 0.2.0: ``rows_*/data_{i}.ckpt`` or ``.ckpt.gz`` (``specforge/runtime/data_plane/offline_reader.py:44``;
  gzip: ``specforge/runtime/data_plane/feature_store.py:238-239``), a ``torch.save`` dict of ``input_ids``,
  ``loss_mask``, ``hidden_state`` [1, T, Ht] (after the final norm) and ``aux_hidden_state`` [1, T, A*Ht]
  (``offline_reader.py:46``).
* TensorRT-LLM (``SaveHiddenStatesDecodingConfig``; ``tensorrt_llm/_torch/speculative/save_hidden_state.py`` at
  commits 3e906a0e and 17c59c36): ``<prefix>_<n>.pt``, a ``torch.save`` list of per-request dicts of ``input_ids``
  [T], ``hidden_state`` [T, Ht] (after the final norm) and ``aux_hidden_states`` (named ``hidden_state_features``
  at 17c59c36) [T, A*Ht]. No loss mask.

``.ckpt`` and ``.pt`` files are read with :func:`eagle3_checks.storage.torch_bin.read_records`: the zip directory and
the pickle's opcodes are walked, never unpickled; anything but tensors in a dict (or a list of dicts) is refused.
Every problem is a :class:`DataError` with a one-line message.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..fast_dataclass import dataclass
from ..numerics.ops import Tensor
from ..storage.safetensors import DTYPES, read_bytes, read_header
from ..storage.torch_bin import RecordsRefused, RecordTensor, read_records

SPECULATORS = "speculators"
SPECFORGE = "specforge"
TRTLLM = "tensorrt-llm"
PATTERNS = {
    SPECULATORS: re.compile(r"^hs_(\d+)\.safetensors$"),
    SPECFORGE: re.compile(r"^data_(\d+)\.ckpt(\.gz)?$"),
    TRTLLM: re.compile(r"^.+_(\d+)\.pt$"),
}
GZIP_LIMIT = 1 << 34  # bytes a .ckpt.gz may inflate to (16 GiB): a gzip bomb is refused, not decompressed whole


class DataError(Exception):
    """The recorded data cannot be evaluated; the message (one line) says which file and why."""


@dataclass(frozen=True)
class Expect:
    """What the drafter needs of the data: its aux count, the target's hidden size and vocabulary."""

    num_aux: int
    hidden: int
    vocab: int


@dataclass
class Sample:
    source: str  # the file (and the request's index in a list file)
    tokens: Any  # (T,) int64 torch tensor
    aux: Any  # (T, A*Ht) float32
    last: Any  # (T, Ht) float32, the target's last state
    last_normed: bool  # the last state is after the target's final norm (SpecForge, TensorRT-LLM)
    loss_mask: Any = None  # (T,) bool, or None: every position counts


def detect(folder: Path) -> tuple[str, list[Path]]:
    """The producer whose files the folder holds, and those files in index order. Raises DataError."""
    if not folder.is_dir():
        raise DataError(f"--data {folder}: " + ("not a directory" if folder.exists() else "no such directory"))
    found: dict[str, list[tuple[int, str, Path]]] = {}
    for path in folder.rglob("*"):
        for fmt, pattern in PATTERNS.items():
            m = pattern.match(path.name)
            if m:
                if path.is_dir():
                    break
                if not path.is_file():  # a FIFO, a socket, a device, a broken link: never skipped in silence
                    raise DataError(f"--data {folder}: {path.relative_to(folder)} is named as a sample but is not a "
                                    "regular file (" + ("a broken link" if path.is_symlink() and not path.exists()
                                                        else "a FIFO, socket or device") + ")")
                found.setdefault(fmt, []).append((int(m.group(1)), str(path), path))
                break
    if not found:
        raise DataError(f"--data {folder}: no recorded samples (looked for speculators' hs_<i>.safetensors, "
                        "SpecForge's data_<i>.ckpt[.gz] and TensorRT-LLM's <prefix>_<n>.pt)")
    if len(found) > 1:
        raise DataError(f"--data {folder}: holds files of more than one producer ({', '.join(sorted(found))}); "
                        "give one producer's folder")
    fmt, files = next(iter(found.items()))
    return fmt, [p for _, _, p in sorted(files)]


def samples(folder: Path, expect: Expect, masks: LossMasks | None = None) -> Iterator[Sample]:
    """Every recorded sample of the folder, one file read at a time; ``masks``: speculators' loss masks, by the
    index in each ``hs_{i}`` name. Raises DataError."""
    fmt, files = detect(folder)
    if masks is not None and fmt != SPECULATORS:
        raise DataError(f"--loss-mask {masks.folder}: only speculators keeps its loss masks apart from the states; "
                        f"--data {folder} holds {fmt} files, which carry their own (or none)")
    for path in files:
        shown = str(path.relative_to(folder))
        if fmt == SPECULATORS:
            sample = _speculators(path, shown, expect)
            if masks is not None:
                m = PATTERNS[SPECULATORS].match(path.name)
                assert m is not None
                sample.loss_mask = masks.mask(int(m.group(1)), sample.tokens, shown)
            yield sample
        else:
            yield from _pickled(path, shown, fmt, expect)


class LossMasks:
    """speculators' prepared-data folder (a ``datasets`` ``save_to_disk``): the ``loss_mask`` of row ``i - start``
    for ``hs_{i}``, its ``input_ids`` held to the sample's ``token_ids`` as speculators does
    (``train/data.py:313-321``). Read with pyarrow (the Arrow stream files ``state.json`` lists), one file in memory at
    a time. Raises DataError."""

    def __init__(self, folder: Path, start: int = 0) -> None:
        self.folder, self.start = folder, start
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise DataError(f"--loss-mask {folder}: reading a datasets folder needs pyarrow (pip install pyarrow; "
                            "speculators' own install has it)") from None
        try:
            state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
            self.files = [folder / f["filename"] for f in state["_data_files"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(f"--loss-mask {folder}: not a datasets save_to_disk folder (state.json: "
                            f"{type(exc).__name__})") from None
        for f in self.files:
            if f.parent != folder or not f.is_file():
                raise DataError(f"--loss-mask {folder}: state.json names {f.name!r}, not a file of the folder")
        self._rows: list[int] = []  # the first row of each file
        self._loaded: tuple[int, Any] | None = None
        total = 0
        for f in self.files:
            self._rows.append(total)
            total += self._table(f).num_rows
        self.rows = total

    def _table(self, path: Path) -> Any:
        import pyarrow as pa

        try:
            with pa.memory_map(str(path)) as source:
                table = pa.ipc.open_stream(source).read_all()
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"--loss-mask {self.folder}: {path.name}: not an Arrow stream ({exc})"[:300]) from None
        missing = [c for c in ("input_ids", "loss_mask") if c not in table.column_names]
        if missing:
            raise DataError(f"--loss-mask {self.folder}: {path.name} has no {' or '.join(missing)} column "
                            f"(columns: {', '.join(table.column_names)})")
        return table.select(["input_ids", "loss_mask"])

    def mask(self, index: int, tokens: Any, shown: str) -> Any:
        import torch

        row = index - self.start
        if not 0 <= row < self.rows:
            raise DataError(f"{shown}: --loss-mask {self.folder} has rows {self.start} to "
                            f"{self.start + self.rows - 1} for hs_<i>, not {index}")
        file = max(i for i, first in enumerate(self._rows) if first <= row)
        if self._loaded is None or self._loaded[0] != file:
            self._loaded = (file, self._table(self.files[file]))
        table = self._loaded[1]
        local = row - self._rows[file]
        ids = table.column("input_ids")[local].as_py()
        mask = table.column("loss_mask")[local].as_py()
        if ids != tokens.tolist():
            raise DataError(f"{shown}: its token_ids differ from row {row} of --loss-mask {self.folder} (speculators "
                            "skips such a sample; is --loss-mask-start right?)")
        if len(mask) != len(ids):
            raise DataError(f"{shown}: row {row} of --loss-mask {self.folder} has {len(mask)} mask values for "
                            f"{len(ids)} tokens")
        return torch.tensor([bool(v) for v in mask])


# ----- tensors ----------------------------------------------------------------------------------------------------

_TORCH_VIEW = {"BF16": ("int16", "bfloat16"), "F8_E4M3": ("uint8", "float8_e4m3fn"),
               "F8_E5M2": ("uint8", "float8_e5m2")}


def _tensor(dtype: str, shape: tuple[int, ...], data: bytes, where: str) -> Tensor:
    import torch

    if dtype not in DTYPES or dtype == "F8_E8M0":
        raise DataError(f"{where}: dtype {dtype} is not read")
    if len(data) != DTYPES[dtype][0] * _numel(shape):
        raise DataError(f"{where}: holds {len(data)} bytes for shape {list(shape)} of {dtype}: truncated")
    buf = bytearray(data)  # writable for torch.frombuffer
    if not buf:
        return torch.zeros(shape, dtype=torch.float32 if DTYPES[dtype][1] == "f" else torch.int64)
    if dtype in _TORCH_VIEW:
        raw, typ = _TORCH_VIEW[dtype]
        t = torch.frombuffer(buf, dtype=getattr(torch, raw)).view(getattr(torch, typ))
    else:
        t = torch.frombuffer(buf, dtype=getattr(torch, DTYPES[dtype][2] or "uint8"))
    return t.reshape(shape)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _float(t: Tensor) -> Tensor:
    import torch

    return t.to(torch.float32)


def _check(sample: Sample, expect: Expect) -> Sample:
    """Shapes, lengths and token ids against the drafter. Raises DataError naming the file and what disagrees."""
    where = sample.source
    tokens, aux, last = sample.tokens, sample.aux, sample.last
    if tokens.dim() != 1:
        raise DataError(f"{where}: the token ids have shape {list(tokens.shape)}, not [T]")
    if last.dim() != 2 or last.shape[1] != expect.hidden:
        raise DataError(f"{where}: hidden size {last.shape[-1]} in the last state, the drafter's target has "
                        f"{expect.hidden}: not this drafter's target")
    if aux.dim() != 2 or aux.shape[1] % expect.hidden:
        raise DataError(f"{where}: the aux states are {aux.shape[-1]} wide, not a multiple of the hidden size "
                        f"{expect.hidden}")
    if aux.shape[1] // expect.hidden != expect.num_aux:
        raise DataError(f"{where}: aux count {aux.shape[1] // expect.hidden}, the drafter's fc takes "
                        f"{expect.num_aux} aux states")
    lengths = {"token ids": tokens.shape[0], "aux states": aux.shape[0], "last state": last.shape[0]}
    if sample.loss_mask is not None:
        lengths["loss mask"] = sample.loss_mask.shape[0] if sample.loss_mask.dim() == 1 else -1
    if len(set(lengths.values())) > 1:
        raise DataError(f"{where}: lengths disagree: " + ", ".join(f"{k} {v}" for k, v in lengths.items()))
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= expect.vocab):
        bad = int(tokens.max()) if int(tokens.max()) >= expect.vocab else int(tokens.min())
        raise DataError(f"{where}: token id {bad} is outside the target vocabulary [0, {expect.vocab})")
    return sample


# ----- speculators ------------------------------------------------------------------------------------------------

def _speculators(path: Path, shown: str, expect: Expect) -> Sample:
    import torch

    header = read_header(path, shown)
    if header.problems:
        p = header.problems[0]
        raise DataError(f"{shown}: {p.message}" if not p.message.startswith(shown) else p.message)
    entries = header.entries
    for key in ("hidden_states", "token_ids"):
        if key not in entries:
            raise DataError(f"{shown}: no {key} (speculators writes hidden_states and token_ids)")
    for e in entries.values():
        if e.offset + e.nbytes > (header.size or 0):
            raise DataError(f"{shown}: {e.name} runs past the end of the file: truncated")

    def load(name: str) -> Tensor:
        e = entries[name]
        return _tensor(e.dtype, tuple(e.shape), read_bytes(e), f"{shown}: {name}")

    hs = load("hidden_states")
    tokens = load("token_ids").to(torch.int64)
    if hs.dim() != 3:
        raise DataError(f"{shown}: hidden_states has shape {list(hs.shape)}, not [T, layers, hidden]")
    if hs.shape[1] != expect.num_aux + 1:
        raise DataError(f"{shown}: layer count {hs.shape[1]} in hidden_states, the drafter needs {expect.num_aux} "
                        f"aux layers and the last: {expect.num_aux + 1}")
    if hs.dtype == torch.float8_e4m3fn:
        if "hidden_states_scales" not in entries:
            raise DataError(f"{shown}: float8 hidden_states without hidden_states_scales")
        scales = load("hidden_states_scales")
        if tuple(scales.shape) != (hs.shape[0], 1, 1):
            raise DataError(f"{shown}: hidden_states_scales has shape {list(scales.shape)}, not "
                            f"[{hs.shape[0]}, 1, 1]")
        hs = hs.to(torch.bfloat16) * scales.to(torch.bfloat16)  # hs_connectors/fp8_utils.py:54-61
    hs = _float(hs)
    sample = Sample(shown, tokens, hs[:, :-1].flatten(1) if hs.shape[0] else hs[:, :-1].reshape(0, -1), hs[:, -1],
                    last_normed=False)
    return _check(sample, expect)


# ----- SpecForge and TensorRT-LLM ---------------------------------------------------------------------------------

def _records(path: Path, shown: str) -> list[dict[str, Any]]:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                raw = fh.read(GZIP_LIMIT + 1)
            if len(raw) > GZIP_LIMIT:
                raise DataError(f"{shown}: inflates past {GZIP_LIMIT} bytes; refused")
        else:
            raw = path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DataError(f"{shown}: cannot be read: {exc}: truncated or not gzip") from None
    try:
        return read_records(raw, shown)
    except RecordsRefused as exc:
        raise DataError(str(exc)) from None


def _pickled(path: Path, shown: str, fmt: str, expect: Expect) -> Iterator[Sample]:
    import torch

    records = _records(path, shown)
    if fmt == SPECFORGE and len(records) != 1:
        raise DataError(f"{shown}: holds a list; SpecForge writes one dict per file")
    for i, record in enumerate(records):
        where = shown if fmt == SPECFORGE else f"{shown}[{i}]"

        def get(*names: str, required: bool = True, rec: dict[str, Any] = record, at: str = where) -> Tensor:
            for name in names:
                value = rec.get(name)
                if isinstance(value, RecordTensor):
                    return _tensor(value.dtype, value.shape, value.data, f"{at}: {name}")
                if value is not None:
                    raise DataError(f"{at}: {name} is not a tensor")
            if required:
                raise DataError(f"{at}: no {' or '.join(names)}")
            return None

        tokens = get("input_ids").to(torch.int64)
        last = _float(get("hidden_state"))
        if fmt == SPECFORGE:
            aux = _float(get("aux_hidden_state"))
            mask = get("loss_mask").flatten()
            if last.dim() == 3 and last.shape[0] == 1:
                last = last[0]
            if aux.dim() == 3 and aux.shape[0] == 1:
                aux = aux[0]
            tokens = tokens.flatten()
            sample = Sample(where, tokens, aux, last, last_normed=True, loss_mask=mask != 0)
        else:
            aux = _float(get("aux_hidden_states", "hidden_state_features"))
            sample = Sample(where, tokens.flatten(), aux, last, last_normed=True)
        yield _check(sample, expect)
