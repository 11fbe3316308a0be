"""LiveCodeBench grading: official comparison semantics, reference/wrong/slow solutions in every isolation mode,
named outcomes, and the metrics of a replayed run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from lcb_helpers import MODES, bundled, cfg_for, fenced, make_problem, settings_for
from lcb_sample_source import REFERENCE, SLOW, WRONG

import tasks.livecodebench as lcb
from tasks.livecodebench.grader import grade, stdout_matches

REPLAY = Path(__file__).resolve().parent / "data" / "livecodebench_replay.jsonl"


@pytest.mark.parametrize("actual, expected, ok", [
    ("6\n", "6\n", True),
    ("  6  \n\n", "6", True),  # whole text and each line stripped
    ("1 2\n3\n", "1 2\n3", True),
    ("4.0\n", "4\n", True),  # a differing line is retried as Decimals
    ("2.50 1e2\n", "2.5 100\n", True),
    ("2.5000001\n", "2.5\n", False),
    ("1 2\n", "1 2\n3\n", False),  # line counts must agree
    ("1  2\n", "1 2\n", True),  # Decimal retry splits on any whitespace
    ("yes\n", "Yes\n", False),  # no case folding
    ("nan\n", "nan\n", True),  # equal text before any number parsing
    ("nan 1\n", "NaN 1\n", False),  # Decimal NaN never equals
    ("", "0\n", False),
])
def test_stdout_comparison_is_the_official_one(actual, expected, ok):
    assert stdout_matches(actual, expected) is ok


@pytest.mark.parametrize("mode", MODES)
def test_reference_solutions_pass_wrong_and_slow_fail_with_the_right_outcome(mode):
    probs = bundled()
    pairs = [(probs[q], fenced(code)) for q, code in REFERENCE.items()]
    pairs += [(probs[q], fenced(code)) for q, code in WRONG.items()]
    pairs += [(probs[q], fenced(code)) for q, code in SLOW.items()]
    results = lcb.score_many(pairs, cfg=cfg_for(mode))
    got = [(p.item_id, p.kind, r["outcome"]) for (p, _), r in zip(pairs, results)]
    assert got == [(q, probs[q].kind, "passed") for q in REFERENCE] + [
        ("ss_atcoder_001", "stdin", "wrong_answer"), ("ss_leetcode_002", "functional", "wrong_answer"),
        ("ss_codeforces_001", "stdin", "timeout"), ("ss_leetcode_002", "functional", "timeout")]
    for r in results[: len(REFERENCE)]:
        assert r["correct"] is True and r["tests_passed"] == r["tests_total"] and r["sandbox"] == mode
        assert r["prediction"].startswith(("n = ", "import", "class"))
    wrong_stdin, wrong_func, slow_stdin, slow_func = results[len(REFERENCE):]
    assert wrong_stdin["error"] == "test 0: got '9', expected '6'" and wrong_func["failed_test"] == 0
    assert (slow_stdin["failed_test"], slow_stdin["tests_passed"]) == (4, 4)  # the large private test
    assert (slow_func["failed_test"], slow_func["tests_passed"]) == (4, 4)
    assert 1.5 <= slow_func["exec_time_s"] < 6  # killed at the per-test deadline


ECHO = make_problem("echo", [("3\n", "6\n"), ("5\n", "10\n")])
ADD = make_problem("add", [("1\n2", "3"), ("[1]\n[2]", "[1, 2]")], func_name="add")


@pytest.mark.parametrize("problem, code, outcome, error", [
    (ECHO, "print(int(input()) * 2", "compile_error", "SyntaxError"),
    (ECHO, "print(1 // 0)", "runtime_error", "test 0: ZeroDivisionError"),
    (ECHO, "import os\nos._exit(3)", "runtime_error", "test 0: crashed: exited with status 3"),
    (ECHO, "import numpy_that_does_not_exist", "runtime_error", "ModuleNotFoundError"),
    (ECHO, "x = int(input())\nprint(x * 2)\nexit()", "passed", None),  # SystemExit ends a test normally
    (ECHO, "def main():\n    print(int(input()) * 2)\n\nif __name__ == '__main__':\n    main()", "passed", None),
    # task.protocol=lcb_runner (default): stdout is a string buffer and fd 0 is empty, as in lcb_runner's run_test
    (ECHO, "import sys\nsys.stdout.buffer.write(str(2 * int(sys.stdin.buffer.readline())).encode())",
     "runtime_error", "AttributeError"),
    (ECHO, "n = int(open(0).read())\nprint(n + n)", "runtime_error", "ValueError"),
    (ECHO, "print(Counter([1, 1])[1] * int(input()))", "passed", None),  # lcb_runner's star-import prelude
    (ADD, "def add(a, b):\n    return a + b", "passed", None),  # a plain function when there is no Solution
    (ADD, "class Solution:\n    def add(self, a, b):\n        return tuple([a + b]) if a == 1 else a + b",
     "wrong_answer", "test 0: got [3], expected 3"),
    (ADD, "class Solution:\n    def add(self, a, b):\n        return (a + b) if a == 1 else tuple(a + b)", "passed",
     None),  # a returned tuple counts as a list
    (ADD, "class Solution:\n    def add(self, a, b):\n        return (a + b) if a == 1 else [tuple(a + b)]",
     "wrong_answer", "test 1"),  # a nested tuple does not
    (ADD, "class Any:\n    def __eq__(self, other):\n        return True\n"
          "class Solution:\n    def add(self, a, b):\n        return Any()", "wrong_answer",
         "got \"<Any: "),  # a class of the program: never rebuilt
    (ADD, "class Solution:\n    def plus(self, a, b):\n        return a + b", "runtime_error",
     "AttributeError: 'Solution' object has no attribute 'add'"),
    (ADD, "raise RuntimeError('at import')", "runtime_error", "RuntimeError: at import"),
    (ADD, "import time\ntime.sleep(30)", "timeout", "loading the program: over the time limit"),
])
def test_named_outcomes(problem, code, outcome, error):
    verdict = grade(problem, code, settings_for("bwrap"))
    assert verdict.outcome == outcome, verdict
    if error is None:
        assert verdict.error is None
    else:
        assert error in verdict.error


def test_score_with_default_config_grades_in_the_best_available_sandbox():
    r = lcb.score(bundled()["ss_leetcode_001"], fenced(REFERENCE["ss_leetcode_001"]), cfg=None)
    assert r["outcome"] == "passed" and r["sandbox"] in ("bwrap", "process") and r["tests_total"] == 5


def test_process_mode_with_the_harness_interpreter_grades_the_same():
    """The weakest mode (no fresh uid when the interpreter is private to root) still grades correctly."""
    probs = bundled()
    pairs = [(probs[q], fenced(REFERENCE[q])) for q in ("ss_atcoder_002", "ss_leetcode_003")]
    pairs.append((probs["ss_atcoder_001"], fenced(WRONG["ss_atcoder_001"])))
    results = lcb.score_many(pairs, cfg={"sandbox": "process", "python": sys.executable, "timeout_s": 3})
    assert [r["outcome"] for r in results] == ["passed", "passed", "wrong_answer"]
    assert {r["sandbox"] for r in results} == {"process"}


def test_output_limit_never_fails_a_correct_program_with_a_large_answer():
    big = "\n".join(str(i) for i in range(400_000)) + "\n"  # 2.6 MB of expected output
    problem = make_problem("big", [("\n", big)])
    verdict = grade(problem, "print('\\n'.join(map(str, range(400_000))))", settings_for("bwrap", max_output_mb=1))
    assert verdict.outcome == "passed", verdict


def test_no_code_is_graded_without_running_anything():
    problem = bundled()["ss_atcoder_001"]
    r = lcb.score(problem, "I think the answer is to sum the even numbers.", cfg=cfg_for("bwrap"))
    assert r["outcome"] == "no_code" and r["prediction"] is None and r["correct"] is False
    assert (r["tests_passed"], r["tests_total"], r["sandbox"]) == (0, 5, None)
    thinking_never_closed = lcb.score(problem, "", cfg=cfg_for("bwrap"))
    assert thinking_never_closed["outcome"] == "no_code"


def test_replay_of_the_reference_solutions_scores_pass_at_1_of_100_percent():
    lines = [json.loads(x) for x in REPLAY.read_text().splitlines()]
    assert {(x["item_id"], x["sample_idx"]) for x in lines} == {(q, k) for q in REFERENCE for k in (0, 1)}
    for x in lines:  # the replay file is the reference code as a chat model would print it
        assert REFERENCE[x["item_id"]].strip() in x["completion"]
    probs = bundled()
    results = lcb.score_many([(probs[x["item_id"]], x["completion"]) for x in lines], cfg=cfg_for("bwrap"))
    rows = pd.DataFrame([{"item_id": x["item_id"], "sample_idx": x["sample_idx"], **probs[x["item_id"]].breakdown,
                          **r} for x, r in zip(lines, results)])
    summary = lcb.summarize(rows, cfg={"pass_k": [1, 2, 4]})
    value = summary.set_index(["metric", "group"])["value"]
    assert value[("pass@1", "all")] == 1.0 and value[("pass@2", "all")] == 1.0
    assert ("pass@4", "all") not in value.index  # only 2 samples a problem
    assert value[("pass@1", "difficulty=hard")] == 1.0 and value[("pass@1", "platform=leetcode")] == 1.0
    assert value[("share_passed", "all")] == 1.0 and value[("share_timeout", "all")] == 0.0


def test_summarize_pass_at_k_by_group_and_outcome_shares():
    outcomes = {"a": ["passed", "wrong_answer", "passed", "timeout"],  # n=4, c=2
                "b": ["runtime_error", "compile_error", "no_code", "wrong_answer"],  # n=4, c=0
                "c": ["passed"] * 4}  # n=4, c=4
    meta = {"a": ("easy", "atcoder"), "b": ("hard", "leetcode"), "c": ("easy", "leetcode")}
    rows = pd.DataFrame([{"item_id": q, "sample_idx": k, "correct": o == "passed", "outcome": o,
                          "difficulty": meta[q][0], "platform": meta[q][1]}
                         for q, outs in outcomes.items() for k, o in enumerate(outs)])
    s = lcb.summarize(rows, cfg=None)
    assert list(s.columns) == ["metric", "group", "value", "n"]
    v = s.set_index(["metric", "group"])
    assert v.loc[("pass@1", "all"), "value"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert v.loc[("pass@2", "all"), "value"] == pytest.approx((1 - 1 / 6 + 0 + 1) / 3)  # 1 - C(2,2)/C(4,2)
    assert v.loc[("pass@4", "all"), "value"] == pytest.approx(2 / 3) and v.loc[("pass@4", "all"), "n"] == 3
    assert ("pass@5", "all") not in v.index
    assert v.loc[("pass@1", "difficulty=easy"), "value"] == pytest.approx(0.75)
    assert v.loc[("pass@1", "platform=leetcode"), "value"] == pytest.approx(0.5)
    groups = list(dict.fromkeys(s["group"]))
    assert groups == ["all", "difficulty=easy", "difficulty=hard", "platform=atcoder", "platform=leetcode"]
    assert v.loc[("share_passed", "all"), "value"] == pytest.approx(6 / 12)
    assert v.loc[("share_passed", "all"), "n"] == 12
    for name, count in [("wrong_answer", 2), ("timeout", 1), ("runtime_error", 1), ("compile_error", 1),
                        ("no_code", 1)]:
        assert v.loc[(f"share_{name}", "all"), "value"] == pytest.approx(count / 12)
    uneven = rows[~((rows["item_id"] == "b") & (rows["sample_idx"] > 0))]
    ks = lcb.summarize(uneven).query("metric.str.startswith('pass@')").groupby("group")["metric"].apply(set)
    assert ks["all"] == {"pass@1"} and ks["difficulty=hard"] == {"pass@1"}  # problem b has a single sample
    assert ks["difficulty=easy"] == {"pass@1", "pass@2", "pass@4"}
