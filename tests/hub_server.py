"""A stand-in for the Hugging Face Hub on 127.0.0.1, for the tests and the benchmarks (nothing leaves the machine).

It serves what ``huggingface_hub`` 2.4 asks a Hub for when it downloads a file or when eagle3-checks reads a
safetensors header: ``HEAD`` and ``GET /{org}/{name}/resolve/{revision}/{path}``, with the headers the client reads
(``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag`` and ``X-Linked-Size`` for large files, ``Content-Length``,
``Accept-Ranges``), ``Range: bytes=A-B`` reads answered ``206``, and the Hub's error codes (``X-Error-Code``:
``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``, ``GatedRepo`` with 401 without the repo's token).

Every request is recorded (method, path, range, body bytes sent), so a test can say exactly what was fetched. A request
is recorded after its body is sent, which can be after the client has returned; ``requests`` and ``clear()`` therefore
first wait for the requests in flight, so no request lands in the log after a test cleared it.
Files are served from disk by range, so a sparse Kimi-sized checkpoint costs nothing to serve.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

LFS_SUFFIXES = (".safetensors", ".bin")  # served as LFS files: sha256 etag in X-Linked-Etag, size in X-Linked-Size


@dataclass
class Repo:
    files: dict[str, Path]  # path in the repository -> the file on disk
    commit: str = ""
    gated_token: str | None = None  # gated: only requests with "Authorization: Bearer <token>" get through

    def __post_init__(self) -> None:
        if not self.commit:
            digest = hashlib.sha1()
            for name, path in sorted(self.files.items()):
                digest.update(f"{name}\0{path.stat().st_size}\0".encode())
            self.commit = digest.hexdigest()


@dataclass
class Request:
    method: str
    path: str
    status: int
    range: str | None
    sent: int  # body bytes sent


@dataclass
class HubServer:
    repos: dict[str, Repo] = field(default_factory=dict)
    url: str = ""
    _log: list[Request] = field(default_factory=list)
    _busy: int = 0
    _idle: threading.Condition = field(default_factory=threading.Condition)

    def begin(self) -> None:
        with self._idle:
            self._busy += 1

    def end(self, request: Request | None) -> None:
        with self._idle:
            if request is not None:
                self._log.append(request)
            self._busy -= 1
            self._idle.notify_all()

    def _settle(self) -> None:
        with self._idle:
            if not self._idle.wait_for(lambda: self._busy == 0, timeout=30):
                raise TimeoutError(f"the stand-in Hub still has {self._busy} request(s) in flight after 30 s")

    @property
    def requests(self) -> list[Request]:
        """What was asked since the last clear(), once every request in flight has been answered."""
        self._settle()
        return list(self._log)

    def add(self, repo_id: str, folder: Path, **kw) -> Repo:
        """Serve every file under ``folder`` (symlinks followed) as the repository ``repo_id``."""
        files = {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()}
        self.repos[repo_id] = Repo(files, **kw)
        return self.repos[repo_id]

    @property
    def body_bytes(self) -> int:
        return sum(r.sent for r in self.requests)

    def clear(self) -> None:
        self._settle()
        with self._idle:
            self._log.clear()


def _etag(repo: Repo, name: str, path: Path) -> str:
    """A stable etag: sha256-like for LFS files (the Hub uses the content's sha256), git-sha1-like otherwise. Not the
    content's hash (a Kimi-sized file is not hashed per request); the client only uses it as a cache key."""
    key = f"{repo.commit}\0{name}\0{path.stat().st_size}".encode()
    return hashlib.sha256(key).hexdigest() if name.endswith(LFS_SUFFIXES) else hashlib.sha1(key).hexdigest()


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def _error(self, status: int, code: str, message: str, commit: str | None = None) -> None:
            body = message.encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            if commit:
                self.send_header("X-Repo-Commit", commit)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            sent = 0
            if self.command != "HEAD":
                self.wfile.write(body)
                sent = len(body)
            self.record = Request(self.command, self.path, status, self.headers.get("Range"), sent)

        def _serve(self) -> None:
            parts = unquote(self.path.split("?")[0]).lstrip("/").split("/")
            if len(parts) < 5 or parts[2] != "resolve":
                return self._error(404, "NotFound", "not a resolve URL")
            repo_id, revision, name = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
            repo = hub.repos.get(repo_id)
            if repo is None:
                return self._error(401, "RepoNotFound", "Repository not found")
            if repo.gated_token is not None and self.headers.get("Authorization") != f"Bearer {repo.gated_token}":
                return self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have "
                                   "access to it and be authenticated to access it. Please log in.")
            if revision not in ("main", repo.commit):
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            path = repo.files.get(name)
            if path is None:
                return self._error(404, "EntryNotFound", f"{name} does not exist on \"{revision}\"", repo.commit)
            size = path.stat().st_size
            begin, end = 0, size - 1
            rng = self.headers.get("Range")
            status = 200
            if rng and self.command == "GET":
                first, _, last = rng.removeprefix("bytes=").partition("-")
                begin, end = int(first), min(int(last) if last else size - 1, size - 1)
                status = 206
            length = max(0, end - begin + 1)
            self.send_response(status)
            self.send_header("X-Repo-Commit", repo.commit)
            etag = _etag(repo, name, path)
            if name.endswith(LFS_SUFFIXES):
                self.send_header("X-Linked-Etag", f'"{etag}"')
                self.send_header("X-Linked-Size", str(size))
                self.send_header("ETag", f'"{hashlib.sha1(etag.encode()).hexdigest()}"')
            else:
                self.send_header("ETag", f'"{etag}"')
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", f"bytes {begin}-{end}/{size}")
            self.send_header("Content-Length", str(length))
            self.end_headers()
            sent = 0
            if self.command == "GET":
                with open(path, "rb") as fh:
                    fh.seek(begin)
                    left = length
                    while left:
                        chunk = fh.read(min(left, 1 << 20))
                        if not chunk:
                            break
                        self.wfile.write(chunk)
                        left -= len(chunk)
                        sent += len(chunk)
            self.record = Request(self.command, self.path, status, rng, sent)

        def _answer(self) -> None:
            self.record: Request | None = None
            hub.begin()
            try:
                self._serve()
            finally:
                hub.end(self.record)

        do_GET = _answer
        do_HEAD = _answer

    return Handler


class running:
    """``with running(hub) as url:`` serves ``hub`` on 127.0.0.1 (a free port) in a thread."""

    def __init__(self, hub: HubServer) -> None:
        self.hub = hub
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
        self.server.daemon_threads = True

    def __enter__(self) -> str:
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.hub.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        return self.hub.url

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
