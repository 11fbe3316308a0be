"""AIME metrics from result rows: pass@1, pass@k, cons@n, answered rate, lengths; and the per-problem table.

All accuracies are **fractions in 0..1** (the R1 card and lighteval report AIME this way; multiply by 100 for the
paper's "pass@1 50.4"). Definitions, per problem i with n_i samples of which c_i are correct:

- ``pass@1`` = mean over problems of c_i / n_i (the R1 card's pass@1: mean correctness over samples);
- ``pass@k`` (k in 4, 8, 16, 32, 64 up to min n_i) = mean over problems of the unbiased estimator
  ``1 - C(n_i - c_i, k) / C(n_i, k)`` (:func:`tasks.metrics.pass_at_k`);
- ``cons@n`` (n = samples per problem, only when n > 1) = fraction of problems whose majority-voted answer is
  correct. Votes are over canonical predictions ("025", "\\dfrac{50}{2}" and "25" are one vote); samples without a
  prediction do not vote; ties go to the answer reached by the lowest ``sample_idx``;
- ``answered`` = fraction of rows with a prediction from a completion that ended before the token limit.

Rows whose ``</think>`` never came are graded as ``task.protocol`` says (see :mod:`tasks.aime24`); their share
is ``share_think_unclosed`` in the summary, per method and budget.

Lengths, the share cut by ``max_new_tokens`` and KV figures are added for every task by :mod:`evals.analysis.summary`
(``mean_gen_tokens``, ``share_gen_truncated``, ...), which also scales these fractions to percent (``RATE_UNIT``).

``group`` is ``"all"`` or ``"exam=2024-I"`` / ``"exam=2024-II"`` (pass@1 and answered per exam).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from tasks import terms
from tasks.lazy import LazyModule
from tasks.metrics import ks_up_to, majority, pass_at_k

pd = LazyModule("pandas")  # imported at first use: the planner imports task modules, not pandas

log = logging.getLogger(__name__)

KS = (1, 4, 8, 16, 32, 64)
SUMMARY_COLUMNS = ["metric", "group", "value", "n"]
RATE_UNIT = "fraction"  # evals.analysis.summary scales rates to percent


def prediction_key(value: Any) -> str | None:
    """A prediction as a vote: None/NaN -> None, 25 or 25.0 (from a CSV round trip) -> "25", else the string."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    text = str(value)
    return text if text else None


