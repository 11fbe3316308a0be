"""Benchmarks as plain modules: ``load / prompt / score / summarize`` (the interface: :mod:`tasks.protocol`).

A task module imports no torch. Look one up by name with :func:`get_task`.
"""

from tasks.registry import TASKS, get_task

__all__ = ["TASKS", "get_task"]
