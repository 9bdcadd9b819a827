"""One streaming pass over every tensor's bytes, in bounded memory, with bit-level tests.

Each floating tensor is read in chunks, on a small pool of threads (``WORKERS``, fewer on fewer CPUs), each chunk
into its thread's reused buffer (positional reads: the page cache is not mapped into the process, so the resident set
stays at a few chunks whatever the checkpoint's size). Per chunk, the maximum of the raw bits as unsigned integers
(the largest negative magnitude, past the sign bit) and as signed ones (the largest positive) give, exactly, with no
float conversion and no second buffer:

* the largest magnitude (floats order like their magnitude bits),
* whether any NaN or Inf exists (a magnitude at or above the exponent mask), counted and located only then,
* whether the tensor is all zeros (the largest magnitude is zero).

numpy releases the GIL in its reductions and the reads do too, so the threads use as many cores. The chunks' findings
are combined in chunk order: the result is the same whatever the threads' timing or number.

Mean, standard deviation and kurtosis come from an evenly strided sample (at most ``SAMPLE`` elements per
tensor), widened to float64. No full-tensor float copy is ever made, and torch is never imported.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import field
from io import BufferedIOBase
from typing import TYPE_CHECKING, Any

from ..fast_dataclass import dataclass
from ..storage.safetensors import TensorEntry

CHUNK = 1 << 22  # bytes per read (4 MB: two threads' buffers stay in the last-level cache)
WORKERS = 2  # threads reading and testing chunks (fewer on fewer CPUs: see workers)
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


def workers() -> int:
    """The scan's threads: ``WORKERS``, or fewer where the process may run on fewer CPUs (``sched_getaffinity``).
    numpy releases the GIL in its reductions and the reads do too, so two threads keep two cores busy."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity outside Linux
        cpus = os.cpu_count() or 1
    return max(1, min(WORKERS, cpus))


