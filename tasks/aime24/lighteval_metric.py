"""lighteval's aime24 metric (the default ``task.protocol=lighteval``), reproduced with Math-Verify.

Followed: huggingface/lighteval ``src/lighteval/tasks/tasks/aime.py`` (``aime24``: ``Metrics.pass_at_k_math`` with
k=1) and ``src/lighteval/metrics/metrics.py`` (``pass_at_k_math``: ``PassAtK(strip_strings=True)`` over
``MultilingualExtractiveMatchMetric`` with ``ExprExtractionConfig()`` + ``LatexExtractionConfig()`` for gold and
prediction, ``precision=6``, ``fallback_mode="first_match"``, ``extraction_mode="any_match"``, 5 s timeouts). Before
grading, ``Pipeline`` applies ``utils.remove_reasoning_tags`` with ``[("<think>", "</think>")]`` (on by default): a
``<think>…</think>`` span is cut only while both tags are present, start before end; otherwise the whole text is
graded. So "Thus m+n = 25." and "The final answer is $25$." count, a completion whose thinking never closed is
graded as it stands, and among several answers the extraction priorities decide (a ``\\boxed{}`` before plain
numbers; the last match of a kind).

Differences from lighteval's own copy of the extraction code are Math-Verify's (lighteval vendors an older copy);
``LatexExtractionConfig`` gets lighteval's defaults (``boxed_match_priority=55``, ``equations=True``).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

THINK_TAGS = (("<think>", "</think>"),)
PRECISION = 6  # pass_at_k_math(precision=6) -> verify(float_rounding=6)


def remove_reasoning_tags(text: str, tag_pairs: tuple[tuple[str, str], ...] = THINK_TAGS) -> str:
    """lighteval ``utils.remove_reasoning_tags``: cut each ``start…end`` span, left to right, while both tags are in
    the text and an end follows the first start."""
    result = text
    for start_tag, end_tag in tag_pairs:
        while start_tag in result and end_tag in result:
            start = result.find(start_tag)
            end = result.find(end_tag, start)
            if start == -1 or end == -1:
                break
            result = result[:start] + result[end + len(end_tag):]
    return result


def _configs() -> list:
    from latex2sympy2_extended.latex2sympy2 import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    latex = LatexExtractionConfig(
        boxed_match_priority=55,
        normalization_config=NormalizationConfig(
            basic_latex=True, units=True, malformed_operators=True, nits=True, boxed="all", equations=True
        ),
    )
    return [ExprExtractionConfig(), latex]


def lighteval_compare(gold: str, text: str, timeout_s: int) -> tuple[str | None, bool]:
    """``(prediction key, correct)`` as lighteval's ``MultilingualExtractiveMatchMetric`` decides for one sample.

    Must run in a main thread (Math-Verify's alarms). ``text`` is the completion after :func:`remove_reasoning_tags`.
    The prediction key (for majority votes) is the first extracted value, an integer written plainly; None when
    nothing was extracted. Never raises: any failure is a wrong answer.
    """
    try:
        import sympy
        from math_verify import parse, verify

        configs = _configs()
        gold_parsed = parse(gold.strip(), extraction_config=configs, parsing_timeout=timeout_s)
        if not gold_parsed:  # lighteval: "did not manage to extract a gold" -> the raw gold string
            gold_parsed = [gold.strip()]
        pred = parse(text.strip(), extraction_config=configs, fallback_mode="first_match",
                     extraction_mode="any_match", parsing_timeout=timeout_s)
        if not pred:
            return None, False
        key = _key(pred[0], sympy)
        correct = bool(verify(gold_parsed, pred, float_rounding=PRECISION, timeout_seconds=timeout_s))
        return key, correct
    except Exception:  # noqa: BLE001 - a grader failure is a wrong answer, not a crash
        log.debug("lighteval-style grading failed", exc_info=True)
        return None, False


def _key(value: Any, sympy: Any) -> str:
    """A vote key: integers (also ``x = 25`` and ``25.0``) as plain decimals, anything else as its string."""
    try:
        if isinstance(value, sympy.Equality):
            value = value.rhs
        if isinstance(value, sympy.Integer) and abs(value) < 10**12:
            return str(int(value))
        if isinstance(value, sympy.Float) and abs(float(value)) < 1e12 and float(value).is_integer():
            return str(int(float(value)))
    except Exception:  # noqa: BLE001
        pass
    return str(value)[:256]
