"""The ``trained with:`` lines of ``eagle3-checks accept``'s text report. Its findings are the gate's: the acceptance
level's checks judge the figures accept measured (gate.judge_measured), rendered as `check` renders them."""

from __future__ import annotations

from .resolve import CONTRADICTED, Answer


def render_answers(answers: list[Answer]) -> str:
    """The ``trained with:`` lines of the text report, and a FAIL line for the contradictions."""
    lines = [f"trained with: {a.describe()}" for a in answers]
    contradicted = [a.question for a in answers if a.verdict == CONTRADICTED]
    if contradicted:
        lines.append(f"FAIL: the config contradicts what the weights were trained with: {', '.join(contradicted)} "
                     "(`eagle3-checks fix CKPT DST --data ...` states the trained values)")
    return "".join(line + "\n" for line in lines)
