"""The work a command line asks for, in one line printed before the first job starts (no data read, no weights).

From each job's checked spec, as the planner reads it (:func:`evals.plan.job.job_from_spec`: the task's
``plan`` block and ``task.limit``): the samples (items x ``gen.n_samples``), the prompt tokens to prefill and the
new tokens at most, and the planner's GPU time (``python -m evals.plan`` prints the table). So a slip such as
``task.n_items=1000000`` shows its size at once, not after hours. Printed for large command lines only
(:data:`SHOWN_SAMPLES`); jobs whose task has no ``plan`` block are counted as jobs only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evals.plan.cost import mean_prompt_tokens
from evals.plan.job import job_from_spec
from evals.plan.planner import plan_jobs

if TYPE_CHECKING:  # the spec module reads OmegaConf; the planner imports without it
    from evals.config.spec import RunSpec

SHOWN_SAMPLES = 10_000  # a command line with fewer samples than this prints nothing (a few minutes of work at most)
LARGE_SAMPLES = 100_000  # beyond this, the line says how to stop and what to check


def estimate(specs: list[RunSpec]) -> str | None:
    """The line for the jobs of ``specs``, or None when there is no job or fewer than :data:`SHOWN_SAMPLES` samples
    in all."""
    if not specs:
        return None
    jobs = []
    for spec in specs:
        try:
            jobs.append(job_from_spec(spec))
        except (ValueError, KeyError, TypeError):  # no plan block, a model without a shape: not estimated
            continue
    n = len(specs)
    head = f"work: {n} job{'s' if n != 1 else ''}"
    samples = sum(j.total_samples for j in jobs)
    if samples < SHOWN_SAMPLES:
        return None
    items = sum(j.n_items for j in jobs)
    prompt = sum(j.n_items * mean_prompt_tokens(j) for j in jobs)
    new = sum(j.total_samples * j.max_new_tokens for j in jobs)
    try:
        planned = plan_jobs(jobs)
        hours = sum(p.gpu_hours for p in planned)
        gpu = f"; the planner's estimate: {_hours(hours)} on one H100 (python -m evals.plan prints the table)"
    except (ValueError, KeyError, TypeError, ZeroDivisionError):
        gpu = ""
    counted = "" if len(jobs) == n else f" ({len(jobs)} estimated)"
    line = (f"{head}{counted}: {samples:,} samples of {items:,} items, ~{_tokens(prompt)} prompt tokens to prefill, "
            f"at most {_tokens(new)} new tokens{gpu}")
    if samples > LARGE_SAMPLES:
        line += f"; more than {LARGE_SAMPLES:,} samples: check task.limit / task.n_items (Ctrl-C stops, rows kept)"
    return line


def _tokens(count: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if count >= size:
            return f"{count / size:.3g}{unit}"
    return f"{count:.0f}"


def _hours(hours: float) -> str:
    if hours < 1 / 60:
        return f"{hours * 3600:.0f} s"
    if hours < 1:
        return f"{hours * 60:.0f} min"
    return f"{hours:,.1f} h"
