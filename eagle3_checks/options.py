"""The options every shell shares (the CLI, the pytest plugin, convert, fix): plain values, below the registry, so
that what a check sees (:class:`eagle3_checks.registry.Context`) is typed with them.

Three words, one meaning each: a *waiver* (``--waive CHECK_OR_CODE=REASON``) still runs its check and reports the
findings it matches as waived; an *omitted* check (:attr:`GateOptions.omit`) is not run at all; a *skipped* result
is a check that did not run (omitted, not applicable, or its level's requirement missing), with the reason.
Validating option values needs the registered checks: :func:`eagle3_checks.gate.options_from` (the options themselves:
:data:`eagle3_checks.option_table.OPTIONS`).
"""

from __future__ import annotations

from .engines import resolve as resolve_engines
from .fast_dataclass import dataclass
from .option_table import ACCEPT_STEPS, FAIL_SHARE, LEVELS  # noqa: F401 (the options' own facts, shared here)

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


@dataclass(frozen=True)
class GateOptions:
    """Options every shell shares. Plain values only, so they serialize (pytest-xdist)."""

    reference: str = "auto"
    target_config: str | None = None
    target: str | None = None  # the target checkpoint (a folder or hf://): its config.json and embed_tokens
    revision: str | None = None  # for Hugging Face cache folders and hf:// names without @REVISION
    download: bool = False  # fetch a Hub checkpoint's weights into the Hugging Face cache (scan, forward levels)
    level: str | None = None  # None: every level the project has
    strict: bool = False
    # --fail-on: the finding codes (or their prefixes: a check id, "engine") whose warnings fail the gate as errors do,
    # as ruff's --select picks rules; --strict is every code
    fail_on: tuple[str, ...] = ()

    def fails(self, code: str) -> bool:
        """A warning of ``code`` fails the gate (--strict, or a --fail-on prefix of it)."""
        return self.strict or any(code.startswith(p) for p in self.fail_on)
    # --waive: (target, reason); a target is a check id or a finding code, optionally for one engine
    # (``vocab.d2t``, ``engine.loads[vllm]``, ``engine.loads/narrowed[vllm@0.33.0]``). The check still runs: the
    # findings a waiver matches are reported as waived, and a waiver that matches nothing as stale.
    waive: tuple[tuple[str, str], ...] = ()
    # checks omitted: not run at all, with the reason (the converter's own verification: scan.values reads every
    # byte); their results say skipped, with it
    omit: tuple[tuple[str, str], ...] = ()
    # the engine releases per-engine checks judge ("vllm@0.33.0", ...; see engines.resolve) and why each version
    engine: tuple[str, ...] = ()
    engine_notes: tuple[str, ...] = ()
    # releases only `--engine all` brought in: a layout such a release does not read is not applicable to it, and
    # fails the gate only when no release in the set reads the checkpoint (or under --strict)
    optional_engines: tuple[str, ...] = ()
    # releases judged live (--engine NAME@installed): (the release, e.g. "vllm@0.33.0", the interpreter whose engine
    # records the candidate: --engine-python, else the gate's own)
    live: tuple[tuple[str, str], ...] = ()
    # --launch NAME=FILE: the launch settings a release is started with, as JSON text per engine name (TensorRT-LLM
    # takes the aux layers from its launch, eagle3_layers_to_capture, not from the drafter's config)
    launch: tuple[tuple[str, str], ...] = ()
    tensor_parallel: int | None = None  # --tp: the tensor-parallel size the target (and drafter) is served with
    pipeline_parallel: int | None = None  # --pp: the pipeline-parallel size
    source: str | None = None  # the checkpoint the candidate was converted from
    aux_convention: str | None = None  # how the drafter's trainer counted aux ids: vllm or sglang
    trainer: str | None = None  # --trainer NAME[@VERSION]: who trained the drafter, as the user states it
    max_model_len: int | None = None  # the context the drafter will be served with
    progress: bool = False  # show progress on a terminal (long scans)
    # the acceptance level: recorded target states (a folder, as accept reads it), the share of the trainer
    # reading's acceptance length an engine reading may lose, and the length below which a reading is warned about
    data: str | None = None
    loss_mask: str | None = None  # speculators' prepared-data folder, for its loss masks
    loss_mask_start: int = 0  # the hs_<i> index of its first row
    max_drop: float = FAIL_SHARE
    min_acceptance: float | None = None

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
        return self.engine or resolve_engines(None)[0]

    def levels(self) -> tuple[str, ...]:
        """The levels that run: up to ``level`` (default all), the acceptance level only with ``data``."""
        levels = LEVELS if self.level is None else LEVELS[: LEVELS.index(self.level) + 1]
        return levels if self.data else tuple(lv for lv in levels if lv != "acceptance")
