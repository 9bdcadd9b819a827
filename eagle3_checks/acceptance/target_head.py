"""The target's final norm and lm_head, read from its checkpoint (``accept --target DIR|hf://ORG/NAME``): only those
two tensors (the embedding when the lm_head is tied), from the shards the index names, for the labels and alpha; on
the Hub by byte range, nothing else of the target downloaded.

The recorded last state is turned into the target's logits the way its producer recorded it: speculators keeps the
last layer's output before the final norm (``speculators/train/data.py:309-332``; its trainer applies
``verifier_norm`` then ``verifier_lm_head``, ``speculators/models/eagle3/core.py:249-254``), SpecForge and
TensorRT-LLM the state after it (a bare lm_head).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..fast_dataclass import dataclass
from ..numerics.draft_steps import as_tensor, mm_blocks, view
from ..numerics.ops import Tensor
from ..storage.folder import INDEX, SINGLE
from ..storage.hub import HubRepo, is_hub, parse
from ..storage.safetensors import TensorEntry, read_header
from .samples import DataError

NORM_NAMES = ("model.norm.weight", "model.language_model.norm.weight", "language_model.model.norm.weight")
HEAD_NAMES = ("lm_head.weight", "language_model.lm_head.weight")
EMBED_NAMES = ("model.embed_tokens.weight", "model.language_model.embed_tokens.weight",
               "language_model.model.embed_tokens.weight")


@dataclass
class TargetHead:
    norm: Any  # (Ht,) float32 torch tensor
    head: Any  # (V, Ht) torch view of the file, in its stored dtype (memory-mapped: a Kimi-K2 lm_head is 2.3 GB)
    eps: float
    device: str = "cpu"
    _buf: Any = None

    def logits(self, last: Tensor, normed: bool) -> Tensor:
        """(T, V) float32 target logits of recorded last states (before the final norm unless ``normed``),
        lm_head upcast a block of rows at a time."""
        import torch

        x = last.to(self.device, dtype=torch.float32)
        if not normed:
            var = x.pow(2).mean(-1, keepdim=True)
            x = x * torch.rsqrt(var + self.eps) * self.norm.to(self.device)
        out, self._buf = mm_blocks(x, self.head, self.device, self._buf)
        return out


class _Folder:
    """A target checkpoint on this disk: its files, their headers, tensors memory-mapped."""

    def __init__(self, root: Path) -> None:
        self.root, self.display = root, str(root)

    def file(self, name: str) -> Path | None:
        path = self.root / name
        return path if path.is_file() else None

    def weight_files(self) -> list[str]:
        return sorted(p.name for p in self.root.glob("*.safetensors"))

    def header(self, file: str) -> Any:
        return read_header(self.root / file, file)

    def tensor(self, e: TensorEntry) -> Any:
        if e.offset + e.nbytes > e.path.stat().st_size:
            raise ValueError(f"{e.file}: {e.name} runs past the end of the file (truncated)")
        return view(e, {})


class _Hub:
    """A target checkpoint on the Hugging Face Hub (hf://ORG/NAME[@REVISION]): config.json and the index fetched
    into its cache, headers and the two tensors read by byte range (cached per commit), nothing else."""

    def __init__(self, spec: str, revision: str | None) -> None:
        self.repo, self.display = HubRepo(parse(spec, revision, "--target")), spec

    def file(self, name: str) -> Path | None:
        return self.repo.file(name)

    def weight_files(self) -> list[str]:
        return [SINGLE]

    def header(self, file: str) -> Any:
        header = self.repo.header(file)
        if header is None:
            raise DataError(f"--target {self.display}: no {file} in the repository")
        return header

    def tensor(self, e: TensorEntry) -> Any:
        import numpy as np

        data = bytearray(self.repo.read_range(e.file, e.offset, e.nbytes))  # writable: torch warns otherwise
        return as_tensor(np.frombuffer(data, np.uint8), e.dtype, e.shape)


def _entries(source: Any) -> dict[str, TensorEntry]:
    names: dict[str, str] | None = None
    index = source.file(INDEX)
    if index is not None:
        try:
            names = json.loads(Path(index).read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(f"--target {source.display}: {INDEX} is unreadable ({type(exc).__name__})") from None
    wanted = set(NORM_NAMES + HEAD_NAMES + EMBED_NAMES)
    files = sorted({f for n, f in (names or {}).items() if n in wanted}) if names is not None else \
        source.weight_files()
    out: dict[str, TensorEntry] = {}
    for file in files:
        if not isinstance(file, str) or "/" in file or "\\" in file or file.startswith(".."):
            raise DataError(f"--target {source.display}: {INDEX} names {file!r}, not a file of the checkpoint")
        header = source.header(file)
        if header.problems:
            raise DataError(f"--target {source.display}: {file}: {header.problems[0].message}")
        out.update({n: e for n, e in header.entries.items() if n in wanted})
    return out


def load_head(spec: str | Path, hidden: int, vocab: int, device: str = "cpu",
              revision: str | None = None) -> TargetHead:
    """The target's final norm and lm_head, from its folder (memory-mapped) or hf://ORG/NAME (by range). Raises
    DataError (and UsageError for the Hub's own errors)."""
    import torch

    if is_hub(spec):
        source: Any = _Hub(str(spec), revision)
    elif not Path(spec).is_dir():
        raise DataError(f"--target {spec}: not a directory (give the target checkpoint's folder or hf://ORG/NAME)")
    else:
        source = _Folder(Path(spec))
    config_path = source.file("config.json")
    try:
        if config_path is None:
            raise OSError("absent")
        config = json.loads(Path(config_path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"--target {spec}: cannot read config.json ({type(exc).__name__})") from None
    if not isinstance(config, dict):
        raise DataError(f"--target {spec}: config.json is not an object")
    text: dict[str, Any] = config["text_config"] if isinstance(config.get("text_config"), dict) else config
    eps = float(text.get("rms_norm_eps", 1e-6))
    entries = _entries(source)
    norm = next((entries[n] for n in NORM_NAMES if n in entries), None)
    head = next((entries[n] for n in HEAD_NAMES if n in entries), None)
    if head is None and text.get("tie_word_embeddings", config.get("tie_word_embeddings")):
        head = next((entries[n] for n in EMBED_NAMES if n in entries), None)
    if norm is None or head is None:
        raise DataError(f"--target {spec}: no {'final norm' if norm is None else 'lm_head'} tensor (looked for "
                        f"{', '.join(NORM_NAMES if norm is None else HEAD_NAMES)})")
    if tuple(head.shape) != (vocab, hidden) or tuple(norm.shape) != (hidden,):
        raise DataError(f"--target {spec}: lm_head {list(head.shape)} and norm {list(norm.shape)} do not fit the "
                        f"drafter's target ({vocab} x {hidden}): is it the drafter's target?")
    try:
        return TargetHead(source.tensor(norm).to(torch.float32), source.tensor(head), eps, device)
    except (ValueError, OSError, EOFError, KeyError) as exc:
        raise DataError(f"--target {spec}: cannot read its lm_head or norm: {exc}") from None
