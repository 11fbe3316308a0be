"""The budget search's statistics on simulated searches: the family-wise error stays at alpha when every budget
loses exactly the margin, and a known safe budget is found when the loss is zero above it and large below it."""

from __future__ import annotations

import numpy as np
import pytest

from evals.noninferiority import fixed_sequence, noninferiority, p_discordant, p_paired_t

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


def test_sampled_items_at_the_margin_declare_a_budget_safe_at_most_alpha_of_the_time():
    """pass@1 over 8 samples per item (per-item means, the paired t-test): true loss = margin at every budget."""
    rng = np.random.default_rng(2)
    n_items, k, margin = 60, 8, 0.10
    q = rng.uniform(0.3, 0.9, size=(SEARCHES, K, n_items))  # each search draws its items
    a = rng.binomial(k, q) / k
    b = rng.binomial(k, q - margin) / k  # every item loses exactly the margin in expectation
    d = b - a
    p = p_paired_t(d.mean(-1), d.std(-1, ddof=1), n_items, margin)
    assert (fixed_sequence(p, ALPHA) > 0).mean() <= _mc_bound(ALPHA, SEARCHES)


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
    assert noninferiority(a, b, margin=30.0, alpha=ALPHA, scale=100.0, one_sample=False).test == "paired t"
    half = np.where(np.arange(50) % 2 == 0, 50.0, 100.0)
    res = noninferiority(half, half - 1.0, margin=2.0, alpha=ALPHA, scale=100.0)
    assert res.test == "paired t" and res.safe and res.delta == pytest.approx(-1.0)


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
