"""A drafter checkpoint: the normalized view of a folder's file facts that every check reads.

:mod:`eagle3_checks.storage` says which files there are, what config.json holds and where each tensor's bytes lie
(:class:`~eagle3_checks.storage.folder.CheckpointFiles`); this module says what they mean: the layout (speculators or
flat), each tensor's role (``layers.0.self_attn.q_proj.weight`` whatever its on-disk name), the decoder layer's
family, and the effective config values with their source (:class:`~eagle3_checks.drafter.config_values.DraftConfig`).
A tensor is loaded only when a check asks for it (:meth:`Checkpoint.values`, :meth:`Checkpoint.array`), once, and
kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from ..fast_dataclass import dataclass
from ..storage.folder import CONFIG, CheckpointFiles, TensorReadError, read_folder
from ..storage.hub import read_any
from ..storage.safetensors import FileHeader, Problem, TensorEntry, load_array, load_values
from .config_values import DraftConfig, read_config
from .layout import (
    FLAT,
    LLAMA,
    SPECULATORS,
    UNKNOWN,
    Name,
    detect_layout,
    drafter_family,
    parse_name,
    unmodelled_drafter,
)


@dataclass
class Checkpoint:
    """One drafter checkpoint: its files (``source``) and what they mean."""

    source: CheckpointFiles
    config_raw: dict | None = None
    config: DraftConfig | None = None
    layout: str = UNKNOWN
    layout_source: str = ""
    names: dict[str, Name] = field(default_factory=dict)  # on-disk name -> what it means
    roles: dict[str, str] = field(default_factory=dict)  # role -> on-disk name
    duplicate_roles: dict[str, list[str]] = field(default_factory=dict)
    family: str = LLAMA  # the decoder layer's family (drafter/families/), from the config, else the tensor names
    _arrays: dict[str, Any] = field(default_factory=dict, repr=False)
    _values: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, source: CheckpointFiles, config_raw: dict | None = None) -> Checkpoint:
        """The meaning of ``source``'s files, under ``config_raw`` when given (else its own config.json)."""
        ckpt = cls(source, source.config_raw if config_raw is None else config_raw)
        if ckpt.config_raw is not None:
            ckpt.layout, ckpt.layout_source = detect_layout(ckpt.config_raw), f"{CONFIG} structure"
            ckpt.config = read_config(ckpt.config_raw, ckpt.layout)
            ckpt._classify_names()
        else:
            ckpt._classify_names()
            styles = {n.style for n in ckpt.names.values() if n.style}
            ckpt.layout = FLAT if styles == {"midlayer"} else SPECULATORS if styles == {"layers"} else UNKNOWN
            ckpt.layout_source = "tensor names (no readable config.json)"
        return ckpt

    def with_config(self, raw: dict) -> Checkpoint:
        """The same tensors under another config.json: what ``fix`` gates before it writes anything."""
        return Checkpoint.of(self.source, raw)

    def _classify_names(self) -> None:
        """Each tensor's role, for the decoder layer of the checkpoint's family (decided from the config and the
        names)."""
        self.family = drafter_family(self.config_raw, self.layout, tuple(self.tensors))
        if self.config is not None:
            self.config.family = self.family
        for name in self.tensors:
            parsed = parse_name(name, self.family)
            self.names[name] = parsed
            if parsed.role is None:
                continue
            if parsed.role in self.roles:
                self.duplicate_roles.setdefault(parsed.role, [self.roles[parsed.role]]).append(name)
                continue
            self.roles[parsed.role] = name

    # ----- the files' facts ------------------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self.source.path

    @property
    def display(self) -> str:
        """How the user named the checkpoint (a folder, ``hf://ORG/NAME``): every finding's location starts here."""
        return self.source.display

    @display.setter
    def display(self, value: str) -> None:
        self.source.display = value

    @property
    def beside(self) -> dict[str, dict]:
        """The trainer's own config saved beside config.json (``config_speculators.json``), by file name."""
        return self.source.beside

    @property
    def folder_names(self) -> list[str]:
        """The names in the checkpoint's folder (a Hub checkpoint: the files looked up)."""
        return self.source.names

    @property
    def files(self) -> list[FileHeader]:
        return self.source.files

    @property
    def problems(self) -> list[Problem]:
        return self.source.problems

    @property
    def tensors(self) -> dict[str, TensorEntry]:
        return self.source.tensors

    @property
    def complete(self) -> bool:
        return self.source.complete

    @property
    def weights_elsewhere(self) -> str | None:
        return self.source.weights_elsewhere

    @property
    def weight_files(self) -> list[str]:
        return self.source.weight_files

    def ends_past_file(self, e: TensorEntry) -> bool:
        return self.source.ends_past_file(e)

    @property
    def past_end(self) -> list[str]:
        return self.source.past_end

    def load_bytes(self, e: TensorEntry) -> bytes | None:
        return self.source.load_bytes(e)

    # ----- views -----------------------------------------------------------------------------------------------
    def entry(self, role: str) -> TensorEntry | None:
        name = self.roles.get(role)
        return None if name is None else self.tensors[name]

    def shape(self, role: str) -> tuple[int, ...] | None:
        e = self.entry(role)
        return None if e is None else e.shape

    def file_of(self, role: str) -> str | None:
        """The weight file that holds the tensor of ``role``, or None."""
        e = self.entry(role)
        return None if e is None else e.file

    def has(self, role: str) -> bool:
        return role in self.roles

    @property
    def layers(self) -> list[int]:
        """Decoder layer indices that have at least one tensor."""
        return sorted({n.layer for n in self.names.values() if n.layer is not None and n.role})

    @property
    def not_modelled(self) -> tuple[str, str] | None:
        """(class, what it is) when eagle3-checks does not model the drafter's family, else None."""
        return unmodelled_drafter(self.config_raw, self.layout, tuple(self.names))

    def array(self, role: str) -> Any:
        """The tensor of ``role`` as a numpy array, read on first use and cached."""
        return self._load(role, self._arrays, load_array)

    def values(self, role: str) -> Sequence[int] | Sequence[float]:
        """The tensor of ``role`` flattened, as Python numbers read without numpy (``load_values``: what the header
        level reads of d2t and t2d), on first use and cached."""
        return self._load(role, self._values, load_values)

    def _load(self, role: str, cache: dict[str, Any], loader: Callable[[TensorEntry, bytes | None], Any]) -> Any:
        if role not in cache:
            e = self.entry(role)
            if e is None:
                raise TensorReadError(f"no tensor for {role}")
            if self.ends_past_file(e):
                raise TensorReadError(f"{e.file}: {e.name} ends at byte {e.offset + e.nbytes}, past the end of the "
                                      f"file ({self.source.file_size(e)} bytes)")
            try:
                cache[role] = loader(e, self.load_bytes(e))
            except (OSError, EOFError, ValueError, OverflowError, MemoryError) as exc:
                raise TensorReadError(f"{e.file}: cannot read {e.name}: {exc}") from exc
        return cache[role]


def open_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Open a drafter directory. Raises UsageError when ``path`` cannot be a checkpoint."""
    return Checkpoint.of(read_folder(path))


def open_any(spec: str | os.PathLike, *, revision: str | None = None, download: bool = False,
             what: str = "") -> Checkpoint:
    """A checkpoint named any way the commands accept: a directory, a Hugging Face cache repository folder, or
    ``hf://ORG/NAME[@REVISION]`` (:func:`eagle3_checks.storage.hub.read_any`). Raises UsageError."""
    return Checkpoint.of(read_any(spec, revision=revision, download=download, what=what))
