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
* ``acceptance_length``: 1 + the mean leading run of accepted steps, vLLM's mean acceptance length (the bonus token
  included; ``speculators/models/metrics.py:7-31``, ``compute_accepted_length_counts``, computes it so);
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import engines
from ..engines.reading import describe_difference, differences
from ..numerics.draft_steps import ForwardError, Inputs, Weights, run
from ..options import FAIL_SHARE
from .samples import Expect, Sample

TRAINER = "trainer"


class AcceptanceError(Exception):
    """The drafter cannot be evaluated (the message says why)."""


@dataclass
class Figures:
    reading: str
    steps: int
    positions: int = 0
    accepted: float = 0.0  # the sum of leading accepted runs
    correct: list[int] = field(default_factory=list)
    counted: list[int] = field(default_factory=list)
    cond_correct: list[int] = field(default_factory=list)
    cond_counted: list[int] = field(default_factory=list)
    overlap: float = 0.0  # the sum over counted (position, step) of sum(min(p_target, p_draft))
    overlap_n: int = 0
    problem: str | None = None  # the reading cannot compute the drafter
    causes: list[str] = field(default_factory=list)  # how this reading differs from the trainer's (engines.reading)
    fields: list[str] = field(default_factory=list)  # the semantic fields it differs in

    def __post_init__(self) -> None:
        for name in ("correct", "counted", "cond_correct", "cond_counted"):
            if not getattr(self, name):
                setattr(self, name, [0] * self.steps)

    @property
    def acceptance_length(self) -> float:
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

    def record(self) -> dict[str, Any]:
        return {"reading": self.reading, "steps": self.steps, "positions": self.positions,
                "acceptance_length": self.acceptance_length, "step_accuracy": self.step_accuracy,
                "conditional_accuracy": self.conditional_accuracy, "alpha": self.alpha}


@dataclass
class Result:
    labels: str  # "tokens" (the recorded next tokens) or "target" (the target's argmax)
    readings: list[Figures]
    skipped: int = 0  # positions skipped for non-finite states
    samples: int = 0
    max_drop: float = FAIL_SHARE  # the share of the trainer reading's acceptance length an engine reading may lose
    min_acceptance: float | None = None  # a reading below this acceptance length is warned about

    def warnings(self) -> list[str]:
        """The readings whose acceptance length is below ``min_acceptance`` (warned: the exit code is unchanged)."""
        if self.min_acceptance is None:
            return []
        return [f"{f.reading}: acceptance length {f.acceptance_length:.3f} is below the minimum "
                f"{self.min_acceptance:g} (--min-acceptance)"
                for f in self.readings if not f.problem and f.acceptance_length < self.min_acceptance]

    def failures(self) -> list[str]:
        """Why each failing engine reading fails (empty: none fails)."""
        base = self.readings[0]
        out = []
        for f in self.readings[1:]:
            if f.problem:
                out.append(f"{f.reading}: {f.problem}")
            elif f.acceptance_length < base.acceptance_length * (1 - self.max_drop) - 1e-12:
                drop = 1 - f.acceptance_length / base.acceptance_length
                out.append(f"{f.reading}: acceptance length {f.acceptance_length:.3f} is {100 * drop:.1f}% below the "
                           f"trainer reading's {base.acceptance_length:.3f} (more than {100 * self.max_drop:g}%)"
                           + (f"; the readings differ in {'; '.join(f.causes)}" if f.causes else
                              "; the readings differ in no modelled field"))
        return out

    def record(self) -> dict[str, Any]:
        return {"labels": self.labels, "readings": [f.record() for f in self.readings]}


def readings(ckpt: Any, specs: Sequence[str], optional: Sequence[str] = (),
             left_out: list[str] | None = None) -> list[tuple[str, Any]]:
    """(name, reading): the trainer's first, then each engine release's. A release in ``optional`` (brought in by
    ``--engine all`` only) that does not read the checkpoint's layout is left out, and named in ``left_out``."""
    trained = engines.trainer(ckpt)
    if not trained.servable:
        raise AcceptanceError(f"the trainer's reading ({trained.engine}) cannot compute this drafter: "
                              + "; ".join(trained.refusals + [f"{r} {how}" for r, how in trained.unfilled.items()]))
    out = [(TRAINER, trained)]
    for spec in specs:
        reading = engines.read(ckpt, spec)
        if spec in optional and not reading.layout_ok:
            if left_out is not None:
                left_out.append(f"{spec} does not read the {ckpt.layout} layout (name it to require it)")
            continue
        out.append((spec, reading))
    return out


