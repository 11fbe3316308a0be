"""A task's metrics as the report names them: its primary metric (``PRIMARY_METRIC``, else the first it reports)."""

from __future__ import annotations

import pandas as pd

from tasks.protocol import hook


def primary_metric(task: str, frame: pd.DataFrame) -> str:
    """The task module's ``PRIMARY_METRIC``, else the first metric it reports."""
    metrics = list(dict.fromkeys(frame["metric"]))
    metric = hook(task_module(task), "PRIMARY_METRIC")
    return metric if metric in metrics else metrics[0]


def task_module(name: str):
    """The task module registered as ``name``; None for a name no task answers."""
    try:
        from tasks import get_task

        return get_task(name)
    except (ValueError, ImportError, TypeError):
        return None
