"""Uncertainty of a metric over the items of a run: standard errors, bootstrap intervals, paired differences.

The unit of resampling is the **item** (a needle, a LongBench question, an AIME problem with all its samples): items
are what a benchmark draws from a population; samples of one item are not independent of each other.

- :func:`mean_stderr`: ``std(x, ddof=1) / sqrt(n)``, as lm-eval's ``mean_stderr`` (``lm_eval/api/metrics.py``).
- :func:`bootstrap`: a statistic recomputed on ``iters`` resamples of the items (with replacement); the standard
  error is the standard deviation of the replicates (ddof=1, as lm-eval's ``bootstrap_stderr``) and the interval the
  2.5 / 97.5 percentiles (the percentile bootstrap, Efron & Tibshirani 1993, ch. 13).
- :func:`paired_bootstrap`: the difference ``mean(b - a)`` over items scored by both runs, its percentile interval
  from resampling the paired items (Koehn 2004, "Statistical significance tests for machine translation
  evaluation"), and a two-sided p-value from the paired sign-flip (randomisation) test: under "no difference" each
  item's difference is as likely negated, so ``p = P(|mean(s * d)| >= |mean(d)|)`` over random signs ``s``; exact
  (all ``2^n`` sign patterns) for ``n <= EXACT_MAX`` items, else ``iters`` random patterns with
  ``(k + 1) / (iters + 1)``.
  Unlike the bootstrap's own p-value it stays honest on few items: 6 of 6 items lost gives p = 2/64, not 0.

- :func:`wilson`: the Wilson score interval of a proportion ``k / n`` (Wilson 1927): inside [0, 1], of non-zero width
  at ``k = 0`` and ``k = n`` (where a bootstrap of a constant gives a false zero-width interval), and close to nominal
  coverage down to a few items (Brown, Cai & DasGupta 2001). ``evals.analysis.summary`` uses it for every rate whose
  items each score 0 or 1 (one sample per item, or a per-item verdict); other metrics keep the percentile bootstrap.

- :func:`bounded_rate_interval`: for a rate whose items score anywhere in [0, 1] (pass@1 over several samples), the
  Wilson interval of the mean over the items: a variable in [0, 1] with mean ``p`` has variance at most
  ``p (1 - p)``, so the interval is conservative at any n. ``evals.analysis.summary`` uses it where the percentile
  bootstrap is not valid: fewer than ``SMALL_N`` items, or a bootstrap of equal values (zero width, which no data
  supports). A metric that is not a rate gets no interval there (``n.m.``, not meaningful) rather than a zero-width one;
  :func:`paired_bootstrap` likewise gives no interval when every paired difference is equal.

Every function takes a ``seed``; the same inputs and seed give the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

ITERS = 1000
SEED = 0
LEVEL = 0.95
EXACT_MAX = 16
# Fewer items than this in a cell: the report and a run's headline call the numbers a pipeline check, and the report
# marks Δ and p as not meaningful. At 20 items a Wilson 95% interval is still about ±20 points wide at 50%, and the
# sign-flip test cannot reach p < 0.05 with fewer than 6 discordant items.
SMALL_N = 20


@dataclass(frozen=True)
class Estimate:
    """A point value with its standard error and ``LEVEL`` interval; NaN where a value does not exist (n < 2)."""

    value: float
    stderr: float
    ci_lo: float
    ci_hi: float
    n: int


@dataclass(frozen=True)
class PairedDelta:
    """``mean(b - a)`` over ``n`` paired items, its interval and two-sided p-value (H0: no difference)."""

    delta: float
    stderr: float
    ci_lo: float
    ci_hi: float
    p_value: float
    n: int


def wilson(k: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson score interval ``(lo, hi)`` of a proportion with ``k`` successes in ``n`` trials (fractions in [0, 1]);
    NaN for ``n == 0``."""
    if n <= 0:
        return math.nan, math.nan
    z = _z(level)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def bounded_rate_interval(mean: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """``(lo, hi)`` for the mean ``mean`` (in [0, 1]) of ``n`` items each in [0, 1]: the Wilson interval of a
    proportion ``mean`` over ``n`` trials, conservative for bounded items (their variance is at most
    ``mean (1 - mean)``); NaN for ``n == 0``."""
    return wilson(min(max(mean, 0.0), 1.0) * n, n, level)


def zero_width(lo: float, hi: float) -> bool:
    """Whether an interval collapsed to a point (both ends finite and equal)."""
    return math.isfinite(lo) and math.isfinite(hi) and math.isclose(lo, hi, rel_tol=0.0, abs_tol=1e-12)


def _z(level: float) -> float:
    """The two-sided normal quantile of ``level`` (1.96 at 0.95)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + level / 2)


def mean_stderr(values: Sequence[float]) -> float:
    """Standard error of the mean: ``std(values, ddof=1) / sqrt(n)``; NaN for fewer than two values."""
    x = np.asarray(values, dtype=float)
    return float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else math.nan


def resample_indices(n: int, iters: int = ITERS, seed: int = SEED) -> np.ndarray:
    """``(iters, n)`` item indices drawn with replacement from ``range(n)``."""
    return np.random.default_rng(seed).integers(0, n, size=(iters, n))


def resample_counts(n: int, iters: int = ITERS, seed: int = SEED) -> np.ndarray:
    """``(iters, n)``: how many times each item is drawn in each resample of :func:`resample_indices` (same draws
    for the same ``n, iters, seed``)."""
    idx = resample_indices(n, iters, seed)
    counts = np.zeros((iters, n))
    np.add.at(counts, (np.arange(iters)[:, None], idx), 1.0)
    return counts


def ratio_replicates(counts: np.ndarray, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``(iters, K)`` replicates of ``K`` ratios of item sums, ``sum_i num_i / sum_i den_i``, under the resamples
    ``counts`` ``(iters, n)``: ``(counts @ num) / (counts @ den)`` with ``num, den`` of shape ``(n, K)`` (finite);
    NaN where a resample draws no item with ``den_i > 0``."""
    top, bottom = counts @ num, counts @ den
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)


