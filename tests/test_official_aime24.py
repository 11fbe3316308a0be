"""AIME graded as lighteval's aime24 metric grades (``task.protocol=lighteval``, the default), on a battery of 48
completions whose verdicts were measured with lighteval's own metric code (``PassAtK(k=1)`` over
``MultilingualExtractiveMatchMetric``, ``remove_reasoning_tags`` on) from huggingface/lighteval 3fd1526:
``tests/data/aime24_lighteval_battery.jsonl``. The stricter ``boxed`` protocol stays available."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import tasks.aime24 as aime
from tasks.aime24.data import Item
from tasks.base import iter_jsonl

BATTERY = [rec for _, rec in iter_jsonl(Path(__file__).parent / "data" / "aime24_lighteval_battery.jsonl")]


def cfg(**kw):
    return OmegaConf.create({"grade_timeout_s": 5, **kw})


def item(gold: str) -> Item:
    return Item(item_id="2024-I-1", problem="p", answer=gold)


def test_battery_covers_the_required_kinds():
    assert len(BATTERY) >= 40
    names = " ".join(c["case"] for c in BATTERY)
    for kind in ("boxed", "unboxed", "LaTeX", "fraction", "unclosed", "two boxes", "several numbers"):
        assert kind in names, kind
    assert {c["lighteval_correct"] for c in BATTERY} == {True, False}


@pytest.mark.parametrize("case", BATTERY, ids=[c["case"] for c in BATTERY])
def test_default_protocol_grades_as_lighteval(case):
    text, _closed = aime.answer_part(case["completion"], True, cfg=cfg())
    scored = aime.score(item(case["gold"]), text, cfg=cfg())
    assert scored["correct"] is case["lighteval_correct"]
    assert scored["protocol"] == "lighteval"


def test_off_main_thread_gives_the_same_verdicts():
    """A grader called from a worker thread (Math-Verify's alarms need a main thread) goes through the child."""
    picked = BATTERY[:6]
    got: list[bool] = []
    worker = threading.Thread(
        target=lambda: got.extend(aime.score(item(c["gold"]), c["completion"], cfg=cfg())["correct"] for c in picked))
    worker.start()
    worker.join(120)
    assert got == [c["lighteval_correct"] for c in picked]


def test_unclosed_thinking_counts_under_lighteval_not_under_boxed():
    completion = "<think>Let me compute. m+n = 25. I am still thinking"
    text, closed = aime.answer_part(completion, True, cfg=cfg())
    assert closed is False and aime.score(item("25"), text, cfg=cfg())["correct"] is True
    text, closed = aime.answer_part(completion, True, cfg=cfg(protocol="boxed"))
    strict = aime.score(item("25"), text, cfg=cfg(protocol="boxed"))
    assert closed is False and strict["correct"] is False and strict["protocol"] == "boxed"


def test_boxed_protocol_needs_a_box():
    assert aime.score(item("25"), "Thus m+n = 25.", cfg=cfg(protocol="boxed"))["correct"] is False
    assert aime.score(item("25"), "Thus m+n = 25.", cfg=cfg())["correct"] is True


def test_unknown_protocol_is_refused():
    with pytest.raises(ValueError, match="task.protocol"):
        aime.protocol_name(cfg(protocol="open-r1"))


def test_hostile_text_never_raises_under_lighteval():
    """Garbage (100 kB of text, unbalanced braces, NUL bytes, lone surrogates) is wrong, never an exception; time is
    bounded by Math-Verify's own per-parse timeout (the 10k-character box that needs it is left out for speed)."""
    from bench.aime_grading import garbage_texts

    for name, text in garbage_texts().items():
        if name == "huge box":
            continue
        result = aime.score(item("204"), text, cfg=cfg())
        assert result["correct"] is False, name
    assert aime.score(item("204"), None, cfg=cfg())["correct"] is False
