"""The flat table of tasks: name -> module, imported lazily so that listing tasks costs nothing."""

from __future__ import annotations

import importlib
from types import ModuleType

from snapstream_core.hints import did_you_mean
from tasks.protocol import Task

TASKS: dict[str, str] = {
    "needle": "tasks.needle",
    "longbench_v2": "tasks.longbench_v2",
    "aime24": "tasks.aime24",
    "livecodebench": "tasks.livecodebench",
    "lm_eval": "tasks.lm_eval",
}


def get_task(name: str) -> ModuleType:
    """Return the task module registered as ``name``; an unknown name raises ``ValueError`` with suggestions."""
    if name not in TASKS:
        hint = did_you_mean(name, TASKS)
        raise ValueError(f"task.name: unknown task '{name}'. Known: {', '.join(sorted(TASKS))}.{hint}")
    module = importlib.import_module(TASKS[name])
    if not isinstance(module, Task):
        missing = [fn for fn in ("load", "prompt", "score", "summarize") if not callable(getattr(module, fn, None))]
        raise TypeError(f"task module {TASKS[name]} lacks {', '.join(missing)} (see tasks/protocol.py)")
    return module
