"""``summary.csv``: the task's metric rows, the behaviour and cost figures every run shares, each with its standard
error and 95% interval, and the run's identity columns.

Units, one per metric kind (the ``unit`` column says which):

- rates (``accuracy``, ``compensated``, ``answered``, ``key_prefix``, ``pass@k``, ``cons@n``, ``share_*``) in
  **percent** (0..100) for every task; a task whose ``summarize`` returns fractions says so with
  ``RATE_UNIT = "fraction"`` in its summary module and is scaled here;
- ``mean_gen_tokens``, ``mean_kv_tokens_peak``: tokens per sequence; ``mean_kv_bytes_peak``: bytes;
  ``mean_latency_s``: seconds; metrics a task reports in its own unit (lm-eval's) keep it (``unit`` empty).

Behaviour columns shared by all tasks, the ones that explain a drop: ``share_gen_truncated`` (generation stopped
by ``max_new_tokens``, ``finish_reason == "length"``), ``share_compressed`` (the method dropped a token of the sample,
:mod:`evals.record.geometry`; 0 for a run that keeps every token), ``mean_kv_tokens_mean`` (KV tokens held, mean over
decoding, beside ``mean_kv_tokens_peak``), ``mean_kv_slots_peak`` (slots allocated per layer and KV head: above the
tokens held by a ring's free slots or a ragged policy's padding), ``mean_kv_held_bytes_after_prefill`` and
``mean_kv_bytes_after_prefill`` (bytes held and allocated after the prefill, measured), ``share_prompt_truncated``
(prompt cut to the context limit, the row's ``truncated``), ``share_think_unclosed`` (a thinking model that never
closed ``</think>``).

Intervals of rates whose items each score 0 or 100 % (one sample per item, or a per-item verdict) are Wilson score
intervals over the items (:func:`evals.analysis.stats.wilson`: right at 0 and at n, where a bootstrap of a constant
gives a zero-width interval); ``ci_method`` says which interval a row has (``wilson``, ``bootstrap``, ``normal``,
``wilson_bounded``, ``n.m.``). Other rates on fewer than ``SMALL_N`` items, or whose bootstrap collapses to a point
(every item scored the same fraction), get the bounded Wilson interval
(:func:`evals.analysis.stats.bounded_rate_interval`); another metric whose bootstrap collapses gets no interval
(``n.m.``), never a zero-width one.

Uncertainty otherwise: the task's ``summarize`` is recomputed on ``BOOTSTRAP_ITERS`` resamples of the **items** (an
item keeps all its samples, so pass@k and cons@n resample problems with their samples); ``stderr`` is the replicates'
standard deviation and ``ci_lo``/``ci_hi`` their 2.5/97.5 percentiles (:mod:`evals.analysis.stats`). A metric that is a
ratio of item sums (every behaviour row, and what the task's ``item_terms`` hook covers: :mod:`tasks.terms`) gets the
same replicates from one matrix product over the resamples' item counts instead of a ``summarize`` per resample; its
terms are checked against the point value first (a mismatch is logged and that metric takes the slow path). A task that
reports its own standard errors (``REPORTS_STDERR``, lm-eval's ``<metric>_stderr,<filter>`` rows) has them moved into
the ``stderr`` column with a normal interval ``value ± 1.96 stderr``, cut to [0, 1] for a metric bounded there
(``UNIT_INTERVAL``).
"""

from __future__ import annotations

import logging
import math
import re
import sys
from collections import Counter
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd

from evals.analysis.stats import (
    SEED,
    SMALL_N,
    bounded_rate_interval,
    from_replicates,
    ratio_replicates,
    resample_counts,
    resample_indices,
    wilson,
    zero_width,
)
from snapstream_core.methods import knob_names
from snapstream_core.methods.base import CompressionMethod
from tasks import terms
from tasks.protocol import hook

log = logging.getLogger(__name__)

