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
- **Per-item means** (pass@1 as the mean of several samples per item, partial credit; any score in
  ``[0, scale]``): with ``l_i = (a_i - b_i) / scale`` in [-1, 1] the loss of item ``i``, :func:`p_betting` tests by
  betting (Waudby-Smith & Ramdas 2023, "Estimating means of bounded random variables by betting", JRSS-B 86:1; the
  one-sided test of their section 3 with a predictable plug-in bet). Going through the items in a fixed order, a
  capital starts at 1 and is multiplied at item ``t`` by ``1 + lambda_t (margin - l_t)``, where the bet
  ``lambda_t >= 0`` depends only on the items before ``t`` (``(margin - m) / (v + (margin - m)^2)`` from their
  running mean ``m`` and variance ``v``, shrunk by one pseudo-item towards no loss and variance
  :data:`PRIOR_VAR`; at most :data:`BET_CAP` ``/ (1 - margin)``, so no item can take the capital to 0). Under the
  null every factor has expectation ``1 + lambda_t (margin - E l_t) <= 1``, so the capital is a non-negative
  supermartingale with expectation at most 1, in every order; the test averages the final capital ``K`` over
  :data:`ORDERS` fixed orders (the answer does not hang on one order) and ``p = min(1, 1 / K)`` is valid by
  Markov's inequality, at every ``n``, whatever the spread: equal differences are no evidence until enough items
  bet on them (36 unchanged items for a 10-point margin, 73 for 5 points: the 0/1 test needs 40 and 81). No
  variance estimate can be 0, and no normal approximation is made (a paired t-test sees zero spread in 2 items x 2
  samples with equal differences and answers p = 0).
- **Scores outside** ``[0, scale]`` (a metric without bounds): the one-sided paired t-test on ``d_i = b_i - a_i``
  (:func:`p_paired_t`), asymptotic only, named as such in the result.

Every p-value function takes arrays (one test per element or row; :func:`p_items` picks the test per row), so a
simulation of thousands of searches is one call.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

GAMMA_SHARE = 0.1  # Berger-Boos: the share of alpha spent on bounding the discordance rate
GRID = 257  # values of p01 on the null's boundary over which the p-value's supremum is taken
ORDERS = 16  # fixed orders of the items whose capitals the test by betting averages
BET_CAP = 0.8  # the largest bet, as a share of the one that a loss of 1 would ruin
PRIOR_VAR = 0.05  # the pseudo-item's squared deviation in the running variance of the bets
BET_SEED = 2026  # the orders' seed: the p-value is a function of the items and their order as given
EXACT = "exact discordant (Berger-Boos)"
BOUNDED = "bounded items (test by betting)"
PAIRED_T = "paired t (asymptotic: scores outside [0, scale])"


@dataclass(frozen=True)
class NonInferiority:
    """The test of ``loss >= margin`` on ``n`` paired items: ``delta = mean(b - a)``, the one-sided ``p_value`` and
    ``safe`` (``p_value <= alpha``: the loss is shown below the margin); ``test`` names the test used. The other side
    (:func:`evals.analysis.estimands.compare`): ``p_lose`` of ``loss <= margin`` and ``lose`` (shown to lose more
    than the margin; NaN and False where not tested); ``estimand``: ``population`` or ``these_items``."""

    delta: float
    p_value: float
    safe: bool
    n: int
    test: str
    lose: bool = False
    p_lose: float = math.nan
    estimand: str = "population"


