"""``summary.csv``: the task's metric rows, the behaviour and cost figures every run shares, each with its standard
error and 95% interval, and the run's identity columns.

Units, one per metric kind (the ``unit`` column says which):

- rates (``accuracy``, ``compensated``, ``answered``, ``key_prefix``, ``pass@k``, ``cons@n``, ``share_*``) in
  **percent** (0..100) for every task; a task whose ``summarize`` returns fractions says so with
  ``RATE_UNIT = "fraction"`` in its summary module and is scaled here;
- ``mean_gen_tokens``, ``mean_kv_tokens_peak``: tokens per sequence; ``mean_kv_bytes_peak``: bytes;
  ``mean_latency_s``: seconds; metrics a task reports in its own unit (lm-eval's) keep it (``unit`` empty).

Behaviour columns shared by all tasks, the ones that explain a drop: ``share_gen_truncated`` (generation stopped
by ``max_new_tokens``, ``finish_reason == "length"``), ``share_prompt_truncated`` (prompt cut to the context
limit, the row's ``truncated``), ``share_think_unclosed`` (a thinking model that never closed ``</think>``).

Uncertainty: the task's ``summarize`` is recomputed on ``BOOTSTRAP_ITERS`` resamples of the **items** (an item keeps
all its samples, so pass@k and cons@n resample problems with their samples); ``stderr`` is the replicates' standard
deviation and ``ci_lo``/``ci_hi`` their 2.5/97.5 percentiles (:mod:`evals.stats`). A task that reports its own
standard errors (``REPORTS_STDERR``, lm-eval's ``<metric>_stderr,<filter>`` rows) has them moved into the ``stderr``
column with a normal interval ``value ± 1.96 stderr``.
"""

from __future__ import annotations

import logging
import math
import re
import sys
from types import ModuleType

import numpy as np
import pandas as pd

from evals.stats import SEED, from_replicates, resample_indices
from snapstream_core.methods import knob_names
from snapstream_core.methods.base import CompressionMethod
from tasks.protocol import hook

log = logging.getLogger(__name__)

SUMMARY_COLUMNS = ["model", "task", "method", "prompt_budget", "recent", "metric", "group", "value", "n"]
UNCERTAINTY_COLUMNS = ["stderr", "ci_lo", "ci_hi", "unit"]
RUN_COLUMNS = ["fingerprint"]  # the run's identity hash (evals/identity.py), last, so the report can group by run
FROM_ROWS = ("run_id", "fingerprint")  # one value per run: taken from its rows
COST_UNITS = {"gen_tokens": "tokens", "kv_tokens_peak": "tokens", "kv_bytes_peak": "bytes", "latency_s": "s"}
RATE = re.compile(r"^(accuracy|compensated|answered|key_prefix|pass@\d+|cons@\d+|share_\w+)$")
BOOTSTRAP_ITERS = 200
Z95 = 1.959963984540054


def identity_extra() -> list[str]:
    """The method knobs beyond ``prompt_budget`` and ``recent``, from the method dataclasses (a new method's knobs get
    columns with no edit here), then ``run_id``."""
    return [k for k in knob_names() if k not in SUMMARY_COLUMNS] + ["run_id"]


def _rate_unit(task: ModuleType) -> str:
    """``RATE_UNIT`` of the task module, of its ``summary`` submodule, or of the module defining ``summarize``."""
    names = [f"{task.__name__}.summary", getattr(task.summarize, "__module__", "")]
    for module in (task, *(sys.modules.get(name) for name in names)):
        if module is not None and hasattr(module, "RATE_UNIT"):
            return module.RATE_UNIT
    return "percent"


def rate_scale(task: ModuleType) -> float:
    """100 for a task that declares ``RATE_UNIT = "fraction"``, else 1 (rates already in percent)."""
    unit = _rate_unit(task)
    if unit not in ("percent", "fraction"):
        raise TypeError(f"{task.__name__}: RATE_UNIT must be 'percent' or 'fraction', got {unit!r}")
    return 100.0 if unit == "fraction" else 1.0


def _share(mask: pd.Series, valid: pd.Series) -> dict | None:
    if not valid.any():
        return None
    return {"group": "all", "value": 100.0 * float(mask[valid].mean()), "n": int(valid.sum())}


def _truthy(values: pd.Series) -> pd.Series:
    return values.map(lambda v: str(v).strip().lower() in ("true", "1", "1.0"))


def behaviour_rows(rows: pd.DataFrame, thinking: bool = False) -> list[dict]:
    """Means of the cost columns and the shares truncated (and, for a ``thinking`` model, unclosed), over the rows
    (one per sample)."""
    out = []
    for col in COST_UNITS:
        if col in rows.columns:
            values = pd.to_numeric(rows[col], errors="coerce").dropna()
            if len(values):
                out.append({"metric": f"mean_{col}", "group": "all", "value": float(values.mean()), "n": len(values)})
    shares = {}
    if "finish_reason" in rows.columns:
        shares["share_gen_truncated"] = (rows["finish_reason"] == "length", rows["finish_reason"].notna())
    if "truncated" in rows.columns:
        shares["share_prompt_truncated"] = (_truthy(rows["truncated"]), rows["truncated"].notna())
    if thinking and "thinking_closed" in rows.columns:
        shares["share_think_unclosed"] = (~_truthy(rows["thinking_closed"]), rows["thinking_closed"].notna())
    for name, (mask, valid) in shares.items():
        row = _share(mask, valid)
        if row:
            out.append({"metric": name, **row})
    return out


