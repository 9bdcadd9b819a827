"""Small helpers shared by the checks."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .. import engines, live
from ..drafter.checkpoint import Checkpoint
from ..drafter.config_values import DraftConfig, TargetConfig
from ..drafter.spec import Spec
from ..engines.reading import Reading
from ..live import verdict
from ..registry import CONFIG, Context, NotApplicable

__all__ = ["CONFIG"]  # the checks name the config file through here


def config_of(ctx: Context) -> DraftConfig:
    """The effective config, or skip the check when config.json is unreadable."""
    cfg = ctx.ckpt.config
    if cfg is None:
        raise NotApplicable("config.json is missing or unreadable (see the files check)")
    return cfg


def identity_of(ctx: Context) -> engines.trainers.Identity:
    """Who trained the drafter, from the evidence this run has (the checkpoint, --source, --trainer), once a run."""
    if "identity" not in ctx.cache:
        ctx.cache["identity"] = engines.identify(ctx.ckpt, ctx.source, ctx.options.trainer if ctx.options else None)
    return ctx.cache["identity"]


def trained_of(ctx: Context) -> engines.trainers.Trained:
    """What the drafter was trained to compute: the reading the checks judge against and the others the evidence
    leaves possible, once a run."""
    if "trained" not in ctx.cache:
        ctx.cache["trained"] = engines.trained(ctx.ckpt, identity_of(ctx))
    return ctx.cache["trained"]


def require_complete(ctx: Context) -> None:
    """Skip a check that needs the whole tensor list when a header or shard could not be read."""
    if not ctx.ckpt.complete:
        raise NotApplicable("the tensor list is incomplete: a header or shard could not be read (see the files check)")


def target_of(ctx: Context) -> TargetConfig:
    """The verifier's config, for a check that declares ``needs=("target",)`` (the gate skips it without one)."""
    if ctx.target is None:
        raise NotApplicable("no target config (--target-config or --target)")
    return ctx.target


def reference_of(ctx: Context) -> Spec:
    """The reference spec, for a check that declares ``needs=("reference",)`` (the gate skips it without one)."""
    if ctx.reference is None:
        raise NotApplicable("no reference spec (--reference)")
    return ctx.reference


def draft_rows(ckpt: Checkpoint) -> set[int]:
    """The draft vocabulary's size as the tensors hold it: the rows of lm_head and of d2t (one value where they agree,
    none without either)."""
    return {shape[0] for role in ("lm_head.weight", "d2t") if (shape := ckpt.shape(role))}


def config_key(cfg: DraftConfig, name: str) -> str:
    """The key path a field has (or would have) in config.json, for findings."""
    v = cfg.entry(name)
    if v is not None and v.key is not None:
        return v.key
    if cfg.layout == "speculators" and name in {"hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                                                 "intermediate_size", "num_hidden_layers", "vocab_size", "rms_norm_eps",
                                                 "max_position_embeddings", "attention_bias", "mlp_bias", "model_type"}:
        return f"transformer_layer_config.{name}"
    if name == "aux_layer_ids":
        return "eagle_aux_hidden_state_layer_ids" if cfg.layout == "speculators" else \
            "eagle_config.eagle_aux_hidden_state_layer_ids"
    return name


def pointer(key: str) -> str:
    """A dotted config key as a JSON pointer, for a fix as data: eagle_config.norm_before_fc -> /eagle_config/..."""
    return "/" + key.replace("~", "~0").replace("/", "~1").replace(".", "/")


NOT_APPLICABLE = "not applicable"  # the reason's start, for a release --engine all brought in that cannot read it


def unread_layout(ctx: Context, reading: Reading) -> str | None:
    """Why a release that does not read the checkpoint's layout is not applicable here, or None when it must be
    judged: it was named (not only brought in by ``--engine all``), ``--strict`` is on, or no release in the set
    reads the checkpoint."""
    options = ctx.options
    if builds_drafter(reading) or options is None or options.strict or ctx.engine not in options.optional_engines:
        return None
    if not any(builds_drafter(served(ctx, spec)) for spec in options.engines()):
        return None
    what = f"the {ctx.ckpt.layout} layout" if not reading.layout_ok else f"architectures {reading.architecture!r}"
    return (f"{NOT_APPLICABLE}: {reading.engine} {reading.version} does not read {what} "
            f"(--engine all judges the releases that read it; name {ctx.engine} to require it)")


