"""``eagle3-checks recipe``: the launch that serves a drafter as trained on one engine release, with its
preconditions checked.

The launch is built from the facts of :mod:`eagle3_checks.engines.launch` (the ones ``engine.serving`` checks), for
the layers the drafter was trained on (TensorRT-LLM takes them at launch, as its own ids); then the gate judges the
drafter on that release with those launch settings. The recipe passes when the gate finds no error for that release
and every precondition holds: what it prints then serves the drafter as trained.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Any

from . import engines
from .drafter.checkpoint import Checkpoint
from .engines.launch import Launch, Request, unmet
from .errors import UsageError
from .fast_dataclass import dataclass
from .gate import GateResult, gate_checkpoint, open_target
from .options import GateOptions
from .registry import Finding, Severity
from .storage.hub import is_repo_id


@dataclass
class Recipe:
    spec: str  # the release judged, NAME@VERSION
    launch: Launch
    result: GateResult  # the gate's verdict on the drafter, for this release, with these launch settings
    unknown_layers: str | None  # why the trained layers are unknown (None: known)
    target: str = "TARGET"  # the target as the commands name it
    target_note: str | None = None  # where that name comes from, or what the TARGET placeholder stands for

    @property
    def findings(self) -> list[Finding]:
        """The release's errors: the gate's (for this release and the engine-independent ones) and each unmet
        precondition of the launch."""
        avoided = {f"engine.serving/{p.code}" for p in self.launch.problems if p.remedied}
        own = [f for r in self.result.results if r.engine in (None, self.spec) for f in r.findings
               if f.severity is Severity.ERROR and f.code not in avoided]
        return own + [Finding(Severity.ERROR, p.message, check="recipe", code=f"recipe/{p.code}", key=p.key,
                              expected=p.expected, found=p.found, why=p.why, fix=p.fix)
                      for p in unmet(self.launch) if not any(f.code == f"engine.serving/{p.code}" for f in own)]

    @property
    def passed(self) -> bool:
        return not self.findings

    def as_dict(self) -> dict[str, Any]:
        return {"schema_version": 1, "engine": self.spec, "commands": self.launch.commands,
                "launch": self.launch.settings, "notes": self.launch.notes, "target": self.target,
                **({"target_note": self.target_note} if self.target_note else {}), "passed": self.passed,
                "findings": [{"check": f.check, "code": f.code, "message": f.message, "key": f.key,
                              "expected": f.expected, "found": f.found, "why": f.why, "fix": f.fix}
                             for f in self.findings]}


def recipe(ckpt: Checkpoint, drafter: str, engine: str, options: GateOptions, tokens: int = 3) -> Recipe:
    """The launch of ``drafter`` (as the user names it in the commands) on release ``engine`` (NAME or
    NAME@VERSION, one release). Raises UsageError."""
    specs = engines.resolve(engine).specs
    if len(specs) != 1:
        raise UsageError(f"--engine {engine!r}: a recipe is for one engine release, not {len(specs)}")
    spec = specs[0]
    name = spec.split("@", 1)[0]
    if engines.profile(spec).launch is None:
        launched = dict.fromkeys(p.name for p in engines.PROFILES if p.launch)
        raise UsageError(f"--engine {engine!r}: {name} is not launched (it trains); choose one of "
                         f"{', '.join(launched)}")
    if tokens < 1:
        raise UsageError(f"--num-speculative-tokens {tokens}: at least 1")
    profile = engines.profile(spec)
    config = _target_config(options)
    target = engines.target_of(ckpt, config)
    trained = engines.trained_aux(ckpt, options.aux_convention, target)
    launch_ids = None
    unknown = None
    if profile.launch_ids:
        if trained.layers is None:
            unknown = trained.how
        else:
            ids = profile.ids_for(trained.layers, target)
            launch_ids = ids if ids is not None and engines.reaches(profile, ids, trained.layers, target) else None
    where, where_note = _target_name(options, config, ckpt)
    trainer = engines.trainer(ckpt)
    window = trainer.window()  # the trained window, for a release that takes it at launch
    full = window is not None and len(window[1]) == trainer.num_layers
    request = Request(drafter, where, tokens, options.tensor_parallel or 1, options.pipeline_parallel or 1,
                      launch_ids, window[0] if window and full else None, window is not None and not full)
    reading = engines.read(ckpt, spec, config)
    assert profile.launch is not None  # refused above
    launch = profile.launch(reading, request)
    gated = replace(options, engine=(spec,), engine_notes=("named",), optional_engines=(), level="header",
                    launch=((name, json.dumps(launch.settings)),))
    return Recipe(spec, launch, gate_checkpoint(ckpt, gated), unknown, where, where_note)


def _folder(config: str | None) -> str | None:
    """The target checkpoint's folder, as named in the commands: --target-config's folder (the file's, or itself);
    None for a file in the current folder, which says nothing of where the target is."""
    if not config:
        return None
    if os.path.isdir(config):
        return config
    folder = os.path.dirname(config)
    try:
        here = not folder or os.path.samefile(folder, os.curdir)
    except OSError:
        here = False
    return None if here else folder


def _usable(name: Any) -> bool:
    """A name an engine can load the target from: a folder here, or a Hub repository id."""
    return isinstance(name, str) and bool(name) and (os.path.isdir(name) and not os.path.samefile(name, os.curdir)
                                                    or is_repo_id(name) and not os.path.exists(name))


def _target_name(options: GateOptions, config: Any, ckpt: Checkpoint) -> tuple[str, str | None]:
    """How the commands name the target, and a note where that is not --target or --target-config's folder: the
    verifier the config names (its _name_or_path), else the one the drafter names (speculators_config.verifier),
    else the placeholder TARGET, which the note explains. A --target-config file in the current folder names no
    folder: the commands used to say ``vllm serve .``."""
    if options.target:
        return options.target, None
    folder = _folder(options.target_config)
    if folder:
        return folder, None
    spec = (ckpt.config_raw or {}).get("speculators_config")
    verifier = spec.get("verifier") if isinstance(spec, dict) else None
    named = [(getattr(config, "name_or_path", None), f"{options.target_config}'s _name_or_path"),
             (verifier.get("name_or_path") if isinstance(verifier, dict) else None,
              "the drafter's speculators_config.verifier.name_or_path")]
    for name, where in named:
        if _usable(name):
            return str(name), f"the target is named as {where} names it"
    why = (f"--target-config {options.target_config} is a file in the current folder, which says nothing of where "
           "the target is" if options.target_config else "no --target or --target-config names the target")
    return "TARGET", (f"TARGET stands for the target model (its Hub id or folder): {why}, and neither "
                      "_name_or_path in its config nor speculators_config.verifier.name_or_path in the drafter's "
                      "names one; pass --target DIR|hf://ORG/NAME to name it")


def _target_config(options: GateOptions) -> Any:
    """The verifier's config, as the gate reads it (--target-config, else --target's config.json)."""
    return open_target(options.target_config, options.target, options.revision)[0]
