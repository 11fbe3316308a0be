"""What ``python -m evals.plan`` prints when jobs cannot fit: one line per distinct cause, not one per job.

Causes, most general first: a model whose weights alone exceed what a job may hold (every job of that model fails,
whatever its task or method); then, per (model, task), the jobs whose prompt, rows and slots need more than allowed,
with their count and the largest need (a cause of one run: that run's own line). Jobs that share a run directory
count once.
"""

from __future__ import annotations

from collections import defaultdict

from evals.plan.device import GIB
from evals.plan.job import job_budget, peak_bytes
from evals.plan.planner import Planned


def unfit_lines(planned: list[Planned], memory_gib: float) -> list[str]:
    """One ``plan.memory_gib: ...`` (or ``gen.rows: ...``) line per distinct cause among the jobs that do not fit."""
    unfit = {p.job.run_dir: p for p in planned if p.error}.values()  # one per run directory
    where = f"plan.memory_gib={memory_gib:g}"
    lines: list[str] = []
    by_model: dict[str, list[Planned]] = defaultdict(list)
    for p in unfit:
        by_model[p.job.model].append(p)
    for model, jobs in by_model.items():
        allowed = job_budget(jobs[0].job)
        weights = jobs[0].job.shape.weight_bytes
        if weights > allowed:
            lines.append(f"plan.memory_gib: the weights of {model} alone are {weights / GIB:.1f} GiB > "
                         f"{allowed / GIB:.1f} GiB allowed of {where}: none of its {len(jobs)} run(s) can fit")
            continue
        by_task: dict[tuple[str, str], list[Planned]] = defaultdict(list)
        for p in jobs:
            by_task[(p.job.task, "gen.rows" if p.job.rows_request else "plan.memory_gib")].append(p)
        for (task, key), group in by_task.items():
            if len(group) == 1:
                lines.append(group[0].error)
                continue
            worst = max(group, key=lambda p: peak_bytes(p.job, p.job.rows_request or 1))
            need = peak_bytes(worst.job, worst.job.rows_request or 1)
            rows = worst.job.rows_request or 1
            lines.append(f"{key}: {len(group)} run(s) of {model} on {task} need up to {need / GIB:.1f} GiB at "
                         f"{rows} row(s) (largest: {worst.job.label}, prompt {worst.job.max_prompt_tokens} tokens, "
                         f"weights {weights / GIB:.1f} GiB) > {allowed / GIB:.1f} GiB allowed of {where}")
    return lines
