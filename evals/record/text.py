"""Text read from outside (replayed completions) made safe to write as UTF-8."""

from __future__ import annotations

from typing import Any


def repair_surrogates(value: Any) -> Any:
    """``value`` with every lone UTF-16 surrogate in its strings (JSON's ``"\\ud800"``, which UTF-8 cannot hold)
    replaced by U+FFFD; a surrogate pair written as two escapes becomes the one character it encodes, as JSON
    means it. Dicts and lists are repaired throughout; other values are returned as they are."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if isinstance(value, dict):
        return {repair_surrogates(k): repair_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [repair_surrogates(v) for v in value]
    return value
