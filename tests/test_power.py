"""Power figures against statsmodels 0.14.5's ``TTestPower`` (computed in a scratch venv, recorded here as data:
statsmodels is not a dependency), and the variance split of a pilot."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evals.analysis.noninferiority import noninferiority
from evals.analysis.power import exact_items_needed, exact_power, items_needed, mde, mde_80, t_power, variance_parts

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


def _run(root, name, method, budget, correct, task="aime24", metric="pass@1"):
    """A run directory as evals.run writes it, reduced to what the report and evals.power read: ``correct`` is
    ``(items, samples)``."""
    import json

    import pandas as pd

    run_dir = root / name
    run_dir.mkdir()
    n, k = correct.shape
    value = 100.0 * correct.mean()
    pd.DataFrame([{"model": "m", "task": task, "method": method, "prompt_budget": budget, "recent": None,
                   "metric": metric, "group": "all", "value": value, "stderr": 1.0, "ci_lo": value - 5,
                   "ci_hi": value + 5, "unit": "%", "n": n, "run_id": name}]).to_csv(run_dir / "summary.csv",
                                                                                       index=False)
    pd.DataFrame({"item_id": np.repeat([f"i{j}" for j in range(n)], k), "sample_idx": np.tile(np.arange(k), n),
                  "correct": correct.reshape(-1).astype(bool)}).to_csv(run_dir / "samples.csv", index=False)
    identity = {"model": "m", "task": task, "compression": {"method": method, "prompt_budget": budget}}
    meta = {"identity": identity, "fingerprint": name, "config": {"task": {"name": task, "plan": {"n_items": 30}}}}
    (run_dir / "meta.json").write_text(json.dumps(meta))


def test_power_command_sizes_a_benchmark_from_a_pilot(tmp_path, capsys):
    from evals.power import main
    from evals.report.power import power_table

    rng = np.random.default_rng(0)
    q = rng.uniform(0.1, 0.9, size=(30, 1))
    _run(tmp_path, "full", "none", None, rng.random((30, 4)) < q)
    _run(tmp_path, "snap", "snapkv", 1024, rng.random((30, 4)) < q - 0.05)
    rows = power_table(tmp_path, margin=2.0, true_loss=0.0, estimand="population")
    assert [r["samples"] for r in rows] == [1, 2, 4, 8, 16, 32, 64] and {r["pilot_samples"] for r in rows} == {4}
    needed = [r["items_needed"] for r in rows]
    assert needed == sorted(needed, reverse=True) and needed[0] > 30  # more samples per item: fewer items
    assert main([str(tmp_path), "power.max_loss=2", "power.true_loss=0"]) == 0
    out = capsys.readouterr().out
    assert "aime24 has 30 items, fewer than the" in out
    assert "aime24: 30 items are fewer than the population limit 59" not in out  # 2 points of 100: a limit of 149
    assert "aime24: 30 items are fewer than the population limit 149" in out
    # these_items: the benchmark's 30 items at the pilot's per-item rates, power growing with the samples
    these = power_table(tmp_path, margin=20.0, estimand="these_items")
    assert [r["samples"] for r in these] == [1, 2, 4, 8, 16, 32, 64] and {r["items_needed"] for r in these} == {30}
    assert these[-1]["power"] > 0.8 > these[0]["power"]
    assert main([str(tmp_path), "power.max_loss=0"]) == 2
    assert capsys.readouterr().err == "error: power.max_loss: out of range, got 0\n"


@pytest.mark.parametrize("args, line", [
    (["--max-loss", "2"], "error: --max-loss: evals.power takes key=value arguments, as evals.search does: "
                          "power.max_loss=VALUE"),
    (["power.max_los=2"], "error: power.max_los: no such power knob (power.max_loss, power.alpha, power.power, "
                          "power.true_loss, power.items, power.samples, power.sims, power.estimand, "
                          "power.simulate)"),
    (["power.max_loss=2", "power.estimand=both"], "error: power.estimand: these_items or population, got 'both'"),
    (["power.max_loss=2", "power.items=30"], "error: power.items/power.samples: only with power.simulate=true "
                                             "(a pilot sizes them itself)"),
    (["power.alpha=x", "power.max_loss=2"], "error: power.alpha: expected a number, got 'x'"),
    ([], "error: power.max_loss: required (the margin, in headline points), e.g. power.max_loss=2"),
])
def test_power_takes_key_value_arguments_and_refuses_the_old_flags_in_one_line(tmp_path, capsys, args, line):
    from evals.power import main

    assert main([str(tmp_path), *args]) == 2
    assert capsys.readouterr().err.splitlines() == [line]


@pytest.mark.parametrize("n,p10,p01,margin", [(5, 0.1, 0.05, 0.5), (6, 0.3, 0.2, 0.6), (4, 0.0, 0.0, 0.8)])
def test_exact_power_is_the_sum_over_every_outcome_of_the_items(n, p10, p01, margin):
    """Brute force: every sequence of n items (each concordant, lost or gained), its probability, and the scalar
    test on the per-item scores it gives."""
    import itertools

    total = 0.0
    for outcome in itertools.product((0, 1, 2), repeat=n):  # 0 concordant, 1 lost, 2 gained
        a = np.array([1.0 if o == 1 else 0.0 for o in outcome])
        b = np.array([1.0 if o == 2 else 0.0 for o in outcome])
        prob = np.prod([(1 - p10 - p01, p10, p01)[o] for o in outcome])
        if noninferiority(a, b, margin, 0.05).safe:
            total += prob
    assert exact_power(n, p10, p01, margin) == pytest.approx(total, abs=1e-12)


def test_exact_items_needed_with_no_discordance_stays_within_the_clopper_pearson_count_and_alpha():
    """No discordant item expected: the exact test reaches 80% power by n = 104 at the latest (log(0.005) /
    log(0.95) = 103.3: where the bound on the discordance alone rules a 5-point loss out), and at the n it reports
    its level at the null's edge (a 5-point loss, no gain) stays within alpha."""
    n = exact_items_needed(0.0, 0.0, 0.05)
    assert n is not None and n <= 104
    assert exact_power(n, 0.0, 0.0, 0.05) >= 0.8 > exact_power(n - 1, 0.0, 0.0, 0.05)
    assert exact_power(n, 0.05, 0.0, 0.05) <= 0.05