class _Tensor:
    """One tensor being scanned: its statistics so far, its sample's pieces in chunk order, its chunks still due."""

    def __init__(self, e: TensorEntry, fh: BufferedIOBase | None, error: str | None, chunk: int) -> None:
        import numpy as np

        self.entry, self.fh = e, fh
        self.raw = np.dtype(_BITS[e.dtype][0]).newbyteorder("<")
        self.stats = TensorStats(e.name, e.dtype, e.numel, error=error)
        self.step = sample_step(e.numel, e.shape)
        self.per_chunk = max(1, chunk // self.raw.itemsize)  # elements per chunk
        self.left = 0 if error else -(-e.numel // self.per_chunk)  # chunks not yet combined
        self.top = 0  # the largest finite magnitude's bits
        self.samples: list[np.ndarray] = []


@dataclass
class _Chunk:
    """``count`` elements of one tensor from element ``start``, and what was found in them."""

    tensor: _Tensor
    start: int
    count: int
    top: int = 0  # the largest finite magnitude's bits
    nan: int = 0
    bad: int = 0  # NaN and Inf
    first: int | None = None  # the tensor's flat index of the chunk's first NaN or Inf
    sample: np.ndarray | None = None
    error: str | None = None


def _read_at(fh: BufferedIOBase, view: memoryview, offset: int) -> int:
    """Fill ``view`` from byte ``offset`` of ``fh``; the bytes read (fewer only at the end of the file). Positional
    (``preadv``): threads share one handle."""
    if not hasattr(os, "preadv"):  # one thread only (see scan)
        fh.seek(offset)
        return fh.readinto(view) or 0
    got = 0
    while got < len(view):
        n = os.preadv(fh.fileno(), [view[got:]], offset + got)
        if n == 0:
            break
        got += n
    return got


def _scan_chunk(c: _Chunk, buf: bytearray) -> None:
    """Read one chunk into ``buf`` and test its bits: the largest magnitude from the maxima of the raw bits as
    unsigned and as signed integers (no float conversion, no copy); NaN and Inf counted and located only in a chunk
    whose largest magnitude is at or above the exponent mask."""
    import numpy as np

    t = c.tensor
    e = t.entry
    _, mag_mask, exp_mask, _, has_inf = _BITS[e.dtype]
    width = t.raw.itemsize
    view = memoryview(buf)[: c.count * width]
    assert t.fh is not None  # a tensor whose file did not open has no chunks
    try:
        got = _read_at(t.fh, view, e.offset + c.start * width)
    except OSError as exc:
        c.error = str(exc)
        return
    if got != len(view):
        c.error = f"{e.file} ends inside {e.name} (element {c.start + got // width} of {e.numel})"
        return
    x = np.frombuffer(view, dtype=t.raw)
    top = int(x.max())
    if top > mag_mask:  # some value is negative: the largest negative magnitude, or the largest positive value
        top = max(top - mag_mask - 1, int(x.view(f"<i{width}").max()))
    if top >= exp_mask:  # some NaN or Inf in this chunk: count and locate them
        m = np.bitwise_and(x, mag_mask)
        bad = m >= exp_mask
        c.bad = int(np.count_nonzero(bad))
        c.nan = int(np.count_nonzero(m > exp_mask)) if has_inf else c.bad  # NaN: all-ones exponent, mantissa not 0
        c.first = c.start + int(np.argmax(bad))
        np.putmask(m, bad, 0)
        top = int(m.max())
    c.top = top
    c.sample = x[(-c.start) % t.step::t.step].copy()  # the sample strided across chunk boundaries


def _chunks(todo: list[TensorEntry], opener: Callable[[Any], BufferedIOBase], chunk: int,
            tensors: deque[_Tensor]) -> Iterator[list[_Chunk]]:
    """The work, in file order: every tensor cut into chunks of at most ``chunk`` bytes, consecutive chunks grouped
    into tasks of at most ``chunk`` bytes (a header may list thousands of tiny tensors). Each tensor is appended to
    ``tensors`` when its chunks are planned."""
    task: list[_Chunk] = []
    size = 0
    for e in todo:
        try:
            fh, error = opener(e.path), None
        except OSError as exc:
            fh, error = None, str(exc)
        t = _Tensor(e, fh, error, chunk)
        tensors.append(t)
        width = t.raw.itemsize
        for start in range(0, e.numel if fh else 0, t.per_chunk):
            c = _Chunk(t, start, min(t.per_chunk, e.numel - start))
            if task and size + c.count * width > chunk:
                yield task
                task, size = [], 0
            task.append(c)
            size += c.count * width
    if task:
        yield task


def _combine(c: _Chunk, tick: Callable[[int], None] | None) -> None:
    """Add one chunk's findings to its tensor's; chunks come in order, so the first error and the first NaN or Inf
    are the ones a single pass would meet first, and the sample is in element order."""
    t = c.tensor
    t.left -= 1
    st = t.stats
    if st.error:  # a single pass stops at a tensor's first error
        return
    if c.error:
        st.error = c.error
        return
    st.nan += c.nan
    st.inf += c.bad - c.nan
    if st.first_nonfinite is None:
        st.first_nonfinite = c.first
    t.top = max(t.top, c.top)
    assert c.sample is not None
    t.samples.append(c.sample)
    if tick:
        tick(c.count * t.raw.itemsize)


def _finish(t: _Tensor) -> TensorStats:
    """The tensor's statistics from its combined chunks: the largest magnitude, and the moments of the sample."""
    import numpy as np

    st = t.stats
    if st.error:
        return st
    st.max_abs = float(to_float(np.array([t.top], dtype=t.raw), st.dtype)[0])
    values = to_float(np.concatenate(t.samples), st.dtype) if t.samples else np.zeros(0)
    values = values[np.isfinite(values)]
    st.sample = int(values.size)
    if values.size:
        with np.errstate(over="ignore", invalid="ignore"):  # F64 near its limits: inf or nan moments, reported
            st.mean, st.std = float(values.mean()), float(values.std())
            st.constant = bool(values.min() == values.max())
            if st.std > 0:
                z = (values - st.mean) / st.std
                z *= z  # squared twice: a float power (** 4) costs more than the rest of the statistics together
                st.kurtosis = float((z * z).mean() - 3.0)
    return st


def scan(entries: list[TensorEntry], progress: Callable[[int, int], None] | None = None,
         threads: int | None = None) -> ScanResult:
    """Scan every floating tensor of ``entries``, in file order, on ``threads`` threads (default :func:`workers`).
    ``progress(done_bytes, total_bytes)`` is called after each chunk.

    Chunks are read and tested on a small pool of threads, each with one reused buffer, at most two tasks per
    thread ahead; their findings are combined in chunk order, so the result is the same whatever the threads'
    timing or number."""
    result = ScanResult()
    todo = [e for e in sorted(entries, key=lambda e: (str(e.path), e.offset)) if supported(e.dtype)]
    total = sum(e.nbytes for e in todo)
    chunk = CHUNK
    n = (threads or workers()) if hasattr(os, "preadv") else 1  # threads need positional reads
    done = 0

    def tick(nbytes: int) -> None:  # passed to _combine only with a progress callback
        nonlocal done
        done += nbytes
        if progress is not None:
            progress(done, total)

    local = threading.local()

    def run(task: list[_Chunk]) -> list[_Chunk]:
        buf = getattr(local, "buf", None)
        if buf is None:
            buf = local.buf = bytearray(chunk)
        for c in task:
            _scan_chunk(c, buf)
        return task

    tensors: deque[_Tensor] = deque()

    def take(task: list[_Chunk]) -> None:  # combine one task's chunks, and finish every tensor whose chunks are in
        for c in task:
            _combine(c, tick if progress else None)
        while tensors and tensors[0].left == 0:
            t = tensors.popleft()
            result.stats[t.entry.name] = _finish(t)
            result.bytes_read += t.entry.nbytes

    with contextlib.ExitStack() as files:
        handles: dict[Any, BufferedIOBase] = {}

        def opener(path: Any) -> BufferedIOBase:  # each file opened once (a header may list thousands of tensors)
            if path not in handles:
                handles[path] = files.enter_context(open(path, "rb"))
            return handles[path]

        tasks = _chunks(todo, opener, chunk, tensors)
        if n == 1:
            for task in tasks:
                take(run(task))
        else:
            with ThreadPoolExecutor(n, thread_name_prefix="eagle3-scan") as pool:  # ends before the files close
                ahead: deque[Future[list[_Chunk]]] = deque()
                for task in tasks:
                    ahead.append(pool.submit(run, task))
                    if len(ahead) > 2 * n:
                        take(ahead.popleft().result())
                while ahead:
                    take(ahead.popleft().result())
        take([])  # the tensors with no chunks left at the end (no elements, or a file that did not open)
    return result
