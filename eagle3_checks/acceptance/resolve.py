"""Which semantics the weights were trained with, settled by the user's data where the config cannot say.

A config states what a drafter means; it cannot prove what its trainer computed. Three trainer releases are known
to have computed something else than the config they wrote says:

* SpecForge before PR #270 (2025-10-30; ``specforge/modeling/draft/llama3_eagle.py``, ``_init_rope``) built its
  rotary embedding with base 10000 whenever ``rope_scaling`` was null, whatever ``rope_theta`` said;
* ``norm_before_residual`` is absent from flat configs and engines default it differently (vLLM 0.33.0 True,
  speculators False: see the engine profiles), and a converter may write the wrong one;
* SpecForge PR #879 (2026-09) changed what ``norm_output`` means (EAGLE-3 vs EAGLE-3.1 feedback);
* and a converter may write fc's input blocks in another order than the trainer fed the aux states.

Each question's candidates are the trainer's reading (:func:`eagle3_checks.engines.trainer`, what the config says)
and that reading with the one field changed (for the aux order: fed the recorded aux blocks in another order). All
run in the same pass over the data (:func:`eagle3_checks.acceptance.evaluate.evaluate`); the weights score best under
the semantics they were trained with. The score is alpha with the target's distribution (``--target``), else the
acceptance length. A question is decided only when the better candidate gains at least
:data:`~eagle3_checks.options.DECIDE_GAIN` over the other, over at least
:data:`~eagle3_checks.options.DECIDE_POSITIONS` positions: an untrained drafter scores every candidate alike and is
"undecided".
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

from ..options import DECIDE_GAIN, DECIDE_POSITIONS
from .evaluate import Figures, Result

ROPE_DEFAULT = 10000.0  # the base SpecForge before PR #270 used with rope_scaling null
MAX_AUX_ORDERS = 4  # aux counts up to this have every order scored (4! = 24 readings); more: only the stated one

CONFIRMED, CONTRADICTED, UNDECIDED = "confirmed", "contradicted", "undecided"


@dataclass
class Candidate:
    question: str  # a Reading field ("rope_theta", "norm_before_residual", "feedback") or "aux_order"
    name: str  # its reading's name in the evaluation ("resolve:rope_theta=10000.0")
    value: Any
    reading: Any
    order: tuple[int, ...] | None = None  # aux_order: the order fc's input blocks are fed in


@dataclass
class Answer:
    question: str
    stated: Any  # what the config says (the trainer's reading)
    verdict: str  # CONFIRMED, CONTRADICTED or UNDECIDED
    best: Any  # the candidate value that scored best
    scores: list[tuple[Any, float]]  # (value, score), the stated first
    metric: str  # "alpha" or "acceptance length"
    reading: Any = None  # the best candidate's reading (CONTRADICTED: what the weights were trained with)
    why: str = ""  # UNDECIDED: why

    @property
    def gain(self) -> float:
        """The best candidate's score over the runner-up's."""
        ranked = sorted((s for _, s in self.scores), reverse=True)
        return ranked[0] - ranked[1] if len(ranked) > 1 else 0.0

    def shown(self) -> str:
        return "; ".join(f"{value_text(self.question, v)}: {self.metric} {s:.3f}" for v, s in self.scores)

    def describe(self) -> str:
        """One line: the verdict, what scored best and every candidate's figure."""
        if self.verdict == CONTRADICTED:
            best = value_text(self.question, self.best)
            head = f"{self.question}: CONTRADICTED: the weights were trained with {best}"
        elif self.verdict == CONFIRMED:
            head = f"{self.question}: confirmed"
        else:
            head = f"{self.question}: undecided ({self.why})"
        return f"{head} ({self.shown()})"

    def record(self) -> dict[str, Any]:
        return {"question": self.question, "verdict": self.verdict, "stated": _plain(self.stated),
                "best": _plain(self.best), "metric": self.metric,
                "scores": [[_plain(v), s] for v, s in self.scores]}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def value_text(question: str, value: Any) -> str:
    """A candidate as findings and reports name it: ``rope_theta 10000``, ``norm_output True (normed feedback)``."""
    if question == "aux_order":
        return f"fc blocks fed aux {tuple(value)}"
    if question == "feedback":
        return f"norm_output {value == 'normed'} ({value} feedback)"
    return f"{question} {value:g}" if isinstance(value, float) else f"{question} {value}"


def candidates(trained: Any) -> list[Candidate]:
    """The alternatives to the trainer's reading, one field changed at a time."""
    out = []
    if trained.rope_theta != ROPE_DEFAULT and trained.mla is None:
        out.append(Candidate("rope_theta", f"resolve:rope_theta={ROPE_DEFAULT:g}", ROPE_DEFAULT,
                             dataclasses.replace(trained, rope_theta=ROPE_DEFAULT)))
    flipped = not trained.norm_before_residual
    out.append(Candidate("norm_before_residual", f"resolve:norm_before_residual={flipped}", flipped,
                         dataclasses.replace(trained, norm_before_residual=flipped)))
    other = "normed" if trained.feedback == "prenorm" else "prenorm"
    out.append(Candidate("feedback", f"resolve:feedback={other}", other, dataclasses.replace(trained, feedback=other)))
    if 1 < trained.num_aux <= MAX_AUX_ORDERS:
        for order in itertools.permutations(range(trained.num_aux)):
            if list(order) != sorted(order):
                out.append(Candidate("aux_order", f"resolve:aux_order={order}", order, trained, order))
    return out


def answers(result: Result, trained: Any, cands: list[Candidate]) -> list[Answer]:
    """Each question's verdict from an evaluation that ran ``cands`` (by name) beside the trainer's reading."""
    by_name = {f.reading: f for f in result.readings}
    base = result.readings[0]
    metric = "alpha" if result.labels == "target" else "acceptance length"

    def score(f: Figures) -> float:
        return (f.alpha or 0.0) if metric == "alpha" else f.acceptance_length

    out = []
    for question in dict.fromkeys(c.question for c in cands):
        mine = [c for c in cands if c.question == question and not by_name[c.name].problem]
        if not mine:
            continue
        stated = tuple(range(trained.num_aux)) if question == "aux_order" else getattr(trained, question)
        scores = [(stated, score(base))] + [(c.value, score(by_name[c.name])) for c in mine]
        best_i = max(range(len(scores)), key=lambda i: scores[i][1])
        answer = Answer(question, stated, UNDECIDED, scores[best_i][0], scores, metric,
                        mine[best_i - 1].reading if best_i else trained)
        if base.positions < DECIDE_POSITIONS:
            answer.why = f"{base.positions} positions, fewer than the {DECIDE_POSITIONS} a verdict needs"
        elif answer.gain < DECIDE_GAIN:
            answer.why = (f"the candidates' {metric} are within {DECIDE_GAIN:g} of each other (the weights do not "
                          "tell them apart: an untrained drafter, or semantics that compute alike here"
                          + ("; --target measures alpha, a finer figure" if metric != "alpha" else "") + ")")
        else:
            answer.verdict = CONFIRMED if best_i == 0 else CONTRADICTED
        out.append(answer)
    return out
