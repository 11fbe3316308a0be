"""One writer per run directory: a run holds the directory's lock, and parallel launchers never write a row twice.

``compression=none`` swept over two budgets is one run (same identity, one directory): under ``joblib`` its two jobs
contend for the directory's lock; the second waits, then resumes with nothing to go. ``submitit_local`` starts one
Python process per job, so it sweeps two of the methods (3 runs, ``none`` still contended) and ``joblib`` all four.
"""

from __future__ import annotations

import fcntl
import json
import os

import pandas as pd
import pytest

from tests.runner_utils import TINY, cli

N_ITEMS = 2
SWEEP = [*TINY, "task=needle", "task.context_tokens=128", f"task.n_items={N_ITEMS}", "gen.max_new_tokens=2",
         "compression.prompt_budget=64,96"]  # a knob only some methods read (window) would be refused for the others


@pytest.mark.parametrize(
    "launcher,methods,n_runs",
    [
        # none is one run for both budgets; every other method one run per budget
        (["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], "none,snapkv", 3),
        (["hydra/launcher=submitit_local"], "none,snapstream", 3),
    ],
)
def test_a_parallel_sweep_writes_every_row_once(tmp_path, launcher, methods, n_runs):
    res = cli(["-m", *SWEEP, f"compression={methods}", *launcher, f"out_root={tmp_path}"], timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    runs = sorted(p.parent for p in tmp_path.rglob("summary.csv"))
    assert len(runs) == n_runs
    for run in runs:
        rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
        keys = [(r["item_id"], r["sample_idx"]) for r in rows]
        assert len(keys) == len(set(keys)) == N_ITEMS, run
        summary = pd.read_csv(run / "summary.csv")
        assert (summary.loc[summary["metric"] == "accuracy", "n"] == N_ITEMS).all(), run
        assert json.loads((run / "meta.json").read_text())["status"] == "complete"


def test_a_run_directory_has_one_writer_at_a_time(tmp_path):
    from evals.record.rundir import LOCK, run_lock

    with run_lock(tmp_path):
        fd = os.open(tmp_path / LOCK, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a second job meets: it waits
        finally:
            os.close(fd)
    fd = os.open(tmp_path / LOCK, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the run ends
    os.close(fd)