def served(ctx: Context, spec: str, modelled: bool = False) -> Reading:
    """Release ``spec``'s reading of the checkpoint, beside the target and with the launch settings given. For a
    release judged live (--engine NAME@installed), what the installed engine's own recording showed replaces the
    profile's predictions (live.verdict), unless ``modelled``: the profile's reading alone (engine.live compares it
    with the recording)."""
    reading = engines.read(ctx.ckpt, spec, served_target(ctx), ctx.options.launch_for(spec) if ctx.options else None)
    if modelled or ctx.options is None or spec not in dict(ctx.options.live):
        return reading
    key = ("live-verdict", spec)
    if key not in ctx.cache:
        got = live_recording(ctx, spec)
        serving = engines.profile(spec).serving
        limit = serving(reading, ctx.options.max_model_len, ctx.target) if serving else None
        ctx.cache[key] = reading if isinstance(got, live.CannotJudge) else \
            verdict.corrected(reading, got.record, limit)
    return ctx.cache[key]


def served_target(ctx: Context) -> TargetConfig | None:
    """The target as the engine serves it: started with a context of its own (--max-model-len), that is the target's
    max_model_len, which vLLM raises a plain-RoPE draft's max_position_embeddings to (0.33.0
    config/speculative.py:1807-1846; the live conformance suite found the gate raising it to the target's own
    context instead) and the context SGLang checks the draft against."""
    if ctx.target is None or ctx.options is None or not ctx.options.max_model_len:
        return ctx.target
    return dataclasses.replace(ctx.target, max_position_embeddings=ctx.options.max_model_len)


# checks/_own.py's live_run, registered at its import: at the forward level it records the load with the compute
LOADED_BY_COMPUTE: list[Callable[[Context, str], Any]] = []


def live_recording(ctx: Context, spec: str) -> live.Live | live.CannotJudge:
    """The installed release's own recording of the candidate, made once per gate run (or why there is none)."""
    key = ("live", spec)
    for run in LOADED_BY_COMPUTE:  # at the forward level, one engine run records the load and the compute
        run(ctx, spec)
    if key not in ctx.cache:
        python = dict(ctx.options.live)[spec] if ctx.options else ""
        target = live_target_config(ctx)
        if ctx.ckpt.source.weights_elsewhere or not target or not os.path.isfile(target):
            why = ctx.ckpt.source.weights_elsewhere or "--target-config is not a local file"
            ctx.cache[key] = live.CannotJudge(f"the engine loads a local checkpoint and target config: {why}")
        else:
            try:
                with _as_read(ctx) as folder:
                    ctx.cache[key] = live.record(spec.split("@", 1)[0], python, folder, Path(target),
                                                 ctx.options.max_model_len if ctx.options else None)
            except live.CannotJudge as exc:
                ctx.cache[key] = exc
    return ctx.cache[key]


def live_target_config(ctx: Context) -> str | None:
    """The target config an installed engine is served beside: --target-config, else the config.json of a local
    --target folder."""
    options = ctx.options
    if options is None:
        return None
    if options.target_config:
        return options.target_config
    folder = Path(options.target) if options.target and not str(options.target).startswith("hf://") else None
    return str(folder / "config.json") if folder is not None and (folder / "config.json").is_file() else None


@contextlib.contextmanager
def _as_read(ctx: Context) -> Iterator[Path]:
    """The folder the engine is to load: the checkpoint's own, or, where the gate reads a config that is not the one
    on disk (fix judging its patched config), a temporary folder with that config beside links to the files."""
    folder = Path(ctx.ckpt.source.path)
    try:
        on_disk = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        on_disk = None
    if ctx.ckpt.config_raw is None or ctx.ckpt.config_raw == on_disk:
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix="eagle3-live-config-") as tmp:
        patched = Path(tmp) / folder.name
        patched.mkdir()
        for f in folder.iterdir():
            if f.is_file() and f.name != "config.json":
                (patched / f.name).symlink_to(f.resolve())
        (patched / "config.json").write_text(json.dumps(ctx.ckpt.config_raw), encoding="utf-8")
        yield patched


def builds_drafter(reading: Reading) -> bool:
    """The release reads the layout and builds an EAGLE-3 drafter class from the architectures."""
    return reading.layout_ok and not reading.class_refusal


def release(ctx: Context) -> str:
    """The engine release a per-engine check judges (``ctx.engine``, which the gate sets for each of them)."""
    assert ctx.engine is not None, "a per-engine check ran without an engine release"
    return ctx.engine


def engine_captures(ctx: Context) -> dict[str, tuple[str, list[int], tuple[int, ...] | None]]:
    """For each selected release that reads the layout and finds aux ids: (the field it read, the ids, the target
    layers it captures from them, None when that depends on the target). config.aux-layers and every
    engine.aux-layers compare the same captures."""
    target = engines.target_of(ctx.ckpt, ctx.target)
    out = {}
    for spec in (ctx.options.engines() if ctx.options else ()):
        reading = served(ctx, spec)
        if reading.layout_ok and not reading.not_modelled and reading.aux_layer_ids:
            out[spec] = (reading.keys["aux_layer_ids"], reading.aux_layer_ids,
                         engines.profile(spec).capture(reading.aux_layer_ids, target).layers)
    return out
