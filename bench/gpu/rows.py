"""A stage's rows by the planner (:mod:`evals.plan`, no hydra): the job the stage stands for, the rows it gets."""

from __future__ import annotations

from bench.gpu.model import model_node
from bench.gpu.shapes import GIB


def plan_job(model, compression: dict, prompt: int, new_tokens: int, samples: int, memory_gib: float):
    """The planner's job for ``samples`` samples of one ``prompt``-token prompt."""
    from evals.plan import job_of
    from snapstream_core import compression_from_config

    plan = {"n_items": 1, "prompt_groups": [{"items": 1, "tokens": prompt}], "max_prompt_tokens": prompt,
            "gen_fraction": {"default": 1.0}}
    method = compression_from_config(dict(compression))
    return job_of(model_node(model), {"name": "gpu_check", "plan": plan}, method,
                  tag=str(compression.get("tag", method.method)), max_new_tokens=new_tokens, n_samples=samples,
                  memory_gib=memory_gib)


def plan_rows(ctx) -> tuple[int, int]:
    """(rows, prompt) of the stage: the planner's rows for the job, fewer when the stage's own (longer) prompt needs
    it, at most ``--max-rows``; ``equal_memory_snapstream`` takes the rows that fit the full cache's planned peak.
    Puts the figures in the stage's record."""
    from evals.plan import choose_rows, peak_bytes

    s, a = ctx.shape, ctx.args
    job = plan_job(ctx.model, s.compression, s.job_prompt, s.job_new, s.job_samples, a.memory_gib)
    prompt = job.slots - s.steps if s.fill_to_job_slots else s.prompt
    if ctx.name == "equal_memory_snapstream" and "full_peak_bytes" in ctx.context:
        shapes = plan_job(ctx.model, s.compression, prompt, s.steps + 1, s.job_samples, a.memory_gib)
        planner_rows = 1
        while planner_rows < s.job_samples and peak_bytes(shapes, planner_rows + 1) <= ctx.context["full_peak_bytes"]:
            planner_rows += 1
    else:
        planner_rows = choose_rows(job, memory_gib=a.memory_gib, usable=ctx.usable)
    run_job = plan_job(ctx.model, s.compression, prompt, s.steps + 1, planner_rows, a.memory_gib)
    rows = min(planner_rows, choose_rows(run_job, memory_gib=a.memory_gib, usable=ctx.usable),
               a.max_rows or planner_rows)
    shapes = plan_job(ctx.model, s.compression, prompt, s.steps + 1, rows, a.memory_gib)
    planned = peak_bytes(shapes, rows)
    ctx.put(planner_rows=planner_rows, rows=rows, prompt=prompt, steps=s.steps, peak_planned_gib=planned / GIB,
            planned_bytes=planned)
    return rows, prompt
