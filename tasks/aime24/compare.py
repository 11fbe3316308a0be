"""Math-Verify comparisons that must run in a main thread: ours (the ``boxed`` protocol) and lighteval's metric.

A leaf module: :mod:`tasks.aime24.grader` calls these in the main thread and :mod:`tasks.aime24.verify_worker`'s child
calls them for graders running off it; neither of those is imported here.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from tasks.aime24.lighteval_metric import DEFAULT_GRADER_VERSION, lighteval_compare

log = logging.getLogger(__name__)

SPACES = re.compile(r"\s+|\\[,;:! ]|~")


def math_verify_compare(gold: str, boxed: str, timeout_s: int) -> tuple[str, bool]:
    """Math-Verify with its signal-based timeouts; must run in a main thread (ours or a child process's)."""
    fallback = SPACES.sub("", boxed)
    try:
        import sympy
        from math_verify import parse, verify

        gold_parsed = _parse_gold(gold, timeout_s)
        pred_parsed = parse("\\boxed{" + boxed + "}", parsing_timeout=timeout_s)
        key = _integer_key(pred_parsed[0], sympy) if pred_parsed else None
        key = key if key is not None else fallback
        if not gold_parsed or not pred_parsed:
            return key, False
        return key, bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout_s))
    except Exception:  # noqa: BLE001 - a grader failure is a wrong answer, not a crash
        log.debug("math-verify failed on %.80r", boxed, exc_info=True)
        return fallback, False


def _integer_key(value: Any, sympy: Any) -> str | None:
    """The integer a parsed prediction denotes, by class checks only (an unevaluated 9^(9^9) stays unevaluated).
    ``m + n = 25`` (an equation with an integer right-hand side) votes for 25."""
    try:
        if isinstance(value, sympy.Equality):
            value = value.rhs
        if isinstance(value, sympy.Integer):
            return str(int(value)) if abs(value) < 10**12 else None
        if isinstance(value, sympy.Float):
            number = float(value)
            return str(int(number)) if abs(number) < 1e12 and number.is_integer() else None
    except Exception:  # noqa: BLE001
        return None
    return None


def _parse_gold(gold: str, timeout_s: int) -> list:
    from math_verify import parse

    return _GOLD_CACHE.get(gold) or _GOLD_CACHE.setdefault(gold, parse("$" + gold + "$", parsing_timeout=timeout_s))


_GOLD_CACHE: dict[str, list] = {}


def compare(mode: str, gold: str, text: str, timeout_s: int,
            version: str = DEFAULT_GRADER_VERSION) -> tuple[str | None, bool]:
    """``mode`` ``boxed``: :func:`math_verify_compare` on a boxed answer; ``lighteval``:
    :func:`~tasks.aime24.lighteval_metric.lighteval_compare` on a whole (prepared) answer text."""
    if mode == "lighteval":
        return lighteval_compare(gold, text, timeout_s, version)
    return math_verify_compare(gold, text, timeout_s)


def clear_caches() -> None:
    """Forget parsed golds."""
    _GOLD_CACHE.clear()
