"""The budget search's statistics on simulated searches: the family-wise error stays at alpha when every budget
loses exactly the margin, and a known safe budget is found when the loss is zero above it and large below it."""

from __future__ import annotations

import numpy as np
import pytest

from evals.analysis.noninferiority import BOUNDED, fixed_sequence, noninferiority, p_betting, p_discordant, p_items

ALPHA = 0.05
SEARCHES = 4000
K = 5  # budgets per search


def _mc_bound(rate: float, n: int) -> float:
    """alpha plus three Monte-Carlo standard errors."""
    return rate + 3 * np.sqrt(rate * (1 - rate) / n)


def _binary_p(rng, n_items, p10, p01, margin, shape):
    counts = rng.multinomial(n_items, [p10, p01, 1 - p10 - p01], size=shape)  # (..., 3)
    return p_discordant(counts[..., 0], counts[..., 1], n_items, margin, ALPHA)


@pytest.mark.parametrize("n_items", [30, 200])
def test_binary_items_at_the_margin_declare_a_budget_safe_at_most_alpha_of_the_time(n_items):
    """0/1 items: every budget's true loss equals the margin, with discordance from none to much (the nuisance the
    exact test must be valid over); the search declares some budget safe in at most alpha of the searches."""
    rng = np.random.default_rng(1)
    margin = 0.10
    p01 = np.array([0.0, 0.02, 0.05, 0.15, 0.35])  # one discordance level per budget, largest budget first
    p = np.stack([_binary_p(rng, n_items, margin + g, g, margin, SEARCHES) for g in p01], axis=-1)  # (S, K)
    declared = (fixed_sequence(p, ALPHA) > 0).mean()
    assert declared <= _mc_bound(ALPHA, SEARCHES)
    for g, column in zip(p01, p.T):  # and each budget's test alone
        assert (column <= ALPHA).mean() <= _mc_bound(ALPHA, SEARCHES), g


def _sampled(rng, scenario: str, n: int, k: int, margin: float, size) -> tuple[np.ndarray, np.ndarray]:
    """``(*size, n)`` per-item means of ``k`` 0/1 samples for the full cache and the compressed run, items drawn so
    that the expected loss of an item is exactly ``margin``."""
    shape = np.atleast_1d(size)
    if scenario == "all_or_nothing":  # a share `margin` of items always lost, the rest unchanged: often all d = 0
        lost = rng.random((*shape, n)) < margin
        same = (rng.random((*shape, n)) < 0.5).astype(float)
        return np.where(lost, 1.0, same), np.where(lost, 0.0, same)
    if scenario == "uniform":  # every item loses `margin` in probability
        qa = rng.uniform(margin, 1.0, (*shape, n))
        qb = qa - margin
    else:  # skewed: a share of the items loses 5 margins (at most everything), the others nothing
        drop = min(1.0, 5 * margin)
        qa = rng.uniform(drop, 1.0, (*shape, n))
        qb = np.where(rng.random((*shape, n)) < margin / drop, qa - drop, qa)
    return rng.binomial(k, qa) / k, rng.binomial(k, qb) / k


DESIGNS = [(n, k) for n in (2, 3, 5, 10, 20, 30) for k in (1, 2, 4, 8, 16)]


@pytest.mark.parametrize("margin", [0.1, 0.4])
def test_every_design_declares_a_budget_safe_at_most_alpha_of_the_time(margin):
    """2 to 30 items x 1 to 16 samples of 0/1 outcomes, every budget's true loss equal to the margin, items that are
    all-or-nothing (the differences are often all equal), uniform or skewed: the search declares a budget safe in at
    most alpha + 3 Monte-Carlo s.e. of the searches. With every budget at the margin, a search declares one safe
    exactly when its first test rejects, so one test per search is simulated (the test the search runs)."""
    rng = np.random.default_rng(4)
    size = 2000
    for n, k in DESIGNS:
        for scenario in ("all_or_nothing", "uniform", "skewed"):
            a, b = _sampled(rng, scenario, n, k, margin, size)
            p = p_items(a, b, margin, ALPHA, one_sample=k == 1)  # (size,)
            rate = (fixed_sequence(p[:, None], ALPHA) > 0).mean()
            assert rate <= _mc_bound(ALPHA, size), (n, k, scenario, rate)


def test_equal_differences_on_few_items_are_not_evidence():
    """2 items x 2 samples, both runs identical, a 0.5-point margin: nothing shows that a loss of 0.5 points is
    unlikely (the paired t-test saw zero spread and answered p = 0). 3 items x 4 samples losing 15 points against a
    10-point margin: declared safe in at most alpha of the searches (the t-test: 14%)."""
    a = np.array([50.0, 100.0])
    res = noninferiority(a, a.copy(), margin=0.5, alpha=ALPHA, scale=100.0, one_sample=False)
    assert not res.safe and res.p_value > 0.5 and res.test == BOUNDED
    rng = np.random.default_rng(5)
    a, b = _sampled(rng, "all_or_nothing", 3, 4, 0.15, SEARCHES)
    assert (p_items(a, b, 0.10, ALPHA, one_sample=False) <= ALPHA).mean() <= _mc_bound(ALPHA, SEARCHES)


