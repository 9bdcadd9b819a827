"""The target's final norm and lm_head, read from its checkpoint folder (``accept --target DIR``): only those two
tensors (the embedding when the lm_head is tied), from the shards the index names, for the labels and alpha.

The recorded last state is turned into the target's logits the way its producer recorded it: speculators keeps the
last layer's output before the final norm (``speculators/train/data.py:309-332``; its trainer applies
``verifier_norm`` then ``verifier_lm_head``, ``speculators/models/eagle3/core.py:249-254``), SpecForge and
TensorRT-LLM the state after it (a bare lm_head).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..storage.folder import INDEX
from ..storage.safetensors import TensorEntry, load_array, read_header
from .samples import DataError

NORM_NAMES = ("model.norm.weight", "model.language_model.norm.weight", "language_model.model.norm.weight")
HEAD_NAMES = ("lm_head.weight", "language_model.lm_head.weight")
EMBED_NAMES = ("model.embed_tokens.weight", "model.language_model.embed_tokens.weight",
               "language_model.model.embed_tokens.weight")


@dataclass
class TargetHead:
    norm: Any  # (Ht,) float32 torch tensor
    head: Any  # (V, Ht) float32
    eps: float

    def logits(self, last, normed: bool):
        """(T, V) float32 target logits of recorded last states (before the final norm unless ``normed``)."""
        import torch

        x = last.to(torch.float32)
        if not normed:
            var = x.pow(2).mean(-1, keepdim=True)
            x = x * torch.rsqrt(var + self.eps) * self.norm
        return x @ self.head.T


def _entries(root: Path) -> dict[str, TensorEntry]:
    names: dict[str, str] | None = None
    index = root / INDEX
    if index.is_file():
        try:
            names = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(f"--target {root}: {INDEX} is unreadable ({type(exc).__name__})") from None
    wanted = set(NORM_NAMES + HEAD_NAMES + EMBED_NAMES)
    files = sorted({f for n, f in (names or {}).items() if n in wanted}) if names is not None else \
        sorted(p.name for p in root.glob("*.safetensors"))
    out: dict[str, TensorEntry] = {}
    for file in files:
        if "/" in file or "\\" in file or file.startswith(".."):
            raise DataError(f"--target {root}: {INDEX} names {file!r}, not a file of the checkpoint")
        header = read_header(root / file, file)
        if header.problems:
            raise DataError(f"--target {root}: {file}: {header.problems[0].message}")
        out.update({n: e for n, e in header.entries.items() if n in wanted})
    return out


def load_head(root: Path, hidden: int, vocab: int) -> TargetHead:
    """The target's final norm and lm_head. Raises DataError."""
    import torch

    if not root.is_dir():
        raise DataError(f"--target {root}: not a directory (give the target checkpoint's folder)")
    try:
        config = json.loads((root / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"--target {root}: cannot read config.json ({type(exc).__name__})") from None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    eps = float(text.get("rms_norm_eps", 1e-6))
    entries = _entries(root)
    norm = next((entries[n] for n in NORM_NAMES if n in entries), None)
    head = next((entries[n] for n in HEAD_NAMES if n in entries), None)
    if head is None and text.get("tie_word_embeddings", config.get("tie_word_embeddings")):
        head = next((entries[n] for n in EMBED_NAMES if n in entries), None)
    if norm is None or head is None:
        raise DataError(f"--target {root}: no {'final norm' if norm is None else 'lm_head'} tensor (looked for "
                        f"{', '.join(NORM_NAMES if norm is None else HEAD_NAMES)})")
    if tuple(head.shape) != (vocab, hidden) or tuple(norm.shape) != (hidden,):
        raise DataError(f"--target {root}: lm_head {list(head.shape)} and norm {list(norm.shape)} do not fit the "
                        f"drafter's target ({vocab} x {hidden}): is it the drafter's target?")
    try:
        return TargetHead(torch.from_numpy(load_array(norm).astype("float32")),
                          torch.from_numpy(load_array(head).astype("float32")), eps)
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"--target {root}: cannot read its lm_head or norm: {exc}") from None
