"""LiveCodeBench metrics from result rows: pass@k (``lcb_runner/evaluation/pass_k_utils.py``) and outcome shares.

* ``pass@k``: per problem the unbiased estimator ``1 - C(n-c, k) / C(n, k)`` over its ``n`` samples of which ``c``
  pass, averaged over problems; reported for each k of ``task.pass_k`` that every problem of the group supports
  (as lcb_runner, which drops a k as soon as one problem has fewer samples). ``pass@1`` is the mean correctness.
* ``share_<outcome>``: the fraction of samples with that outcome (every outcome of ``OUTCOMES``, zeros included).

All values are fractions in 0..1. Groups: ``all``, ``difficulty=<easy|medium|hard>``, ``platform=<name>``; the
``n`` column counts problems for pass@k and samples for shares.
"""

from __future__ import annotations

from collections.abc import Iterable

from tasks import terms
from tasks.lazy import LazyModule
from tasks.livecodebench.grader import OUTCOMES
from tasks.livecodebench.problem import DIFFICULTIES
from tasks.metrics import pass_at_k

pd = LazyModule("pandas")  # imported at first use: the planner imports task modules, not pandas

DEFAULT_KS = (1, 2, 4, 5, 8, 10, 16, 32, 64)
BREAKDOWNS = ("difficulty", "platform")
RATE_UNIT = "fraction"  # evals.analysis.summary scales rates to percent


def _groups(rows: pd.DataFrame) -> Iterable[tuple[str, pd.DataFrame]]:
    yield "all", rows
    for name in BREAKDOWNS:
        if name not in rows.columns:
            continue
        values = [v for v in rows[name].dropna().unique()]
        order = list(DIFFICULTIES) if name == "difficulty" else []
        values.sort(key=lambda v: (order.index(v) if v in order else len(order), str(v)))
        for value in values:
            yield f"{name}={value}", rows[rows[name] == value]


def _pass_scores(subset: pd.DataFrame, ks: Iterable[int]) -> dict[int, pd.Series]:
    """Per k that every problem of ``subset`` supports: the problems' pass@k (index ``item_id``)."""
    per_item = subset.groupby("item_id", sort=False)["_pass"].agg(["size", "sum"])
    n_min = int(per_item["size"].min())
    return {k: pd.Series([pass_at_k(int(n), int(c), k) for n, c in zip(per_item["size"], per_item["sum"])],
                         index=per_item.index, dtype=float)
            for k in sorted(set(ks)) if k <= n_min}


def _pass_rows(group: str, subset: pd.DataFrame, ks: Iterable[int]) -> list[dict]:
    return [{"metric": f"pass@{k}", "group": group, "value": sum(scores) / len(scores), "n": len(scores)}
            for k, scores in _pass_scores(subset, ks).items()]


def _share_rows(group: str, subset: pd.DataFrame) -> list[dict]:
    counts = subset["outcome"].value_counts()
    return [{"metric": f"share_{name}", "group": group, "value": float(counts.get(name, 0)) / len(subset),
             "n": len(subset)} for name in OUTCOMES]


def _with_pass(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (checked) with ``_pass``: 1 where ``correct`` means every test passed."""
    for name in ("item_id", "correct"):
        if name not in rows.columns:
            raise ValueError(f"summarize: result rows lack the column '{name}'")
    rows = rows.copy()
    rows["_pass"] = rows["correct"].map(lambda v: bool(v) and v == v and float(v) >= 1.0).astype(int)
    return rows


def summarize_rows(rows: pd.DataFrame, ks: Iterable[int] = DEFAULT_KS) -> pd.DataFrame:
    """Long-format metrics (columns ``metric, group, value, n``) for the rows of one run."""
    columns = ["metric", "group", "value", "n"]
    rows = _with_pass(rows)
    if rows.empty:
        return pd.DataFrame(columns=columns)
    records: list[dict] = []
    for group, subset in _groups(rows):
        records += _pass_rows(group, subset, ks)
    if "outcome" in rows.columns:
        for group, subset in _groups(rows):
            records += _share_rows(group, subset)
    return pd.DataFrame.from_records(records, columns=columns)


def item_terms_rows(rows: pd.DataFrame, ks: Iterable[int] = DEFAULT_KS) -> pd.DataFrame:
    """Every metric of :func:`summarize_rows` as a ratio of item sums (:mod:`tasks.terms`): pass@k an item mean
    within its group (a resample keeps every k of the full run: its problems have at least as many samples),
    ``share_<outcome>`` a row mean."""
    rows = _with_pass(rows)
    if rows.empty:
        return terms.concat([])
    parts = []
    for group, subset in _groups(rows):
        parts += [terms.item_mean(scores, f"pass@{k}", group) for k, scores in _pass_scores(subset, ks).items()]
    if "outcome" in rows.columns:
        for group, subset in _groups(rows):
            parts += [terms.row_mean(subset["item_id"], (subset["outcome"] == name).astype(float), f"share_{name}",
                                     group) for name in OUTCOMES]
    return terms.concat(parts)
