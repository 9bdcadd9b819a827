"""The pytest plugin's gate: its items, reports and summary, registered by :mod:`eagle3_checks.pytest_plugin` (which
documents the options and fixtures) once an eagle3 option is given."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, cast

import pytest

from .drafter.spec import check_reference_option
from .errors import UsageError
from .gate import SKIPPED, WAIVED, WAIVERS, all_checks, gate, load_source, load_target, options_from
from .plugin_options import GATE_FILE, GATE_NODEID, OPTIONS, STATE, dest, value
from .reports import RENDERERS
from .reports.github import github_command
from .reports.json_report import render_json_error
from .reports.sarif import render_sarif_error
from .reports.summary import summary_line
from .reports.text import check_text
from .storage.folder import unique_paths
from .storage.hub import is_hub, locate_any


class _Eagle3State:
    """Options (plain, serialisable values) and one gate result per checkpoint, computed once."""

    def __init__(self, ckpts: list[str], labels: list[str], options: Any,
                 reports: list[tuple[str, Path]] | None = None) -> None:
        self.ckpts, self.labels, self.options = ckpts, labels, options
        self.reports = reports or []  # --eagle3-report FORMAT=PATH, validated
        self.written: list[str] = []  # what the reports' writing did, for the terminal summary
        self.results: dict[str, Any] = {}
        self.ran: dict[str, set[str]] = {}  # checkpoint -> the check items that ran (-k may select a few)
        self.tallies: dict[str, dict[str, int]] = {}  # checkpoint label -> counts from reports (xdist controller)

    def result(self, path: str) -> Any:
        """The gate result, computed once; a gate that could not run raises the same error for every item."""
        if path not in self.results:

            try:
                self.results[path] = gate(path, self.options)
            except Exception as exc:  # (reported on every item of the checkpoint, not re-run)
                self.results[path] = exc
        outcome = self.results[path]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def _ini_relative(config: pytest.Config, name: str) -> str | None:
    """An option's value; a relative path from the ini file is relative to that file."""
    got = value(config, name)
    if got and config.getoption(dest(name)) is None and config.inipath and not os.path.isabs(got) \
            and not got.startswith("hf://"):
        return str(config.inipath.parent / got)
    return got


def _shown(path: str) -> str:
    """A checkpoint's path as the summary and the failures show it: normalised (an ini file's ``../drafter`` is
    joined to the ini's folder as ``/repo/tests/../drafter``; ``a/../b`` reads ``b``), unless a symbolic link on
    the way makes the normalised path another place; an hf:// name as given."""
    if is_hub(path):
        return path
    norm = os.path.normpath(path)
    if norm == path:
        return path
    try:
        same = os.path.realpath(norm) == os.path.realpath(path)
    except (OSError, ValueError):
        same = False
    return norm if same else path


def _labels(paths: list[str]) -> list[str]:
    labels: list[str] = []
    for p in paths:
        base = re.sub(r"[^A-Za-z0-9._-]", "_", Path(_shown(p)).name or "checkpoint")
        label, n = base, 2
        while label in labels:
            label, n = f"{base}-{n}", n + 1
        labels.append(label)
    return labels


def configure(config: pytest.Config) -> None:
    """Validate the options and set up the gate: pytest_plugin calls this when an eagle3 option is given."""
    ckpts = value(config, "ckpt") or []
    from_ini = config.getoption(dest("ckpt")) is None
    base = config.inipath.parent if (from_ini and config.inipath) else Path.cwd()
    ckpts = [str(base / p) if from_ini and not os.path.isabs(p) and not is_hub(p) else p for p in ckpts]
    try:
        options = options_from({o.field: _ini_relative(config, name) if o.path else value(config, name)
                                for name, o in OPTIONS.items() if o.gate})

        ckpts = unique_paths(ckpts)
        for p in ckpts:
            try:
                locate_any(p, options.revision)
            except UsageError as exc:
                raise UsageError(f"--eagle3-ckpt {exc}") from None
        if options.target:  # read when the gate runs; its name is checked now
            if is_hub(options.target):
                locate_any(options.target, what="--target")
            elif not os.path.isdir(options.target):
                raise UsageError(f"--target {options.target}: not a directory (the target checkpoint's folder)")
        if options.target_config:

            load_target(options.target_config)
        if options.source and not is_hub(options.source):  # an hf:// source is fetched when the gate runs

            load_source(options.source)

        check_reference_option(options.reference)
        reports = _reports(config)
    except UsageError as exc:
        raise pytest.UsageError(f"eagle3-checks: {_plugin_names(str(exc))}") from None
    config.stash[STATE] = _Eagle3State(ckpts, _labels(ckpts), options, reports)
    config.pluginmanager.register(_ReportTally(config.stash[STATE]), "eagle3-checks-tally")
    if not ckpts:
        return
    if not any(_is_gate_file(a) for a in config.args):
        config.args.append(str(GATE_FILE))
    _rerun_failed_checks(config)