def test_unchanged_items_show_a_loss_below_the_margin_with_enough_items():
    """Per-item means that agree everywhere: a 10-point loss is shown unlikely only from some tens of items (as the
    exact test with no discordant item); sampled items with no true loss are shown safe at a 10-point margin."""
    assert p_betting(np.zeros(30), 0.10) > ALPHA and p_betting(np.zeros(40), 0.10) <= ALPHA
    rng = np.random.default_rng(6)
    q = rng.uniform(0.3, 0.9, size=(400, 120))
    a, b = rng.binomial(8, q) / 8, rng.binomial(8, q) / 8
    assert (p_items(a, b, 0.10, ALPHA, one_sample=False) <= ALPHA).mean() >= 0.8  # 120 items x 8 samples


def test_the_test_by_betting_does_not_depend_on_how_the_items_are_listed_beyond_its_orders():
    """The p-value is a function of the items: the same losses give the same p, and a reversed listing changes it
    little (16 fixed orders are averaged)."""
    loss = np.random.default_rng(7).choice([-0.25, 0.0, 0.125, 0.5], size=80, p=[0.2, 0.5, 0.2, 0.1])
    assert p_betting(loss, 0.2) == p_betting(loss.copy(), 0.2)
    assert p_betting(loss[::-1], 0.2) == pytest.approx(p_betting(loss, 0.2), rel=0.5)


def test_a_known_safe_budget_is_found_in_most_searches():
    """Budgets 64..1024: no loss from 256 up, 30 points lost below; the search answers 256 in most runs and never
    goes below it."""
    rng = np.random.default_rng(3)
    n_items, margin = 300, 0.10
    lose = {64: (0.32, 0.02), 128: (0.32, 0.02)}  # (p10, p01): 30 points lost
    budgets = [1024, 512, 256, 128, 64]  # the order of the sequence: largest first
    p = np.stack([_binary_p(rng, n_items, *lose.get(b, (0.05, 0.05)), margin, SEARCHES) for b in budgets], axis=-1)
    shown = fixed_sequence(p, ALPHA)
    answer = np.array([budgets[s - 1] if s else 0 for s in shown])
    assert (answer == 256).mean() >= 0.8
    assert np.isin(answer, [64, 128]).mean() <= ALPHA  # a budget that loses 30 points declared safe


def test_the_scalar_test_matches_the_vectorised_ones():
    a = np.array([1, 1, 0, 1, 0, 1, 1, 0, 1, 1] * 5, dtype=float) * 100
    b = a.copy()
    b[:3] = 100 - b[:3]
    res = noninferiority(a, b, margin=30.0, alpha=ALPHA, scale=100.0)
    n10 = int(((a == 100) & (b == 0)).sum())
    n01 = int(((a == 0) & (b == 100)).sum())
    assert res.test.startswith("exact") and res.p_value == pytest.approx(float(p_discordant(n10, n01, 50, 0.3, ALPHA)))
    assert noninferiority(a, b, margin=30.0, alpha=ALPHA, scale=100.0, one_sample=False).test == BOUNDED
    half = np.where(np.arange(400) % 2 == 0, 50.0, 100.0)
    res = noninferiority(half, half - 1.0, margin=5.0, alpha=ALPHA, scale=100.0)
    assert res.test == BOUNDED and res.safe and res.delta == pytest.approx(-1.0)
    assert res.p_value == pytest.approx(float(p_betting((half - (half - 1.0)) / 100.0, 0.05)))
    wide = noninferiority(half * 3, half * 3 - 1.0, margin=5.0, alpha=ALPHA, scale=100.0)  # beyond the scale
    assert wide.test.startswith("paired t")


def test_no_discordant_item_proves_a_small_loss_only_with_enough_items():
    """All items agree: the loss is shown below 10 points only when so many items agree that a 10-point loss would
    have shown discordant items (Clopper-Pearson bound on the discordance under gamma = alpha / 10)."""
    assert p_discordant(0, 0, 30, 0.10, ALPHA) > ALPHA
    assert p_discordant(0, 0, 60, 0.10, ALPHA) <= ALPHA


def test_fixed_sequence_stops_at_the_first_failure():
    assert fixed_sequence([0.01, 0.2, 0.001], ALPHA) == 1
    assert fixed_sequence([0.01, 0.04], ALPHA) == 2
    assert fixed_sequence([], ALPHA) == 0
    with pytest.raises(ValueError, match="max_loss"):
        noninferiority([1.0], [1.0], margin=0.0, alpha=ALPHA)
