"""The paired comparison with the full cache: for each compressed run, ``Δ = run − none`` on the items both scored.

The per-item score is the mean of ``correct`` over the item's samples (in the unit of the headline: percent for
rates), which is the headline metric of needle and LongBench-v2 (accuracy) and of AIME and LiveCodeBench (pass@1).
The reference is the ``method=none`` run with the same ``pair_key`` (same model, task and data, sampling and backend;
:mod:`evals.report.load`); runs without a ``meta.json`` fall back to the only ``none`` run of their (model, task).
Interval (paired bootstrap) and p-value (sign-flip test): :func:`evals.stats.paired_bootstrap` over the paired items;
``mde_80``: the smallest true difference this comparison detects with 80% power (:func:`evals.power.mde_80`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from evals.power import mde_80
from evals.stats import paired_bootstrap

log = logging.getLogger(__name__)

COLUMNS = ["run", "reference", "delta", "delta_stderr", "delta_ci_lo", "delta_ci_hi", "p_value", "n_paired", "mde_80"]


def item_scores(run_dir: str | Path, scale: float = 1.0) -> pd.Series | None:
    """Mean ``correct`` per ``item_id`` (times ``scale``) from the run's ``samples.csv``; None without one."""
    path = Path(run_dir) / "samples.csv"
    if not path.is_file():
        return None
    rows = pd.read_csv(path, usecols=lambda c: c in ("item_id", "correct"))
    if not {"item_id", "correct"} <= set(rows.columns) or rows.empty:
        return None
    return correct_values(rows["correct"]).groupby(rows["item_id"].astype(str), sort=True).mean() * scale


def correct_values(correct: pd.Series) -> pd.Series:
    """``correct`` as floats in [0, 1] (``True``/``"true"``/``1`` -> 1.0; missing -> 0.0: an ungraded sample
    counts wrong and stays in the denominator)."""
    return correct.map(lambda v: float(str(v).strip().lower() in ("true", "1", "1.0")) if isinstance(
        v, str) else (0.0 if pd.isna(v) else float(v)))


def _reference(run: pd.Series, nones: pd.DataFrame) -> pd.Series | None:
    same = nones[(nones["model"] == run["model"]) & (nones["task"] == run["task"])]
    if isinstance(run.get("pair_key"), str):
        same = same[same["pair_key"] == run["pair_key"]]
    elif len(same) != 1:
        return None
    return same.sort_values("run").iloc[0] if len(same) else None


def paired_deltas(head: pd.DataFrame, *, iters: int = 1000, seed: int = 0) -> pd.DataFrame:
    """One row per compressed run of ``head`` (see :func:`evals.report.tables.headline`) that has a reference."""
    nones = head[head["method"] == "none"]
    cache: dict[str, pd.Series | None] = {}

    def scores(run: pd.Series) -> pd.Series | None:
        if run["run"] not in cache:
            cache[run["run"]] = item_scores(run["run_dir"], 100.0 if run["unit"] == "%" else 1.0)
        return cache[run["run"]]

    out = []
    for _, run in head[head["method"] != "none"].iterrows():
        ref = _reference(run, nones)
        if ref is None:
            continue
        a, b = scores(ref), scores(run)
        if a is None or b is None:
            continue
        common = a.index.intersection(b.index)
        if len(common) == 0:
            log.warning("report: %s and %s share no items; no paired delta", run["run"], ref["run"])
            continue
        res = paired_bootstrap(a[common].to_numpy(), b[common].to_numpy(), iters=iters, seed=seed)
        mde = mde_80(b[common].to_numpy() - a[common].to_numpy())  # evals.power: the loss found with 80% power
        out.append([run["run"], ref["run"], res.delta, res.stderr, res.ci_lo, res.ci_hi, res.p_value, res.n, mde])
    return pd.DataFrame(out, columns=COLUMNS)
