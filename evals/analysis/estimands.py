"""The search's two estimands and its three verdicts on one budget.

- ``these_items`` (the default): the loss on *these* problems, only the samples random: the mean over the benchmark's
  problems of each problem's expected loss (what an AIME table reports: the mean over the 30 problems of 64 samples
  each). Tested on the per-sample differences by betting in rounds (:mod:`evals.analysis.these_items`).
- ``population``: the problems a draw from a population of problems, the loss its expectation: the test on per-item
  means of :mod:`evals.analysis.noninferiority` (exact on discordant 0/1 items, by betting otherwise). It needs at
  least :func:`evals.analysis.these_items.population_limit` unchanged problems, whatever the samples.

Each budget gets one of three verdicts, from two one-sided tests at ``alpha`` of disjoint nulls (so each verdict is
wrong with probability at most ``alpha``): **shown safe** (``loss >= margin`` rejected), **shown to lose**
(``loss <= margin`` rejected: the other side of the interval beyond the margin), or **not shown**.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from evals.analysis.noninferiority import PAIRED_T, NonInferiority, noninferiority, p_betting, p_paired_t
from evals.analysis.these_items import p_these_items

THESE_ITEMS, POPULATION = "these_items", "population"
ESTIMANDS = (THESE_ITEMS, POPULATION)
ROUNDS = "these items: betting in rounds"
BETTING_LOSE = "bounded items (test by betting)"


def check_estimand(value: str, knob: str) -> str:
    """``value`` if it names an estimand, else one line naming ``knob``."""
    if value not in ESTIMANDS:
        raise ValueError(f"{knob}: {' or '.join(ESTIMANDS)}, got {value!r}")
    return value


def compare(a: np.ndarray, b: np.ndarray, margin: float, alpha: float, scale: float = 1.0,
            estimand: str = THESE_ITEMS, one_sample: bool | None = None) -> NonInferiority:
    """Both one-sided tests of a budget: per-sample scores ``a`` (full cache) and ``b`` (compressed), shape
    ``(n, k)`` (``n`` items, the same ``k`` sample indices for every item, paired by index), in the unit of
    ``margin``; ``scale`` a solved sample's score. ``safe``: ``loss < margin`` shown; ``lose``: ``loss > margin``
    shown; ``delta`` is the mean of ``b - a``. ``population`` tests the item means (``one_sample``: each item one
    0/1 verdict, for the exact test; default ``k == 1``)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f"compare: a and b must be (items, samples) of the same shape, got {x.shape} and {y.shape}")
    check_estimand(estimand, "search.estimand")
    n, k = x.shape
    if estimand == POPULATION:
        one = k == 1 if one_sample is None else bool(one_sample)
        safe = noninferiority(x.mean(1), y.mean(1), margin, alpha, scale, one_sample=one)
        loss = (x.mean(1) - y.mean(1)) / scale
        if safe.test == PAIRED_T:
            p_lose = float(p_paired_t(loss.mean() * scale, loss.std(ddof=1) * scale if n > 1 else 0.0, n, -margin))
        else:
            p_lose = float(p_betting(-loss, -margin / scale)) if n and margin < scale else 1.0
        return dataclasses.replace(safe, lose=p_lose <= alpha, p_lose=p_lose, estimand=POPULATION)
    if not margin > 0:
        raise ValueError(f"search.max_loss: must be > 0, got {margin}")
    delta = float((y - x).mean()) if x.size else math.nan
    if x.size == 0:
        return NonInferiority(delta, 1.0, False, n, ROUNDS, estimand=THESE_ITEMS)
    bounded = bool(np.all((x >= 0) & (x <= scale) & (y >= 0) & (y <= scale)))
    if not bounded:  # scores without bounds: the paired t-test on the item means, asymptotic
        d = (y - x).mean(1)
        sd = float(d.std(ddof=1)) if n > 1 else 0.0
        p = float(p_paired_t(d.mean(), sd, n, margin))
        p_lose = float(p_paired_t(-d.mean(), sd, n, -margin))
        return NonInferiority(delta, p, p <= alpha, n, PAIRED_T, lose=p_lose <= alpha, p_lose=p_lose,
                              estimand=THESE_ITEMS)
    z, m = (x - y) / scale, margin / scale
    if m >= 1:  # a margin of the whole scale: not tested (p 1), as the population's test does
        p, p_lose = 1.0, 1.0
    else:
        p, p_lose = float(p_these_items(z, m, m)), float(p_these_items(-z, -m, m))
    return NonInferiority(delta, p, p <= alpha, n, f"{ROUNDS} ({n} items x {k} samples)", lose=p_lose <= alpha,
                          p_lose=p_lose, estimand=THESE_ITEMS)
