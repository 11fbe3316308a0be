"""One allocation of the decode rows per run, second calls included (issue 52.3): LongBench-v2's bound on its CoT
answer call covers the call the task makes (with the run's tokenizer and chat template), the planner plans the same
bound the runner reserves, a CoT run whose answer call is wider than its first call allocates its rows once, and a
request past the reserved bound is refused in one line instead of allocating again."""

from __future__ import annotations

import dataclasses
import json

import pytest

from evals.config.encode import encode_prompt
from evals.config.models import load_tokenizer
from evals.config.spec import check
from evals.execute.backends import make_backend
from evals.execute.backends.base import Request
from evals.execute.prepare import planned_rows
from evals.plan.job import job_from_spec, job_of, peak_bytes
from evals.run import run
from snapstream_core.engine.step import EngineError
from tasks.base import Prompt
from tasks.longbench_v2 import followup, followup_bound, load, prompt
from tasks.protocol import call_extent
from tests.runner_utils import TINY, compose_cfg

# first call 4 new tokens, the answer call 8: the answer call is wider than the first (the old code re-allocated)
COT = ["task=longbench_v2", "task.source=bundled", "task.cot=true", "task.limit=2", "task.max_len=300",
       "task.cot_tokens=4", "task.answer_tokens=8"]


@pytest.fixture(scope="module")
def spec():
    return check(compose_cfg([*TINY, *COT]))


@pytest.fixture(scope="module")
def tokenizer(spec):
    return load_tokenizer(spec.model)


def tokens(tokenizer, spec, p: Prompt) -> int:
    return len(encode_prompt(tokenizer, spec.model, p))


@pytest.mark.parametrize("context", ["long", "short"])
def test_the_bound_covers_the_answer_call_at_the_longest_cot(spec, tokenizer, context):
    """For each bundled item, with a CoT of exactly ``max_new`` tokens of real text: the answer call's prompt (chat
    template included) is within ``followup_bound(first prompt, max_new)``; with a short document the answer call
    is longer than the first prompt, so sizing the rows by the first calls alone would not hold it."""
    task = dict(spec.task)
    max_new = 200
    for item in load(spec.task):
        cot = tokenizer.decode(tokenizer.encode(item.context)[1000:1000 + max_new], skip_special_tokens=True)
        if context == "short":
            item = dataclasses.replace(item, context="A short note.")
        first = tokens(tokenizer, spec, prompt(item, spec.model, cfg=task, tokenizer=tokenizer))
        assert len(tokenizer.encode(cot)) >= max_new - 2
        second, answer_tokens = followup(item, cot, spec.model, cfg=task, tokenizer=tokenizer)
        n = tokens(tokenizer, spec, second)
        bound = followup_bound(first, max_new, spec.model, cfg=task, tokenizer=tokenizer)
        assert bound is not None and n <= bound[0] and bound[1] == answer_tokens == 8
        if context == "short":
            assert n > first  # the second call is the longer one here
        # without a tokenizer (python -m evals.plan) the bound counts the template's bytes: never below
        assert followup_bound(first, max_new, spec.model, cfg=task)[0] >= bound[0]


def test_no_second_call_no_bound(spec):
    assert followup_bound(100, 16, spec.model, cfg={**spec.task, "cot": False}) is None
    thinking = {**spec.model, "thinking": True}
    assert followup_bound(100, 16, thinking, cfg=dict(spec.task)) is None
    assert call_extent(spec.task_module, 100, 16, spec.model, {**spec.task, "cot": False}) == (100, 16)


def test_cot_run_allocates_its_rows_once_within_the_planned_bound(tmp_path, spec, tokenizer):
    out = run(compose_cfg([*TINY, *COT, "gen.compile=false", f"out_root={tmp_path}"]))
    decode = json.loads((out / "meta.json").read_text())["decode_rows"]
    assert decode["engines"] == 1 and decode["kv_allocations"] == 1 and decode["compiles"] == 0
    assert decode["prefills"] == 4  # two first calls, two answer calls
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    # gen.batch_size=1 does not serialise a streaming backend: the two items' calls decode side by side
    assert decode["steps"] <= max(r["gen_tokens"] for r in rows)
    items = {str(i.item_id): i for i in load(spec.task)}
    task = dict(spec.task)
    firsts = [r["prompt_tokens"] for r in rows]
    seconds = [tokens(tokenizer, spec, followup(items[r["item_id"]], r["completions"][0], spec.model, cfg=task,
                                                tokenizer=tokenizer)[0]) for r in rows]
    reserved = call_extent(spec.task_module, max(firsts), 4, spec.model, task, tokenizer)
    assert reserved[1] == 8 and max(seconds) <= reserved[0]
    # the planner sizes the job with the same function, from its own (larger or equal) first-prompt bound
    first_job = job_of(spec.resolved["model"], spec.resolved["task"], spec.method, tag="none", max_new_tokens=4,
                       n_samples=1)  # the first calls alone, as the planner sized them before
    job = job_from_spec(spec, tokenizer=tokenizer)
    assert (job.max_prompt_tokens, job.max_new_tokens) == call_extent(
        spec.task_module, first_job.max_prompt_tokens, 4, spec.model, task, tokenizer)
    assert job.max_new_tokens == 8 and job.slots >= first_job.slots + 8 - 4
    assert max(seconds) <= job.max_prompt_tokens


def test_on_cuda_the_runner_plans_the_bound_with_the_runs_tokenizer(spec, tokenizer):
    """``prepare.planned_rows`` (before weights load) plans the job at the bound, the template counted with the
    run's tokenizer: the peak it quotes is that job's, above the first calls' alone."""
    rows, planned = planned_rows(spec, "cuda")
    job = job_from_spec(spec, tokenizer=tokenizer)
    first_job = job_of(spec.resolved["model"], spec.resolved["task"], spec.method, tag="none", max_new_tokens=4,
                       n_samples=1, sampling=spec.sampling)  # the run's sampling settings, as job_from_spec's
    assert planned == peak_bytes(job, rows) > peak_bytes(first_job, rows)
    assert job.max_prompt_tokens < job_from_spec(spec).max_prompt_tokens  # tokens, not the bytes bound


def test_a_request_past_the_reserved_bound_is_refused_in_one_line(spec):
    backend = make_backend(spec, rows=4, requested=4)
    backend.reserve(12, 4)
    long = Request(item=None, prompt=Prompt("word " * 40), sample_idx=(0,))
    with pytest.raises(EngineError, match="longer than the 12 the rows were planned for") as err:
        backend.generate([long])
    assert "\n" not in str(err.value)
    backend = make_backend(spec, rows=4, requested=4)
    backend.reserve(200, 4)
    wide = Request(item=None, prompt=Prompt("word"), sample_idx=(0,), max_new_tokens=8)
    with pytest.raises(EngineError, match="max_new_tokens=8 is more than the 4"):
        backend.generate([wide])
    assert backend.engine.stats.kv_allocations == 0
