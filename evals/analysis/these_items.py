"""The ``these items`` estimand: the benchmark's problems fixed, only the samples random.

A benchmark of ``n`` problems (AIME24: 30) is scored as the mean over the problems of the mean of ``k`` samples per
problem (R1's protocol: 64). With ``X_ij`` and ``Y_ij`` the full cache's and the compressed run's score of sample
``j`` of problem ``i`` (fractions in [0, 1]) the per-sample loss is ``z_ij = X_ij - Y_ij`` in [-1, 1] (samples paired
by ``sample_idx``; unpaired samples of two independent runs may be paired by index all the same: they are independent
draws either way). The estimand is ``mu = (1/n) sum_i theta_i`` with ``theta_i = E z_ij``: the loss the headline
would show with infinitely many samples on *these* problems. The ``z_ij`` are independent, bounded, and **not**
identically distributed (every problem has its own success rates).

**Test.** ``H0: mu >= c`` (``c`` the margin as a fraction; rejecting shows ``mu < c``) is tested by betting in
*rounds*: round ``j`` holds sample ``j`` of every problem (so each problem needs the same ``k``: the caller keeps the
sample indices every problem has). Within a round one bet ``lambda_j`` in ``[0, CAP / (1 - c)]`` is used for all ``n``
problems, chosen from the earlier rounds only: ``g / (v + g^2)``, the growth-optimal bet against an alternative
``g = PLAN * margin`` beyond the bound (for "shown safe" a loss of ``c - g``, near no loss) with ``v`` the running
variance of the earlier rounds' terms, shrunk by one pseudo-term of variance :data:`PRIOR_VAR`. (Betting at a planned
alternative rather than at the running mean learns only the spread, which settles within a few rounds; ``PLAN = 0.7``
was the most powerful in ad-hoc simulations at 30 x 64, rates uniform in 30-90%: power about 0.79, 0.82, 0.83,
0.82 and 0.79 at PLAN 0.5, 0.6, 0.7, 0.8 and 1.0.) The capital after round ``J`` is
``K_J = prod_{j <= J} prod_i (1 + lambda_j (c - z_ij))``.

*Proof that* ``E K_k <= 1`` *under H0.* Every factor is positive (``c - z >= c - 1`` and ``lambda < 1 / (1 - c)``).
Given the earlier rounds ``F_{j-1}``, ``lambda_j`` is fixed and the ``z_ij`` of round ``j`` are independent of each
other and of ``F_{j-1}``, so ``E[prod_i (1 + lambda_j (c - z_ij)) | F_{j-1}] = prod_i (1 + lambda_j (c - theta_i))``.
By the inequality of arithmetic and geometric means over the ``n`` positive factors this is at most
``(1 + lambda_j (c - mu))^n``, which is ``<= 1`` because ``lambda_j >= 0`` and ``mu >= c``. So ``K_J`` is a
non-negative supermartingale in ``J`` with ``K_0 = 1`` and ``E K_k <= 1`` for every distribution of the ``z_ij``
with ``mu >= c``, however the ``theta_i`` differ. (A bet that changed *within* a round could not be used: it could
learn that one problem's ``theta_i < c`` and bet on it; one bet per round is what makes the average, not each
problem, the null.) The order of the sample indices within a problem is arbitrary, so the capital is averaged over
:data:`ORDERS` fixed shuffles of them (an average of valid capitals is valid). Where there is nothing to learn the
spread from (one sample per problem: a single round) the whole capital, and otherwise a share :data:`HEDGE` of it, is
put on a mixture of constant bets ``lambda_g = CAP / (1 - c) / 2^g``, ``g < GRID`` (each a one-round case of the proof;
the product over all ``N = n k`` terms does not depend on the order). ``p = min(1, 1 / K)`` and ``P(p <= alpha) <=
alpha`` by Markov's inequality: **valid in finite samples for independent bounded samples, any success rate per
problem**, no variance estimate or normal approximation. ``tests/test_these_items.py`` checks it by simulation (rates
near 0, near 1, mixed; losses concentrated on a few problems) and its power at 30 problems x 64 samples. The other side,
"shown to lose" (``mu > c``), is the same test of ``E(-z) >= -c``: :func:`p_these_items` with ``-z`` and ``-c``.

This is not a statement about other problems: the ``population`` estimand (:mod:`evals.analysis.noninferiority`)
treats the problems as drawn from a population and needs at least :func:`population_limit` unchanged problems.
"""

from __future__ import annotations

import math

import numpy as np

