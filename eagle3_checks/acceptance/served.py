"""``eagle3-checks served``: a running server's own speculative-decoding counters, set beside what each reading of the
drafter predicts a server will count on the user's recorded states, and which reading the server's behaviour fits.

The counters are read from a Prometheus text exposition (``/metrics`` saved to a file, or its URL), parsed with
``prometheus_client``'s own parser, under the names each engine release gives them
(:mod:`eagle3_checks.engines.counting`: llama.cpp's and vLLM's counters, SGLang's gauges). Two scrapes give their
difference (the traffic between them); a counter that went backwards is a restarted server. The predictions are the
served walk of :mod:`.walk` over the data, each with its 95% interval over the sequences: the trainer's reading, the
engine release's reading of the config, and the readings that differ from the trained one in one thing the config
cannot prove (the resolver's candidates: rope base, ``norm_before_residual``, ``norm_output``, fc's aux order). A
reading fits the server when the server's acceptance length and each per-position rate lie inside its intervals.

The data and the traffic are different prompts: the intervals say how far a traffic like the data may sit from the
data's figure, not how far a different traffic may. So the verdict is only as strong as the fit: served as trained
when the trained reading fits (other readings fitting too is said: the counters cannot tell them apart); served as
another reading when only readings that differ from the trained one fit (the difference named, and what it costs);
unexplained when none fits (the traffic may differ from the data, or the server may serve another drafter or target).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engines.counting import Counting, Drafting
from ..errors import UsageError
from ..fast_dataclass import dataclass
from .evaluate import Figures, Launch, evaluate, readings, serving
from .resolve import candidates, value_text
from .samples import Sample

if TYPE_CHECKING:
    from ..drafter.checkpoint import Checkpoint
    from ..numerics.ops import EmbeddingRows
    from .target_head import TargetHead

FETCH_TIMEOUT = 10.0  # seconds for a /metrics URL


@dataclass
class Counters:
    """What one engine's server counted (None where it exposes no such figure)."""

    engine: str
    verify_steps: float | None = None
    drafted: float | None = None
    accepted: float | None = None
    accepted_per_position: list[float] | None = None
    gauge_acceptance_length: float | None = None  # SGLang's interval gauge
    accept_rate: float | None = None
    read: list[str] = field(default_factory=list)  # the sample names read

    @property
    def acceptance_length(self) -> float | None:
        if self.verify_steps and self.accepted is not None:
            return 1.0 + self.accepted / self.verify_steps
        return self.gauge_acceptance_length

    @property
    def per_position(self) -> list[float] | None:
        if self.verify_steps and self.accepted_per_position is not None:
            return [a / self.verify_steps for a in self.accepted_per_position]
        return None

    def record(self) -> dict[str, Any]:
        return {"engine": self.engine, "verify_steps": self.verify_steps, "drafted": self.drafted,
                "accepted": self.accepted, "accepted_per_position": self.accepted_per_position,
                "acceptance_length": self.acceptance_length, "per_position": self.per_position,
                "accept_rate": self.accept_rate, "read": self.read}


def fetch(source: str) -> str:
    """A scrape's text: a saved file, or a URL fetched once (http/https). Raises UsageError."""
    if source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=FETCH_TIMEOUT) as r:
                text: str = r.read().decode("utf-8", errors="replace")
                return text
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise UsageError(f"--metrics {source}: cannot be fetched ({reason})") from None
    try:
        return Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--metrics {source}: cannot be read ({exc.__class__.__name__})") from None


