"""The files of one shard of a run (``shard=K/N``, docs/sharding.md) and their lock.

Shard ``K`` of ``N`` writes only ``samples.shard-K-of-N.jsonl`` and ``prompts.shard-K-of-N.jsonl.gz`` in the run's
directory, under its own lock ``.shard-K-of-N.lock``; the run's own files (``samples.jsonl``, ``meta.json``...) are
written only under the run's lock (:func:`evals.record.rundir.run_lock`). Lock order: a process may take a shard's
lock while it holds the run's, never the run's while it holds a shard's, so a plain run that waits for the shards
(holding the run's lock) and a shard that ends (and then asks for the run's lock) never wait for each other.
The lock files stay (removing a lock file another process has open would let two writers in).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SUFFIX = re.compile(r"shard-(\d+)-of-(\d+)")
SAMPLES_GLOB = "samples.shard-*-of-*.jsonl"
PROMPTS_GLOB = "prompts.shard-*-of-*.jsonl.gz"


@dataclass(frozen=True)
class ShardFiles:
    """The files of the shard named ``suffix`` (``shard-0-of-2``) in ``run_dir``."""

    run_dir: Path
    suffix: str

    @property
    def samples(self) -> Path:
        return self.run_dir / f"samples.{self.suffix}.jsonl"

    @property
    def prompts(self) -> Path:
        return self.run_dir / f"prompts.{self.suffix}.jsonl.gz"

    @property
    def lock(self) -> Path:
        return self.run_dir / f".{self.suffix}.lock"

    @property
    def label(self) -> str:
        """``K/N``."""
        k, n = SUFFIX.fullmatch(self.suffix).groups()
        return f"{k}/{n}"

    @property
    def names(self) -> tuple[str, ...]:
        return (self.samples.name, self.prompts.name, self.lock.name)


def shards_present(run_dir: Path) -> list[ShardFiles]:
    """Every shard with a samples or prompts file in ``run_dir`` (rows not merged yet), in name order."""
    suffixes = set()
    for pattern, cut in ((SAMPLES_GLOB, ".jsonl"), (PROMPTS_GLOB, ".jsonl.gz")):
        for path in run_dir.glob(pattern):
            suffix = path.name[path.name.index(".") + 1: -len(cut)]
            if SUFFIX.fullmatch(suffix):
                suffixes.add(suffix)
    return [ShardFiles(run_dir, s) for s in sorted(suffixes)]


@contextmanager
def shard_lock(files: ShardFiles, wait: bool) -> Iterator[bool]:
    """Hold the shard's ``flock``; yields True when held. ``wait`` False: yields False at once when another process
    holds it (the shard is still writing). The kernel drops the lock when its process dies (``kill -9``)."""
    fd = os.open(files.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                yield False
                return
            log.info("%s: shard %s is still writing; waiting for it to finish", files.run_dir, files.label)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield True
    finally:
        os.close(fd)
