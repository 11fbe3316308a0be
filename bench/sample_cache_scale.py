"""What a large sample cache of other runs adds to a run's start: the cache is opened and the run's samples looked up
(what ``evals.execute.loop`` does before it builds a backend), in a fresh process each time, against an empty cache and
against one holding ``--mib`` MiB of other runs' rows, alternately. Prints the time and the process's peak RSS of
each: the difference is what the cache's size adds.

    python -m bench.sample_cache_scale --mib 400 --items 300 --samples 4
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("bench.sample_cache_scale")
BASE = {"format": "bench", "model": {"name": "bench"}}


@dataclass(frozen=True)
class Item:
    item_id: str
    text: str = "an item of the benchmark"
    breakdown: dict = field(default_factory=dict)


def _row(item_id: str, i: int, filler: str) -> dict:
    return {"run_id": "other/run", "item_id": item_id, "sample_idx": i, "prompt_hash": None, "correct": False,
            "prediction": None, "latency_s": 1.0, "gen_tokens": 512, "completion": filler}


def build(root: Path, mib: int, items: int, samples: int) -> None:
    """A cache holding the run's own samples and ``mib`` MiB of other runs' rows."""
    from evals.execute.sample_cache import DBNAME, SampleCache

    cache = SampleCache.open(root, BASE)
    filler = "a completion of another run " * 50  # ~1.4 KB, as a short model answer
    n = 0
    while os.path.getsize(root / DBNAME) + os.path.getsize(root / f"{DBNAME}-wal") < mib * (1 << 20):
        cache.conn.execute("BEGIN")
        cache.conn.executemany("INSERT OR REPLACE INTO samples VALUES (?, ?, ?, ?)", (
            (hashlib.sha256(str(k).encode()).hexdigest(), k % 8, str(k), json.dumps(_row(str(k), k % 8, filler)))
            for k in range(n, n + 5000)))
        cache.conn.execute("COMMIT")
        cache.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        n += 5000
    for k in range(items):
        for i in range(samples):
            cache.put(Item(f"item{k}"), _row(f"item{k}", i, filler), None)
    cache.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    cache.close()
    log.info("built %s: %.0f MiB, %d rows of other runs", root, os.path.getsize(root / DBNAME) / 2**20, n)


def child(root: str, items: int, samples: int) -> None:
    """Open the cache and look up the run's samples; print (seconds, the process's peak RSS in KiB, rows found)."""
    from evals.execute.sample_cache import SampleCache

    start = time.perf_counter()
    cache = SampleCache.open(Path(root), BASE)
    hits = sum(1 for _ in cache.lookup((Item(f"item{k}"), range(samples)) for k in range(items)))
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": elapsed, "rss_kib": peak, "found": hits}))


def measure(root: Path, items: int, samples: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.sample_cache_scale", "--child", str(root), "--items",
                          str(items), "--samples", str(samples)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=400)
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.items, args.samples)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        small, large = Path(tmp) / "small", Path(tmp) / "large"
        build(small, 0, args.items, args.samples)
        build(large, args.mib, args.items, args.samples)
        runs: dict[str, list[dict]] = {"small": [], "large": []}
        for _ in range(args.rounds):
            for name, root in (("small", small), ("large", large)):
                runs[name].append(measure(root, args.items, args.samples))
                log.info("%s cache: %s", name, runs[name][-1])
    med = {n: {k: statistics.median(r[k] for r in rs) for k in ("seconds", "rss_kib", "found")}
           for n, rs in runs.items()}
    log.info("%d x %d samples looked up: %.3f s, peak RSS %.1f MiB with %d MiB of other runs; %.3f s, %.1f MiB "
             "with none: the large cache adds %.3f s and %.1f MiB", args.items, args.samples,
             med["large"]["seconds"], med["large"]["rss_kib"] / 1024, args.mib, med["small"]["seconds"],
             med["small"]["rss_kib"] / 1024, med["large"]["seconds"] - med["small"]["seconds"],
             (med["large"]["rss_kib"] - med["small"]["rss_kib"]) / 1024)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
