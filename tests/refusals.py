"""Helpers of the refusal tests: a hostile JSON value, and the check that an error is one line."""

from __future__ import annotations

import pytest

DEEP = "[" * 100_000 + "]" * 100_000  # JSON nested 100,000 levels deep: past any recursion limit


def one_line_error(err: pytest.ExceptionInfo) -> str:
    """The text of the caught error, checked to be a single line."""
    text = str(err.value)
    assert "\n" not in text, text
    return text
