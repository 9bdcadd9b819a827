"""files: the checkpoint's files exist, parse, and hold every byte their headers promise."""

from __future__ import annotations

from typing import Iterable

from ..registry import Context, Finding, check, error

_WHY = ("safetensors refuses a file like this, and vLLM and SGLang either fail at load or load the drafter "
        "partially; a missing or broken config leaves them nothing to build the drafter from")


@check(
    "files",
    "Checkpoint files are complete and readable",
    guards="Truncated or corrupt safetensors files, a pytorch_model.bin that holds more than plain tensors (code "
    "run when unpickled) or is not torch's zip format, shards missing from a sharded index or named outside the "
    "checkpoint, an unreadable or missing config.json.",
    evidence=("safetensors format: header length, no holes or overlaps, data within the file",),
    fix="re-export or re-copy the checkpoint; keep every shard inside its directory and the index in step with it",
)
def files(ctx: Context) -> Iterable[Finding]:
    for p in ctx.ckpt.problems:
        where = f" (byte {p.offset})" if p.offset is not None else ""
        yield error(
            f"{p.file}{where}: {p.message}",
            file=p.file,
            key=p.key,
            expected=p.expected,
            found=p.found,
            why=p.why or _WHY,
            fix=p.fix or "re-export or re-copy the checkpoint from its source",
        )