def expect_of(reading: Any) -> Expect:
    return Expect(reading.num_aux, reading.target_hidden_size, reading.vocab_size)


def finite_prefix(sample: Sample) -> int:
    """The number of leading positions whose states are all finite."""
    import torch

    ok = torch.isfinite(sample.aux).all(-1) & torch.isfinite(sample.last).all(-1)
    bad = (~ok).nonzero()
    return int(bad[0]) if bad.numel() else int(ok.shape[0])


def sample_inputs(sample: Sample, steps: int, target: Any = None) -> tuple[Inputs, Any, Any, Any]:
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


def score(fig: Figures, logits: list, labels, valid, steps: int, target_logits: Any = None) -> None:
    """Add one sample's rows to a reading's figures."""
    import torch

    rows = labels.shape[1]
    # every one of the K labels exists: the last step's label lies within the sample
    full = (torch.arange(rows) + steps + (1 if target_logits is None else 0)) < (rows + 1)
    start = full & valid[0]
    chain = start.clone()
    accepted = torch.zeros(rows)
    for k in range(steps):
        correct = (logits[k].argmax(-1) == labels[k]) & valid[k]
        counted = start & valid[k]
        fig.correct[k] += int((correct & counted).sum())
        fig.counted[k] += int(counted.sum())
        fig.cond_counted[k] += int(chain.sum())
        chain = chain & correct
        fig.cond_correct[k] += int(chain.sum())
        accepted += chain.float()
        if target_logits is not None:  # sum(min(p_target, p_draft)) at each counted position
            p_t = torch.softmax(target_logits[k][counted], -1)
            p_d = torch.softmax(logits[k][counted], -1)
            fig.overlap += float(torch.minimum(p_t, p_d).sum())
            fig.overlap_n += int(counted.sum())
    fig.positions += int(start.sum())
    fig.accepted += float(accepted[start].sum())


def permuted(aux: Any, order: Sequence[int]) -> Any:
    """The aux states (T, A*Ht) with their A blocks in ``order``: block i of the result is block order[i]."""
    blocks = aux.chunk(len(order), dim=-1)
    import torch

    return torch.cat([blocks[i] for i in order], dim=-1)


def evaluated(data: Iterable[Sample], steps: int, skipped: list[int] | None = None) -> Iterable[Sample]:
    """The samples :func:`evaluate` scores, in order: each cut before its first non-finite state (the positions cut
    added to ``skipped[0]``), those too short for ``steps`` left out. An engine's own compute is run on exactly
    these (``own`` below)."""
    for sample in data:
        keep = finite_prefix(sample)
        t = sample.tokens.shape[0]
        if keep < t:
            if skipped is not None:
                skipped[0] += t - keep
            sample = Sample(sample.source, sample.tokens[:keep], sample.aux[:keep], sample.last[:keep],
                            sample.last_normed, None if sample.loss_mask is None else sample.loss_mask[:keep])
        if sample.tokens.shape[0] >= steps + 2:
            yield sample


