"""The official LongBench-v2 table (``result.py``): overall, easy, hard, short, medium, long, plus per domain.

Metrics, all in percent (0..100) as ``result.py`` prints them, each with ``n`` = number of items:

- ``accuracy``: mean of ``correct`` (an item without an extracted answer is wrong);
- ``compensated``: the same but an unanswered item scores 0.25 (``result.py`` with ``compensated = True``);
- ``answered``: share of items with an extracted letter (a diagnostic: compression can break the answer format).

- ``skipped``: share of rows left out (only under ``task.protocol=drop_empty``: an empty answer part); ``n`` = all
  rows. Always 0 under ``strict`` and ``raw``, which keep every item in every denominator. The share of samples whose
  thinking did not finish is the run's ``share_think_unclosed`` row (:mod:`evals.analysis.summary`, thinking models).

With several samples per item, each item counts once, with its mean over its kept samples (an item with no kept
sample is left out). Unrounded (``result.py`` rounds to one decimal when printing).
"""

from __future__ import annotations

from tasks import terms
from tasks.lazy import LazyModule
from tasks.longbench_v2.data import DIFFICULTIES, LENGTHS

pd = LazyModule("pandas")  # imported at first use: the planner imports task modules, not pandas

COLUMNS = ["metric", "group", "value", "n"]
METRICS = ("accuracy", "compensated", "answered")
UNANSWERED_CREDIT = 0.25


def summarize(rows: pd.DataFrame, *, cfg: object = None) -> pd.DataFrame:
    """Long-format metrics (``metric, group, value, n``) over result rows with ``item_id, correct, prediction``
    and the breakdown columns ``difficulty, length, domain`` (those absent are skipped)."""
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    skipped, groups = _split(rows)
    skipped_row = {"metric": "skipped", "group": "all", "value": 100.0 * float(skipped.mean()), "n": len(rows)}
    out = [{"metric": metric, "group": name, "value": 100.0 * float(part[metric].mean()), "n": len(part)}
           for metric in METRICS for name, part in groups]
    return pd.DataFrame([*out, skipped_row], columns=COLUMNS)


def item_terms(rows: pd.DataFrame, *, cfg: object = None) -> pd.DataFrame:
    """Every metric of :func:`summarize` as a ratio of item sums (:mod:`tasks.terms`): ``accuracy``,
    ``compensated`` and ``answered`` are item means within each group, ``skipped`` a row mean."""
    if rows.empty:
        return terms.concat([])
    skipped, groups = _split(rows)
    parts = [terms.row_mean(rows["item_id"], 100.0 * skipped.astype(float), "skipped")]
    parts += [terms.item_mean(100.0 * part[metric], metric, name) for metric in METRICS for name, part in groups]
    return terms.concat(parts)


def _split(rows: pd.DataFrame) -> tuple[pd.Series, list[tuple[str, pd.DataFrame]]]:
    """``(skipped, groups)``: which rows are skipped (bool per row), and per group (``all``, then each breakdown
    value in the official order) the per-item table of the kept rows (index ``item_id``, one column per metric:
    the item's mean over its kept samples)."""
    skipped = rows["skipped"].fillna(False).astype(bool) if "skipped" in rows.columns else pd.Series(False, rows.index)
    rows = rows[~skipped.to_numpy()]
    if rows.empty:
        return skipped, []
    per_row = pd.DataFrame({
        "item_id": rows["item_id"].astype(str),
        "accuracy": _as_score(rows["correct"]),
        "answered": _answered(rows["prediction"]).astype(float),
    })
    per_row["compensated"] = per_row["accuracy"].where(per_row["answered"] > 0, UNANSWERED_CREDIT)
    fields = [f for f in ("difficulty", "length", "domain") if f in rows.columns]
    for field in fields:
        per_row[field] = rows[field].astype(str).to_numpy()
    per_item = per_row.groupby("item_id", sort=False).agg(
        {**{m: "mean" for m in METRICS}, **{f: "first" for f in fields}})

    groups: list[tuple[str, pd.DataFrame]] = [("all", per_item)]
    for field in fields:
        order = {"difficulty": DIFFICULTIES, "length": LENGTHS}.get(field, ())
        present = list(dict.fromkeys(per_item[field]))
        values = [v for v in order if v in present] + sorted(v for v in present if v not in order)
        groups += [(f"{field}={v}", per_item[per_item[field] == v]) for v in values]
    return skipped, groups


def _as_score(values: pd.Series) -> pd.Series:
    """``correct`` as 0..1 floats, whether bools, numbers, or "True"/"False" strings read back from a CSV."""
    def one(v: object) -> float:
        if isinstance(v, str):
            return 1.0 if v.strip().lower() in ("true", "1", "1.0") else 0.0
        return 0.0 if pd.isna(v) else float(v)

    return values.map(one).astype(float)


def _answered(predictions: pd.Series) -> pd.Series:
    """True where a letter was extracted (None, NaN and "" mean no answer)."""
    return predictions.notna() & (predictions.astype(str).str.strip() != "")
