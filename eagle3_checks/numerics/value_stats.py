"""One streaming pass over every tensor's bytes, in bounded memory, with bit-level tests.

Each floating tensor is read in chunks into one reused buffer (``readinto``: the page cache is not mapped into the
process, so the resident set stays at a few chunks whatever the checkpoint's size). Per chunk, the magnitude bits
(``x & ~sign``) go into a second reused buffer; their maximum gives, exactly and in one pass:

* the largest magnitude (floats order like their magnitude bits),
* whether any NaN or Inf exists (a magnitude at or above the exponent mask), counted and located only then,
* whether the tensor is all zeros (the largest magnitude is zero).

Mean, standard deviation and kurtosis come from an evenly strided sample (at most ``SAMPLE`` elements per
tensor), widened to float64. No full-tensor float copy is ever made, and torch is never imported.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from io import BufferedIOBase
from typing import TYPE_CHECKING, Any

from ..storage.safetensors import TensorEntry

CHUNK = 1 << 23  # bytes per read (8 MB)
SAMPLE = 1 << 16  # elements sampled per tensor for the moments

if TYPE_CHECKING:  # numpy is imported by the passes themselves: importing the scan check (every gate does) costs none
    import numpy as np

# dtype -> (raw unsigned type, magnitude mask, exponent mask (all ones = Inf/NaN), mantissa mask, has Inf)
_BITS = {
    "BF16": ("uint16", 0x7FFF, 0x7F80, 0x007F, True),
    "F16": ("uint16", 0x7FFF, 0x7C00, 0x03FF, True),
    "F32": ("uint32", 0x7FFFFFFF, 0x7F800000, 0x007FFFFF, True),
    "F64": ("uint64", 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000, 0x000FFFFFFFFFFFFF, True),
    "F8_E5M2": ("uint8", 0x7F, 0x7C, 0x03, True),
    "F8_E4M3": ("uint8", 0x7F, 0x7F, 0x00, False),  # e4m3fn: S.1111.111 is NaN, there is no Inf
}


def supported(dtype: str) -> bool:
    return dtype in _BITS


def to_float(bits: np.ndarray, dtype: str) -> np.ndarray:
    """Raw bits of ``dtype`` as float64 values (signalling NaNs become quiet NaNs, without a warning)."""
    import numpy as np

    with np.errstate(invalid="ignore"):
        return _to_float(bits, dtype)


def _to_float(bits: np.ndarray, dtype: str) -> np.ndarray:
    import numpy as np

    if dtype == "BF16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if dtype == "F16":
        return bits.view(np.float16).astype(np.float64)
    if dtype == "F32":
        return bits.view(np.float32).astype(np.float64)
    if dtype == "F64":
        return bits.view(np.float64).copy()
    if dtype == "F8_E5M2":  # the top byte of a float16
        return (bits.astype(np.uint16) << 8).view(np.float16).astype(np.float64)
    # F8_E4M3 (fn): 1 sign, 4 exponent (bias 7), 3 mantissa bits
    b = bits.astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp, man = (b >> 3) & 0xF, b & 0x7
    value = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1 + man / 8.0) * 2.0 ** (exp - 7))
    return np.where((b & 0x7F) == 0x7F, np.nan, sign * value)


@dataclass
class TensorStats:
    name: str
    dtype: str
    numel: int
    nan: int = 0
    inf: int = 0
    first_nonfinite: int | None = None  # flat index of the first NaN or Inf
    max_abs: float = 0.0
    mean: float = 0.0
    std: float = 0.0
    kurtosis: float = 0.0  # excess kurtosis of the sample (0 for a Gaussian, -1.2 for a uniform)
    constant: bool = False  # every sampled finite value equal
    sample: int = 0
    error: str | None = None  # the bytes could not be read

    @property
    def all_zero(self) -> bool:
        return self.error is None and self.numel > 0 and self.max_abs == 0.0 and self.nan == 0

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if v is not None}
        for k in ("max_abs", "mean", "std", "kurtosis"):
            if isinstance(out.get(k), float):
                out[k] = float(f"{out[k]:.6g}") if math.isfinite(out[k]) else str(out[k])
        return out


@dataclass
class ScanResult:
    stats: dict[str, TensorStats] = field(default_factory=dict)  # on-disk name -> stats
    bytes_read: int = 0


def sample_step(numel: int, shape: tuple[int, ...]) -> int:
    """The stride of the sample: about ``numel / SAMPLE``, sharing no factor with the row length, so that the
    sample walks across every column instead of the same few (4096 x 4096 with step 256 would see 16 columns)."""
    step = max(1, numel // SAMPLE)
    row = shape[-1] if shape else 1
    while step > 1 and math.gcd(step, row) != 1:
        step += 1
    return step


def scan_tensor(e: TensorEntry, buf: bytearray, mag: np.ndarray, opener: Callable[[Any], BufferedIOBase],
                tick: Callable[[int], None] | None = None) -> TensorStats:
    """Scan one tensor, reading through ``opener(path)`` (an open file); ``tick(nbytes)`` after each chunk."""
    import numpy as np

    raw_type, mag_mask, exp_mask, man_mask, has_inf = _BITS[e.dtype]
    st = TensorStats(e.name, e.dtype, e.numel)
    width = np.dtype(raw_type).itemsize
    step = sample_step(e.numel, e.shape)
    samples: list[np.ndarray] = []
    top = 0
    done = 0  # elements
    try:
        fh = opener(e.path)
        fh.seek(e.offset)
        while done < e.numel:
            want = min(len(buf) // width, e.numel - done)
            view = memoryview(buf)[: want * width]
            got = fh.readinto(view)
            if got != want * width:
                raise EOFError(f"{e.file} ends inside {e.name} (element {done + got // width} of {e.numel})")
            x = np.frombuffer(view, dtype=np.dtype(raw_type).newbyteorder("<"))
            m = mag[: want * width].view(raw_type)
            np.bitwise_and(x, mag_mask, out=m)
            chunk_top = int(m.max())
            if chunk_top >= exp_mask:  # some NaN or Inf in this chunk: count and locate them
                bad = m >= exp_mask
                nan = bad & ((m & man_mask) != 0) if has_inf else bad
                n_nan, n_bad = int(nan.sum()), int(bad.sum())
                st.nan += n_nan
                st.inf += n_bad - n_nan
                if st.first_nonfinite is None:
                    st.first_nonfinite = done + int(np.argmax(bad))
                finite_top = m[~bad]
                chunk_top = int(finite_top.max()) if finite_top.size else 0
            top = max(top, chunk_top)
            first = (-done) % step  # keep the sample strided across chunk boundaries
            samples.append(x[first::step].copy())
            done += want
            if tick:
                tick(want * width)
    except (OSError, EOFError) as exc:
        st.error = str(exc)
        return st
    st.max_abs = float(to_float(np.array([top], dtype=raw_type), e.dtype)[0])
    values = to_float(np.concatenate(samples), e.dtype) if samples else np.zeros(0)
    values = values[np.isfinite(values)]
    st.sample = int(values.size)
    if values.size:
        with np.errstate(over="ignore", invalid="ignore"):  # F64 near its limits: inf or nan moments, reported
            st.mean, st.std = float(values.mean()), float(values.std())
            st.constant = bool(values.min() == values.max())
            if st.std > 0:
                st.kurtosis = float((((values - st.mean) / st.std) ** 4).mean() - 3.0)
    return st


def scan(entries: list[TensorEntry], progress: Callable[[int, int], None] | None = None) -> ScanResult:
    """Scan every floating tensor of ``entries``, in file order. ``progress(done_bytes, total_bytes)`` is called
    after each chunk."""
    import numpy as np

    result = ScanResult()
    todo = [e for e in sorted(entries, key=lambda e: (str(e.path), e.offset)) if supported(e.dtype)]
    total = sum(e.nbytes for e in todo)
    buf = bytearray(CHUNK)
    mag = np.empty(CHUNK // 8 + 8, dtype=np.uint64)  # reused magnitude buffer, viewed as each dtype's width
    done = 0

    def tick(n: int) -> None:  # passed to scan_tensor only with a progress callback
        nonlocal done
        done += n
        if progress is not None:
            progress(done, total)

    with contextlib.ExitStack() as stack:
        handles: dict[Any, BufferedIOBase] = {}

        def opener(path: Any) -> BufferedIOBase:  # each file opened once (a header may list thousands of tensors)
            if path not in handles:
                handles[path] = stack.enter_context(open(path, "rb"))
            return handles[path]

        for e in todo:
            result.stats[e.name] = scan_tensor(e, buf, mag.view(np.uint8), opener, tick if progress else None)
            result.bytes_read += e.nbytes
    return result
