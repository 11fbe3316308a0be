"""Per run, what the system did: throughput (generated tokens ÷ wall time of generation, :mod:`evals.record.throughput`)
with the rows it held, the mean per-sample latency, and whether the method kept every token of every sample
(:mod:`evals.record.geometry`, decided from the method and the measured prompt and generation lengths, for every run,
whether or not its rows carry ``compressed``).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd

from evals.record.files import read_regular
from evals.record.geometry import keeps_every_token
from evals.record.throughput import rate_text, throughput

COLUMNS = ["tokens_per_s", "rows_held", "latency_s_mean", "keeps_all"]


def _one(run_dir: Path) -> dict:
    from evals.report.load import run_meta

    meta = run_meta(run_dir)
    try:
        rows = pd.read_csv(io.BytesIO(read_regular(run_dir / "samples.csv")),
                           usecols=lambda c: c in ("prompt_tokens", "gen_tokens", "latency_s"))
    except (OSError, ValueError):
        rows = pd.DataFrame()
    system = throughput(meta)
    knobs = meta.get("identity", {}).get("compression") if isinstance(meta.get("identity"), dict) else None
    lengths = list(zip(rows["prompt_tokens"], rows["gen_tokens"])) if {"prompt_tokens", "gen_tokens"} <= set(
        rows.columns) else []
    latency = pd.to_numeric(rows["latency_s"], errors="coerce").mean() if "latency_s" in rows else math.nan
    return {"tokens_per_s": system["tokens_per_s"] if system["tokens_per_s"] is not None else math.nan,
            "rows_held": system["rows"], "latency_s_mean": latency,
            "keeps_all": keeps_every_token(knobs, lengths) if isinstance(knobs, dict) else None}


def system_columns(head: pd.DataFrame) -> pd.DataFrame:
    """:data:`COLUMNS` for each run of ``head`` (same index)."""
    return pd.DataFrame([_one(Path(d)) for d in head["run_dir"]], index=head.index, columns=COLUMNS)


def throughput_table(head: pd.DataFrame) -> pd.DataFrame:
    """Per (model, task, task config), the runs that measured throughput, ordered by the KV memory they held: the
    method, its budget, KV held (MiB, mean peak), the rows held at once, generated tokens per wall second and the
    mean latency of one sample. Methods are compared at equal memory by reading across rows of equal KV held."""
    from evals.report.tables import DASH, MIB, fmt, task_title, with_config

    done = with_config(head)[head["tokens_per_s"].notna()] if "tokens_per_s" in head else head.iloc[:0]
    if done.empty:
        return pd.DataFrame()
    done = done.sort_values(["model", "task", "task_config", "mean_kv_bytes_peak"], na_position="first")
    return pd.DataFrame({
        "model": done["model"], "task": [task_title(t, c) for t, c in zip(done["task"], done["task_config"])],
        "method": done["label"], "budget": done["prompt_budget"].map(fmt),
        "KV held (MiB, mean peak)": done["mean_kv_bytes_peak"].map(lambda v: fmt(v / MIB, "MiB")),
        "rows held": done["rows_held"].map(lambda v: DASH if v is None or (isinstance(v, float) and math.isnan(v))
                                           else str(v)),
        "throughput (generated tokens/s, wall)": done["tokens_per_s"].map(rate_text),
        "latency (s per sample, mean)": done["latency_s_mean"].map(lambda v: DASH if pd.isna(v) else f"{v:.3g}"),
    })
