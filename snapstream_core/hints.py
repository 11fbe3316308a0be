"""The "did you mean" hint of every error that names an unknown value (methods, knobs, tasks, backends, options)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(value: object, choices: Iterable[str], n: int = 1) -> str:
    """``" Did you mean 'x'?"`` (up to ``n`` close matches of ``value`` among ``choices``), or ``""`` if none is close.

    Appended to a one-line ``ValueError`` message that already lists what is allowed."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=n)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
