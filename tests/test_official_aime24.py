"""AIME graded as lighteval 0.13.0's aime24 metric grades (``task.protocol=lighteval``, the default), on a battery of
177 completions whose verdicts were measured with lighteval 0.13.0's own metric code run unmodified (``PassAtK(k=1)``
over ``MultilingualExtractiveMatchMetric``, ``remove_reasoning_tags`` on, ``latex2sympy2_extended==1.0.6``):
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


def test_last_box_wins_as_in_lighteval_0130():
    """latex2sympy2_extended 1.0.6 (lighteval 0.13.0's pin) keeps an earlier box only across a bare separator; the
    ``math-verify-0.9.0`` variant joins boxes 'First \\boxed{24}, then corrected: \\boxed{25}' into {24, 25}."""
    text = "First \\boxed{24}, then corrected: \\boxed{25}"
    assert aime.score(item("25"), text, cfg=cfg())["correct"] is True
    assert aime.score(item("25"), text, cfg=cfg(grader_version="math-verify-0.9.0"))["correct"] is False
    assert aime.score(item("25"), "\\boxed{24} and \\boxed{25}", cfg=cfg())["correct"] is False  # a set of two


def test_boxes_kept_follows_the_106_separator_rule():
    from tasks.aime24.lighteval_metric import boxes_kept

    assert boxes_kept("\\boxed{1}, \\boxed{2}") == ["1", "2"]
    assert boxes_kept("\\boxed{1} or \\boxed{2}") == ["1", "2"]
    assert boxes_kept("\\boxed{1}\\quad\\boxed{2}") == ["2"]
    assert boxes_kept("\\boxed{1}. So \\boxed{2}") == ["2"]
    assert boxes_kept("no box") is None
    assert boxes_kept("\\boxed{2") is None


def test_open_r1_variant_keeps_the_thinking():
    """open-r1's pinned lighteval (d3da6b9) removes no reasoning tags: a box inside the thinking is read when it is
    the rightmost match; 0.13.0 cuts the thinking first."""
    text = "<think>so \\boxed{25}</think> The answer is 24."
    assert aime.score(item("25"), text, cfg=cfg())["correct"] is False
    assert aime.score(item("25"), text, cfg=cfg(grader_version="open-r1"))["correct"] is True


def test_unknown_grader_version_is_refused():
    with pytest.raises(ValueError, match="task.grader_version"):
        aime.grader_version(cfg(grader_version="lighteval-9"))


def test_grader_library_warnings_are_logged_once(caplog):
    """latex2sympy2_extended logs a deprecation warning per graded answer; it reaches the log once per process."""
    import logging

    with caplog.at_level(logging.WARNING):
        for gold in ("25", "26", "27", "28"):
            aime.score(item(gold), f"The answer is \\boxed{{{gold}}}.", cfg=cfg())
    repeated = [r for r in caplog.records if "deprecated" in r.getMessage()]
    assert len(repeated) <= 1


# latex2sympy2_extended 1.0.6 parses \boxed{116\%} as 1.16 (wrong, the search stops); the 1.11 we run cannot parse
# it, so with the thinking kept (open-r1) the search goes on to the "116" in the thinking. The one case that differs.
OPEN_R1_KNOWN = {"34.2: \\boxed{{{g}\\%}}"}


@pytest.mark.parametrize("case", BATTERY, ids=[c["case"] for c in BATTERY])
def test_open_r1_variant_grades_as_its_pinned_lighteval(case):
    if case["case"] in OPEN_R1_KNOWN:
        pytest.xfail("percent of an integer: see OPEN_R1_KNOWN")
    c = cfg(grader_version="open-r1")
    text, _closed = aime.answer_part(case["completion"], True, cfg=c)
    assert aime.score(item(case["gold"]), text, cfg=c)["correct"] is case["openr1_correct"]
