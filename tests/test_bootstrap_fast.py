"""The fast bootstrap of evals.analysis.summary (ratios of item sums from one matrix product over the resamples' item
counts) gives the numbers of the per-resample ``summarize`` path, to 1e-9, on realistic rows of every task: several
samples per item, breakdowns, a group only some items have, missing values, skipped rows; and it is what runs (one
``summarize`` call, the point's) wherever a task's ``item_terms`` covers its metrics."""

from __future__ import annotations

import functools
import inspect
import logging
import types

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from evals.analysis.stats import ratio_replicates, resample_counts, resample_indices
from evals.analysis.summary import SummaryContext, with_uncertainty
from tasks import get_task
from tasks.protocol import OPTIONAL_HOOKS, hook

ITERS = 40
NUMBERS = ["value", "stderr", "ci_lo", "ci_hi"]


def cfg(task: dict | None = None, thinking: bool = False):
    return SummaryContext(task_cfg=OmegaConf.create(task or {}), thinking=thinking)


def counted(name: str, *, hide_terms: bool = False) -> types.ModuleType:
    """The registered task ``name`` with a ``summarize`` that counts its calls (``.calls``), its ``item_terms``
    hidden if asked."""
    task = get_task(name)
    proxy = types.ModuleType(task.__name__)
    proxy.__dict__.update({k: v for k, v in vars(task).items() if not k.startswith("__")})
    proxy.calls = 0

    @functools.wraps(task.summarize)
    def summarize(rows, *, cfg=None):
        proxy.calls += 1
        return task.summarize(rows, cfg=cfg)

    proxy.summarize = summarize
    if hide_terms:
        del proxy.item_terms
    return proxy


def assert_same(fast: pd.DataFrame, slow: pd.DataFrame) -> None:
    assert fast[["metric", "group", "n", "unit"]].equals(slow[["metric", "group", "n", "unit"]])
    np.testing.assert_allclose(fast[NUMBERS].to_numpy(float), slow[NUMBERS].to_numpy(float), rtol=0, atol=1e-9,
                               equal_nan=True)
    assert fast["stderr"].notna().any()  # some spread was estimated: the comparison is not NaN against NaN


def behaviour(rng: np.random.Generator, thinking: bool = False) -> dict:
    row = {"gen_tokens": int(rng.integers(5, 400)), "finish_reason": "length" if rng.random() < 0.3 else "stop",
           "truncated": bool(rng.random() < 0.2), "kv_tokens_peak": int(rng.integers(100, 900)),
           "latency_s": float(rng.random())}
    if thinking:
        row["thinking_closed"] = bool(rng.random() < 0.7)
    return row


def needle_rows() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    out = []
    for i in range(9):
        depth = None if i == 8 else [0.1, 0.5, 0.9][i % 3] if i < 6 else 0.2  # 'late' only in some items
        for s in range(1 + i % 3):
            ok = rng.random() < 0.5
            out.append({"item_id": f"needle-{i}", "sample_idx": s, "depth": depth, "answer": "4817263",
                        "prediction": "4817263" if ok else (None if s == 2 else "48172"),
                        "correct": float("nan") if (i, s) == (3, 0) else ok, **behaviour(rng)})
    out[4]["gen_tokens"] = None  # a missing cost value
    out[5]["finish_reason"] = None
    return pd.DataFrame(out)


def longbench_rows() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    out = []
    for i in range(10):
        for s in range(2):
            skipped = i == 9 or (i == 2 and s == 1)  # item 9 has no kept sample
            answered = rng.random() < 0.8
            out.append({"item_id": f"66f{i:05d}", "sample_idx": s, "skipped": skipped or None,
                        "difficulty": "hard" if i % 3 else "easy", "length": ["short", "medium", "long"][i % 3],
                        "domain": "Code Repository Understanding" if i == 4 else f"Domain {i % 2}",
                        "prediction": (None if skipped else ("B" if answered else "")),
                        "correct": (not skipped) and answered and rng.random() < 0.5, **behaviour(rng)})
    return pd.DataFrame(out)


