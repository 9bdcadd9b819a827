"""Teacher-forced multi-step acceptance of each reading of a drafter, on recorded target states.

Each reading (the trainer's, and each engine release's, as :mod:`eagle3_checks.engines` models them) runs through
the forward level's one implementation (:func:`eagle3_checks.numerics.draft_steps.run`), K draft steps.

Alignment, as speculators 0.9.0 pairs them (``speculators/models/eagle3/data.py:24-35``, ``shift_batch``): for a
sample of T tokens x, row j (0 <= j < T-1) takes the aux state at j, the token x[j+1] and position j+1; draft step k
of row j is labelled x[j+k+2] and later step k+1 is fed x[j+k+2], the token step k was to draft (teacher forcing, as
``speculators/models/eagle3/core.py:325-338`` does; equal to an engine's own draft whenever that step was accepted,
which is all an acceptance figure looks at). SpecForge counts positions from 0 instead of 1; RoPE is relative, so
the shift changes no logit. A loss mask counts step k of row j only where mask[j+k+1] is set (speculators'
``align_for_step``, ``speculators/models/eagle3/metrics.py:16-48``).

Figures per reading, over the starting positions whose K labels all exist and whose step 0 is masked in:

* ``step_accuracy[k]``: the share of positions where step k's argmax (over the target vocabulary, through d2t)
  equals its label;
* ``conditional_accuracy[k]``: the same, among positions whose steps 0..k-1 were all accepted (0.0 when none were);
* ``acceptance_length`` (the headline): what a server reports, ``1 + accepted / verify steps`` over the served walk
  (:mod:`.walk`: each request walked as a chain-drafting server walks it, the next draft ``a + 1`` rows after the
  last, the reading's engine's drafting and counter names from :mod:`eagle3_checks.engines.counting`), with
  ``per_position`` (accepted at position i / verify steps); held to a real llama.cpp server's counters
  (tests/test_served.py);
* ``per_start_acceptance_length``: 1 + the mean leading run over every start position, the trainers' metric
  (``speculators/models/metrics.py:7-31``, ``compute_accepted_length_counts``, computes it so), for comparison with
  training logs: above what a server reports wherever acceptance clusters along a text;
* ``alpha``: null with token labels (it needs the target's distribution); with the target's final norm and
  lm_head (``--target``), the mean over the counted (position, step) pairs of sum(min(p_target, p_draft)), the
  acceptance rate of speculative sampling.

With ``--target`` the labels are the target's argmax at the position each step drafts from (row j, step k:
position j+k+1). Later steps are fed the recorded tokens in both cases, as speculators' teacher forcing does
(``core.py:325-338``): the recorded states saw those tokens. Where the recorded tokens are the target's own greedy
continuation (the response a trainer's data generation regenerates with the target) that is what an engine feeds
after an accepted step; in a prompt the target's argmax may differ from the next recorded token, and the figures
then count what speculators' metrics count.

A sample's positions from its first non-finite (NaN or Inf) state on are skipped and counted: every later row
attends to that state.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from .. import engines
from ..engines.counting import CHAIN, FULL, Counting, Drafting
from ..engines.reading import describe_difference, differences
from ..fast_dataclass import dataclass
from ..numerics.draft_steps import ForwardError, Inputs, Weights, run
from ..options import FAIL_SHARE as FAIL_SHARE  # re-exported: acceptance.FAIL_SHARE
from ..options import MIN_COVERAGE, NOTHING
from .samples import Expect, Sample
from .stats import SHARE, Interval, linearised, ratio
from .walk import Walked, requests, stops, walk

if TYPE_CHECKING:
    from ..drafter.checkpoint import Checkpoint
    from ..engines.reading import Reading
    from ..numerics.ops import EmbeddingRows, Tensor
    from .target_head import TargetHead

# the launch settings each release is started with (--launch): spec -> its settings, or None
Launch = Callable[[str], "dict[str, Any] | None"]

TRAINER = "trainer"
RESOLVE = "resolve:"  # the prefix of the resolver's candidate readings (acceptance/resolve.py)


class AcceptanceError(Exception):
    """The drafter cannot be evaluated (the message says why)."""


@dataclass
class SeqCounts:
    """One sample's counts (the unit the intervals are drawn over: positions within a sequence are correlated)."""

    positions: int = 0
    accepted: float = 0.0
    correct: list[int] = field(default_factory=list)
    counted: list[int] = field(default_factory=list)
    cond_correct: list[int] = field(default_factory=list)
    cond_counted: list[int] = field(default_factory=list)
    overlap: float = 0.0
    overlap_n: int = 0
    covered: int = 0  # step-0 labels of counted positions that the draft vocabulary can express
    # what the served walk needs (walk.walk): each row's leading run of right draft steps, the sample's requests,
    # and each step's top draft probability per row (only where a drafting has a confidence cut-off)
    lead: list[int] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    confidence: list[list[float]] | None = None
    margin: list[list[float]] | None = None  # each step's top-2 logit gap per row (evaluate(..., margins=True))
    _walks: dict[Drafting, Walked] = field(default_factory=dict, repr=False, compare=False)

    def walked(self, drafting: Drafting) -> Walked:
        """This sequence walked with ``drafting`` (walk.walk), once per drafting."""
        if drafting not in self._walks:
            cut = stops(self.confidence, drafting.p_min) if drafting.p_min and self.confidence else None
            self._walks[drafting] = walk(self.lead, self.spans, drafting, cut)
        return self._walks[drafting]


