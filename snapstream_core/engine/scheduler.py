"""Which sample decodes in which row: plain Python, no tensors (the engine's tensors live in :mod:`.rows`).

Samples wait in a FIFO of jobs, item after item. A free row takes the next job; a row whose sample ended (EOS, stop
string, ``max_new_tokens``) is retired and becomes free again, so one item's samples and the next item's fill the
same fixed set of rows in waves. The scheduler also counts row-steps: every decode step costs one row-step per row
(the shape is fixed), and those spent on rows that hold no sample, or a sample that had already ended before the host
noticed, are wasted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Job:
    """One completion to produce: sample ``sample_idx`` of the engine's item number ``item``."""

    item: int
    sample_idx: int
    max_new_tokens: int


@dataclass
class StepCounts:
    """``steps``: decode steps run; ``row_steps``: steps x rows; ``used``: row-steps that produced a kept token;
    ``wasted = row_steps - used``."""

    steps: int = 0
    row_steps: int = 0
    used: int = 0

    @property
    def wasted(self) -> int:
        return self.row_steps - self.used

    @property
    def wasted_share(self) -> float:
        return self.wasted / self.row_steps if self.row_steps else 0.0


@dataclass
class Scheduler:
    """``rows`` fixed decode rows; ``pending`` jobs in order; ``running[row]`` the job a row holds (or None)."""

    rows: int
    pending: deque[Job] = field(default_factory=deque)
    running: list[Job | None] = field(default_factory=list)
    counts: StepCounts = field(default_factory=StepCounts)

    def __post_init__(self) -> None:
        if self.rows < 1:
            raise ValueError(f"gen.rows: must be >= 1, got {self.rows}")
        self.running = [None] * self.rows

    def add(self, jobs: Iterable[Job]) -> None:
        self.pending.extend(jobs)

    def free_rows(self) -> list[int]:
        return [r for r, job in enumerate(self.running) if job is None]

    def busy_rows(self) -> list[int]:
        return [r for r, job in enumerate(self.running) if job is not None]

    def assign(self) -> list[tuple[int, Job]]:
        """Give each free row the next pending job (in row order); returns the new (row, job) pairs."""
        placed = []
        for row in self.free_rows():
            if not self.pending:
                break
            job = self.pending.popleft()
            self.running[row] = job
            placed.append((row, job))
        return placed

    def retire(self, row: int, kept_steps: int) -> Job:
        """The sample in ``row`` ended; ``kept_steps`` of its decode steps produced tokens it keeps."""
        job = self.running[row]
        if job is None:
            raise RuntimeError(f"snapstream_core: row {row} holds no sample")
        self.running[row] = None
        self.counts.used += kept_steps
        return job

    def stepped(self, rows: int | None = None) -> None:
        """One decode step ran over ``rows`` rows (default: all of them)."""
        self.counts.steps += 1
        self.counts.row_steps += self.rows if rows is None else rows

    def item_pending(self, item: int) -> bool:
        """Whether a pending job (not yet in a row) still needs item ``item``'s prefix: asked after every row has
        taken its job, so that samples of one item starting together share one prefill."""
        return any(job.item == item for job in self.pending)

    @property
    def done(self) -> bool:
        return not self.pending and all(job is None for job in self.running)
