"""Peak memory and CPU time of the harness while it grades hostile programs and parses hostile task rows.

Each case runs in a fresh child interpreter (so that its peak RSS is its own) and reports the harness process's
``ru_maxrss`` and CPU time (``ru_utime + ru_stime`` of the harness alone: the sandboxed program is a separate,
rlimited process) and the outcome:

* ``endless_line``: 300 MB on the result channel without a newline;
* ``forged_stdout``: one forged ``result`` message carrying 120 MB of stdout;
* ``deep_line``: ``'[' * 100000`` on the result channel;
* ``zlib_bomb``: a row whose ``private_test_cases`` is ~1.7 MB of base64 that inflates to 1.22 GiB;
* ``tests_bomb``: a row whose ``private_test_cases`` packs 2.68 million empty tests into ~0.5 MB.

    python -m bench.lcb_hostile                     # -> bench/results/lcb_hostile.csv
    python -m bench.lcb_hostile --cases zlib_bomb --sandbox process
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import pickle
import resource
import subprocess
import sys
import time
import zlib
from datetime import datetime
from pathlib import Path

from bench.rows_csv import write_rows

log = logging.getLogger("bench.lcb_hostile")
OUT = Path(__file__).resolve().parent / "results" / "lcb_hostile.csv"
CASES = ("endless_line", "forged_stdout", "deep_line", "zlib_bomb", "tests_bomb")
CHANNEL = ("import os\ndef flood(data):\n    for fd in map(int, os.listdir('/proc/self/fd')):\n"
           "        try:\n            os.write(fd, data)\n        except OSError:\n            pass\n")
PROGRAMS = {
    "endless_line": CHANNEL + "c = b'a' * (1 << 20)\nfor _ in range(300):\n    flood(c)\n",
    "forged_stdout": CHANNEL + "print('x')\nflood(b'{\"ev\": \"result\", \"i\": 0, \"ok\": true, \"stdout\": \"'"
                               " + b'a' * (120 << 20) + b'\"}\\n')\n",
    "deep_line": CHANNEL + "flood(b'[' * 100000 + b'\\n')\n",
}


def _usage() -> tuple[float, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_maxrss / 1024, ru.ru_utime + ru.ru_stime  # MiB (Linux reports KiB), seconds


def _bomb_row(case: str) -> dict:
    from tasks.base import bundled_path, iter_jsonl

    row = next(r for _, r in iter_jsonl(bundled_path("livecodebench/sample.jsonl")))
    if case == "zlib_bomb":  # 1.22 GiB of spaces, deflated ~1,000-fold (zlib's ceiling)
        comp = zlib.compressobj(9)
        raw = b"".join(comp.compress(b" " * (1 << 24)) for _ in range(78)) + comp.flush()
    else:
        raw = zlib.compress(pickle.dumps(json.dumps([{"input": "", "output": ""}] * 2_680_000)), 9)
    return dict(row, private_test_cases=base64.b64encode(raw).decode())


def child(case: str, sandbox: str) -> dict:
    """Run one case in this process; return its measurements."""
    from datetime import datetime as dt

    from tasks.livecodebench.grader import GradeSettings, grade
    from tasks.livecodebench.problem import Problem, TestCase, parse_problem

    start_rss, start_cpu = _usage()
    t0 = time.perf_counter()
    if case in PROGRAMS:
        problem = Problem("hostile", "hostile", "", "atcoder", "c", dt(2024, 9, 1), "", "easy",
                          (TestCase("\n", "x\n", "stdin"),), 1, None)
        settings = GradeSettings.from_cfg({"sandbox": sandbox, "timeout_s": 30.0})
        start_rss, start_cpu = _usage()
        t0 = time.perf_counter()
        try:
            outcome = grade(problem, PROGRAMS[case], settings).outcome
        except BaseException as exc:  # noqa: BLE001 - what main did: recorded, not hidden
            outcome = f"raised {type(exc).__name__}"
    else:
        row = _bomb_row(case)
        start_rss, start_cpu = _usage()
        t0 = time.perf_counter()
        try:
            n = len(parse_problem(row, "bomb").tests)
            outcome = f"parsed {n} tests"
        except ValueError as exc:
            outcome = f"refused: {str(exc)[:80]}"
        except BaseException as exc:  # noqa: BLE001
            outcome = f"raised {type(exc).__name__}"
    rss, cpu = _usage()
    return {"case": case, "sandbox": sandbox if case in PROGRAMS else "", "outcome": outcome,
            "peak_rss_mib": round(rss, 1), "rss_before_mib": round(start_rss, 1),
            "cpu_s": round(cpu - start_cpu, 3), "wall_s": round(time.perf_counter() - t0, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--sandbox", default="bwrap")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.sandbox)))
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = []
    for case in args.cases.split(","):
        res = subprocess.run([sys.executable, "-m", "bench.lcb_hostile", "--child", case, "--sandbox", args.sandbox],
                             capture_output=True, text=True, timeout=600, check=False)
        try:
            row = json.loads(res.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            row = {"case": case, "outcome": f"child failed: {res.stderr.strip()[-200:]}"}
        row["when"] = datetime.now().isoformat(timespec="seconds")
        log.info("%s", row)
        rows.append(row)
    write_rows(args.out, rows)
    log.info("wrote %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
