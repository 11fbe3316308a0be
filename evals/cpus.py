"""CPU threads for busy cores: as many threads as the CPUs this process may really use, waiting passively.

On a machine shared with other jobs, OpenMP threads that spin while they wait for work burn the cores the other jobs
need, and a thread count taken from ``os.cpu_count()`` oversubscribes a process pinned to fewer CPUs (affinity) or
held to a CPU quota (a container's cgroup). :func:`prepare` runs first in each command that may load torch
(``evals.run``, ``evals.plan``, ``evals.search``, the test suite's ``conftest.py``), before torch is imported: it
fills the OpenMP/MKL variables that torch and its BLAS read once, at load. A variable already in the environment is
kept (the user's choice wins, and child processes inherit what was chosen). Nothing happens at import of this module.

Measured effect (``python -m bench.busy_cores``): CPU seconds per generated token of ``make eval``'s needle job,
idle and beside busy processes (``bench/README.md``).
"""

from __future__ import annotations

import logging
import math
import os
import sys
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
# libgomp (torch's OpenMP on Linux) and Intel's runtime: wait by sleeping, not by spinning, once a parallel region ends
PASSIVE = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _cgroup_paths(proc_cgroup: str) -> dict[str, str]:
    """``{controller: path}`` from ``/proc/self/cgroup`` text; cgroup v2's unified line under the key ``""``."""
    paths: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(","):
                paths[controller] = parts[2]
    return paths


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_cpu_limit(root: Path = CGROUP_ROOT, proc_cgroup: str | None = None) -> float | None:
    """The CPU quota of this process's cgroup in CPUs (``quota / period``), or None when unlimited or unreadable.

    cgroup v2: ``cpu.max`` (``"max 100000"`` or ``"200000 100000"``) of the process's group and each parent; v1:
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (``-1``: unlimited). The tightest quota on the path wins."""
    if proc_cgroup is None:
        proc_cgroup = _read(Path("/proc/self/cgroup")) or ""
    paths = _cgroup_paths(proc_cgroup)
    limits: list[float] = []
    if "" in paths:  # v2
        rel = Path(paths[""].lstrip("/"))
        for folder in [root / rel, *(root / p for p in rel.parents)]:
            text = _read(folder / "cpu.max")
            if text:
                quota, _, period = text.partition(" ")
                if quota != "max" and period.isdigit() and quota.isdigit() and int(period) > 0:
                    limits.append(int(quota) / int(period))
    if "cpu" in paths:  # v1
        base = root / "cpu"
        rel = Path(paths["cpu"].lstrip("/"))
        for folder in [base / rel, *(base / p for p in rel.parents)]:
            quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
            if quota and period and quota.lstrip("-").isdigit() and period.isdigit():
                if int(quota) > 0 and int(period) > 0:
                    limits.append(int(quota) / int(period))
    return min(limits) if limits else None


def usable_cpus(root: Path = CGROUP_ROOT, proc_cgroup: str | None = None) -> int:
    """The CPUs this process may run on (its affinity mask), capped by its cgroup quota rounded up; at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_limit(root, proc_cgroup)
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def thread_env(threads: int) -> dict[str, str]:
    """The variables :func:`prepare` fills: ``threads`` per OpenMP/MKL/OpenBLAS pool, passive waiting."""
    return {**{var: str(threads) for var in THREAD_VARS}, **PASSIVE}


def prepare(threads: int | None = None) -> dict[str, str]:
    """Fill the thread and wait-policy variables not already set (``threads``: default :func:`usable_cpus`);
    return what was set. Call before torch loads; if it already did, its intra-op pool is resized too."""
    wanted = thread_env(threads or usable_cpus())
    chosen = {k: v for k, v in wanted.items() if k not in os.environ}
    os.environ.update(chosen)
    if "torch" in sys.modules and "OMP_NUM_THREADS" in chosen:
        sys.modules["torch"].set_num_threads(int(chosen["OMP_NUM_THREADS"]))
    return chosen
