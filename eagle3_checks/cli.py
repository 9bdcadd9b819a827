"""The ``eagle3-checks`` command: a thin shell over the registry (see ``eagle3-checks --help``).

Exit codes, the same for every command: 0 no error finding (warnings count only with
``--strict``); 1 at least one error finding; 2 usage error or a path that cannot be a
checkpoint; 3 an internal error (a bug: please report it).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import __version__
from .checks.acceptance import OWN, with_own_compute
from .drafter.checkpoint import open_any, open_checkpoint
from .drafter.config_values import missing_required
from .drafter.expected import fmt_shape
from .drafter.spec import load_spec, shipped_specs, snapshot
from .engines import AUX_CONVENTIONS, DEFAULT_ENGINE, ENGINE_NAMES, PROFILES, choices, describe, profile, resolve
from .errors import UsageError
from .gate import (
    VOCABULARIES,
    WAIVERS,
    _installed,
    acceptance_thresholds,
    all_checks,
    gate,
    gate_checkpoint,
    judge_measured,
    load_target,
    load_target_checkpoint,
    options_from,
    parse_options,
    reference_for,
    run_gate,
    split_target,
    unknown_check,
    unknown_code,
)
from .numerics import torch_missing
from .options import ACCEPT_STEPS, help_text, taken_by
from .registry import Severity
from .reports import RENDERERS
from .reports.github import github_command
from .reports.json_report import render_json_error
from .reports.markdown import profile_chart
from .reports.sarif import render_sarif_error
from .reports.text import finding_lines, render_text
from .storage.folder import unique_paths, within
from .storage.hub import is_hub, local_dir, locate_any

FORMATS = ("text", "json", "markdown", "github", "sarif")
# The engines convert writes for: the profiles that convert (convert.TARGETS, which the header path does not import)
CONVERT_TARGETS = tuple(dict.fromkeys(p.name for p in PROFILES if p.converts_to))
DEFAULT_STEPS = 2  # the forward command's draft steps (1 for a drafter without embed_tokens and no --target)
MAX_STEPS = 32  # engines draft a handful of tokens; this bounds the time and the (steps, T, V) float32 output


# The release that removes the deprecated option names (CHANGELOG.md says which and what replaces them).
REMOVED_IN = "0.2.0"
_REPLACED = {"--skip": "use --waive, which takes the same CHECK_ID=REASON",
             "--shift-aux-ids": "it has no effect: convert always writes each engine's aux-layer ids where that engine "
                                "reads them"}


class _Deprecated(argparse.Action):
    """An old option name: still read (``append``: added to its replacement's list; else stored as True), and a
    one-line deprecation message on stderr naming the release that removes it."""

    def __init__(self, *args: Any, append: bool = False, **kwargs: Any) -> None:
        self.append = append
        super().__init__(*args, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        name = option_string or self.option_strings[0]
        print(f"eagle3-checks: warning: {name} is deprecated and will be removed in {REMOVED_IN}: "
              f"{_REPLACED[name]}", file=sys.stderr)
        if self.append:
            setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), values])
        else:
            setattr(namespace, self.dest, True)


def _table_options(p: argparse.ArgumentParser, command: str) -> None:
    """The options of options.OPTIONS that ``command`` takes, as arguments of its parser."""
    for o in taken_by(command):
        text = help_text(o, releases=choices(), default_engine=DEFAULT_ENGINE,
                         aux_conventions=" or ".join(AUX_CONVENTIONS))
        if o.kind == "flag":
            p.add_argument(f"--{o.name}", action="store_true", help=text)
        elif o.kind == "list":
            p.add_argument(f"--{o.name}", action="append", metavar=o.metavar, help=text,
                           default=None if o.default is None else list(o.default))
        else:
            p.add_argument(f"--{o.name}", metavar=o.metavar, help=text, default=o.default,
                           type=o.number if o.type else str, choices=VOCABULARIES.get(o.choices or ""))
        if o.old:
            p.add_argument(f"--{o.old}", dest=o.field, action=_Deprecated, metavar=o.metavar, append=o.kind == "list",
                           help=f"the old name of --{o.name} (deprecated: removed in {REMOVED_IN})")


def _gate_values(args: argparse.Namespace) -> dict[str, Any]:
    """The gate's option values a command's arguments hold (options.OPTIONS: what gate.options_from validates)."""
    return {o.field: getattr(args, o.field) for o in taken_by(args.command) if o.gate and hasattr(args, o.field)}


def _report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text (people), json (machines), markdown (CI summaries, PR comments), github (workflow "
                   "annotations), sarif (SARIF 2.1.0, for code scanning)")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour the text report: auto (default) on a terminal unless NO_COLOR is set")
    p.add_argument("--quiet", "-q", action="store_true", help="text report: the failures and the verdict only")


def use_color(choice: str, stream=None) -> bool:
    """--color: ``always``/``never`` as said; ``auto`` on a terminal, unless NO_COLOR is set (no-color.org) or
    TERM is dumb."""
    if choice in ("always", "never"):
        return choice == "always"
    stream = stream or sys.stdout
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _render(args: argparse.Namespace, results: list) -> str:

    if args.format == "text":
        return render_text(results, color=use_color(args.color), quiet=args.quiet)
    return RENDERERS[args.format](results)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eagle3-checks",
        description="Decide whether an EAGLE-3 draft model checkpoint is safe to serve.",
        epilog="Exit codes: 0 passed, 1 error findings, 2 usage error or not a checkpoint, 3 internal error.",
    )
    parser.add_argument("--version", action="version",
                        version=f"eagle3-checks {__version__} (mirrors {describe()})")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("check", help="gate one or more checkpoints")
    p.add_argument("ckpt", nargs="+", metavar="CKPT",
                   help="drafter checkpoint: a directory, a Hugging Face cache folder (models--ORG--NAME) or "
                   "hf://ORG/NAME[@REVISION]")
    _table_options(p, "check")
    _report_options(p)

    p = sub.add_parser("forward", help="run the drafter as one engine reads it, on your inputs")
    p.add_argument("ckpt", metavar="CKPT")
    p.add_argument("--engine", required=True, metavar="NAME[@VERSION]",
                   help=f"the one engine release whose reading runs: {', '.join(ENGINE_NAMES)} or NAME@VERSION")
    p.add_argument("--inputs", required=True, metavar="IN.safetensors",
                   help="aux_hidden_states (T, A*Ht) float32, input_ids (T,) int64, optional position_ids (T,) int64 "
                   "and inputs_embeds (T, H) float32 (required without embed_tokens)")
    p.add_argument("--out", required=True, metavar="OUT.safetensors",
                   help="gets logits (T, V) of step 0 over the target vocabulary, and logits_step_K for later steps")
    p.add_argument("--steps", type=int, help=f"draft steps, 1 to {MAX_STEPS} (default {DEFAULT_STEPS}; 1 for a "
                   "drafter without embed_tokens, unless --target gives the target's)")
    p.add_argument("--target", metavar="DIR|hf://ORG/NAME",
                   help="the verifier's checkpoint: later steps embed the drafted tokens with its embed_tokens when "
                   "the drafter ships none, as engines do (only that tensor's rows are read)")
    p.add_argument("--engine-python", metavar="PATH",
                   help="with --engine NAME@installed (vllm, sglang): the interpreter whose engine computes the logits "
                   "with its own drafter code, on CPU (default: this one)")
    p.add_argument("--target-config", metavar="FILE",
                   help="the target's config.json the installed engine is served beside (default: --target's)")
    _table_options(p, "forward")

    p = sub.add_parser("accept", help="measure each reading's acceptance on recorded target states")
    p.add_argument("ckpt", metavar="CKPT")
    p.add_argument("--data", required=True, metavar="DIR",
                   help="recorded target states: speculators' hs_<i>.safetensors, SpecForge's data_<i>.ckpt[.gz] or "
                   "TensorRT-LLM's <prefix>_<n>.pt (detected)")
    p.add_argument("--engine", action="append", metavar="NAME[@VERSION]",
                   help=f"the engine releases whose readings run besides the trainer's: {choices()} (default "
                   f"{DEFAULT_ENGINE}); NAME@installed (vllm, sglang) also runs that installed engine's own drafter "
                   "code on every sample, on CPU (needs the target's config it is served beside: --target-config "
                   "FILE, or --target DIR)")
    p.add_argument("--engine-python", metavar="PATH",
                   help="the interpreter whose engine NAME@installed means (the serving image's python; default: "
                   "this one)")
    p.add_argument("--target-config", metavar="FILE",
                   help="with NAME@installed: the target's config.json the engine is served beside (default: "
                   "--target's)")
    p.add_argument("--steps", type=int, default=ACCEPT_STEPS,
                   help=f"draft steps K, 1 to {MAX_STEPS} (default {ACCEPT_STEPS})")
    p.add_argument("--target", metavar="DIR|hf://ORG/NAME[@REVISION]",
                   help="the target checkpoint: labels become its argmax and alpha is reported (only its final norm "
                   "and lm_head are read, by byte range on the Hub); without it the labels are the recorded next "
                   "tokens")
    _table_options(p, "accept")
    p.add_argument("--launch", action="append", default=[], metavar="NAME=FILE",
                   help="the launch settings engine NAME is started with, as JSON (eagle3-checks recipe --format json "
                   "writes them): SGLang takes the drafter's attention window from them "
                   "(--speculative-draft-window-size)")
    p.add_argument("--resolve", action="store_true",
                   help="also score what the config cannot prove (rope base, norm_before_residual, norm_output, aux "
                   "order) and say which the weights were trained with; a contradiction exits 1")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where the readings run: auto (default) a GPU when torch sees one, else the CPU; the figures "
                   "agree to float rounding")
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text (the figures), json (the figures and the findings), and as check: markdown, github, "
                   "sarif (the acceptance level's findings)")

    p = sub.add_parser("served", help="set a running server's speculative-decoding counters beside each reading's "
                       "prediction on recorded states, and say which reading the server's behaviour fits")
    p.add_argument("ckpt", metavar="CKPT", help="the drafter the server is meant to serve")
    p.add_argument("--metrics", action="append", required=True, metavar="FILE|URL",
                   help="the server's /metrics (a saved Prometheus text exposition, or its URL): once, or twice (the "
                   "counters between the two scrapes)")
    p.add_argument("--engine", required=True, metavar="NAME[@VERSION]",
                   help=f"the engine release the server runs: {choices()} (its counters' names are read from it)")
    p.add_argument("--data", required=True, metavar="DIR", help="recorded target states (as accept reads them)")
    p.add_argument("--target", metavar="DIR|hf://ORG/NAME[@REVISION]",
                   help="the target checkpoint: labels become its argmax (as accept)")
    p.add_argument("--steps", type=int, default=ACCEPT_STEPS,
                   help=f"draft steps K the readings compute, 1 to {MAX_STEPS} (default {ACCEPT_STEPS}; at least the "
                   "server's)")
    _table_options(p, "served")
    p.add_argument("--launch", action="append", default=[], metavar="NAME=FILE",
                   help="the launch settings the server was started with (K, a draft-length floor, a confidence "
                   "cut-off), as eagle3-checks recipe --format json writes them")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")

    p = sub.add_parser("record", help="record a transformers target's states on your prompts, as speculators "
                       "writes them (for accept --data DIR --loss-mask DIR)")
    p.add_argument("target", metavar="TARGET", help="the target checkpoint's folder, as transformers saves it")
    p.add_argument("--prompts", required=True, metavar="FILE",
                   help='JSON lines, each {"text": ...} (the target\'s tokenizer and chat template applied) or '
                   '{"input_ids": [...]}; with "response_ids": [...] that continuation (what a server produced) is '
                   'recorded as it is instead of generated')
    p.add_argument("--out", required=True, metavar="DIR", help="a new folder: hidden_states/hs_<i>.safetensors and "
                   "the prepared-data folder speculators trains from (loss mask on the generated tokens)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--layers", metavar="IDS", help="the aux layer ids, comma-separated, as vLLM counts them (id L "
                       "is the input of decoder layer L)")
    which.add_argument("--drafter", metavar="CKPT", help="record the layers this drafter was trained on")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N",
                   help="the greedy continuation's length per prompt (default 128; 0: the prompt only)")
    p.add_argument("--restart", action="store_true",
                   help="discard what an interrupted run kept in OUT.partial and start over (by default the same "
                   "command resumes it)")
    p.add_argument("--device", default="cpu", metavar="D",
                   help="cpu (default), cuda, cuda:N, or auto (device_map across the GPUs accelerate sees)")

    p = sub.add_parser("convert", help="convert between the speculators and the flat layout, verified and atomic")
    p.add_argument("src", metavar="SRC")
    p.add_argument("dst", metavar="DST")
    written = ", ".join(CONVERT_TARGETS)
    p.add_argument("--to", required=True, metavar="{" + ",".join(CONVERT_TARGETS) + "}",
                   help=f"the engine to write for ({written}): vllm/sglang/llamacpp the flat layout (midlayer.*, "
                   "top-level config, eagle_config), speculators layers.N.* and a nested config; verified against the "
                   "engine's newest modelled (or installed) release. "
                   f"{', '.join(n for n in ENGINE_NAMES if n not in CONVERT_TARGETS)} read one of these layouts: "
                   "eagle3-checks recipe --engine NAME gives their launch")
    p.add_argument("--force", action="store_true", help="replace an existing DST (atomically, after verification)")
    p.add_argument("--target-config", metavar="PATH", help="the verifier's config.json: the written drafter "
                   "must fit it (vocabulary, aux ids, hidden size); its name and architectures go into a speculators "
                   "config")
    p.add_argument("--vocab-mapping", metavar="PATH",
                   help="d2t and t2d to embed: an .npz, a SpecForge torch file, or a folder with d2t.npy and t2d.npy")
    p.add_argument("--verify", choices=("header", "forward"),
                   help="verification before DST is written (default forward when torch is installed, else header)")
    p.add_argument("--shift-aux-ids", action=_Deprecated, nargs=0, default=False,
                   help=f"no effect (deprecated: removed in {REMOVED_IN}): convert always writes each engine's "
                   "aux-layer ids where that engine reads them, for the trained layers")
    p.add_argument("--aux-convention", choices=AUX_CONVENTIONS,
                   help="how the source's trainer counted aux-layer ids, when its config does not say (a flat one)")
    p.add_argument("--trainer", metavar="NAME[@VERSION]",
                   help="who trained the source, when it does not say (recorded in the output's provenance)")
    p.add_argument("--speculative-tokens", type=int, default=3, help="for --to speculators (default 3)")
    p.add_argument("--verifier", metavar="NAME", help="for --to speculators: the verifier's hub id "
                   "(default: the target config's _name_or_path, else null)")
    _table_options(p, "convert")

    p = sub.add_parser("fix", help="write a copy with the gate's config fixes applied, and gate it")
    p.add_argument("src", metavar="SRC")
    p.add_argument("dst", metavar="DST")
    _table_options(p, "fix")
    p.add_argument("--force", action="store_true", help="replace an existing DST (atomically)")
    _report_options(p)  # the report on DST, as check reports

    p = sub.add_parser("recipe", help="the launch that serves a drafter as trained on one engine release, with its "
                       "preconditions checked")
    p.add_argument("ckpt", metavar="CKPT")
    p.add_argument("--engine", required=True, metavar="NAME[@VERSION]",
                   help=f"the release to launch: {', '.join(dict.fromkeys(p.name for p in PROFILES if p.launch))} "
                   "(NAME@VERSION: see eagle3-checks list --engines)")
    _table_options(p, "recipe")
    p.add_argument("--num-speculative-tokens", type=int, default=3, metavar="K", help="draft tokens per step "
                   "(default 3)")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (commands with their reasons) or json (the launch settings: --launch reads them back)")

    p = sub.add_parser("inspect", help="layout, config values with their provenance, tensor table")
    p.add_argument("ckpt", metavar="CKPT")
    p.add_argument("--format", choices=("text", "json"), default="text")
    _table_options(p, "inspect")

    p = sub.add_parser("spec", help="snapshot a trusted checkpoint into a reference spec")
    p.add_argument("ckpt", metavar="CKPT")
    p.add_argument("-o", "--output", required=True, metavar="FILE")
    p.add_argument("--name", help="spec name (default: the directory name)")
    p.add_argument("--description", default="")
    p.add_argument("--force", action="store_true", help="overwrite FILE")
    _table_options(p, "spec")

    p = sub.add_parser("diff", help="diff a candidate against a reference (checkpoint, spec file or shipped spec)")
    p.add_argument("candidate", metavar="A")
    p.add_argument("reference", metavar="B")
    p.add_argument("--strict", action="store_true", help="warnings fail too")
    p.add_argument("--engine", action="append", metavar="NAME[@VERSION][,...]|all",
                   help=f"the engine releases whose computation a semantic difference states, when A is a checkpoint "
                   f"(repeatable; default {DEFAULT_ENGINE}): {choices()}")
    p.add_argument("--format", choices=("text", "json"), default="text")
    _table_options(p, "diff")

    p = sub.add_parser("explain", help="what a check (or a finding code) guards against, its codes, the field "
                       "evidence, the fix, and a failing and a passing example")
    p.add_argument("check_id", metavar="CHECK_ID|CODE")
    p.add_argument("--no-examples", action="store_true", help="describe the examples without gating them")

    p = sub.add_parser("list", help="every check: id, level, title (--engines: every modelled release)")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text",
                   help="markdown: the summary table of docs/checks.md (id, level, what it guards against, codes)")
    p.add_argument("--engines", action="store_true",
                   help="list the modelled engine and trainer releases instead: each profile, the releases it holds "
                   "for, and when each was released and recorded")

    p = sub.add_parser("demo", help="build the embedded tiny drafters (both layouts) and gate them")
    p.add_argument("--out", metavar="DIR", help="keep the example checkpoints in DIR (default: a temporary folder)")
    p.add_argument("--force", action="store_true", help="overwrite the example folders already in DIR")
    p.add_argument("--engine", action="append", metavar="NAME[@VERSION][,...]|all",
                   help=f"engine releases to judge (default {DEFAULT_ENGINE}; more than one prints a compatibility "
                   f"matrix): {choices()}")
    _report_options(p)
    for command in sub.choices.values():  # a usage error of a command shows that command's usage (see main)
        command.set_defaults(command_parser=command)
    return parser


def _write(text: str) -> None:
    """Reports name tensors and config values from the checkpoint: whatever they hold (a lone surrogate from a
    JSON escape, say) is written, escaped where the stream's encoding cannot carry it."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    sys.stdout.write(text.encode(encoding, "backslashreplace").decode(encoding))
    sys.stdout.flush()


def _usage_error_report(fmt: str, exc: UsageError) -> None:
    """A run that gated nothing still leaves its report in the format asked: `> report.json` a JSON document and
    `> report.sarif` a SARIF log saying why, a GitHub annotation for the job's summary (then the error, exit 2)."""
    if fmt == "json":
        _write(render_json_error(f"{exc}"))
    elif fmt == "sarif":  # for upload-sarif
        _write(render_sarif_error(f"{exc}"))
    elif fmt == "github":
        _write(github_command("error", f"{exc}", title="eagle3-checks: usage error") + "\n")


def cmd_check(args: argparse.Namespace) -> int:

    try:
        options = options_from(_gate_values(args))
        # a progress bar only where a person watches: text output on a terminal (quiet in CI, in JSON and markdown)
        options = dataclasses.replace(options, progress=args.format == "text" and sys.stderr.isatty())
        paths = unique_paths(args.ckpt)
        for path in paths:  # every path usable before any is gated (an hf:// name is only parsed)
            locate_any(path, args.revision)
        results = [gate(path, options) for path in paths]
    except UsageError as exc:
        _usage_error_report(args.format, exc)
        raise
    _write(_render(args, results))
    return max(r.exit_code for r in results)


def cmd_convert(args: argparse.Namespace) -> int:
    from .convert import ConvertRefused, convert

    src = local_dir(args.src, revision=args.revision, download=args.download, what="SRC",
                    needs="convert copies the weights")
    try:
        result = convert(src, args.dst, args.to, force=args.force, target_config=args.target_config,
                         vocab_mapping=args.vocab_mapping, verify_level=args.verify, shift_aux_ids=args.shift_aux_ids,
                         speculative_tokens=args.speculative_tokens, verifier=args.verifier,
                         aux_convention=args.aux_convention, trainer=parse_options(trainer=args.trainer).trainer)
    except ConvertRefused as exc:
        lines = [f"eagle3-checks convert: not converted: {exc}"]
        for prev, f in zip([None, *exc.findings], exc.findings, strict=False):
            lines += finding_lines(f, "  ", prev)
        _write("\n".join(lines) + "\n")
        return 1
    p = result.plan
    lines = [f"converted {args.src} -> {result.dst} ({p.layout} layout for {p.to}): {len(p.names)} tensors copied "
             "byte for byte" + (f", {len(p.replaced)} embedded" if p.replaced else "")]
    lines += [f"  {note}" for note in p.notes]
    lines += [f"  removed a stale temporary from a killed run: {s.name}" for s in result.removed_stale]
    counts = result.verification.counts()
    lines.append(f"  verified ({result.level} level, {p.to}): {counts['error']} error(s), {counts['warning']} "
                 f"warning(s); the original config is kept as config_{p.src.layout}.json")

    lines += [f"  warning: {f.check}: {f.message}" for f in result.verification.findings()
              if f.severity is Severity.WARNING]
    _write("\n".join(lines) + "\n")
    return 0


def _inspect_label(name: str, source: str) -> str:
    """A config field as inspect's text labels it: the key the config wrote when the field is read from either of
    two real keys (rope_scaling from rope_parameters, where speculators configs keep it), so the label is never a
    key the file does not hold; JSON keeps the field's own name, with the same source."""
    key = source.rpartition(".")[2].rpartition(" ")[2]
    return key if name == "rope_scaling" and key == "rope_parameters" else name


def cmd_inspect(args: argparse.Namespace) -> int:

    ck = open_any(args.ckpt, revision=args.revision)
    cfg = ck.config
    fields = {} if cfg is None else {k: {"value": v.value, "source": v.source} for k, v in cfg.fields.items()}
    tensors: list[dict[str, Any]] = [
        {"name": n, "role": ck.names[n].role, "dtype": e.dtype, "shape": list(e.shape), "file": e.file}
        for n, e in sorted(ck.tensors.items())]
    problems = [{"file": p.file, "message": p.message, **({"offset": p.offset} if p.offset is not None else {})}
                for p in ck.problems]
    if args.format == "json":
        _write(json.dumps({"schema_version": 1, "path": ck.display, "layout": ck.layout,
                           "layout_source": ck.layout_source, "files": ck.weight_files, "config": fields,
                           "tensors": tensors, "problems": problems}, indent=2, default=str) + "\n")
        return 1 if problems else 0
    lines = [f"{ck.display}", f"  layout: {ck.layout} ({ck.layout_source})",
             f"  weights: {', '.join(ck.weight_files) or 'none readable'}", "",
             "config (value, and where it came from):"]
    labels = {k: _inspect_label(k, v["source"]) for k, v in fields.items()}
    width = max((len(k) for k in labels.values()), default=10)
    for k, v in fields.items():
        lines.append(f"  {labels[k]:<{width}}  {json.dumps(v['value'], default=str):<24} {v['source']}")
    if cfg is None:
        lines.append("  (no readable config.json)")
    lines += ["", "tensors:"]
    nw = max((len(t["name"]) for t in tensors), default=10)
    for t in tensors:
        role = t["role"] if t["role"] != t["name"] else ""
        role = role or ("" if t["role"] else "(not a drafter tensor)")
        lines.append(f"  {t['name']:<{nw}}  {t['dtype']:<5} {fmt_shape(tuple(t['shape'])):<16} {t['file']}  {role}")
    if problems:
        lines += ["", "problems:"] + [f"  {p['file']}: {p['message']}" for p in problems]
    _write("\n".join(lines) + "\n")
    return 1 if problems else 0


def cmd_spec(args: argparse.Namespace) -> int:

    out = Path(args.output)
    if not is_hub(args.ckpt) and within(out, args.ckpt, "-o"):
        raise UsageError(f"-o {out} is inside the checkpoint {args.ckpt}, which is never modified; write the spec "
                         "elsewhere")
    try:
        exists = out.exists()
    except (OSError, ValueError) as exc:
        raise UsageError(f"-o {args.output[:200]}: not a usable path ({type(exc).__name__})") from exc
    if exists and not args.force:
        raise UsageError(f"{out} exists; pass --force to overwrite it")
    ck = open_any(args.ckpt, revision=args.revision)
    problems = [f"{p.file}: {p.message}" for p in ck.problems]
    if ck.config is not None:

        problems += [f"config.json: {p.message}" for p in ck.config.problems]
        problems += [f"config.json: {name} is missing" for name in missing_required(ck.config)
                     if ck.config.entry(name) is None]
    if problems:
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        print("eagle3-checks: not written: a reference must come from a readable checkpoint with a valid config",
              file=sys.stderr)
        return 1
    name = args.name or (args.ckpt.rstrip("/").rsplit("/", 1)[-1] if is_hub(args.ckpt)
                         else Path(os.path.abspath(args.ckpt)).name)
    spec = snapshot(ck, name, args.description)
    spec.source = f"eagle3-checks spec of {name}"
    try:
        out.write_text(spec.dumps(), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from exc
    _write(f"wrote {out}: {len(spec.tensors)} tensor roles, layout {spec.layout}\n")
    return 0


def _as_spec(arg: str, role: str, revision: str | None = None):
    """A diff operand, as (its spec, the checkpoint it was taken from or None): an existing checkpoint directory (or
    hf://ORG/NAME) or spec file wins over a shipped spec name."""

    if is_hub(arg):
        ck = open_any(arg, revision=revision, what=role)
        return snapshot(ck, arg), ck
    path = Path(arg)
    try:
        is_dir, exists = path.is_dir(), path.exists()
    except (OSError, ValueError) as exc:
        raise UsageError(f"{role} {arg[:200]}: not a usable path ({type(exc).__name__})") from exc
    if is_dir:
        ck = open_any(path, revision=revision)
        return snapshot(ck, arg), ck
    if exists:
        return load_spec(path), None
    specs = shipped_specs()
    if arg in specs:
        return load_spec(specs[arg], arg), None
    raise UsageError(f"{role} {arg!r}: no such checkpoint directory, spec file or shipped spec "
                     f"(shipped: {', '.join(specs) or 'none'})")


def cmd_diff(args: argparse.Namespace) -> int:
    from .reports.compare import compare, render_diff_json, render_diff_text

    cand, cand_ck = _as_spec(args.candidate, "A", args.revision)
    ref, ref_ck = _as_spec(args.reference, "B", args.revision)
    report = compare(cand, cand_ck, ref, ref_ck, strict=args.strict,  # the codes and root causes check gives
                     releases=resolve(args.engine).specs)
    _write(render_diff_json(report, args.candidate, args.reference) if args.format == "json" else
           render_diff_text(report, args.candidate, ref.name))
    return int(report.failed)


def _list_engines(fmt: str) -> int:
    from .check_docs import releases_table
    from .engines import catalogue

    listed = catalogue()
    if fmt == "json":
        _write(json.dumps(listed, indent=2) + "\n")
    elif fmt == "markdown":
        _write(releases_table(listed))
    else:
        for entry in listed:
            first, last = entry["holds_for"]
            _write(f"{entry['name']} {entry['profile']} ({entry['kind']}, {entry['module']}): holds for "
                   f"{first if first == last else f'{first} to {last}'}\n")
            for r in entry["releases"]:
                how = r["how"]
                differs = ", ".join(f"{k}={v!r}" for k, v in r["differs"].items())
                _write(f"  {r['version']:<8} {'released ' + r['released'] if r['released'] else 'not released'}  {how}"
                       + (f"  differs: {differs}" if differs else "") + "\n")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    if args.engines:
        return _list_engines(args.format)

    registered = all_checks()
    if args.format == "json":
        _write(json.dumps([{"id": c.id, "level": c.level, "title": c.title, "needs": list(c.needs),
                            "guards": c.guards, "evidence": list(c.evidence),
                            "codes": [{"code": code, "meaning": d.meaning,
                                       **({"severity": "info"} if d.is_note else {})}
                                      for code, d in c.declared.items()]}
                           for c in registered], indent=2) + "\n")
        return 0
    if args.format == "markdown":
        from .check_docs import table

        _write(table(registered))
        return 0
    width, levels = max(len(c.id) for c in registered), max(len(c.level) for c in registered)
    for c in registered:
        needs = f"  [needs {', '.join(c.needs)}]" if c.needs else ""
        _write(f"{c.id:<{width}}  {c.level:<{levels}}  {c.title}{needs}\n")
    return 0


def cmd_fix(args: argparse.Namespace) -> int:
    from .fix import fix

    options = options_from(_gate_values(args))
    src = local_dir(args.src, revision=args.revision, download=args.download, what="SRC",
                    needs="fix copies the weights")
    source = open_checkpoint(src)  # not a checkpoint at all: exit 2, as check
    if source.config_raw is None or not source.complete or source.problems:
        # a checkpoint whose files cannot be read is what check reports: its findings and exit code, nothing written
        source.display = args.src
        result = gate_checkpoint(source, options)
        print(f"eagle3-checks fix: {args.src}: nothing written: its files or config.json cannot be read, and fix "
              "edits config.json only (the findings below)", file=sys.stderr)
        _write(_render(args, [result]))
        return result.exit_code
    done = fix(src, args.dst, options, force=args.force)
    assert done.result is not None  # fix() gates the fixed checkpoint (SRC, when it wrote nothing)
    if done.applied:
        did = ([f"{len(done.edits)} config edit(s) in {done.rounds} round(s)"] if done.edits else []) + \
            ([f"{len(done.repairs)} tensor repair(s)"] if done.repairs else [])
        lines = [f"wrote {done.dst}: {', '.join(did)}"]
    elif not [f for f in done.result.findings() if f.severity.value in ("error", "warning")]:
        lines = [f"nothing to fix: {args.src} passes the gate with no error or warning (nothing written to "
                 f"{args.dst})"]
    else:
        lines = [f"nothing written to {args.dst}: no fix rests on what the checkpoint, an engine's own code or the "
                 "data says"]
    lines += [f"  {e.check}: {e.describe()}" for e in done.edits]
    lines += [f"  {e.check}: repaired {e.op['path']} ({e.op['value']})" for e in done.repairs]
    lines += [f"  not applied: {why}" for why in done.refused]
    lines += [f"  not applied: needs a premise stated: {why}" for why in done.needs]
    left = done.left
    lines.append(f"left: {len(left)} finding(s) that no known fix removes" if left else "left: nothing")
    if args.format == "text":
        _write("\n".join(lines) + "\n\n" + _render(args, [done.result]))
    else:
        sys.stderr.write("\n".join(lines) + "\n")
        _write(_render(args, [done.result]))
    return done.result.exit_code


def cmd_recipe(args: argparse.Namespace) -> int:
    from .recipe import recipe

    options = options_from({**_gate_values(args), "reference": "none"})
    done = recipe(open_any(args.ckpt, revision=args.revision), args.ckpt, args.engine, options,
                  args.num_speculative_tokens)
    if args.format == "json":
        _write(json.dumps(done.as_dict(), indent=2) + "\n")
        return 0 if done.passed else 1
    lines = [f"# {done.spec.replace('@', ' ')}: the launch that serves {args.ckpt} as trained", *done.launch.commands,
             "", "# why:", *(f"#   {note}" for note in done.launch.notes)]
    if done.target_note:
        lines.append(f"#   {done.target_note}")
    if done.unknown_layers:
        lines.append(f"#   the trained layers are unknown: {done.unknown_layers}")
    if done.passed:
        lines.append(f"# preconditions: all hold; the gate finds no error for {done.spec} with this launch")
    else:
        lines += ["", f"# NOT READY: {len(done.findings)} error(s) for {done.spec} with this launch:"]
        for prev, f in zip([None, *done.findings], done.findings, strict=False):
            lines += finding_lines(f, "  ", prev)
    _write("\n".join(lines) + "\n")
    return 0 if done.passed else 1


def cmd_explain(args: argparse.Namespace) -> int:

    known = {c.id: c for c in [*all_checks(), WAIVERS]}  # and the gate's own result on the waivers
    try:
        base, slug, _ = split_target(args.check_id)
    except ValueError:
        base, slug = args.check_id.split("[")[0], None
    c = known.get(base)
    if c is None:
        raise UsageError(unknown_check(base, f"{base}/{slug}" if slug else None))
    if slug is not None:
        why = unknown_code(c, slug)
        if why:
            raise UsageError(why)
    lines = [f"{c.code(slug)}: {c.meanings.get(c.code(slug), '(not declared by the check)')}", ""] if slug else []
    lines += [f"{c.id}: {c.title}", "",
             f"level:    {c.level}" + (" (needs torch)" if c.requires else ""),
             "engines:  one result per --engine release" if c.per_engine else "engines:  engine-independent"]
    if c.per_engine:
        lines += ["", "modelled releases (each judged by its own profile; files cited are the engine's own):"]
        lines += [f"  - {p.spec}: reads aux ids from {p.reads_ids}; follows {', '.join(p.sources)}"
                  for p in PROFILES]
    if c.needs:
        lines.append(f"needs:    {', '.join('--target-config' if n == 'target' else '--reference' for n in c.needs)}")
    lines.append("basis:    " + ("measured: what your recorded data measured" if c.level == "acceptance" else
                                 "recorded: what the judged release's own code did (its conformance recording, or "
                                 "the engine judging live); read from its released source where none exists"
                                 if c.per_engine else "read: what the checkpoint and its files state")
                 + "; a finding drawn from an inference or a default says so (inferred, assumed), names what would "
                 "settle it, is at most a warning, and fix does not apply it")
    lines += ["", "guards against:", f"  {c.guards}"]
    if c.evidence:
        lines += ["", "seen in the field:"] + [f"  - {e}" for e in c.evidence]
    if c.fix:
        lines += ["", "fix:", f"  {c.fix}"]
    if c.codes:
        width = max(len(code) for code in c.meanings)
        lines += ["", "finding codes (--waive CODE=REASON waives one):"]
        lines += [f"  {code:<{width}}  {'(note) ' if d.is_note else ''}{d.meaning}" for code, d in c.declared.items()]
    lines += _example_lines(c, run=not args.no_examples)
    _write("\n".join(lines) + "\n")
    return 0


def _example_lines(c: Any, run: bool) -> list[str]:
    """The check's failing and passing example, gated for this check only (described only, without torch for a
    forward-level check, or with --no-examples)."""
    from .defects import EXAMPLES, run_example

    example = EXAMPLES.get(c.id)
    if example is None:  # a plugin's check
        return []
    lines = ["", "example (the embedded drafter, gated for this check):"]
    why = c.requires() if c.requires else None
    for label, text, failing in (("fails", example.fails, True), ("passes", example.passes, False)):
        lines.append(f"  {label + ':':<8}{text}")
        if not run or why:
            continue
        r = run_example(c.id, failing)
        shown = [f for f in r.findings if f.severity.value != "info"] or r.findings
        lines.append(f"          -> {r.status}" + (f": {shown[0].code} ({shown[0].basis}): {shown[0].message}"
                                                    if failing and shown else ""))
    if run and why:
        lines.append(f"  (not gated here: {why})")
    return lines


def cmd_demo(args: argparse.Namespace) -> int:
    from .drafter.example import EXAMPLE_DIRS, write_example

    def run(root: Path, stable: bool) -> int:
        """``stable``: the example lives in a temporary folder deleted on exit, so the report names its folders
        (example-flat, ...) and not paths that will not exist."""
        paths = write_example(root)
        target = paths["target"] / "config.json"
        options = parse_options(reference="auto", target_config=str(target), engine=args.engine)
        shown = dataclasses.replace(options, target_config=f"{EXAMPLE_DIRS['target']}/config.json") if stable \
            else options
        results = []
        for layout in ("speculators", "flat"):
            ckpt = open_checkpoint(paths[layout])
            if stable:
                ckpt.display = EXAMPLE_DIRS[layout]
            target_config = load_target(str(target))
            reference, note = reference_for(options.reference, ckpt, target_config)
            results.append(run_gate(ckpt, shown, reference=reference, reference_note=note, target=target_config))
        _write(_render(args, results))
        return max(r.exit_code for r in results)

    if args.out:
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out}: not a directory")
        taken = [n for n in EXAMPLE_DIRS.values() if (out / n).exists()]
        if taken and not args.force:
            raise UsageError(f"--out {out}: {', '.join(taken)} already exist; pass --force to overwrite them")
        try:
            return run(out, stable=False)
        except OSError as exc:
            raise UsageError(f"--out {out}: cannot write the example: {exc.strerror or exc}") from exc
    import tempfile  # with shutil, random, bz2 and lzma: 5 ms that no other command needs

    with tempfile.TemporaryDirectory(prefix="eagle3-demo-") as tmp:
        code = run(Path(tmp), stable=True)
    print(f"eagle3-checks: the example checkpoints ({', '.join(EXAMPLE_DIRS.values())}) were written to a temporary "
          "folder, now deleted; pass --out DIR to keep them", file=sys.stderr)
    return code


def cmd_forward(args: argparse.Namespace) -> int:
    from .draft_outputs import check_inputs_path, run_forward_files

    # the options first: importing torch (below) takes seconds, and a refused option should not wait for it
    if args.steps is not None and not 1 <= args.steps <= MAX_STEPS:
        raise UsageError(f"--steps must be between 1 and {MAX_STEPS}, not {args.steps}")
    engine, judged_live = _installed(args.engine, args.engine_python)
    specs = resolve(engine).specs
    if len(specs) != 1:
        raise UsageError(f"--engine {args.engine!r}: forward runs one engine release, not {len(specs)}")
    live = None
    if judged_live:
        target_config = Path(args.target_config or Path(args.target or "") / "config.json")
        if not target_config.is_file():
            raise UsageError("--engine NAME@installed: the engine is served beside the target: give --target-config "
                             "FILE or --target DIR (a local folder with its config.json)")
        live = (judged_live[0][1], target_config)
    check_inputs_path(Path(args.inputs))
    hint = torch_missing()
    if hint:
        raise UsageError(hint)
    ckpt = open_any(local_dir(args.ckpt, revision=args.revision, download=args.download,
                              needs="forward runs the weights"))
    ckpt.display = args.ckpt
    embedding = load_target_checkpoint(args.target)[1] if args.target else None
    written, broken, note = run_forward_files(ckpt, specs[0], Path(args.inputs), Path(args.out), args.steps,
                                              embedding, DEFAULT_STEPS, live)
    if note:
        print(f"eagle3-checks: note: {note}", file=sys.stderr)
    _write(f"wrote {args.out}: {', '.join(written)}\n")
    if broken:  # written anyway (what was asked for, and where it breaks), but not a success
        print(f"eagle3-checks: error: the logits are not finite (NaN or +inf; -inf only masks tokens outside the "
              f"draft vocabulary): {'; '.join(broken)}. A weight probably holds NaN or Inf: "
              f"`eagle3-checks check {args.ckpt} --level scan` names it", file=sys.stderr)
        return 1
    return 0


def cmd_accept(args: argparse.Namespace) -> int:
    try:
        return _accept(args)
    except UsageError as exc:  # as `check`: the report asked for still says why nothing was measured
        _usage_error_report(args.format, exc)
        raise


def _accept(args: argparse.Namespace) -> int:
    from .acceptance import AcceptanceError, DataError, LossMasks, expect_of, load_head, readings, render_text, samples
    from .acceptance.report import render_answers
    from .acceptance.resolve import measure
    from .checks.acceptance import evaluation

    if not 1 <= args.steps <= MAX_STEPS:
        raise UsageError(f"--steps must be between 1 and {MAX_STEPS}, not {args.steps}")
    drop, minimum = acceptance_thresholds(args.max_drop, args.min_acceptance, args.steps)
    # the gate's options of this run: its findings are the acceptance level's, judged as `check` judges them
    options = dataclasses.replace(options_from(
        {**_gate_values(args), "min_acceptance": None, "engine": args.engine, "engine_python": args.engine_python,
         "data": args.data, "launch": args.launch}), max_drop=drop, min_acceptance=minimum)
    judged_live = options.live  # the releases and who judges them live: resolved once, by options_from
    target_config = Path(args.target_config or Path(args.target or "") / "config.json")
    if judged_live and not target_config.is_file():
        raise UsageError("--engine NAME@installed: the engine is served beside the target: give --target-config FILE "
                         "or --target DIR (a local folder with its config.json)")
    hint = torch_missing()
    if hint:
        raise UsageError(hint)
    device = _device(args.device)
    ckpt = open_any(args.ckpt)
    if ckpt.problems:
        raise UsageError(f"{args.ckpt}: the checkpoint has integrity problems ({ckpt.problems[0].file}: "
                         f"{ckpt.problems[0].message}); gate it first")
    try:
        left_out: list[str] = []
        launched = options.launch_for
        named = readings(ckpt, options.engines(), options.optional_engines, left_out, launch=launched)
        for why in left_out:
            print(f"eagle3-checks: note: {why}", file=sys.stderr)
        expect = expect_of(named[0][1])
        head = load_head(args.target, expect.hidden, expect.vocab, device) if args.target else None
        embedding = load_target_checkpoint(args.target)[1] if args.target else None
        masks = LossMasks(Path(args.loss_mask), args.loss_mask_start) if args.loss_mask else None
        own: dict[str, list] = {}
        said: dict[str, str] = {}
        listed: list | None = None
        if judged_live:  # each installed engine's own code on every sample, beside its modelled reading
            listed = list(samples(Path(args.data), expect, masks))
            own, said = with_own_compute(ckpt, named, judged_live, target_config, listed, args.steps, embedding)
            for spec, how in said.items():
                print(f"eagle3-checks: note: {spec}: " + (how if spec + OWN in own else
                                                          f"its own code did not compute the drafter: {how}"),
                      file=sys.stderr)

        def data():
            got = iter(listed) if listed is not None else samples(Path(args.data), expect, masks)
            if args.format == "text" and sys.stderr.isatty():  # a progress bar where a person watches
                got = _progress(got, Path(args.data))
            return got

        result, found = measure(ckpt, named, data, args.steps, device=device, target=head, ask=args.resolve,
                                embedding=embedding, own=own, launch=launched)
    except (AcceptanceError, DataError) as exc:
        raise UsageError(str(exc)) from None
    result.max_drop, result.min_acceptance = drop, minimum
    judged = judge_measured(ckpt, options, evaluation(named, result, found, said), embedding)
    if args.format == "text":
        _write(render_text(result) + render_answers(found))
    elif args.format == "json":
        record = result.extended()
        if args.resolve:
            record["trained_with"] = [a.record() for a in found]
        order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
        record["findings"] = [f.to_dict() for f in sorted(judged.findings(), key=lambda f: order[f.severity])]
        _write(json.dumps(record, indent=2) + "\n")
        for why in result.warnings():
            print(f"eagle3-checks: warning: {why}", file=sys.stderr)
        if result.skipped:
            print(f"eagle3-checks: note: {result.skipped} positions skipped for non-finite states", file=sys.stderr)
    else:  # sarif, github, markdown: the gate's own reports of the acceptance level's findings
        _write(RENDERERS[args.format]([judged]))
    return judged.exit_code


def cmd_served(args: argparse.Namespace) -> int:
    from .acceptance import AcceptanceError, DataError, LossMasks, expect_of, load_head, readings, samples
    from .acceptance.served import counters, difference, fetch, judge, predict

    if len(args.metrics) > 2:
        raise UsageError("--metrics: give one scrape, or two (the counters between them)")
    spec = resolve(args.engine).specs[0]
    release = profile(spec)
    counting = release.counting
    if counting is None or not counting.scrape:
        raise UsageError(f"--engine {args.engine}: the counters {release.name} exposes are not modelled (served reads "
                         f"{', '.join(dict.fromkeys(p.name for p in PROFILES if p.counting and p.counting.scrape))})")
    others = [p.counting for p in PROFILES if p.counting is not None]
    got = [counters(fetch(m), m, counting, others) for m in args.metrics]
    server = difference(got[0], got[1], args.metrics[1]) if len(got) == 2 else got[0]
    steps = max(args.steps, len(server.accepted_per_position or []))
    if not 1 <= steps <= MAX_STEPS:
        raise UsageError(f"--steps must be between 1 and {MAX_STEPS}, not {steps}")
    hint = torch_missing()
    if hint:
        raise UsageError(hint)
    ckpt = open_any(args.ckpt)
    if ckpt.problems:
        raise UsageError(f"{args.ckpt}: the checkpoint has integrity problems ({ckpt.problems[0].file}: "
                         f"{ckpt.problems[0].message}); gate it first")
    launched = parse_options(launch=args.launch).launch_for
    try:
        expect = expect_of(readings(ckpt, [])[0][1])
        head = load_head(args.target, expect.hidden, expect.vocab) if args.target else None
        embedding = load_target_checkpoint(args.target)[1] if args.target else None
        masks = LossMasks(Path(args.loss_mask), args.loss_mask_start) if args.loss_mask else None
        predicted = predict(ckpt, spec, samples(Path(args.data), expect, masks), steps, head, embedding, launched)
    except (AcceptanceError, DataError) as exc:
        raise UsageError(str(exc)) from None
    verdict = judge(server, predicted.fits(server))
    if args.format == "json":
        _write(json.dumps({"engine": spec, "drafting": {"k": predicted.drafting.k,
                                                        "said": list(predicted.drafting.said)},
                           "scrapes": args.metrics, **verdict.record()}, indent=2) + "\n")
    else:
        _write(render_served(verdict, spec, args.metrics, predicted.drafting, markdown=args.format == "markdown"))
    return verdict.exit_code


def render_served(verdict, spec: str, scrapes: list[str], drafting, markdown: bool = False) -> str:
    """The server beside each reading: a table (and in markdown, the per-position chart), then the verdict."""
    s = verdict.server
    per = " ".join(f"{r:.3f}" for r in s.per_position) if s.per_position is not None else "n/a"
    head = (f"{spec} server ({' - '.join(scrapes[::-1]) if len(scrapes) == 2 else scrapes[0]}): acceptance length "
            f"{s.acceptance_length:.3f}" + (f" over {s.verify_steps:g} verify steps" if s.verify_steps else "")
            + f", per position {per}")
    walked = f"predictions walked with {drafting.describe()}; 95% intervals over the recorded sequences"
    if markdown:
        rows = ["| reading | acceptance length | per position | fits the server |", "|---|---|---|---|",
                f"| **the server** | {s.acceptance_length:.3f} | {per} | |"]
        rows += [f"| {f.what} | {f.acceptance_length:.3f}"
                 + (f" [{f.interval[0]:.3f}, {f.interval[1]:.3f}]" if f.interval else "")
                 + f" | {' '.join(f'{r:.3f}' for r in f.per_position)} | {'yes' if f.fits else 'no'} |"
                 for f in verdict.fits]
        return "\n".join([f"### eagle3-checks served: {verdict.verdict}", "", head, "", walked, "", *rows, "",
                          "The chart: the server's rates as bars, then each reading's line in the table's order.",
                          "", profile_chart([f.per_position for f in verdict.fits], s.per_position), "",
                          f"**{verdict.said}**"]) + "\n"
    lines = [head, walked]
    for f in verdict.fits:
        iv = f" [{f.interval[0]:.3f}, {f.interval[1]:.3f}]" if f.interval else ""
        lines.append(f"  {'fits' if f.fits else '    '}  {f.acceptance_length:.3f}{iv}  per position "
                     f"{' '.join(f'{r:.3f}' for r in f.per_position)}  {f.what}")
    cost = f" (it loses {100 * verdict.cost:.1f}% of the trained acceptance length)" if verdict.cost else ""
    lines.append(("FAIL: " if verdict.exit_code else "") + verdict.said + cost)
    return "\n".join(lines) + "\n"


def cmd_record(args: argparse.Namespace) -> int:
    from .acceptance.record import parse_layers, rate, record

    layers = parse_layers(args.layers) if args.layers else None
    hint = torch_missing()
    if hint:
        raise UsageError(hint)
    if importlib.util.find_spec("transformers") is None:
        raise UsageError("record runs the target with transformers: pip install transformers")
    done = record(args.target, Path(args.prompts), Path(args.out), layers, args.drafter, args.max_new_tokens,
                  args.device, progress=sys.stderr.isatty(), restart=args.restart, hard_stop=True)
    resumed = f" ({done.resumed} of them by an interrupted run, resumed)" if done.resumed else ""
    _write(f"wrote {done.out}: {rate(done)}{resumed}\n  eagle3-checks accept CKPT --data {done.out} --loss-mask "
           f"{done.out}\n")
    return 0


def _device(choice: str) -> str:
    import torch

    from .numerics.draft_steps import default_device

    if choice == "auto":
        return default_device()
    if choice == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no GPU here (torch.cuda.is_available() is False)")
    return choice


def _progress(data, folder: Path):
    """The samples, with a one-line progress count on stderr (a terminal only)."""
    total = sum(1 for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    n = 0
    for n, sample in enumerate(data, 1):
        print(f"\raccept: sample {n} of ~{total}", end="", file=sys.stderr, flush=True)
        yield sample
    print(f"\raccept: {n} samples read{' ' * 12}", file=sys.stderr, flush=True)


COMMANDS = {"accept": cmd_accept, "served": cmd_served, "record": cmd_record, "recipe": cmd_recipe,
            "check": cmd_check, "fix": cmd_fix, "forward": cmd_forward, "explain": cmd_explain, "convert": cmd_convert,
            "inspect": cmd_inspect, "spec": cmd_spec, "diff": cmd_diff, "list": cmd_list, "demo": cmd_demo}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args, unknown = parser.parse_known_args(argv)
        if unknown:  # the command's usage, not the program's: `fix SRC DST -x` shows fix's options
            getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
        if not args.command:
            parser.print_help(sys.stderr)
            return 2
        return COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"eagle3-checks: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("eagle3-checks: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (| head)
        return 0
    except Exception as exc:  # never a traceback for users; EAGLE3_CHECKS_DEBUG=1 shows it
        if os.environ.get("EAGLE3_CHECKS_DEBUG"):
            raise
        print(f"eagle3-checks: internal error: {type(exc).__name__}: {exc} (a bug: please report it; "
              "EAGLE3_CHECKS_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 3
    except BaseException as exc:  # SIGTERM/SIGINT inside a conversion (its cleanup has run)
        signum = getattr(exc, "signum", None)
        if signum is None:  # SystemExit and the like
            raise
        said = getattr(exc, "said", None) or "nothing was written"
        print(f"eagle3-checks: interrupted by signal {signum}; {said}", file=sys.stderr)
        return 128 + signum


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
