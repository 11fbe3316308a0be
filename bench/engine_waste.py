"""Share of decode row-steps the engine wastes, on an AIME-like spread of completion lengths (no model).

The engine's own :class:`~snapstream_core.engine.Scheduler` places samples in rows exactly as ``Engine.run`` does:
a row whose sample ends stays busy until the next host read of the done flags (every ``check_every`` steps), and
every step costs one row-step per row (the fixed shape), idle rows included. Lengths are drawn per sample from a
log-normal (median ``--median``, capped at ``--max-new``: R1-style AIME completions, a share of them at the cap).

    python -m bench.engine_waste                      # -> bench/results/engine_waste.csv, and the table
    python -m bench.engine_waste --items 30 --samples 64 --rows 4,8,16,32 --check-every 8,16,32
"""

from __future__ import annotations

import argparse
import csv
import math
import random
from pathlib import Path

from snapstream_core.engine.scheduler import Scheduler, Ticket

OUT = Path(__file__).resolve().parent / "results" / "engine_waste.csv"
COLUMNS = ["rows", "check_every", "items", "samples", "median", "max_new", "mean_len", "at_cap", "steps",
           "row_steps", "used", "wasted_share"]


def lengths(items: int, samples: int, median: int, sigma: float, max_new: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[min(max_new, max(1, int(rng.lognormvariate(math.log(median), sigma)))) for _ in range(samples)]
            for _ in range(items)]


def simulate(lens: list[list[int]], rows: int, check_every: int) -> Scheduler:
    """Run the scheduler as ``Engine.run`` does (batched rows): assign, ``check_every`` steps, host read, retire."""
    sched = Scheduler(rows)
    for i, item in enumerate(lens):
        sched.add(Ticket(i, s, 0) for s in range(len(item)))
    ends_at: list[int | None] = [None] * rows  # decode step count at which the row's sample is done on the device
    step = 0
    while True:
        for row, job in sched.assign():
            ends_at[row] = step + lens[job.item][job.sample_idx] - 1  # the first token needs no decode step
        if sched.done:
            return sched
        for row in sched.busy_rows():  # samples that end at their first token: retired before any step
            if ends_at[row] <= step:
                sched.retire(row, kept_steps=lens[sched.running[row].item][sched.running[row].sample_idx] - 1)
        if not sched.busy_rows() and sched.pending:
            continue
        for _ in range(check_every):
            sched.stepped()
        step += check_every
        for row in sched.busy_rows():
            if ends_at[row] <= step:
                job = sched.running[row]
                sched.retire(row, kept_steps=lens[job.item][job.sample_idx] - 1)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=30)
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--median", type=int, default=9000)
    ap.add_argument("--sigma", type=float, default=0.7)
    ap.add_argument("--max-new", type=int, default=32768)
    ap.add_argument("--rows", default="4,8,16,32")
    ap.add_argument("--check-every", default="8,16,32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    lens = lengths(args.items, args.samples, args.median, args.sigma, args.max_new, args.seed)
    flat = [n for item in lens for n in item]
    out = []
    for rows in (int(r) for r in args.rows.split(",")):
        for k in (int(c) for c in args.check_every.split(",")):
            c = simulate(lens, rows, k).counts
            out.append(dict(rows=rows, check_every=k, items=args.items, samples=args.samples, median=args.median,
                            max_new=args.max_new, mean_len=round(sum(flat) / len(flat)),
                            at_cap=round(sum(n == args.max_new for n in flat) / len(flat), 3), steps=c.steps,
                            row_steps=c.row_steps, used=c.used, wasted_share=round(c.wasted_share, 4)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(out)
    for r in out:
        print(f"rows={r['rows']:>3} check_every={r['check_every']:>3}  steps={r['steps']:>9}  "
              f"wasted={100 * r['wasted_share']:.2f}%")
    return out


if __name__ == "__main__":
    main()
