"""The paired comparison with the full cache: for each compressed run, ``Δ = run − none`` on the items both scored.

The per-item score is the mean of ``correct`` over the item's samples (in the unit of the headline: percent for
rates), which is the headline metric of needle and LongBench-v2 (accuracy) and of AIME and LiveCodeBench (pass@1).
Rows marked ``skipped`` (LongBench-v2 ``task.protocol=drop_empty``) leave the item's mean, and an item with only
skipped rows leaves the pairing, as they leave the headline. The reference is the ``method=none`` run stored in the
model's dtype (:mod:`evals.report.reference`: a run with ``kv_dtype=fp8_e4m3``, the full cache's included, is compared
with it, never used as it) with the same
``pair_key`` (same model, task and data, sampling and backend; :mod:`evals.report.load`) and the same task
configuration and backend; runs without a ``meta.json`` fall back to the only ``none`` run of their (model, task,
config, backend). A run and its reference made or graded by different code (:mod:`evals.report.likeness`) are not
paired: one line names both identities (logged, and given to ``notes`` for report.md).

One basis per row: ``value_paired``, ``reference_paired`` and ``delta`` are all on the ``n_paired`` items both runs
scored; ``n_run`` and ``n_reference`` are each run's own items, and ``subset`` flags a pairing on fewer items than
either. Interval (paired bootstrap) and p-value (sign-flip test): :func:`evals.analysis.stats.paired_bootstrap`.

Where compression acted: an item on which some sample of the run dropped a token (the row's ``compressed``,
:mod:`evals.record.geometry`); ``delta_acted`` is Δ on those items alone (``n_acted``), so that items a method kept
whole do not dilute its effect (``value_acted`` and ``reference_acted``: each run's score on them).
``gen_tokens_change``: mean generated tokens per item, run − full cache, on the paired items (compression can make a
reasoning model think longer). ``mde_80``: the smallest true difference this comparison detects with 80% power
(:func:`evals.analysis.power.mde_80`, from the paired differences).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evals.analysis.power import mde_80
from evals.analysis.stats import paired_bootstrap
from evals.report.likeness import unlike
from evals.report.load import TOO_LARGE
from evals.report.reference import full_cache

log = logging.getLogger(__name__)

COLUMNS = ["run", "reference", "delta", "delta_stderr", "delta_ci_lo", "delta_ci_hi", "p_value", "n_paired",
           "n_run", "n_reference", "value_paired", "reference_paired", "subset", "n_acted", "delta_acted",
           "delta_acted_ci_lo", "delta_acted_ci_hi", "value_acted", "reference_acted", "gen_tokens_change", "mde_80"]
USED = ("item_id", "correct", "skipped", "compressed", "gen_tokens")


def _truth(value) -> float:
    if isinstance(value, str):
        return float(value.strip().lower() in ("true", "1", "1.0"))
    return 0.0 if pd.isna(value) else float(value)


@dataclass(frozen=True)
class ItemData:
    """Per ``item_id`` (string index): ``score`` (mean correct times the scale), ``acted`` (some sample dropped a
    token; False where the rows do not say) and ``gen`` (mean generated tokens; NaN where not measured)."""

    score: pd.Series
    acted: pd.Series
    gen: pd.Series


def item_data(run_dir: str | Path, scale: float = 1.0) -> ItemData | None:
    """:class:`ItemData` from the run's ``samples.csv``; None without one (or without ``item_id``/``correct``)."""
    path = Path(run_dir) / "samples.csv"
    if not path.is_file():
        return None
    rows = pd.read_csv(path, usecols=lambda c: c in USED)
    if not {"item_id", "correct"} <= set(rows.columns) or rows.empty:
        return None
    if "skipped" in rows.columns:  # left out of every denominator, as the task's summary leaves them
        rows = rows[~rows["skipped"].map(lambda v: bool(_truth(v)))]
    ids = rows["item_id"].astype(str)
    score = rows["correct"].map(_truth).groupby(ids, sort=True).mean() * scale
    acted = (rows["compressed"].map(lambda v: bool(_truth(v))) if "compressed" in rows.columns
             else pd.Series(False, index=rows.index)).groupby(ids, sort=True).any()
    tokens = (pd.to_numeric(rows["gen_tokens"], errors="coerce") if "gen_tokens" in rows.columns
              else pd.Series(math.nan, index=rows.index))
    huge = ~tokens.abs().le(TOO_LARGE) & tokens.notna()  # inf, or no count of tokens: left out, one line
    if huge.any():
        log.warning("%s: column gen_tokens: %d values infinite or beyond %g left out of the change in generated "
                    "tokens (first: %g)", path, int(huge.sum()), TOO_LARGE, tokens[huge].iloc[0])
    gen = tokens.where(~huge).groupby(ids, sort=True).mean()
    return ItemData(score, acted, gen)


