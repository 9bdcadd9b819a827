"""The gate's options, each declared once: a field of :class:`GateOptions` is its row (name, kind, help, default, the
CLI commands that take it, whether it is a path), as ruff declares its settings on the struct that holds them. The
CLI's arguments (:mod:`eagle3_checks.cli`), the pytest plugin's options and ini keys
(:mod:`eagle3_checks.plugin_options`) and the values the gate validates into its options
(:func:`eagle3_checks.gate.options_from`) are all derived from :data:`OPTIONS`: adding an option is one field (and
the code that reads it). Standard library only: the plugin reads this module at every pytest start.

Three words, one meaning each: a *waiver* (``--waive CHECK_OR_CODE=REASON``) still runs its check and reports the
findings it matches as waived; an *omitted* check (:attr:`GateOptions.omit`) is not run at all; a *skipped* result
is a check that did not run (omitted, not applicable, or its level's requirement missing), with the reason.

Help texts name what only the CLI knows without importing the engines (the modelled releases, the default engine, the
aux-id conventions) as ``{releases}``, ``{default_engine}`` and ``{aux_conventions}``: each shell fills them
(:func:`help_text`); ``{levels}``, ``{max_drop}`` and ``{steps}`` are this module's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from .errors import UsageError
from .fast_dataclass import dataclass

# "acceptance" runs only with recorded target states (--data): GateOptions.levels leaves it out without them
LEVELS = ("header", "scan", "forward", "acceptance")
# the share of the trainer reading's acceptance length an engine reading may lose before it fails (--max-drop)
FAIL_SHARE = 0.10
ACCEPT_STEPS = 3  # the draft steps K the acceptance level (and accept) runs
# The acceptance level's resolver (acceptance/resolve.py) decides which of its candidates the weights were trained
# with when the best one's gain over the runner-up, in the acceptance length or (with the target's distribution) in
# alpha, has a 95% interval over the sequences that excludes zero and is at least DECIDE_GAIN, the minimum effect;
# else "undecided". Measured on the project's trained tiny drafters (tests/peers/train_world.py): a wrong rope base
# costs 0.03-0.14, a flipped norm_before_residual 0.13-1.7, a wrong norm_output 0.08-1.5, fc's aux blocks permuted
# 0.02-0.35; an untrained drafter moves by at most 0.004.
DECIDE_GAIN = 0.01
# A drafter "accepts nothing" when its acceptance length, read as trained, is at or below 1 + NOTHING: fewer than one
# accepted draft token in 20 draft rounds. An error of acceptance.figures (and accept exits 1), whatever
# --min-acceptance says (that sets a warning above it).
NOTHING = 0.05
# The share of the data's labels the draft vocabulary must express before acceptance.figures warns: every label
# outside it is a miss whatever the drafter computes (a d2t built from another distribution; SpecForge PR #534).
MIN_COVERAGE = 0.90

Kind = Literal["value", "list", "flag"]  # one value; repeatable (an ini linelist); on or off
GATE = ("check", "fix", "plugin")  # the shells that gate a checkpoint
PLUGIN = "plugin"
ROW = "option"  # the metadata key of a GateOptions field that is an option


@dataclass(frozen=True)
class Option:
    name: str  # --NAME (CLI), --eagle3-NAME and the ini key eagle3_NAME (plugin; dashes as underscores)
    help: str
    kind: Kind = "value"
    metavar: str | None = None
    default: Any = None  # what the CLI's parser and the gate take when it is not given (the field's default)
    type: Literal["int", "float"] | None = None  # the conversion of the CLI's parser and of the gate (plugin strings)
    choices: str | None = None  # a vocabulary the CLI's parser and the gate enforce, by name: "levels" or
    # "aux_conventions"
    expects: str | None = None  # what a valid value is, as a usage error says it (a number's, with its minimum)
    minimum: int | None = None  # the least value a number takes
    path: bool = False  # a path: from an ini file, relative to that file
    commands: tuple[str, ...] = GATE  # the CLI commands that take it, and "plugin"
    gate: bool = True  # one of the values the gate validates into its options (a GateOptions field)
    old: str | None = None  # its deprecated name, still read

    @property
    def field(self) -> str:
        """Its name as a keyword of :func:`eagle3_checks.gate.options_from` and an argparse dest."""
        return self.name.replace("-", "_")

    def number(self, value: Any) -> int | float:
        """A number option's value (``type``), at least ``minimum``: the CLI's parser and the gate convert with it,
        so that a bad value reads the same from any shell. Raises UsageError naming the option."""
        try:
            number = int(value) if self.type == "int" else float(value)
        except (TypeError, ValueError):
            raise UsageError(f"--{self.name} {value!r}: {self.expects or 'a number'}") from None
        if self.minimum is not None and number < self.minimum:
            raise UsageError(f"--{self.name} {number:g}: {self.expects or f'at least {self.minimum}'}")
        return number


def option(name: str, help: str, **row: Any) -> Any:
    """A :class:`GateOptions` field that is an option: its default is the row's, and the row rides in its metadata."""
    o = Option(name, help, **row)
    return dataclasses.field(default=o.default, metadata={ROW: o})


