"""Running the budgets of a search as ordinary runs (``evals.execute.loop.run`` in this process) and measuring each
against the full cache exactly as ``python -m evals.report`` does (the same per-item scores, paired bootstrap and
seeds), plus the one-sided non-inferiority test of :mod:`evals.noninferiority`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from evals.noninferiority import NonInferiority, noninferiority
from evals.stats import paired_bootstrap
from snapstream_core.methods import METHODS
from tasks.protocol import hook


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


def with_compression(overrides: list[str], name: str) -> list[str]:
    """``overrides`` with the compression group set to ``name`` (replacing the given one)."""
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != "compression"] + [f"compression={name}"]


def check_searchable(cfg: Any) -> None:
    """One line (``ValueError``) for a job the search cannot run: no compression method, a method without a
    budget, a task without a paired headline."""
    method = str(cfg.compression.method)
    if method == "none":
        raise ValueError("compression: the search needs a compression method (compression=snapkv, snapstream, "
                         "streaming_llm, ...), got none (the full cache is the reference)")
    cls = METHODS.get(method)
    if cls is None or cls.budget_knob not in cls.field_names():
        raise ValueError(f"compression={method}: has no budget to search over")
    from tasks import get_task

    module = cfg.task.get("module") or cfg.task.name
    if hook(get_task(module), "PRIMARY_METRIC") is None:
        named = f"task={module}" + (f" ({cfg.task.name})" if module != cfg.task.name else "")
        raise ValueError(f"{named}: no paired headline (its headline is not a mean of per-item scores "
                         "declared by PRIMARY_METRIC), so a budget cannot be tested against the full cache")


def headline_of(run_dir: Path, task: str) -> Headline:
    """The primary metric of a finished run and its per-item scores; ``ValueError`` when the metric is not the mean
    of the per-item scores (no paired test is then possible)."""
    from evals.report.paired import item_scores
    from evals.report.tables import primary_metric

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
                    float(row.get("ci_hi", math.nan)), items, int(ids.value_counts().max()))


def budget_knob(cfg: Any) -> str:
    """``compression.<knob>`` the search sets for a composed job: the method's ``budget_knob`` (``prompt_budget``,
    or ``budget`` for a whole-cache method)."""
    cls = METHODS.get(str(cfg.compression.method))
    return f"compression.{cls.budget_knob if cls is not None else 'prompt_budget'}"


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
            alpha: float) -> Measured:
    """The paired comparison of ``run`` with ``reference`` on the items both scored."""
    common = reference.items.index.intersection(run.items.index)
    a, b = reference.items[common].to_numpy(), run.items[common].to_numpy()
    paired = paired_bootstrap(a, b)  # the report's defaults (iters, seed): the same numbers as deltas.csv
    scale = 100.0 if run.unit == "%" else 1.0
    one = run.samples_per_item == 1 and reference.samples_per_item == 1
    test = noninferiority(a, b, max_loss, alpha, scale, one_sample=one)
    return Measured(budget, ratio, run, reference, paired.delta, paired.ci_lo, paired.ci_hi, paired.n, test)
