"""The one-time cost of identifying a local checkpoint by content: a ``--gib`` GiB weight file hashed by
:func:`evals.config.checkpoint_hash.checkpoint_sha256` with an empty memo (read and hashed), then again (remembered).

    python -m bench.checkpoint_hash --gib 1 --rounds 3
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

from evals.config.checkpoint_hash import checkpoint_sha256

log = logging.getLogger("bench.checkpoint_hash")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        ck = Path(tmp) / "checkpoint"
        ck.mkdir()
        block = os.urandom(1 << 20)
        with open(ck / "model.safetensors", "wb") as fh:
            for _ in range(args.gib << 10):
                fh.write(block)
        for r in range(args.rounds):
            memo = Path(tmp) / f"memo{r}"
            start = time.perf_counter()
            checkpoint_sha256(ck, memo)
            first = time.perf_counter() - start
            start = time.perf_counter()
            checkpoint_sha256(ck, memo)
            again = time.perf_counter() - start
            log.info("%d GiB: hashed in %.2f s (%.2f s per GB), remembered in %.1f ms", args.gib, first,
                     first / (args.gib * 1.073741824), again * 1000)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
