"""Power figures against statsmodels 0.14.5's ``TTestPower`` (computed in a scratch venv, recorded here as data:
statsmodels is not a dependency), and the variance split of a pilot."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evals.power import items_needed, mde, mde_80, t_power, variance_parts

# TTestPower().power(effect_size=e, nobs=n, alpha=a, alternative=alt), statsmodels 0.14.5
POWER_CASES = [
    (0.5, 30, 0.05, "two-sided", 0.75396471574379),
    (0.2, 100, 0.05, "two-sided", 0.508264806621038),
    (0.3, 50, 0.05, "larger", 0.6725739831252316),
    (0.8, 10, 0.01, "larger", 0.4314760084814815),
    (0.1, 500, 0.05, "two-sided", 0.6071255422735803),
]
# TTestPower().solve_power(effect_size=None, nobs=n, alpha=0.05, power=0.8, alternative="two-sided")
EFFECT_80 = [(30, 0.5292357045238948), (200, 0.19906465946973934)]
# TTestPower().solve_power(effect_size=e, nobs=None, alpha=a, power=0.8, alternative="larger") (fractional n)
NOBS_80 = [(0.25, 0.05, 100.28766216704962), (0.5, 0.05, 26.137503817059283), (0.1, 0.025, 786.8108626075098)]


@pytest.mark.parametrize("effect,n,alpha,alternative,expected", POWER_CASES)
def test_power_equals_statsmodels(effect, n, alpha, alternative, expected):
    assert t_power(effect, n, alpha, alternative) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("n,effect", EFFECT_80)
def test_mde_equals_statsmodels_effect_times_sd(n, effect):
    assert mde(2.5, n) == pytest.approx(effect * 2.5, rel=1e-5)  # statsmodels solves to ~1e-6
    d = np.random.default_rng(0).normal(size=n)
    assert mde_80(d) == pytest.approx(effect * d.std(ddof=1), rel=1e-5)


@pytest.mark.parametrize("effect,alpha,fractional", NOBS_80)
def test_items_needed_is_statsmodels_n_rounded_up(effect, alpha, fractional):
    assert items_needed(sd=10.0, margin=10.0 * effect, alpha=alpha) == math.ceil(fractional)


def test_no_spread_gives_no_mde():
    assert math.isnan(mde_80([0.0, 0.0, 0.0]))
    assert math.isnan(mde_80([1.0]))


def test_variance_parts_split_between_and_within_items():
    """Differences with a known between-item spread (sd 0.2) and per-sample noise (sd 0.5)."""
    rng = np.random.default_rng(0)
    n, k = 4000, 16
    diffs = rng.normal(0, 0.2, size=(n, 1)) + rng.normal(0, 0.5, size=(n, k))
    parts = variance_parts(diffs)
    assert parts.between == pytest.approx(0.04, rel=0.1)
    assert parts.within == pytest.approx(0.25, rel=0.05)
    assert parts.sd(k) ** 2 == pytest.approx(parts.total, rel=1e-9)
