"""Which semantics the weights were trained with, settled by the user's data where the config cannot say.

A config states what a drafter means; it cannot prove what its trainer computed. Four questions are asked:

* ``rope_theta``: SpecForge before PR #270 (2025-10-30; ``specforge/modeling/draft/llama3_eagle.py``, ``_init_rope``)
  built its rotary embedding with base 10000 whenever ``rope_scaling`` was null, whatever ``rope_theta`` said;
* ``norm_before_residual`` is absent from flat configs and engines default it differently (vLLM 0.33.0 True,
  speculators False: see the engine profiles), and a converter may write the wrong one;
* ``feedback``: SpecForge PR #879 (2026-09) changed what ``norm_output`` means (EAGLE-3 vs EAGLE-3.1 feedback);
* ``aux_order``: a converter may write fc's input blocks in another order than the trainer fed the aux states.

Each question's candidates are the values it can take, the others held where they stand; every candidate runs over
the data (:func:`eagle3_checks.acceptance.evaluate.evaluate`), and the weights score best under what they were
trained with. Two figures score a candidate: the greedy acceptance length, and with the target's distribution
(``--target``) alpha. Neither is enough alone: alpha barely moves where the target's distributions are broad while
the acceptance length does, and the acceptance length is coarse where drafts are short.

A question is **decided** when, on either figure, the best candidate beats the runner-up by a gain whose 95%
interval over sequences excludes zero (a paired ratio estimator, :mod:`.stats`: positions within a sequence are
correlated) and whose size is at least :data:`~eagle3_checks.options.DECIDE_GAIN`; the figures must not favour
different candidates. The finding says which figure decided, with the gain and its interval.

Questions are decided **jointly**: the question with the strongest significant gain (gain over its standard error)
is settled first; when it contradicts the config its value is applied, and the remaining questions are scored again
with it applied (another pass over the data); repeat. A wrong aux order makes every other question score under the
wrong inputs (a rope base of 10000 "gains" there only because the aux order was wrong); settled first, it is out
of the way. At the end every decision is checked again with all the others applied; one that flips is not made.

An undecided question says which figure came closest and about how much data would decide it, or that the
candidates compute alike on this data; it blames an untrained drafter only when every candidate's acceptance is at
chance.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import field
from typing import TYPE_CHECKING, Any

from ..fast_dataclass import dataclass
from ..options import DECIDE_GAIN, NOTHING
from .evaluate import RESOLVE, TRAINER, Figures, Launch, Result, evaluate
from .samples import Sample
from .stats import Interval

if TYPE_CHECKING:
    from ..drafter.checkpoint import Checkpoint
    from ..engines.reading import Reading
    from ..numerics.ops import EmbeddingRows, Tensor
    from .target_head import TargetHead

# a reading the resolver runs: (its name, the reading, the order fc's input blocks are fed in, None: as recorded)
Run = tuple[str, "Reading", "tuple[int, ...] | None"]

ROPE_DEFAULT = 10000.0  # the base SpecForge before PR #270 used with rope_scaling null
MAX_AUX_ORDERS = 4  # aux counts up to this have every order scored (4! = 24 readings); more: only the stated one
MAX_ROUNDS = 8  # passes over the data the joint decision may take (each settles one contradiction)

CONFIRMED, CONTRADICTED, UNDECIDED = "confirmed", "contradicted", "undecided"
AL, ALPHA = "per-start acceptance length", "alpha"
# the resolver decides on the per-start figure (every start position counts: the most the data can tell), not on the
# served walk's, which is a figure to report, not a test statistic
_ATTR = {AL: "per_start_acceptance_length", ALPHA: "alpha"}
QUESTIONS = ("rope_theta", "norm_before_residual", "feedback", "aux_order")


@dataclass
class Test:
    """One figure's comparison of a question's best candidate with its runner-up."""

    figure: str  # AL or ALPHA
    best: Any
    runner: Any
    gain: Interval  # the best's figure minus the runner-up's, paired over the sequences

    @property
    def significant(self) -> bool:
        return self.gain.known and self.gain.lo > 0 and self.gain.value >= DECIDE_GAIN

    @property
    def strength(self) -> float:
        """The gain over its standard error (inf for a gain without spread)."""
        if not self.gain.known:
            return 0.0
        return math.inf if self.gain.sd == 0 and self.gain.value > 0 else \
            (self.gain.value / self.gain.sd if self.gain.sd else 0.0)

    def shown(self, question: str) -> str:
        return (f"{self.figure} {self.gain.value:+.3f} [{self.gain.lo:+.3f}, {self.gain.hi:+.3f}] for "
                f"{value_text(question, self.best)} over {value_text(question, self.runner)}"
                if self.gain.known else
                f"{self.figure} {self.gain.value:+.3f} (no interval: {self.gain.n} sequence(s)) for "
                f"{value_text(question, self.best)} over {value_text(question, self.runner)}")

    def record(self) -> dict[str, Any]:
        return {"figure": self.figure, "best": _plain(self.best), "runner_up": _plain(self.runner),
                "gain": self.gain.value, "interval": self.gain.record()}


@dataclass
class Answer:
    question: str
    stated: Any  # what the config says (the trainer's reading)
    verdict: str  # CONFIRMED, CONTRADICTED or UNDECIDED
    best: Any  # the candidate value that won (decided) or scored best (undecided)
    scores: list[tuple[Any, dict[str, float | None]]]  # (value, {figure: value}), the stated first
    tests: list[Test] = field(default_factory=list)
    decided_by: Test | None = None  # the figure whose gain decided
    reading: Reading | None = None  # the best candidate's reading (CONTRADICTED: what the weights were trained with)
    why: str = ""  # UNDECIDED: why
    settle: str = ""  # UNDECIDED: what would decide it
    applied: tuple[str, ...] = ()  # the contradictions applied when it was decided (joint decision)

    @property
    def metric(self) -> str:
        return self.decided_by.figure if self.decided_by else (self.tests[0].figure if self.tests else AL)

    @property
    def gain(self) -> float:
        """The deciding (else the closest) figure's gain of the best candidate over the runner-up."""
        t = self.decided_by or (self.tests[0] if self.tests else None)
        return t.gain.value if t else 0.0

    def shown(self) -> str:
        """Every candidate's figures."""
        def one(v: Any, s: dict[str, float | None]) -> str:
            return f"{value_text(self.question, v)}: " + ", ".join(
                f"{fig} {x:.3f}" for fig, x in s.items() if x is not None)
        return "; ".join(one(v, s) for v, s in self.scores)

    def evidence(self) -> str:
        """Which figure decided, its gain and interval (and the other figure's)."""
        applied = f"; scored with {', '.join(self.applied)} applied" if self.applied else ""
        if self.decided_by is None:
            return "; ".join(t.shown(self.question) for t in self.tests) + applied
        others = [t for t in self.tests if t is not self.decided_by]
        return (f"decided by {self.decided_by.shown(self.question)}"
                + "".join(f"; {t.shown(self.question)}" for t in others) + applied)

    def describe(self) -> str:
        """One line: the verdict, what decided it, and every candidate's figures."""
        if self.verdict == CONTRADICTED:
            best = value_text(self.question, self.best)
            head = f"{self.question}: CONTRADICTED: the weights were trained with {best}"
        elif self.verdict == CONFIRMED:
            head = f"{self.question}: confirmed"
        else:
            head = f"{self.question}: undecided ({self.why}" + (f"; {self.settle}" if self.settle else "") + ")"
        return f"{head} ({self.evidence()}) ({self.shown()})"

    def record(self) -> dict[str, Any]:
        return {"question": self.question, "verdict": self.verdict, "stated": _plain(self.stated),
                "best": _plain(self.best), "metric": self.metric,
                "decided_by": self.decided_by.record() if self.decided_by else None,
                "tests": [t.record() for t in self.tests], "applied": list(self.applied),
                "scores": [[_plain(v), s] for v, s in self.scores],
                **({"why": self.why, "settle": self.settle} if self.verdict == UNDECIDED else {})}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def value_text(question: str, value: Any) -> str:
    """A candidate as findings and reports name it: ``rope_theta 10000``, ``norm_output True (normed feedback)``."""
    if question == "aux_order":
        return f"fc blocks fed aux {tuple(value)}"
    if question == "feedback":
        return f"norm_output {value == 'normed'} ({value} feedback)"
    return f"{question} {value:g}" if isinstance(value, float) else f"{question} {value}"


