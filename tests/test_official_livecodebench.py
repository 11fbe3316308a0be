"""LiveCodeBench verdicts as lcb_runner's ``testing_util.run_test`` gives them (``task.protocol=lcb_runner``, the
default): a battery of 115 programs (stdin/stdout idioms, disabled functions, exits, big integers, recursion,
functional return types, missing imports; exact numeric types, numpy arrays, tuples and sets, dataclass helpers and
undefined annotations, helper classes, state across tests) whose official verdicts were measured by running
lcb_runner's own code unmodified (LiveCodeBench/LiveCodeBench 28fef95ea8c9, HEAD of 2025-07-15; see the battery's
``about``); each case names the official line that decides it (``tests/data/lcb_official_battery.json``). A case
marked ``difference`` is a documented, deliberate difference (conf/task/livecodebench.yaml): the verdict here is
``wrong_answer``."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from lcb_helpers import cfg_for

import tasks.livecodebench as lcb
from tasks.livecodebench.grader import GradeSettings, grade, grade_many
from tasks.livecodebench.problem import Problem, TestCase

BATTERY = json.loads((Path(__file__).parent / "data" / "lcb_official_battery.json").read_text(encoding="utf-8"))
PROGRAMS = BATTERY["programs"]


def problem(name: str) -> Problem:
    spec = BATTERY["problems"][name]
    kind = "stdin" if spec["kind"] == "stdin" else "functional"
    return Problem(question_id=name, question_title=name, question_content="", platform="atcoder", contest_id="c",
                   contest_date=datetime(2024, 9, 1), starter_code="", difficulty="easy",
                   tests=tuple(TestCase(i, o, kind) for i, o in spec["tests"]), n_public=1,
                   func_name=spec["func_name"])


def settings(protocol: str, **knobs) -> GradeSettings:
    mode = "bwrap" if _bwrap_works() else "process"
    return GradeSettings.from_cfg({**cfg_for(mode), "protocol": protocol, **knobs})


# Importing pandas or scipy takes seconds on a loaded machine: those programs get lcb_runner's 6 s per test and its
# memory, not the short test timeouts (which still decide the battery's timeout cases).
SCIENTIFIC_KNOBS = {"timeout_s": 6, "memory_mb": 4096}


def scientific(code: str) -> bool:
    return any(name in code for name in ("numpy", "pandas", "scipy"))


def _bwrap_works() -> bool:
    from sandbox import modes

    try:
        modes.resolve("bwrap", None)
        return True
    except ValueError:
        return False


@pytest.fixture(scope="module")
def default_verdicts():
    heavy = [i for i, p in enumerate(PROGRAMS) if scientific(p["code"])]
    light = [i for i in range(len(PROGRAMS)) if i not in heavy]
    verdicts = {}
    for indices, knobs in ((light, {}), (heavy, SCIENTIFIC_KNOBS)):
        pairs = [(problem(PROGRAMS[i]["problem"]), PROGRAMS[i]["code"]) for i in indices]
        verdicts.update(zip(indices, grade_many(pairs, settings("lcb_runner", **knobs))))
    return [verdicts[i] for i in range(len(PROGRAMS))]


def test_battery_covers_the_required_kinds():
    assert len(PROGRAMS) >= 40
    prefixes = {p["case"].split(":")[0] for p in PROGRAMS}
    assert {"stdin", "stdout", "guard", "exit", "bigint", "recursion", "functional", "imports", "values", "arrays",
            "tuples", "dicts", "future", "classes", "state"} <= prefixes
    assert {p["official_passed"] for p in PROGRAMS} == {True, False}
    assert all(p["decided_by"] for p in PROGRAMS)
    differences = [p for p in PROGRAMS if "difference" in p]
    assert differences and all(p["difference"].startswith("program_class") and p["case"].startswith("classes:")
                               and p["official_passed"] for p in differences)


@pytest.mark.parametrize("index", range(len(PROGRAMS)), ids=[p["case"] for p in PROGRAMS])
def test_default_verdict_equals_lcb_runner(default_verdicts, index):
    case = PROGRAMS[index]
    verdict = default_verdicts[index]
    if "difference" in case:  # a value of the program's own class: never rebuilt in the parent, equal to nothing
        assert verdict.outcome == "wrong_answer", (case["difference"], verdict)
        return
    assert verdict.correct is case["official_passed"], (case["decided_by"], verdict.outcome, verdict.error)


def test_strict_protocol_keeps_real_file_descriptors():
    """``task.protocol=strict``: what passes on a judge passes (iterating stdin, sys.stdout.buffer, os.getcwd), and
    Python's own 4300-digit limit applies."""
    by_case = {p["case"]: p for p in PROGRAMS}
    names = ["stdin: iterate sys.stdin", "stdout: sys.stdout.buffer.write", "guard: os.getcwd()",
             "bigint: print(2**20000)"]
    pairs = [(problem(by_case[n]["problem"]), by_case[n]["code"]) for n in names]
    verdicts = grade_many(pairs, settings("strict"))
    assert [v.correct for v in verdicts] == [True, True, True, False]
    assert [by_case[n]["official_passed"] for n in names] == [False, False, False, True]


def test_rows_record_the_protocol_and_unknown_protocols_are_refused():
    code = next(p for p in PROGRAMS if p["case"] == "stdin: input()")["code"]
    row = lcb.score(problem("sum"), f"```python\n{code}\n```", cfg={**cfg_for("process"), "protocol": "lcb_runner"})
    assert row["protocol"] == "lcb_runner" and row["correct"] is True
    with pytest.raises(ValueError, match="task.protocol"):
        GradeSettings.from_cfg({"protocol": "judge"})


def test_code_is_taken_from_the_whole_output_under_lcb_runner():
    """lcb_runner extracts the last fenced block from the whole output; a thinking model that never closed its
    thinking still gets its code graded, and the row says the thinking never closed."""
    completion = "<think>\nplan\n```python\nprint(6)\n```\nstill thinking"
    text, closed = lcb.answer_part(completion, True, cfg={"protocol": "lcb_runner"})
    assert text == completion and closed is False
    assert lcb.answer_part(completion, True, cfg={"protocol": "strict"}) == ("", False)
    assert grade(problem("sum"), "print(6)", settings("lcb_runner")).tests_passed == 1  # first test only


# Programs that import numpy, pandas or scipy: lcb_runner passes them (testing_util imports numpy at module level,
# before reliability_guard(); numpy's own import calls os.putenv, which the guard disables).
SCIENTIFIC = [
    ("sum", "import numpy as np\nn = int(input())\na = np.array(list(map(int, input().split())))\nprint(int(a.sum()))"),
    ("sum", "import pandas as pd\nn = int(input())\n"
            "s = pd.Series(list(map(int, input().split())))\nprint(int(s.sum()))"),
    ("sum", "from scipy import special\nimport sys\nd = sys.stdin.read().split()\nprint(sum(map(int, d[1:])))"),
    ("add", "import numpy as np\nclass Solution:\n    def addAll(self, nums, k):\n        return (np.array(nums) + k)"
            ".tolist()"),
]


@pytest.mark.parametrize("name,code", SCIENTIFIC, ids=["numpy-stdin", "pandas-stdin", "scipy-stdin", "numpy-func"])
def test_numpy_pandas_scipy_programs_pass_as_in_lcb_runner(name, code):
    pytest.importorskip("numpy")
    verdict = grade_many([(problem(name), code)], settings("lcb_runner", **SCIENTIFIC_KNOBS))[0]
    assert verdict.correct, verdict
