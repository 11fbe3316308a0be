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

Which box wins (``task.grader_version``, :data:`GRADER_VERSIONS`). lighteval 0.13.0 pins
``latex2sympy2_extended==1.0.6``, whose ``math_normalization.extract_boxed_content`` (mode ``last``) keeps the last
``\\boxed{}`` of a span, and an earlier one only when nothing but ``and``/``or``/``,`` (and spaces) separates them.
Math-Verify 0.9.0 runs on ``latex2sympy2_extended`` 1.11, which also joins boxes fewer than 10 characters apart, or
fewer than 70 with a separator anywhere between ("First \\boxed{24}, then corrected: \\boxed{25}" reads as the set
{24, 25}, never equal to 25). So the regexes, their priorities and the LaTeX parser are Math-Verify's (the same
rules as lighteval's ``metrics/utils/extractive_match_utils.py``), the loop over matches is ours, following
lighteval's ``extract_target_from_pred``, and a LaTeX match holding boxes is first reduced to the boxes the 1.0.6
rule keeps (:func:`boxes_kept`).

- ``lighteval-0.13.0`` (default): the above, reasoning tags removed (lighteval's ``Pipeline._post_process_outputs``),
  the first unparsed match kept as a string fallback (``fallback_mode="first_match"``);
- ``open-r1``: lighteval ``d3da6b9`` as pinned by open-r1's ``setup.py`` (0.9.1.dev0, ``math_pass@1:{n}_samples``):
  no reasoning-tag removal (the thinking is graded with the answer; the rightmost match still wins), no string
  fallback, numbers compared after rounding to integers (its ``PassAtK`` passes the document where the precision
  goes), the same 1.0.6 box rule; 176 of 177 battery verdicts agree with that lighteval run unmodified (the one
  left: ``\\boxed{116\\%}`` after a thinking that says 116: latex2sympy2_extended 1.0.6 parses ``116\\%`` as 1.16
  and stops there, 1.11 cannot parse it, so the search goes on to the 116 in the thinking);
- ``math-verify-0.9.0``: Math-Verify 0.9.0's own box rule (what this project graded with before), tags removed.
"""

from __future__ import annotations

import logging
import re
from itertools import groupby
from typing import Any

log = logging.getLogger(__name__)

THINK_TAGS = (("<think>", "</think>"),)
PRECISION = 6  # pass_at_k_math(precision=6) -> verify(float_rounding=6)
# lighteval d3da6b9's math_pass_at_1_*n calls compare_gold_target(pred, gold, formatted_doc): the document (None) lands
# in `precision`, and sympy's round(None) rounds to an integer, so "32.9999999" equals 33 there.
OPEN_R1_ROUNDING = None
GRADER_VERSIONS = ("lighteval-0.13.0", "open-r1", "math-verify-0.9.0")
DEFAULT_GRADER_VERSION = GRADER_VERSIONS[0]

# latex2sympy2_extended 1.0.6, math_normalization.VALID_SEPARATOR_PATTERN: the whole gap must be a separator
_GAP_106 = re.compile(r"^\s*(?:and|or|,)\s*$")
_PLAIN_BOXED = re.compile(r"(?P<first_latexBoxed>\\boxed{.+})", re.DOTALL)


def boxes_kept(latex: str) -> list[str] | None:
    """The contents, left to right, of the boxes that ``latex2sympy2_extended`` 1.0.6 keeps in mode ``last``
    (``math_normalization.extract_boxed_content``): walking right to left from the last ``\\boxed``/``\\fbox``, an
    earlier box is kept only while the gap to the box after it is exactly a separator (``and``, ``or``, ``,``).
    None when that rule and Math-Verify's agree by construction: no box, or the last one has no closed brace group.
    Braces are counted without escapes, as there."""
    kept: list[str] = []
    limit = pos = len(latex)
    after: int | None = None  # where the box kept last (to the right) starts
    while True:
        boxed, fbox = latex.rfind("\\boxed", 0, pos), latex.rfind("\\fbox", 0, pos)
        if boxed < 0 and fbox < 0:
            break
        start = max(boxed, fbox)
        i = start + (6 if boxed > fbox else 5)
        while i < limit and latex[i].isspace():
            i += 1
        if i >= limit or latex[i] != "{":
            break
        close = _closing(latex, i, limit)
        if close is None:
            break
        if after is not None and not _GAP_106.match(latex[close + 1:after]):
            break
        kept.append(latex[i + 1:close].strip())
        after = limit = pos = start
    return kept[::-1] or None


def _closing(text: str, open_at: int, limit: int) -> int | None:
    depth = 1
    for i in range(open_at + 1, limit):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _as_106(match: re.Match, target: Any) -> re.Match:
    """``match`` itself, or, for lighteval's plain-boxed LaTeX match (group ``first_latexBoxed``, normalised in mode
    ``last``) holding several boxes, a match over ``\\boxed{<kept contents joined by ",">}``: what 1.0.6's
    normalisation yields, so Math-Verify's normaliser (1.11) reads the same text."""
    from math_verify import LatexExtractionConfig

    if not isinstance(target, LatexExtractionConfig):
        return match
    span = match.groupdict().get("first_latexBoxed")
    if not span or span.count("\\boxed") + span.count("\\fbox") < 2:
        return match
    kept = boxes_kept(span)
    if kept is None:
        return match
    rewritten = _PLAIN_BOXED.fullmatch("\\boxed{" + ",".join(kept) + "}")
    return rewritten if rewritten is not None else match


