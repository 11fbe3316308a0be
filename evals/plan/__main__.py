"""``python -m evals.plan [-m] key=value ...``: plan every job of an ``evals.run`` command line (no data, no
weights, no network): ``<out_root>/plan.csv``, the table and its totals; when jobs cannot fit ``plan.memory_gib``,
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

    logging.getLogger("snapstream_core.api").setLevel(logging.ERROR)  # "none keeps the full cache: ... not used"
    try:
        composed = compose_jobs(argv)
        jobs, notes = [], []
        for overrides, container in composed:
            try:  # evals.run's own check: it refuses, so do we (a run-time file not there yet is a note, not a stop)
                found: list[str] = []
                spec = check(OmegaConf.create(container), offline=True, notes=found)
                jobs.append(job_from_spec(spec))
                notes += [f"{' '.join(overrides)}: {note}" for note in found]
            except ValueError as exc:
                raise UserError(f"{' '.join(overrides)}: {exc}") from None
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    memory_gib = float((composed[0][1].get("plan") or {}).get("memory_gib", DEFAULT_MEMORY_GIB))
    planned = plan_jobs(jobs)
    bad = unfit_lines(planned, memory_gib)
    if bad:  # one line per distinct cause; no table of jobs that cannot run, no plan.csv
        for line in bad:
            print(f"error: {line}", file=sys.stderr)
        return 2
    path = write_csv(planned, Path(jobs[0].out_root) / "plan.csv")
    print(render(planned, memory_gib, paper="paper" in composed[0][1]))  # +experiment=paper sets the paper: block
    for note in notes:
        print(f"note: {note}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    from evals.cpus import prepare

    prepare()  # thread counts and passive waiting, before torch loads
    sys.exit(main(sys.argv[1:]))