@dataclass
class Figures:
    reading: str
    steps: int
    positions: int = 0
    accepted: float = 0.0  # the sum of leading accepted runs over every start position (the trainers' metric)
    correct: list[int] = field(default_factory=list)
    counted: list[int] = field(default_factory=list)
    cond_correct: list[int] = field(default_factory=list)
    cond_counted: list[int] = field(default_factory=list)
    overlap: float = 0.0  # the sum over counted (position, step) of sum(min(p_target, p_draft))
    overlap_n: int = 0
    covered: int = 0  # step-0 labels of counted positions inside the draft vocabulary (the reading's d2t)
    problem: str | None = None  # the reading cannot compute the drafter
    causes: list[str] = field(default_factory=list)  # how this reading differs from the trainer's (engines.reading)
    fields: list[str] = field(default_factory=list)  # the semantic fields it differs in
    window_fits: int | None = None  # differs from the trainer's in its attention window: contexts up to this compute
    # alike (the smaller window)
    sequences: list[SeqCounts] = field(default_factory=list)  # per sample, in data order (every sample, also empty)
    drafting: Drafting | None = None  # how the server this reading stands for drafts (None: K chained drafts)
    counting: Counting | None = None  # how that server names its counters (None: the trainer's reading)

    def __post_init__(self) -> None:
        for name in ("correct", "counted", "cond_correct", "cond_counted"):
            if not getattr(self, name):
                setattr(self, name, [0] * self.steps)
        if self.drafting is None:
            self.drafting = chain(self.steps)

    # ----- the served walk (walk.py): the headline, counted per verify step as a server counts ---------------------

    def walked(self, drafting: Drafting | None = None) -> list[Walked]:
        """Each sequence walked as a server drafting with ``drafting`` (this reading's own by default)."""
        d = (drafting or self.drafting or chain(self.steps)).capped(self.steps)
        if d.p_min and any(s.confidence is None for s in self.sequences if s.lead):
            raise AcceptanceError(f"{self.reading}: a confidence cut-off needs the draft probabilities, which were "
                                  "not kept (evaluate(..., confidence=True))")
        return [s.walked(d) for s in self.sequences]

    def _total(self, name: str, drafting: Drafting | None = None) -> int:
        return sum(getattr(w, name) for w in self.walked(drafting))

    @property
    def verify_steps(self) -> int:
        return self._total("steps")

    @property
    def acceptance_length(self) -> float:
        """1 + accepted / verify steps over the served walk: what the server reports (1.0 with no verify step)."""
        n = self.verify_steps
        return 1.0 + (self._total("accepted") / n if n else 0.0)

    @property
    def per_position(self) -> list[float]:
        """Accepted at draft position i / verify steps (each server's per-position rate)."""
        walks = self.walked()
        n = sum(w.steps for w in walks)
        k = len(walks[0].per_position) if walks else 0
        return [sum(w.per_position[i] for w in walks) / n if n else 0.0 for i in range(k)]

    @property
    def per_start_acceptance_length(self) -> float:
        """1 + the mean leading run over every start position: speculators' and SpecForge's training metric, for
        comparison with training logs (not what a server reports)."""
        return 1.0 + (self.accepted / self.positions if self.positions else 0.0)

    @property
    def alpha(self) -> float | None:
        return self.overlap / self.overlap_n if self.overlap_n else None

    @property
    def step_accuracy(self) -> list[float]:
        return [c / n if n else 0.0 for c, n in zip(self.correct, self.counted, strict=True)]

    @property
    def conditional_accuracy(self) -> list[float]:
        return [c / n if n else 0.0 for c, n in zip(self.cond_correct, self.cond_counted, strict=True)]

    @property
    def coverage(self) -> float | None:
        """The share of step-0 labels the draft vocabulary can express (an upper bound on step-0 accuracy)."""
        return self.covered / self.positions if self.positions else None

    # ----- intervals over sequences (stats.ratio) ------------------------------------------------------------------

    def _seq(self, name: str, k: int | None = None) -> list[float]:
        return [getattr(s, name) if k is None else getattr(s, name)[k] for s in self.sequences]

    def interval(self, figure: str, k: int = 0) -> Interval:
        """The 95% interval of ``figure`` ("acceptance_length" and "per_position" at position ``k``, over the served
        walk; "per_start_acceptance_length", "alpha", "coverage", "step_accuracy", "conditional_accuracy" at step
        ``k``) over the sequences."""
        share = SHARE
        if figure in ("acceptance_length", "per_position"):
            walks = self.walked()
            steps = [w.steps for w in walks]
            if figure == "per_position":
                return ratio([w.per_position[k] for w in walks], steps, bounds=share)
            deepest = len(walks[0].per_position) if walks else self.steps
            return ratio([w.accepted for w in walks], steps, 1.0, (1.0, deepest + 1.0))
        if figure == "per_start_acceptance_length":
            return ratio(self._seq("accepted"), self._seq("positions"), 1.0, (1.0, self.steps + 1.0))
        if figure == "alpha":
            return ratio(self._seq("overlap"), self._seq("overlap_n"), bounds=share)
        if figure == "coverage":
            return ratio(self._seq("covered"), self._seq("positions"), bounds=share)
        if figure == "step_accuracy":
            return ratio(self._seq("correct", k), self._seq("counted", k), bounds=share)
        if figure == "conditional_accuracy":
            return ratio(self._seq("cond_correct", k), self._seq("cond_counted", k), bounds=share)
        raise ValueError(figure)

    def gain(self, other: Figures, figure: str) -> Interval:
        """This reading's ``figure`` ("per_start_acceptance_length" or "alpha") minus ``other``'s, paired over the
        same sequences and positions (both readings scored the same data): the resolver's test statistic."""
        num, den = ("accepted", "positions") if figure == "per_start_acceptance_length" else ("overlap", "overlap_n")
        diff = [a - b for a, b in zip(self._seq(num), other._seq(num), strict=True)]
        return ratio(diff, self._seq(den))

    def drop(self, base: Figures) -> Interval:
        """The share of ``base``'s served acceptance length this reading loses, 1 - AL / AL_base, both walked with
        this reading's drafting over the same sequences, with its delta-method interval over them (stats.paired)."""
        mine, theirs = self.walked(), base.walked(self.drafting)
        tokens = [w.steps + w.accepted for w in mine]  # tokens the verify steps yield
        base_tokens = [w.steps + w.accepted for w in theirs]
        return served_drop(tokens, [w.steps for w in mine], base_tokens, [w.steps for w in theirs])

    def intervals(self) -> dict[str, Any]:
        """Every figure's 95% interval (None where fewer than two sequences count), as ``--format json`` gives them."""
        return {"acceptance_length": self.interval("acceptance_length").record(),
                "per_position": [self.interval("per_position", k).record() for k in range(len(self.per_position))],
                "per_start_acceptance_length": self.interval("per_start_acceptance_length").record(),
                "step_accuracy": [self.interval("step_accuracy", k).record() for k in range(self.steps)],
                "conditional_accuracy": [self.interval("conditional_accuracy", k).record()
                                         for k in range(self.steps)],
                "alpha": self.interval("alpha").record() if self.alpha is not None else None}

    def served(self) -> dict[str, Any]:
        """What the server's counters will say over the data (:mod:`.walk`), and the same figures under the names
        the reading's engine gives them (engines.counting: its release, file and line)."""
        walks = self.walked()
        d = (self.drafting or chain(self.steps)).capped(self.steps)
        steps, accepted = sum(w.steps for w in walks), sum(w.accepted for w in walks)
        figures: dict[str, Any] = {
                   "verify_steps": steps, "drafted": sum(w.drafted for w in walks), "accepted": accepted,
                   "accepted_per_position": [sum(w.per_position[i] for w in walks) for i in range(d.k)],
                   "acceptance_length": self.acceptance_length, "per_position_rate": self.per_position}
        out: dict[str, Any] = {**figures, "drafting": {"k": d.k, "n_min": d.n_min, "p_min": d.p_min,
                                                       "tail": d.tail, "said": list(d.said),
                                                       "unmodelled": d.unmodelled}}
        if self.counting is not None and self.counting.metrics:
            named = {name: figures[ours] for ours, name in self.counting.metrics if ours in figures}
            rate = self.counting.name("accept_rate")
            if rate:  # SGLang: accepted over K per verify step
                named[rate] = accepted / (steps * d.k) if steps else 0.0
            out["as_named"] = {"engine": self.counting.engine, "cite": self.counting.cite, "held": self.counting.held,
                               "notes": list(self.counting.notes), "metrics": named}
        return out

    def record(self) -> dict[str, Any]:
        if self.problem:
            return {"reading": self.reading, "steps": self.steps, "unservable": True, "why": self.problem,
                    "acceptance_length": None, "verify_steps": 0, "positions": 0}
        return {"reading": self.reading, "steps": self.steps, "acceptance_length": self.acceptance_length,
                "verify_steps": self.verify_steps, "per_position": self.per_position,
                "per_start_acceptance_length": self.per_start_acceptance_length, "positions": self.positions,
                "step_accuracy": self.step_accuracy, "conditional_accuracy": self.conditional_accuracy,
                "alpha": self.alpha}

    def extended(self) -> dict[str, Any]:
        """:meth:`record` and, beside its keys, the intervals, the sequences they are drawn over, the coverage and
        the figures as servers report them."""
        if self.problem:
            return self.record()
        cov = self.interval("coverage")
        return {**self.record(), "sequences": sum(1 for s in self.sequences if s.positions),
                "intervals": self.intervals(), "coverage": self.coverage, "coverage_interval": cov.record(),
                "served_metrics": self.served()}


