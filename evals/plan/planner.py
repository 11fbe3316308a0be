"""A sweep's plan: rows, peak memory and GPU time of every job, and which jobs compute nothing new.

Two kinds of job run once:

- jobs with the same run directory (``none`` at every budget: its knobs are ignored, so its tag and identity do not
  change): Hydra launches each, and every one after the first finds the run complete (resume) and computes nothing;
- jobs whose method keeps every prompt and new token (:func:`evals.plan.job.alias_of`, e.g. SnapKV with a budget
  above the task's longest prompt): token-identical to the full cache, so they point at its rows.

Both have ``same_as`` set to the run directory that holds their rows and cost no GPU time in the totals.
"""

from __future__ import annotations

from dataclasses import dataclass

from evals.plan.cost import Cost, job_cost
from evals.plan.device import GIB, H100, Device
from evals.plan.job import Job, alias_of, check_fits, choose_rows, peak_bytes

SAME_DIR = "same run directory"
KEEPS_ALL = "keeps every token: identical to none"


@dataclass(frozen=True)
class Planned:
    job: Job
    rows: int  # 0: does not fit
    peak_gib: float  # at ``rows`` (at one row when it does not fit)
    cost: Cost | None  # None: it does not fit
    same_as: str = ""  # the run directory whose rows this job's equal ("": it computes its own)
    reason: str = ""
    error: str = ""  # one line, when it does not fit

    @property
    def gpu_hours(self) -> float:
        """Hours this job adds to the sweep (0 when its rows come from another job or it cannot run)."""
        return 0.0 if self.same_as or self.cost is None else self.cost.gpu_hours


def plan_one(job: Job, memory_gib: float | None = None, device: Device = H100) -> Planned:
    try:
        check_fits(job, memory_gib=memory_gib)
    except ValueError as exc:
        return Planned(job, 0, peak_bytes(job, job.rows_request or 1) / GIB, None, error=str(exc))
    rows = choose_rows(job, memory_gib=memory_gib)
    return Planned(job, rows, peak_bytes(job, rows) / GIB, job_cost(job, rows, device))


def plan_jobs(jobs: list[Job], memory_gib: float | None = None, device: Device = H100) -> list[Planned]:
    """Every job planned, in order, with ``same_as`` set on those that compute nothing new."""
    planned = [plan_one(j, memory_gib, device) for j in jobs]
    first: dict[str, int] = {}
    out = []
    for i, p in enumerate(planned):
        if p.job.run_dir in first:
            out.append(_same(p, p.job.run_dir, SAME_DIR))
            continue
        first[p.job.run_dir] = i
        alias = alias_of(p.job, p.job.max_prompt_tokens)
        if alias is not None:
            out.append(_same(p, alias.run_dir, KEEPS_ALL if alias.run_dir in {j.run_dir for j in jobs}
                             else f"{KEEPS_ALL} (not in this sweep)"))
        else:
            out.append(p)
    return out


def _same(p: Planned, run_dir: str, reason: str) -> Planned:
    return Planned(p.job, p.rows, p.peak_gib, p.cost, same_as=run_dir, reason=reason, error=p.error)