def test_power_says_when_the_pilot_already_shows_a_loss_and_that_needle_is_generated(tmp_path, capsys):
    from evals.power import main

    full = np.ones((30, 1), dtype=bool)
    lost = full.copy()
    lost[:24] = False  # 80 points lost on 30 items: beyond a margin of 20 on these items
    _run(tmp_path, "full", "none", None, full, task="needle", metric="accuracy")
    _run(tmp_path, "snap", "snapkv", 64, lost, task="needle", metric="accuracy")
    assert main([str(tmp_path), "power.max_loss=20"]) == 0
    out = capsys.readouterr().out
    assert "snapkv @ 64: the pilot already shows a loss beyond 20 on its items (Δ -80; shown to lose)" in out
    assert "snapkv @ 64: assumed loss 80 ≥ the margin 20: no number of items shows it safe" in out  # the pilot's
    assert "generated" in out and "needle has" not in out


def test_the_simulation_command_prints_type_one_error_and_power(capsys):
    from evals.power import main

    assert main(["power.simulate=true", "power.items=10", "power.samples=4", "power.max_loss=30",
                 "power.estimand=these_items", "power.sims=200"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("these_items: 10 items x 4 samples, margin 30 points, alpha 0.05, 200 simulated searches per "
                      "design")
    assert sum("type-I (shown safe at loss = margin)" in line for line in out) == 5
    assert sum("power (shown safe at no loss)" in line for line in out) == 3
    assert main(["power.simulate=true", "power.max_loss=5"]) == 2
    assert capsys.readouterr().err == "error: power.items: required with power.simulate=true, e.g. power.items=30\n"