def chain(k: int) -> Drafting:
    """The drafting the trainer's reading (and the resolver's candidates) is walked with: K chained drafts per verify
    step, as vLLM and SGLang draft."""
    return Drafting(k, tail=FULL, said=("the drafter as trained, by a chain-drafting server",))


def served_drop(tokens: Sequence[float], steps: Sequence[float], base_tokens: Sequence[float],
                base_steps: Sequence[float]) -> Interval:
    """1 - AL / AL_base with AL = sum(tokens) / sum(steps) (the tokens verify steps yield over the verify steps),
    paired over the sequences: the delta method on the four totals (stats.linearised)."""
    u, s, ub, sb = sum(tokens), sum(steps), sum(base_tokens), sum(base_steps)
    if not (u and s and ub and sb):
        return linearised(0.0, [])
    value = 1.0 - (u / s) / (ub / sb)
    keep = [i for i in range(len(tokens)) if steps[i] or base_steps[i]]
    influence = [(1.0 - value) * (-tokens[i] / u + steps[i] / s + base_tokens[i] / ub - base_steps[i] / sb)
                 for i in keep]
    return linearised(value, influence)


@dataclass
class Result:
    labels: str  # "tokens" (the recorded next tokens) or "target" (the target's argmax)
    readings: list[Figures]
    skipped: int = 0  # positions skipped for non-finite states
    samples: int = 0
    max_drop: float = FAIL_SHARE  # the share of the trainer reading's acceptance length an engine reading may lose
    min_acceptance: float | None = None  # a reading below this acceptance length is warned about
    absolute_d2t: str | None = None  # d2t holds absolute target ids: what was found (the trainer reading maps so)
    lengths: list[int] = field(default_factory=list)  # each sample's token count (after non-finite cuts)
    prompt_boundary: bool = True  # every sample's requests were cut by its loss mask (else walked from token 1)

    def warnings(self) -> list[str]:
        """The readings whose acceptance length is below ``min_acceptance``, and a draft vocabulary that covers
        little of the data (warned: the exit code is unchanged)."""
        out = []
        if self.min_acceptance is not None:
            out += [f"{f.reading}: acceptance length {f.acceptance_length:.3f} is below the minimum "
                    f"{self.min_acceptance:g} (--min-acceptance)"
                    for f in self.readings if not f.problem and f.acceptance_length < self.min_acceptance]
        low = self.low_coverage()
        if low:
            out.append(low)
        out += [f"{f.reading}: {why}" for f in self.readings[1:] for why in [self.inconclusive(f)] if why]
        return out

    def low_coverage(self) -> str | None:
        base = self.readings[0]
        cov = base.coverage
        if cov is None or cov >= MIN_COVERAGE:
            return None
        return (f"the draft vocabulary expresses {100 * cov:.1f}% of the data's labels "
                f"({base.interval('coverage').shown()}), below {100 * MIN_COVERAGE:g}%: step accuracy cannot exceed "
                "it. Measured, not explained: a draft vocabulary smaller than the data's spread of tokens (long or "
                "varied continuations) or a d2t built from another distribution (SpecForge PR #534: a d2t "
                "regenerated on fine-tuning) could each do it; the tokens the labels hold outside it would say which")

    def accepts_nothing(self) -> str | None:
        """The trainer's reading accepts (almost) nothing: its acceptance length is at or below 1 + NOTHING."""
        base = self.readings[0]
        # the served walk's figure; the per-start one where the walk made no verify step (responses too short)
        figure = "acceptance_length" if base.verify_steps else "per_start_acceptance_length"
        if getattr(base, figure) > 1.0 + NOTHING:
            return None
        return (f"the drafter read as trained accepts nothing: acceptance length "
                f"{base.interval(figure).shown()}{'' if base.verify_steps else ' per start'} is at or below 1 + "
                f"{NOTHING:g} (no draft token in {round(1 / NOTHING)} draft rounds)")

    def verdict(self, f: Figures) -> tuple[str, Interval | None]:
        """An engine reading's verdict against the trainer's: "fails" (its drop's interval lies beyond
        ``max_drop``), "holds" (within it), "inconclusive" (it straddles), or "unservable"."""
        if f.problem:
            return "unservable", None
        d = f.drop(self.readings[0])
        if d.known:
            if d.lo > self.max_drop + 1e-12:
                return "fails", d
            if d.hi <= self.max_drop + 1e-12:
                return "holds", d
            return "inconclusive", d
        # no interval (one sequence): the point estimate decides, as before intervals were drawn
        return ("fails" if d.value > self.max_drop + 1e-12 else "holds"), d

    def window_unmeasured(self, f: Figures) -> str | None:
        """The reading differs from the trainer's in its attention window and no recorded sequence is long enough
        for the difference to show (None otherwise)."""
        if f.window_fits is None or f.problem:
            return None
        longest = max(self.lengths, default=0)
        if longest > f.window_fits:
            return None
        return (f"its attention window differs from the trainer's, and the two compute alike on contexts up to "
                f"{f.window_fits} tokens: the longest recorded sequence has {longest}, so the data cannot measure "
                f"what the window costs (record sequences longer than {f.window_fits} tokens)")

    def inconclusive(self, f: Figures) -> str | None:
        verdict, d = self.verdict(f)
        if verdict != "inconclusive" or d is None:
            return None
        more = self.more_positions(d, abs(d.value - self.max_drop))
        return (f"inconclusive: its drop {100 * d.value:.1f}% [{100 * d.lo:.1f}%, {100 * d.hi:.1f}%] straddles "
                f"--max-drop {100 * self.max_drop:g}%" + (f"; about {more} more positions would decide it"
                                                           if more else ""))

    def more_positions(self, d: Interval, width: float) -> int | None:
        """About how many more positions would narrow ``d``'s half-width to ``width``."""
        need = d.sequences_for(width)
        if need is None:
            return None
        per = self.readings[0].positions / max(1, sum(1 for s in self.readings[0].sequences if s.positions))
        return max(1, round((need - d.n) * per))

    def failures(self) -> list[str]:
        """Why each failing engine reading fails, and a trainer reading that accepts nothing (empty: none fails)."""
        base = self.readings[0]
        out = []
        nothing = self.accepts_nothing()
        if nothing:
            out.append(f"{base.reading}: {nothing}")
        if self.absolute_d2t:
            out.append(f"d2t: {self.absolute_d2t}")
        for f in self.readings[1:]:
            verdict, d = self.verdict(f)
            if verdict == "unservable":
                out.append(f"{f.reading}: {f.problem}")
            elif verdict == "fails" and d is not None:
                shown = f"{100 * d.value:.1f}%" + (f" [{100 * d.lo:.1f}%, {100 * d.hi:.1f}%]" if d.known else "")
                out.append(f"{f.reading}: acceptance length {f.acceptance_length:.3f} is {shown} below the "
                           f"trainer reading's {base.acceptance_length:.3f} (more than {100 * self.max_drop:g}%)"
                           + (f"; the readings differ in {'; '.join(f.causes)}" if f.causes else
                              "; the readings differ in no modelled field"))
        return out

    def record(self) -> dict[str, Any]:
        return {"labels": self.labels, "readings": [f.record() for f in self.readings]}

    def extended(self) -> dict[str, Any]:
        """:meth:`record` with each reading's intervals and served metrics beside the required keys, and each engine
        reading's drop (the share of the trainer reading's acceptance length it loses) with its interval."""
        out = []
        for f in self.readings:
            rec = f.extended()
            if f is not self.readings[0] and f.problem:  # stated as such: no figure, no drop, kept out of averages
                rec.update(drop=None, drop_interval=None, verdict="unservable")
            elif f is not self.readings[0]:
                d = f.drop(self.readings[0])
                rec.update(drop=d.value, drop_interval=d.record(), verdict=self.verdict(f)[0])
            out.append(rec)
        return {"labels": self.labels, "readings": out}


