"""Published references beside full-cache runs: does the setup reproduce the paper before any compression delta?

The figures live in one data file, ``evals/report/references.yaml``, one entry per number with its source. A
reference applies to a summary row of a ``none`` run (``method == "none"``) with the same ``model``, ``task``,
``metric`` and ``group``; models are matched by their config name, so the smoke models never match.

Uncertainty. A published figure comes without its own error; we give it the largest standard error a mean over
``n_items`` per-item rates in 0..1 can have, ``sqrt(p (1 - p) / n_items)`` (exact for one sample per item; an upper
bound with several, which average the sampling noise out). Ours is the run's bootstrap ``stderr`` (over items).
The two differ significantly when ``|ours - published| > 1.96 * sqrt(se_ours^2 + se_published^2)``: such a row is
flagged ``outside`` (our value lies outside the published figure's interval widened by our own uncertainty). A
run over fewer items than the reference (``task.limit``, another window) is compared but marked ``subset``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

REFERENCES_FILE = Path(__file__).with_name("references.yaml")
Z95 = 1.959963984540054
KEYS = ("model", "task", "metric", "group")
COLUMNS = ["model", "task", "metric", "group", "value", "stderr", "n", "reference", "ref_stderr", "ref_ci_lo",
           "ref_ci_hi", "ref_n_items", "ref_samples", "delta", "z", "outside", "subset", "source", "run"]


def load_references(path: str | Path = REFERENCES_FILE) -> pd.DataFrame:
    """The reference entries as a frame (one row per published number); ``ValueError`` naming the file and entry
    when one lacks a field or has a value outside 0..100."""
    path = Path(path)
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    entries = data.get("references")
    if not isinstance(entries, list):
        raise ValueError(f"{path}: a top-level 'references' list is required")
    fields = (*KEYS, "value", "n_items", "samples", "source")
    for i, entry in enumerate(entries):
        missing = [f for f in fields if not isinstance(entry, dict) or f not in entry]
        if missing:
            raise ValueError(f"{path}: entry {i}: missing {', '.join(missing)}")
        if not 0 <= float(entry["value"]) <= 100 or int(entry["n_items"]) < 1:
            raise ValueError(f"{path}: entry {i}: value must be in 0..100 and n_items >= 1")
    return pd.DataFrame(entries, columns=list(fields))


def published_stderr(value: float, n_items: int) -> float:
    """The largest standard error (in points) of a percentage ``value`` averaged over ``n_items`` items."""
    p = min(max(value / 100.0, 0.0), 1.0)
    return 100.0 * math.sqrt(p * (1.0 - p) / n_items)


def reference_rows(summary: pd.DataFrame, references: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (``none`` summary row, matching reference): our ``value``/``stderr``/``n`` beside the published
    ``reference`` with ``ref_stderr`` and its 95% interval, ``delta`` (ours - published, points), ``z`` and the flags
    ``outside`` and ``subset`` (see the module docstring), plus the reference's ``source``.

    ``summary`` has the columns of ``summary_all.csv`` (``model, task, method, metric, group, value``; ``stderr``,
    ``n`` and ``run`` when present; rates in percent). Empty (with :data:`COLUMNS`) when nothing matches."""
    refs = load_references() if references is None else references
    if summary.empty or "method" not in summary.columns:
        return pd.DataFrame(columns=COLUMNS)
    ours = summary[summary["method"].astype(str) == "none"]
    if "unit" in ours.columns:  # rates only: a fraction-valued or unit-less metric is not comparable
        ours = ours[ours["unit"].fillna("").astype(str).isin(["percent", ""])]
    if ours.empty:
        return pd.DataFrame(columns=COLUMNS)
    ours = ours.assign(**{k: ours[k].astype(str) for k in KEYS})
    refs = refs.assign(**{k: refs[k].astype(str) for k in KEYS})
    merged = ours.merge(refs.rename(columns={"value": "reference", "n_items": "ref_n_items",
                                             "samples": "ref_samples"}), on=list(KEYS), how="inner")
    rows = []
    for _, r in merged.iterrows():
        ref_se = published_stderr(float(r["reference"]), int(r["ref_n_items"]))
        se = _float(r.get("stderr"))
        delta = float(r["value"]) - float(r["reference"])
        spread = math.sqrt(ref_se ** 2 + (se if math.isfinite(se) else 0.0) ** 2)
        z = delta / spread if spread > 0 else math.nan
        n = _float(r.get("n"))
        rows.append({
            **{k: r[k] for k in KEYS}, "value": float(r["value"]), "stderr": se, "n": n,
            "reference": float(r["reference"]), "ref_stderr": ref_se,
            "ref_ci_lo": float(r["reference"]) - Z95 * ref_se, "ref_ci_hi": float(r["reference"]) + Z95 * ref_se,
            "ref_n_items": int(r["ref_n_items"]), "ref_samples": int(r["ref_samples"]), "delta": delta, "z": z,
            "outside": bool(math.isfinite(z) and abs(z) > Z95),
            "subset": bool(math.isfinite(n) and n < int(r["ref_n_items"])),
            "source": str(r["source"]), "run": r.get("run", ""),
        })
    return pd.DataFrame(rows, columns=COLUMNS)


def reference_table(summary: pd.DataFrame) -> pd.DataFrame:
    """:func:`reference_rows` formatted for ``report.md``: ``ours ± se`` beside ``published ± se [95% interval]``,
    Δ, a flag, the source."""
    rows = reference_rows(summary)
    if rows.empty:
        return pd.DataFrame()

    def flag(r: Any) -> str:
        marks = (["OUTSIDE the published interval"] if r["outside"] else ["within"]) + (
            [f"subset: {int(r['n'])} of {r['ref_n_items']} items"] if r["subset"] else [])
        return "; ".join(marks)

    return pd.DataFrame({
        "model": rows["model"], "task": rows["task"], "metric": rows["metric"], "group": rows["group"],
        "ours": [_pm(v, s) for v, s in zip(rows["value"], rows["stderr"])],
        "published": [f"{v:.1f} ± {s:.1f} [{lo:.1f}, {hi:.1f}]" for v, s, lo, hi in
                      zip(rows["reference"], rows["ref_stderr"], rows["ref_ci_lo"], rows["ref_ci_hi"])],
        "Δ": [f"{d:+.1f}" for d in rows["delta"]], "check": [flag(r) for _, r in rows.iterrows()],
        "source": rows["source"],
    })


def _pm(value: float, se: float) -> str:
    return f"{value:.1f}" if not math.isfinite(se) else f"{value:.1f} ± {se:.1f}"


def _float(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out
