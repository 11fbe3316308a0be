"""The cost of the sandbox's system-call filter: the LiveCodeBench parity battery (the 115 programs of
``tests/data/lcb_official_battery.json``) graded with this checkout's filter and with the filter of another
revision, alternately, in the same process (the same sandboxes, the same load on the machine).

    python -m bench.lcb_filter --against main --rounds 3      # prints each round and the ratio of the medians
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import time
import types
from datetime import datetime
from pathlib import Path

from sandbox import seccomp
from tasks.livecodebench.grader import GradeSettings, grade_many
from tasks.livecodebench.problem import Problem, TestCase

log = logging.getLogger("bench.lcb_filter")
REPO = Path(__file__).resolve().parent.parent
BATTERY = REPO / "tests" / "data" / "lcb_official_battery.json"
FILTER_FILES = ("sandbox/seccomp.py", "tasks/livecodebench/seccomp.py")  # where a revision holds it (older: the task)


def _filter_of(revision: str) -> bytes:
    """The filter :mod:`sandbox.seccomp` builds at git ``revision`` (its file, executed alone; the first of
    :data:`FILTER_FILES` that the revision holds)."""
    for path in FILTER_FILES:
        shown = subprocess.run(["git", "-C", str(REPO), "show", f"{revision}:{path}"], capture_output=True, text=True)
        if shown.returncode == 0:
            source = shown.stdout
            break
    else:
        raise SystemExit(f"{revision} holds none of {', '.join(FILTER_FILES)}")
    module = types.ModuleType("seccomp_at_revision")
    exec(compile(source, f"{revision}:seccomp.py", "exec"), module.__dict__)  # noqa: S102 - our own file
    return module.filter_bytes()


def _pairs() -> list[tuple[Problem, str]]:
    battery = json.loads(BATTERY.read_text(encoding="utf-8"))
    out = []
    for case in battery["programs"]:
        spec = battery["problems"][case["problem"]]
        kind = "stdin" if spec["kind"] == "stdin" else "functional"
        problem = Problem(question_id=case["problem"], question_title=case["problem"], question_content="",
                          platform="atcoder", contest_id="c", contest_date=datetime(2024, 9, 1), starter_code="",
                          difficulty="easy", tests=tuple(TestCase(i, o, kind) for i, o in spec["tests"]),
                          n_public=1, func_name=spec["func_name"])
        out.append((problem, case["code"]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", default="main", help="the git revision whose filter is the baseline")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sandbox", default="auto")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    filters = {"this checkout": seccomp.filter_bytes(), args.against: _filter_of(args.against)}
    settings = GradeSettings.from_cfg({"sandbox": args.sandbox, "timeout_s": 6, "memory_mb": 4096,
                                       "exec_workers": args.workers})
    pairs = _pairs()
    original = seccomp.filter_bytes
    times: dict[str, list[float]] = {name: [] for name in filters}
    verdicts: dict[str, list] = {}
    try:
        for r in range(args.rounds):
            for name, bpf in filters.items():
                seccomp.filter_bytes = lambda machine=None, bpf=bpf: bpf  # read at each sandbox start
                start = time.perf_counter()
                verdicts[name] = [v.correct for v in grade_many(pairs, settings)]
                times[name].append(time.perf_counter() - start)
                log.info("round %d, %s filter (%d instructions): %.2f s", r + 1, name, len(bpf) // 8,
                         times[name][-1])
    finally:
        seccomp.filter_bytes = original
    base, this = statistics.median(times[args.against]), statistics.median(times["this checkout"])
    same = verdicts["this checkout"] == verdicts[args.against]
    log.info("%d programs: median %.2f s with this checkout's filter, %.2f s with %s's: ratio %.3f; verdicts %s",
             len(pairs), this, base, args.against, this / base, "identical" if same else "DIFFER")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
