"""The ``these_items`` estimand's test by betting in rounds: its level at the null boundary on a battery of designs
(both estimands), its power on AIME's shape (30 problems x 64 samples, margin 5 points), the three verdicts and the
population limit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evals.analysis.estimands import POPULATION, THESE_ITEMS, compare
from evals.analysis.simulate import battery
from evals.analysis.these_items import p_these_items, population_limit

ALPHA = 0.05


def _bound(sims: int) -> float:
    return ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / sims)


@pytest.mark.parametrize("estimand,n,k,margin", [
    (THESE_ITEMS, 30, 8, 0.05), (THESE_ITEMS, 10, 4, 0.1), (THESE_ITEMS, 30, 1, 0.1), (THESE_ITEMS, 5, 16, 0.3),
    (POPULATION, 30, 4, 0.1), (POPULATION, 10, 2, 0.3),
])
def test_type_one_error_stays_below_alpha_at_every_design_of_the_battery(estimand, n, k, margin):
    sims = 500
    rates = [r for r in battery(estimand, n, k, margin, ALPHA, sims, seed=1) if r.kind.startswith("type-I")]
    assert len(rates) >= 6  # near 0, near 1, mixed, two concentrated losses, the other side (and population's own)
    for r in rates:
        assert r.rate <= _bound(sims), (r.design, r.kind, r.rate)


def test_these_items_shows_5_points_on_30_problems_x_64_samples_with_no_loss():
    sims = 200
    power = {r.design: r.rate for r in battery(THESE_ITEMS, 30, 64, 0.05, ALPHA, sims, seed=2, lose_side=False)
             if r.kind.startswith("power")}
    assert power["uniform 0-100%"] >= 0.8 and power["bimodal (AIME-like)"] >= 0.9, power
    # the population's test cannot: 30 problems are fewer than the 59 any valid test needs at 5 points
    assert population_limit(0.05, ALPHA) == 59 and population_limit(0.10, ALPHA) == 29
    pop = {r.design: r.rate for r in battery(POPULATION, 30, 64, 0.05, ALPHA, 50, seed=2, lose_side=False)
           if r.kind.startswith("power")}
    assert max(pop.values()) <= 0.05, pop


def test_a_bet_that_learns_within_a_round_would_not_be_valid():
    """Why one bet per round: half the problems lose everything, half gain 90 points (mean loss 5 = the margin).
    Betting on each problem from its own past samples, as one fixed-order sequence over the problems would, calls
    it safe almost always; the rounds never do."""
    rng = np.random.default_rng(3)
    n, k, sims, m = 10, 16, 400, 0.05
    lose = np.arange(n) < n // 2
    p, q = np.where(lose, 1.0, 0.05), np.where(lose, 0.0, 0.95)
    z = (rng.random((sims, n, k)) < p[:, None]).astype(float) - (rng.random((sims, n, k)) < q[:, None])
    rounds = (p_these_items(z, m, m) <= ALPHA).mean()
    # per problem, item by item: a predictable plug-in bet within each problem's own samples (the wrong null)
    before = np.cumsum(z, axis=-1) - z
    mean = before / np.maximum(np.arange(k), 1)
    bet = np.clip((m - mean) / (0.25 + (m - mean) ** 2), 0, 0.8 / (1 - m))
    naive = (np.exp(np.log1p(bet * (m - z)).sum(axis=(1, 2))) >= 1 / ALPHA).mean()
    assert rounds <= _bound(sims) and naive > 0.5, (rounds, naive)


def test_three_verdicts_on_one_sample_per_item():
    full = np.full((30, 1), 100.0)
    lost_all, lost_none, lost_some = np.zeros((30, 1)), full.copy(), full.copy()
    lost_some[:12] = 0.0
    for estimand in (THESE_ITEMS, POPULATION):
        everything = compare(full, lost_all, 20.0, ALPHA, 100.0, estimand)
        assert everything.lose and not everything.safe and everything.estimand == estimand
        nothing = compare(full, lost_none, 20.0, ALPHA, 100.0, estimand)
        assert nothing.safe and not nothing.lose
    some = compare(full, lost_some, 20.0, ALPHA, 100.0, THESE_ITEMS)  # Δ -40 on 30 items: neither side shown
    assert not some.safe and not some.lose and some.delta == -40.0


def test_these_items_sees_a_loss_beyond_the_margin_with_many_samples():
    rng = np.random.default_rng(4)
    p = rng.uniform(0.3, 0.9, 30)
    a = (rng.random((30, 64)) < p[:, None]).astype(float)
    b = (rng.random((30, 64)) < (p - 0.25)[:, None]).astype(float)  # a loss of 25 points against a margin of 10
    res = compare(a * 100, b * 100, 10.0, ALPHA, 100.0)
    assert res.lose and res.p_lose < 1e-3 and res.test == "these items: betting in rounds (30 items x 64 samples)"