SUMMARY_COLUMNS = ["model", "task", "method", "prompt_budget", "recent", "metric", "group", "value", "n"]
# ci_method: wilson | bootstrap | normal | wilson_bounded | n.m.
UNCERTAINTY_COLUMNS = ["stderr", "ci_lo", "ci_hi", "unit", "ci_method"]
RUN_COLUMNS = ["fingerprint"]  # the run's identity hash (evals/execute/identity.py), last: the report groups by run
FROM_ROWS = ("run_id", "fingerprint")  # one value per run: taken from its rows
COST_UNITS = {"gen_tokens": "tokens", "kv_tokens_peak": "tokens", "kv_tokens_mean": "tokens", "kv_bytes_peak": "bytes",
              "kv_slots_peak": "tokens", "kv_held_bytes_after_prefill": "bytes", "kv_bytes_after_prefill": "bytes",
              "latency_s": "s"}
RATE = re.compile(r"^(accuracy|compensated|answered|key_prefix|pass@\d+|cons@\d+|share_\w+)$")
BOOTSTRAP_ITERS = 200
ItemTerms = tuple[np.ndarray, np.ndarray]  # (num, den), each (n_items,): a metric as sum(num) / sum(den)
Z95 = 1.959963984540054
# lm-eval metrics whose value lies in [0, 1] (lm_eval/api/metrics.py: acc, acc_norm, exact_match, f1, mcc is not):
# their normal interval is cut to that range (a median-aggregated 0/1 metric has a stderr near 0.5)
UNIT_INTERVAL = frozenset({"acc", "acc_norm", "acc_mutual_info", "exact_match", "em", "f1", "mc1", "mc2", "contains",
                           "pass@1", "likelihood"})


@dataclass(frozen=True)
class SummaryContext:
    """What a summary needs of the run's settings: the task's own config node (``task.summarize(rows, cfg=...)``),
    whether the model thinks (the behaviour rows then count unfinished thoughts), and the model and task names the
    summary rows carry."""

    task_cfg: Any
    thinking: bool = False
    model: str = ""
    task: str = ""


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


def _truthy(values: pd.Series) -> pd.Series:
    return values.map(lambda v: str(v).strip().lower() in ("true", "1", "1.0"))


def _behaviour(rows: pd.DataFrame, thinking: bool) -> list[tuple[str, pd.Series, pd.Series, float]]:
    """``(metric, values, valid, scale)`` per behaviour metric: its value is ``scale * mean(values[valid])`` (one
    value per row), reported when some row is valid."""
    out = []
    for col in COST_UNITS:
        if col in rows.columns:
            values = pd.to_numeric(rows[col], errors="coerce")
            out.append((f"mean_{col}", values, values.notna(), 1.0))
    if "finish_reason" in rows.columns:
        out.append(("share_gen_truncated", rows["finish_reason"] == "length", rows["finish_reason"].notna(), 100.0))
    if "compressed" in rows.columns:  # the method dropped a token of the sample (evals/record/geometry.py)
        out.append(("share_compressed", _truthy(rows["compressed"]), rows["compressed"].notna(), 100.0))
    if "truncated" in rows.columns:
        out.append(("share_prompt_truncated", _truthy(rows["truncated"]), rows["truncated"].notna(), 100.0))
    if thinking and "thinking_closed" in rows.columns:
        out.append(("share_think_unclosed", ~_truthy(rows["thinking_closed"]), rows["thinking_closed"].notna(),
                    100.0))
    return out


def behaviour_rows(rows: pd.DataFrame, thinking: bool = False) -> list[dict]:
    """Means of the cost columns and the shares truncated (and, for a ``thinking`` model, unclosed), over the rows
    (one per sample)."""
    return [{"metric": name, "group": "all", "value": scale * float(values[valid].mean()), "n": int(valid.sum())}
            for name, values, valid, scale in _behaviour(rows, thinking) if valid.any()]


def behaviour_terms(rows: pd.DataFrame, thinking: bool = False) -> pd.DataFrame:
    """:func:`behaviour_rows` as item terms (row means, :func:`tasks.terms.row_mean`)."""
    return terms.concat(terms.row_mean(rows["item_id"][valid], scale * values[valid].astype(float), name)
                        for name, values, valid, scale in _behaviour(rows, thinking))