@dataclass(frozen=True)
class GateOptions:
    """Options every shell shares. Plain values only, so they serialize (pytest-xdist). A field made by
    :func:`option` is an option of every shell that its row names; the others are derived by the gate."""

    reference: str = option(
        "reference", "reference to diff against (default auto: the shipped spec of the same shape family)",
        metavar="auto|NAME|SPEC.json|CKPT_DIR|hf://ORG/NAME|none", default="auto")
    target_config: str | None = option(
        "target-config", "the verifier's config.json (or its directory, or hf://ORG/NAME)", metavar="PATH",
        path=True, commands=(*GATE, "recipe"))
    target: str | None = option(  # the target checkpoint (a folder or hf://): its config.json and embed_tokens
        "target", "the verifier's checkpoint: its config.json (unless --target-config), and its embed_tokens, read "
        "lazily, for the later draft steps of a drafter that ships none (as engines do)",
        metavar="DIR|hf://ORG/NAME", path=True, commands=(*GATE, "recipe"))
    revision: str | None = option(  # for Hugging Face cache folders and hf:// names without @REVISION
        "revision", "the branch, tag or commit of a Hugging Face cache folder (models--ORG--NAME) or of an "
        "hf://ORG/NAME without @REV (default main)", metavar="REV",
        commands=(*GATE, "forward", "convert", "recipe", "inspect", "spec", "diff"))
    download: bool = option(  # fetch a Hub checkpoint's weights into the Hugging Face cache (scan, forward levels)
        "download", "download an hf:// checkpoint's weights into the Hugging Face cache (the scan and forward "
        "levels need them; without it they are skipped)", kind="flag", default=False,
        commands=(*GATE, "forward", "convert"))
    level: str | None = option(  # None: every level the project has
        "level", "run checks up to this level (default: every level: header, scan, forward, and acceptance with "
        "--data; header reads headers only): {levels}", choices="levels")
    strict: bool = option("strict", "warnings fail too", kind="flag", default=False)
    # --fail-on: the finding codes (or their prefixes: a check id, "engine") whose warnings fail the gate as errors do,
    # as ruff's --select picks rules; --strict is every code
    fail_on: tuple[str, ...] = option(
        "fail-on", "warnings of these finding codes fail too: codes or prefixes, comma-separated or repeated "
        "(engine.aux-layers,engine.semantics/norm-before-residual; as ruff's --select)", kind="list",
        metavar="CODES", default=())
    # --waive: (target, reason); a target is a check id or a finding code, optionally for one engine
    # (``vocab.d2t``, ``engine.loads[vllm]``, ``engine.loads/narrowed[vllm@0.33.0]``). The check still runs: the
    # findings a waiver matches are reported as waived, and a waiver that matches nothing as stale.
    waive: tuple[tuple[str, str], ...] = option(
        "waive", "waive a check or a finding code, with the reason (repeatable): it still runs and its findings "
        "are reported as waived; a per-engine check for one engine or release: engine.aux-layers[vllm]=..., "
        "engine.aux-layers[vllm@0.33.0]=...", kind="list", metavar="CHECK_ID=REASON", default=(), old="skip")
    # the engine releases per-engine checks judge ("vllm@0.33.0", ...; see engines.resolve)
    engine: tuple[str, ...] = option(
        "engine", "the engine releases to judge (repeatable; default {default_engine}): {releases}; NAME@installed "
        "(vllm, sglang) also runs that installed engine's own config and weight loading on the candidate, on CPU "
        "(engine.live; needs --target-config)", kind="list", metavar="NAME[@VERSION][,...]|all", default=())
    # the interpreter whose NAME@installed is judged live (as given: the gate resolves it into `live`)
    engine_python: str | None = option(
        "engine-python", "the interpreter whose engine NAME@installed means (the serving image's python; default: "
        "this one)", metavar="PATH")
    source: str | None = option(  # the checkpoint the candidate was converted from
        "source", "the checkpoint this one was converted from: the forward level compares the two", metavar="SRC",
        path=True)
    aux_convention: str | None = option(  # how the drafter's trainer counted aux ids: vllm or sglang
        "aux-convention", "how the drafter's trainer counted aux-layer ids: {aux_conventions} (default: from who "
        "trained it, when the evidence says)", choices="aux_conventions", commands=(*GATE, "recipe"))
    trainer: str | None = option(  # --trainer NAME[@VERSION]: who trained the drafter, as the user states it
        "trainer", "who trained the drafter, when the checkpoint does not say: speculators or specforge, with the "
        "release (default: from the evidence the checkpoint and --source show)", metavar="NAME[@VERSION]")
    max_model_len: int | None = option(  # the context the drafter will be served with
        "max-model-len", "the context length the drafter will be served with", metavar="N", type="int",
        expects="a positive number of tokens", minimum=1)
    tensor_parallel: int | None = option(  # the tensor-parallel size the target (and drafter) is served with
        "tp", "the tensor-parallel size the drafter is served with (engine.serving: heads and KV heads must divide "
        "by it)", metavar="N", type="int", expects="a positive number of GPUs", minimum=1,
        commands=(*GATE, "recipe"))
    pipeline_parallel: int | None = option(  # the pipeline-parallel size
        "pp", "the pipeline-parallel size (engine.serving: a drafter embedding when N > 1)", metavar="N", type="int",
        expects="a positive number of GPUs", minimum=1, commands=(*GATE, "recipe"))
    # --launch NAME=FILE: the launch settings a release is started with, as JSON text per engine name (TensorRT-LLM
    # takes the aux layers from its launch, eagle3_layers_to_capture, not from the drafter's config)
    launch: tuple[tuple[str, str], ...] = option(
        "launch", "the launch settings engine NAME is started with, as JSON (eagle3-checks recipe --format json "
        "writes them): TensorRT-LLM takes the aux layers from them (eagle3_layers_to_capture)", kind="list",
        metavar="NAME=FILE", default=())
    # the acceptance level: recorded target states (a folder, as accept reads it), the share of the trainer
    # reading's acceptance length an engine reading may lose, and the length below which a reading is warned about
    data: str | None = option(
        "data", "recorded target states (as accept reads them): runs the acceptance level, each reading's "
        "acceptance over K={steps} draft steps and which semantics the weights were trained with", metavar="DIR",
        path=True)
    max_drop: float = option(
        "max-drop", "an engine reading fails when it loses more than this share of the trainer reading's "
        "acceptance length, from 0 to below 1 (default {max_drop})", metavar="SHARE", type="float",
        expects="a share from 0 to below 1 (0.1 is 10%)", default=FAIL_SHARE, commands=(*GATE, "accept"))
    min_acceptance: float | None = option(
        "min-acceptance", "warn about a reading whose acceptance length is below LENGTH, from 1 to K+1 (the exit "
        "code is not changed)", metavar="LENGTH", type="float", expects="an acceptance length from 1 to K+1",
        commands=(*GATE, "accept"))
    loss_mask: str | None = option(  # speculators' prepared-data folder, for its loss masks
        "loss-mask", "speculators' prepared-data folder (datasets save_to_disk, with input_ids and loss_mask): "
        "only masked-in positions count (needs pyarrow)", metavar="DIR", path=True,
        commands=(*GATE, "accept", "served"))
    loss_mask_start: int = option(  # the hs_<i> index of its first row
        "loss-mask-start", "the hs_<i> index of its first row (speculators' start file index; default 0)",
        metavar="N", type="int", expects="an hs_<i> index", minimum=0, default=0,
        commands=(*GATE, "accept", "served"))

    # derived by the gate (gate.options_from), or set by the shell that runs it: no option of their own
    engine_notes: tuple[str, ...] = ()  # why each release of `engine` is judged
    # releases only `--engine all` brought in: a layout such a release does not read is not applicable to it, and
    # fails the gate only when no release in the set reads the checkpoint (or under --strict)
    optional_engines: tuple[str, ...] = ()
    # releases judged live (--engine NAME@installed): (the release, e.g. "vllm@0.33.0", the interpreter whose engine
    # records the candidate: --engine-python, else the gate's own)
    live: tuple[tuple[str, str], ...] = ()
    # checks omitted: not run at all, with the reason (the converter's own verification: scan.values reads every
    # byte); their results say skipped, with it
    omit: tuple[tuple[str, str], ...] = ()
    progress: bool = False  # show progress on a terminal (long scans)

    def fails(self, code: str) -> bool:
        """A warning of ``code`` fails the gate (--strict, or a --fail-on prefix of it)."""
        return self.strict or any(code.startswith(p) for p in self.fail_on)

    @property
    def waivers(self) -> dict[str, str]:
        """Each waived target and its reason."""
        return dict(self.waive)

    def launch_for(self, spec: str) -> dict | None:
        """The launch settings given for the engine of release ``spec`` (NAME@VERSION), or None."""
        import json

        name = spec.split("@", 1)[0]
        text = dict(self.launch).get(name)
        return json.loads(text) if text else None

    def engines(self) -> tuple[str, ...]:
        """The releases judged: ``engine``, else the default engine's (options made without the gate's parsing)."""
        from .engines import resolve

        return self.engine or resolve(None)[0]

    def levels(self) -> tuple[str, ...]:
        """The levels that run: up to ``level`` (default all), the acceptance level only with ``data``."""
        levels = LEVELS if self.level is None else LEVELS[: LEVELS.index(self.level) + 1]
        return levels if self.data else tuple(lv for lv in levels if lv != "acceptance")


