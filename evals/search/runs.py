"""What the search composes for each budget: the overrides of a job, whether a job can be searched at all, and the
budget knob it sets (the jobs then run as ordinary runs through ``evals.execute.loop.run``; each is measured against the
full cache by :mod:`evals.report.search_measure`)."""

from __future__ import annotations

from snapstream_core.methods import METHODS
from tasks import get_task
from tasks.protocol import hook


def with_compression(overrides: list[str], name: str) -> list[str]:
    """``overrides`` with the compression group set to ``name`` (replacing the given one)."""
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != "compression"] + [f"compression={name}"]


def check_searchable(method: str, task_module: str, task_name: str) -> None:
    """One line (``ValueError``) for a job the search cannot run: no compression method, a method without a
    budget, a task without a paired headline."""
    if method == "none":
        raise ValueError("compression: the search needs a compression method (compression=snapkv, snapstream, "
                         "streaming_llm, ...), got none (the full cache is the reference)")
    cls = METHODS.get(method)
    if cls is None or cls.budget_knob not in cls.field_names():
        raise ValueError(f"compression={method}: has no budget to search over")
    if hook(get_task(task_module), "PRIMARY_METRIC") is None:
        named = f"task={task_module}" + (f" ({task_name})" if task_module != task_name else "")
        raise ValueError(f"{named}: no paired headline (its headline is not a mean of per-item scores "
                         "declared by PRIMARY_METRIC), so a budget cannot be tested against the full cache")


def budget_knob(method: str) -> str:
    """``compression.<knob>`` the search sets for a job of ``method``: the method's ``budget_knob`` (``prompt_budget``,
    or ``budget`` for a whole-cache method)."""
    cls = METHODS.get(method)
    return f"compression.{cls.budget_knob if cls is not None else 'prompt_budget'}"
