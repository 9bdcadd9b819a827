"""The target model's input embedding, read lazily from its checkpoint (``--target DIR|hf://ORG/NAME``).

Engines embed the tokens a drafter drafts with the TARGET's ``embed_tokens`` when the drafter ships none (SpecForge
and AQ-MedAI drafters): vLLM shares the target's embedding module with the drafter, SGLang hands the target's
embedding weight to the draft model. A target checkpoint is large (hundreds of GB for Kimi-K2), so only what the
forward pass asks for is read: the tensor's entry from the shard the index names, then the rows of the token ids
drafted, by byte range (memory-mapped on disk; HTTP range reads, cached, on the Hub). Nothing else of the target is
read but its config.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..fast_dataclass import dataclass
from .folder import INDEX, SINGLE
from .safetensors import TensorEntry, load_array, read_header

# where checkpoints keep the input embedding of the language model, most specific first
EMBED_NAMES = ("model.embed_tokens.weight", "model.language_model.embed_tokens.weight",
               "language_model.model.embed_tokens.weight", "embed_tokens.weight")


class EmbeddingError(ValueError):
    """The target checkpoint has no usable embed_tokens (the message says why)."""


def _pick(names: list[str]) -> str | None:
    """The language model's embed_tokens among a checkpoint's tensor names (not a vision tower's)."""
    for wanted in EMBED_NAMES:
        if wanted in names:
            return wanted
    found = sorted((n for n in names if n.endswith("embed_tokens.weight") and "vision" not in n and "visual" not in n),
                   key=len)
    return found[0] if found else None


@dataclass
class TargetEmbedding:
    """``rows(ids)``: float32 rows of the target's embed_tokens, read when first asked."""

    display: str
    root: Path | None = None  # a target folder on this disk
    hub: Any = None  # or a Hub repository (eagle3_checks.storage.hub.HubRepo) at a resolved revision
    _entry: TensorEntry | None = None

    def _index_shard(self) -> tuple[str | None, list[str]]:
        """(the file the index puts embed_tokens in, every tensor name it lists); (None, []) without an index."""
        path = self.hub.file(INDEX) if self.hub is not None else self.root / INDEX if self.root else None
        if path is None or not Path(path).is_file():
            return None, []
        try:
            weight_map = json.loads(Path(path).read_text(encoding="utf-8"))["weight_map"]
            names = list(weight_map)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(f"{self.display}: {INDEX} is unreadable ({type(exc).__name__})") from exc
        name = _pick(names)
        if name is None:
            raise EmbeddingError(f"{self.display}: {INDEX} lists no embed_tokens tensor (looked for "
                                 f"{', '.join(EMBED_NAMES)})")
        shard = weight_map[name]
        if not isinstance(shard, str) or ".." in shard.replace("\\", "/").split("/") or shard.startswith("/"):
            raise EmbeddingError(f"{self.display}: {INDEX} puts {name} in {shard!r}, not a file of the checkpoint")
        return shard, names

    def entry(self) -> TensorEntry:
        """The embed_tokens tensor's entry (dtype, shape, where its bytes are). Raises EmbeddingError."""
        if self._entry is not None:
            return self._entry
        shard, _ = self._index_shard()
        if shard is not None:
            candidates = [shard]
        elif self.hub is not None:
            candidates = [SINGLE]
        else:
            candidates = sorted(p.name for p in self.root.glob("*.safetensors")) if self.root else []
        for file in candidates:
            header = self.hub.header(file) if self.hub is not None else read_header(Path(self.root or ".") / file,
                                                                                        file)
            if header is None:
                continue
            if header.problems and not header.parsed:
                raise EmbeddingError(f"{self.display}: {file}: {header.problems[0].message}")
            name = _pick(list(header.entries))
            if name is not None:
                e = header.entries[name]
                if len(e.shape) != 2:
                    raise EmbeddingError(f"{self.display}: {name} has shape {list(e.shape)}, not (vocab, hidden)")
                if e.offset + e.nbytes > header.size:
                    raise EmbeddingError(f"{self.display}: {file}: {name} runs past the end of the file (truncated)")
                self._entry = e
                return e
        raise EmbeddingError(f"{self.display}: no embed_tokens tensor in "
                             f"{', '.join(candidates) or 'any safetensors file'} (looked for {', '.join(EMBED_NAMES)})")

    @property
    def shape(self) -> tuple[int, ...]:
        return self.entry().shape

    def rows(self, ids: list[int]):  # -> numpy.ndarray (len(ids), hidden) float32
        """The embedding rows of ``ids``: each run of consecutive ids one read. Raises EmbeddingError."""
        import numpy as np

        e = self.entry()
        vocab, hidden = e.shape
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise EmbeddingError(f"{self.display}: token id {bad[0]} is outside its embed_tokens ({vocab} rows)")
        row_bytes = e.nbytes // vocab if vocab else 0
        table: dict[int, Any] = {}
        wanted = sorted(set(ids))
        start = 0
        while start < len(wanted):
            end = start
            while end + 1 < len(wanted) and wanted[end + 1] == wanted[end] + 1:
                end += 1
            first, count = wanted[start], end - start + 1
            offset = e.offset + first * row_bytes
            if self.hub is not None:
                data = self.hub.read_range(e.file, offset, count * row_bytes)
            else:
                with open(e.path, "rb") as fh:
                    fh.seek(offset)
                    data = fh.read(count * row_bytes)
            part = TensorEntry(e.name, e.dtype, (count, hidden), e.file, e.path, offset, count * row_bytes)
            try:
                block = np.asarray(load_array(part, data), dtype=np.float32)
            except (ValueError, EOFError) as exc:
                raise EmbeddingError(f"{self.display}: cannot read {e.name} rows: {exc}") from exc
            for k in range(count):
                table[first + k] = block[k]
            start = end + 1
        return np.stack([table[i] for i in ids]) if ids else np.zeros((0, hidden), dtype=np.float32)
