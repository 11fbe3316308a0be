"""``summary.csv``: the task's metric rows, plus the cost figures every run shares, with the run's identity columns."""

from __future__ import annotations

import pandas as pd

from snapstream_core.methods.base import CompressionMethod

SUMMARY_COLUMNS = ["model", "task", "method", "prompt_budget", "recent", "metric", "group", "value", "n"]
IDENTITY_EXTRA = ["window", "kernel", "pooling", "gqa_agg", "sinks", "positions", "run_id"]
RUN_COLUMNS = ["fingerprint"]  # the run's identity hash (evals/identity.py), last, so the report can group by run
FROM_ROWS = ("run_id", "fingerprint")  # one value per run: taken from its rows
COST_METRICS = ("gen_tokens", "kv_tokens_peak", "kv_bytes_peak", "latency_s")


def summarize(task, rows: pd.DataFrame, cfg, method: CompressionMethod) -> pd.DataFrame:
    """Long format, one metric a row: the task's own metrics first, then means of the cost columns."""
    metrics = task.summarize(rows, cfg=cfg.task)
    missing = {"metric", "group", "value", "n"} - set(metrics.columns)
    if missing:
        raise TypeError(f"{task.__name__}.summarize must return columns metric, group, value, n (missing {missing})")
    cost = [
        {"metric": f"mean_{col}", "group": "all", "value": float(pd.to_numeric(rows[col]).mean()), "n": len(rows)}
        for col in COST_METRICS
        if col in rows.columns and rows[col].notna().any()
    ]
    out = pd.concat([metrics[["metric", "group", "value", "n"]], pd.DataFrame(cost)], ignore_index=True)
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
    for key in IDENTITY_EXTRA + RUN_COLUMNS:
        if key in FROM_ROWS:
            out[key] = rows[key].iloc[0] if len(rows) and key in rows.columns else None
        else:
            out[key] = knobs.get(key)
    return out[SUMMARY_COLUMNS + IDENTITY_EXTRA + RUN_COLUMNS]
