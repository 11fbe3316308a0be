"""Simulated level and power of the search's tests for both estimands (``python -m evals.power power.simulate=true``,
``tests/test_these_items.py``).

A design gives each of ``n`` problems a full-cache success rate ``p_i`` and a compressed one ``q_i``; every sample is
a Bernoulli draw (independent arms: the least favourable pairing for the spread). **At the null boundary** the mean
loss ``mean(p - q)`` equals the margin ``m``: for ``these_items`` the rates are drawn once and fixed (only samples
vary), exactly at the boundary; for ``population`` every simulated search draws new problems from the design (its
expected loss is ``m``). The designs: rates near 0, near 1, mixed; the loss spread evenly or concentrated on a few
problems (some losing everything while the rest gain); for ``population`` also a share ``m`` of problems losing
everything (the worst case of the population limit). **Power** is at no loss (``p = q``) for rates uniform in 0-1, in
30-90% and a bimodal AIME-like set (a third near 0, a third near 1, a third spread).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from evals.analysis.noninferiority import p_items
from evals.analysis.these_items import p_these_items

ESTIMANDS = ("these_items", "population")
Rates = Callable[[np.random.Generator, int, float], tuple[np.ndarray, np.ndarray]]


def _near0(rng, n, m):
    p = rng.uniform(m, m + 0.1, n)
    return p, p - m


def _near1(rng, n, m):
    q = rng.uniform(0.9 - m, 1.0 - m, n)
    return q + m, q


def _mixed(rng, n, m):
    p = rng.uniform(m, 1.0, n)
    return p, p - m


def _few_lose_half(rng, n, m):
    """The whole loss on ``h`` problems (each losing ``m n / h`` <= 1 around a rate of 50%), none elsewhere."""
    r = rng.uniform(0.0, 1.0, n)
    p, q = r.copy(), r.copy()
    h = min(n, max(1, math.ceil(m * n / 0.5)))
    d = m * n / h
    p[:h], q[:h] = 0.5 + d / 2, 0.5 - d / 2
    return p, q


def _few_lose_all(rng, n, m):
    """``ceil(m n)`` problems lose everything (1 -> 0) and the others gain to bring the mean back to ``m``."""
    h = min(n, math.ceil(m * n))
    g = (h - m * n) / (n - h) if n > h else 0.0
    p, q = np.full(n, 0.5 - g / 2), np.full(n, 0.5 + g / 2)
    p[:h], q[:h] = 1.0, 0.0
    return p, q


def _share_lose_all(rng, n, m):
    """Population only: each problem loses everything with probability ``m``, else unchanged at a uniform rate."""
    r = rng.uniform(0.0, 1.0, n)
    lose = rng.random(n) < m
    return np.where(lose, 1.0, r), np.where(lose, 0.0, r)


NULL_DESIGNS: dict[str, Rates] = {"near 0": _near0, "near 1": _near1, "mixed": _mixed,
                                  "few lose half": _few_lose_half, "few lose all, rest gain": _few_lose_all}
POPULATION_ONLY: dict[str, Rates] = {"a share m lose all": _share_lose_all}
POWER_DESIGNS: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "uniform 0-100%": lambda rng, n: rng.uniform(0.0, 1.0, n),
    "uniform 30-90%": lambda rng, n: rng.uniform(0.3, 0.9, n),
    "bimodal (AIME-like)": lambda rng, n: np.concatenate([rng.uniform(0.0, 0.1, n // 3), rng.uniform(0.9, 1.0, n // 3),
                                                          rng.uniform(0.0, 1.0, n - 2 * (n // 3))]),
}


@dataclass(frozen=True)
class Rate:
    """One design's simulated rate of rejections (``hits / sims``) and its Monte-Carlo standard error."""

    design: str
    kind: str  # "type-I (shown safe at loss = margin)", "type-I (shown to lose at loss = margin)" or "power"
    rate: float
    sims: int

    @property
    def se(self) -> float:
        return math.sqrt(max(self.rate * (1 - self.rate), 1e-12) / self.sims)


def _draw(rng: np.random.Generator, p: np.ndarray, q: np.ndarray, sims: int, k: int) -> np.ndarray:
    """``(sims, n, k)`` per-sample losses ``X - Y`` of Bernoulli samples; ``p, q``: ``(n,)`` or ``(sims, n)``."""
    p, q = np.broadcast_to(p, (sims, p.shape[-1])), np.broadcast_to(q, (sims, q.shape[-1]))
    x = rng.random((sims, p.shape[1], k)) < p[..., None]
    y = rng.random((sims, q.shape[1], k)) < q[..., None]
    return x.astype(float) - y


def p_values(loss: np.ndarray, margin: float, alpha: float, estimand: str, lose: bool = False) -> np.ndarray:
    """The search's one-sided p-values for per-sample losses ``loss`` ``(sims, n, k)`` (fractions): ``shown safe``
    (``loss < margin``) or, with ``lose``, ``shown to lose`` (``loss > margin``)."""
    if estimand == "these_items":
        return p_these_items(-loss if lose else loss, -margin if lose else margin, margin)
    if estimand != "population":
        raise ValueError(f"power.estimand: these_items or population, got {estimand!r}")
    from evals.analysis.noninferiority import p_betting

    means = loss.mean(axis=-1)  # (sims, n): per-item mean losses
    if lose:
        return p_betting(-means, -margin)
    k = loss.shape[-1]
    full = np.clip(means, 0, None)  # per-item scores reproducing the losses for the exact/betting dispatch
    return p_items(full, full - means, margin, alpha, one_sample=k == 1)


def battery(estimand: str, n: int, k: int, margin: float, alpha: float, sims: int, seed: int = 0,
            lose_side: bool = True) -> list[Rate]:
    """Type-I error at the null boundary for every design (and, with ``lose_side``, of "shown to lose" at the
    boundary from the other side, the mixed design), then power at no loss; ``margin`` a fraction."""
    rng = np.random.default_rng([seed, n, k, int(round(margin * 1e6))])
    out = []
    designs = dict(NULL_DESIGNS) | (POPULATION_ONLY if estimand == "population" else {})
    for name, rates in designs.items():
        if estimand == "these_items":
            p, q = rates(rng, n, margin)
        else:
            pairs = [rates(rng, n, margin) for _ in range(sims)]
            p, q = np.stack([a for a, _ in pairs]), np.stack([b for _, b in pairs])
        hits = p_values(_draw(rng, p, q, sims, k), margin, alpha, estimand) <= alpha
        out.append(Rate(name, "type-I (shown safe at loss = margin)", float(hits.mean()), sims))
    if lose_side:
        p, q = _mixed(rng, n, margin)
        hits = p_values(_draw(rng, p, q, sims, k), margin, alpha, estimand, lose=True) <= alpha
        out.append(Rate("mixed", "type-I (shown to lose at loss = margin)", float(hits.mean()), sims))
    for name, draw in POWER_DESIGNS.items():
        r = draw(rng, n) if estimand == "these_items" else np.stack([draw(rng, n) for _ in range(sims)])
        hits = p_values(_draw(rng, r, r, sims, k), margin, alpha, estimand) <= alpha
        out.append(Rate(name, "power (shown safe at no loss)", float(hits.mean()), sims))
    return out
