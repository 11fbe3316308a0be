"""Item terms: a metric written as a ratio of sums over items, ``value = sum_i num_i / sum_i den_i``, so that
:mod:`evals.analysis.summary` can bootstrap it with one matrix product instead of re-running ``summarize`` per resample.

The two shapes every metric of ours takes (the ``item_terms`` hook of a task returns their rows,
``item_id, metric, group, num, den``):

- :func:`item_mean`: the mean over the items of a group of one value per item (pass@k of a problem, an item's mean
  correctness): ``num_i`` = the item's value, ``den_i`` = 1 for an item of the group (items outside it have no row);
- :func:`row_mean`: the mean over sample rows (accuracy of needle rows, the ``answered`` share of AIME rows):
  ``num_i`` = the sum of the item's non-NaN row values, ``den_i`` = their count.

Under a resample that draws item ``i`` ``C_i`` times the ratio becomes ``sum_i C_i num_i / sum_i C_i den_i``,
exactly what ``summarize`` gives on the resampled rows (a group with ``sum C_i den_i == 0`` has no row there).
"""

from __future__ import annotations

from collections.abc import Iterable

from tasks.lazy import LazyModule

pd = LazyModule("pandas")  # imported at first use: the planner imports task modules, not pandas


TERM_COLUMNS = ["item_id", "metric", "group", "num", "den"]


def item_mean(values: pd.Series, metric: str, group: str = "all") -> pd.DataFrame:
    """Terms of the mean of ``values`` (one per item, indexed by ``item_id``)."""
    return pd.DataFrame({"item_id": values.index.astype(str), "metric": metric, "group": group,
                         "num": values.astype(float).to_numpy(), "den": 1.0}, columns=TERM_COLUMNS)


def row_mean(item_ids: pd.Series, values: pd.Series, metric: str, group: str = "all") -> pd.DataFrame:
    """Terms of the mean of the non-NaN ``values`` (one per row; ``item_ids`` aligned with them). An item without a
    non-NaN value is left out."""
    values = pd.Series(values.astype(float).to_numpy())
    valid = values.notna()
    ids = pd.Series(item_ids.astype(str).to_numpy())[valid]
    sums = values[valid].groupby(ids.to_numpy(), sort=False).agg(["sum", "size"])
    return pd.DataFrame({"item_id": sums.index.astype(str), "metric": metric, "group": group,
                         "num": sums["sum"].to_numpy(dtype=float), "den": sums["size"].to_numpy(dtype=float)},
                        columns=TERM_COLUMNS)


def concat(parts: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """The term frames as one (``TERM_COLUMNS``; empty when there are none)."""
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=TERM_COLUMNS)
