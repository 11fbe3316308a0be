"""Throughput of LiveCodeBench grading: the cost of isolation.

Grades ``--samples`` programs (half stdin, half functional; every one correct, so all ``--tests`` tests run) three
ways and reports wall time, samples/s and the ratio to the unisolated baseline:

* ``in-process``: each program exec'd in this interpreter, one after the other, with the same code shaping and
  comparisons but no isolation at all (what a harness without a sandbox does);
* ``bwrap`` and ``process``: the real grader (``grade_many``) with ``--workers`` sandboxes at a time.

    python -m bench.lcb_grading                   # 200 samples x 10 tests, 2 workers -> bench/results/lcb_grading.csv
    python -m bench.lcb_grading --samples 40 --modes bwrap
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import random
import statistics
import sys
import time
import types
from datetime import datetime
from pathlib import Path

from bench.rows_csv import write_rows
from sandbox import Limits, driver, isolation, modes
from tasks.livecodebench.grader import GradeSettings, grade_many, stdout_matches
from tasks.livecodebench.problem import Problem, TestCase

log = logging.getLogger("bench.lcb_grading")
OUT = Path(__file__).resolve().parent / "results" / "lcb_grading.csv"

STDIN_VARIANTS = [
    "n = int(input())\na = list(map(int, input().split()))\nprint(sum(a), max(a))\n",
    "import sys\ndata = sys.stdin.read().split()\nxs = [int(x) for x in data[1:]]\nprint(sum(xs), max(xs))\n",
    "def main():\n    input()\n    a = [int(x) for x in input().split()]\n    total, best = 0, a[0]\n"
    "    for x in a:\n        total += x\n        best = x if x > best else best\n    print(total, best)\n\n"
    "if __name__ == '__main__':\n    main()\n",
]
FUNCTIONAL_VARIANTS = [
    "class Solution:\n    def sortedSquares(self, nums: List[int]) -> List[int]:\n"
    "        return sorted(x * x for x in nums)\n",
    "class Solution:\n    def sortedSquares(self, nums: List[int]) -> List[int]:\n        out = [x * x for x in nums]\n"
    "        out.sort()\n        return out\n",
]


def problems(n_tests: int, size: int = 2000) -> tuple[Problem, Problem]:
    rng = random.Random(0)
    stdin_tests, func_tests = [], []
    for _ in range(n_tests):
        a = [rng.randint(-10**6, 10**6) for _ in range(size)]
        stdin_tests.append(TestCase(f"{size}\n{' '.join(map(str, a))}\n", f"{sum(a)} {max(a)}\n", "stdin"))
        func_tests.append(TestCase(json.dumps(a), json.dumps(sorted(x * x for x in a)), "functional"))
    common = dict(question_title="bench", question_content="", platform="atcoder", contest_id="bench",
                  contest_date=datetime(2024, 9, 1), starter_code="", difficulty="easy", n_public=1)
    return (Problem(question_id="bench_stdin", tests=tuple(stdin_tests), func_name=None, **common),
            Problem(question_id="bench_func", tests=tuple(func_tests), func_name="sortedSquares", **common))


def run_in_process(problem: Problem, code: str) -> bool:
    """No isolation: exec the program here, as the sandbox driver would, and compare."""
    module = types.ModuleType("tmp_sol")
    if problem.func_name is None:
        exec(compile(driver.stdin_program(code), "<solution>", "exec"), module.__dict__)  # noqa: S102
        for test in problem.tests:
            out, old_stdin = io.StringIO(), sys.stdin
            sys.stdin = io.StringIO(test.input)
            try:
                with contextlib.redirect_stdout(out):
                    module.wrapped_function()
            finally:
                sys.stdin = old_stdin
            if not stdout_matches(out.getvalue(), test.output):
                return False
        return True
    exec(compile(driver.PRELUDE + "\n\n" + code, "<solution>", "exec"), module.__dict__)  # noqa: S102
    method = getattr(module.Solution(), problem.func_name)
    for test in problem.tests:
        value = method(*[json.loads(line) for line in test.input.split("\n")])
        if json.loads(json.dumps(list(value) if isinstance(value, tuple) else value)) != json.loads(test.output):
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--tests", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--modes", default="in-process,bwrap,process")
    parser.add_argument("--repeat", type=int, default=3, help="runs per mode; the fastest is reported (shared "
                        "machines are noisy), the median beside it")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    stdin_problem, func_problem = problems(args.tests)
    pairs = [(stdin_problem, STDIN_VARIANTS[k % len(STDIN_VARIANTS)]) if k % 2 == 0 else
             (func_problem, FUNCTIONAL_VARIANTS[k % len(FUNCTIONAL_VARIANTS)]) for k in range(args.samples)]
    rows, baseline = [], None
    for mode in args.modes.split(","):
        python, workers, settings = sys.executable, 1, None
        if mode != "in-process":
            if mode == "process" and os.geteuid() == 0 and not isolation.readable_by_others(python):
                python = "/usr/bin/python3" if isolation.readable_by_others("/usr/bin/python3") else python
            workers = args.workers
            settings = GradeSettings(limits=Limits(timeout_s=6.0), sandbox=mode, python=python,
                                     exec_workers=workers)
            modes.resolve(mode, python)  # the one-time probe is not part of the timing
        times, passed = [], 0
        for _ in range(args.repeat):
            start = time.perf_counter()
            if settings is None:
                passed = sum(run_in_process(p, c) for p, c in pairs)
            else:
                passed = sum(v.correct for v in grade_many(pairs, settings))
            times.append(time.perf_counter() - start)
        best, median = min(times), statistics.median(times)
        baseline = best if mode == "in-process" else baseline
        rows.append({"mode": mode, "samples": args.samples, "tests_per_sample": args.tests, "workers": workers,
                     "passed": passed, "seconds_best": round(best, 3), "seconds_median": round(median, 3),
                     "samples_per_s": round(args.samples / best, 2),
                     "ms_per_sample_per_worker": round(1000 * best * workers / args.samples, 1),
                     "ratio_to_in_process": round(best / baseline, 2) if baseline else "",
                     "python": python, "cores": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)})
        log.info("%-10s %4d samples x %d tests, %d worker(s): best %6.2f s, median %6.2f s (%5.1f samples/s, "
                 "%d passed)%s", mode, args.samples, args.tests, workers, best, median, args.samples / best, passed,
                 f"  = {best / baseline:.1f}x in-process" if baseline and mode != "in-process" else "")
    write_rows(args.out, rows)
    log.info("wrote %s", args.out)
    return 0 if all(r["passed"] == args.samples for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
