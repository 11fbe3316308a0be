"""``python -m evals.plan [-m] key=value ...``: plan every job of an ``evals.run`` command line (no data, no
weights, no network): ``<out_root>/plan.csv``, the table and its totals, and the grid's wall clock on ``plan.gpus``
GPUs with ``plan.shards`` shards per job (:mod:`evals.plan.wallclock`); when jobs cannot fit ``plan.memory_gib``,
exit 2 with one line per distinct cause (:mod:`evals.plan.unfit`) and no table."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

USAGE = __doc__


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    from omegaconf import OmegaConf

    from evals.config.overrides import UserError
    from evals.config.spec import check
    from evals.plan.grid import compose_jobs
    from evals.plan.job import DEFAULT_MEMORY_GIB, job_from_spec
    from evals.plan.planner import plan_jobs
    from evals.plan.table import render, write_csv
    from evals.plan.unfit import unfit_lines
    from evals.plan.wallclock import wall_clock

    logging.getLogger("snapstream_core.api").setLevel(logging.ERROR)  # "none keeps the full cache: ... not used"
    try:
        composed = compose_jobs(argv)
        jobs, notes = [], []
        for overrides, container in composed:
            try:  # evals.run's own check: it refuses, so do we (plan.gpus and plan.shards are ours; a run-time file
                # not there yet is a note, not a stop)
                found: list[str] = []
                spec = check(OmegaConf.create(container), offline=True, planning=True, notes=found)
                jobs.append(job_from_spec(spec))
                notes += [f"{' '.join(overrides)}: {note}" for note in found]
            except ValueError as exc:
                raise UserError(f"{' '.join(overrides)}: {exc}") from None
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    knobs = composed[0][1].get("plan") or {}
    memory_gib = float(knobs.get("memory_gib", DEFAULT_MEMORY_GIB))
    gpus, shards = int(knobs.get("gpus") or 1), knobs.get("shards") or 1  # checked by check(): >= 1, or auto
    planned = plan_jobs(jobs)
    bad = unfit_lines(planned, memory_gib)
    if bad:  # one line per distinct cause; no table of jobs that cannot run, no plan.csv
        for line in bad:
            print(f"error: {line}", file=sys.stderr)
        return 2
    wall = wall_clock(planned, gpus, shards)
    unsharded = wall_clock(planned, gpus, 1).hours if shards != 1 else None
    path = write_csv(planned, Path(jobs[0].out_root) / "plan.csv", wall)
    print(render(planned, memory_gib, wall, shards, unsharded,
                 paper="paper" in composed[0][1]))  # +experiment=paper sets the paper: block
    for note in notes:
        print(f"note: {note}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    from evals.cpus import prepare

    prepare()  # thread counts and passive waiting, before torch loads
    sys.exit(main(sys.argv[1:]))
