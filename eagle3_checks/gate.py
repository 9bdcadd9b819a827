"""The gate as one call: open a checkpoint, resolve reference and target, run the registry.

Every shell (CLI, pytest plugin, converter self-verification) goes through :func:`gate`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .checkpoint import Checkpoint
from .config import TargetConfig, read_target_config
from .errors import UsageError
from .registry import GateOptions, GateResult, run_gate
from .spec import resolve_reference

# keys only a drafter's config has: a --target-config holding one is the drafter's own config, given by mistake
DRAFTER_KEYS = ("eagle_config", "eagle_aux_hidden_state_layer_ids", "speculators_config", "draft_vocab_size")


def load_target(path: str | os.PathLike, option: str = "--target-config", revision: str | None = None,
                repo: Any = None) -> TargetConfig:
    """The verifier's config.json (a file, or a directory holding one: a checkpoint folder, a Hugging Face cache
    folder, hf://ORG/NAME). Raises UsageError."""
    from .hub import HubRepo, cache_snapshot, is_hub, parse

    if is_hub(path):
        repo = repo or HubRepo(parse(str(path), revision, option))
        ref = repo.ref
        found = repo.file("config.json")
        if found is None:
            raise UsageError(f"{option} {ref}: no config.json in the repository at revision "
                             f"{ref.revision or 'main'} (404)")
        p = found
    else:
        p = cache_snapshot(path, revision) or Path(path)
    try:
        if p.is_dir():
            p = p / "config.json"
        raw = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise UsageError(f"{option} {path}: no such file" + (" (no config.json in the folder)" if Path(path).is_dir()
                                                             else "")) from exc
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise UsageError(f"{option} {str(path)[:200]}: cannot read it as JSON: {type(exc).__name__}: "
                         f"{exc}"[:500]) from exc
    drafter = [k for k in DRAFTER_KEYS if isinstance(raw, dict) and k in raw]
    if drafter:
        raise UsageError(f"{option} {str(path)[:200]}: this is a drafter's config (it has "
                         f"{', '.join(drafter)}), not the verifier's: give the config.json of the target model the "
                         "drafter drafts for")
    try:
        return read_target_config(raw, str(path))
    except ValueError as exc:
        raise UsageError(f"{option} {exc}") from exc


def load_target_checkpoint(path: str | os.PathLike, revision: str | None = None) -> tuple[TargetConfig, Any]:
    """``--target``: the target checkpoint's config.json, and its embed_tokens to be read lazily (a
    :class:`~eagle3_checks.target_embed.TargetEmbedding`). Raises UsageError."""
    from .hub import HubRepo, cache_snapshot, is_hub, parse
    from .target_embed import TargetEmbedding

    if is_hub(path):
        ref = parse(str(path), revision, "--target")
        repo = HubRepo(ref)
        config = load_target(path, "--target", revision, repo)  # resolves the revision the embedding is read at
        return config, TargetEmbedding(str(ref), hub=repo)
    root = cache_snapshot(path, revision) or Path(path)
    if not root.is_dir():
        raise UsageError(f"--target {path}: " + ("not a directory (give the target checkpoint's folder; "
                                                  "--target-config takes a config.json)" if root.exists()
                                                  else "no such file or directory"))
    return load_target(root, "--target"), TargetEmbedding(str(path), root=root)


def load_source(path: str | os.PathLike, revision: str | None = None, download: bool = False) -> Checkpoint:
    """The checkpoint a candidate was converted from (--source). Raises UsageError."""
    from .hub import open_any

    try:
        source = open_any(path, revision=revision, download=download)
    except UsageError as exc:
        raise UsageError(f"--source {exc}") from exc
    if source.problems:
        raise UsageError(f"--source {path}: the source checkpoint has integrity problems "
                         f"({source.problems[0].file}: {source.problems[0].message})")
    return source


def gate_checkpoint(ckpt: Checkpoint, options: GateOptions) -> GateResult:
    reference, note = resolve_reference(options.reference, ckpt)
    target = load_target(options.target_config) if options.target_config else None
    embedding = None
    if options.target:  # --target-config, when given too, is the config that counts
        target_config, embedding = load_target_checkpoint(options.target)
        target = target or target_config
    source = load_source(options.source, download=options.download) if options.source else None
    return run_gate(ckpt, options, reference=reference, reference_note=note, target=target, source=source,
                    target_embedding=embedding)


def gate(path: str | os.PathLike, options: GateOptions | None = None) -> GateResult:
    """Gate the checkpoint at ``path`` (a folder, a Hugging Face cache folder, or hf://ORG/NAME[@REVISION]).
    Raises UsageError (exit 2) for unusable paths or options."""
    from .hub import open_any

    options = options or GateOptions()
    return gate_checkpoint(open_any(path, revision=options.revision, download=options.download), options)
