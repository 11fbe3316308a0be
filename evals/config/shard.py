"""``shard=K/N``: one job's items split over N processes (GPUs, nodes), this process running part K.

The split is a stable function of the items: item ``i`` of the task's stable order (the order the run's identity
hashes, ``data_sha256``) belongs to shard ``i % N``. Every shard of a job reads the same items in the same order, so
the parts are disjoint, their union is the whole job, and a shard's part never depends on another's progress.
Round robin rather than contiguous blocks: tasks whose items are ordered by length (LongBench-v2's groups, needle's
context lengths) give each shard a share of every length. ``N`` is not part of the run's identity
(:mod:`evals.execute.identity`): every shard of a job writes into the one run directory (docs/sharding.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
FORM = re.compile(r"(\d+)/(\d+)")


@dataclass(frozen=True)
class Shard:
    """Part ``k`` (0-based) of ``n`` parts of one job's items."""

    k: int
    n: int

    def __post_init__(self) -> None:
        if self.n < 1 or not 0 <= self.k < self.n:
            raise ValueError(f"shard: K/N needs N >= 1 and K in 0..N-1, got {self.k}/{self.n}")

    @property
    def label(self) -> str:
        return f"{self.k}/{self.n}"

    @property
    def suffix(self) -> str:
        """The file-name part of this shard's files (``shard-0-of-2``)."""
        return f"shard-{self.k}-of-{self.n}"

    def owns(self, index: int) -> bool:
        """Whether the item at position ``index`` of the task's stable order is this shard's."""
        return index % self.n == self.k

    def select(self, items: list[T]) -> list[T]:
        """This shard's items, in the task's order."""
        return [item for i, item in enumerate(items) if self.owns(i)]


def parse_shard(value: Any) -> Shard | None:
    """``shard`` as given (``null``, or the string ``K/N``) -> a :class:`Shard`; None for ``null`` and for ``0/1``
    (one part is the whole job: a plain run). Raises ``ValueError`` naming ``shard`` for anything else."""
    if value is None:
        return None
    match = FORM.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"shard: expected K/N with K in 0..N-1 and N >= 1 (e.g. shard=0/8), got {value!r}")
    shard = Shard(int(match.group(1)), int(match.group(2)))
    return None if shard.n == 1 else shard
