"""Which sample decodes in which row: plain Python, no tensors (the engine's tensors live in :mod:`.rows`).

Samples wait in a FIFO of tickets (one per sample wanted), item after item. A free row takes the next ticket; a row
whose sample ended (EOS, stop string, ``max_new_tokens``) is retired and becomes free again, so one item's samples
and the next item's fill the same fixed set of rows in waves. The scheduler also counts row-steps: every decode step
costs one row-step per row (the shape is fixed), and those spent on rows that hold no sample, or a sample that had
already ended before the host noticed, are wasted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Ticket:
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
    """``rows`` fixed decode rows; ``pending`` tickets in order; ``running[row]`` the ticket a row holds (or None)."""

    rows: int
    pending: deque[Ticket] = field(default_factory=deque)
    running: list[Ticket | None] = field(default_factory=list)
    counts: StepCounts = field(default_factory=StepCounts)

    def __post_init__(self) -> None:
        if self.rows < 1:
            raise ValueError(f"gen.rows: must be >= 1, got {self.rows}")
        self.running = [None] * self.rows

    def add(self, tickets: Iterable[Ticket]) -> None:
        self.pending.extend(tickets)

    def free_rows(self) -> list[int]:
        return [r for r, ticket in enumerate(self.running) if ticket is None]

    def busy_rows(self) -> list[int]:
        return [r for r, ticket in enumerate(self.running) if ticket is not None]

    def assign(self) -> list[tuple[int, Ticket]]:
        """Give each free row the next pending ticket (in row order); returns the new (row, ticket) pairs."""
        placed = []
        for row in self.free_rows():
            if not self.pending:
                break
            ticket = self.pending.popleft()
            self.running[row] = ticket
            placed.append((row, ticket))
        return placed

    def retire(self, row: int, kept_steps: int) -> Ticket:
        """The sample in ``row`` ended; ``kept_steps`` of its decode steps produced tokens it keeps."""
        ticket = self.running[row]
        if ticket is None:
            raise RuntimeError(f"snapstream_core: row {row} holds no sample")
        self.running[row] = None
        self.counts.used += kept_steps
        return ticket

    def stepped(self, rows: int | None = None) -> None:
        """One decode step ran over ``rows`` rows (default: all of them)."""
        self.counts.steps += 1
        self.counts.row_steps += self.rows if rows is None else rows

    def item_pending(self, item: int) -> bool:
        """Whether a pending ticket (not yet in a row) still needs item ``item``'s prefix: asked after every row has
        taken its ticket, so that samples of one item starting together share one prefill."""
        return any(ticket.item == item for ticket in self.pending)

    @property
    def done(self) -> bool:
        return not self.pending and all(ticket is None for ticket in self.running)