def aime_rows(samples=lambda i: 4, two_exams: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(2)
    out = []
    for i in range(8):
        for s in range(samples(i)):
            ok = rng.random() < 0.4
            exam = "2024-I" if i < 5 else "2024-II"
            if two_exams and i == 0 and s == 1:
                exam = "2024-II"
            out.append({"item_id": f"2024-{i}", "sample_idx": s, "exam": None if i == 7 else exam, "answer": "25",
                        "prediction": 25 if ok else (None if rng.random() < 0.3 else 17), "correct": ok,
                        **behaviour(rng, thinking=True)})
    return pd.DataFrame(out)


def lcb_rows() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    outcomes = ["passed", "wrong_answer", "timeout", "runtime_error", "compile_error", "no_code"]
    out = []
    for i in range(8):
        for s in range(3 + (i == 2)):
            outcome = outcomes[int(rng.integers(0, len(outcomes)))]
            out.append({"item_id": f"abc{300 + i}_a", "sample_idx": s, "difficulty": ["easy", "medium", "hard"][i % 3],
                        "platform": "codeforces" if i == 5 else ("atcoder" if i % 2 else "leetcode"),
                        "outcome": None if (i, s) == (1, 1) else outcome,
                        "correct": float("nan") if (i, s) == (0, 2) else outcome == "passed", **behaviour(rng)})
    return pd.DataFrame(out)


CASES = {
    "needle": (needle_rows, cfg({"name": "needle"})),
    "longbench_v2": (longbench_rows, cfg({"name": "longbench_v2"})),
    "aime24": (aime_rows, cfg({"name": "aime24"}, thinking=True)),
    "livecodebench": (lcb_rows, cfg({"name": "livecodebench", "pass_k": [1, 2, 3]})),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fast_path_equals_the_per_resample_path(name):
    make, conf = CASES[name]
    rows = make()
    task = counted(name)
    fast = with_uncertainty(task, rows, conf, iters=ITERS, wilson_rates=False)
    assert task.calls == 1  # the point value only: every metric came from the item terms
    slow = with_uncertainty(task, rows, conf, iters=ITERS, fast=False, wilson_rates=False)
    assert task.calls == 2 + ITERS
    assert_same(fast, slow)


def test_every_task_metric_is_covered():
    """The metrics each hook covers, named: a metric dropped from item_terms would fail here, not just get slow."""
    expected = {
        "needle": {"accuracy", "key_prefix"},
        "longbench_v2": {"accuracy", "compensated", "answered", "skipped"},
        "aime24": {"pass@1", "pass@4", "cons@4", "answered"},
        "livecodebench": {"pass@1", "pass@2", "pass@3"} | {f"share_{o}" for o in (
            "passed", "wrong_answer", "timeout", "runtime_error", "compile_error", "no_code", "protocol_error",
            "output_limit", "data_error")},
    }
    for name, (make, conf) in CASES.items():
        terms = hook(get_task(name), "item_terms")(make(), cfg=conf.task_cfg)
        assert set(terms["metric"]) == expected[name], name
        assert set(terms.columns) == {"item_id", "metric", "group", "num", "den"}


def test_without_the_hook_the_task_metrics_take_the_slow_path_with_the_same_numbers():
    make, conf = CASES["longbench_v2"]
    task = counted("longbench_v2", hide_terms=True)
    hidden = with_uncertainty(task, make(), conf, iters=ITERS, wilson_rates=False)
    assert task.calls == 1 + ITERS
    assert_same(hidden, with_uncertainty(counted("longbench_v2"), make(), conf, iters=ITERS, wilson_rates=False))


@pytest.mark.parametrize("variant", ["samples_vary", "two_exams"])
def test_aime_metrics_left_out_fall_back_and_still_agree(variant):
    """Varying sample counts: ``cons@n`` is not a ratio of item sums (a resample without a 4-sample problem reports
    cons@3); a problem whose rows name two exams: ``answered`` per exam filters rows, not problems."""
    rows = aime_rows(samples=lambda i: 3 + (i % 2)) if variant == "samples_vary" else aime_rows(two_exams=True)
    conf = CASES["aime24"][1]
    terms = get_task("aime24").item_terms(rows, cfg=conf.task_cfg)
    keys = set(zip(terms["metric"], terms["group"]))
    if variant == "samples_vary":
        assert not any(m.startswith("cons@") for m, _ in keys) and ("pass@1", "all") in keys
    else:
        assert ("answered", "exam=2024-I") not in keys and ("answered", "all") in keys
    task = counted("aime24")
    fast = with_uncertainty(task, rows, conf, iters=ITERS, wilson_rates=False)
    assert task.calls == 1 + ITERS  # the left-out metrics were resampled through summarize
    assert_same(fast, with_uncertainty(task, rows, conf, iters=ITERS, fast=False, wilson_rates=False))


def test_terms_that_disagree_with_summarize_are_refused_with_a_warning(caplog):
    make, conf = CASES["needle"]
    rows = make()
    task = counted("needle")
    right = task.item_terms

    def wrong(rows, *, cfg=None):
        out = right(rows, cfg=cfg)
        out.loc[out["metric"] == "key_prefix", "num"] *= 0.5
        return out

    task.item_terms = wrong
    with caplog.at_level(logging.WARNING, logger="evals.analysis.summary"):
        fast = with_uncertainty(task, rows, conf, iters=ITERS, wilson_rates=False)
    assert "key_prefix" in caplog.text and "summarize instead" in caplog.text
    assert task.calls == 1 + ITERS
    assert_same(fast, with_uncertainty(task, rows, conf, iters=ITERS, fast=False, wilson_rates=False))


def test_ratio_replicates_on_the_same_draws_as_resample_indices():
    idx = resample_indices(5, 30, 7)
    counts = resample_counts(5, 30, 7)
    assert counts.shape == (30, 5) and (counts.sum(axis=1) == 5).all()
    assert (counts == np.stack([np.bincount(row, minlength=5) for row in idx])).all()
    num = np.array([[1.0, 2.0], [0.0, 0.0], [1.0, 0.0], [0.0, 3.0], [1.0, 0.0]])
    den = np.array([[1.0, 2.0], [1.0, 0.0], [1.0, 0.0], [1.0, 3.0], [1.0, 0.0]])  # column 1: items 0 and 3 only
    reps = ratio_replicates(counts, num, den)
    means = np.array([[num[r, 0].mean(), num[r, 1].sum() / den[r, 1].sum() if den[r, 1].sum() else np.nan]
                      for r in idx])
    np.testing.assert_allclose(reps, means, rtol=0, atol=1e-12, equal_nan=True)
    assert np.isnan(reps[:, 1]).any()  # a resample without items 0 and 3 has no value, as summarize has no row


def test_item_terms_is_a_documented_hook_of_every_benchmark():
    assert "item_terms" in OPTIONAL_HOOKS
    for name in CASES:
        fn = hook(get_task(name), "item_terms")
        assert fn is not None and "cfg" in inspect.signature(fn).parameters
