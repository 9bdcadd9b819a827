"""What ``eagle3-checks accept`` concludes from its figures, as findings with the gate's codes (the acceptance level's
checks, and the vocabulary checks for a d2t written as absolute ids), each with its basis (registry.py): what the data
measured, what the checkpoint states, or what is assumed until the data decides it. The exit code follows them: 1 when
one is an error."""

from __future__ import annotations

from typing import Any

from ..options import NOTHING
from .evaluate import Result
from .resolve import CONFIRMED, CONTRADICTED, Answer, value_text

SLUGS = {"rope_theta": "rope-theta", "norm_before_residual": "norm-before-residual", "feedback": "norm-output",
         "aux_order": "aux-order"}


def _finding(code: str, severity: str, basis: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"code": code, "severity": severity, "basis": basis, "message": message,
            **{k: v for k, v in extra.items() if v is not None}}


def accept_findings(result: Result, answers: list[Answer]) -> list[dict[str, Any]]:
    """The findings of one ``accept`` run, errors first."""
    out = []
    base = result.readings[0]
    nothing = result.accepts_nothing()
    if nothing:
        out.append(_finding("acceptance.figures/accepts-nothing", "error", "measured", nothing,
                            expected=f"acceptance length above 1 + {NOTHING:g}"))
    if result.absolute_d2t:
        code = "vocab.t2d/absolute-ids" if "nonzero(t2d)" in result.absolute_d2t else "vocab.d2t/absolute-ids"
        unservable = [f.reading for f in result.readings[1:] if f.problem and "absolute-id d2t" in f.problem]
        out.append(_finding(code, "error", "read",
                            f"{result.absolute_d2t}: the trainer's reading maps draft ids as trained; "
                            + (f"{', '.join(unservable)} cannot serve it" if unservable else
                               "every engine adds arange(DV) to d2t"),
                            fix="write offsets, d2t = ids - arange(DV) (eagle3-checks fix does)"))
    for f in result.readings[1:]:
        verdict, d = result.verdict(f)
        if verdict == "unservable" and "absolute-id d2t" not in (f.problem or ""):
            out.append(_finding("acceptance.engine-drop/unservable", "error", "read", f"{f.reading}: {f.problem}",
                                engine=f.reading))
        elif verdict == "fails" and d is not None:
            out.append(_finding("acceptance.engine-drop/drop", "error", "measured",
                                f"{f.reading}: loses {100 * d.value:.1f}%"
                                + (f" [{100 * d.lo:.1f}%, {100 * d.hi:.1f}%]" if d.known else "")
                                + f" of the trained acceptance length {base.acceptance_length:.3f}",
                                engine=f.reading))
        elif verdict == "inconclusive":
            out.append(_finding("acceptance.engine-drop/inconclusive", "warning", "inferred",
                                f"{f.reading}: {result.inconclusive(f)}", engine=f.reading,
                                settle=result.inconclusive(f)))
        unmeasured = result.window_unmeasured(f)
        if unmeasured:
            out.append(_finding("acceptance.engine-drop/window-unmeasured", "info", "inferred",
                                f"{f.reading}: {unmeasured}", engine=f.reading,
                                settle=f"recorded sequences longer than {f.window_fits} tokens"))
    for a in answers:
        slug = SLUGS[a.question]
        if a.verdict == CONTRADICTED:
            out.append(_finding(f"acceptance.trained-with/{slug}", "error", "measured",
                                f"the weights were trained with {value_text(a.question, a.best)}, the config states "
                                f"{value_text(a.question, a.stated)} ({a.evidence()})"))
        elif a.verdict == CONFIRMED:
            out.append(_finding("acceptance.trained-with/confirmed", "info", "measured",
                                f"{a.question}: the data confirms the config ({a.evidence()})", key=a.question))
        else:
            out.append(_finding("acceptance.trained-with/undecided", "info", "assumed",
                                f"{a.question}: undecided: {a.why}", key=a.question,
                                rests_on=f"config.json states {value_text(a.question, a.stated)}",
                                settle=a.settle or None))
    if result.min_acceptance is not None and not base.problem and base.acceptance_length < result.min_acceptance:
        out.append(_finding("acceptance.figures/below-minimum", "warning", "measured",
                            f"acceptance length {base.acceptance_length:.3f} is below --min-acceptance "
                            f"{result.min_acceptance:g}"))
    low = result.low_coverage()
    if low:
        out.append(_finding("acceptance.figures/low-coverage", "warning", "measured", low))
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(out, key=lambda f: order[f["severity"]])


def render_answers(answers: list[Answer]) -> str:
    """The ``trained with:`` lines of the text report, and a FAIL line for the contradictions."""
    lines = [f"trained with: {a.describe()}" for a in answers]
    contradicted = [a.question for a in answers if a.verdict == CONTRADICTED]
    if contradicted:
        lines.append(f"FAIL: the config contradicts what the weights were trained with: {', '.join(contradicted)} "
                     "(`eagle3-checks fix CKPT DST --data ...` states the trained values)")
    return "".join(line + "\n" for line in lines)
