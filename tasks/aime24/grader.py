"""AIME answer extraction and grading: the last ``\\boxed{...}``, an integer comparison, then Math-Verify.

Protocol (DeepSeek-R1 card / open-r1): the model is asked to put its final answer within ``\\boxed{}``; the gold is
an integer 0-999 (some datasets write it zero-padded, "025"). A prediction is correct when

1. both the boxed content and the gold are integer literals (after stripping ``$``, spaces, ``\\text{}``-style
   wrappers and a trailing period) and they are equal as integers ("025" == "25"), or otherwise
2. Math-Verify says so: ``verify(parse(gold), parse(pred))``, gold first (``\\dfrac{50}{2}``, ``x = 25``, ``25.0``).

Extraction is conservative and never raises:

- only the **last** ``\\boxed`` counts; its argument is read with brace matching (``\\{`` and ``\\}`` are literal
  braces); ``\\boxed 25`` (argument without braces, as in Hendrycks' MATH tooling and Math-Verify) is accepted;
- a last ``\\boxed{`` that never closes (a completion cut mid-answer) gives no prediction: we do not fall back to an
  earlier box;
- ``\\fbox{}`` is **not** an answer marker: Math-Verify's extraction (what lighteval/open-r1 run) only triggers on
  ``\\boxed``; R1 models write ``\\boxed``;
- no box, an empty box, or a box longer than :data:`MAX_ANSWER_CHARS` gives ``prediction=None``. Unlike lighteval we
  do not fall back to "the last number in the text": the instruction asks for a box.

Math-Verify bounds its own time with ``signal.alarm``, which only works in the main thread. Off the main thread we
send the comparison to a child process (:mod:`tasks.aime24.verify_worker`) whose main thread can use the alarm, with
a hard backstop, so grading from a worker thread gives the same verdicts and never hangs on ``9^{9^{9}}``.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Any

from tasks.aime24.compare import SPACES as _SPACES
from tasks.aime24.compare import clear_caches as _clear_compare_caches
from tasks.aime24.compare import math_verify_compare
from tasks.aime24.lighteval_metric import DEFAULT_GRADER_VERSION, lighteval_compare, prepare
from tasks.aime24.verify_worker import WORKER

log = logging.getLogger(__name__)

MAX_ANSWER_CHARS = 256  # an AIME answer is at most 3 digits; anything this long is not an answer
DEFAULT_TIMEOUT_S = 5  # Math-Verify's own default, per parse and per comparison

_BOXED = re.compile(r"\\boxed(?![A-Za-z])")
_INT = re.compile(r"[+-]?\d+")
_WRAPPERS = re.compile(r"^\\(?:text|textbf|mathbf|mathrm|boxed)\s*\{(.*)\}$", re.DOTALL)


@dataclass(frozen=True)
class Grade:
    """The verdict on one completion. ``prediction`` is the canonical answer used for votes (an integer as a plain
    decimal string, else the boxed text without spaces), ``boxed`` the raw boxed text (None when nothing was
    extracted)."""

    prediction: str | None
    correct: bool
    boxed: str | None


def last_boxed(text: Any) -> str | None:
    """Return the argument of the last ``\\boxed`` in ``text`` (stripped), or None. Never raises."""
    if not isinstance(text, str) or "\\boxed" not in text:
        return None
    match = None
    for match in _BOXED.finditer(text):
        pass
    if match is None:
        return None
    i = match.end()
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        return None
    if text[i] != "{":
        if i == match.end():  # "\boxed5" is not LaTeX for a boxed 5
            return None
        token = re.match(r"[^\s$]+", text[i:])
        content = token.group(0).rstrip(".,;").encode("utf-8", "replace").decode("utf-8") if token else ""
        return content or None
    content = _braced(text, i)
    if content is None:
        return None
    # rows are written as UTF-8 JSON: a lone surrogate from a broken decode must not make the row unwritable
    content = content.strip().encode("utf-8", "replace").decode("utf-8")
    return content or None


def _braced(text: str, open_at: int) -> str | None:
    """The text between the brace at ``open_at`` and its matching close, or None when it never closes."""
    depth = 0
    i = open_at
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2  # an escaped character (\{, \}, \\) never opens or closes a group
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
        i += 1
    return None


def integer_value(text: str | None) -> int | None:
    """The integer that ``text`` writes literally ("025", " 25 ", "$25$", "\\text{25}", "25."), or None."""
    if text is None:
        return None
    s = text.strip()
    for _ in range(3):  # peel a few layers of $...$ and \text{...}
        s = s.strip().strip("$").strip()
        inner = _WRAPPERS.match(s)
        if inner is None:
            break
        s = inner.group(1)
    s = _SPACES.sub("", s).rstrip(".")
    if len(s) > 12 or not _INT.fullmatch(s):
        return None
    return int(s)


def canonical_answer(answer: Any) -> str:
    """The gold answer as graded and shown in rows: "025" -> "25"; non-integers stay as written."""
    text = str(answer).strip()
    value = integer_value(text)
    return str(value) if value is not None else text


def grade(gold: Any, completion: Any, *, timeout_s: int = DEFAULT_TIMEOUT_S) -> Grade:
    """Grade ``completion`` (the answer part of a model output) against ``gold``. Never raises."""
    try:
        boxed = last_boxed(completion)
    except Exception:  # noqa: BLE001 - extraction must never take a run down
        log.debug("boxed extraction failed", exc_info=True)
        boxed = None
    if boxed is None or len(boxed) > MAX_ANSWER_CHARS:
        return Grade(prediction=None, correct=False, boxed=None if boxed is None else boxed[:MAX_ANSWER_CHARS])
    gold_text = str(gold).strip()
    pred_int = integer_value(boxed)
    gold_int = integer_value(gold_text)
    if pred_int is not None and gold_int is not None:
        return Grade(prediction=str(pred_int), correct=pred_int == gold_int, boxed=boxed)
    key, correct = math_verify_equal(gold_text, boxed, timeout_s=timeout_s)
    return Grade(prediction=key, correct=correct, boxed=boxed)


def math_verify_equal(gold: str, boxed: str, *, timeout_s: int = DEFAULT_TIMEOUT_S) -> tuple[str, bool]:
    """``(canonical prediction, verify(parse(gold), parse(pred)))``, safe from any thread; False on any failure.
    Verdicts are memoised (n samples of one problem often repeat an answer)."""
    key = (gold, boxed, timeout_s)
    verdict = _VERDICTS.get(key)
    if verdict is None:
        if threading.current_thread() is threading.main_thread():
            verdict = math_verify_compare(gold, boxed, timeout_s)
        else:
            verdict = WORKER.ask(gold, boxed, timeout_s)
        if verdict is not None and len(_VERDICTS) < _MAX_MEMO:
            _VERDICTS[key] = verdict
    return verdict if verdict is not None else (_SPACES.sub("", boxed), False)


_MAX_MEMO = 100_000
_VERDICTS: dict[tuple[str, str, int], tuple[str, bool]] = {}



def grade_lighteval(gold: Any, completion: Any, *, timeout_s: int = DEFAULT_TIMEOUT_S,
                    version: str = DEFAULT_GRADER_VERSION) -> Grade:
    """Grade ``completion`` as lighteval's aime24 metric does (:mod:`tasks.aime24.lighteval_metric`, ``version`` one
    of its ``GRADER_VERSIONS``): reasoning tags removed when both are present (not for ``open-r1``), then the
    extraction over the whole text. Safe from any thread; never raises. ``boxed`` holds the last ``\\boxed{}`` for
    reference only."""
    text = completion if isinstance(completion, str) else ""
    try:
        text = prepare(text, version)
        boxed = last_boxed(text)
    except Exception:  # noqa: BLE001
        boxed = None
    gold_text = str(gold).strip()
    if threading.current_thread() is threading.main_thread():
        verdict: tuple[str | None, bool] | None = lighteval_compare(gold_text, text, timeout_s, version)
    else:
        verdict = WORKER.ask(gold_text, text, timeout_s, mode="lighteval", version=version)
    key, correct = verdict if verdict is not None else (None, False)
    return Grade(prediction=key, correct=correct, boxed=None if boxed is None else boxed[:MAX_ANSWER_CHARS])


def clear_caches() -> None:
    """Forget memoised verdicts (for timing measurements)."""
    _VERDICTS.clear()
    _clear_compare_caches()
