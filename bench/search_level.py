"""The level of the budget search's test on simulated designs, beyond what the test suite can afford.

``python -m bench.search_level [--searches 10000] [--margins 0.05,0.1,0.3]``: for every design of 2..30 items x 1, 2,
4, 8, 16 samples of 0/1 outcomes, with every item's expected loss equal to the margin (items all-or-nothing, uniform,
or skewed: a fifth-or-so of the items lose five margins), the share of simulated tests that call the budget safe,
with the search's test (:func:`evals.analysis.noninferiority.p_items`) beside a paired t-test; then a loss above the
margin (3 items x 4 samples, a true loss of 15 points against a 10-point margin). One line per worst case; the promise
is a rate at most alpha + 3 Monte-Carlo standard errors. Then the power: the share of searches that show a 10-point
margin when nothing is lost (items' pass rates uniform in 30..90%), by items and samples per item.
"""

from __future__ import annotations

import argparse
import logging
import math

import numpy as np

from evals.analysis.noninferiority import p_items, p_paired_t

log = logging.getLogger("bench.search_level")
ALPHA = 0.05
SAMPLES = (1, 2, 4, 8, 16)
SCENARIOS = ("all_or_nothing", "uniform", "skewed")


def sampled(rng, scenario: str, n: int, k: int, loss: float, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(size, n)`` per-item means of ``k`` 0/1 samples, full cache and compressed, expected item loss ``loss``."""
    if scenario == "all_or_nothing":
        lost = rng.random((size, n)) < loss
        same = (rng.random((size, n)) < 0.5).astype(float)
        return np.where(lost, 1.0, same), np.where(lost, 0.0, same)
    if scenario == "uniform":
        qa = rng.uniform(loss, 1.0, (size, n))
        qb = qa - loss
    else:
        drop = min(1.0, 5 * loss)
        qa = rng.uniform(drop, 1.0, (size, n))
        qb = np.where(rng.random((size, n)) < loss / drop, qa - drop, qa)
    return rng.binomial(k, qa) / k, rng.binomial(k, qb) / k


def rates(rng, scenario: str, n: int, k: int, loss: float, margin: float, size: int) -> tuple[float, float]:
    """``(ours, paired t)``: the share of ``size`` simulated tests that call the budget safe."""
    a, b = sampled(rng, scenario, n, k, loss, size)
    ours = (p_items(a, b, margin, ALPHA, one_sample=k == 1) <= ALPHA).mean()
    d = b - a
    t = (p_paired_t(d.mean(1), d.std(1, ddof=1), n, margin) <= ALPHA) | (
        (d.std(1, ddof=1) == 0) & (d.mean(1) + margin > 0))  # textbook t: zero spread, p = 0 (p_paired_t: 1)
    return float(ours), float(t.mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=10000)
    parser.add_argument("--margins", default="0.05,0.1,0.3", help="the level's margins (empty: the power only)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rng = np.random.default_rng(0)
    size = args.searches
    bound = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / size)
    for margin in (float(m) for m in args.margins.split(",") if m):
        worst, worst_t = (0.0, None), (0.0, None)
        for n in range(2, 31):
            for k in SAMPLES:
                for scenario in SCENARIOS:
                    ours, t = rates(rng, scenario, n, k, margin, margin, size)
                    worst = max(worst, (ours, (n, k, scenario)), key=lambda w: w[0])
                    worst_t = max(worst_t, (t, (n, k, scenario)), key=lambda w: w[0])
        log.info("margin %g: worst false-safe rate %.4f at %s (bound %.4f); paired t %.4f at %s", margin,
                 worst[0], worst[1], bound, worst_t[0], worst_t[1])
    ours, t = rates(rng, "all_or_nothing", 3, 4, 0.15, 0.10, size)
    log.info("3 items x 4 samples, true loss 15 points, margin 10: safe in %.4f (paired t %.4f)", ours, t)
    for k in (4, 8, 64):
        for n in (30, 60, 120):
            q = rng.uniform(0.3, 0.9, (2000, n))
            a, b = rng.binomial(k, q) / k, rng.binomial(k, q) / k
            ours = (p_items(a, b, 0.10, ALPHA, one_sample=False) <= ALPHA).mean()
            d = b - a
            t = (p_paired_t(d.mean(1), d.std(1, ddof=1), n, 0.10) <= ALPHA).mean()
            log.info("power, no loss, margin 10: %d items x %d samples: %.2f (paired t %.2f)", n, k, ours, t)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
