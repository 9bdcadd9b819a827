"""files: the checkpoint's files exist, parse, and hold every byte their headers promise."""

from __future__ import annotations

from collections.abc import Iterable

from ..registry import Context, Finding, check, error
from ..storage.safetensors import Problem

CONFIG = "config.json"
_WHY = ("safetensors refuses a file like this, and vLLM and SGLang either fail at load or load the drafter "
        "partially")
_WEIGHTS = ("vLLM and SGLang read the weights with safetensors when they start the drafter")


# Why each kind of problem (storage.safetensors.KINDS, said by the reader that finds it) matters: the code is the
# kind, never a word of the message.
_WHY_KIND = {
    "directory": "a directory stands where {what} should be a file: the engine's loader fails to open it (a copy that "
                 "nested a folder, or an unpacked archive)",
    "broken-symlink": "the link points at a file that is gone (a Hugging Face cache whose blob was deleted): the "
                      "engine fails to open it",
    "missing-shard": "the index names a shard that is not here: the engines' loaders stop on the missing file, or the "
                     "drafter loads without the tensors it holds",
    "missing-file": "the engines need this file to load the drafter's weights",
    "truncated": "the file ends before the bytes its header promises (an interrupted copy or upload): safetensors "
                 "refuses it, so the engine fails at load",
    "duplicate-key": "JSON readers keep only the last of two equal keys: the value the engine reads may not be the one "
                     "meant",
    "wrong-format": "this is not the format its name says: loading a pickle runs code, and safetensors refuses it; "
                    "engines fail at load, or run whatever the pickle holds",
    "byte-ranges": "the header's byte ranges do not tile the data: safetensors refuses such a file, and a tensor read "
                   "through it would hold another tensor's bytes",
    "duplicate-tensor": "two shards hold the same tensor: which copy an engine loads depends on the order it reads the "
                        "shards",
    "index-mismatch": "the index and the shards disagree: engines load by the index, so a tensor it does not list is "
                      "never loaded and one it misplaces fails the load",
    "bad-header": f"the safetensors header is malformed: {_WEIGHTS}, and safetensors refuses it",
    "unreadable": "the file cannot be opened here (permissions, a symlink loop): neither can the engine's loader",
    "corrupt": _WHY,
}


def _why(p: Problem) -> tuple[str, str]:
    """The problem's code (its kind) and why it matters, for the file it is in (the readers that found it say what,
    not why)."""
    file = p.file or ""
    config = file == CONFIG
    if p.kind == "config-missing":
        return p.kind, ("engines build the drafter from config.json (its sizes, aux-layer ids, vocabulary): without it "
                        "vLLM and SGLang refuse to load the checkpoint")
    if p.kind == "invalid-json":
        return p.kind, (f"{file or 'the file'} does not parse as the JSON object engines read: they refuse the "
                        "checkpoint" + ("" if not config else "; without a config there is nothing to build the "
                                        "drafter from"))
    return p.kind, _WHY_KIND[p.kind].format(what="config.json" if config else "the weights")


@check(
    "files",
    "Checkpoint files are complete and readable",
    example="truncated",
    guards="Truncated or corrupt safetensors files, a pytorch_model.bin that holds more than plain tensors (code "
    "run when unpickled) or is not torch's zip format, shards missing from a sharded index or named outside the "
    "checkpoint, an unreadable or missing config.json.",
    evidence=("safetensors format: header length, no holes or overlaps, data within the file",),
    fix="re-export or re-copy the checkpoint; keep every shard inside its directory and the index in step with it",
    codes={
        "config-missing": "config.json is missing",
        "directory": "a directory stands where a file should be",
        "broken-symlink": "a symlink points at a file that is gone",
        "missing-shard": "the index names a shard that is not there",
        "missing-file": "a file the checkpoint needs does not exist",
        "truncated": "a file ends before the bytes its header promises",
        "duplicate-key": "a JSON file states one key twice",
        "invalid-json": "config.json or an index is not a JSON object in UTF-8",
        "wrong-format": "a pickle, zip or other format where safetensors (or torch's zip) belongs",
        "byte-ranges": "a header's byte ranges overlap, leave holes or run past the data",
        "duplicate-tensor": "two shards hold the same tensor",
        "index-mismatch": "the index and the shards disagree",
        "bad-header": "a malformed safetensors header (dtype, shape, offsets)",
        "unreadable": "a file cannot be opened (permissions, a symlink loop)",
        "corrupt": "any other integrity problem of a file",
    },
)
def files(ctx: Context) -> Iterable[Finding]:
    for p in ctx.ckpt.problems:
        yield problem_finding(p)


def problem_finding(p: Problem) -> Finding:
    """A problem the readers found in a file, as the files check reports it (its code's slug in ``code``): the
    ``diff`` command reports each side's problems with the same codes."""
    where = f" (byte {p.offset})" if p.offset is not None else ""
    code, why = _why(p)
    return error(
        f"{p.file}{where}: {p.message}",
        code=code,
        file=p.file,
        key=p.key,
        expected=p.expected,
        found=p.found,
        why=p.why or why,
        fix=p.fix or "re-export or re-copy the checkpoint from its source",
        offset=p.offset,
    )
