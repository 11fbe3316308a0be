"""Runs that say what they will cost: one line before a long run generates, from the decode
speed measured on the loaded model; a task's default generation length suits the model."""

from __future__ import annotations

import logging

import pytest

from evals.execute.expected import (
    SHOWN_S,
    Speeds,
    Work,
    announce,
    cost_line,
    decode_tokens_per_s,
    duration,
    prefill_tokens_per_s,
)
from tests.runner_utils import compose_cfg


def test_the_line_counts_prefill_and_decoding_and_shows_past_a_minute():
    fast = Speeds(prefill=1000.0, decode=16.0, rows=3, device="cpu")
    assert cost_line(Work(3, 0, 3, 320), fast) is None  # 60 s of decoding exactly: said by nothing
    # a short generation whose prefill dominates: 6 needle prompts of ~2,100 tokens, 12 new tokens each
    needle = Work(items=6, prompt_tokens=12_600, samples=6, max_new_tokens=12)
    assert cost_line(needle, Speeds(prefill=1000.0, decode=16.0, rows=4, device="cpu")) is None  # 12.6 s + 4.5 s
    line = cost_line(needle, Speeds(prefill=150.0, decode=2.0, rows=4, device="cpu"))  # 84 s + 36 s
    assert line == ("expected: up to 2 min 00 s on cpu, measured now = prefill of 6 prompt(s), 12,600 tokens ÷ 150 "
                    "tokens/s (1 min 24 s) + 6 sample(s) x up to 12 new tokens (gen.max_new_tokens) ÷ 2 tokens/s with "
                    "4 row(s) (36 s); task.limit or gen.max_new_tokens shorten it")
    assert duration(59.6) == "1 min 00 s" and duration(7265) == "2 h 01 min" and duration(SHOWN_S - 15) == "45 s"


class _Backend:
    def __init__(self, model):
        self.model = model


def test_the_speeds_are_measured_on_the_loaded_model_and_announced_once(tiny_model, caplog):
    assert decode_tokens_per_s(tiny_model, rows=4, steps=2) > 0
    assert prefill_tokens_per_s(tiny_model, 64) > 0
    with caplog.at_level(logging.INFO, logger="evals.execute.expected"):
        line = announce(_Backend(tiny_model), Work(10**6, 10**9, 10**6, 32768), rows="auto")
    assert line is not None and line.startswith("expected: up to ")
    assert "prefill of 1000000 prompt(s), 1,000,000,000 tokens" in line
    assert "1000000 sample(s) x up to 32768 new tokens" in line and "with 4 row(s)" in line  # CPU: 4 rows at least
    assert [r.getMessage() for r in caplog.records] == [line]


def test_a_short_run_or_a_backend_without_weights_says_nothing(tiny_model):
    assert announce(_Backend(tiny_model), Work(3, 30, 3, 12), rows=4) is None
    assert announce(_Backend(None), Work(10**6, 10**9, 10**6, 32768), rows=4) is None


@pytest.mark.parametrize("overrides, tokens", [
    (["task=aime24"], 4096),  # the embedded model does not think: a worked solution, not the R1 budget
    (["task=aime24", "model=llama31_8b_instruct"], 4096),
    (["task=aime24", "model=r1_distill_llama_8b"], 32768),  # the R1 protocol
    (["task=aime24", "model=smollm2_135m", "model.thinking=true"], 32768),
    (["+experiment=paper", "task=aime24", "model=llama31_8b_instruct"], 32768),  # the paper grid: lighteval's size
    (["task=aime24", "gen.max_new_tokens=320"], 320),
])
def test_aimes_default_generation_length_suits_the_model(overrides, tokens):
    assert compose_cfg(overrides).gen.max_new_tokens == tokens


def test_the_check_before_a_run_does_not_repeat_the_tasks_log_line(caplog):
    from tasks.aime24 import data

    cfg = compose_cfg(["task=aime24", "task.limit=2"]).task
    with caplog.at_level(logging.INFO, logger="tasks.aime24.data"):
        data.validate(cfg)
        data.load(cfg)
    assert [r.getMessage() for r in caplog.records] == ["aime24: 2 items from bundled"]


@pytest.mark.parametrize("rate, text", [(0.04123, "0.0412"), (0.15, "0.15"), (2.154, "2.15"), (65.94, "65.9"),
                                        (1234.4, "1,234")])
def test_a_throughput_keeps_three_significant_digits(rate, text):
    from evals.report.run_headline import rate_text

    assert rate_text(rate) == text
