"""Answer extraction and per-item scoring, as the official ``pred.py`` (``extract_answer``, ``judge``).

Extraction: remove every ``*`` (markdown bold), then the first ``The correct answer is (X)``, else the first
``The correct answer is X``, with X one of A-D; case-sensitive, no word boundary after X (so "The correct answer is
Bob" reads as B, exactly as in the official runs). Nothing found: ``prediction=None``, counted wrong.

Protocols (``task.protocol``): :mod:`tasks.longbench_v2.protocols` (``strict`` default, ``raw``, ``drop_empty``).
Only ``drop_empty`` marks a row ``skipped`` (its answer part is empty), which :mod:`.summary` leaves out.
"""

from __future__ import annotations

import re
from typing import Any

from tasks.longbench_v2.data import Item
from tasks.longbench_v2.protocols import protocol_name

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


def score(item: Item, completion: str, *, cfg: Any = None) -> dict[str, Any]:
    """``prediction`` (letter or None), ``answer``, ``correct`` (the official ``judge``: prediction == answer),
    ``answered`` (a letter was extracted; the ``compensated`` metric gives unanswered items 0.25), ``skipped`` (only
    under ``drop_empty``: the answer part is empty, the row leaves every denominator) and ``protocol``.

    ``completion`` is the answer part (:func:`tasks.longbench_v2.protocols.answer_part`): for a thinking model under
    ``strict`` the text after ``</think>``, empty when the thinking never closed; under ``raw`` the whole text.
    """
    protocol = protocol_name(cfg)
    prediction = extract_answer(completion)
    return {
        "prediction": prediction,
        "answer": item.answer,
        "correct": prediction == item.answer,
        "answered": prediction is not None,
        "skipped": protocol == "drop_empty" and completion == "",
        "protocol": protocol,
    }