ORDERS = 8  # fixed shuffles of the sample indices within each problem whose capitals are averaged
CAP = 0.8  # the largest bet, as a share of the one a single term at the far end would ruin
PRIOR_VAR = 0.5  # the pseudo-sample's squared deviation in the running variance of the bets
HEDGE = 0.05  # the share of the capital on the mixture of constant bets (all of it at one sample per problem)
PLAN = 0.7  # the bets' planned alternative, as a share of the margin beyond the bound
GRID = 8  # constant bets CAP / (1 - c) / 2^g, g < GRID
SEED = 2053  # the shuffles' seed: the p-value is a function of the scores and their sample indices
CHUNK = 256  # tests computed at once (memory: CHUNK x ORDERS x n x k floats)


def population_limit(margin: float, alpha: float) -> int:
    """The fewest problems on which any valid test of the ``population`` estimand can show ``loss < margin`` at
    ``alpha`` (``margin`` a fraction in (0, 1)): with losses in [-1, 1] a population whose share ``margin`` of
    problems lose 1 and the rest 0 is on the null, and yields ``n`` unchanged problems with probability
    ``(1 - margin)^n``, so a test of level ``alpha`` cannot reject on all-zero losses unless ``(1 - margin)^n <=
    alpha``: ``n >= log(alpha) / log(1 - margin)`` (29 at 10 points, 59 at 5 for alpha 0.05)."""
    if not 0 < margin < 1:
        return 1
    return math.ceil(math.log(alpha) / math.log(1.0 - margin) - 1e-12)


def _shuffles(n: int, k: int) -> np.ndarray:
    """``(ORDERS, n, k)`` per problem, a fixed permutation of its sample indices (the first is the identity)."""
    out = [np.broadcast_to(np.arange(k), (n, k))]
    for o in range(1, ORDERS):
        out.append(np.argsort(np.random.default_rng([SEED, n, k, o]).random((n, k)), axis=1))
    return np.stack(out)


def p_these_items(z, bound: float, margin: float):
    """One-sided p-values of ``H0: mean_i E z_ij >= bound`` from per-sample terms ``z`` in [-1, 1] of shape ``(..., n,
    k)`` (``n`` problems, ``k`` samples each, one test per leading index; ``bound`` in (-1, 1)): the test by betting in
    rounds of the module docstring, its bets planned at ``PLAN * margin`` beyond ``bound`` (``margin`` > 0: shown safe
    tests ``z = loss`` against ``bound = margin``, shown to lose ``z = -loss`` against ``-margin``). Returns a float for
    one test, else an array of shape ``(...)``."""
    x = np.asarray(z, dtype=float)
    if x.ndim < 2:
        raise ValueError(f"p_these_items: z must be (..., n, k), got shape {x.shape}")
    if not -1 < bound < 1:
        raise ValueError(f"p_these_items: bound must be in (-1, 1), got {bound}")
    lead, (n, k) = x.shape[:-2], x.shape[-2:]
    if n == 0 or k == 0:
        return np.ones(lead) if lead else 1.0
    flat = x.reshape(-1, n, k)
    order = _shuffles(n, k)
    top = CAP / (1.0 - bound)
    grid = top / 2.0 ** np.arange(GRID)
    hedge = 1.0 if k == 1 else HEDGE
    if not margin > 0:
        raise ValueError(f"p_these_items: margin must be > 0, got {margin}")
    out = np.empty(len(flat))
    for s in range(0, len(flat), CHUNK):
        part = flat[s:s + CHUNK]  # (S, n, k)
        rounds = np.take_along_axis(part[:, None], order[None], axis=-1)  # (S, P, n, k)
        per = rounds.sum(axis=2)  # (S, P, k): each round's sum over problems
        per_sq = (rounds * rounds).sum(axis=2)
        seen = n * np.arange(k)  # terms before round j
        before = np.cumsum(per, axis=-1) - per
        before_sq = np.cumsum(per_sq, axis=-1) - per_sq
        mean = before / np.maximum(seen, 1)
        var = (PRIOR_VAR + before_sq - 2 * mean * before + seen * mean * mean) / (seen + 1)  # (S, P, k)
        gap = PLAN * margin
        bet = np.clip(gap / (var + gap * gap), 0.0, top)  # (S, P, k): one bet per round, predictable
        log_plug = np.log1p(bet[:, :, None, :] * (bound - rounds)).sum(axis=(2, 3))  # (S, P)
        plug = np.exp(log_plug).mean(axis=1)
        terms = part.reshape(len(part), 1, -1)  # (S, 1, N)
        mix = np.exp(np.log1p(grid[None, :, None] * (bound - terms)).sum(axis=-1)).mean(axis=1)  # (S,)
        out[s:s + CHUNK] = (1.0 - hedge) * plug + hedge * mix
    p = np.minimum(1.0, 1.0 / out).reshape(lead)
    return p if lead else float(p)
