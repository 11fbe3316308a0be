"""evals.analysis.stats against values computed by hand: standard errors, bootstrap intervals, paired deltas."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from evals.analysis.stats import bootstrap, bootstrap_mean, mean_stderr, paired_bootstrap, sign_flip_p, wilson


def test_mean_stderr_is_the_sample_std_over_root_n():
    # 1, 0, 1, 1: mean 3/4, sample variance ((1/4)^2 * 3 + (3/4)^2) / 3 = 1/4, stderr sqrt(1/4 / 4) = 1/4
    assert mean_stderr([1, 0, 1, 1]) == pytest.approx(0.25)
    assert math.isnan(mean_stderr([1.0]))


def test_bootstrap_of_two_items_matches_the_exact_resampling_distribution():
    # items scored 0 and 1: a resample's mean is 0, 1/2 or 1 with probabilities 1/4, 1/2, 1/4,
    # so the 95% interval is [0, 1] and the replicates' std is sqrt(1/8)
    est = bootstrap_mean([0.0, 1.0], iters=20000, seed=3)
    assert est.value == 0.5 and est.n == 2
    assert (est.ci_lo, est.ci_hi) == (0.0, 1.0)
    assert est.stderr == pytest.approx(mean_stderr([0.0, 1.0])) == pytest.approx(0.5)
    boot = bootstrap(lambda idx: np.array([0.0, 1.0])[idx].mean(), 2, iters=20000, seed=3)
    assert boot.stderr == pytest.approx(math.sqrt(1 / 8), abs=0.01)


def test_bootstrap_is_deterministic_given_the_seed_and_a_constant_set_has_no_spread():
    values = [1, 0, 0, 1, 1, 0, 1, 1]
    assert bootstrap_mean(values, seed=7) == bootstrap_mean(values, seed=7)
    const = bootstrap_mean([1.0] * 6)
    assert (const.value, const.stderr, const.ci_lo, const.ci_hi) == (1.0, 0.0, 1.0, 1.0)


def test_paired_bootstrap_matches_hand_computed_delta_interval_and_p_value():
    # differences 0 and -1: the resampled mean difference is 0, -1/2, -1 with probabilities 1/4, 1/2, 1/4, so the
    # interval is [-1, 0]; every sign pattern of (0, -1) has |mean| = 1/2 = the observed one, so p = 1
    res = paired_bootstrap([1.0, 1.0], [1.0, 0.0], iters=40000, seed=1)
    assert res.delta == -0.5 and res.n == 2
    assert (res.ci_lo, res.ci_hi) == (-1.0, 0.0)
    assert res.p_value == 1.0
    assert res.stderr == pytest.approx(0.5)  # std of (0, -1) with ddof=1 is sqrt(1/2); over sqrt(2)


def test_paired_bootstrap_identical_runs_have_p_one_and_a_consistent_loss_has_p_zero():
    same = paired_bootstrap([1, 0, 1, 0], [1, 0, 1, 0])
    assert (same.delta, same.p_value) == (0.0, 1.0)
    loss = paired_bootstrap([1, 1, 1, 1, 1], [0, 0, 0, 0, 0])
    # 5 of 5 lost: only the all-minus and all-plus of the 32 sign patterns are as extreme -> p = 2/32
    assert (loss.delta, loss.p_value) == (-1.0, 2 / 32)
    # every paired difference equal: a bootstrap of them has zero width, which is not an interval: none is given
    for res in (same, loss):
        assert math.isnan(res.ci_lo) and math.isnan(res.ci_hi)
    mixed = paired_bootstrap([1, 1, 1, 0, 0], [0, 0, 1, 0, 1])
    assert mixed.ci_lo < mixed.delta < mixed.ci_hi
    # 3 lost, 1 unchanged, 1 won of 5: |mean| >= 2/5 for the patterns with signs giving sum of magnitude >= 2
    d = [-1, -1, -1, 0, 1]
    by_hand = sum(abs(sum(s * x for s, x in zip(signs, d))) >= 2 for signs in itertools.product([1, -1], repeat=5))
    assert sign_flip_p(d) == by_hand / 32


def test_sign_flip_p_beyond_the_exact_size_is_a_monte_carlo_estimate():
    d = [-1.0] * 10 + [0.0] * 10  # exact: 2 / 2^10 sign patterns of the non-zero ones are as extreme
    assert sign_flip_p(d, iters=20000, seed=0) == pytest.approx(2 / 1024, abs=0.001)


def test_paired_bootstrap_refuses_unpaired_inputs():
    with pytest.raises(ValueError, match="same items"):
        paired_bootstrap([1, 0], [1])


def test_wilson_is_right_at_zero_and_at_n():
    lo, hi = wilson(0, 3)
    assert lo == 0.0 and 0.5 < hi < 0.6  # 0 of 3 is not "exactly 0": up to 56 % is consistent with it
    lo, hi = wilson(3, 3)
    assert hi == 1.0 and 0.4 < lo < 0.5
    lo, hi = wilson(5, 10)
    assert lo == pytest.approx(1 - hi) and lo == pytest.approx(0.2366, abs=1e-4)