def _reports(config: pytest.Config) -> list[tuple[str, Path]]:
    """--eagle3-report FORMAT=PATH (repeatable; an ini file's paths are relative to its folder), validated before any
    test runs. Raises UsageError."""
    from_ini = config.getoption(dest("report")) is None
    out = []
    for item in value(config, "report") or []:
        fmt, sep, name = item.partition("=")
        if not sep or fmt not in RENDERERS or not name:
            raise UsageError(f"--report {item!r}: write FORMAT=PATH, FORMAT one of {', '.join(RENDERERS)}")
        path = Path(name)
        if from_ini and config.inipath and not path.is_absolute():
            path = config.inipath.parent / path
        try:
            usable = not path.is_dir() and path.parent.is_dir()
        except (OSError, ValueError):
            usable = False
        if not usable:
            raise UsageError(f"--report {item}: " + (f"{path} is a directory" if path.is_dir() else
                                                       f"no folder {path.parent} to write {path.name} in"))
        out.append((fmt, path))
    return out


def _plugin_names(message: str) -> str:
    """A message from the shared option parser, with the CLI's option names as this plugin spells them."""
    names = "|".join(re.escape(n) for n in sorted(OPTIONS, key=len, reverse=True))
    return re.sub(rf"(?<![\w-])--({names})\b", r"--eagle3-\1", message)


