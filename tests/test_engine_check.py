"""bench/engine_check/compare.py: when two engines' greedy tokens differ, a tie is told from a real difference."""

from __future__ import annotations

from bench.engine_check.compare import closest_call, first_difference, summary, verdict


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_identical_tokens_need_no_explanation():
    assert verdict([1, 2], [1, 2], None, None, 0.01).verdict == "identical"


def test_swapped_near_equal_top2_is_a_tie():
    v = verdict([1, 7, 9], [1, 8, 4], [(7, -0.6930), (8, -0.6932)], [(8, -0.6930), (7, -0.6933)], 0.01)
    assert v.verdict == "tie" and v.step == 1 and (v.ours_token, v.vllm_token) == (7, 8)
    assert v.gaps[0] < 0.01 and v.gaps[1] < 0.01


def test_a_wide_gap_or_another_token_on_top_is_unexplained():
    wide = verdict([1, 7], [1, 8], [(7, -0.1), (8, -2.5)], [(8, -0.1), (7, -2.5)], 0.01)
    assert wide.verdict == "UNEXPLAINED" and "gap" in wide.note
    other = verdict([1, 7], [1, 8], [(7, -0.6930), (3, -0.6931)], [(8, -0.6930), (7, -0.6931)], 0.01)
    assert other.verdict == "UNEXPLAINED" and "rank" in other.note
    missing = verdict([1, 7], [1, 8], [(7, -0.6930), (8, -0.6931)], None, 0.01)
    assert missing.verdict == "UNEXPLAINED"


def test_a_prefix_is_a_cut_not_a_tie():
    v = verdict([1, 2], [1, 2, 3], [(3, -0.1), (4, -0.1)], [(3, -0.1), (4, -0.1)], 0.01)
    assert v.verdict == "UNEXPLAINED" and "prefix" in v.note


def test_summary_counts_each_verdict_per_task():
    rows = [{"task": "a", "verdict": "identical", "closest_gap": 0.5},
            {"task": "a", "verdict": "tie", "closest_gap": 0.2},
            {"task": "b", "verdict": "UNEXPLAINED", "closest_gap": None}]
    assert summary(rows) == [
        {"task": "a", "items": 2, "identical": 1, "tie_explained": 1, "unexplained": 0, "closest_gap": 0.2},
        {"task": "b", "items": 1, "identical": 0, "tie_explained": 0, "unexplained": 1, "closest_gap": None}]


def test_the_closest_call_is_the_smallest_gap_before_the_difference():
    top = [[(1, -0.1), (2, -3.0)], [(3, -0.69), (4, -0.70)], [(5, -0.5), (6, -0.5)]]
    step, gap = closest_call(top)
    assert step == 2 and gap == 0.0
    step, gap = closest_call(top, upto=2)  # the step where the engines differ is not counted
    assert step == 1 and abs(gap - 0.01) < 1e-12
    assert closest_call(None) == (None, None)
