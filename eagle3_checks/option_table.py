"""The gate's options, one row each. The CLI's arguments (:mod:`eagle3_checks.cli`), the pytest plugin's options and
ini keys (:mod:`eagle3_checks.plugin_options`) and the values the gate validates into its options
(:func:`eagle3_checks.gate.options_from`) are all derived from :data:`OPTIONS`: adding an option is one row (and the
code that reads it). Standard library only: the plugin reads this table at every pytest start.

Help texts name what only the CLI knows without importing the engines (the modelled releases, the default engine, the
aux-id conventions) as ``{releases}``, ``{default_engine}`` and ``{aux_conventions}``: each shell fills them
(:func:`help_text`); ``{levels}``, ``{max_drop}`` and ``{steps}`` are this module's.
"""

from __future__ import annotations

from typing import Any, Literal

from .fast_dataclass import dataclass

# "acceptance" runs only with recorded target states (--data): GateOptions.levels leaves it out without them
LEVELS = ("header", "scan", "forward", "acceptance")
# the share of the trainer reading's acceptance length an engine reading may lose before it fails (--max-drop)
FAIL_SHARE = 0.10
ACCEPT_STEPS = 3  # the draft steps K the acceptance level (and accept) runs

Kind = Literal["value", "list", "flag"]  # one value; repeatable (an ini linelist); on or off
GATE = ("check", "fix", "plugin")  # the shells that gate a checkpoint
PLUGIN = "plugin"


