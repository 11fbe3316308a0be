"""The sweep's ETA weighs jobs by their planned work and skips jobs that computed nothing."""

from __future__ import annotations

import json

import pytest

from evals.config.spec import check
from evals.progress import computed_nothing, eta_seconds, job_work
from tests.runner_utils import TINY, compose_cfg


def test_jobs_are_weighed_by_planned_work():
    cfgs = [compose_cfg([*TINY, "task=needle", f"task.limit={n}", f"gen.max_new_tokens={g}"])
            for n, g in ((2, 8), (6, 16))]
    assert job_work([check(cfg, offline=True) for cfg in cfgs]) == [16.0, 96.0]


def test_the_eta_follows_work_not_job_count():
    work = [10.0, 10.0, 100.0, 100.0]
    # two tiny jobs took 20 s: 20 s per 20 units -> 200 units left take 200 s (job counting said 40 s)
    assert eta_seconds(20.0, work, 2, idle=0.0) == pytest.approx(200.0)
    # the first job computed nothing (a complete run): no rate yet, no ETA rather than "0:00"
    assert eta_seconds(0.5, work, 1, idle=10.0) is None
    # then a real job: its time over its own work only
    assert eta_seconds(10.5, work, 2, idle=10.0) == pytest.approx(10.5 / 10 * 200)
    assert eta_seconds(50.0, work, 4, idle=0.0) is None  # nothing left


def test_a_job_whose_rows_came_from_elsewherecomputed_nothing(tmp_path):
    meta = {"status": "complete", "finished": "2026-01-01T00:00:00+00:00", "n_rows": 3}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    assert computed_nothing(tmp_path, since=1e10)  # finished before the job started: nothing to do
    assert not computed_nothing(tmp_path, since=0.0)
    (tmp_path / "meta.json").write_text(json.dumps({**meta, "cached_rows": 3}))
    assert computed_nothing(tmp_path, since=0.0)
    (tmp_path / "meta.json").write_text(json.dumps({**meta, "cached_rows": 1}))
    assert not computed_nothing(tmp_path, since=0.0)
