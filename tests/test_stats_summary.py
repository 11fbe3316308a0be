"""evals.analysis.summary's uncertainty columns on a toy task with known per-item outcomes: item-level bootstrap
(samples stay with their item), percent units, and lm-eval's own standard errors moved into the stderr column."""

from __future__ import annotations

import math
import types

import pandas as pd
import pytest
from omegaconf import OmegaConf

from evals.analysis.stats import wilson
from evals.analysis.summary import SummaryContext, fold_own_stderr, with_uncertainty
from tasks import terms

CFG = SummaryContext(task_cfg=OmegaConf.create({}))


def toy_task(unit: str, with_terms: bool = True) -> types.ModuleType:
    """A task whose one metric is the mean over items of the per-item mean of ``correct`` (as pass@1), with its
    ``item_terms`` (the fast bootstrap) unless ``with_terms`` is False (``summarize`` on every resample)."""
    module = types.ModuleType(f"toy_{unit}_{with_terms}")
    module.RATE_UNIT = unit
    scale = 1.0 if unit == "fraction" else 100.0

    def summarize(rows: pd.DataFrame, *, cfg=None) -> pd.DataFrame:
        per_item = rows.groupby("item_id")["correct"].mean()
        return pd.DataFrame([{"metric": "pass@1", "group": "all", "value": scale * per_item.mean(),
                              "n": len(per_item)}])

    module.summarize = summarize
    if with_terms:
        module.item_terms = lambda rows, *, cfg=None: terms.item_mean(
            scale * rows.groupby("item_id")["correct"].mean(), "pass@1")
    return module


def rows(per_item: dict[str, list[int]]) -> pd.DataFrame:
    return pd.DataFrame([{"item_id": item, "sample_idx": i, "correct": c, "gen_tokens": 10 * (c + 1),
                          "finish_reason": "length" if c == 0 else "stop", "truncated": False}
                         for item, samples in per_item.items() for i, c in enumerate(samples)])


def metric(frame: pd.DataFrame, name: str) -> pd.Series:
    [row] = [r for _, r in frame.iterrows() if r["metric"] == name]
    return row


@pytest.mark.parametrize("with_terms", [True, False])
def test_resamples_items_with_their_samples_and_reports_percent(with_terms):
    # items A (both samples right) and B (both wrong): a resample of 2 items has mean 0, 50 or 100 with probabilities
    # 1/4, 1/2, 1/4, so the bootstrap stderr is sqrt(1/8) * 100 = 35.4 and the interval [0, 100]; resampling the
    # 4 samples instead would give sqrt(1/16) * 100 = 25
    iters = 1000 if with_terms else 300
    out = with_uncertainty(toy_task("fraction", with_terms), rows({"A": [1, 1], "B": [0, 0]}), CFG, iters=iters)
    p = metric(out, "pass@1")
    assert (p["value"], p["unit"], p["n"]) == (50.0, "%", 2)  # the fraction 0.5 scaled to percent
    assert p["stderr"] == pytest.approx(100 * math.sqrt(1 / 8), abs=3.0 if with_terms else 5.0)
    if with_terms:  # each item scores 0 or 100: a proportion of 2 items, with its Wilson interval
        assert (p["ci_lo"], p["ci_hi"]) == pytest.approx(tuple(100 * b for b in wilson(1, 2)))
        assert p["ci_method"] == "wilson"
    else:  # no item terms: the items' values are unknown here; on 2 items (< SMALL_N) the percentile bootstrap is
        # not valid, so the bounded Wilson interval of the mean over 2 items stands (conservative for items in [0, 1])
        assert (p["ci_lo"], p["ci_hi"]) == pytest.approx(tuple(100 * b for b in wilson(1, 2)))
        assert p["ci_method"] == "wilson_bounded"
    cut = metric(out, "share_gen_truncated")
    assert (cut["value"], cut["unit"], cut["n"]) == (50.0, "%", 4)
    tokens = metric(out, "mean_gen_tokens")
    assert (tokens["value"], tokens["unit"]) == (15.0, "tokens")
    assert metric(out, "share_prompt_truncated")["value"] == 0.0
    assert "share_think_unclosed" not in set(out["metric"])  # not a thinking model


@pytest.mark.parametrize("with_terms", [True, False])
def test_a_constant_outcome_has_a_wilson_interval_and_one_item_a_bounded_one(with_terms):
    # 3 of 3 right is not "exactly 100 %": the Wilson interval is [43.9, 100], where a bootstrap of a constant
    # would give the false [100, 100]
    task = toy_task("percent", with_terms)
    same = metric(with_uncertainty(task, rows({"A": [1], "B": [1], "C": [1]}), CFG, iters=50), "pass@1")
    assert (same["value"], same["ci_hi"], same["ci_method"]) == (100.0, 100.0, "wilson")
    assert same["ci_lo"] == pytest.approx(100 * wilson(3, 3)[0]) and 40 < same["ci_lo"] < 50
    none = metric(with_uncertainty(task, rows({"A": [0], "B": [0], "C": [0]}), CFG, iters=50), "pass@1")
    assert (none["value"], none["ci_lo"]) == (0.0, 0.0) and none["ci_hi"] == pytest.approx(100 * wilson(0, 3)[1])
    one = metric(with_uncertainty(task, rows({"A": [1, 0]}), CFG), "pass@1")  # one item at 50 %: no spread seen
    assert one["value"] == 50.0 and one["ci_method"] == "wilson_bounded"
    assert (one["ci_lo"], one["ci_hi"]) == pytest.approx(tuple(100 * b for b in wilson(0.5, 1)))


def test_equal_fractional_items_never_get_a_zero_width_interval():
    """8 items each right on 1 of 2 samples: every bootstrap resample has mean 50, a false [50, 50]; the bounded
    Wilson interval over the 8 items is used instead, and a non-rate with no spread gets no interval (n.m.)."""
    data = rows({k: [1, 0] for k in "ABCDEFGH"})
    for with_terms in (True, False):
        p = metric(with_uncertainty(toy_task("percent", with_terms), data, CFG, iters=100), "pass@1")
        assert p["value"] == 50.0 and p["ci_method"] == "wilson_bounded"
        assert p["ci_lo"] < 30 and p["ci_hi"] > 70
        assert (p["ci_lo"], p["ci_hi"]) == pytest.approx(tuple(100 * b for b in wilson(4, 8)))
    big = rows({f"i{k}": [1, 0] for k in range(25)})  # 25 items >= SMALL_N, still all equal
    p = metric(with_uncertainty(toy_task("percent"), big, CFG, iters=100), "pass@1")
    assert p["ci_method"] == "wilson_bounded" and p["ci_hi"] - p["ci_lo"] > 30


def test_same_seed_same_numbers():
    data = rows({k: [int(k in "ACE")] for k in "ABCDEF"})
    a = with_uncertainty(toy_task("percent"), data, CFG)
    pd.testing.assert_frame_equal(a, with_uncertainty(toy_task("percent"), data, CFG))


def test_lm_eval_stderr_rows_become_the_stderr_column():
    point = pd.DataFrame({"metric": ["exact_match,digits", "exact_match_stderr,digits"], "group": ["all", "all"],
                          "value": [0.5, 0.25], "n": [4, 4]})
    out = fold_own_stderr(point)
    assert out["metric"].tolist() == ["exact_match,digits"]
    row = out.iloc[0]
    assert row["stderr"] == 0.25 and row["ci_lo"] == pytest.approx(0.5 - 1.96 * 0.25, abs=1e-3)
    assert row["ci_hi"] == pytest.approx(0.5 + 1.96 * 0.25, abs=1e-3) and row["unit"] == ""