def readings(ckpt: Checkpoint, specs: Sequence[str], optional: Sequence[str] = (),
             left_out: list[str] | None = None, launch: Launch | None = None) -> list[tuple[str, Reading]]:
    """(name, reading): the trainer's first, then each engine release's. A release in ``optional`` (brought in by
    ``--engine all`` only) that does not read the checkpoint's layout is left out, and named in ``left_out``.
    ``launch(spec)``: the launch settings a release is started with (``--launch``), or None."""
    trained = engines.trainer(ckpt)
    if not trained.servable:
        raise AcceptanceError(f"the trainer's reading ({trained.engine}) cannot compute this drafter: "
                              + "; ".join(trained.refusals + [f"{r} {how}" for r, how in trained.unfilled.items()]))
    out = [(TRAINER, trained)]
    for spec in specs:
        reading = engines.read(ckpt, spec, launch=launch(spec) if launch else None)
        if spec in optional and not reading.layout_ok:
            if left_out is not None:
                left_out.append(f"{spec} does not read the {ckpt.layout} layout (name it to require it)")
            continue
        out.append((spec, reading))
    return out


def expect_of(reading: Reading) -> Expect:
    """What a sample must hold for ``reading`` (the trainer's): its aux width and vocabulary."""
    width, vocab = reading.target_hidden_size, reading.vocab_size
    if width is None or vocab is None:
        missing = "target_hidden_size" if width is None else "vocab_size"
        raise AcceptanceError(f"the trainer's reading ({reading.engine}) reads no {missing}: the recorded states "
                              "cannot be matched to the drafter")
    return Expect(reading.num_aux, width, vocab)


