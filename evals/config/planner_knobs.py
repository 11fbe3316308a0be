"""``plan.gpus`` and ``plan.shards``: the planner's wall-clock knobs (``python -m evals.plan``, docs/plan.md).

Read by the planner only; a run uses one device per process and is split over devices with ``shard=K/N``, so a run
given either refuses it (one line) rather than ignoring it.
"""

from __future__ import annotations

from typing import Any

AUTO = "auto"


def check_planner_knobs(plan: dict[str, Any], *, planning: bool) -> None:
    """Refuse a bad ``plan.gpus`` (an integer >= 1) or ``plan.shards`` (an integer >= 1 or ``auto``), and either
    given to a run (``planning`` False); ``null`` is their default (1 GPU, 1 shard per job)."""
    gpus, shards = plan.get("gpus"), plan.get("shards")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1):
        raise ValueError(f"plan.gpus: expected an integer >= 1, got {gpus!r}")
    if shards is not None and shards != AUTO and (isinstance(shards, bool) or not isinstance(shards, int)
                                                  or shards < 1):
        raise ValueError(f"plan.shards: expected an integer >= 1 or auto, got {shards!r}")
    if not planning:
        for name, value in (("gpus", gpus), ("shards", shards)):
            if value is not None:
                raise ValueError(f"plan.{name}: read by python -m evals.plan only (the grid's wall clock); a run "
                                 f"uses one device: split a job over devices with shard=K/N (docs/sharding.md)")
