"""Every warning logged once per process: a grader library that warns on every answer it parses (latex2sympy2's
deprecation notice, once per AIME answer) says it once."""

from __future__ import annotations

import logging


class OnceFilter(logging.Filter):
    """Lets a WARNING (or higher) record through the first time its (logger, message) is seen; INFO always."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, record.getMessage())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


def install() -> OnceFilter:
    """Add one :class:`OnceFilter` to every handler of the root logger (idempotent)."""
    root = logging.getLogger()
    for handler in root.handlers:
        for f in handler.filters:
            if isinstance(f, OnceFilter):
                return f
    once = OnceFilter()
    for handler in root.handlers:
        handler.addFilter(once)
    return once
