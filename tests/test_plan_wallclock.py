"""The planner's wall clock on ``plan.gpus`` GPUs with ``plan.shards`` shards per job (evals/plan/wallclock.py):
the schedule's arithmetic, and shards' items and hours on a small grid (the paper grid on 8 GPUs: tests/test_plan.py,
on the paper grid it plans once)."""

from __future__ import annotations

import contextlib
import csv
import io
import re

import pytest

from evals.plan.__main__ import main
from evals.plan.wallclock import Piece, lpt, shard_items

WALL = re.compile(r"wall clock on (\d+) GPU\(s\): ([\d.]+) h for ([\d.]+) GPU-hours")


def planned(args: list[str]) -> tuple[int, str, list[dict]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    root = next(a.split("=", 1)[1] for a in args if a.startswith("out_root="))
    with open(f"{root}/plan.csv") as fh:
        return code, out.getvalue(), list(csv.DictReader(fh))


def test_longest_processing_time_first_is_the_stated_schedule():
    """5, 4, 3, 3, 3 on two GPUs: LPT gives 5+3 and 4+3+3 = 10 (the best is 9: LPT is within 4/3 of it)."""
    finish, loads = lpt([Piece(str(h), h) for h in (3, 5, 3, 4, 3)], 2)
    assert finish == 10 and sorted(loads) == [8, 10]
    assert lpt([Piece("a", 2.0)], 4) == (2.0, (2.0, 0.0, 0.0, 0.0))


def test_shards_take_items_round_robin():
    assert [shard_items(13, k, 2) for k in range(2)] == [7, 6]
    assert [shard_items(3, k, 4) for k in range(4)] == [1, 1, 1, 0]
    assert sum(shard_items(198, k, 8) for k in range(8)) == 198


def test_two_jobs_in_two_shards_on_two_gpus(tmp_path):
    """Each job's two halves (AIME: 30 items, 15 each) cost more than half the job (their own straggler) and less
    than the job; LPT puts one half of each job on each GPU, so the wall clock is the sum of the halves."""
    args = ["-m", "model=r1_distill_llama_8b", "task=aime24", "compression=none,snapstream", f"out_root={tmp_path}"]
    code, text, rows = planned([*args, "plan.gpus=2", "plan.shards=2"])
    assert code == 0
    hours = [float(r["gpu_hours"]) for r in rows]
    halves = [float(r["shard_hours"]) for r in rows]
    assert [int(r["shards"]) for r in rows] == [2, 2]
    assert all(h / 2 < s < h for h, s in zip(hours, halves))
    gpus, wall, gpu_hours = WALL.search(text).groups()
    assert gpus == "2" and float(wall) == pytest.approx(sum(halves), abs=0.06)
    assert float(gpu_hours) == pytest.approx(2 * sum(halves), abs=0.06)
    assert "without shards" in text
    code, text, rows = planned([*args, "plan.gpus=2"])  # one piece per job: each GPU runs one job
    assert float(WALL.search(text).group(2)) == pytest.approx(max(hours), abs=0.06)
    assert [int(r["shards"]) for r in rows] == [1, 1]
