"""LongBench-v2 grading protocols (``task.protocol``): what a thinking model's completion is graded on.

A leaf module (imports nothing from the package), read by :mod:`.data` (``validate``), :mod:`.grader` and the task's
``answer_part``. The official ``pred.py`` reads the served model's text and runs ``extract_answer`` on it; LongBench's
README serves the model with plain ``vllm serve`` (no reasoning parser), so the literal pipeline extracts from the
whole text, thinking included. ``pred.py``'s ``if output == '': continue`` handles a failed API call, not an
unfinished answer.

- ``strict`` (default): the text after the last ``</think>`` (:func:`tasks.base.split_thinking`); a thinking block
  that never closes, or nothing after it, leaves no answer: the item counts wrong, never dropped. Non-thinking
  models: the whole text. Every item stays in every denominator, as ``result.py`` divides by the items written.
- ``raw``: ``pred.py``'s extraction on the whole completion (the literal official pipeline with a server that has no
  reasoning parser): a "The correct answer is (X)" inside the thinking counts.
- ``drop_empty``: kept only to compare with runs scored that way: as ``strict``, but a row
  whose answer part is empty (an unfinished thinking block, an empty output) is left out of every denominator
  (``skipped``). It biases comparisons between methods that run out of tokens at different rates: not a default.
"""

from __future__ import annotations

from typing import Any

from tasks.base import split_thinking
from tasks.source import protocol_of

PROTOCOLS = ("strict", "raw", "drop_empty")


def protocol_name(cfg: Any) -> str:
    """The grading protocol of this run (``task.protocol``), as rows and ``meta.json`` record it."""
    return protocol_of(cfg, PROTOCOLS)


def answer_part(completion: str, thinking: bool, *, cfg: Any = None) -> tuple[str, bool]:
    """``(text to extract the letter from, thinking_closed)`` under ``task.protocol`` (see the module docstring)."""
    return split_thinking(completion, thinking, whole=protocol_name(cfg) == "raw")