def _rerun_failed_checks(config: pytest.Config) -> None:
    """``--lf`` with failed checks: pytest's cache maps a failed node id to ``<rootdir>/<id's file part>``, here
    ``<rootdir>/eagle3-checks``, which does not exist; when one of the user's own tests failed too, it would skip
    the gate file as holding no failure. Telling it the gate file's real path keeps the failed checks in the rerun.
    """
    lf = config.pluginmanager.getplugin("lfplugin")
    paths = getattr(lf, "_last_failed_paths", None)
    if isinstance(paths, set) and any(str(k).startswith(f"{GATE_NODEID}::") for k in getattr(lf, "lastfailed", ())):
        paths.add(GATE_FILE)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist with the default ``--dist load``: keep each checkpoint's items on one worker, so its files
    are read once; every other test is scheduled on its own, as ``load`` does. (``loadscope`` and ``loadfile``
    keep a checkpoint together by themselves.)"""
    state = config.stash.get(STATE, None)
    if state is None or not state.ckpts or config.getoption("dist") != "load":
        return None
    try:
        from xdist.scheduler import LoadScopeScheduling
    except ImportError:
        return None
    if not hasattr(LoadScopeScheduling, "_split_scope"):  # a pytest-xdist this plugin does not know
        return None

    class CheckpointScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid.rsplit("::", 1)[0] if nodeid.startswith(GATE_NODEID + "::") else nodeid

    return CheckpointScheduling(config, log)


def _is_gate_file(arg: str) -> bool:
    try:
        return Path(arg.split("::")[0]).resolve() == GATE_FILE
    except OSError:
        return False


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.resolve() == GATE_FILE and parent.config.stash.get(STATE, None) is not None:
        # A stable node id: the file lives in site-packages, outside any rootdir.
        return GateFile.from_parent(parent, path=file_path, name=GATE_NODEID, nodeid=GATE_NODEID)
    return None


class GateFile(pytest.File):
    """The gate: one collector per checkpoint given with --eagle3-ckpt."""

    def collect(self):
        state = self.config.stash[STATE]
        for path, label in zip(state.ckpts, state.labels, strict=True):
            yield CheckpointCollector.from_parent(self, name=label, ckpt_path=path)


class CheckpointCollector(pytest.Collector):
    def __init__(self, *, ckpt_path: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.ckpt_path = ckpt_path

    def collect(self):

        options = self.config.stash[STATE].options
        levels = options.levels()
        labels = [f"{c.id}[{engine}]" if engine else c.id for c in all_checks() if c.level in levels
                  for engine in c.engines(options)]
        for label in labels + ([WAIVERS.id] if options.waive else []):  # the waivers' own item: stale ones
            # The node id parsed as pytest parses the ids it stores: "check[engine]" reads as name and params
            # (pytest 9), so --lf finds a failed per-engine check again.
            item = CheckItem.from_parent(self, name=label, label=label, nodeid=f"{self.nodeid}::{label}")
            item.add_marker(pytest.mark.eagle3)
            yield item


class CheckFailed(Exception):
    """A check found errors (or warnings under --eagle3-strict)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class CheckItem(pytest.Item):
    def __init__(self, *, label: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.label = label  # the check id, with [engine] for a per-engine check

    @property
    def collector(self) -> CheckpointCollector:
        """The checkpoint this item checks (its parent)."""
        assert isinstance(self.parent, CheckpointCollector)
        return self.parent

    def runtest(self) -> None:

        state = self.config.stash[STATE]
        state.ran.setdefault(self.collector.ckpt_path, set()).add(self.label)
        try:
            gate_result = state.result(self.collector.ckpt_path)
        except UsageError as exc:
            raise CheckFailed(f"{self.label}: cannot gate {_shown(self.collector.ckpt_path)}: {exc}") from None
        except Exception as exc:  # (an internal error: one line, not a traceback into the package)
            raise CheckFailed(f"{self.label}: eagle3-checks failed on {_shown(self.collector.ckpt_path)} "
                              f"({type(exc).__name__}: {exc}); this is a bug, please report it") from None
        r = gate_result.by_label(self.label)
        self.user_properties.append(("eagle3_status", r.status))
        if r.findings:
            self.user_properties.append(("eagle3_findings", json.dumps([f.to_dict() for f in r.findings])))
        if r.status == SKIPPED:
            pytest.skip(r.reason or "skipped")
        if r.status == WAIVED:  # it ran, and every failure it found is waived: an expected failure
            self.add_report_section("call", "eagle3 findings", check_text(r))
            pytest.xfail("waived: " + "; ".join(dict.fromkeys(f.waived for f in r.findings if f.waived is not None)))
        if r.failed(gate_result.options):
            raise CheckFailed(check_text(r))
        if r.findings:  # warnings and notes of a passing check: shown with -rA, and in the JUnit properties
            self.add_report_section("call", "eagle3 findings", check_text(r))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CheckFailed):
            return _failure_repr(self.nodeid, f"{_shown(self.collector.ckpt_path)}\n{excinfo.value.text}",
                                 self.user_properties)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"eagle3 {self.collector.name}::{self.label}"


def _failure_repr(nodeid: str, text: str, user_properties: list[tuple[str, Any]]) -> Any:
    """A failed check as pytest shows it: the whole text under FAILURES, one line (the first finding) as the
    crash message, which the short summary, ``--tb=line``, JUnit's ``message`` and reporting plugins show.

    pytest prints a plain-string failure in full on the short-summary line when it runs in CI (the CI
    environment variable), which repeated every finding. pytest's own representation classes, unlike a
    look-alike, are what xdist serializes intact and what plugins such as pytest-json-report read.
    """
    try:  # pytest's own classes (stable since pytest 5, in a private module)
        from _pytest._code.code import ReprExceptionInfo, ReprFileLocation, ReprTracebackNative
    except ImportError:  # a pytest that moved them: the whole text, as a plain string
        return text
    return ReprExceptionInfo(reprtraceback=ReprTracebackNative([text + "\n"]),
                             reprcrash=ReprFileLocation(nodeid, 0, _summary(text, user_properties)))


