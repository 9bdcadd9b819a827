"""Checkpoints where people keep them: the Hugging Face Hub (``hf://ORG/NAME[@REVISION][/SUBFOLDER]``) and its
cache (a ``models--ORG--NAME`` folder). The only module that talks to the Hub; ``huggingface_hub`` (the ``hub``
extra) is imported only when a checkpoint is named so.

At the header level a Hub checkpoint costs config.json, the index and each safetensors header, never a weight:
config.json and the index are small files fetched into the Hugging Face cache the usual way
(``hf_hub_download``: ``HF_HUB_CACHE``, ``HF_HOME``); a header is two HTTP range reads of its file (the 8-byte
length, then the header), and the two small vocabulary tensors (``d2t``, ``t2d``) one each, when a check asks. What
was read by range is kept in the assets cache huggingface_hub provides to libraries (``HF_ASSETS_CACHE``, under
``HF_HOME``), keyed by the commit, so a second run reads it from disk (naming a commit, ``@<sha>``, makes no
request at all; a branch costs the one metadata request that resolves it). The scan and forward levels need the
weights: with ``download=True`` they are downloaded into the Hugging Face cache (huggingface_hub's progress bars)
and the snapshot folder is gated like any directory; without it those levels are skipped with a note saying so.
A weight file the cache already holds whole (``hf download``, an earlier ``--download``) is read from disk, never by
range; offline, a cached ``model.safetensors`` with no cached index is a single-file repository.

``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE`` are huggingface_hub's own. A missing repository, a gated one,
no network, a missing file, or offline with nothing cached is a :class:`~eagle3_checks.errors.UsageError` (exit 2)
of one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import INSTALL, UsageError
from ..fast_dataclass import dataclass
from .folder import (
    BESIDE_CONFIGS,
    BIN,
    BIN_INDEX,
    CONFIG,
    INDEX,
    SINGLE,
    CheckpointFiles,
    build,
    locate,
    read_folder,
)
from .safetensors import FileHeader, TensorEntry, read_header

PREFIX = "hf://"
LIBRARY = "eagle3-checks"
INSTALL_HINT = INSTALL["hub"]
TIMEOUT = 30.0  # seconds per range read
_COMMIT = re.compile(r"[0-9a-f]{40}")


# huggingface_hub's repo id rule (validate_repo_id): "name" or "namespace/name", of letters, digits, "-", "_", ".".
REPO_ID = re.compile(r"^(?:[\w\-.]{1,96}/)?[\w\-.]{1,96}$")


def is_repo_id(name: Any) -> bool:
    """Whether ``name`` can be a Hub repository id (``org/model``; not ``.``, ``..`` or a path)."""
    return isinstance(name, str) and bool(REPO_ID.match(name)) and all(part.strip(".") for part in name.split("/"))


def is_hub(spec: Any) -> bool:
    """Whether ``spec`` names a Hub checkpoint (``hf://...``)."""
    return isinstance(spec, str) and spec.startswith(PREFIX)


def _hf() -> Any:
    try:
        import huggingface_hub
    except ImportError as exc:
        raise UsageError(f"hf:// checkpoints need huggingface_hub, which is not installed: {INSTALL_HINT}") from exc
    return huggingface_hub


@dataclass(frozen=True)
class HubRef:
    repo_id: str
    revision: str | None = None  # None: main
    subfolder: str = ""

    def __str__(self) -> str:
        return (f"{PREFIX}{self.repo_id}" + (f"@{self.revision}" if self.revision else "")
                + (f"/{self.subfolder}" if self.subfolder else ""))


def parse(spec: str, revision: str | None = None, what: str = "") -> HubRef:
    """``hf://ORG/NAME[@REVISION][/SUBFOLDER]`` (huggingface_hub's own URI grammar); ``revision`` (``--revision``)
    applies when the spec names none. Raises UsageError."""
    _hf()
    from huggingface_hub.errors import HfUriError
    from huggingface_hub.utils import parse_hf_uri

    lead = f"{what} " if what else ""
    try:
        uri = parse_hf_uri(spec)
    except HfUriError as exc:
        raise UsageError(f"{lead}{spec}: {exc.msg} (write hf://ORG/NAME or hf://ORG/NAME@REVISION)") from None
    if uri.type != "model":
        raise UsageError(f"{lead}{spec}: a {uri.type} repository; drafters and targets are model repositories "
                         "(hf://ORG/NAME)")
    if revision and uri.revision and revision != uri.revision:
        raise UsageError(f"{lead}{spec}: names revision {uri.revision!r} and --revision says {revision!r}; give one")
    return HubRef(uri.id, uri.revision or revision or None, uri.path_in_repo.strip("/"))


# ----- the Hugging Face cache folder of a repository ----------------------------------------------------------------

def cache_snapshot(path: str | os.PathLike, revision: str | None = None) -> Path | None:
    """The snapshot folder a Hugging Face cache repository folder (``models--ORG--NAME``, holding ``snapshots/``)
    stands for at ``revision`` (a branch or tag through ``refs/``, or a commit; default ``main``), or None when
    ``path`` is no such folder. Raises UsageError when it is one but holds no such revision."""
    p = Path(path)
    try:
        if not (p.name.startswith("models--") and (p / "snapshots").is_dir()):
            return None
        snapshots = sorted(s.name for s in (p / "snapshots").iterdir())
    except (OSError, ValueError):
        return None
    rev = revision or "main"
    if _COMMIT.fullmatch(rev):
        commit = rev
    else:
        ref = p / "refs" / rev
        try:
            commit = ref.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            refs = sorted(r.relative_to(p / "refs").as_posix() for r in (p / "refs").rglob("*") if r.is_file()) \
                if (p / "refs").is_dir() else []
            raise UsageError(f"{path}: a Hugging Face cache folder with no refs/{rev} (refs: "
                             f"{', '.join(refs) or 'none'}; snapshots: {', '.join(snapshots) or 'none'}); pass "
                             "--revision with one of them") from None
    snap = p / "snapshots" / commit
    if not snap.is_dir():
        raise UsageError(f"{path}: revision {rev} is commit {commit}, which has no folder under snapshots/ "
                         f"(snapshots: {', '.join(snapshots) or 'none'})")
    return snap


def locate_any(spec: str | os.PathLike, revision: str | None = None, what: str = "") -> None:
    """Raise UsageError when ``spec`` cannot name a checkpoint, reading nothing (no request for ``hf://``)."""
    if is_hub(spec):
        parse(str(spec), revision, what)
        return
    snap = cache_snapshot(spec, revision)
    locate(snap if snap is not None else spec)


def read_any(spec: str | os.PathLike, *, revision: str | None = None, download: bool = False,
             what: str = "") -> CheckpointFiles:
    """A checkpoint named any way the commands accept: a directory, a Hugging Face cache repository folder, or
    ``hf://ORG/NAME[@REVISION]``. Raises UsageError."""
    if is_hub(spec):
        return read_hub(str(spec), revision=revision, download=download, what=what)
    snap = cache_snapshot(spec, revision)
    if snap is None:
        return read_folder(spec)
    ckpt = read_folder(snap)
    ckpt.display = str(spec)
    if not ckpt.files:  # what a header-level run of hf://ORG/NAME leaves in the cache: config.json and the index
        repo_id = Path(spec).name[len("models--"):].replace("--", "/")
        raise UsageError(f"{spec}: snapshot {snap.name} holds no weight file (a header-level check of hf://{repo_id} "
                         f"keeps only config.json and the index here): gate hf://{repo_id}@{snap.name} instead, with "
                         "--download for the scan and forward levels")
    return ckpt


def local_dir(spec: str | os.PathLike, *, revision: str | None = None, download: bool = False, what: str = "",
              needs: str = "this command reads the weights") -> str:
    """A folder holding the checkpoint's files, for commands that copy or map the weights (convert, fix,
    forward): a Hub checkpoint downloaded into the cache (only with ``download``), a cache folder's snapshot."""
    if is_hub(spec):
        ref = parse(str(spec), revision, what)
        if not download:
            raise UsageError(f"{(what + ' ') if what else ''}{spec}: {needs}, which are on the Hub: pass --download "
                             "to fetch them into the Hugging Face cache")
        return str(HubRepo(ref).download())
    snap = cache_snapshot(spec, revision)
    return str(snap) if snap is not None else str(spec)


# ----- the Hub ---------------------------------------------------------------------------------------------------

class HubRepo:
    """One repository at one revision: small files through the Hugging Face cache, byte ranges of large ones."""

    def __init__(self, ref: HubRef) -> None:
        hf = _hf()
        self.ref = ref
        self.endpoint: str = hf.constants.ENDPOINT
        # read once, here, and passed on explicitly: every call below uses the same endpoint and cache folders
        self.cache_dir = Path(hf.constants.HF_HUB_CACHE)
        self.assets_dir = Path(hf.constants.HF_ASSETS_CACHE)
        self.offline: bool = hf.constants.is_offline_mode()
        from huggingface_hub.file_download import repo_folder_name

        self.folder = self.cache_dir / repo_folder_name(repo_id=ref.repo_id, repo_type="model")
        self.commit: str | None = ref.revision if ref.revision and _COMMIT.fullmatch(ref.revision) else None
        if self.offline and self.commit is None:  # offline: the revision the cache last resolved
            self.commit = self._cached_ref()

    # names and places
    def name(self, filename: str) -> str:
        return f"{self.ref.subfolder}/{filename}" if self.ref.subfolder else filename

    @property
    def revision(self) -> str:
        return self.commit or self.ref.revision or "main"

    @property
    def snapshot(self) -> Path:
        root = self.folder / "snapshots" / (self.commit or "unresolved")
        return root / self.ref.subfolder if self.ref.subfolder else root

    def _assets(self, kind: str) -> Path:
        from huggingface_hub import cached_assets_path

        return cached_assets_path(LIBRARY, namespace=self.folder.name, subfolder=f"{kind}/{self.commit}",
                                  assets_dir=self.assets_dir)

    # errors
    @contextlib.contextmanager
    def _errors(self, filename: str) -> Iterator[None]:
        """Every way the Hub or the network fails, as one line (exit 2)."""
        import httpx2
        from huggingface_hub import errors as e

        where = f"{self.ref}: {self.name(filename)}"
        try:
            yield
        except e.GatedRepoError as exc:
            code = exc.response.status_code if exc.response is not None else 401
            raise UsageError(f"{self.ref}: a gated repository ({code}): request access on its Hub page, then set "
                             "HF_TOKEN to a token of an account that has it") from None
        except e.RepositoryNotFoundError:
            raise UsageError(f"{self.ref}: no such repository on {self.endpoint} (or a private one: set HF_TOKEN to "
                             "a token with access)") from None
        except e.RevisionNotFoundError:
            raise UsageError(f"{self.ref}: no revision {self.revision!r} in {self.ref.repo_id} (404)") from None
        except e.RemoteEntryNotFoundError:
            raise UsageError(f"{where}: no such file at revision {self.revision} (404)") from None
        except (e.OfflineModeIsEnabled, e.LocalEntryNotFoundError) as exc:
            if self.offline:
                raise UsageError(f"{where}: HF_HUB_OFFLINE is set and it is not in the Hugging Face cache "
                                 f"({self.cache_dir}); run once online first") from None
            cause = exc.__cause__ or exc.__context__
            raise UsageError(f"{where}: cannot reach {self.endpoint} ({_short(cause or exc)}) and it is not in the "
                             f"Hugging Face cache ({self.cache_dir})") from None
        except e.HfHubHTTPError as exc:
            code = exc.response.status_code if exc.response is not None else "?"
            if code in (401, 403):
                raise UsageError(f"{self.ref}: access refused ({code}): set HF_TOKEN to a token with access to "
                                 f"{self.ref.repo_id}") from None
            raise UsageError(f"{where}: {self.endpoint} answered {code}") from None
        except (httpx2.TransportError, ConnectionError, TimeoutError) as exc:
            raise UsageError(f"{where}: cannot reach {self.endpoint} ({_short(exc)})") from None

    def resolve(self) -> None:
        """Pin the revision to its commit: one HEAD request of config.json (its X-Repo-Commit), which, unlike the
        client's download, does not retry for half a minute when the network is down. Offline, or with the network
        down, the commit the cache last resolved the revision to (refs/), as huggingface_hub does."""
        from huggingface_hub import errors as e
        from huggingface_hub import get_hf_file_metadata

        if self.commit is not None:
            return
        import httpx2

        with self._errors(CONFIG):
            try:
                commit = get_hf_file_metadata(self._url(CONFIG), endpoint=self.endpoint).commit_hash
            except e.RemoteEntryNotFoundError as exc:  # no config.json: the answer still names the commit
                commit = exc.response.headers.get("X-Repo-Commit") if exc.response is not None else None
            except (httpx2.TransportError, e.OfflineModeIsEnabled):
                commit = self._cached_ref()
                if commit is None:
                    raise
        if not commit or not _COMMIT.fullmatch(commit):
            raise UsageError(f"{self.ref}: {self.endpoint} named no commit for revision {self.revision} (no "
                             "X-Repo-Commit header): is HF_ENDPOINT a Hugging Face Hub?")
        if self.ref.revision != commit:  # what the client records: offline runs find the revision's commit here
            _write_atomic(self.folder / "refs" / (self.ref.revision or "main"), commit.encode())
        self.commit = commit

    # small files, through the Hugging Face cache
    def file(self, filename: str) -> Path | None:
        """A small file (config.json, an index) from the Hugging Face cache, fetched when missing; None when the
        repository has no such file at the revision (a 404, which the client also notes in the cache)."""
        from huggingface_hub import errors as e
        from huggingface_hub import hf_hub_download, try_to_load_from_cache

        name = self.name(filename)
        if not self.offline:
            self.resolve()
        if self.commit:
            cached = try_to_load_from_cache(self.ref.repo_id, name, cache_dir=self.cache_dir, revision=self.commit)
            if isinstance(cached, str):
                return Path(cached)
            if cached is not None:  # huggingface_hub's _CACHED_NO_EXIST: the 404 is remembered
                return None
        if self.offline and filename in (INDEX, BIN_INDEX) and any(self.cached(n) for n in (SINGLE, BIN)):
            # `hf download` leaves config.json and model.safetensors and no note of the index it never asked for:
            # with the single weight file cached and no index, the repository is a single-file one
            return None
        with self._errors(filename):
            try:
                path = Path(hf_hub_download(self.ref.repo_id, name, revision=self.revision, cache_dir=self.cache_dir,
                                            endpoint=self.endpoint))
            except e.RemoteEntryNotFoundError as exc:
                if self.commit is None:
                    commit = exc.response.headers.get("X-Repo-Commit") if exc.response is not None else None
                    self.commit = commit if commit and _COMMIT.fullmatch(commit) else self._cached_ref()
                return None
        if self.commit is None:
            snap = path
            for _part in name.split("/"):
                snap = snap.parent
            self.commit = snap.name
        return path

    def cached(self, filename: str) -> Path | None:
        """The file, whole, in the Hugging Face cache at this commit (what ``hf download`` or ``--download`` left
        there), or None. Asks nothing of the Hub."""
        if not self.commit:
            return None
        from huggingface_hub import try_to_load_from_cache

        got = try_to_load_from_cache(self.ref.repo_id, self.name(filename), cache_dir=self.cache_dir,
                                     revision=self.commit)
        return Path(got) if isinstance(got, str) else None

    def _cached_ref(self) -> str | None:
        ref = self.folder / "refs" / (self.ref.revision or "main")
        try:
            commit = ref.read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return commit if _COMMIT.fullmatch(commit) else None

    # large files, by byte range
    def _url(self, filename: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(self.ref.repo_id, self.name(filename), revision=self.revision, endpoint=self.endpoint)

    def _range(self, filename: str, begin: int, nbytes: int) -> tuple[bytes, int] | None:
        """Bytes ``begin .. begin + nbytes`` of a file and the file's size (from ``Content-Range``): one range
        request (redirects followed, to the CDN as the client's downloads are; the token is not sent off the Hub),
        read no further than asked even from a server that ignores the range. None for a 404."""
        from huggingface_hub import errors as e
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        if self.offline:
            raise UsageError(f"{self.ref}: {self.name(filename)}: HF_HUB_OFFLINE is set and bytes {begin}.."
                             f"{begin + nbytes} of it are not in the cache; run once online first")
        headers = {**build_hf_headers(), "Range": f"bytes={begin}-{begin + max(nbytes, 1) - 1}"}
        with self._errors(filename):
            try:
                with get_session().stream("GET", self._url(filename), headers=headers, timeout=TIMEOUT,
                                          follow_redirects=True) as r:
                    if r.status_code >= 400:
                        r.read()
                        hf_raise_for_status(r)
                    total = r.headers.get("Content-Range", "").rpartition("/")[2]
                    size = int(total) if total.isdigit() else int(r.headers.get("Content-Length") or 0)
                    skip = begin if r.status_code == 200 else 0  # the range was ignored: the file from its start
                    out = bytearray()
                    for chunk in r.iter_bytes():
                        out += chunk
                        if len(out) >= skip + nbytes:
                            break
            except e.RemoteEntryNotFoundError:
                return None
        return bytes(out[skip:skip + nbytes]), size

    def header(self, filename: str) -> FileHeader | None:
        """The parsed header of a safetensors file, by two range reads (its length, then the header) or from the
        cache; None when the repository has no such file."""
        if not self.offline:
            self.resolve()
        path = self.snapshot / filename
        if self.cached(filename) is not None:  # the whole file is in the cache: its header from disk
            return read_header(path, filename)
        store = self._assets("safetensors-headers") / (quote(self.name(filename), safe="") + ".bin")
        try:
            cached = store.read_bytes()
        except OSError:
            cached = b""
        if cached == b"absent":
            return None
        if len(cached) >= 8:
            (size,) = struct.unpack("<Q", cached[:8])
            fetched = [cached[8:]]
        else:
            first = self._range(filename, 0, 8)
            if first is None:
                _write_atomic(store, b"absent")
                return None
            fetched = [first[0]]
            size = first[1]
        prefix = fetched[0]

        def read(offset: int, n: int) -> bytes:
            have = b"".join(fetched)
            if offset + n <= len(have):
                return have[offset:offset + n]
            got = self._range(filename, len(have), offset + n - len(have))
            if got is None:
                raise OSError("the file went away while its header was read (404)")
            fetched.append(got[0])
            return b"".join(fetched)[offset:offset + n]

        result = read_header(path, filename, source=(size, read))
        data = b"".join(fetched)
        if data != prefix:
            _write_atomic(store, struct.pack("<Q", size) + data)
        return result

    def header_exists(self, filename: str) -> bool:
        """Whether the repository has the file (its first byte read, or the cache's answer)."""
        if self.cached(filename) is not None:
            return True
        store = self._assets("safetensors-headers") / (quote(self.name(filename), safe="") + ".bin")
        try:
            return store.read_bytes() != b"absent"
        except OSError:
            pass
        found = self._range(filename, 0, 1) is not None
        if not found:
            _write_atomic(store, b"absent")
        return found

    def read_range(self, filename: str, begin: int, nbytes: int) -> bytes:
        """Bytes of a file by range (a tensor a header-level check reads, embedding rows), cached per commit."""
        local = self.cached(filename)
        if local is not None:  # the whole file is in the cache
            with open(local, "rb") as fh:
                fh.seek(begin)
                data = fh.read(nbytes)
            if len(data) != nbytes:
                raise OSError(f"{filename}: asked for {nbytes} bytes at {begin}, got {len(data)}")
            return data
        store = self._assets("ranges") / f"{quote(self.name(filename), safe='')}@{begin}+{nbytes}"
        try:
            data = store.read_bytes()
            if len(data) == nbytes:
                return data
        except OSError:
            pass
        got = self._range(filename, begin, nbytes)
        if got is None:
            raise UsageError(f"{self.ref}: {self.name(filename)}: no such file at revision {self.revision} (404)")
        if len(got[0]) != nbytes:
            raise OSError(f"{filename}: asked for {nbytes} bytes at {begin}, got {len(got[0])}")
        _write_atomic(store, got[0])
        return got[0]

    # the weights, downloaded
    def download(self) -> Path:
        """config.json, the index and every weight file into the Hugging Face cache (huggingface_hub's progress
        bars); the snapshot folder."""
        from huggingface_hub import hf_hub_download

        config = self.file(CONFIG)
        names: list[str] = []
        for index in (INDEX, BIN_INDEX):
            path = self.file(index)
            if path is None:
                continue
            try:
                weight_map = json.loads(path.read_text(encoding="utf-8")).get("weight_map") or {}
            except (OSError, ValueError, AttributeError):
                weight_map = {}
            names = sorted({v for v in weight_map.values() if isinstance(v, str) and _safe_name(v)})
            break
        else:
            single = next((n for n in (SINGLE, BIN) if self.file(n) is not None), None)
            if single is None and config is None:
                raise UsageError(f"{self.ref}: holds neither {CONFIG} nor {SINGLE}, {INDEX} or {BIN} at revision "
                                 f"{self.revision}; is this a drafter checkpoint repository?")
            return self.snapshot  # the single file came with self.file
        for name in names:
            with self._errors(name):
                hf_hub_download(self.ref.repo_id, self.name(name), revision=self.revision, cache_dir=self.cache_dir,
                                endpoint=self.endpoint)
        return self.snapshot


def _safe_name(name: str) -> bool:
    parts = name.replace("\\", "/").split("/")
    return bool(name) and not name.startswith("/") and ".." not in parts and "\0" not in name


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:160]}" if text else type(exc).__name__


