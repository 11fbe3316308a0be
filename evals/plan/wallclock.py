"""Wall-clock time of a planned grid on ``plan.gpus`` GPUs, each job split into ``plan.shards`` shards.

A shard (``shard=K/N``, :mod:`evals.config.shard`) runs item ``i`` of its job when ``i % N == K``: shard ``K`` of
a job of ``n`` items holds ``ceil((n - K) / N)`` items, and its time is the job's cost model
(:func:`evals.plan.cost.job_cost`) on those items, with its own rows (the most that fit, at most its samples): so
each shard pays its own items' prefill and its own end of decode (the last straggler's ``max_new_tokens`` steps),
and the shards of a job together cost more GPU-hours than the job. Each shard compiles its graphs once (its own
process: ``Cost.compile_s``, :mod:`evals.plan.compile_time`); model load is not in the planner's cost model.

Schedule: longest processing time first (LPT, Graham 1969): every shard of every computed job, longest first, goes
to the GPU that is free first; the wall clock is the last GPU's finish. It is within 4/3 of the best schedule, and
never below ``max(GPU-hours / GPUs, the longest shard)`` (the bound printed beside it).

``plan.shards=auto``: for ``d`` in 1..4, each job gets the fewest shards (at most ``plan.gpus`` and its items) whose
longest shard is at most the grid's GPU-hours / GPUs / ``d``; the fastest of the four schedules is kept (ties: the
fewest pieces), or no job split when that is as fast: splitting costs GPU-hours (each shard's own straggler), so a
grid whose GPU-hours / GPUs already exceed its longest job is left whole.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace

from evals.plan.device import H100, Device
from evals.plan.planner import Planned, plan_one

AUTO = "auto"


@dataclass(frozen=True)
class Piece:
    """One shard of one job: its label (``model task method n=… [K/N]``) and its GPU-hours."""

    label: str
    hours: float


@dataclass(frozen=True)
class WallClock:
    gpus: int
    hours: float  # the LPT schedule's finish
    bound: float  # max(GPU-hours / GPUs, the longest piece): no schedule finishes before it
    gpu_hours: float  # the pieces' sum (the shards' own prefill and stragglers included)
    pieces: tuple[Piece, ...]
    shards: tuple[int, ...]  # per planned job (0: computes nothing of its own)
    longest: tuple[float, ...]  # per planned job, its longest shard's GPU-hours
    loads: tuple[float, ...]  # per GPU, its hours under the schedule


def shard_items(n_items: int, k: int, n: int) -> int:
    """Items of shard ``k`` of ``n`` for a job of ``n_items`` (round robin: ``i % n == k``)."""
    return max(0, math.ceil((n_items - k) / n))


def shard_hours(p: Planned, shards: int, memory_gib: float | None = None, device: Device = H100) -> list[float]:
    """GPU-hours of each of ``shards`` shards of the computed job ``p`` (one shard: the job's own)."""
    if shards == 1:
        return [p.gpu_hours]
    out = []
    for k in range(shards):
        part = plan_one(replace(p.job, n_items=shard_items(p.job.n_items, k, shards)), memory_gib, device)
        out.append(part.cost.gpu_hours if part.cost is not None else 0.0)
    return out


def lpt(pieces: list[Piece], gpus: int) -> tuple[float, tuple[float, ...]]:
    """Longest processing time first on ``gpus`` GPUs: ``(finish, hours per GPU)``."""
    free = [(0.0, g) for g in range(gpus)]
    loads = [0.0] * gpus
    for piece in sorted(pieces, key=lambda x: -x.hours):
        t, g = heapq.heappop(free)
        loads[g] = t + piece.hours
        heapq.heappush(free, (loads[g], g))
    return max(loads, default=0.0), tuple(loads)


def wall_clock(planned: list[Planned], gpus: int = 1, shards: int | str = 1, memory_gib: float | None = None,
               device: Device = H100) -> WallClock:
    """The grid's wall clock on ``gpus`` GPUs with ``shards`` shards per job (an integer, or ``auto``)."""
    cache: dict[tuple[int, int], list[float]] = {}

    def hours(k: int, n: int) -> list[float]:
        if (k, n) not in cache:
            cache[k, n] = shard_hours(planned[k], n, memory_gib, device)
        return cache[k, n]

    computed = [k for k, p in enumerate(planned) if p.gpu_hours > 0]
    most = {k: max(1, min(planned[k].job.n_items, gpus if shards == AUTO else int(shards))) for k in computed}
    if shards != AUTO:
        return _schedule(planned, gpus, {k: most[k] for k in computed}, hours)
    target = sum(planned[k].gpu_hours for k in computed) / gpus
    best = _schedule(planned, gpus, dict.fromkeys(computed, 1), hours)  # no job split: auto is never slower
    for divisor in AUTO_DIVISORS:  # pieces at most target / d: the fewest shards per job that get there
        counts = {}
        for k in computed:
            n = 1
            while max(hours(k, n)) > target / divisor and n < most[k]:
                n += 1
            counts[k] = n
        w = _schedule(planned, gpus, counts, hours)
        if (round(w.hours, 6), len(w.pieces)) < (round(best.hours, 6), len(best.pieces)):
            best = w
    return best


AUTO_DIVISORS = (1, 2, 3, 4)  # plan.shards=auto tries pieces of at most GPU-hours / GPUs / d and keeps the fastest


def _schedule(planned: list[Planned], gpus: int, counts: dict[int, int], hours) -> WallClock:
    """LPT over the shards ``counts`` (job index -> shards) of the computed jobs; ``hours(k, n)``: their hours."""
    pieces, shards, longest = [], [], []
    for k, p in enumerate(planned):
        n = counts.get(k, 0)
        each = hours(k, n) if n else []
        shards.append(n)
        longest.append(max(each, default=0.0))
        pieces += [Piece(p.job.label + (f" [{i}/{n}]" if n > 1 else ""), h) for i, h in enumerate(each)]
    finish, loads = lpt(pieces, gpus)
    total = sum(x.hours for x in pieces)
    bound = max(total / gpus, max((x.hours for x in pieces), default=0.0))
    return WallClock(gpus, finish, bound, total, tuple(pieces), tuple(shards), tuple(longest), loads)


def wall_line(w: WallClock, shards: int | str, unsharded: float | None = None) -> str:
    """The printed line: the wall clock beside the GPU-hours it schedules (and, given, the same GPUs' wall clock
    with every job in one piece)."""
    split = sum(n > 1 for n in w.shards)
    longest = max((x.hours for x in w.pieces), default=0.0)
    what = f"plan.shards={shards}: {split} job(s) split, {len(w.pieces)} pieces" if split else (
        f"{len(w.pieces)} jobs in one piece each")
    before = f"; {unsharded:.1f} h without shards" if unsharded is not None else ""
    return (f"wall clock on {w.gpus} GPU(s): {w.hours:.1f} h for {w.gpu_hours:.1f} GPU-hours ({what}, longest "
            f"first; longest piece {longest:.1f} h; no schedule below {w.bound:.1f} h{before}); each shard's "
            "compile, prefill and last straggler counted, model load not modelled")