def _summary(text: str, user_properties: list[tuple[str, Any]]) -> str:
    """The first failing finding's message, and how many more there are; else the failure's first line."""
    props = dict(user_properties)
    findings = json.loads(props.get("eagle3_findings", "[]"))
    for severity in ("error", "warning"):
        failing = [f["message"] for f in findings if f.get("severity") == severity and "waived" not in f]
        if failing:
            more = f" (+{len(failing) - 1} more)" if len(failing) > 1 else ""
            return f"{severity.upper()}: {(failing[0].splitlines() or [''])[0]}{more}"
    lines = text.splitlines()
    return lines[1] if len(lines) > 1 else text


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Any:
    report = yield
    if isinstance(item, CheckItem) and report.skipped and isinstance(report.longrepr, tuple):
        # Say which checkpoint and check was skipped, not which line of this plugin called pytest.skip.
        report.longrepr = (item.nodeid, None, report.longrepr[2])
    return report


# ----- fixtures for users' own tests -----------------------------------------------------------------



class _ReportTally:
    """Under xdist the gate runs in the workers: the controller tallies the checks' reports for the summary."""

    def __init__(self, state: _Eagle3State) -> None:
        self.state = state

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" or not report.nodeid.startswith(f"{GATE_NODEID}::"):
            return
        tally = self.state.tallies.setdefault(report.nodeid.split("::")[1],
                                              {"failed": 0, "checks": 0, "error": 0, "warning": 0, "info": 0})
        tally["checks"] += 1
        tally["failed"] += int(report.failed)
        for f in json.loads(cast(str, dict(report.user_properties).get("eagle3_findings", "[]"))):
            if f.get("severity") in tally and "waived" not in f:
                tally[f["severity"]] += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: Any) -> None:
    """--eagle3-report: the reports the CLI writes (``check --format FORMAT``), of every checkpoint, written once by
    the process that holds the results. Under xdist the workers gated and the controller writes: it gates each
    checkpoint once more for that (the gate is the same for the same files and options)."""
    config = session.config
    state = config.stash.get(STATE, None)
    if state is None or not state.reports or hasattr(config, "workerinput") or config.option.collectonly:
        return
    results, failed = [], None
    for path in state.ckpts:
        try:
            results.append(state.result(path))
        except Exception as exc:
            failed = f"cannot gate {_shown(path)}: {exc}"
    for fmt, target in state.reports:
        if failed is None:
            text = RENDERERS[fmt](results)
        elif fmt in ("json", "sarif"):  # a document that says why nothing was gated, as check --format writes it
            text = (render_json_error if fmt == "json" else render_sarif_error)(failed)
        else:
            text = (github_command("error", failed, title="eagle3-checks: usage error") if fmt == "github"
                    else f"eagle3-checks: error: {failed}") + "\n"
        try:
            target.write_text(text, encoding="utf-8")
            state.written.append(f"wrote the {fmt} report {target}")
        except OSError as exc:
            state.written.append(f"could not write the {fmt} report {target}: {exc.strerror or exc}")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    state = terminalreporter.config.stash.get(STATE, None)
    if state is None or not (state.results or state.tallies or state.written):
        return

    terminalreporter.section("eagle3-checks")
    if not state.results:  # xdist: the workers gated; what they reported, per checkpoint
        for path, label in zip(state.ckpts, state.labels, strict=True):
            t = state.tallies.get(label)
            if t:
                terminalreporter.write_line(
                    f"{_shown(path)}: {'FAILED' if t['failed'] else 'PASSED'}: {t['error']} error(s), {t['warning']} "
                    f"warning(s), {t['info']} note(s) (from the {t['checks']} checks the workers reported)")
        return
    for path, result in state.results.items():
        line = f"could not be gated ({result})" if isinstance(result, Exception) else summary_line(result)
        ran, total = len(state.ran.get(path, ())), len(getattr(result, "results", ()))
        if ran == 0 and total:  # -k or -m deselected every check: nothing of it was reported, nothing failed
            line = f"none of its {total} checks was selected in this run (-k or -m): not reported"
        elif ran < total:  # the gate judged every check; say so when this run reported only some
            line += f" (the whole gate, {total} checks; {ran} reported in this run)"
        terminalreporter.write_line(f"{_shown(path)}: {line}")
    for line in state.written:
        terminalreporter.write_line(f"eagle3-checks: {line}")
