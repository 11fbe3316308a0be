"""The power table of ``python -m evals.power``: for every compressed run under a folder with a full-cache reference
(paired as ``python -m evals.report`` pairs them), the items needed to show ``loss < margin``, per samples per item,
beside the benchmark's own size."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from evals.analysis.power import ALPHA, POWER, SAMPLES, exact_items_needed, items_needed, variance_parts
from evals.record.files import read_regular
from evals.report.load import collect, run_meta
from evals.report.paired import correct_values, paired_deltas
from evals.report.tables import headline


def _pilot_diffs(run_dir: str, ref_dir: str, scale: float) -> np.ndarray | None:
    """``(n, k)`` per-sample differences of two runs over the items and sample indices both scored fully."""
    frames = []
    for d in (ref_dir, run_dir):
        data = io.BytesIO(read_regular(Path(d) / "samples.csv"))
        rows = pd.read_csv(data, usecols=["item_id", "sample_idx", "correct"])
        rows["score"] = correct_values(rows["correct"]) * scale
        frames.append(rows.assign(item_id=rows["item_id"].astype(str)).set_index(["item_id", "sample_idx"])["score"])
    both = pd.concat(frames, axis=1, keys=["a", "b"], join="inner")
    if both.empty:
        return None
    wide = (both["b"] - both["a"]).unstack("sample_idx").dropna(axis=1)
    return wide.to_numpy() if wide.shape[1] else None


def power_table(root: Path, margin: float, alpha: float = ALPHA, power: float = POWER,
                true_loss: float = 0.0) -> list[dict]:
    """One row per compressed run under ``root`` with a full-cache reference and samples per item: the items
    needed at each ``k`` of ``SAMPLES`` (and the pilot's own k), beside the benchmark's size."""
    head = headline(collect(root))
    pairs = paired_deltas(head)
    out = []
    for _, pair in pairs.iterrows():
        run = head[head["run"] == pair["run"]].iloc[0]
        ref = head[head["run"] == pair["reference"]].iloc[0]
        diffs = _pilot_diffs(run["run_dir"], ref["run_dir"], 100.0 if run["unit"] == "%" else 1.0)
        if diffs is None or len(diffs) < 2:
            continue
        parts = variance_parts(diffs)
        budget = None if pd.isna(run["prompt_budget"]) else int(run["prompt_budget"])
        base = {"model": run["model"], "task": run["task"], "method": run["label"], "budget": budget,
                "pilot_items": parts.n, "pilot_samples": parts.k, "benchmark_items": benchmark_size(run["run_dir"])}
        scale = 100.0 if run["unit"] == "%" else 1.0
        if parts.k == 1 and np.isin(diffs, (-scale, 0.0, scale)).all():  # one 0/1 verdict per item: the exact test
            share = float((diffs != 0).mean())  # discordant items; the true loss splits them
            p10, p01 = (share + true_loss / scale) / 2, (share - true_loss / scale) / 2
            need = exact_items_needed(min(1.0, p10), max(0.0, p01), margin / scale, alpha, power) if p01 >= 0 else None
            out.append({**base, "samples": 1, "sd": float(diffs.std(ddof=1)), "test": "exact discordant",
                        "items_needed": need})
            continue
        for k in sorted({*SAMPLES, parts.k}):
            if parts.k == 1 and k > 1:
                continue  # one sample per item: no within-item variance to extrapolate from
            sd = parts.sd(k)
            need = items_needed(sd, margin, alpha, power, true_loss) if sd > 0 else None
            out.append({**base, "samples": k, "sd": sd, "test": "paired t", "items_needed": need})
    return out


def benchmark_size(run_dir: str) -> int | None:
    """The benchmark's item count (``task.plan.n_items`` of the run's config, the full set), if known."""
    try:
        return int(run_meta(Path(run_dir))["config"]["task"]["plan"]["n_items"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