# ----- the questions and their candidates ----------------------------------------------------------------------------

def values(trained: Reading) -> dict[str, list[Hashable]]:
    """Each question asked of this drafter and its candidate values, the stated one first."""
    out: dict[str, list[Hashable]] = {}
    if trained.rope_theta != ROPE_DEFAULT and trained.mla is None:
        out["rope_theta"] = [trained.rope_theta, ROPE_DEFAULT]
    out["norm_before_residual"] = [trained.norm_before_residual, not trained.norm_before_residual]
    out["feedback"] = [trained.feedback, "normed" if trained.feedback == "prenorm" else "prenorm"]
    if 1 < trained.num_aux <= MAX_AUX_ORDERS:
        out["aux_order"] = list(itertools.permutations(range(trained.num_aux)))
    return out


@dataclass
class Candidate:
    question: str  # a Reading field ("rope_theta", "norm_before_residual", "feedback") or "aux_order"
    name: str  # its reading's name in the evaluation ("resolve:rope_theta=10000.0")
    value: Any
    reading: Reading
    order: tuple[int, ...] | None = None  # the order fc's input blocks are fed in (None: as recorded)


def build(trained: Reading, state: dict[str, Any]) -> tuple[Reading, tuple[int, ...] | None]:
    """The trainer's reading with ``state``'s values (question -> value) applied, and the aux order it is fed."""
    fields = {q: v for q, v in state.items() if q != "aux_order"}
    reading = dataclasses.replace(trained, **fields) if fields else trained
    order = state.get("aux_order")
    return reading, (tuple(order) if order is not None and list(order) != sorted(order) else None)


