"""A module imported at its first attribute read: task modules name pandas at import but use it only to summarise,
and the planner and the runner's ``check()`` import every task module they plan, on site stacks that may lack
pandas (``make test-compat``: the planner imports no pandas)."""

from __future__ import annotations

import importlib
from types import ModuleType


class LazyModule:
    """Stands for the module ``name``: ``pd = LazyModule("pandas")``, then ``pd.DataFrame`` imports pandas."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        module: ModuleType = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"LazyModule({self._name!r})"