def finite_prefix(sample: Sample) -> int:
    """The number of leading positions whose states are all finite."""
    import torch

    ok = torch.isfinite(sample.aux).all(-1) & torch.isfinite(sample.last).all(-1)
    bad = (~ok).nonzero()
    return int(bad[0]) if bad.numel() else int(ok.shape[0])


def sample_inputs(sample: Sample, steps: int,
                  target: TargetHead | None = None) -> tuple[Inputs, Tensor, Tensor, Tensor]:
    """The forward pass's inputs for a sample's rows, the labels (steps, R), which steps count (steps, R) and the
    target's logits at each step's position (steps, R, V; None without ``target``, a TargetHead)."""
    import torch

    x = sample.tokens
    t = x.shape[0]
    rows = t - 1
    j = torch.arange(rows)
    padded = torch.cat([x, torch.zeros(steps + 1, dtype=torch.int64)])
    recorded = [padded[j + k + 2] for k in range(steps - 1)]  # what step k+1 is fed
    if target is None:  # the recorded next tokens
        labels = torch.stack([padded[j + k + 2] for k in range(steps)])
        valid = torch.stack([(j + k + 2) < t for k in range(steps)])
        target_logits = None
    else:  # the target's argmax at the position each step drafts from
        tl = target.logits(sample.last, sample.last_normed).cpu()
        tl = torch.cat([tl, torch.zeros(steps + 1, tl.shape[1])])
        target_logits = torch.stack([tl[j + k + 1] for k in range(steps)])
        labels = target_logits.argmax(-1)
        valid = torch.stack([(j + k + 1) < t for k in range(steps)])
    if sample.loss_mask is not None:
        m = torch.cat([sample.loss_mask.to(torch.bool), torch.zeros(steps + 1, dtype=torch.bool)])
        valid &= torch.stack([m[j + k + 1] for k in range(steps)])
    inputs = Inputs(aux_hidden_states=sample.aux[:rows], input_ids=x[1:], position_ids=j + 1,
                    later_tokens=recorded)
    return inputs, labels, valid, target_logits


