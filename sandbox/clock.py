"""Deadlines: each phase of a run (startup, compile, each test) gets a budget measured outside the sandbox, on the
sandbox's own CPU clock (its cgroup's, else the CPU time of its process tree), so that samples graded together
cannot push each other into a timeout, with :data:`WALL_FACTOR` times as much wall time for a program that sleeps
or waits. Startup is timed on the wall clock alone (the interpreter's start)."""

from __future__ import annotations

from sandbox import cgroup
from sandbox.proctree import tree_cpu

WALL_FACTOR = 3.0  # a phase may take this many times its CPU budget in wall time (+1 s): a program that sleeps
CPU_POLL_S = 0.05  # how often the sandbox's CPU clock is read


class Clock:
    """The budget of the current phase: ``budget`` CPU seconds on the sandbox's own clock (its cgroup's, else
    :func:`sandbox.proctree.tree_cpu`; other samples' load cannot use it up), and :data:`WALL_FACTOR` times as much
    wall time for a program that waits."""

    def __init__(self, pid: int, unit: cgroup.Unit | None = None) -> None:
        self.pid, self.unit, self.used = pid, unit, 0.0

    def start(self, now: float, budget: float, cpu: bool = True) -> None:
        """A new phase begins at ``now`` with ``budget`` seconds (CPU seconds when ``cpu``, else wall seconds)."""
        self.budget, self.cpu = budget, cpu
        self.wall_deadline = now + (budget * WALL_FACTOR + 1.0 if cpu else budget)
        self.cpu_start = self.read() if cpu else 0.0

    def read(self) -> float:
        """The sandbox's CPU seconds so far (never decreasing)."""
        now = self.unit.cpu_s() if self.unit is not None else tree_cpu(self.pid)
        self.used = max(self.used, now)  # a process reaped between reads moves, never vanishes
        return self.used

    def expired(self, now: float) -> bool:
        """Whether the phase is past its wall deadline or its CPU budget."""
        return now >= self.wall_deadline or (self.cpu and self.read() - self.cpu_start > self.budget)

    def wait(self, now: float) -> float:
        """How long to wait for the sandbox before looking at the clock again."""
        return max(0.0, min(self.wall_deadline - now, CPU_POLL_S if self.cpu else 1.0))
