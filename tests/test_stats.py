"""acceptance/stats.py: the intervals every acceptance figure carries (the coverage on real drafts is held by
tests/test_trained_world.py::test_the_intervals_cover_the_figures_of_a_larger_held_out_run)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eagle3_checks.acceptance.stats import SHARE, critical, ratio


def test_the_critical_values_are_students():
    assert critical(16) == pytest.approx(2.1314, abs=1e-4)  # t(0.975, 15)
    assert critical(1001) == pytest.approx(1.9623, abs=1e-4)
    assert math.isinf(critical(1))


def test_a_figure_that_is_not_a_share_keeps_the_symmetric_interval():
    num, den = [5.0, 9.0, 2.0, 7.0], [3.0, 4.0, 2.0, 5.0]
    iv = ratio(num, den, 1.0, (1.0, 5.0))
    assert iv.hi - iv.value == pytest.approx(iv.value - iv.lo)


def test_a_share_near_one_reaches_further_down_than_up():
    """The logit scale: a share of 0.95 over 16 sequences has more room below it than above, and its interval is the
    symmetric one on the logit scale mapped back."""
    num = [19.0] * 12 + [14.0, 20.0, 18.0, 16.0]
    den = [20.0] * 16
    iv = ratio(num, den, bounds=SHARE)
    assert 0.0 < iv.lo < iv.value < iv.hi < 1.0
    assert iv.value - iv.lo > iv.hi - iv.value
    logit = math.log(iv.value / (1 - iv.value))
    half = critical(16) * iv.sd / (iv.value * (1 - iv.value))
    assert iv.lo == pytest.approx(1 / (1 + math.exp(-(logit - half))))
    assert iv.hi == pytest.approx(1 / (1 + math.exp(-(logit + half))))


def test_a_share_at_its_bound_has_no_logit_and_keeps_its_point():
    iv = ratio([4.0, 6.0], [4.0, 6.0], bounds=SHARE)
    assert (iv.value, iv.lo, iv.hi) == (1.0, 1.0, 1.0)


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 30)), min_size=2, max_size=40))
def test_a_share_interval_holds_its_value_within_the_bounds(pairs):
    num = [float(min(y, x)) for y, x in pairs]
    den = [float(x) for _, x in pairs]
    iv = ratio(num, den, bounds=SHARE)
    assert 0.0 <= iv.lo <= iv.value <= iv.hi <= 1.0


def test_on_skewed_sequences_the_logit_interval_covers_closer_to_its_level():
    """Sequences mostly near 1 with a few poor ones (what a drafter's conditional accuracy looks like): 16-sequence
    intervals of the share cover the population's figure at least 90% of the time, where the symmetric interval
    covered it less often."""
    rng = random.Random(0)
    population = [(float(rng.randint(18, 20) if rng.random() > 0.15 else rng.randint(4, 14)), 20.0)
                  for _ in range(400)]
    truth = sum(y for y, _ in population) / sum(x for _, x in population)
    covered = symmetric = 0
    draws = 2000
    for _ in range(draws):
        drawn = rng.sample(population, 16)
        num, den = [y for y, _ in drawn], [x for _, x in drawn]
        iv = ratio(num, den, bounds=SHARE)
        flat = ratio(num, den)  # no bounds: the symmetric delta-method interval
        covered += iv.lo <= truth <= iv.hi
        symmetric += flat.lo <= truth <= flat.hi
    assert covered >= 0.9 * draws and covered > symmetric, (covered, symmetric)
