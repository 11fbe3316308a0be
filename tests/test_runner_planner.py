"""The runner asks the planner before any weights load on CUDA (issue 28 item 6): ``gen.rows=auto`` becomes the most
rows that fit ``plan.memory_gib``, and a job that cannot fit is refused in one line naming the job and its need."""

from __future__ import annotations

import pytest

from evals.plan import choose_rows
from evals.runner import _planned_rows
from tests.runner_utils import compose_cfg

PAPER_JOB = ["model=r1_distill_llama_8b", "task=aime24", "compression=snapstream", "compression.prompt_budget=1024",
             "gen.n_samples=64"]


def test_on_cuda_auto_rows_are_the_planners_choice():
    cfg = compose_cfg(PAPER_JOB)
    rows = _planned_rows(cfg, "cuda")
    assert rows == choose_rows(cfg) and rows > 8  # a fixed 1k+ring footprint: many rows fit 80 GiB
    assert _planned_rows(compose_cfg([*PAPER_JOB, "plan.memory_gib=40"]), "cuda:0") < rows


def test_on_cuda_a_job_that_cannot_fit_is_refused_before_loading():
    cfg = compose_cfg(["model=llama31_8b_instruct", "task=longbench_v2", "compression=none", "plan.memory_gib=30"])
    with pytest.raises(ValueError, match=r"^plan\.memory_gib: llama31_8b_instruct longbench_v2 .* needs [\d.]+ GiB"):
        _planned_rows(cfg, "cuda")


def test_a_given_row_count_that_cannot_fit_names_gen_rows():
    cfg = compose_cfg(["model=llama31_8b_instruct", "task=longbench_v2", "compression=none", "gen.rows=64"])
    with pytest.raises(ValueError, match=r"^gen\.rows: "):
        _planned_rows(cfg, "cuda")


def test_off_cuda_the_backend_keeps_its_default():
    assert _planned_rows(compose_cfg(PAPER_JOB), "cpu") is None
