"""Answer extraction and per-item scoring, as the official ``pred.py`` (``extract_answer``, ``judge``).

Extraction: remove every ``*`` (markdown bold), then the first ``The correct answer is (X)``, else the first
``The correct answer is X``, with X one of A-D; case-sensitive, no word boundary after X (so "The correct answer is
Bob" reads as B, exactly as in the official runs). Nothing found: ``prediction=None``, counted wrong.

Protocols (``task.protocol``, :data:`PROTOCOLS`): ``official`` (default) follows ``pred.py``, which skips an item
whose model output is empty (``if output == '': continue``: never written, so ``result.py`` leaves it out of every
denominator); such a row is kept in ``samples.jsonl`` with ``skipped=True`` and left out by :mod:`.summary`.
``strict``: an empty output stays in the denominator, counted wrong (unanswered).
"""

from __future__ import annotations

import re
from typing import Any

from tasks.longbench_v2.data import Item
from tasks.source import protocol_of

PROTOCOLS = ("official", "strict")

_IN_PARENS = re.compile(r"The correct answer is \(([A-D])\)")
_BARE = re.compile(r"The correct answer is ([A-D])")


def extract_answer(response: str) -> str | None:
    """The chosen letter, or None. Never raises: a non-string response reads as no answer."""
    if not isinstance(response, str):
        return None
    text = response.replace("*", "")
    for pattern in (_IN_PARENS, _BARE):
        found = pattern.search(text)
        if found:
            return found.group(1)
    return None


def protocol_name(cfg: Any) -> str:
    """The grading protocol of this run (``task.protocol``), as rows and ``meta.json`` record it."""
    return protocol_of(cfg, PROTOCOLS)


def score(item: Item, completion: str, *, cfg: Any = None) -> dict[str, Any]:
    """``prediction`` (letter or None), ``answer``, ``correct`` (the official ``judge``: prediction == answer),
    ``answered`` (a letter was extracted; the ``compensated`` metric gives unanswered items 0.25), ``skipped`` (the
    ``official`` protocol drops this row: the output was empty, as ``pred.py`` drops it) and ``protocol``.

    ``completion`` is the answer part: for a thinking model the text after ``</think>``, empty when the thinking never
    closed (what an OpenAI-compatible server with a reasoning parser returns as ``content``, which ``pred.py`` reads).
    """
    protocol = protocol_name(cfg)
    prediction = extract_answer(completion)
    return {
        "prediction": prediction,
        "answer": item.answer,
        "correct": prediction == item.answer,
        "answered": prediction is not None,
        "skipped": protocol == "official" and completion == "",
        "protocol": protocol,
    }