@dataclass(frozen=True)
class Option:
    name: str  # --NAME (CLI), --eagle3-NAME and the ini key eagle3_NAME (plugin; dashes as underscores)
    help: str
    kind: Kind = "value"
    metavar: str | None = None
    default: Any = None  # what the CLI's parser and the gate take when it is not given
    type: Literal["int", "float"] | None = None  # the CLI parser's conversion (the gate converts the plugin's strings)
    choices: str | None = None  # a vocabulary the CLI's parser enforces, by name: "levels" or "aux_conventions"
    path: bool = False  # a path: from an ini file, relative to that file
    commands: tuple[str, ...] = GATE  # the CLI commands that take it, and "plugin"
    gate: bool = True  # one of the values the gate validates into its options
    old: str | None = None  # its deprecated name, still read

    @property
    def field(self) -> str:
        """Its name as a keyword of :func:`eagle3_checks.gate.options_from` and an argparse dest."""
        return self.name.replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option("ckpt", "drafter checkpoint to gate (repeatable): a directory, a Hugging Face cache folder "
           "(models--ORG--NAME) or hf://ORG/NAME[@REVISION]", kind="list", commands=(PLUGIN,), gate=False),
    Option("reference", "reference to diff against (default auto: the shipped spec of the same shape family)",
           metavar="auto|NAME|SPEC.json|CKPT_DIR|hf://ORG/NAME|none", default="auto"),
    Option("target-config", "the verifier's config.json (or its directory, or hf://ORG/NAME)", metavar="PATH",
           path=True, commands=(*GATE, "recipe")),
    Option("target", "the verifier's checkpoint: its config.json (unless --target-config), and its embed_tokens, read "
           "lazily, for the later draft steps of a drafter that ships none (as engines do)",
           metavar="DIR|hf://ORG/NAME", path=True, commands=(*GATE, "recipe")),
    Option("revision", "the branch, tag or commit of a Hugging Face cache folder (models--ORG--NAME) or of an "
           "hf://ORG/NAME without @REV (default main)", metavar="REV",
           commands=(*GATE, "forward", "convert", "recipe", "inspect", "spec", "diff")),
    Option("download", "download an hf:// checkpoint's weights into the Hugging Face cache (the scan and forward "
           "levels need them; without it they are skipped)", kind="flag", default=False,
           commands=(*GATE, "forward", "convert")),
    Option("level", "run checks up to this level (default: every level: header, scan, forward, and acceptance with "
           "--data; header reads headers only): {levels}", choices="levels"),
    Option("strict", "warnings fail too", kind="flag", default=False),
    Option("fail-on", "warnings of these finding codes fail too: codes or prefixes, comma-separated or repeated "
           "(engine.aux-layers,engine.semantics/norm-before-residual; as ruff's --select)", kind="list",
           metavar="CODES"),
    Option("waive", "waive a check or a finding code, with the reason (repeatable): it still runs and its findings "
           "are reported as waived; a per-engine check for one engine or release: engine.aux-layers[vllm]=..., "
           "engine.aux-layers[vllm@0.33.0]=...", kind="list", metavar="CHECK_ID=REASON", default=(), old="skip"),
    Option("engine", "the engine releases to judge (repeatable; default {default_engine}): {releases}; NAME@installed "
           "(vllm, sglang) also runs that installed engine's own config and weight loading on the candidate, on CPU "
           "(engine.live; needs --target-config)", kind="list", metavar="NAME[@VERSION][,...]|all"),
    Option("engine-python", "the interpreter whose engine NAME@installed means (the serving image's python; default: "
           "this one)", metavar="PATH"),
    Option("source", "the checkpoint this one was converted from: the forward level compares the two",
           metavar="SRC", path=True),
    Option("aux-convention", "how the drafter's trainer counted aux-layer ids: {aux_conventions} (default: from who "
           "trained it, when the evidence says)", choices="aux_conventions", commands=(*GATE, "recipe")),
    Option("trainer", "who trained the drafter, when the checkpoint does not say: speculators or specforge, with the "
           "release (default: from the evidence the checkpoint and --source show)", metavar="NAME[@VERSION]"),
    Option("max-model-len", "the context length the drafter will be served with", metavar="N", type="int"),
    Option("tp", "the tensor-parallel size the drafter is served with (engine.serving: heads and KV heads must divide "
           "by it)", metavar="N", commands=(*GATE, "recipe")),
    Option("pp", "the pipeline-parallel size (engine.serving: a drafter embedding when N > 1)", metavar="N",
           commands=(*GATE, "recipe")),
    Option("launch", "the launch settings engine NAME is started with, as JSON (eagle3-checks recipe --format json "
           "writes them): TensorRT-LLM takes the aux layers from them (eagle3_layers_to_capture)", kind="list",
           metavar="NAME=FILE", default=()),
    Option("data", "recorded target states (as accept reads them): runs the acceptance level, each reading's "
           "acceptance over K={steps} draft steps and which semantics the weights were trained with", metavar="DIR",
           path=True),
    Option("max-drop", "an engine reading fails when it loses more than this share of the trainer reading's "
           "acceptance length, from 0 to below 1 (default {max_drop})", metavar="SHARE", type="float",
           default=FAIL_SHARE, commands=(*GATE, "accept")),
    Option("min-acceptance", "warn about a reading whose acceptance length is below LENGTH, from 1 to K+1 (the exit "
           "code is not changed)", metavar="LENGTH", type="float", commands=(*GATE, "accept")),
    Option("loss-mask", "speculators' prepared-data folder (datasets save_to_disk, with input_ids and loss_mask): "
           "only masked-in positions count (needs pyarrow)", metavar="DIR", path=True,
           commands=(*GATE, "accept", "served")),
    Option("loss-mask-start", "the hs_<i> index of its first row (speculators' start file index; default 0)",
           metavar="N", type="int", default=0, commands=(*GATE, "accept", "served")),
    Option("report", "write the report of every checkpoint gated, as the CLI's --format writes it: FORMAT=PATH, "
           "FORMAT one of text, json, markdown, github, sarif (repeatable; sarif=eagle3.sarif for code scanning)",
           kind="list", commands=(PLUGIN,), gate=False),
)
BY_NAME = {o.name: o for o in OPTIONS}
assert len(BY_NAME) == len(OPTIONS), "two options of one name"


def taken_by(shell: str) -> tuple[Option, ...]:
    """The options a CLI command (or "plugin") takes, in the table's order."""
    return tuple(o for o in OPTIONS if shell in o.commands)


def gate_fields() -> tuple[str, ...]:
    """The keywords :func:`eagle3_checks.gate.options_from` takes."""
    return tuple(o.field for o in OPTIONS if o.gate)


def help_text(option: Option, **names: str) -> str:
    """The option's help with what its shell knows filled in (a placeholder it does not know reads as the CLI's)."""
    words = {"releases": "`eagle3-checks check --help` lists the modelled releases", "default_engine": "the CLI's",
             "aux_conventions": "as the CLI's --aux-convention", "levels": ", ".join(LEVELS),
             "max_drop": f"{FAIL_SHARE:g}", "steps": str(ACCEPT_STEPS), **names}
    return option.help.format(**words)