def per_problem(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per problem, in the order problems first appear: ``item_id, exam, answer, n, n_correct, pass@1,
    majority, majority_votes, cons_correct, answered, gen_truncated, gen_tokens_mean`` (``gen_truncated``: samples
    stopped by ``max_new_tokens``)."""
    columns = ["item_id", "exam", "answer", "n", "n_correct", "pass@1", "majority", "majority_votes",
               "cons_correct", "answered", "gen_truncated", "gen_tokens_mean"]
    if rows is None or len(rows) == 0:
        return pd.DataFrame(columns=columns)
    _require(rows, ("item_id", "correct", "prediction"))
    frame = rows.copy()
    frame["_order"] = range(len(frame))
    sort_by = ["sample_idx", "_order"] if "sample_idx" in frame else ["_order"]
    lines = []
    for item_id, group in frame.groupby("item_id", sort=False):
        group = group.sort_values(sort_by, kind="stable")
        correct = [_as_correct(v) for v in group["correct"]]
        keys = [prediction_key(v) for v in group["prediction"]]
        vote = majority(keys)
        votes = sum(k == vote for k in keys) if vote is not None else 0
        # the vote's verdict is that of its first sample (every sample with the same canonical answer has the same)
        cons = vote is not None and correct[keys.index(vote)] >= 1.0
        lines.append({
            "item_id": item_id,
            "exam": _first(group, "exam"),
            "answer": _first(group, "answer"),
            "n": len(group),
            "n_correct": sum(c >= 1.0 for c in correct),
            "pass@1": sum(correct) / len(correct),
            "majority": vote,
            "majority_votes": votes,
            "cons_correct": cons,
            "answered": float(answered_rows(group).mean()),
            "gen_truncated": int((group["finish_reason"] == "length").sum()) if "finish_reason" in group else 0,
            "gen_tokens_mean": _mean(group, "gen_tokens"),
        })
    return pd.DataFrame(lines, columns=columns)


def answered_rows(rows: pd.DataFrame) -> pd.Series:
    """Per row: an answer was extracted from a completion that ended before ``max_new_tokens`` (a completion cut at
    the limit is not answered, whatever number its last line happens to hold)."""
    answered = rows["prediction"].map(prediction_key).notna()
    if "finish_reason" in rows:
        answered &= rows["finish_reason"].astype(str) != "length"
    return answered


def summarize(rows: pd.DataFrame, *, cfg: Any = None) -> pd.DataFrame:
    """Long-format metrics (``metric, group, value, n``); accuracies are fractions in 0..1."""
    problems = per_problem(rows)
    if problems.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    out: list[dict[str, Any]] = []

    def add(metric: str, value: float, n: int, group: str = "all") -> None:
        out.append({"metric": metric, "group": group, "value": float(value), "n": int(n)})

    n_items = len(problems)
    n_min, n_max = int(problems["n"].min()), int(problems["n"].max())
    if n_min != n_max:
        log.warning("aime24: samples per problem vary (%d..%d); pass@k uses k <= %d", n_min, n_max, n_min)
    add("pass@1", problems["pass@1"].mean(), n_items)
    for k in ks_up_to(n_min, KS):
        if k > 1:
            value = sum(pass_at_k(int(n), int(c), k) for n, c in zip(problems["n"], problems["n_correct"]))
            add(f"pass@{k}", value / n_items, n_items)
    if n_max > 1:
        add(f"cons@{n_max}", problems["cons_correct"].mean(), n_items)
    answered = answered_rows(rows)
    add("answered", answered.mean(), len(rows))
    if "exam" in rows:
        for exam, group in problems.dropna(subset=["exam"]).groupby("exam", sort=True):
            add("pass@1", group["pass@1"].mean(), len(group), f"exam={exam}")
            sample_rows = rows[rows["exam"] == exam]
            add("answered", answered_rows(sample_rows).mean(), len(sample_rows), f"exam={exam}")
    return pd.DataFrame(out, columns=SUMMARY_COLUMNS)


def item_terms(rows: pd.DataFrame, *, cfg: Any = None) -> pd.DataFrame:
    """The metrics of :func:`summarize` that are ratios of item sums (:mod:`tasks.terms`): ``pass@1`` and
    ``pass@k`` (item means), ``answered`` (a row mean), per exam too, and ``cons@n`` (an item mean) when every
    problem has the same number of samples. Left out, so bootstrapped by re-running :func:`summarize`: ``cons@n``
    when sample counts vary (a resample without a problem of ``n`` samples reports another ``cons@``), and
    ``answered`` per exam when some problem's rows name two exams (the row filter then differs from the problem's)."""
    problems = per_problem(rows)
    if problems.empty:
        return terms.concat([])
    problems.index = problems["item_id"].astype(str)
    n_min, n_max = int(problems["n"].min()), int(problems["n"].max())
    parts = [terms.item_mean(problems["pass@1"], "pass@1")]
    for k in ks_up_to(n_min, KS):
        if k > 1:
            scores = [pass_at_k(int(n), int(c), k) for n, c in zip(problems["n"], problems["n_correct"])]
            parts.append(terms.item_mean(pd.Series(scores, index=problems.index), f"pass@{k}"))
    if 1 < n_max == n_min:
        parts.append(terms.item_mean(problems["cons_correct"].astype(float), f"cons@{n_max}"))
    answered = answered_rows(rows).astype(float)
    parts.append(terms.row_mean(rows["item_id"], answered, "answered"))
    if "exam" in rows:
        one_exam = bool((rows.groupby(rows["item_id"].astype(str))["exam"].nunique() <= 1).all())
        for exam, group in problems.dropna(subset=["exam"]).groupby("exam", sort=True):
            parts.append(terms.item_mean(group["pass@1"], "pass@1", f"exam={exam}"))
            if one_exam:
                mask = rows["exam"] == exam
                parts.append(terms.row_mean(rows["item_id"][mask], answered[mask], "answered", f"exam={exam}"))
    return terms.concat(parts)


def _as_correct(value: Any) -> float:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return 0.0
    return float(value)


def _first(group: pd.DataFrame, column: str) -> Any:
    if column not in group:
        return None
    values = group[column].dropna()
    return values.iloc[0] if len(values) else None


def _mean(group: pd.DataFrame, column: str) -> float | None:
    if column not in group:
        return None
    values = pd.to_numeric(group[column], errors="coerce").dropna()
    return float(values.mean()) if len(values) else None


def _require(rows: pd.DataFrame, columns: tuple[str, ...]) -> None:
    missing = [c for c in columns if c not in rows]
    if missing:
        raise ValueError(f"aime24.summarize: rows lack column(s) {', '.join(missing)}")