def extract_prediction(text: str, configs: list, *, fallback: bool, timeout_s: int, box_rule_106: bool) -> list:
    """The extracted predictions of ``text``, as lighteval's ``extract_target_from_pred``
    (``src/lighteval/metrics/utils/extractive_match_utils.py``): patterns grouped by priority, lowest first; in a
    group the match ending rightmost first (then the one starting leftmost); the first match that parses wins and
    ends the search; with ``fallback`` the first match's raw text is appended. Must run in a main thread."""
    from math_verify.parser import extract_match, get_extraction_regexes
    from math_verify.utils import timeout

    def run() -> list:
        patterns = sorted(((pattern, target, priority) for group, target in get_extraction_regexes(configs)
                           for pattern, priority in group), key=lambda p: p[2])
        found: list = []
        raw: list[str] = []
        for _, group in groupby(patterns, key=lambda p: p[2]):
            matches = sorted(((m, target) for pattern, target, _ in group for m in pattern.finditer(text)),
                             key=lambda mt: (mt[0].end(), -mt[0].start()), reverse=True)
            for match, target in matches:
                value, as_text = extract_match(_as_106(match, target) if box_rule_106 else match, target)
                if as_text:
                    raw.append(as_text)
                if value is not None:
                    found.append(value)
                    break
            if found:
                break
        return found + raw[:1] if fallback else found

    return timeout(timeout_seconds=timeout_s)(run)()


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


# Grader libraries that log the same warning on every call (latex2sympy2_extended 1.11: "equations=True in
# NormalizationConfig is deprecated", once per graded answer): each distinct message is let through once per process.
GRADER_LOGGERS = ("latex2sympy2_extended.math_normalization", "latex2sympy2_extended.latex2sympy2",
                  "math_verify.parser", "math_verify.grader", "math_verify.utils")


class OncePerProcess(logging.Filter):
    """A logging filter that passes the first record of each ``(logger, message template)`` and drops repeats."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


_ONCE = OncePerProcess()


def log_grader_warnings_once() -> None:
    """Attach :class:`OncePerProcess` to the grader libraries' loggers (idempotent; called on first grading, never
    at import)."""
    for name in GRADER_LOGGERS:
        logger = logging.getLogger(name)
        if _ONCE not in logger.filters:
            logger.addFilter(_ONCE)


def _configs() -> list:
    log_grader_warnings_once()
    from latex2sympy2_extended.latex2sympy2 import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    latex = LatexExtractionConfig(
        boxed_match_priority=55,
        normalization_config=NormalizationConfig(
            basic_latex=True, units=True, malformed_operators=True, nits=True, boxed="all", equations=True
        ),
    )
    return [ExprExtractionConfig(), latex]


def prepare(text: str, version: str = DEFAULT_GRADER_VERSION) -> str:
    """What ``version``'s pipeline hands its metric: the text with reasoning tags removed, except for ``open-r1``."""
    return text if version == "open-r1" else remove_reasoning_tags(text)


def lighteval_compare(gold: str, text: str, timeout_s: int,
                      version: str = DEFAULT_GRADER_VERSION) -> tuple[str | None, bool]:
    """``(prediction key, correct)`` as lighteval's ``MultilingualExtractiveMatchMetric`` decides for one sample.

    Must run in a main thread (Math-Verify's alarms). ``text`` is the completion after :func:`prepare`.
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
        pred = extract_prediction(text.strip(), configs, fallback=version != "open-r1", timeout_s=timeout_s,
                                  box_rule_106=version != "math-verify-0.9.0")
        if not pred:
            return None, False
        key = _key(pred[0], sympy)
        rounding = OPEN_R1_ROUNDING if version == "open-r1" else PRECISION
        correct = bool(verify(gold_parsed, pred, float_rounding=rounding, timeout_seconds=timeout_s))
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
