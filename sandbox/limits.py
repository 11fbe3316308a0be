"""What one sandboxed program may use: the knobs of :class:`Limits`, their accepted ranges, and the per-process
rlimits the driver applies from them (the whole-sandbox bounds are the cgroup's, :mod:`sandbox.cgroup`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

MiB = 1 << 20

LIMIT_RANGES = {  # knob: (lowest, highest) accepted; the upper bounds keep every derived cap (CPU rlimit, the size
    "timeout_s": (0.01, 600.0),  # of the private /tmp, the result line) a real number on a real machine
    "memory_mb": (256, 1 << 20),  # the interpreter needs 256 MB; 1 TiB
    "max_output_mb": (1, 1024),
    "nofile": (16, 65536),
    "nproc": (1, 4096),
    "startup_s": (1.0, 600.0),
}


@dataclass(frozen=True)
class Limits:
    """Per-program limits. ``timeout_s`` is per test (LiveCodeBench: 6 s); ``memory_mb`` is the address-space
    rlimit of each process and, where the sandbox has a cgroup, the bound of the whole sandbox; ``nproc`` likewise
    (plus the sandbox's own few tasks)."""

    timeout_s: float = 6.0
    memory_mb: int = 4096
    max_output_mb: int = 16
    nofile: int = 256
    nproc: int = 64
    startup_s: float = 60.0

    def __post_init__(self) -> None:
        for name, (low, high) in LIMIT_RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not low <= value <= high:
                raise ValueError(f"task.{name}: must be a finite number in [{low}, {high}], got {value!r}")

    def rlimits(self, n_tests: int) -> dict[str, int]:
        """The driver's rlimits for a run of ``n_tests`` tests (CPU for every phase and a margin, the rest as set)."""
        return {"cpu_s": int((n_tests + 1) * self.timeout_s) + 2, "as_bytes": self.memory_mb * MiB,
                "fsize_bytes": self.max_output_mb * MiB, "nofile": self.nofile, "nproc": self.nproc}