def candidates(trained: Reading, state: dict[str, Any] | None = None, questions: list[str] | None = None,
               tag: str = "") -> list[Candidate]:
    """For each question (default: all), a reading per value other than the one ``state`` (default: the config)
    holds, the others held at ``state``."""
    state = state or {}
    asked = values(trained)
    out = []
    for q in questions or list(asked):
        current = state.get(q, asked[q][0])
        for v in asked[q]:
            if v == current:
                continue
            reading, order = build(trained, {**state, q: v})
            out.append(Candidate(q, f"{RESOLVE}{tag}{q}={v}", v, reading, order))
    return out


def entries(cands: list[Candidate]) -> list[Run]:
    return [(c.name, c.reading, c.order) for c in cands]


# ----- one question from one pass -------------------------------------------------------------------------------------

def _score(f: Figures) -> dict[str, float | None]:
    return {AL: f.per_start_acceptance_length, ALPHA: f.alpha}


def judge(question: str, stated: Any, by_value: dict[Any, Figures], labels: str) -> Answer:
    """The verdict on one question from its candidates' figures (value -> Figures, the stated value's first)."""
    figures = [AL] + ([ALPHA] if labels == "target" else [])
    scores = [(v, _score(f)) for v, f in by_value.items()]
    tests = []
    for fig in figures:
        ranked = sorted(by_value.items(), key=lambda kv: getattr(kv[1], _ATTR[fig]) or 0.0, reverse=True)
        (best, fb), (runner, fr) = ranked[0], ranked[1]
        tests.append(Test(fig, best, runner, fb.gain(fr, _ATTR[fig])))
    tests.sort(key=lambda t: t.strength, reverse=True)
    significant = [t for t in tests if t.significant]
    top = tests[0]
    answer = Answer(question, stated, UNDECIDED, top.best, scores, tests)
    if significant and len({_key(t.best) for t in significant}) == 1:
        answer.decided_by = significant[0]
        answer.best = significant[0].best
        answer.verdict = CONFIRMED if _key(answer.best) == _key(stated) else CONTRADICTED
        return answer
    if significant:
        answer.why = "the figures favour different candidates: " + "; ".join(t.shown(question) for t in significant)
        return answer
    at_chance = all(f.per_start_acceptance_length <= 1.0 + NOTHING for f in by_value.values())
    if at_chance:
        answer.why = (f"every candidate accepts nothing on this data (acceptance length at most 1 + {NOTHING:g}): "
                      "the figures are at chance, as an untrained or broken drafter's are")
        return answer
    # the candidates compute alike only if no figure's interval reaches the minimum effect; else the figure that
    # came closest to deciding among those that could
    open_ = [t for t in tests if not t.gain.known or t.gain.hi >= DECIDE_GAIN]
    answer.why, answer.settle = _undecided(open_[0] if open_ else top, by_value)
    if labels == "tokens":
        answer.settle += "; --target adds alpha, the target's distribution, which may decide it"
    return answer


