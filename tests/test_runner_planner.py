"""The runner asks the planner before any weights load on CUDA: ``gen.rows=auto`` becomes the most
rows that fit ``plan.memory_gib``, and a job that cannot fit is refused in one line naming the job and its need."""

from __future__ import annotations

import pytest

from evals.config.spec import check
from evals.execute.prepare import planned_rows
from evals.plan import choose_rows, job_from_spec, peak_bytes
from tests.runner_utils import compose_cfg

PAPER_JOB = ["model=r1_distill_llama_8b", "task=aime24", "compression=snapstream", "compression.prompt_budget=1024",
             "gen.n_samples=64"]


def _planned_rows(cfg, *args):
    return planned_rows(check(cfg, offline=True), *args)


def test_on_cuda_auto_rows_are_the_planners_choice_with_its_peak():
    cfg = compose_cfg(PAPER_JOB)
    rows, planned = _planned_rows(cfg, "cuda")
    job = job_from_spec(check(cfg, offline=True))
    assert rows == choose_rows(job) and rows > 8  # a fixed 1k+ring footprint: many rows fit 80 GiB
    assert planned == peak_bytes(job, rows)  # what the engine's out-of-memory line quotes
    assert _planned_rows(compose_cfg([*PAPER_JOB, "plan.memory_gib=40"]), "cuda:0")[0] < rows


def test_on_cuda_a_job_that_cannot_fit_is_refused_before_loading():
    cfg = compose_cfg(["model=llama31_8b_instruct", "task=longbench_v2", "compression=none", "plan.memory_gib=30"])
    with pytest.raises(ValueError, match=r"^plan\.memory_gib: llama31_8b_instruct longbench_v2 .* needs [\d.]+ GiB"):
        _planned_rows(cfg, "cuda")


def test_a_given_row_count_that_cannot_fit_names_gen_rows():
    cfg = compose_cfg(["model=llama31_8b_instruct", "task=longbench_v2", "compression=none", "gen.rows=64"])
    with pytest.raises(ValueError, match=r"^gen\.rows: "):
        _planned_rows(cfg, "cuda")


def test_off_cuda_the_backend_keeps_its_default():
    assert _planned_rows(compose_cfg(PAPER_JOB), "cpu") == (None, None)


NO_PLAN = ["model=llama31_8b_instruct", "task=needle", "~task.plan", "compression=none", "gen.n_samples=8"]


def test_on_cuda_a_task_without_a_plan_block_is_planned_from_its_measured_prompts():
    from evals.plan.measured import plan_block

    cfg = compose_cfg(NO_PLAN)
    assert not cfg.task.get("plan")
    short = _planned_rows(cfg, "cuda", lambda: ([900, 1000, 1100], 0))[0]
    long = _planned_rows(cfg, "cuda", lambda: ([900, 1000, 60_000], 0))[0]
    assert 1 <= long < short <= 3 * 8  # at most the samples; a longer measured prompt leaves fewer rows
    block = plan_block([900, 1000, 60_000])
    assert block["max_prompt_tokens"] == 60_000 and block["n_items"] == 3
    assert sum(g["items"] for g in block["prompt_groups"]) == 3


def test_a_protocol_max_new_tokens_above_gen_sizes_the_rows():
    cfg = compose_cfg(NO_PLAN)
    assert _planned_rows(cfg, "cuda", lambda: ([1000], 100_000))[0] < _planned_rows(cfg, "cuda", lambda: ([1000], 0))[0]
