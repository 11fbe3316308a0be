"""AIME 2024 under the DeepSeek-R1 evaluation protocol (``task=aime24``).

Prompt (DeepSeek-R1 model card, "Usage Recommendations"): one user message, no system prompt, the problem followed
by "Please reason step by step, and put your final answer within \\boxed{}."; R1 sampling T=0.6, top-p 0.95, up to
32768 new tokens, n=64 samples per problem -> pass@1 (mean correctness) and cons@64 (majority vote). Instruct models
get the same instruction in a user turn, greedy, n=1. The templates are config values (``task.templates.<family>``).
(lighteval's own ``aime24`` task uses another prompt, simple-evals' "Solve the following math problem efficiently
and clearly..." template; open-r1 evaluates through lighteval. We keep the R1 card's prompt.)

Grading, ``task.protocol`` (:data:`PROTOCOLS`):

- ``lighteval`` (default): lighteval 0.13.0's aime24 metric, ``pass@k:k=1`` (:mod:`tasks.aime24.lighteval_metric`):
  ``<think>…</think>`` removed only when both tags are present, then its expression + LaTeX extraction over the
  whole text, the last box winning as with its pinned ``latex2sympy2_extended==1.0.6``; ``task.grader_version``
  (``lighteval-0.13.0`` | ``open-r1`` | ``math-verify-0.9.0``) names the variant;
- ``boxed`` (stricter): the last ``\\boxed{...}`` after the last ``</think>``, an integer comparison ("025" == 25),
  else Math-Verify with the gold first (:func:`tasks.aime24.grader.grade`); a thinking model's completion that never
  closes ``</think>`` has no answer.

Every row records ``protocol``; ``thinking_closed`` stays a column under both. Metrics (:mod:`tasks.aime24.summary`)
are fractions in 0..1.

Example::

    python -m evals.run model=r1_distill_llama_8b task=aime24 gen.n_samples=16
    python -m evals.run backend=replay backend.path=outs.jsonl model=r1_distill_llama_8b task=aime24
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tasks.aime24.data import Item, load
from tasks.aime24.data import validate as _validate_data
from tasks.aime24.grader import DEFAULT_TIMEOUT_S, canonical_answer, grade, grade_lighteval
from tasks.aime24.lighteval_metric import DEFAULT_GRADER_VERSION, GRADER_VERSIONS
from tasks.aime24.summary import item_terms, per_problem, summarize
from tasks.base import Prompt, r1_prefill, split_thinking
from tasks.source import protocol_of

PRIMARY_METRIC = "pass@1"

__all__ = ["PRIMARY_METRIC", "PROTOCOLS", "Item", "answer_part", "item_terms", "load", "per_problem", "prompt",
           "protocol_name", "score", "score_many", "summarize", "validate"]

PROTOCOLS = ("lighteval", "boxed")

PLACEHOLDER = "{problem}"
THINK_OPEN = "<think>"


def validate(cfg: Any) -> None:
    """Check every knob (data source, limit, templates, grading timeout) before a model is loaded."""
    templates = cfg.get("templates") if cfg is not None else None
    if not isinstance(templates, Mapping) or not templates:
        raise ValueError("task.templates: a mapping from model family to prompt template is required")
    for family, template in templates.items():
        if not isinstance(template, str) or PLACEHOLDER not in template:
            raise ValueError(f"task.templates.{family}: must be a string containing {PLACEHOLDER}")
    _timeout(cfg)
    grader_version(cfg)
    protocol_name(cfg)
    _validate_data(cfg)


def protocol_name(cfg: Any) -> str:
    """The grading protocol of this run (``task.protocol``), as rows and ``meta.json`` record it."""
    return protocol_of(cfg, PROTOCOLS)


def grader_version(cfg: Any) -> str:
    """``task.grader_version`` (default ``lighteval-0.13.0``): which lighteval the ``lighteval`` protocol follows."""
    value = cfg.get("grader_version") if cfg is not None else None
    value = DEFAULT_GRADER_VERSION if value is None else value
    if value not in GRADER_VERSIONS:
        raise ValueError(f"task.grader_version: unknown {value!r}; expected one of {', '.join(GRADER_VERSIONS)}")
    return str(value)


def answer_part(completion: str, thinking: bool, *, cfg: Any = None) -> tuple[str, bool]:
    """``(text to grade, thinking_closed)``. ``lighteval``: the whole completion (its reasoning tags are removed at
    grading, only when both are present); ``boxed``: :func:`tasks.base.split_thinking`."""
    return split_thinking(completion, thinking, whole=protocol_name(cfg) == "lighteval")


def prompt(item: Item, model_cfg: Any, *, cfg: Any, tokenizer: Any = None) -> Prompt:
    """The official prompt: ``task.templates[model.family]`` with ``{problem}`` replaced, as one user message.

    Only ``{problem}`` is substituted (plain replacement, not ``str.format``), so the template may hold any LaTeX
    braces such as ``\\boxed{}``. A system message is added only when ``model.system_prompt`` is set (the R1 card
    asks for none, and no model config sets one).
    """
    family = str(model_cfg.get("family"))
    templates = cfg.get("templates") if cfg is not None else None
    if not isinstance(templates, Mapping) or family not in templates:
        known = ", ".join(templates) if isinstance(templates, Mapping) else "none"
        raise ValueError(f"task.templates: no template for model family '{family}' (have: {known})")
    messages = []
    system = model_cfg.get("system_prompt")
    if system:
        messages.append({"role": "system", "content": str(system)})
    messages.append({"role": "user", "content": str(templates[family]).replace(PLACEHOLDER, item.problem)})
    return Prompt(messages=messages, truncated=False, prefill=r1_prefill(model_cfg, tokenizer))


def score(item: Item, completion: str, *, cfg: Any = None) -> dict[str, Any]:
    """Grade one completion: ``prediction`` (canonical answer or None), ``answer``, ``correct``, ``boxed`` (the raw
    boxed text) and ``protocol``. Never raises on model output.

    ``lighteval``: see :func:`tasks.aime24.grader.grade_lighteval`. ``boxed``: ``completion`` is the answer part; if a
    ``</think>`` is still present, only the text after the last one is graded, and a ``<think>`` that never closes
    leaves nothing to grade, so a box inside the thinking never counts.
    """
    protocol = protocol_name(cfg)
    text = completion if isinstance(completion, str) else ""
    if protocol == "lighteval":
        verdict = grade_lighteval(item.answer, text, timeout_s=_timeout(cfg), version=grader_version(cfg))
        return {"prediction": verdict.prediction, "answer": canonical_answer(item.answer),
                "correct": verdict.correct, "boxed": verdict.boxed, "protocol": protocol}
    # a </think> still present: only the text after it; a <think> never closed: nothing to grade
    text, _closed = split_thinking(text, THINK_OPEN in text)
    verdict = grade(item.answer, text, timeout_s=_timeout(cfg))
    return {
        "prediction": verdict.prediction,
        "answer": canonical_answer(item.answer),
        "correct": verdict.correct,
        "boxed": verdict.boxed,
        "protocol": protocol,
    }


def score_many(pairs: Iterable[tuple[Item, str]], *, cfg: Any = None) -> list[dict[str, Any]]:
    """Grade many ``(item, completion)`` pairs in order. Integer answers take microseconds; Math-Verify verdicts are
    memoised, so repeated samples of the same answer are graded once."""
    return [score(item, completion, cfg=cfg) for item, completion in pairs]


def _timeout(cfg: Any) -> int:
    value = cfg.get("grade_timeout_s", DEFAULT_TIMEOUT_S) if cfg is not None else DEFAULT_TIMEOUT_S
    value = DEFAULT_TIMEOUT_S if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"task.grade_timeout_s: must be a positive integer (seconds), got {value!r}")
    return value