def evaluate(ckpt: Any, named: list[tuple[str, Any]], data: Iterable[Sample], steps: int,
             device: str | None = None, target: Any = None, orders: dict[str, Sequence[int]] | None = None,
             own: dict[str, list[list]] | None = None, embedding: Any = None) -> Result:
    """The figures of each reading over every sample; labels the recorded tokens, or with ``target`` (a
    :class:`~eagle3_checks.acceptance.target_head.TargetHead`) the target's argmax; ``device`` None: a GPU when
    torch sees one (the figures are scored on the CPU). ``orders``: the readings (by
    name) fed the aux blocks in another order (:func:`permuted`), for the resolver. ``own``: readings (by name)
    whose logits an engine's own code computed (live.compute), per sample of :func:`evaluated` in order, per step;
    their reading is the modelled one, for its differences from the trainer's. ``embedding``: the target's
    embed_tokens (storage.target_weights.TargetEmbedding), what a reading without embed_tokens embeds with, as the
    engine does (SGLang serves every EAGLE-3 drafter with the target's). Raises AcceptanceError."""
    orders = orders or {}
    own = own or {}
    figures = [Figures(name, steps) for name, _ in named]
    trained = named[0][1]
    # an engine release is run as it serves the drafter: a tensor its loader narrows is cut as the loader cuts it
    for fig, (_, reading) in zip(figures[1:], named[1:], strict=True):
        if reading.computable:
            fig.fields = differences(reading, trained)
            fig.causes = [describe_difference(n, reading, trained) for n in fig.fields] + \
                [f"{name} {how} (its loader narrows without an error)" for name, how in reading.narrowed.items()]
    for fig, (name, reading) in zip(figures, named, strict=True):
        if not (reading.servable if name == TRAINER else reading.computable):
            unfilled = [r for r, how in reading.unfilled.items() if not how.startswith("shared")]
            fig.problem = ("cannot compute this drafter: "
                           + ("; ".join(reading.refusals) or "unfilled: " + ", ".join(unfilled)))
    weights = Weights(ckpt, device)
    result = Result("tokens" if target is None else "target", figures)
    skipped = [0]

    def counted(items: Iterable[Sample]) -> Iterable[Sample]:
        for sample in items:
            result.samples += 1
            yield sample

    for index, sample in enumerate(evaluated(counted(data), steps, skipped)):
        inputs, labels, valid, target_logits = sample_inputs(sample, steps, target)
        inputs.target_embedding = embedding
        for fig, (name, reading) in zip(figures, named, strict=True):
            if fig.problem:
                continue
            if name in own:
                score(fig, [step.cpu() for step in own[name][index]], labels, valid, steps, target_logits)
                continue
            fed = inputs if name not in orders else dataclasses.replace(
                inputs, aux_hidden_states=permuted(inputs.aux_hidden_states, orders[name]))
            try:
                logits = [step.cpu() for step in run(reading, weights, fed, steps, as_served=name != TRAINER)]
            except ForwardError as exc:
                if name == TRAINER:
                    raise AcceptanceError(f"the trainer's reading cannot run: {exc}") from exc
                fig.problem = f"cannot run: {exc}"
                continue
            score(fig, logits, labels, valid, steps, target_logits)
    result.skipped = skipped[0]
    if result.samples == 0:
        raise AcceptanceError("no samples in the data")
    if figures[0].positions == 0:
        raise AcceptanceError(f"no position to evaluate: every sample is shorter than {steps + 2} tokens (K + 2) "
                              "or masked out")
    return result


def render_text(result: Result) -> str:
    lines = [f"labels: {result.labels}" + (" (the recorded next tokens: greedy figures only, no alpha)"
                                           if result.labels == "tokens" else ""),
             f"samples: {result.samples}; positions skipped for non-finite states: {result.skipped}"]
    base = result.readings[0].acceptance_length
    for f in result.readings:
        if f.problem:
            lines.append(f"  {f.reading:<20} {f.problem}")
            continue
        drop = "" if f.reading == TRAINER else f"  ({100 * (f.acceptance_length / base - 1):+.1f}% vs trainer)"
        lines.append(f"  {f.reading:<20} acceptance length {f.acceptance_length:.3f} over {f.positions} positions"
                     f"{drop}")
        lines.append(f"  {'':<20} step accuracy {' '.join(f'{a:.3f}' for a in f.step_accuracy)}; conditional "
                     f"{' '.join(f'{a:.3f}' for a in f.conditional_accuracy)}; alpha "
                     + ("n/a" if f.alpha is None or math.isnan(f.alpha) else f"{f.alpha:.3f}"))
    lines.extend(f"WARN: {why}" for why in result.warnings())
    fails = result.failures()
    lines.append("FAIL: " + "; ".join(fails) if fails else "PASS: no engine reading loses more than "
                 f"{100 * result.max_drop:g}% of the trainer reading's acceptance length")
    return "\n".join(lines) + "\n"
