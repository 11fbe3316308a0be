"""CPU seconds per generated token of ``make eval``'s needle job, alone and beside busy processes.

``python -m bench.busy_cores [--spinners 6] [--code DIR ...] [--limit 6] [-- override ...]`` runs the needle job of
``conf/experiment/smoke.yaml`` (the full cache unless overrides say otherwise; ``sample_cache=false`` so that every
sample is generated) as a child process, first with nothing else started, then beside ``--spinners`` processes that
spin in pure Python (a synthetic load: 6 spinners on 2 cores is load ~8 with the job). For each condition it prints
one line: the 1-minute load average before the job, wall time, the job's CPU seconds (user + system, from
``wait4``), generated tokens (``meta.json``) and CPU seconds per generated token, then the loaded / idle ratio.
``--code DIR`` (repeatable) runs the job with ``PYTHONPATH=DIR``: two checkouts measured side by side, e.g. before and
after a change. Rows also go to ``--out`` (CSV) when given.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SMOKE_NEEDLE = ["+experiment=smoke", "sample_cache=false", "overwrite=true"]
SPIN = "while True:\n    pass\n"


def start_spinners(n: int) -> list[subprocess.Popen]:
    """``n`` processes that each keep one core busy until killed."""
    return [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def run_job(code: Path, overrides: list[str], limit: int) -> dict:
    """One needle job in a fresh ``out_root``: wall and CPU seconds of the child, tokens it generated."""
    with tempfile.TemporaryDirectory(prefix="busy_cores_") as out:
        env = {**os.environ, "PYTHONPATH": str(code)}
        cmd = [sys.executable, "-m", "evals.run", *SMOKE_NEEDLE, f"task.limit={limit}", f"out_root={out}", *overrides]
        load = os.getloadavg()[0]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=code, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"the needle job failed ({' '.join(cmd)}):\n{err[-2000:]}")
        metas = list(Path(out).rglob("meta.json"))
        tokens = sum(int(json.loads(m.read_text()).get("generation", {}).get("gen_tokens") or 0) for m in metas)
    cpu = usage.ru_utime + usage.ru_stime
    return {"load_1m_before": round(load, 2), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "gen_tokens": tokens,
            "cpu_s_per_token": round(cpu / tokens, 3) if tokens else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spinners", type=int, default=6, help="busy processes beside the loaded run (default 6)")
    parser.add_argument("--code", type=Path, action="append", help="a checkout to measure (default: this one)")
    parser.add_argument("--limit", type=int, default=6, help="needle items (default 6, as make eval)")
    parser.add_argument("--out", type=Path, help="also write the rows to this CSV")
    parser.add_argument("overrides", nargs="*", help="more evals.run overrides (after --)")
    args = parser.parse_args(argv)
    codes = [c.resolve() for c in (args.code or [Path.cwd()])]
    rows = []
    for code in codes:
        for spinners in (0, args.spinners):
            procs = start_spinners(spinners)
            try:
                time.sleep(2 if spinners else 0)
                row = {"code": str(code), "spinners": spinners, **run_job(code, args.overrides, args.limit)}
            finally:
                stop(procs)
            rows.append(row)
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
        idle, loaded = rows[-2]["cpu_s_per_token"], rows[-1]["cpu_s_per_token"]
        if idle and loaded:
            print(f"{code}: CPU s per token beside {args.spinners} busy processes = {loaded / idle:.2f}x idle",
                  flush=True)
    if args.out:
        with open(args.out, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
