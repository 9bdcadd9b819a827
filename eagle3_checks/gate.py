"""The gate as one call: open a checkpoint, resolve reference and target, run the registry.

Every shell (CLI, pytest plugin, converter self-verification) goes through :func:`gate`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .checkpoint import Checkpoint, open_checkpoint
from .config import TargetConfig, read_target_config
from .errors import UsageError
from .registry import GateOptions, GateResult, run_gate
from .spec import resolve_reference

# keys only a drafter's config has: a --target-config holding one is the drafter's own config, given by mistake
DRAFTER_KEYS = ("eagle_config", "eagle_aux_hidden_state_layer_ids", "speculators_config", "draft_vocab_size")


def load_target(path: str | os.PathLike) -> TargetConfig:
    """The verifier's config.json (a file, or a directory holding one). Raises UsageError."""
    p = Path(path)
    try:
        if p.is_dir():
            p = p / "config.json"
        raw = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise UsageError(f"--target-config {path}: no such file") from exc
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UsageError(f"--target-config {str(path)[:200]}: cannot read it as JSON: {type(exc).__name__}: "
                         f"{exc}"[:500]) from exc
    drafter = [k for k in DRAFTER_KEYS if isinstance(raw, dict) and k in raw]
    if drafter:
        raise UsageError(f"--target-config {str(path)[:200]}: this is a drafter's config (it has "
                         f"{', '.join(drafter)}), not the verifier's: give the config.json of the target model the "
                         "drafter drafts for")
    try:
        return read_target_config(raw, str(path))
    except ValueError as exc:
        raise UsageError(f"--target-config {exc}") from exc


def load_source(path: str | os.PathLike) -> Checkpoint:
    """The checkpoint a candidate was converted from (--source). Raises UsageError."""
    try:
        source = open_checkpoint(path)
    except UsageError as exc:
        raise UsageError(f"--source {exc}") from exc
    if source.problems:
        raise UsageError(f"--source {path}: the source checkpoint has integrity problems "
                         f"({source.problems[0].file}: {source.problems[0].message})")
    return source


def gate_checkpoint(ckpt: Checkpoint, options: GateOptions) -> GateResult:
    reference, note = resolve_reference(options.reference, ckpt)
    target = load_target(options.target_config) if options.target_config else None
    source = load_source(options.source) if options.source else None
    return run_gate(ckpt, options, reference=reference, reference_note=note, target=target, source=source)


def gate(path: str | os.PathLike, options: GateOptions | None = None) -> GateResult:
    """Gate the checkpoint at ``path``. Raises UsageError (exit 2) for unusable paths or options."""
    return gate_checkpoint(open_checkpoint(path), options or GateOptions())