def _write_atomic(path: Path, data: bytes) -> None:
    """Write a cache entry whole or not at all (a killed run leaves no half entry); a read-only cache is no error."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


# ----- a checkpoint on the Hub ---------------------------------------------------------------------------------------

@dataclass
class HubFiles(CheckpointFiles):
    """A checkpoint whose config.json and index are in the Hugging Face cache and whose weight files stay on the
    Hub: headers by range, tensors a header-level check reads by range; :attr:`weights_elsewhere` says why the scan
    and forward levels skip."""

    hub: Any = field(default=None, repr=False)

    def shard_status(self, root: Path, shard: str) -> tuple[bool, str | None, str]:
        if not _safe_name(shard):
            return False, "is not a usable file name", "index-mismatch"
        return (True, None, "") if self.hub.header(shard) is not None else \
            (False, f"does not exist on the Hub at revision {self.hub.revision} (404)", "missing-file")

    def read_shard(self, reader: Callable, root: Path, shard: str) -> FileHeader:
        header = self.hub.header(shard)
        assert header is not None  # shard_status said it exists
        return header

    def load_bytes(self, e: TensorEntry) -> bytes:
        return self.hub.read_range(e.file, e.offset, e.nbytes)


def read_hub(spec: str, *, revision: str | None = None, download: bool = False, what: str = "") -> CheckpointFiles:
    """A Hub checkpoint: with ``download``, its files downloaded into the Hugging Face cache and opened as a
    directory; else :class:`HubFiles` over config.json, the index and the safetensors headers."""
    ref = parse(spec, revision, what)
    repo = HubRepo(ref)
    if download:
        ckpt = read_folder(repo.download())
        ckpt.display = str(ref)
        return ckpt
    config = repo.file(CONFIG)
    index = repo.file(INDEX)
    single = None if index is not None else repo.header(SINGLE)
    if index is None and single is None:
        if repo.file(BIN_INDEX) is not None or repo.header_exists(BIN):
            raise UsageError(f"{ref}: holds {BIN} (torch.save), whose layout is not read by range: pass --download "
                             "to fetch it into the Hugging Face cache")
        if config is None:
            raise UsageError(f"{ref}: holds neither {CONFIG} nor {SINGLE}, {INDEX} or {BIN} at revision "
                             f"{repo.revision} (404 for each); is this a drafter checkpoint repository?")
    # the trainer's own config beside config.json: asked of the Hub once (a 404 is remembered in the cache), read
    # from the cache only when offline (it is optional: no error when it was never fetched)
    beside = [(name, repo.cached(name) if repo.offline else repo.file(name)) for name in BESIDE_CONFIGS] \
        if config is not None else []
    children = [n for n, present in ((CONFIG, config), (INDEX, index), (SINGLE, single), *beside)
                if present is not None]
    st_files = [SINGLE] if single is not None else []
    ckpt = HubFiles(path=repo.snapshot, display=str(ref), hub=repo)
    build(ckpt, repo.snapshot, children, st_files)
    size = sum(f.size for f in ckpt.files)
    if ckpt.files and all(repo.cached(f.file) is not None for f in ckpt.files):  # what `hf download` left
        ckpt.weights_elsewhere = (f"the weights ({size / 1e9:.2f} GB) are in the Hugging Face cache: pass "
                                  "--download to run this level on them (nothing more is fetched)")
        return ckpt
    ckpt.weights_elsewhere = (f"the weights ({size / 1e9:.2f} GB) are on the Hub, not on this machine: pass "
                              "--download to fetch them into the Hugging Face cache and run this level")
    return ckpt
