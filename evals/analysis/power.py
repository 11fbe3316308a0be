"""Power of paired comparisons (a library; ``python -m evals.power`` is the command on top, :mod:`evals.report.power`
the table it prints).

- :func:`t_power`: the power of the paired t-test on ``n`` per-item differences with standardised effect
  ``effect = true difference / sd(d)``, from the noncentral t (noncentrality ``effect * sqrt(n)``, ``n - 1``
  degrees of freedom), as statsmodels' ``TTestPower`` computes it (checked against it in ``tests/test_power.py``).
- :func:`mde`: the smallest true difference a comparison of ``n`` items with paired spread ``sd`` detects with the
  given power, two-sided at ``alpha`` (the report's test); :func:`mde_80` is that at 80% from the differences
  themselves (the report's ``mde_80`` column).
- :func:`items_needed`: the items a one-sided non-inferiority test at ``alpha`` needs to show ``loss < margin``
  with the given power when the true loss is ``true_loss``.
- :func:`exact_power`, :func:`exact_items_needed`: the same for 0/1 items under the search's exact test (an exact
  multinomial computation over every outcome), from the pilot's share of discordant items.
- :func:`variance_parts`: a pilot's paired variance split into the part between items and the part from sampling
  within an item (per-sample differences paired by ``sample_idx``: the same seeds), so that the variance of a mean
  over ``k`` samples per item is ``between + within / k``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05
POWER = 0.8
MAX_ITEMS = 10**7
SAMPLES = (1, 2, 4, 8, 16, 32, 64)


def t_power(effect: float, n: int, alpha: float = ALPHA, alternative: str = "two-sided") -> float:
    """Power of the paired (one-sample) t-test of ``n`` differences at standardised effect ``effect``;
    ``alternative``: ``two-sided`` or ``larger`` (one-sided, effect in the tested direction)."""
    from scipy.stats import nct, t

    if n < 2:
        return math.nan
    df, ncp = n - 1, effect * math.sqrt(n)
    if alternative == "two-sided":
        crit = t.isf(alpha / 2, df)
        far = float(nct.cdf(-crit, df, ncp))  # the opposite tail: negligible, and NaN where scipy underflows
        return float(nct.sf(crit, df, ncp)) + (0.0 if math.isnan(far) else far)
    if alternative == "larger":
        return float(nct.sf(t.isf(alpha, df), df, ncp))
    raise ValueError(f"alternative: two-sided or larger, got {alternative!r}")


def mde(sd: float, n: int, alpha: float = ALPHA, power: float = POWER, alternative: str = "two-sided") -> float:
    """The smallest true difference detected with ``power`` by the paired t-test of ``n`` items whose differences
    have standard deviation ``sd``; NaN when ``sd`` is 0 or unknown or ``n < 2``."""
    from scipy.optimize import brentq

    if not (n >= 2 and sd > 0 and math.isfinite(sd)):
        return math.nan
    hi = 1.0
    while t_power(hi, n, alpha, alternative) < power:
        hi *= 2
    effect = brentq(lambda e: t_power(e, n, alpha, alternative) - power, 0.0, hi, xtol=1e-10)
    return float(effect * sd)


def mde_80(d: Sequence[float], alpha: float = ALPHA) -> float:
    """The report's ``mde_80``: :func:`mde` at 80% power from paired differences ``d`` (shape ``(n,)``)."""
    x = np.asarray(d, dtype=float)
    return mde(float(x.std(ddof=1)) if len(x) > 1 else math.nan, len(x), alpha)


def items_needed(sd: float, margin: float, alpha: float = ALPHA, power: float = POWER,
                 true_loss: float = 0.0) -> int | None:
    """The fewest items whose one-sided non-inferiority t-test (margin ``margin``) reaches ``power`` when the true
    loss is ``true_loss < margin``; None beyond ``MAX_ITEMS``. ``sd``: the paired spread of per-item differences."""
    if not margin > true_loss:
        raise ValueError(f"margin: must exceed the true loss ({true_loss}), got {margin}")
    if sd <= 0:
        return 2
    effect = (margin - true_loss) / sd
    from statistics import NormalDist

    z = NormalDist().inv_cdf
    guess = max(2, int(((z(1 - alpha) + z(power)) / effect) ** 2))  # the normal approximation, then exact
    if guess > MAX_ITEMS:
        return None
    n = guess
    while n > 2 and t_power(effect, n - 1, alpha, "larger") >= power:
        n -= 1
    while t_power(effect, n, alpha, "larger") < power:
        n += 1
        if n > MAX_ITEMS:
            return None
    return n


def exact_power(n: int, p10: float, p01: float, margin: float, alpha: float = ALPHA) -> float:
    """The exact power of the search's test for 0/1 items (:func:`evals.analysis.noninferiority.p_discordant`) on ``n``
    items whose discordance is ``p10`` (full cache right, compressed wrong) and ``p01``: the sum of the
    multinomial probabilities of every ``(n10, n01)`` the test rejects. ``margin``: a fraction."""
    from scipy.stats import multinomial

    from evals.analysis.noninferiority import p_discordant

    n10, n01 = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    ok = n10 + n01 <= n
    n10, n01 = n10[ok], n01[ok]
    reject = p_discordant(n10, n01, n, margin, alpha) <= alpha
    prob = multinomial.pmf(np.stack([n10, n01, n - n10 - n01], axis=-1), n, [p10, p01, 1.0 - p10 - p01])
    return float(prob[reject].sum())


def exact_items_needed(p10: float, p01: float, margin: float, alpha: float = ALPHA, power: float = POWER,
                       most: int = 3000) -> int | None:
    """The fewest items (up to ``most``) at which :func:`exact_power` reaches ``power`` (the first such n: power is
    not monotone in n for a discrete test, so a few more items can dip below it); None beyond ``most``."""
    lo, hi = 1, 2
    while exact_power(hi, p10, p01, margin, alpha) < power:
        lo, hi = hi, hi * 2
        if hi > most:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if exact_power(mid, p10, p01, margin, alpha) >= power else (mid, hi)
    return hi


@dataclass(frozen=True)
class VarianceParts:
    """A pilot's paired differences: ``n`` items, ``k`` samples per item, ``total`` = var of the per-item mean
    differences (ddof=1), split into ``between`` items and ``within`` (one sample's variance; the mean of ``k``
    contributes ``within / k``)."""

    n: int
    k: int
    total: float
    between: float
    within: float

    def sd(self, samples: int) -> float:
        """The paired spread of per-item means over ``samples`` samples per item."""
        return math.sqrt(self.between + self.within / samples)


def variance_parts(diffs: np.ndarray) -> VarianceParts:
    """``diffs`` ``(n, k)``: per item and sample index, compressed minus full-cache score (the same seeds)."""
    n, k = diffs.shape
    means = diffs.mean(axis=1)
    total = float(means.var(ddof=1)) if n > 1 else math.nan
    within = float(diffs.var(axis=1, ddof=1).mean()) if k > 1 else 0.0
    between = max(0.0, total - within / k) if k > 1 else total
    return VarianceParts(n, k, total, between, within)
