"""Time of ``evals.analysis.summary.with_uncertainty`` (the bootstrap of ``summary.csv``) per task, on a 2-item and a
200-item run, by the per-resample path (``fast=False``: the task's ``summarize`` on each of the 200 resamples, what
every run paid before the ``item_terms`` hook) and by the fast path (one matrix product over the resamples' item
counts); the largest difference between the two tables' ``value, stderr, ci_lo, ci_hi`` is written beside.

Rows are synthetic but shaped as each task's (breakdown columns, samples per item, the behaviour columns).

    python -m bench.summary_bootstrap            # -> bench/results/summary_bootstrap.csv
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from bench.rows_csv import write_rows

log = logging.getLogger("bench.summary_bootstrap")
OUT = Path(__file__).resolve().parent / "results" / "summary_bootstrap.csv"
SAMPLES = {"needle": 1, "longbench_v2": 1, "aime24": 4, "livecodebench": 4}
TASK_CFG = {"livecodebench": {"pass_k": [1, 2, 4]}}


def make_rows(task: str, n_items: int, seed: int = 0) -> pd.DataFrame:
    """``n_items`` items of ``task`` with ``SAMPLES[task]`` rows each: its breakdown and score columns plus
    ``gen_tokens, finish_reason, truncated, kv_tokens_peak, latency_s``."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_items):
        for s in range(SAMPLES[task]):
            ok = bool(rng.random() < 0.5)
            row = {"item_id": f"{task}-{i}", "sample_idx": s, "correct": ok, "prediction": "7" if ok else None,
                   "answer": "7", "gen_tokens": int(rng.integers(10, 500)),
                   "finish_reason": "length" if rng.random() < 0.2 else "stop", "truncated": False,
                   "kv_tokens_peak": int(rng.integers(100, 1000)), "latency_s": float(rng.random())}
            if task == "needle":
                row |= {"depth": (i % 10) / 9, "answer": "4817263", "prediction": "4817263" if ok else "48172"}
            elif task == "longbench_v2":
                row |= {"difficulty": ["easy", "hard"][i % 2], "length": ["short", "medium", "long"][i % 3],
                        "domain": f"domain {i % 6}", "prediction": "A" if rng.random() < 0.9 else None}
            elif task == "aime24":
                row |= {"exam": ["2024-I", "2024-II"][i % 2]}
            else:
                row |= {"difficulty": ["easy", "medium", "hard"][i % 3], "platform": ["leetcode", "atcoder"][i % 2],
                        "outcome": "passed" if ok else ["wrong_answer", "timeout", "runtime_error"][i % 3]}
            out.append(row)
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", default="2,200", help="comma list of item counts")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from evals.analysis.summary import BOOTSTRAP_ITERS, SummaryContext, with_uncertainty
    from tasks import get_task

    stamp, results = datetime.now().isoformat(timespec="seconds"), []
    for name in SAMPLES:
        task = get_task(name)
        ctx = SummaryContext(task_cfg=OmegaConf.create({"name": name, **TASK_CFG.get(name, {})}))
        for n_items in (int(n) for n in args.items.split(",")):
            rows = make_rows(name, n_items)
            seconds, tables = {}, {}
            for path, fast in (("per_resample", False), ("fast", True)):
                start = time.perf_counter()
                tables[path] = with_uncertainty(task, rows, ctx, fast=fast)
                seconds[path] = time.perf_counter() - start
            cols = ["value", "stderr", "ci_lo", "ci_hi"]
            fast, slow = (tables[p][cols].to_numpy(float) for p in ("fast", "per_resample"))
            diff = np.nanmax(np.abs(fast - slow))
            results.append({"date": stamp, "task": name, "items": n_items, "rows": len(rows),
                            "iters": BOOTSTRAP_ITERS, "per_resample_s": round(seconds["per_resample"], 3),
                            "fast_s": round(seconds["fast"], 4),
                            "speedup": round(seconds["per_resample"] / seconds["fast"], 1),
                            "max_abs_diff": float(diff), "load_avg_1m": round(os.getloadavg()[0], 2)})
            log.info("%s, %d items: %.2f s per resample path, %.3f s fast (max diff %.1e)", name, n_items,
                     seconds["per_resample"], seconds["fast"], diff)
    write_rows(args.out, results)
    log.info("-> %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