def _scale_rates(task: ModuleType, frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """``frame`` with ``column`` scaled to percent on the rate metrics of a ``RATE_UNIT = "fraction"`` task."""
    scale = rate_scale(task)
    if scale != 1.0:
        frame = frame.copy()
        is_rate = frame["metric"].map(lambda m: bool(RATE.match(str(m))))
        frame.loc[is_rate, column] = frame.loc[is_rate, column].astype(float) * scale
    return frame


def metric_rows(task: ModuleType, rows: pd.DataFrame, ctx: SummaryContext) -> pd.DataFrame:
    """The task's metrics (rates in percent) and the behaviour rows: columns ``metric, group, value, n``."""
    metrics = task.summarize(rows, cfg=ctx.task_cfg)
    missing = {"metric", "group", "value", "n"} - set(metrics.columns)
    if missing:
        raise TypeError(f"{task.__name__}.summarize must return columns metric, group, value, n (missing {missing})")
    metrics = _scale_rates(task, metrics[["metric", "group", "value", "n"]].copy(), "value")
    shared = pd.DataFrame(behaviour_rows(rows, ctx.thinking), columns=metrics.columns)
    return pd.concat([metrics, shared], ignore_index=True)


def _unit(metric: str) -> str:
    if RATE.match(metric):
        return "%"
    if metric.startswith("mean_") and metric[5:] in COST_UNITS:
        return COST_UNITS[metric[5:]]
    return ""


def _item_order(rows: pd.DataFrame) -> list[str]:
    """The run's item ids (as strings) in the order they first appear: the items the resamples index."""
    return list(dict.fromkeys(rows["item_id"].astype(str).to_numpy()))


def item_resampler(rows: pd.DataFrame):
    """``(n_items, take)``: ``take(idx)`` gives the rows of items ``idx`` (with repeats; a repeated item gets a new
    ``item_id`` ``<id>#<j>`` so that it counts as many times as it was drawn)."""
    ids = rows["item_id"].astype(str).to_numpy()
    order = _item_order(rows)
    blocks = rows.groupby(ids, sort=False).indices
    positions = [blocks[i] for i in order]

    def take(idx: np.ndarray) -> pd.DataFrame:
        parts = [positions[i] for i in idx]
        out = rows.iloc[np.concatenate(parts)].copy()
        out["item_id"] = np.repeat([f"{order[i]}#{j}" for j, i in enumerate(idx)], [len(p) for p in parts])
        return out

    return len(order), take


def ratio_terms(task: ModuleType, rows: pd.DataFrame, ctx: SummaryContext, point: pd.DataFrame) -> dict[int, ItemTerms]:
    """Row ``j`` of ``point`` -> ``(num, den)``, each of shape ``(n_items,)`` in :func:`_item_order`, for the point
    rows that are ratios of item sums: the behaviour rows and what the task's ``item_terms`` hook gives (its rates
    scaled as :func:`metric_rows` scales them). A row is left out (so resampled through ``summarize``) when no terms
    cover it, when its key ``(metric, group)`` is not unique, or when ``sum(num) / sum(den)`` is not its point value
    (a warning: the hook disagrees with ``summarize``)."""
    own = hook(task, "item_terms")
    sources = [behaviour_terms(rows, ctx.thinking)]
    if own is not None:
        sources.append(_scale_rates(task, own(rows, cfg=ctx.task_cfg), "num"))
    keys = list(zip(point["metric"], point["group"]))
    times = Counter(keys)
    seen = [set(zip(frame["metric"], frame["group"])) for frame in sources]
    twice = set.intersection(*seen) if len(seen) > 1 else set()  # a task metric named like a behaviour row
    column = {key: j for j, key in enumerate(keys) if times[key] == 1 and key not in twice}
    found = terms.concat(sources)
    order = _item_order(rows)
    where = {item: i for i, item in enumerate(order)}
    col = np.array([column.get(key, -1) for key in zip(found["metric"], found["group"])], dtype=int)
    item = np.array([where.get(i, -1) for i in found["item_id"].astype(str)], dtype=int)
    num_in, den_in = found["num"].to_numpy(dtype=float), found["den"].to_numpy(dtype=float)
    bad = {int(j) for j in col[(col >= 0) & ((item < 0) | ~np.isfinite(num_in) | ~np.isfinite(den_in))]}
    keep = (col >= 0) & (item >= 0)
    num, den = np.zeros((len(order), len(keys))), np.zeros((len(order), len(keys)))
    np.add.at(num, (item[keep], col[keep]), num_in[keep])
    np.add.at(den, (item[keep], col[keep]), den_in[keep])
    out = {}
    for j in sorted(set(col[col >= 0].tolist())):
        total = den[:, j].sum()
        ratio = num[:, j].sum() / total if total > 0 else math.nan
        value = float(point["value"].iloc[j])
        if j in bad or not math.isclose(ratio, value, rel_tol=1e-9, abs_tol=1e-9):  # NaN agrees with nothing
            log.warning("%s: item terms of %s (%s) give %r, summarize %r: bootstrapped through summarize instead",
                        task.__name__, *keys[j], ratio, value)
            continue
        out[j] = (num[:, j], den[:, j])
    if len(out) < len(keys):
        log.debug("%s: resampled through summarize: %s", task.__name__,
                  ", ".join(f"{m} ({g})" for j, (m, g) in enumerate(keys) if j not in out))
    return out


def with_uncertainty(task: ModuleType, rows: pd.DataFrame, ctx: SummaryContext, *, iters: int = BOOTSTRAP_ITERS,
                     seed: int = SEED, fast: bool = True, wilson_rates: bool = True) -> pd.DataFrame:
    """:func:`metric_rows` plus ``stderr, ci_lo, ci_hi, unit`` (NaN where a value has no spread to estimate).

    The replicates of the rows :func:`ratio_terms` covers come from :func:`evals.analysis.stats.ratio_replicates` on the
    resamples' item counts; the others from ``summarize`` on each resample (``fast=False``: every row so, the
    reference the fast path is tested against). Both use the same resamples, so the numbers agree. ``wilson_rates``
    (default): a rate whose items each score 0 or 100 gets its Wilson interval instead (:func:`_binary_trials`)."""
    point = metric_rows(task, rows, ctx).reset_index(drop=True)
    if hook(task, "REPORTS_STDERR"):
        return fold_own_stderr(point)
    keys = list(zip(point["metric"], point["group"]))
    n_items, take = item_resampler(rows)
    reps = np.full((iters, len(keys)), np.nan)
    found = ratio_terms(task, rows, ctx, point) if (fast or wilson_rates) and n_items >= 1 else {}
    covered = found if fast else {}
    if n_items >= 2:
        if covered:
            cols = sorted(covered)
            num = np.stack([covered[j][0] for j in cols], axis=1)  # (n_items, K)
            den = np.stack([covered[j][1] for j in cols], axis=1)
            reps[:, cols] = ratio_replicates(resample_counts(n_items, iters, seed), num, den)
        where = {key: j for j, key in enumerate(keys) if j not in covered}
        if where:
            for i, idx in enumerate(resample_indices(n_items, iters, seed)):
                sample = metric_rows(task, take(idx), ctx)
                for m, g, v in zip(sample["metric"], sample["group"], sample["value"]):
                    j = where.get((m, g))
                    if j is not None:
                        reps[i, j] = v
    est = [from_replicates(float(v), reps[:, j], n_items) for j, v in enumerate(point["value"])]
    stderr, lo, hi, how = [], [], [], []
    for j, e in enumerate(est):
        trials = _binary_trials(found.get(j), float(e.value), int(point["n"].iloc[j]), e) if wilson_rates else None
        if RATE.match(str(keys[j][0])) and trials is not None:
            k, n = trials
            w_lo, w_hi = wilson(k, n)
            p = k / n
            stderr.append(100.0 * math.sqrt(p * (1 - p) / n))
            lo.append(100.0 * w_lo)
            hi.append(100.0 * w_hi)
            how.append("wilson")
        else:
            honest = _small_n_interval(str(keys[j][0]), e, min(int(point["n"].iloc[j]), n_items))
            stderr.append(honest[0])
            lo.append(honest[1])
            hi.append(honest[2])
            how.append(honest[3])
    point["stderr"], point["ci_lo"], point["ci_hi"] = stderr, lo, hi
    point["unit"] = point["metric"].map(_unit)
    point["ci_method"] = how
    return point


def _small_n_interval(metric: str, e, n: int) -> tuple[float, float, float, str]:
    """``(stderr, lo, hi, ci_method)`` of a bootstrap estimate ``e`` over ``n`` items, made honest where the
    percentile bootstrap is not: a rate on fewer than SMALL_N items or with a zero-width interval gets the bounded
    Wilson interval (:func:`evals.analysis.stats.bounded_rate_interval`, ``wilson_bounded``); another metric with a
    zero-width interval gets none (``n.m.``)."""
    collapsed = zero_width(e.ci_lo, e.ci_hi)
    if RATE.match(metric) and math.isfinite(e.value) and n >= 1 and (n < SMALL_N or collapsed):
        p = min(max(e.value / 100.0, 0.0), 1.0)
        w_lo, w_hi = bounded_rate_interval(p, n)
        return 100.0 * math.sqrt(p * (1 - p) / n), 100.0 * w_lo, 100.0 * w_hi, "wilson_bounded"
    if collapsed:
        return math.nan, math.nan, math.nan, "n.m."
    return e.stderr, e.ci_lo, e.ci_hi, ("bootstrap" if not math.isnan(e.ci_lo) else "")


def _binary_trials(item_terms: ItemTerms | None, value: float, n: int, est) -> tuple[int, int] | None:
    """``(successes, items)`` when a rate (in percent) is a proportion of items that each score 0 or 100: from its
    item terms, or, without terms, when every item must have scored the same (the value is 0 or 100; ``n`` its
    count). None otherwise (the bootstrap interval stands)."""
    if item_terms is not None:
        num, den = item_terms
        scored = den > 0
        values = num[scored] / den[scored]
        if scored.any() and bool(np.all(np.isclose(values, 0.0) | np.isclose(values, 100.0))):
            return int(np.isclose(values, 100.0).sum()), int(scored.sum())
        return None
    if n >= 1 and (math.isclose(value, 0.0, abs_tol=1e-9) or math.isclose(value, 100.0)):
        return (n if value > 50 else 0), n
    return None


def fold_own_stderr(point: pd.DataFrame) -> pd.DataFrame:
    """lm-eval's ``<metric>_stderr,<filter>`` rows moved into the ``stderr`` of ``<metric>,<filter>``; the normal
    interval ``value ± 1.96 stderr``, cut to [0, 1] for the metrics of :data:`UNIT_INTERVAL`."""
    is_se = point["metric"].str.contains(r"_stderr(?:,|$)", regex=True)
    se = {(m.replace("_stderr", "", 1), g): v for m, g, v in point[is_se][["metric", "group", "value"]].itertuples(
        index=False)}
    out = point[~is_se].reset_index(drop=True)
    out["stderr"] = [se.get((m, g), math.nan) for m, g in zip(out["metric"], out["group"])]
    out["ci_lo"] = out["value"] - Z95 * out["stderr"]
    out["ci_hi"] = out["value"] + Z95 * out["stderr"]
    bounded = out["metric"].map(lambda m: str(m).split(",", 1)[0] in UNIT_INTERVAL)
    out.loc[bounded, "ci_lo"] = out.loc[bounded, "ci_lo"].clip(lower=0.0)
    out.loc[bounded, "ci_hi"] = out.loc[bounded, "ci_hi"].clip(upper=1.0)
    out["unit"] = out["metric"].map(_unit)
    out["ci_method"] = ["normal" if not math.isnan(v) else "" for v in out["stderr"]]
    return out


def summarize(task, rows: pd.DataFrame, ctx: SummaryContext, method: CompressionMethod) -> pd.DataFrame:
    """Long format, one metric a row: the task's own metrics first, then the behaviour and cost rows."""
    out = with_uncertainty(task, rows, ctx)
    knobs = method.knobs()
    ident = {
        "model": ctx.model,
        "task": ctx.task,
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