# The gate's options: (the GateOptions field, its row), in the fields' order.
GATE_ROWS: tuple[tuple[str, Option], ...] = tuple(
    (f.name, f.metadata[ROW]) for f in dataclasses.fields(GateOptions) if ROW in f.metadata)

# Options of one shell that the gate never sees: the plugin's checkpoints and report files.
CKPT = Option("ckpt", "drafter checkpoint to gate (repeatable): a directory, a Hugging Face cache folder "
              "(models--ORG--NAME) or hf://ORG/NAME[@REVISION]", kind="list", commands=(PLUGIN,), gate=False)
REPORT = Option("report", "write the report of every checkpoint gated, as the CLI's --format writes it: "
                "FORMAT=PATH, FORMAT one of text, json, markdown, github, sarif (repeatable; sarif=eagle3.sarif for "
                "code scanning)", kind="list", commands=(PLUGIN,), gate=False)

OPTIONS: tuple[Option, ...] = (CKPT, *(o for _, o in GATE_ROWS), REPORT)
BY_NAME = {o.name: o for o in OPTIONS}
assert len(BY_NAME) == len(OPTIONS), "two options of one name"


def taken_by(shell: str) -> tuple[Option, ...]:
    """The options a CLI command (or "plugin") takes, in the table's order."""
    return tuple(o for o in OPTIONS if shell in o.commands)


def gate_fields() -> tuple[str, ...]:
    """The keywords :func:`eagle3_checks.gate.options_from` takes."""
    return tuple(o.field for _, o in GATE_ROWS)


def help_text(option: Option, **names: str) -> str:
    """The option's help with what its shell knows filled in (a placeholder it does not know reads as the CLI's)."""
    words = {"releases": "`eagle3-checks check --help` lists the modelled releases", "default_engine": "the CLI's",
             "aux_conventions": "as the CLI's --aux-convention", "levels": ", ".join(LEVELS),
             "max_drop": f"{FAIL_SHARE:g}", "steps": str(ACCEPT_STEPS), **names}
    return option.help.format(**words)
