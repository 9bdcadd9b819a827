"""The served walk: a recorded sequence walked as a chain-drafting server walks a request, from the per-row
correctness the teacher-forced readings compute (:mod:`.evaluate`), counted as the server counts it.

A sample's requests are its responses: each maximal run of the loss mask, its prompt everything before it (without a
mask the whole sequence after its first token is one response: no prompt boundary is known). Row j drafts from the
target's state at j and the token x[j+1]; its draft step k proposes x[j+k+2]. The prefill of a request [b, e) yields
x[b]; the first draft is made from row b - 1, the prompt's last row. At row s the server has generated x[b..s+1] and
``n_remaining = e - s - 2`` tokens remain; it drafts ``d`` tokens (:class:`~eagle3_checks.engines.counting.Drafting`:
K, cut to ``n_remaining - 1`` where the release cuts, shortened at a step below the confidence cut-off), accepts the
leading run ``a = min(run of correct steps at s, d)``, yields ``a + 1`` tokens and drafts next from row ``s + a + 1``.
No draft (none left to make, or shorter than the floor) is a plain decode: one token, no verify step counted.

The server counts per verify step: acceptance length ``1 + accepted / verify steps``, position i's rate ``accepted at
position i / verify steps``. That is not the mean over every start position (the trainers' metric): acceptance
clusters along a text, and a server crosses an easy stretch in few verify steps and spends many in the hard ones.
Pure Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field

from ..engines.counting import REMAINING, Drafting
from ..fast_dataclass import dataclass


@dataclass
class Walked:
    """One sequence's counts, as the server's counters add them up."""

    steps: int = 0  # verify steps (drafts made)
    drafted: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens accepted
    per_position: list[int] = field(default_factory=list)  # accepted at draft position i
    tokens: int = 0  # tokens the walked requests generate (the prefill's included)
    trail: list[tuple[int, int, int]] = field(default_factory=list)  # (row, drafted, accepted) per verify step


def requests(mask: Sequence[bool] | None, length: int) -> list[tuple[int, int]]:
    """The responses [b, e) of a sequence of ``length`` tokens: each maximal run of ``mask`` (its first token at 1 at
    the earliest: a request has a prompt), or the whole sequence after its first token without a mask."""
    if mask is None:
        return [(1, length)] if length > 1 else []
    out = []
    start = None
    for i in range(length + 1):
        on = i < length and bool(mask[i])
        if on and start is None:
            start = max(i, 1)
        elif not on and start is not None:
            if i > start:
                out.append((start, i))
            start = None
    return out


def stops(confidence: Sequence[Sequence[float]], p_min: float) -> list[int]:
    """Per row, the first draft step whose top probability is below ``p_min`` (the number of steps where none is):
    llama.cpp stops drafting there (``common/speculative.cpp:800-830``)."""
    steps = len(confidence)
    rows = len(confidence[0]) if steps else 0
    out = [steps] * rows
    for k in range(steps - 1, -1, -1):
        for j in range(rows):
            if confidence[k][j] < p_min:
                out[j] = k
    return out


def walk(lead: Sequence[int], spans: Sequence[tuple[int, int]], drafting: Drafting,
         stop: Sequence[int] | None = None) -> Walked:
    """Walk one sequence's requests ``spans`` with ``drafting``. ``lead[j]``: the leading run of draft steps row j gets
    right (every label it counts lies in the sequence); ``stop[j]``: where the confidence cut-off ends row j's draft
    (:func:`stops`; None: no cut-off)."""
    k = drafting.k
    out = Walked(per_position=[0] * k)
    floor = max(1, drafting.n_min)
    for b, e in spans:
        out.tokens += e - b
        s = b - 1
        while True:
            remaining = e - s - 2
            if remaining <= 0:
                break
            d = min(k, remaining - 1) if drafting.tail == REMAINING else k
            if stop is not None and drafting.p_min > 0:
                d = min(d, stop[s])
            if d < floor:  # no draft: a plain decode yields one token
                s += 1
                continue
            a = min(lead[s], d, remaining - 1)
            out.steps += 1
            out.drafted += d
            out.accepted += a
            for i in range(a):
                out.per_position[i] += 1
            out.trail.append((s, d, a))
            s += a + 1
    return out