def samples(text: str, where: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of a text exposition by its name, parsed by prometheus_client. Raises UsageError."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        raise UsageError("served reads /metrics with prometheus_client: pip install prometheus-client (vLLM's and "
                         "SGLang's own installs have it)") from None
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    except (ValueError, TypeError, IndexError) as exc:
        raise UsageError(f"--metrics {where}: not a Prometheus text exposition ({str(exc)[:200]})") from None
    return out


def counters(text: str, where: str, counting: Counting, others: list[Counting]) -> Counters:
    """The speculative-decoding counters of ``counting``'s engine in one scrape. A scrape with none of them is
    refused, naming the engine whose counters it holds where it holds another's. Raises UsageError."""
    got = samples(text, where)
    out = Counters(counting.engine)
    for figure, (name, kind) in counting.exposed().items():
        rows = got.get(name)
        if not rows:
            continue
        out.read.append(name)
        if figure == "accepted_per_position":
            by_pos: dict[int, float] = {}
            for labels, value in rows:
                try:
                    pos = int(labels.get("position", ""))
                except ValueError:
                    continue
                by_pos[pos] = by_pos.get(pos, 0.0) + value
            out.accepted_per_position = [by_pos.get(i, 0.0) for i in range(max(by_pos) + 1)] if by_pos else None
        elif kind == "gauge":
            value = rows[-1][1]
            if figure == "acceptance_length":
                out.gauge_acceptance_length = value
            elif figure == "accept_rate":
                out.accept_rate = value
        else:
            setattr(out, figure, sum(v for _, v in rows))
    if not out.read:
        theirs = [c.engine for c in others if c is not counting and any(n in got for _, n, _ in c.scrape)]
        raise UsageError(f"--metrics {where}: no speculative-decoding counters of {counting.engine} in it (looked for "
                         f"{', '.join(n for _, n, _ in counting.scrape)})"
                         + (f"; it holds {', '.join(theirs)}'s: is --engine right?" if theirs else
                            "; is speculative decoding on, and was it served?"))
    return out


def difference(first: Counters, second: Counters, where: str) -> Counters:
    """The counters between two scrapes of one server (second - first). A counter that went backwards: the server
    restarted between them. Gauges are the second scrape's. Raises UsageError."""
    out = Counters(second.engine, read=second.read, gauge_acceptance_length=second.gauge_acceptance_length,
                   accept_rate=second.accept_rate)
    for name in ("verify_steps", "drafted", "accepted"):
        a, b = getattr(first, name), getattr(second, name)
        if a is not None and b is not None:
            if b < a:
                raise UsageError(f"--metrics {where}: {name.replace('_', ' ')} went from {a:g} to {b:g}: the server "
                                 "restarted between the two scrapes (its counters start again from 0); scrape twice "
                                 "within one run of it")
            setattr(out, name, b - a)
    if first.accepted_per_position is not None and second.accepted_per_position is not None:
        n = max(len(first.accepted_per_position), len(second.accepted_per_position))
        a = first.accepted_per_position + [0.0] * (n - len(first.accepted_per_position))
        b = second.accepted_per_position + [0.0] * (n - len(second.accepted_per_position))
        if any(y < x for x, y in zip(a, b, strict=True)):
            raise UsageError(f"--metrics {where}: an accepted-per-position counter went backwards: the server "
                             "restarted between the two scrapes")
        out.accepted_per_position = [y - x for x, y in zip(a, b, strict=True)]
    if out.verify_steps == 0:
        raise UsageError(f"--metrics {where}: no verify step between the two scrapes: nothing was drafted")
    return out


@dataclass
class Fit:
    """One reading's prediction held to the server's counters."""

    reading: str
    what: str  # how it differs from the trained reading ("as trained", or the candidate's value)
    acceptance_length: float
    interval: tuple[float, float] | None
    per_position: list[float]
    per_position_intervals: list[tuple[float, float] | None]
    fits: bool
    trained: bool  # computes what was trained (the trainer's reading, or an engine reading that agrees with it)

    def record(self) -> dict[str, Any]:
        return {"reading": self.reading, "what": self.what, "acceptance_length": self.acceptance_length,
                "interval": list(self.interval) if self.interval else None, "per_position": self.per_position,
                "per_position_intervals": [list(i) if i else None for i in self.per_position_intervals],
                "fits": self.fits, "trained": self.trained}


def fit(figures: Figures, what: str, trained: bool, server: Counters, drafting: Drafting) -> Fit:
    """``figures`` (acceptance.evaluate.Figures) walked with the server's ``drafting``, held to ``server``."""
    walked = Figures(figures.reading, figures.steps, drafting=drafting)
    walked.sequences = figures.sequences
    al = walked.interval("acceptance_length")
    rates = walked.per_position
    ivs = [walked.interval("per_position", k) for k in range(len(rates))]
    inside = al.known and server.acceptance_length is not None and al.lo <= server.acceptance_length <= al.hi
    mine = server.per_position
    if inside and mine is not None:
        inside = all(iv.known and iv.lo - 1e-12 <= r <= iv.hi + 1e-12 for iv, r in zip(ivs, mine, strict=False))
    return Fit(figures.reading, what, walked.acceptance_length, (al.lo, al.hi) if al.known else None, rates,
               [(iv.lo, iv.hi) if iv.known else None for iv in ivs], bool(inside), trained)


@dataclass
class Verdict:
    """Which readings the server's counters fit, and what that says."""

    server: Counters
    fits: list[Fit]
    verdict: str  # "as-trained", "otherwise", "unexplained", "undecided"
    said: str
    cost: float | None = None  # the share of the trained acceptance length the served reading loses

    @property
    def exit_code(self) -> int:
        return 1 if self.verdict == "otherwise" else 0

    def record(self) -> dict[str, Any]:
        return {"server": self.server.record(), "readings": [f.record() for f in self.fits],
                "verdict": self.verdict, "said": self.said, "cost": self.cost}


@dataclass
class Predicted:
    """Each reading's figures on the data (acceptance.evaluate.Figures), what it is, and the server's drafting."""

    readings: list[tuple[Figures, str, bool]]  # (figures, what it is, computes what was trained)
    drafting: Drafting

    def fits(self, server: Counters) -> list[Fit]:
        return [fit(figures, what, trained, server, self.drafting) for figures, what, trained in self.readings]


def predict(ckpt: Checkpoint, spec: str, data: Iterable[Sample], steps: int, target: TargetHead | None = None,
            embedding: EmbeddingRows | None = None, launch: Launch | None = None) -> Predicted:
    """The trainer's reading, ``spec``'s reading of the config and the resolver's candidates (each differing from the
    trained reading in one thing the config cannot prove), run once over ``data``. Raises AcceptanceError."""
    named = readings(ckpt, [spec], launch=launch)
    cands = candidates(named[0][1])
    result = evaluate(ckpt, named + [(c.name, c.reading) for c in cands], data, steps, target=target,
                      orders={c.name: c.order for c in cands if c.order}, embedding=embedding, launch=launch)
    figs = {f.reading: f for f in result.readings}
    out: list[tuple[Figures, str, bool]] = [(figs["trainer"], "the drafter read as trained", True)]
    mine = figs.get(spec)
    if mine is not None and not mine.problem:
        out.append((mine, f"{spec}'s reading of the config"
                    + (f" ({'; '.join(mine.causes)})" if mine.causes else ": as trained"), not mine.fields))
    out += [(figs[c.name], value_text(c.question, c.value), False) for c in cands if not figs[c.name].problem]
    return Predicted(out, serving(spec, steps, launch)[0])


def judge(server: Counters, fits: list[Fit]) -> Verdict:
    trained = [f for f in fits if f.trained]
    fitting = [f for f in fits if f.fits]
    base = trained[0] if trained else None
    if not fitting:
        near = min(fits, key=lambda f: abs(f.acceptance_length - (server.acceptance_length or 0.0)))
        return Verdict(server, fits, "unexplained",
                       f"no reading fits the server's counters (acceptance length {server.acceptance_length:.3f}; "
                       f"the nearest, {near.what}, predicts {near.acceptance_length:.3f}): the traffic may differ "
                       "from the recorded data (other prompts, another sampling), or the server may serve another "
                       "drafter or target; record states of the served prompts (eagle3-checks record) to tell")
    if any(f.trained for f in fitting):
        others = [f.what for f in fitting if not f.trained]
        return Verdict(server, fits, "as-trained", "served as trained: the server's counters fit the drafter read "
                       "as trained" + (f"; they fit {', '.join(others)} too: the counters cannot tell these apart "
                                       "(their predictions lie inside each other's intervals)" if others else ""))
    names = ", ".join(f.what for f in fitting)
    cost = None
    if base is not None and base.acceptance_length > 1.0 and server.acceptance_length is not None:
        nearest = min(fitting, key=lambda f: abs(f.acceptance_length - (server.acceptance_length or 0.0)))
        cost = 1.0 - nearest.acceptance_length / base.acceptance_length
    return Verdict(server, fits, "otherwise", f"not served as trained: the server's counters fit {names}, not the "
                   f"drafter read as trained (predicted {base.acceptance_length:.3f})" if base else
                   f"the server's counters fit {names}", cost)