def _key(value: Any) -> Any:
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _undecided(t: Test, by_value: dict[Any, Figures]) -> tuple[str, str]:
    """Why the closest figure did not decide, and about how much data would."""
    g = t.gain
    first = next(iter(by_value.values()))
    seqs = max(1, sum(1 for s in first.sequences if s.positions))
    per = first.positions / seqs
    if not g.known:
        return (f"{t.figure}: no interval over {g.n} sequence(s)",
                "at least 2 recorded sequences are needed for an interval")
    if g.hi < DECIDE_GAIN:
        return (f"the candidates compute alike on this data: the best {t.figure} gain is {g.value:+.4f} "
                f"[{g.lo:+.4f}, {g.hi:+.4f}], below the minimum effect {DECIDE_GAIN:g}",
                "more data of this kind would not decide it; data where the candidates compute differently would "
                "(for rope_theta: longer sequences)")
    width = g.value if g.value >= DECIDE_GAIN else DECIDE_GAIN
    need = g.sequences_for(width)
    more = (f"about {need} sequences ({round(need * per)} positions) of recorded states would decide a gain of "
            f"{width:.3f} in {t.figure}" if need else "more recorded sequences would narrow the interval")
    return f"{t.figure}: gain {g.value:+.3f} [{g.lo:+.3f}, {g.hi:+.3f}] over {g.n} sequences is not significant", more


def _by_value(question: str, stated: Any, names: dict[Any, str], result: Result) -> dict[Any, Figures] | None:
    """Each value's figures in ``result`` (the stated value first); None when any candidate could not run."""
    by_name = {f.reading: f for f in result.readings}
    out = {}
    for v in sorted(names, key=lambda v: _key(v) != _key(stated)):
        f = by_name[names[v]]
        if f.problem:
            return None
        out[v] = f
    return out if len(out) > 1 else None


# ----- the joint decision ---------------------------------------------------------------------------------------------

Rerun = Callable[[list[Run]], Result]


def resolve(trained: Reading, first: Result, rerun: Rerun) -> list[Answer]:
    """Every question's answer, decided jointly. ``first``: a pass over the data that ran the trainer's reading (as
    :data:`~eagle3_checks.acceptance.evaluate.TRAINER`) and :func:`candidates` (trained); ``rerun(entries)``: another
    pass with the readings ``(name, reading, aux order)``, the first the base the others vary."""
    asked = values(trained)
    stated = {q: v[0] for q, v in asked.items()}
    state: dict[str, Any] = {}  # contradictions applied: question -> the value the weights were trained with
    settled: dict[str, Answer] = {}
    pending = [q for q in QUESTIONS if q in asked]
    result, base_name, tag = first, TRAINER, ""
    final: dict[str, Answer] = {}
    for round_ in range(MAX_ROUNDS):
        scored = {}
        for q in pending:
            names = {v: (base_name if _key(v) == _key(state.get(q, stated[q])) else f"{RESOLVE}{tag}{q}={v}")
                     for v in asked[q]}
            by_value = _by_value(q, stated[q], names, result)
            if by_value is not None:
                answer = judge(q, stated[q], by_value, result.labels)
                answer.applied = tuple(value_text(k, v) for k, v in state.items())
                answer.reading = build(trained, {**state, q: answer.best})[0]
                scored[q] = answer
        decided = sorted((a for a in scored.values() if a.verdict != UNDECIDED),
                         key=lambda a: a.decided_by.strength if a.decided_by else 0.0, reverse=True)
        contradiction = None
        for a in decided:
            settled[a.question] = a
            pending.remove(a.question)
            if a.verdict == CONTRADICTED:
                state[a.question] = a.best
                contradiction = a
                break
        if contradiction is None or not pending:
            final.update({q: a for q, a in scored.items() if q in pending})
            break
        # the remaining questions, scored again with the contradiction applied
        tag = f"r{round_ + 1}:"
        base, order = build(trained, state)
        base_name = f"{RESOLVE}{tag}base"
        result = rerun([(base_name, base, order)] + entries(candidates(trained, state, pending, tag)))
    else:
        final.update({q: scored[q] for q in pending if q in scored})
    if state and len(settled) > 1:
        final.update(_verify(trained, asked, stated, state, settled, rerun))
    final.update(settled)
    return [final[q] for q in QUESTIONS if q in final]


