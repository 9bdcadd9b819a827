"""Intervals over sequences: every acceptance figure is a ratio of sums over the samples (sequences), and positions
within a sequence are correlated, so a figure's uncertainty is estimated from the spread of the sequences, not of
the positions.

A figure R = sum(y_i) / sum(x_i) over sequences i (acceptance length - 1: accepted tokens over draft rounds; a step
accuracy: right over counted; alpha: overlap over counted pairs) has the linearised (delta-method) variance of a
ratio estimator over clusters, var(R) = n / (n - 1) * sum((y_i - R x_i)^2) / sum(x_i)^2, and the 95% interval R +-
t(n-1) * sd, with Student's t at n - 1 degrees of freedom (few sequences give wide intervals). A paired difference of
two readings over the same positions (a gain, a drop) is the same estimator with y_i the per-sequence difference.
A share (a figure within [0, 1]: a step accuracy, alpha, a position's acceptance rate) takes the same interval on the
logit scale, logit(R) +- t(n-1) * sd / (R (1 - R)), mapped back: near 1 a few poor sequences pull the figure down
and the symmetric interval sat above it (the trained world's conditional accuracy at step 1, 0.925 over 128 held-out
sequences: 16-sequence intervals covered it in 87.9% of 2,000 draws, 90.2% on the logit scale;
tests/test_trained_world.py). Pure Python: no scipy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from ..fast_dataclass import dataclass

LEVEL = 0.95  # the intervals' coverage


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function."""
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile (bisection on :func:`t_cdf`; 1e-10 absolute)."""
    if not 0.0 < p < 1.0:
        raise ValueError(p)
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return (lo + hi) / 2.0


@functools.lru_cache(maxsize=256)
def critical(n: int, level: float = LEVEL) -> float:
    """The two-sided critical value for n sequences (t at n - 1 degrees of freedom); inf below 2."""
    return t_quantile(0.5 + level / 2.0, n - 1) if n >= 2 else math.inf


@dataclass(frozen=True)
class Interval:
    """A ratio-of-sums figure over n sequences with its standard error and 95% interval."""

    value: float
    sd: float  # its standard error (inf with fewer than two sequences that count)
    n: int  # sequences that count (those with a nonzero denominator)
    lo: float
    hi: float

    @property
    def known(self) -> bool:
        return math.isfinite(self.sd)

    def excludes(self, x: float) -> bool:
        """The interval lies wholly above or wholly below ``x``."""
        return self.lo > x or self.hi < x

    def shown(self, digits: int = 3) -> str:
        if not self.known:
            return f"{self.value:.{digits}f} [no interval: {self.n} sequence{'s' if self.n != 1 else ''}]"
        return f"{self.value:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"

    def record(self) -> list[float] | None:
        return [self.lo, self.hi] if self.known else None

    def sequences_for(self, width: float) -> int | None:
        """About how many sequences would bring the interval's half-width down to ``width`` (the spread per
        sequence as measured here): None when it cannot be said (no spread measured, or no interval)."""
        if not self.known or self.sd == 0 or width <= 0:
            return None
        need = self.n * (critical(max(self.n, 2)) * self.sd / width) ** 2
        return max(self.n + 1, math.ceil(need))


SHARE = (0.0, 1.0)  # a share's bounds: its interval is taken on the logit scale


def _expit(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def ratio(num: Sequence[float], den: Sequence[float], offset: float = 0.0, bounds: tuple[float, float] | None = None,
          level: float = LEVEL) -> Interval:
    """offset + sum(num) / sum(den) with its interval over the sequences (the pairs (num_i, den_i)); ``bounds``
    clip the interval to the figure's range; a share (``bounds`` :data:`SHARE`, no offset) strictly inside it takes
    its interval on the logit scale."""
    pairs = [(y, x) for y, x in zip(num, den, strict=True) if x]
    n = len(pairs)
    total = sum(x for _, x in pairs)
    if not total:
        return Interval(offset, math.inf, 0, -math.inf, math.inf)
    r = sum(y for y, _ in pairs) / total
    if n < 2:
        return Interval(offset + r, math.inf, n, -math.inf, math.inf)
    var = n / (n - 1) * sum((y - r * x) ** 2 for y, x in pairs) / total ** 2
    sd = math.sqrt(max(var, 0.0))
    half = critical(n, level) * sd
    lo, hi = offset + r - half, offset + r + half
    if bounds == SHARE and offset == 0.0 and 0.0 < r < 1.0:
        centre, spread = math.log(r / (1.0 - r)), critical(n, level) * sd / (r * (1.0 - r))
        lo, hi = _expit(centre - spread), _expit(centre + spread)
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return Interval(offset + r, sd, n, lo, hi)


def linearised(value: float, influence: Sequence[float], bounds: tuple[float, float] | None = None,
               level: float = LEVEL) -> Interval:
    """A smooth function of several ratio-of-sums totals over the same sequences (a drop between two readings'
    acceptance lengths), with its delta-method interval: ``influence`` holds each counting sequence's linearised
    contribution (they sum to zero), var = n / (n - 1) * sum(g_i^2); :func:`ratio` is the case of one ratio,
    g_i = (y_i - R x_i) / sum(x)."""
    n = len(influence)
    if n < 2:
        return Interval(value, math.inf, n, -math.inf, math.inf)
    sd = math.sqrt(n / (n - 1) * sum(g * g for g in influence))
    half = critical(n, level) * sd
    lo, hi = value - half, value + half
    if bounds is not None:
        lo, hi = max(lo, bounds[0]), min(hi, bounds[1])
    return Interval(value, sd, n, lo, hi)