def p_paired_t(mean_d, sd_d, n, margin):
    """One-sided p-values of the paired t-test of ``mean(d) <= -margin`` (arrays broadcast; ``sd_d``: ddof=1).

    Zero spread or fewer than 2 items: 1 (a spread estimated as 0 is no evidence of a small loss)."""
    from scipy.stats import t as student

    mean_d, sd_d, n = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (mean_d, sd_d, n)))
    shift = mean_d + margin
    with np.errstate(divide="ignore", invalid="ignore"):
        stat = shift / (sd_d / np.sqrt(n))
        p = student.sf(stat, np.maximum(n - 1, 1))
    p = np.where(sd_d > 0, p, 1.0)
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
    ``table[g, d + n]`` = the largest ``P(n10 - n01 <= d)`` over ``grid[:g + 1]`` (a running maximum)."""
    grid, pmf = _trinomial(n, margin)
    cdf = np.minimum(np.cumsum(pmf, axis=1), 1.0)
    return grid, np.maximum.accumulate(cdf, axis=0)


def _trinomial(n: int, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """``grid`` (GRID,) values of p01 on the boundary ``p10 = p01 + margin`` and ``pmf`` (GRID, 2n + 1): the
    distribution of the net loss ``n10 - n01`` (index ``d + n``) of the trinomial ``(p10, p01, 1 - p10 - p01)`` over
    ``n`` items, computed exactly by FFT (clipped at 0 against rounding)."""
    grid = np.linspace(0.0, max(0.0, (1.0 - margin) / 2), GRID)
    p10 = grid + margin
    size = 1 << int(np.ceil(np.log2(2 * n + 1)))
    base = np.zeros((GRID, size))
    base[:, 0], base[:, 1], base[:, 2] = grid, 1.0 - p10 - grid, p10  # exponent = one item's D + 1
    pmf = np.fft.irfft(np.fft.rfft(base, axis=1) ** n, n=size, axis=1)[:, : 2 * n + 1]
    return grid, np.clip(pmf, 0.0, None)


def p_betting(loss, margin: float):
    """One-sided p-values of ``E[l] >= margin`` from per-item losses ``loss`` in [-1, 1], shape ``(..., n)`` (one test
    per leading index; ``margin`` a fraction in (0, 1)): the test by betting of the module docstring, ``1 / K``
    with ``K`` the final capital averaged over :data:`ORDERS` fixed orders of the items. Valid at every ``n`` and
    every distribution of independent items: ``P(p <= alpha) <= alpha``."""
    x = np.asarray(loss, dtype=float)
    n = x.shape[-1]
    if n == 0:
        return np.ones(x.shape[:-1]) if x.ndim > 1 else 1.0
    order = np.stack([np.random.default_rng([BET_SEED, n, i]).permutation(n) for i in range(ORDERS)])  # (P, n)
    x = x[..., order]  # (..., P, n): each order's sequence of items
    seen = np.arange(n)  # items before item t
    before = np.cumsum(x, axis=-1) - x
    before_sq = np.cumsum(x * x, axis=-1) - x * x
    mean = before / (seen + 1)  # shrunk towards 0 (no loss) by one pseudo-item
    var = (PRIOR_VAR + before_sq - 2 * mean * before + seen * mean * mean) / (seen + 1)
    gap = margin - mean
    bet = np.clip(gap / (var + gap * gap), 0.0, BET_CAP / (1.0 - margin))  # (..., P, n), predictable
    capital = np.exp(np.log1p(bet * (margin - x)).sum(axis=-1)).mean(axis=-1)  # (...,)
    p = np.minimum(1.0, 1.0 / capital)
    return p if p.ndim else float(p)


def is_binary(a: np.ndarray, b: np.ndarray, scale: float) -> bool:
    """Whether every score of ``a`` and ``b`` is 0 or ``scale`` (one 0/1 verdict per item)."""
    both = np.concatenate([a, b])
    return bool(np.all((both == 0) | (both == scale)))


def test_name(a: np.ndarray, b: np.ndarray, one_sample: bool) -> str:
    """Which test :func:`p_items` applies to per-item scores ``a, b`` (fractions, shape ``(n,)``)."""
    if one_sample and is_binary(a, b, 1.0):
        return EXACT
    if bool(np.all((a >= 0) & (a <= 1) & (b >= 0) & (b <= 1))):
        return BOUNDED
    return PAIRED_T


def p_items(a, b, margin: float, alpha: float, one_sample: bool):
    """One-sided p-values of ``mean(a - b) >= margin`` for per-item scores ``a`` (full cache) and ``b``
    (compressed) as fractions of a solved item's score, shape ``(..., n)`` (one test per leading index; ``margin`` a
    fraction): each row gets the test :func:`test_name` picks for it. Returns a float for one row, else an array of
    shape ``(...)``."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n = x.shape[-1]
    lead = x.shape[:-1]
    x, y = x.reshape(-1, n), y.reshape(-1, n)
    loss = x - y
    binary = np.all((x == 0) | (x == 1), axis=1) & np.all((y == 0) | (y == 1), axis=1) & bool(one_sample)
    bounded = np.all((x >= 0) & (x <= 1) & (y >= 0) & (y <= 1), axis=1)
    p = np.ones(len(x))
    if n == 0:
        return p.reshape(lead) if lead else 1.0
    if binary.any():
        p[binary] = p_discordant((loss[binary] == 1).sum(1), (loss[binary] == -1).sum(1), n, margin, alpha)
    rest = bounded & ~binary
    if rest.any():
        p[rest] = p_betting(loss[rest], min(margin, 1.0)) if margin < 1 else 1.0
    other = ~bounded
    if other.any():
        d = -loss[other]
        sd = d.std(axis=1, ddof=1) if n > 1 else np.zeros(int(other.sum()))
        p[other] = p_paired_t(d.mean(1), sd, n, margin)
    return p.reshape(lead) if lead else float(p[0])


def noninferiority(a: Sequence[float], b: Sequence[float], margin: float, alpha: float,
                   scale: float = 1.0, one_sample: bool = True) -> NonInferiority:
    """Test ``mean(a - b) >= margin`` on paired per-item scores ``a`` (full cache) and ``b`` (compressed), each of
    shape ``(n,)`` in the unit of ``margin``; ``scale`` is a solved item's score (100 for percent). The exact test
    is used when each item is one 0/1 verdict: ``one_sample`` (one sample per item) and every score 0 or ``scale``;
    other scores in ``[0, scale]`` (means over several samples, even when they happen to be 0 or ``scale``) get
    :func:`p_betting`; scores outside it the paired t-test (:func:`p_items`)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"noninferiority: a and b must score the same items, got {x.shape} and {y.shape}")
    if not margin > 0:
        raise ValueError(f"search.max_loss: must be > 0, got {margin}")
    n = len(x)
    delta = float((y - x).mean()) if n else math.nan
    if n == 0:
        return NonInferiority(delta, 1.0, False, 0, BOUNDED)
    p = float(p_items(x / scale, y / scale, margin / scale, alpha, one_sample))
    return NonInferiority(delta, p, p <= alpha, n, test_name(x / scale, y / scale, one_sample))


def fixed_sequence(p_values, alpha: float):
    """How many hypotheses of a fixed sequence are rejected: each is tested at the full ``alpha`` in the given order
    (the last axis of ``p_values``; shape ``(..., K)``) and the procedure stops at the first that is not (Maurer,
    Hothorn & Lehmacher 1995). The family-wise error is at most ``alpha``: no hypothesis is rejected unless every one
    before it was, so a false rejection needs the first true null of the sequence to be rejected, which has
    probability at most ``alpha``. Returns an int for one sequence, else an array of shape ``(...)``."""
    p = np.asarray(p_values, dtype=float)
    count = np.cumprod(p <= alpha, axis=-1).sum(axis=-1)
    return int(count) if count.ndim == 0 else count