def score(fig: Figures, logits: list[Tensor], labels: Tensor, valid: Tensor, steps: int, target_logits: Tensor = None,
          spans: list[tuple[int, int]] | None = None, confidence: bool = False, margins: bool = False) -> None:
    """Add one sample's rows to a reading's figures (and its counts as one sequence). ``spans``: the sample's
    requests (walk.requests), which the served walk walks; ``confidence``: keep each step's top draft probability
    per row (a confidence cut-off needs them); ``margins``: keep each step's top-2 logit gap per row (where a
    server's float order may break a near-tie the other way)."""
    import torch

    rows = labels.shape[1]
    seq = SeqCounts(correct=[0] * steps, counted=[0] * steps, cond_correct=[0] * steps, cond_counted=[0] * steps,
                    spans=list(spans or []))
    # every one of the K labels exists: the last step's label lies within the sample
    full = (torch.arange(rows) + steps + (1 if target_logits is None else 0)) < (rows + 1)
    start = full & valid[0]
    chain = start.clone()
    accepted = torch.zeros(rows)
    leading = torch.ones(rows, dtype=torch.bool)  # every row's run so far, whatever it starts from
    lead = torch.zeros(rows, dtype=torch.int64)
    for k in range(steps):
        correct = (logits[k].argmax(-1) == labels[k]) & valid[k]
        leading &= correct
        lead += leading
        counted = start & valid[k]
        seq.correct[k] = int((correct & counted).sum())
        seq.counted[k] = int(counted.sum())
        seq.cond_counted[k] = int(chain.sum())
        chain = chain & correct
        seq.cond_correct[k] = int(chain.sum())
        accepted += chain.float()
        if target_logits is not None:  # sum(min(p_target, p_draft)) at each counted position
            p_t = torch.softmax(target_logits[k][counted], -1)
            p_d = torch.softmax(logits[k][counted], -1)
            seq.overlap += float(torch.minimum(p_t, p_d).sum())
            seq.overlap_n += int(counted.sum())
    seq.positions = int(start.sum())
    seq.accepted = float(accepted[start].sum())
    seq.lead = lead.tolist()
    if confidence:
        seq.confidence = [torch.softmax(logits[k].float(), -1).amax(-1).tolist() for k in range(steps)]
    if margins:
        top = [logits[k].float().topk(2, -1).values for k in range(steps)]
        seq.margin = [(t[:, 0] - t[:, 1]).tolist() for t in top]
    if rows:  # the draft vocabulary: the target ids the reading's logits can reach (finite through d2t)
        expressible = torch.isfinite(logits[0][0])
        seq.covered = int(expressible[labels[0][start]].sum())
    fig.sequences.append(seq)
    fig.positions += seq.positions
    fig.accepted += seq.accepted
    fig.overlap += seq.overlap
    fig.overlap_n += seq.overlap_n
    fig.covered += seq.covered
    for k in range(steps):
        fig.correct[k] += seq.correct[k]
        fig.counted[k] += seq.counted[k]
        fig.cond_counted[k] += seq.cond_counted[k]
        fig.cond_correct[k] += seq.cond_correct[k]


def permuted(aux: Tensor, order: Sequence[int]) -> Tensor:
    """The aux states (T, A*Ht) with their A blocks in ``order``: block i of the result is block order[i]."""
    blocks = aux.chunk(len(order), dim=-1)
    import torch

    return torch.cat([blocks[i] for i in order], dim=-1)


def absolute_ids(ckpt: Checkpoint, reading: Reading) -> tuple[Tensor, str] | None:
    """(the target id of each draft id, what shows it) when the checkpoint's d2t holds absolute target ids instead
    of offsets; None otherwise. The trainer never read d2t: speculators 0.9.0 trains in the draft space t2d selects
    (``speculators/model.py:172-183``: ``verifier_lm_head`` is the target's lm_head rows where t2d is set; d2t is
    only stored), so draft id i means the i-th marked token, which an absolute-id d2t states as it is. Read: d2t
    equals nonzero(t2d) (and is not the offsets); without t2d, d2t is strictly increasing inside the vocabulary while
    i + d2t[i] leaves it."""
    import torch

    entry = ckpt.entry("d2t")
    v = reading.vocab_size
    if entry is None or v is None or ckpt.ends_past_file(entry):
        return None
    d2t = Weights(ckpt, "cpu").raw(entry.name).to(torch.int64).flatten()
    dv = d2t.shape[0]
    if dv == 0:
        return None
    offsets = torch.arange(dv) + d2t
    t2d = ckpt.entry("t2d")
    if t2d is not None and not ckpt.ends_past_file(t2d) and tuple(t2d.shape) == (v,):
        marked = Weights(ckpt, "cpu").raw(t2d.name).to(torch.bool).nonzero().flatten()
        if marked.shape[0] == dv and torch.equal(marked, d2t) and not torch.equal(marked, offsets):
            return d2t, f"d2t equals nonzero(t2d): absolute target ids, not offsets ({entry.name})"
        return None
    inside = bool((d2t >= 0).all() and (d2t < v).all())
    rising = dv < 2 or bool((d2t[1:] > d2t[:-1]).all())
    if inside and rising and int(offsets.max()) >= v:
        return d2t, (f"d2t is strictly increasing inside [0, {v}) while i + d2t[i] reaches {int(offsets.max())}: "
                     f"absolute target ids, not offsets ({entry.name}; no t2d to confirm)")
    return None


