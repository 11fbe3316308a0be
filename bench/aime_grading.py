"""Throughput of AIME grading on a realistic mix of 1,000 rows.

The mix (``mixed_rows``, also graded for correctness in ``tests/test_aime24_grading.py``): 700 integer answers at the
end of ~4 kB R1-style outputs (a third of them off by one), 100 distinct non-integer forms equal to the gold that need
Math-Verify, 100 garbage texts, 100 outputs cut inside their last box. Grading is timed through
``tasks.aime24.score_many`` (what the runner calls) under ``task.protocol=boxed``, the protocol the expected counts
are written for (the default ``lighteval`` also reads answers outside a box, e.g. from the cut-off rows), from a
cleared cache, ``--repeat`` times; the first time in a process also pays for imports and the start of the Math-Verify
child.

    python -m bench.aime_grading            # -> bench/results/aime_grading.csv
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

from bench.rows_csv import write_rows

log = logging.getLogger("bench.aime_grading")
OUT = Path(__file__).resolve().parent / "results" / "aime_grading.csv"


def garbage_texts() -> dict[str, str]:
    """Completions a grader must survive: each gives ``prediction=None``."""
    rng = random.Random(0)
    return {
        "empty": "",
        "unbalanced open": "\\boxed{\\frac{1}{2}",
        "unbalanced deep": "\\boxed{" + "{" * 5000,
        "only closers": "}" * 1000 + "\\boxed",
        "100 kB of text": " ".join(rng.choice(["the", "x", "{", "}", "=", "$", "\\frac", "\\left(", "42"])
                                    for _ in range(25_000))[:100_000],
        "100 kB ending in an open box": "a" * 100_000 + "\\boxed{1",
        "binary-looking": bytes(rng.randrange(256) for _ in range(20_000)).decode("latin-1"),
        "nul bytes and box-like": "\x00\\boxed\x00{\x00}\x00" * 1000,
        "huge box": "\\boxed{" + "1+" * 5000 + "1}",
        "lone surrogates": "\ud800 the answer \udfff is {" * 500,
    }


def mixed_rows(n: int = 1000) -> tuple[list[tuple[object, str]], int, int]:
    """``(pairs of (Item, completion), expected correct count, expected prediction=None count)``."""
    from tasks.aime24.data import Item

    items = [Item(item_id=str(i), problem="p", answer=f"{i * 7 % 1000:03d}") for i in range(30)]
    filler = "Let me reconsider the constraint. " * 120  # ~4 kB of reasoning per row
    garbage = list(garbage_texts().values())
    pairs, correct, unanswered = [], 0, 0
    for r in range(n):
        item = items[r % 30]
        gold = int(item.answer)
        kind = r % 10
        if kind < 7:
            off = int(r % 3 == 0)
            text = f"{filler}\n\n**Final Answer**\n\\[\n\\boxed{{{gold + off}}}\n\\]"
            correct += 1 - off
        elif kind == 7:
            k = r // 10 + 2  # a distinct fraction per row, equal to the gold: Math-Verify must say so
            text = f"{filler} so the answer is $\\boxed{{\\dfrac{{{gold * k}}}{{{k}}}}}$."
            correct += 1
        elif kind == 8:
            text = garbage[r % len(garbage)]
            unanswered += 1
        else:
            text = filler + " so we get \\boxed{" + str(gold)  # cut mid-answer
            unanswered += 1
        pairs.append((item, text))
    return pairs, correct, unanswered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from omegaconf import OmegaConf

    import tasks.aime24 as aime
    from tasks.aime24 import grader

    cfg = OmegaConf.create({"protocol": "boxed"})

    pairs, want_correct, want_none = mixed_rows(args.rows)
    times = []
    for rep in range(args.repeat):
        grader.clear_caches()
        start = time.perf_counter()
        results = aime.score_many(pairs, cfg=cfg)
        times.append(time.perf_counter() - start)
        got_correct = sum(bool(r["correct"]) for r in results)
        got_none = sum(r["prediction"] is None for r in results)
        if (got_correct, got_none) != (want_correct, want_none):
            log.error("rep %d: %d correct / %d unanswered, expected %d / %d", rep, got_correct, got_none,
                      want_correct, want_none)
            return 1
        log.info("rep %d: %d rows in %.2f s", rep, len(results), times[-1])
    stamp, load = datetime.now().isoformat(timespec="seconds"), round(os.getloadavg()[0], 2)
    rows = [{"date": stamp, "rows": args.rows, "rep": rep, "first_in_process": rep == 0, "seconds": round(t, 3),
             "rows_per_s": round(args.rows / t, 1), "load_avg_1m": load} for rep, t in enumerate(times)]
    write_rows(args.out, rows)
    later = statistics.median(times[1:]) if len(times) > 1 else float("nan")
    log.info("AIME grading, %d rows: %.2f s the first time in a process (imports, Math-Verify child start), "
             "%.2f s after (median) -> %s", args.rows, times[0], later, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
