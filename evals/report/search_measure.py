"""A searched budget measured against the full cache exactly as ``python -m evals.report`` measures it (the same
per-item scores, paired bootstrap and seeds), plus the one-sided non-inferiority test of
:mod:`evals.analysis.noninferiority`; reads only finished run directories."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from evals.analysis.estimands import THESE_ITEMS, compare
from evals.analysis.noninferiority import NonInferiority
from evals.analysis.stats import paired_bootstrap
from evals.report.paired import item_scores, sample_matrix, sample_scores
from evals.report.tables import primary_metric


@dataclass(frozen=True)
class Headline:
    """A finished run's primary metric on the whole set (``summary.csv``) and its per-item scores."""

    run_dir: Path
    metric: str
    unit: str
    value: float
    ci_lo: float
    ci_hi: float
    items: pd.Series  # item_id -> mean score of the item's samples, in the headline's unit
    samples_per_item: int  # the most samples any item has
    samples: pd.Series | None = None  # (item_id, sample_idx) -> the sample's score, in the headline's unit


@dataclass(frozen=True)
class Measured:
    """One budget against the full cache: ``delta, ci_low, ci_high`` as the report's ``deltas.csv``, ``test``."""

    budget: int
    kv_ratio: float
    run: Headline
    reference: Headline
    delta: float
    ci_low: float
    ci_high: float
    n_items: int
    test: NonInferiority


def headline_of(run_dir: Path, task: str) -> Headline:
    """The primary metric of a finished run and its per-item scores; ``ValueError`` when the metric is not the mean
    of the per-item scores (no paired test is then possible)."""
    summary = pd.read_csv(run_dir / "summary.csv")
    metric = primary_metric(task, summary)
    row = summary[(summary["metric"] == metric) & (summary["group"] == "all")].iloc[0]
    unit = "" if pd.isna(row.get("unit")) else str(row.get("unit", ""))
    items = item_scores(run_dir, 100.0 if unit == "%" else 1.0)
    value = float(row["value"])
    if items is None or not math.isclose(float(items.mean()), value, rel_tol=1e-6, abs_tol=1e-6):
        raise ValueError(f"task={task}: no paired headline ({metric} = {value:.6g} is not the mean of the "
                         "per-item scores), so a budget cannot be tested against the full cache")
    ids = pd.read_csv(run_dir / "samples.csv", usecols=["item_id"])["item_id"].astype(str)
    return Headline(run_dir, metric, unit, value, float(row.get("ci_lo", math.nan)),
                    float(row.get("ci_hi", math.nan)), items, int(ids.value_counts().max()),
                    sample_scores(run_dir, 100.0 if unit == "%" else 1.0))


def longest_prompt(run_dir: Path) -> int:
    """The longest prompt (tokens, after the task's cut) of a finished run's rows."""
    tokens = pd.read_csv(run_dir / "samples.csv", usecols=["prompt_tokens"])["prompt_tokens"]
    if tokens.isna().all():
        raise ValueError("search.budgets: the full-cache run records no prompt lengths (backend=replay?); give "
                         "search.budgets explicitly")
    return int(tokens.max())


def kv_ratio(method: Any, prompt_len: int, new_tokens: int) -> float:
    """KV entries of the full cache over the method's, per layer and KV head, at the end of generating
    ``new_tokens`` after a prompt of ``prompt_len`` tokens."""
    return (prompt_len + new_tokens) / method.footprint(prompt_len, new_tokens)


def measure(budget: int, run: Headline, reference: Headline, ratio: float, max_loss: float,
            alpha: float, estimand: str = THESE_ITEMS) -> Measured:
    """The paired comparison of ``run`` with ``reference`` on the items both scored, and both one-sided tests of
    ``estimand`` (:func:`evals.analysis.estimands.compare`): ``population`` on the per-item means, ``these_items``
    on the per-sample scores at the sample indices every paired item has in both runs."""
    common = reference.items.index.intersection(run.items.index)
    a, b = reference.items[common].to_numpy(), run.items[common].to_numpy()
    paired = paired_bootstrap(a, b)  # the report's defaults (iters, seed): the same numbers as deltas.csv
    scale = 100.0 if run.unit == "%" else 1.0
    one = run.samples_per_item == 1 and reference.samples_per_item == 1
    if estimand == THESE_ITEMS and reference.samples is not None and run.samples is not None:
        sa, sb = sample_matrix(reference.samples, run.samples, common)
    else:  # the item means, one bounded term per item (valid for either estimand)
        sa, sb = a[:, None], b[:, None]
    test = compare(sa, sb, max_loss, alpha, scale, estimand, one_sample=one)
    return Measured(budget, ratio, run, reference, paired.delta, paired.ci_lo, paired.ci_hi, paired.n, test)
