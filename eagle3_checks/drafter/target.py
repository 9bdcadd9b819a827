"""The target a drafter drafts for, opened in one place: its config.json (``--target-config``: a file, a folder, a
Hugging Face cache folder or hf://ORG/NAME) and its checkpoint (``--target``: the config, and ``embed_tokens`` read
lazily, a row at a time), whatever holds them. :func:`open_target` is what the gate calls, once."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import UsageError
from ..storage.folder import not_there
from ..storage.hub import HubRepo, cache_snapshot, is_hub, parse
from ..storage.target_weights import TargetEmbedding
from .config_values import TargetConfig, read_target_config


def open_target(config: str | os.PathLike | None, checkpoint: str | os.PathLike | None,
                revision: str | None = None) -> tuple[TargetConfig | None, TargetEmbedding | None]:
    """What the gate needs of the target: its config (``config``, else the checkpoint's) and, with a checkpoint, its
    embed_tokens to read lazily. (None, None) when neither is given. Raises UsageError."""
    target = load_target(config, revision=revision) if config else None
    embedding = None
    if checkpoint:  # --target-config, when given too, is the config that counts
        from_checkpoint, embedding = load_target_checkpoint(checkpoint, revision)
        target = target or from_checkpoint
    return target, embedding


# keys only a drafter's config has: a --target-config holding one is the drafter's own config, given by mistake
DRAFTER_KEYS = ("eagle_config", "eagle_aux_hidden_state_layer_ids", "speculators_config", "draft_vocab_size")


def load_target(path: str | os.PathLike, option: str = "--target-config", revision: str | None = None,
                repo: HubRepo | None = None) -> TargetConfig:
    """The verifier's config.json (a file, or a directory holding one: a checkpoint folder, a Hugging Face cache
    folder, hf://ORG/NAME). Raises UsageError."""
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


def load_target_checkpoint(path: str | os.PathLike,
                           revision: str | None = None) -> tuple[TargetConfig, TargetEmbedding]:
    """``--target``: the target checkpoint's config.json, and its embed_tokens to be read lazily (a
    :class:`~eagle3_checks.storage.target_weights.TargetEmbedding`). Raises UsageError."""
    if is_hub(path):
        ref = parse(str(path), revision, "--target")
        repo = HubRepo(ref)
        config = load_target(path, "--target", revision, repo)  # resolves the revision the embedding is read at
        return config, TargetEmbedding(str(ref), hub=repo)
    root = cache_snapshot(path, revision) or Path(path)
    if not root.is_dir():
        raise UsageError(f"--target {path}: " + ("not a directory (give the target checkpoint's folder; "
                                                  "--target-config takes a config.json)" if root.exists()
                                                  else not_there(root)))
    return load_target(root, "--target"), TargetEmbedding(str(path), root=root)
