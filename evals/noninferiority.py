"""One-sided paired non-inferiority tests: is a compressed run's loss against the full cache below a margin?

Per item ``i`` the full cache scores ``a_i`` and the compressed run ``b_i`` (the same items, samples and seeds), both
the mean of the item's samples in the headline's unit (points for rates). The loss is ``-(mean b - mean a)``. The
null hypothesis is ``loss >= margin``; rejecting it at level ``alpha`` shows ``loss < margin``.

- **0/1 items** (every ``a_i`` and ``b_i`` is 0 or the full scale): with ``p10`` the share of items the full cache
  solves and the compressed run loses, ``p01`` the reverse and ``psi = p10 + p01`` the discordance, the loss is
  ``p10 - p01`` and the statistic is the net count of losses ``D = n10 - n01`` (small ``D`` speaks against the
  null). For a given ``p01`` the null's least favourable point is ``p10 = p01 + margin`` (a larger ``p10`` only makes
  ``D`` larger), so the p-value is a supremum over ``p01`` on that boundary. :func:`p_discordant` uses the
  confidence-interval p-value of Berger & Boos (1994, JASA 89:1012): the supremum is taken only where ``psi`` is
  below its one-sided ``1 - gamma`` Clopper-Pearson limit ``U`` (``gamma = alpha / 10``) and ``gamma`` is added
  (``p = gamma`` when ``U < margin``: so few discordant items that no loss of ``margin`` is possible). ``D``'s
  distribution is exact (a trinomial sum, by FFT), the supremum is taken on a grid of :data:`GRID` values of
  ``p01`` rounded outwards (conservative). Valid in finite samples: ``P(p <= alpha) <= alpha`` at every point of
  the null. Unlike a test conditional on the discordant count, one lost item among 30 with a 20-point margin is
  shown safe.
- **Other items** (pass@1 as the mean of several samples per item, partial credit): the one-sided paired t-test
  on ``d_i = b_i - a_i``: ``t = (mean d + margin) / (sd(d) / sqrt(n))`` against Student's t with ``n - 1`` degrees
  of freedom (:func:`p_paired_t`). Its level is asymptotic: skewed differences on few items can exceed ``alpha``
  (``tests/test_noninferiority.py`` measures it on simulated searches).

Both take arrays (one test per element), so a simulation of thousands of searches is one call.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

GAMMA_SHARE = 0.1  # Berger-Boos: the share of alpha spent on bounding the discordance rate
GRID = 257  # values of p01 on the null's boundary over which the p-value's supremum is taken
EXACT = "exact discordant (Berger-Boos)"
PAIRED_T = "paired t"


@dataclass(frozen=True)
class NonInferiority:
    """The test of ``loss >= margin`` on ``n`` paired items: ``delta = mean(b - a)``, the one-sided ``p_value`` and
    ``safe`` (``p_value <= alpha``: the loss is shown below the margin); ``test`` names the test used."""

    delta: float
    p_value: float
    safe: bool
    n: int
    test: str


def p_paired_t(mean_d, sd_d, n, margin):
    """One-sided p-values of the paired t-test of ``mean(d) <= -margin`` (arrays broadcast; ``sd_d``: ddof=1).

    Zero spread: p is 0 when every difference is above ``-margin``, else 1; fewer than 2 items: 1."""
    from scipy.stats import t as student

    mean_d, sd_d, n = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (mean_d, sd_d, n)))
    shift = mean_d + margin
    with np.errstate(divide="ignore", invalid="ignore"):
        stat = shift / (sd_d / np.sqrt(n))
        p = student.sf(stat, np.maximum(n - 1, 1))
    p = np.where(sd_d > 0, p, np.where(shift > 0, 0.0, 1.0))
    return np.where(n >= 2, p, 1.0)


def p_discordant(n10, n01, n, margin, alpha):
    """One-sided p-values of ``p10 - p01 >= margin`` (``margin`` a fraction in (0, 1)) from the discordant counts of
    ``n`` paired 0/1 items (arrays broadcast): the Berger-Boos p-value of the module docstring."""
    from scipy.stats import beta

    n10, n01, n = np.broadcast_arrays(*(np.asarray(x) for x in (n10, n01, n)))
    n10, n01, n = (x.astype(np.int64) for x in (n10, n01, n))
    gamma = GAMMA_SHARE * alpha
    nd = n10 + n01
    upper = np.where(nd >= n, 1.0, beta.ppf(1 - gamma, nd + 1, np.maximum(n - nd, 1)))  # Clopper-Pearson
    out = np.empty(n.shape, dtype=float)
    for size in np.unique(n):
        at = n == size
        grid, table = _sup_table(int(size), float(margin))
        # the largest p01 the bound allows, rounded up to the grid (a wider supremum: conservative)
        reach = np.clip((upper[at] - margin) / 2, 0.0, None)
        g = np.minimum(np.searchsorted(grid, reach, side="left"), len(grid) - 1)
        out[at] = np.minimum(1.0, table[g, n10[at] - n01[at] + int(size)] + gamma)
    return np.where(upper < margin, gamma, out) if out.ndim else float(
        gamma if upper < margin else out)


@functools.lru_cache(maxsize=256)
def _sup_table(n: int, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """``grid`` (GRID,) values of p01 on the null's boundary ``p10 = p01 + margin`` and ``table`` (GRID, 2n + 1):
    ``table[g, d + n]`` = the largest ``P(n10 - n01 <= d)`` over ``grid[:g + 1]`` (a running maximum), the
    trinomial ``(p10, p01, 1 - p10 - p01)`` sum over ``n`` items computed exactly by FFT."""
    grid = np.linspace(0.0, max(0.0, (1.0 - margin) / 2), GRID)
    p10 = grid + margin
    size = 1 << int(np.ceil(np.log2(2 * n + 1)))
    base = np.zeros((GRID, size))
    base[:, 0], base[:, 1], base[:, 2] = grid, 1.0 - p10 - grid, p10  # exponent = one item's D + 1
    pmf = np.fft.irfft(np.fft.rfft(base, axis=1) ** n, n=size, axis=1)[:, : 2 * n + 1]
    cdf = np.minimum(np.cumsum(np.clip(pmf, 0.0, None), axis=1), 1.0)
    return grid, np.maximum.accumulate(cdf, axis=0)


def is_binary(a: np.ndarray, b: np.ndarray, scale: float) -> bool:
    """Whether every score of ``a`` and ``b`` is 0 or ``scale`` (one 0/1 verdict per item)."""
    both = np.concatenate([a, b])
    return bool(np.all((both == 0) | (both == scale)))


def noninferiority(a: Sequence[float], b: Sequence[float], margin: float, alpha: float,
                   scale: float = 1.0, one_sample: bool = True) -> NonInferiority:
    """Test ``mean(a - b) >= margin`` on paired per-item scores ``a`` (full cache) and ``b`` (compressed), each of
    shape ``(n,)`` in the unit of ``margin``; ``scale`` is a solved item's score (100 for percent). The exact test
    is used when each item is one 0/1 verdict: ``one_sample`` (one sample per item) and every score 0 or ``scale``;
    means over several samples get the t-test even when they happen to be 0 or ``scale``."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"noninferiority: a and b must score the same items, got {x.shape} and {y.shape}")
    if not margin > 0:
        raise ValueError(f"search.max_loss: must be > 0, got {margin}")
    n = len(x)
    delta = float((y - x).mean()) if n else math.nan
    if n == 0:
        return NonInferiority(delta, 1.0, False, 0, PAIRED_T)
    if one_sample and is_binary(x, y, scale):
        n10 = int(((x == scale) & (y == 0)).sum())
        n01 = int(((x == 0) & (y == scale)).sum())
        p = float(p_discordant(n10, n01, n, margin / scale, alpha))
        test = EXACT
    else:
        d = y - x
        sd = float(d.std(ddof=1)) if n > 1 else 0.0
        p = float(p_paired_t(d.mean(), sd, n, margin))
        test = PAIRED_T
    return NonInferiority(delta, p, p <= alpha, n, test)


def fixed_sequence(p_values, alpha: float):
    """How many hypotheses of a fixed sequence are rejected: each is tested at the full ``alpha`` in the given order
    (the last axis of ``p_values``; shape ``(..., K)``) and the procedure stops at the first that is not (Maurer,
    Hothorn & Lehmacher 1995). The family-wise error is at most ``alpha``: no hypothesis is rejected unless every one
    before it was, so a false rejection needs the first true null of the sequence to be rejected, which has
    probability at most ``alpha``. Returns an int for one sequence, else an array of shape ``(...)``."""
    p = np.asarray(p_values, dtype=float)
    count = np.cumprod(p <= alpha, axis=-1).sum(axis=-1)
    return int(count) if count.ndim == 0 else count