def metric_rows(task: ModuleType, rows: pd.DataFrame, cfg) -> pd.DataFrame:
    """The task's metrics (rates in percent) and the behaviour rows: columns ``metric, group, value, n``."""
    metrics = task.summarize(rows, cfg=cfg.task)
    missing = {"metric", "group", "value", "n"} - set(metrics.columns)
    if missing:
        raise TypeError(f"{task.__name__}.summarize must return columns metric, group, value, n (missing {missing})")
    metrics = metrics[["metric", "group", "value", "n"]].copy()
    scale = rate_scale(task)
    if scale != 1.0:
        is_rate = metrics["metric"].map(lambda m: bool(RATE.match(str(m))))
        metrics.loc[is_rate, "value"] = metrics.loc[is_rate, "value"].astype(float) * scale
    shared = pd.DataFrame(behaviour_rows(rows, bool(cfg.model.get("thinking", False))), columns=metrics.columns)
    return pd.concat([metrics, shared], ignore_index=True)


def _unit(metric: str) -> str:
    if RATE.match(metric):
        return "%"
    if metric.startswith("mean_") and metric[5:] in COST_UNITS:
        return COST_UNITS[metric[5:]]
    return ""


def item_resampler(rows: pd.DataFrame):
    """``(n_items, take)``: ``take(idx)`` gives the rows of items ``idx`` (with repeats; a repeated item gets a new
    ``item_id`` ``<id>#<j>`` so that it counts as many times as it was drawn)."""
    ids = rows["item_id"].astype(str).to_numpy()
    order = list(dict.fromkeys(ids))
    blocks = rows.groupby(ids, sort=False).indices
    positions = [blocks[i] for i in order]

    def take(idx: np.ndarray) -> pd.DataFrame:
        parts = [positions[i] for i in idx]
        out = rows.iloc[np.concatenate(parts)].copy()
        out["item_id"] = np.repeat([f"{order[i]}#{j}" for j, i in enumerate(idx)], [len(p) for p in parts])
        return out

    return len(order), take


def with_uncertainty(task: ModuleType, rows: pd.DataFrame, cfg, *, iters: int = BOOTSTRAP_ITERS,
                     seed: int = SEED) -> pd.DataFrame:
    """:func:`metric_rows` plus ``stderr, ci_lo, ci_hi, unit`` (NaN where a value has no spread to estimate)."""
    point = metric_rows(task, rows, cfg).reset_index(drop=True)
    if hook(task, "REPORTS_STDERR"):
        return fold_own_stderr(point)
    keys = list(zip(point["metric"], point["group"]))
    n_items, take = item_resampler(rows)
    reps = np.full((iters, len(keys)), np.nan)
    if n_items >= 2:
        where = {key: j for j, key in enumerate(keys)}
        for i, idx in enumerate(resample_indices(n_items, iters, seed)):
            sample = metric_rows(task, take(idx), cfg)
            for m, g, v in zip(sample["metric"], sample["group"], sample["value"]):
                j = where.get((m, g))
                if j is not None:
                    reps[i, j] = v
    est = [from_replicates(float(v), reps[:, j], n_items) for j, v in enumerate(point["value"])]
    point["stderr"] = [e.stderr for e in est]
    point["ci_lo"] = [e.ci_lo for e in est]
    point["ci_hi"] = [e.ci_hi for e in est]
    point["unit"] = point["metric"].map(_unit)
    return point


def fold_own_stderr(point: pd.DataFrame) -> pd.DataFrame:
    """lm-eval's ``<metric>_stderr,<filter>`` rows moved into the ``stderr`` of ``<metric>,<filter>``."""
    is_se = point["metric"].str.contains(r"_stderr(?:,|$)", regex=True)
    se = {(m.replace("_stderr", "", 1), g): v for m, g, v in point[is_se][["metric", "group", "value"]].itertuples(
        index=False)}
    out = point[~is_se].reset_index(drop=True)
    out["stderr"] = [se.get((m, g), math.nan) for m, g in zip(out["metric"], out["group"])]
    out["ci_lo"] = out["value"] - Z95 * out["stderr"]
    out["ci_hi"] = out["value"] + Z95 * out["stderr"]
    out["unit"] = out["metric"].map(_unit)
    return out


def summarize(task, rows: pd.DataFrame, cfg, method: CompressionMethod) -> pd.DataFrame:
    """Long format, one metric a row: the task's own metrics first, then the behaviour and cost rows."""
    out = with_uncertainty(task, rows, cfg)
    knobs = method.knobs()
    ident = {
        "model": cfg.model.name,
        "task": cfg.task.name,
        "method": method.method,
        "prompt_budget": knobs.get("prompt_budget"),
        "recent": knobs.get("recent"),
    }
    for key, value in ident.items():
        out[key] = value
    extra = identity_extra()
    for key in extra + RUN_COLUMNS:
        if key in FROM_ROWS:
            out[key] = rows[key].iloc[0] if len(rows) and key in rows.columns else None
        else:
            out[key] = knobs.get(key)
    return out[SUMMARY_COLUMNS + UNCERTAINTY_COLUMNS + extra + RUN_COLUMNS]