def past_vocab(spec: str) -> str:
    """What release ``spec`` does with a draft id mapped past the target vocabulary (its profile says, cited)."""
    try:
        judged = engines.profile(spec)
        said = judged.d2t_past_vocab.format(release=judged.version)  # the record's text names the release judged
    except Exception:
        said = ""
    return said or "it maps draft id i to i + d2t[i], past the target vocabulary"


def evaluated(data: Iterable[Sample], steps: int, skipped: list[int] | None = None,
              lengths: list[int] | None = None) -> Iterable[Sample]:
    """The samples :func:`evaluate` scores, in order: each cut before its first non-finite state (the positions cut
    added to ``skipped[0]``, every cut sample's length appended to ``lengths``), those too short for ``steps`` left
    out. An engine's own compute is run on exactly these (``own`` below)."""
    for sample in data:
        keep = finite_prefix(sample)
        t = sample.tokens.shape[0]
        if keep < t:
            if skipped is not None:
                skipped[0] += t - keep
            sample = Sample(sample.source, sample.tokens[:keep], sample.aux[:keep], sample.last[:keep],
                            sample.last_normed, None if sample.loss_mask is None else sample.loss_mask[:keep])
        if lengths is not None:
            lengths.append(int(sample.tokens.shape[0]))
        if sample.tokens.shape[0] >= steps + 2:
            yield sample


def evaluate(ckpt: Checkpoint, named: list[tuple[str, Reading]], data: Iterable[Sample], steps: int,
             device: str | None = None, target: TargetHead | None = None,
             orders: dict[str, Sequence[int]] | None = None, own: dict[str, list[list[Tensor]]] | None = None,
             embedding: EmbeddingRows | None = None,
             launch: Launch | None = None, margins: bool = False) -> Result:
    """The figures of each reading over every sample; labels the recorded tokens, or with ``target`` (a
    :class:`~eagle3_checks.acceptance.target_head.TargetHead`) the target's argmax; ``device`` None: a GPU when
    torch sees one (the figures are scored on the CPU). ``orders``: the readings (by
    name) fed the aux blocks in another order (:func:`permuted`), for the resolver. ``own``: readings (by name)
    whose logits an engine's own code computed (live.compute), per sample of :func:`evaluated` in order, per step;
    their reading is the modelled one, for its differences from the trainer's. ``embedding``: the target's
    embed_tokens (storage.target_weights.TargetEmbedding), what a reading without embed_tokens embeds with, as the
    engine does (SGLang serves every EAGLE-3 drafter with the target's). The readings named :data:`TRAINER` or
    ``resolve:...`` compute what was trained: with an absolute-id d2t (:func:`absolute_ids`) they map draft ids as
    the trainer did, and each engine reading cannot serve. ``launch(spec)``: the launch settings a release is
    started with (``--launch``), which set how its server drafts (engines.counting). ``margins``: keep each row's
    top-2 logit gap per step (SeqCounts.margin). Raises AcceptanceError."""
    orders = orders or {}
    own = own or {}
    figures = [Figures(name, steps, drafting=d, counting=c)
               for name, _ in named for d, c in [serving(name, steps, launch)]]
    confidence = any(f.drafting is not None and f.drafting.p_min > 0 for f in figures)
    trained = named[0][1]
    absolute = absolute_ids(ckpt, trained)
    # an engine release is run as it serves the drafter: a tensor its loader narrows is cut as the loader cuts it
    for fig, (_, reading) in zip(figures[1:], named[1:], strict=True):
        if reading.computable:
            fig.fields = differences(reading, trained)
            if "sliding_window" in fig.fields:
                fig.window_fits = min(w[0] for w in (reading.window(), trained.window()) if w is not None)
            fig.causes = [describe_difference(n, reading, trained) for n in fig.fields] + \
                [f"{name} {how} (its loader narrows without an error)" for name, how in reading.narrowed.items()]
    for fig, (name, reading) in zip(figures, named, strict=True):
        if not (reading.servable if name == TRAINER else reading.computable):
            unfilled = [r for r, how in reading.unfilled.items() if not how.startswith("shared")]
            fig.problem = ("cannot compute this drafter: "
                           + ("; ".join(reading.refusals) or "unfilled: " + ", ".join(unfilled)))
        elif absolute is not None and not as_trained(name) and "d2t" in reading.tensors:
            fig.problem = f"cannot serve an absolute-id d2t: {past_vocab(name)}"
    weights = Weights(ckpt, device)
    result = Result("tokens" if target is None else "target", figures)
    if absolute is not None:
        result.absolute_d2t = absolute[1]
    skipped = [0]

    def counted(items: Iterable[Sample]) -> Iterable[Sample]:
        for sample in items:
            result.samples += 1
            yield sample

    for index, sample in enumerate(evaluated(counted(data), steps, skipped, result.lengths)):
        inputs, labels, valid, target_logits = sample_inputs(sample, steps, target)
        inputs.target_embedding = embedding
        mask = None if sample.loss_mask is None else sample.loss_mask.tolist()
        spans = requests(mask, int(sample.tokens.shape[0]))
        result.prompt_boundary = result.prompt_boundary and mask is not None
        for fig, (name, reading) in zip(figures, named, strict=True):
            if fig.problem:
                continue
            if name in own:
                score(fig, [step.cpu() for step in own[name][index]], labels, valid, steps, target_logits, spans,
                      confidence, margins)
                continue
            fed = inputs if name not in orders else dataclasses.replace(
                inputs, aux_hidden_states=permuted(inputs.aux_hidden_states, orders[name]))
            mapped = absolute[0] if absolute is not None and as_trained(name) else None
            try:
                logits = [step.cpu() for step in run(reading, weights, fed, steps, as_served=name != TRAINER,
                                                     targets=mapped)]
            except ForwardError as exc:
                if name == TRAINER:
                    raise AcceptanceError(f"the trainer's reading cannot run: {exc}") from exc
                fig.problem = f"cannot run: {exc}"
                continue
            score(fig, logits, labels, valid, steps, target_logits, spans, confidence, margins)
    result.skipped = skipped[0]
    if result.samples == 0:
        raise AcceptanceError("no samples in the data")
    if figures[0].positions == 0:
        raise AcceptanceError(f"no position to evaluate: every sample is shorter than {steps + 2} tokens (K + 2) "
                              "or masked out")
    return result


