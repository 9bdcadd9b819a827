"""Where a finding points, for the CI reports: the line of its config key in config.json, the byte range of its
tensor in a weight file, the file it names, else the checkpoint's config.json. A root cause (see causes.py) is one
annotation, one SARIF result, naming what else it affects."""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path, PurePosixPath
from typing import Any

from ..gate import GateResult
from ..registry import CONFIG, NESTED, Finding, Severity
from ..storage.safetensors import TensorEntry
from .causes import Causes, cause_key, role_of


def json_key_line(text: str, path: str | list[str]) -> int | None:
    """The 1-based line of the key ``path`` (``"transformer_layer_config.head_dim"`` or a list of keys) in JSON
    ``text``; for a key that is absent, the line of its deepest present parent; None if not even the first key is
    there. A key path into a list (``proposal_methods[0]``) stops at the list's key."""
    keys = path if isinstance(path, list) else [k for k in re.split(r"\.|\[\d+\]", path) if k]
    if not keys:
        return None
    best: tuple[int, int] | None = None  # (matched depth, line)
    stack: list[list] = []  # per open container: [kind, current key or None, expecting a key]
    line, i, n = 1, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch == '"':
            start_line, j, buf = line, i + 1, []
            while j < n and text[j] != '"':
                if text[j] == "\\":
                    buf.append(text[j:j + 2])
                    j += 2
                    continue
                if text[j] == "\n":
                    line += 1
                buf.append(text[j])
                j += 1
            i = j
            if stack and stack[-1][0] == "{" and stack[-1][2]:
                try:
                    key = json.loads('"' + "".join(buf) + '"')
                except ValueError:
                    key = "".join(buf)
                stack[-1][1], stack[-1][2] = key, False
                trail = [frame[1] for frame in stack]
                if all(frame[0] == "{" for frame in stack) and trail == keys[:len(trail)]:
                    if best is None or len(trail) > best[0]:
                        best = (len(trail), start_line)
                    if len(trail) == len(keys):
                        return start_line
        elif ch in "{[":
            stack.append([ch, None, ch == "{"])
        elif ch in "}]":
            if stack:
                stack.pop()
        elif ch == "," and stack and stack[-1][0] == "{":
            stack[-1][2] = True
        i += 1
    return best[1] if best else None


class Locator:
    """Where a finding points: a file of the checkpoint (as the report names it) and a region in it. In this order:
    the line of its key in config.json (or of the object a missing key belongs in) when the key is a config field;
    the byte range of the tensor it names, in the weight file that holds it; the file it names (at its byte offset,
    or at the line of its key in a JSON index); else, as the last resort, the checkpoint's config.json. Every finding
    gets a place: GitHub code scanning rejects a whole SARIF file in which one result has no location
    (github/codeql-action#1738 and #2459, "locationFromSarifResult: expected at least one location")."""

    def __init__(self, result: GateResult) -> None:
        self.result = result
        self.ckpt = result.ckpt
        self._raw: dict[str, bytes | None] = {}

    def _bytes(self, name: str) -> bytes | None:
        """The bytes of a JSON file of the checkpoint (config.json, an index), None when unreadable."""
        if name not in self._raw:
            try:
                self._raw[name] = (Path(self.ckpt.path) / name).read_bytes()
            except (OSError, ValueError, TypeError):
                self._raw[name] = None
        return self._raw[name]

    def _tensor(self, key: str | None) -> TensorEntry | None:
        """The header entry of the tensor a key names (an on-disk name, or a role), None when it names none here."""
        if not key:
            return None
        tensors = getattr(self.ckpt, "tensors", None) or {}
        if key in tensors:
            return tensors[key]
        role = role_of(self.ckpt, key)
        name = (getattr(self.ckpt, "roles", None) or {}).get(role) if role else None
        return tensors.get(name) if name else None

    def _line(self, name: str, f: Finding) -> int:
        """The line of the finding's key in JSON file ``name`` (or of the object a missing key belongs in; of its
        byte offset, for a file that does not parse; 1 when neither is known)."""
        raw = self._bytes(name)
        if raw is None:
            return 1
        if f.key:
            text = raw.decode("utf-8", errors="replace")
            found = json_key_line(text, f.key)
            if found is None and "." in f.key:  # a nested field read at the top level, or the reverse
                found = json_key_line(text, f.key.rsplit(".", 1)[1])
            for prefix in NESTED if found is None and name == CONFIG else ():
                found = json_key_line(text, prefix + f.key)
            if found is not None:
                return found
        offset = _int(f.offset)
        if offset is not None and 0 <= offset <= len(raw):
            return raw[:offset].count(b"\n") + 1
        return 1

    def place(self, f: Finding) -> tuple[str, dict[str, int]]:
        """(the file, as named in the checkpoint; the region: startLine, or byteOffset and byteLength)."""
        if f.file and f.file != CONFIG:
            entry = self._tensor(f.key)
            entry = entry if entry is not None and entry.file == f.file else None
            offset = _int(f.offset)
            if offset is not None:  # the byte a reader stopped at; the tensor's length when it is the tensor's start
                whole = entry is not None and entry.offset == offset
                return f.file, {"byteOffset": offset, **({"byteLength": entry.nbytes} if whole and entry else {})}
            if entry is not None:
                return f.file, {"byteOffset": entry.offset, "byteLength": entry.nbytes}
            if f.key and f.file.endswith(".json"):
                return f.file, {"startLine": self._line(f.file, f)}
            return f.file, {}
        if f.file == CONFIG or _is_config_key(f, self.result):
            return CONFIG, {"startLine": self._line(CONFIG, f)}
        entry = self._tensor(f.key)
        if entry is not None:
            return entry.file, {"byteOffset": entry.offset, "byteLength": entry.nbytes}
        return CONFIG, {"startLine": 1}  # the last resort: the checkpoint's config.json

    def path(self, name: str) -> str:
        """A file of the checkpoint as the report names it: under the checkpoint's path as it was given."""
        return posixpath.join(PurePosixPath(Path(self.ckpt.display)).as_posix(), name)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _is_config_key(f: Finding, result: GateResult) -> bool:
    """Whether the finding's key is a config field (as root causes read keys; a note's key too)."""
    if not f.key:
        return False
    key = cause_key(Finding(Severity.ERROR, f.message, key=f.key), result.ckpt)
    return bool(key and key.startswith(f"{CONFIG}: "))


def annotation_text(f: Finding, causes: Causes) -> str:
    """A finding as one message: what, expected/found, why is left to the rule, the fix, and what else it affects."""
    parts = [f.message]
    if f.expected is not None or f.found is not None:
        parts.append(f"expected {f.expected if f.expected is not None else '-'}, found "
                     f"{f.found if f.found is not None else '-'}")
    if f.basis:
        parts.append(f"basis: {f.basis}" + (f" (rests on {f.rests_on}; settle with {f.settle})" if f.settle else ""))
    if f.fix:
        parts.append(f"fix: {f.fix}")
    cause = causes.cause_of(f)
    if cause is not None and cause.finding is f:
        parts.append(f"root cause {cause.key}; also affects: {cause.also_affects()}")
    if f.waived is not None:
        parts.append(f"waived (--waive): {f.waived}")
    if f.code:
        parts.append(f"[{f.code}]")
    return ". ".join(p.rstrip(".") for p in parts)


def reported(result: GateResult, causes: Causes, notes: bool) -> list[Finding]:
    """The findings a CI report lists: every finding not folded into a root cause (notes only when asked)."""
    return [f for r in result.results for f in r.findings
            if not causes.is_dependent(f) and (notes or f.severity is not Severity.INFO)]
