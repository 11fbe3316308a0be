"""The vLLM speed bench compares the same tokens: both sides are fed the job's prompt ids and generate exactly
``max_new_tokens`` per sequence. Our side runs on the tiny random model; vLLM's side needs an interpreter with vLLM
(``VLLM_PYTHON``) and the embedded model, and is skipped without it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bench.vllm_speed import ours
from bench.vllm_speed.common import JOB, digest, fed_problems, result_name
from bench.vllm_speed.prompts import needle_prompts
from bench.vllm_speed.run import methods

REPO = Path(__file__).resolve().parent.parent


def _job(model: str, rows: list[int], names: tuple[str, ...]) -> dict:
    folder, prompts = needle_prompts(model, 128, 3)
    return dict(model=model, model_dir=folder, prompts=prompts, max_new_tokens=5, rows=rows,
                methods={m: k for m, k in methods(64, 8).items() if m in names})  # fmt: skip


def test_our_side_is_fed_the_job_ids_and_generates_the_forced_length(tmp_path):
    job = _job("tiny_llama", [1, 2], ("none", "snapstream"))
    assert len({len(p) for p in job["prompts"]}) >= 1 and all(len(p) > 128 for p in job["prompts"])
    (tmp_path / JOB).write_text(json.dumps(job))
    assert ours.main([str(tmp_path), "--rep", "0"]) == 0
    for method in job["methods"]:
        for rows in job["rows"]:
            result = json.loads((tmp_path / result_name("ours", method, rows, 0)).read_text())
            assert result["fed"] == [digest(p) for p in job["prompts"]]
            assert [len(t) for t in result["tokens"]] == [5, 5, 5]
            assert fed_problems(job, result) == []
            assert 0 < result["prefill_s"] < result["wall_s"]


def test_a_side_fed_other_ids_or_lengths_is_caught():
    job = {"prompts": [[1, 2, 3], [4, 5]], "max_new_tokens": 3}
    good = {"engine": "ours", "method": "none", "rows": 1, "fed": [digest([1, 2, 3]), digest([4, 5])],
            "tokens": [[7, 7, 7], [8, 8, 8]]}  # fmt: skip
    assert fed_problems(job, good) == []
    swapped = {**good, "fed": good["fed"][::-1]}
    assert "prompt ids differ" in fed_problems(job, swapped)[0]
    short = {**good, "tokens": [[7, 7, 7], [8]]}
    assert "not of 3 tokens" in fed_problems(job, short)[0]


VLLM_PYTHON = os.environ.get("VLLM_PYTHON")


@pytest.mark.slow
@pytest.mark.skipif(not (VLLM_PYTHON and Path(VLLM_PYTHON).is_file()),
                    reason="needs VLLM_PYTHON=<an interpreter with vllm> (loading vLLM takes about a minute)")
def test_vllm_side_is_fed_the_same_ids_and_generates_the_same_greedy_tokens(tmp_path):
    job = _job("smollm2_135m", [2], ("none",))
    (tmp_path / JOB).write_text(json.dumps(job))
    assert ours.main([str(tmp_path), "--rep", "0"]) == 0
    proc = subprocess.run([VLLM_PYTHON, str(REPO / "bench" / "vllm_speed" / "theirs.py"), str(tmp_path)],
                          capture_output=True, text=True, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = json.loads((tmp_path / result_name("vllm", "none", 2, 0)).read_text())
    mine = json.loads((tmp_path / result_name("ours", "none", 2, 0)).read_text())
    assert fed_problems(job, theirs) == [] and fed_problems(job, mine) == []
    assert theirs["tokens"] == mine["tokens"]  # fp32 greedy on the full cache: the same tokens