def _interval(replicates: np.ndarray, level: float) -> tuple[float, float]:
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(replicates, [tail, 100 - tail])
    return float(lo), float(hi)


def bootstrap(
    statistic: Callable[[np.ndarray], float],
    n: int,
    *,
    iters: int = ITERS,
    seed: int = SEED,
    level: float = LEVEL,
) -> Estimate:
    """``statistic(indices)`` on the items ``arange(n)`` and on ``iters`` resamples of them.

    ``statistic`` takes an index array of shape ``(n,)`` (items may repeat) and returns a float, or NaN when the
    resample has nothing to measure (those replicates are left out).
    """
    value = float(statistic(np.arange(n)))
    if n < 2:
        return Estimate(value, math.nan, math.nan, math.nan, n)
    reps = np.array([statistic(idx) for idx in resample_indices(n, iters, seed)], dtype=float)
    return from_replicates(value, reps, n, level)


def from_replicates(value: float, replicates: Sequence[float], n: int, level: float = LEVEL) -> Estimate:
    """An :class:`Estimate` from bootstrap ``replicates`` of ``value`` (NaN replicates left out)."""
    reps = np.asarray(replicates, dtype=float)
    reps = reps[~np.isnan(reps)]
    if n < 2 or len(reps) < 2:
        return Estimate(value, math.nan, math.nan, math.nan, n)
    return Estimate(value, float(reps.std(ddof=1)), *_interval(reps, level), n)


def bootstrap_mean(values: Sequence[float], *, iters: int = ITERS, seed: int = SEED, level: float = LEVEL) -> Estimate:
    """The mean of per-item ``values`` with the analytic standard error and a percentile bootstrap interval."""
    x = np.asarray(values, dtype=float)
    est = bootstrap(lambda idx: x[idx].mean() if len(idx) else math.nan, len(x), iters=iters, seed=seed, level=level)
    return Estimate(est.value, mean_stderr(x), est.ci_lo, est.ci_hi, est.n)


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, iters: int = ITERS, seed: int = SEED, level: float = LEVEL
) -> PairedDelta:
    """``b - a`` on the same items (``a[i]`` and ``b[i]`` score item ``i``): mean difference, analytic standard
    error of the paired differences, percentile interval and two-sided p-value from ``iters`` item resamples."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired_bootstrap: a and b must score the same items, got {len(x)} and {len(y)}")
    d = y - x
    n = len(d)
    if n == 0:
        return PairedDelta(math.nan, math.nan, math.nan, math.nan, math.nan, 0)
    delta = float(d.mean())
    if n < 2:
        return PairedDelta(delta, math.nan, math.nan, math.nan, math.nan, n)
    reps = d[resample_indices(n, iters, seed)].mean(axis=1)
    lo, hi = _interval(reps, level)
    if zero_width(lo, hi):  # every difference equal: the resamples cannot see any spread, so none is claimed
        lo = hi = math.nan
    return PairedDelta(delta, mean_stderr(d), lo, hi, sign_flip_p(d, iters=iters, seed=seed), n)


def sign_flip_p(d: Sequence[float], *, iters: int = ITERS, seed: int = SEED) -> float:
    """Two-sided p-value of the paired sign-flip test for differences ``d`` (shape ``(n,)``)."""
    x = np.asarray(d, dtype=float)
    n = len(x)
    observed = abs(x.mean()) - 1e-12 * max(1.0, float(np.abs(x).max()))  # ties count as "as extreme"
    if n <= EXACT_MAX:
        signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)  # (2^n, n) every sign pattern
        return float((np.abs((signs * x).mean(axis=1)) >= observed).mean())
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(iters, n))
    k = int((np.abs((signs * x).mean(axis=1)) >= observed).sum())
    return (k + 1) / (iters + 1)
