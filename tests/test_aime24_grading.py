"""AIME grading: last-\\boxed extraction with brace matching, integer + Math-Verify equivalence, garbage safety,
grading off the main thread, and a realistic mix of 1,000 rows."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench.aime_grading import garbage_texts, mixed_rows
from tasks.aime24 import grader
from tasks.aime24.data import Item
from tasks.aime24.grader import canonical_answer, grade, integer_value, last_boxed
from tasks.aime24.verify_worker import WORKER

R1_TAIL = (
    "<think>\nOkay, so I need to find xy. Let me write the equations down.\n...\nSo 4xy = 100, hence xy = 25.\n"
    "</think>\n\nGiven $\\log_x(y^x) = 10$ and $\\log_y(x^{4y}) = 10$:\n\n1. $x \\log_x y = 10$\n"
    "2. $4y \\log_y x = 10$\n\nMultiplying, $4xy = 100$.\n\n**Final Answer**\n\\[\n\\boxed{25}\n\\]"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{204}", "204"),
        ("first \\boxed{12}, then finally \\boxed{204}.", "204"),  # the last box wins
        ("$\\boxed{\\frac{m}{n}}$ with $m+n=\\boxed{\\dfrac{50}{2}}$", "\\dfrac{50}{2}"),  # nested braces
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces are literal
        ("\\boxed { 73 }", "73"),
        ("so the answer is \\boxed 5.", "5"),  # Hendrycks / Math-Verify style argument without braces
        ("$\\boxed 25$", "25"),
        ("\\boxed{204} and then \\boxed{2", None),  # last box never closes (cut): no fallback to an earlier one
        ("\\boxed5", None),
        ("\\boxedanswer{5}", None),
        ("\\fbox{204}", None),  # not an answer marker for Math-Verify / lighteval
        ("\\boxed{}", None),
        ("\\boxed{   }", None),
        ("the answer is 204", None),
        (R1_TAIL.rpartition("</think>")[2], "25"),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "value"),
    [("025", 25), (" 25 ", 25), ("$25$", 25), ("\\text{25}", 25), ("\\textbf{ 204 }", 204), ("25.", 25),
     ("1\\,000", 1000), ("-3", -3), ("25.5", None), ("x=25", None), ("2^5", None), ("9" * 40, None)],
)
def test_integer_value(text, value):
    assert integer_value(text) == value


@pytest.mark.parametrize(
    ("gold", "completion", "prediction", "correct"),
    [
        ("204", "\\boxed{204}", "204", True),
        ("025", "\\boxed{25}", "25", True),
        ("25", "\\boxed{025}", "25", True),
        ("204", "\\boxed{205}", "205", False),
        ("25", "\\boxed{\\dfrac{50}{2}}", "25", True),  # Math-Verify
        ("25", "\\boxed{\\frac{75}{3}}", "25", True),
        ("25", "\\boxed{25.0}", "25", True),
        ("25", "\\boxed{m+n=25}", "25", True),
        ("25", "\\boxed{\\text{25}}", "25", True),
        ("25", "\\boxed{5^2}", "5^2", True),
        ("25", "\\boxed{\\frac{25}{8}}", "\\frac{25}{8}", False),  # answered m/n instead of m+n
        ("25", "\\boxed{25\\%}", "25\\%", False),
        ("25", "no box: 25", None, False),
    ],
)
def test_grade(gold, completion, prediction, correct):
    verdict = grade(gold, completion)
    assert (verdict.prediction, verdict.correct) == (prediction, correct)


def test_canonical_answer():
    assert canonical_answer("025") == "25" and canonical_answer(204) == "204" and canonical_answer("\\pi") == "\\pi"


# -- garbage never raises; 1,000 rows --------------------------------------------------------------------------------

GARBAGE = {**garbage_texts(), "none": None, "not a string": 12345}


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_garbage_gives_no_prediction_and_never_raises(name):
    item = Item(item_id="1", problem="p", answer="204")
    from omegaconf import OmegaConf

    import tasks.aime24 as aime

    result = aime.score(item, GARBAGE[name], cfg=OmegaConf.create({"protocol": "boxed"}))
    assert result["prediction"] is None and result["correct"] is False


def test_a_box_of_undecodable_text_is_a_wrong_but_writable_prediction():
    verdict = grade("204", "\\boxed{\ud800}")
    assert verdict.correct is False and verdict.prediction == verdict.boxed == "?"


def test_grading_1000_rows_of_a_realistic_mix():
    """700 integer answers at the end of long R1-style outputs (every third off by one), 100 distinct non-integer forms
    that need Math-Verify (all equal to the gold), 100 garbage rows, 100 rows cut mid-answer. Its speed is measured
    by ``python -m bench.aime_grading``."""
    from omegaconf import OmegaConf

    import tasks.aime24 as aime

    grader.clear_caches()
    pairs, _, _ = mixed_rows(1000)
    results = aime.score_many(pairs, cfg=OmegaConf.create({"protocol": "boxed"}))
    assert len(results) == 1000
    assert sum(r["prediction"] is None for r in results) == 200
    assert sum(r["correct"] for r in results) == sum(1 for r in range(1000) if r % 10 < 7 and r % 3 != 0) + 100


# -- Math-Verify's signal.alarm: main thread and worker threads ------------------------------------------------------

CASES = [("25", "\\boxed{\\dfrac{50}{2}}", True), ("25", "\\boxed{26}", False), ("204", "\\boxed{x = 204}", True),
         ("33", "\\boxed{\\frac{25}{8}}", False)]


def test_math_verify_from_worker_threads_matches_the_main_thread():
    """Called from a worker thread, math-verify's own parse() raises (signal only works in the main thread); our
    grading runs it in a child process instead and reaches the same verdicts."""
    from math_verify import parse

    with ThreadPoolExecutor(max_workers=1) as pool:
        with pytest.raises(ValueError, match="threaded environment"):
            pool.submit(parse, "\\boxed{\\dfrac{50}{2}}").result()
    grader.clear_caches()
    main = [grade(g, c).correct for g, c, _ in CASES]
    grader.clear_caches()  # no memoised verdicts: the threads must grade for themselves
    with ThreadPoolExecutor(max_workers=2) as pool:
        threaded = list(pool.map(lambda case: grade(case[0], case[1]).correct, CASES))
    assert WORKER.pid is not None  # the child process did the work
    assert main == threaded == [expected for _, _, expected in CASES]


@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_runaway_comparison_times_out_instead_of_hanging(where):
    """9^(9^9) makes sympy's simplification run for a very long time; the alarm (in our main thread, or in the
    grading child process when we are off the main thread) cuts it after grade_timeout_s."""
    grader.clear_caches()
    out = {}

    def run():
        start = time.perf_counter()
        out["verdict"] = grade("204", "\\boxed{9^{9^{9}}}", timeout_s=1)
        out["elapsed"] = time.perf_counter() - start

    if where == "main":
        assert threading.current_thread() is threading.main_thread()
        run()
    else:
        worker = threading.Thread(target=run)
        worker.start()
        worker.join(timeout=120)
        assert not worker.is_alive()
    assert out["verdict"].correct is False and out["verdict"].prediction == "9^{9^{9}}"
    assert out["elapsed"] < 30


def test_a_stalled_child_is_killed_and_replaced(monkeypatch):
    """The parent's backstop: a child that does not answer within 3*timeout+60 s is killed, the row counted wrong,
    and the next call starts a fresh child. (The wait is shortened here by faking select's timeout.)"""
    import select as select_module

    grader.clear_caches()
    WORKER.close()
    monkeypatch.setattr(select_module, "select", lambda r, w, x, timeout: ([], [], []))
    result = {}
    worker = threading.Thread(target=lambda: result.update(v=grade("25", "\\boxed{\\dfrac{50}{2}}")))
    worker.start()
    worker.join(timeout=60)
    assert result["v"].correct is False and WORKER.pid is None
    monkeypatch.undo()
    worker = threading.Thread(target=lambda: result.update(v=grade("25", "\\boxed{\\dfrac{50}{2}}")))
    worker.start()
    worker.join(timeout=60)
    assert result["v"].correct is True and WORKER.pid is not None
