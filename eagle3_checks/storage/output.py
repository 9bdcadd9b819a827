"""Writing a checkpoint folder whole or not at all: what ``convert`` and ``fix`` share.

The new folder is written as a temporary sibling of DST (``.NAME.eagle3-tmp-PID``), verified, then moved into place
by one rename (or an atomic exchange with the folder it replaces, where Linux's renameat2 allows); a killed run's
temporaries are removed by the next run once their process is gone. SRC is never written to, and DST is checked
first: never SRC, inside it, holding it, a symlink, the current directory, or (with --force) a folder that is not a
drafter checkpoint.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import UsageError
from .folder import real_path

TMP_TAG = ".eagle3-tmp-"
OLD_TAG = ".eagle3-old-"


def temporary_sibling(dst: Path) -> Path:
    """Where this process writes DST's new contents before they are moved into place."""
    return dst.parent / f".{dst.name}{TMP_TAG}{os.getpid()}"


def _stale(dst: Path) -> list[Path]:
    return [p for p in dst.parent.glob(f".{dst.name}{TMP_TAG}*") if p.is_dir()] + \
        [p for p in dst.parent.glob(f".{dst.name}{OLD_TAG}*") if p.is_dir()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(dst: Path) -> list[Path]:
    """Temporary siblings left by a killed run (their process is gone)."""
    removed = []
    for p in _stale(dst):
        try:
            pid = int(p.name.rsplit("-", 1)[1])
        except ValueError:
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE). False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = renameat2(at_fdcwd, os.fsencode(str(a)), at_fdcwd, os.fsencode(str(b)), rename_exchange)
    return rc == 0


class Interrupted(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def signals_raise() -> Iterator[None]:
    """SIGINT and SIGTERM raise inside the conversion, so that its cleanup runs."""
    def handler(signum, frame):
        raise Interrupted(signum)

    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for s in old:
            signal.signal(s, handler)
    except ValueError:  # not the main thread: no handlers, cleanup still runs on exceptions
        old = {}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def check_paths(src: Path, dst: Path, force: bool) -> None:
    s, d = real_path(src, "SRC"), real_path(dst, "DST")
    if not os.path.isdir(s):
        raise UsageError(f"SRC {src}: " + ("not a directory" if os.path.exists(s) else "no such file or directory"))
    if s == d:
        raise UsageError(f"DST {dst} is SRC: the source is never modified; write somewhere else")
    if s in d.parents:
        raise UsageError(f"DST {dst} is inside SRC {src}: write the converted drafter outside the source")
    if d in s.parents:
        raise UsageError(f"DST {dst} contains SRC {src}: replacing it would delete the source")
    if dst.is_symlink():
        raise UsageError(f"DST {dst} is a symlink; name the folder itself (it is replaced by a rename)")
    try:
        cwd = real_path(os.getcwd(), "the current directory")
    except OSError:  # the current directory was removed: nothing to protect there
        cwd = None
    if cwd is not None and (d == cwd or d in cwd.parents):
        raise UsageError(f"DST {dst} is the current directory or holds it; name a folder beside it")
    if dst.parent.exists() and not dst.parent.is_dir():
        raise UsageError(f"DST's parent {dst.parent} is not a directory")
    if dst.exists() and not force:
        raise UsageError(f"DST {dst} exists; pass --force to replace it (atomically, after verification)")
    if dst.exists() and not dst.is_dir():
        raise UsageError(f"DST {dst} exists and is not a directory")
    if dst.exists():
        _check_replaceable(src, s, dst, d)
    try:  # as `cp -r` and `mkdir -p` users expect: the folders above DST are made
        dst.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"DST's parent {dst.parent} cannot be made: {exc.strerror or exc}") from None


def _check_replaceable(src: Path, s: Path, dst: Path, d: Path) -> None:
    """--force replaces DST wholesale: only a drafter checkpoint folder, and never one that holds SRC's files
    through symlinks (a Hugging Face cache: snapshots/REV/* link into blobs/)."""
    try:
        linked = [n for n in os.listdir(s) if real_path(s / n, "SRC") == d or d in real_path(s / n, "SRC").parents]
        entries = sorted(os.listdir(d))
    except OSError as exc:
        raise UsageError(f"DST {dst}: cannot be listed: {exc.strerror or exc}") from exc
    if linked:
        raise UsageError(f"DST {dst} holds SRC's files ({src}/{linked[0]} resolves into it); replacing it would "
                         "delete the source")
    folders = [n for n in entries if (d / n).is_dir()]
    if folders or not any(n == "config.json" or n.endswith(".safetensors") for n in entries):
        what = f"the folder(s) {', '.join(folders[:3])}" if folders else "no config.json or safetensors file"
        raise UsageError(f"DST {dst} does not look like a drafter checkpoint (it holds {what}); --force replaces "
                         "only a checkpoint folder: choose another DST, or remove this one yourself")


def move_into_place(tmp: Path, dst: Path) -> None:
    if not dst.exists():
        os.rename(tmp, dst)
        return
    if _exchange(tmp, dst):  # DST is the new checkpoint at once; tmp now holds the old one
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = dst.parent / f".{dst.name}{OLD_TAG}{os.getpid()}"
    os.rename(dst, old)  # without renameat2: a moment with no DST, between two renames
    os.rename(tmp, dst)
    shutil.rmtree(old, ignore_errors=True)


def copy_file(src: Path, dst: Path, chunk: int = 1 << 30) -> None:
    """Copy ``src`` to ``dst`` byte for byte, holes kept: only the extents the filesystem reports as data
    (SEEK_DATA / SEEK_HOLE) are copied, in the kernel (copy_file_range) where it can, the rest is left a hole of the
    same length, so a sparse file (a benchmark's Kimi-sized drafter: a real header, zero-filled data) is copied in
    the time its data takes. Where the filesystem cannot say, the whole file is data."""
    size = src.stat().st_size
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        fd = fi.fileno()
        pos = 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
                end = os.lseek(fd, start, os.SEEK_HOLE)
            except OSError as exc:  # ENXIO: no data after pos; EINVAL: the filesystem cannot say
                if exc.errno == errno.ENXIO:
                    break
                start, end = pos, size
            copy_range(fi, fo, start, start, end - start, chunk)
            pos = end
        fo.truncate(size)


def copy_range(fi, fo, src_offset: int, dst_offset: int, length: int, chunk: int = 1 << 30) -> None:
    """Copy ``length`` bytes of the open file ``fi`` from ``src_offset`` to the open file ``fo`` at ``dst_offset``,
    in the kernel (copy_file_range) where it can, else through a bounded buffer. Neither file's position is used:
    ``fo`` is flushed first, and a caller that writes on at its position seeks past the range itself."""
    fo.flush()
    done = 0
    kernel = hasattr(os, "copy_file_range")
    while done < length:
        n = 0
        if kernel:
            try:
                n = os.copy_file_range(fi.fileno(), fo.fileno(), min(chunk, length - done), src_offset + done,
                                       dst_offset + done)
            except OSError:  # another filesystem for each file, or none that supports it: through a buffer
                kernel = False
                continue
        else:
            fi.seek(src_offset + done)
            data = fi.read(min(1 << 24, length - done))
            fo.seek(dst_offset + done)
            fo.write(data)
            fo.flush()
            n = len(data)
        if n == 0:
            raise EOFError(f"{fi.name}: ended before byte {src_offset + length}")
        done += n