def serving(name: str, steps: int, launch: Launch | None = None
            ) -> tuple[Drafting, Counting | None]:
    """How the server reading ``name`` stands for drafts and counts: its release's counting (engines.counting), set
    by its launch settings; K chained drafts for the trainer's reading, the resolver's candidates and an engine whose
    counting is not read."""
    spec = name.split(",", 1)[0]  # an installed engine's own compute is named SPEC + ", own code"
    if as_trained(name):
        return chain(steps), None
    try:
        counting = engines.profile(spec).counting or CHAIN
    except Exception:  # not an engine release
        return chain(steps), None
    if counting is CHAIN:
        return counting.drafting(None, steps), None
    try:
        return counting.drafting(launch(spec) if launch else None, steps), counting
    except ValueError as exc:
        raise AcceptanceError(f"--launch for {spec}: {exc}") from None


def as_trained(name: str) -> bool:
    """The reading computes what the trainer did (the trainer's, or a resolver candidate varying it)."""
    return name == TRAINER or name.startswith(RESOLVE)


def _pct(share: float) -> str:
    """A signed percentage, one decimal, never "-0.0%"."""
    return f"{round(100 * share, 1) + 0.0:+.1f}%"


def render_text(result: Result) -> str:
    lines = [f"labels: {result.labels}" + (" (the recorded next tokens: greedy figures only, no alpha)"
                                           if result.labels == "tokens" else ""),
             f"samples: {result.samples}; positions skipped for non-finite states: {result.skipped}; intervals: 95% "
             "over sequences",
             "acceptance length: as a server counts it, 1 + accepted / verify steps along each request ("
             + ("its prompt cut by the loss mask" if result.prompt_boundary else
                "no loss mask: each sequence walked from its first token") + "); per start: the trainers' metric, "
             "every start position counted (what training logs report, above what a server reports where "
             "acceptance clusters)"]
    base = result.readings[0]
    pad = " " * 23
    for f in result.readings:
        if f.problem:
            lines.append(f"  {f.reading:<20} unservable: {f.problem} (no figures; left out of every drop)")
            continue
        al = f.interval("acceptance_length")
        if f.reading == TRAINER:
            drop = ""
        else:
            d = f.drop(base)
            drop = f"  ({_pct(-d.value)} vs trainer" + (f", [{_pct(-d.hi)}, {_pct(-d.lo)}])" if d.known else ")")
        lines.append(f"  {f.reading:<20} acceptance length {al.shown()} over {f.verify_steps} verify steps, per "
                     f"position {' '.join(f'{r:.3f}' for r in f.per_position)}{drop}")
        drafting = (f.drafting or chain(f.steps)).capped(f.steps)
        lines.append(f"{pad}walked: {'; '.join((drafting.describe(),) + drafting.said)}")
        if drafting.unmodelled:
            lines.append(f"{pad}not modelled: {drafting.unmodelled}")
        m = f.served()
        named = m.get("as_named")
        if named and named["metrics"]:
            shown = ", ".join(f"{k} {' '.join(_num(x) for x in v) if isinstance(v, list) else _num(v)}"
                              for k, v in named["metrics"].items())
            lines.append(f"{pad}as {named['engine']} counts it ({named['held']}): {shown}")
        lines.append(f"{pad}per start: acceptance length {f.interval('per_start_acceptance_length').shown()} over "
                     f"{f.positions} positions; step accuracy {' '.join(f'{a:.3f}' for a in f.step_accuracy)}; "
                     f"conditional {' '.join(f'{a:.3f}' for a in f.conditional_accuracy)}; alpha "
                     + ("n/a" if f.alpha is None or math.isnan(f.alpha) else f.interval("alpha").shown()))
    if base.coverage is not None:
        lines.append(f"draft vocabulary coverage of the labels: {base.interval('coverage').shown()}")
    lines.extend(f"WARN: {why}" for why in result.warnings())
    fails = result.failures()
    lines.append("FAIL: " + "; ".join(fails) if fails else "PASS: no engine reading loses more than "
                 f"{100 * result.max_drop:g}% of the trainer reading's acceptance length")
    return "\n".join(lines) + "\n"


def _num(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)