def item_scores(run_dir: str | Path, scale: float = 1.0) -> pd.Series | None:
    """Mean ``correct`` per ``item_id`` (times ``scale``), skipped rows left out; None without ``samples.csv``."""
    data = item_data(run_dir, scale)
    return None if data is None else data.score


def sample_scores(run_dir: str | Path, scale: float = 1.0) -> pd.Series | None:
    """``correct`` (times ``scale``) per ``(item_id, sample_idx)``, skipped rows left out (as the headline leaves
    them); None without ``samples.csv`` or its columns."""
    path = Path(run_dir) / "samples.csv"
    if not path.is_file():
        return None
    rows = pd.read_csv(path, usecols=lambda c: c in (*USED, "sample_idx"))
    if not {"item_id", "sample_idx", "correct"} <= set(rows.columns) or rows.empty:
        return None
    if "skipped" in rows.columns:
        rows = rows[~rows["skipped"].map(lambda v: bool(_truth(v)))]
    score = rows["correct"].map(_truth) * scale
    return pd.Series(score.to_numpy(), index=pd.MultiIndex.from_arrays(
        [rows["item_id"].astype(str), rows["sample_idx"].astype(int)], names=["item_id", "sample_idx"]))


def sample_matrix(reference: pd.Series, run: pd.Series, items: pd.Index) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)``, each ``(n, k)``: the per-sample scores (:func:`sample_scores`) of the full cache and a run on
    ``items`` (the ``n`` items both scored), at the ``k`` sample indices that every one of them has in both runs (the
    same seeds: paired by index)."""
    both = pd.concat([reference, run], axis=1, keys=["a", "b"], join="inner")
    both = both[both.index.get_level_values("item_id").isin(items)]
    wide_a, wide_b = both["a"].unstack("sample_idx"), both["b"].unstack("sample_idx")
    keep = wide_a.columns[wide_a.notna().all() & wide_b.notna().all()]
    return wide_a[keep].to_numpy(dtype=float), wide_b[keep].to_numpy(dtype=float)


def correct_values(correct: pd.Series) -> pd.Series:
    """``correct`` as floats in [0, 1] (``True``/``"true"``/``1`` -> 1.0; missing -> 0.0: an ungraded sample
    counts wrong and stays in the denominator)."""
    return correct.map(_truth)


def _reference(run: pd.Series, nones: pd.DataFrame) -> pd.Series | None:
    same = nones[(nones["model"] == run["model"]) & (nones["task"] == run["task"])]
    if "task_config" in nones.columns:
        same = same[same["task_config"].fillna("") == (run.get("task_config") or "")]
    if "backend" in nones.columns:  # a method's Δ is against the full cache of its own engine
        same = same[same["backend"] == run.get("backend")]
    if isinstance(run.get("pair_key"), str):
        same = same[same["pair_key"] == run["pair_key"]]
    elif len(same) != 1:
        return None
    return same.sort_values("run").iloc[0] if len(same) else None


class ItemCache:
    """:func:`item_data` of each run of a headline frame, read once."""

    def __init__(self) -> None:
        self._data: dict[str, ItemData | None] = {}

    def __call__(self, run: pd.Series) -> ItemData | None:
        if run["run"] not in self._data:
            self._data[run["run"]] = item_data(run["run_dir"], 100.0 if run["unit"] in ("%", "percent") else 1.0)
        return self._data[run["run"]]


def common_items(run: pd.Series, ref: pd.Series, data: ItemCache) -> tuple[ItemData, ItemData, pd.Index] | None:
    """``(reference's items, run's items, the item ids both scored)``; None when one has no rows or they share no
    item (one line)."""
    a, b = data(ref), data(run)
    if a is None or b is None:
        return None
    common = a.score.index.intersection(b.score.index)
    if len(common) == 0:
        log.warning("report: %s and %s share no items; no paired delta", run["run"], ref["run"])
        return None
    return a, b, common


def scored_pairs(runs: pd.DataFrame, reference: Callable[[pd.Series], pd.Series | None], *, iters: int, seed: int,
                 notes: list[str] | None = None, **like: Any) -> Iterator[tuple]:
    """For each run of ``runs`` whose ``reference(run)`` exists, was made and graded by code :func:`unlike` accepts
    (``like``: its options) and shares items with it: ``(run, ref, ref's items, run's items, the common item ids,
    ref's scores, run's scores, their paired bootstrap)``; a pair left out for its code is one warning, also
    appended to ``notes``."""
    data = ItemCache()
    for _, run in runs.iterrows():
        ref = reference(run)
        if ref is None:
            continue
        why = unlike(run, ref, **like)
        if why:
            log.warning("report: %s", why)
            if notes is not None:
                notes.append(why)
            continue
        found = common_items(run, ref, data)
        if found is None:
            continue
        a, b, common = found
        x, y = a.score[common].to_numpy(), b.score[common].to_numpy()
        yield run, ref, a, b, common, x, y, paired_bootstrap(x, y, iters=iters, seed=seed)


def paired_deltas(head: pd.DataFrame, *, iters: int = 1000, seed: int = 0,
                  notes: list[str] | None = None) -> pd.DataFrame:
    """One row per compressed run of ``head`` (see :func:`evals.report.tables.headline`) that has a reference made
    and graded by the same code; each pair left out for its code is one warning, also appended to ``notes``."""
    ref = full_cache(head)  # the full cache in the model's dtype; the full cache in FP8 is a compared run
    nones, runs = head[ref], head[~ref]
    out = []
    for run, ref, a, b, common, x, y, res in scored_pairs(runs, lambda r: _reference(r, nones), iters=iters,
                                                          seed=seed, notes=notes):
        acted = common[b.acted.reindex(common, fill_value=False).to_numpy(dtype=bool)]
        on_acted = paired_bootstrap(a.score[acted].to_numpy(), b.score[acted].to_numpy(), iters=iters, seed=seed)
        gen = (b.gen[common] - a.gen[common]).mean()
        n_run, n_ref = len(b.score), len(a.score)
        out.append([run["run"], ref["run"], res.delta, res.stderr, res.ci_lo, res.ci_hi, res.p_value, res.n,
                    n_run, n_ref, float(y.mean()), float(x.mean()), bool(res.n < max(n_run, n_ref)), len(acted),
                    on_acted.delta, on_acted.ci_lo, on_acted.ci_hi, _mean(b.score[acted]), _mean(a.score[acted]),
                    float(gen) if pd.notna(gen) else math.nan, mde_80(y - x)])
    return pd.DataFrame(out, columns=COLUMNS)


def _mean(values: pd.Series) -> float:
    return float(values.mean()) if len(values) else math.nan


def subset_notes(deltas: pd.DataFrame, head: pd.DataFrame) -> list[str]:
    """One line per paired comparison on fewer items than one of its runs scored."""
    labels = head.set_index("run")["label"] if len(head) else pd.Series(dtype=object)
    notes = []
    for _, d in deltas[deltas["subset"].astype(bool)].iterrows() if len(deltas) else []:
        notes.append(f"{labels.get(d['run'], d['run'])} ({d['run']}) vs {d['reference']}: Δ on the "
                     f"{int(d['n_paired'])} items both scored, of {int(d['n_run'])} (run) and "
                     f"{int(d['n_reference'])} (full cache); the values beside Δ are on those items too")
    return notes