def _verify(trained: Reading, asked: dict[str, list[Hashable]], stated: dict[str, Any], state: dict[str, Any],
            settled: dict[str, Answer], rerun: Rerun) -> dict[str, Answer]:
    """Hold every decision to a pass with all the other decisions applied; one that flips (another winner, or no
    longer significant) is not made: undecided (returned, and taken out of ``settled``), its contradiction withdrawn
    from ``state``, and the rest checked again."""
    unmade: dict[str, Answer] = {}
    for _ in range(len(settled)):
        runs: list[Run] = []
        names: dict[str, dict[Any, str]] = {}
        for q in settled:
            others = {k: v for k, v in state.items() if k != q}
            names[q] = {}
            for v in asked[q]:
                name = f"{RESOLVE}verify:{q}={v}"
                reading, order = build(trained, {**others, q: v})
                runs.append((name, reading, order))
                names[q][v] = name
        result = rerun(runs)
        flipped = []
        for q, a in settled.items():
            by_value = _by_value(q, stated[q], names[q], result)
            if by_value is None:
                continue
            again = judge(q, stated[q], by_value, result.labels)
            if again.verdict == UNDECIDED or _key(again.best) != _key(a.best):
                applied = [value_text(k, v) for k, v in state.items() if k != q]
                a.verdict = UNDECIDED
                a.why = (f"the decision flips when {', '.join(applied) or 'the others'} "
                         f"{'is' if len(applied) == 1 else 'are'} applied: "
                         + (again.why or f"it then favours {value_text(q, again.best)}"))
                a.settle = again.settle or "data on which the questions separate"
                a.decided_by = None
                flipped.append(q)
        if not flipped:
            break
        for q in flipped:
            state.pop(q, None)
            unmade[q] = settled.pop(q)
        if not state or len(settled) < 2:
            break
    return unmade


def resolver_entries(trained: Reading) -> list[Run]:
    """The readings the first pass runs beside the trainer's: every question's other values."""
    return entries(candidates(trained))


def measure(ckpt: Checkpoint, named: list[tuple[str, Reading]], data: Callable[[], Iterable[Sample]], steps: int,
            device: str | None = None, target: TargetHead | None = None, ask: bool = True,
            embedding: EmbeddingRows | None = None, own: dict[str, list[list[Tensor]]] | None = None,
            launch: Launch | None = None) -> tuple[Result, list[Answer]]:
    """Every reading's figures over ``data()`` (a fresh iterator of samples per pass) and, with ``ask``, every
    question's answer (:func:`resolve`: the first pass runs the candidates beside the readings, later passes only
    what the joint decision needs). ``own``: the readings an engine's own code computed (evaluate), scored in the
    first pass. The result's readings are ``named``'s alone."""
    extra = resolver_entries(named[0][1]) if ask else []
    result = evaluate(ckpt, named + [(n, r) for n, r, _ in extra], data(), steps, device=device, target=target,
                      orders={n: o for n, _, o in extra if o}, embedding=embedding, own=own, launch=launch)

    def rerun(runs: list[Run]) -> Result:
        return evaluate(ckpt, [(n, r) for n, r, _ in runs], data(), steps, device=device, target=target,
                        orders={n: o for n, _, o in runs if o}, embedding=embedding)

    found = resolve(named[0][1], result, rerun) if ask else []
    result.readings = result.readings[:len(named)]
    return result, found
