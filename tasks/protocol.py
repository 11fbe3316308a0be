"""The task interface in one place: what the runner (:mod:`evals.execute`) and the report (:mod:`evals.report`) call
on a task module, required and optional.

A task is a module (or package) under ``tasks/`` registered by name in :mod:`tasks.registry`; it imports no torch.
Every registered task satisfies :class:`Task` (checked by ``tests/test_task_protocol.py``). The optional hooks are
listed in :data:`OPTIONAL_HOOKS`; the runner reaches them only through :func:`hook`, so this file is the whole list
of what a task may provide. See ``docs/architecture.md`` ("Adding a benchmark").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pandas as pd

    from tasks.base import Prompt

from tasks.base import split_thinking


@runtime_checkable
class Task(Protocol):
    """The four required functions of a task module.

    ``load(cfg)``: the items of ``cfg`` (the Hydra ``task`` node): frozen records with ``item_id`` (str, the
    dataset's own id) and ``breakdown`` (dict of row columns), in a stable order; ``task.source``, ``task.path``
    and ``task.limit`` are read with :mod:`tasks.source`.

    ``prompt(item, model_cfg, *, cfg, tokenizer=None)``: a :class:`~tasks.base.Prompt` (or a chat list / raw
    string), the official prompt for ``model_cfg.family``; ``tokenizer`` is None under ``backend=replay``.

    ``score(item, completion, *, cfg=None)``: a dict with at least ``prediction`` (None when nothing could be
    extracted), ``answer`` and ``correct`` (bool or 0..1); never raises on model output. ``completion`` is the
    answer part (see ``answer_part`` below).

    ``summarize(rows, *, cfg=None)``: metric rows (``metric, group, value, n``; ``group`` is ``"all"`` or
    ``"<field>=<value>"``) from the tidy sample rows of one run.
    """

    def load(self, cfg: Any) -> list[Any]: ...

    def prompt(self, item: Any, model_cfg: Any, *, cfg: Any, tokenizer: Any = None) -> Prompt | list[dict] | str: ...

    def score(self, item: Any, completion: str, *, cfg: Any = None) -> dict[str, Any]: ...

    def summarize(self, rows: pd.DataFrame, *, cfg: Any = None) -> pd.DataFrame: ...


# name -> what it is, who calls it, and what happens without it
OPTIONAL_HOOKS: dict[str, str] = {
    "validate": "validate(cfg) -> None: raise ValueError('task.<field>: ...') for a bad knob; the runner calls it "
                "for every job of a sweep before any weights load. Without it: only load() checks.",
    "score_many": "score_many(pairs, *, cfg) -> list[dict]: grade many (item, completion) pairs at once (a pool of "
                  "sandboxes or verifier processes). Without it: score() per pair.",
    "answer_part": "answer_part(completion, thinking, *, cfg) -> (text, thinking_closed): what the protocol grades "
                   "of a completion. Without it: tasks.base.split_thinking (the text after the last </think>).",
    "followup": "followup(item, completion, model_cfg, *, cfg, tokenizer) -> (prompt, max_new_tokens) | None: a "
                "second generation call (LongBench-v2 CoT); only backends with supports_followup run it.",
    "followup_bound": "followup_bound(prompt_tokens, max_new_tokens, model_cfg, *, cfg, tokenizer=None) -> "
                      "(prompt_tokens, max_new_tokens) | None: the most tokens a second call's prompt can have, and "
                      "its new tokens, after a first call of at most prompt_tokens prompt and max_new_tokens new "
                      "tokens (None: no second call); a pure function, tokenizer counting the task's own template "
                      "text (None: a bound without it). The planner and the decode rows are sized with it once per "
                      "run (call_extent). Required with followup.",
    "grading_setup": "grading_setup(cfg) -> dict: what decides a verdict besides the task's code (LiveCodeBench: the "
                     "resolved sandbox mode and interpreter), in the grading identity (evals.execute.code_identity) "
                     "and the sample cache's key. Without it: {}.",
    "GRADING_PACKAGES": "GRADING_PACKAGES: tuple[str, ...]: folders of the repository outside the task whose code "
                        "decides its verdicts (LiveCodeBench: 'sandbox'), hashed into the grading identity "
                        "(evals.execute.code_identity) with the task's own files. Without it: the task's files only.",
    "PROMPT_FILES": "PROMPT_FILES: tuple[str, ...]: the files under tasks/data (names relative to it) that the task "
                    "reads to build prompts besides its items (needle: the haystack and word lists; LongBench-v2: "
                    "the official templates), hashed by content into the run identity, the sample cache's key and "
                    "the generation identity (evals.execute.code_identity). Without it: none (the items carry all).",
    "protocol_name": "protocol_name(cfg) -> str: the grading protocol of the run, recorded in meta.json. Without "
                     "it: None (the task grades one way).",
    "per_problem": "per_problem(rows) -> DataFrame: a per-item table the report adds (AIME).",
    "item_terms": "item_terms(rows, *, cfg) -> DataFrame[item_id, metric, group, num, den]: summarize()'s metrics "
                  "that are ratios of item sums, value = sum(num) / sum(den) (tasks.terms), so that "
                  "evals.analysis.summary bootstraps them with a matrix product. Without it (or for a metric it "
                  "leaves out): summarize() re-run on every resample.",
    "PRIMARY_METRIC": "PRIMARY_METRIC: str | None: the metric the report plots. Without it (or None): the first "
                      "metric summarize() reports.",
    "REPORT_METRICS": "REPORT_METRICS: tuple[str, ...]: the metrics the report tabulates by method and budget "
                      "(needle: accuracy and key_prefix). Without it: the primary metric.",
    "RATE_UNIT": "RATE_UNIT: 'percent' | 'fraction': how summarize() returns rates (on the task module or its "
                 "summary submodule); evals.analysis.summary scales fractions to percent. Without it: percent.",
    "REPORTS_STDERR": "REPORTS_STDERR: bool: summarize() reports its own standard errors (lm-eval), so no bootstrap "
                      "is run. Without it: False.",
    "GENERATED": "GENERATED: bool: the items are made from a seed (needle), so the benchmark has no fixed size "
                 "(evals.power says 'generated'). Without it: False (task.plan.n_items is the benchmark's size).",
}


def hook(task: Any, name: str) -> Any:
    """The optional hook ``name`` of ``task`` (a function or a value), or None when the task does not provide it.

    ``name`` must be one of :data:`OPTIONAL_HOOKS`: asking for anything else is a programming error (``KeyError``),
    so every hook a caller uses is documented above."""
    if name not in OPTIONAL_HOOKS:
        raise KeyError(f"{name!r} is not a task hook; known: {', '.join(OPTIONAL_HOOKS)}")
    return getattr(task, name, None)


def score_all(task: Any, pairs: Iterable[tuple[Any, str]], cfg: Any) -> list[dict[str, Any]]:
    """Grade ``(item, completion)`` pairs with ``score_many`` when the task has it, else ``score`` one by one."""
    many: Callable | None = hook(task, "score_many")
    if many is not None:
        return many(list(pairs), cfg=cfg)
    return [task.score(item, text, cfg=cfg) for item, text in pairs]


def call_extent(task: Any, prompt_tokens: int, max_new_tokens: int, model_cfg: Any, cfg: Any,
                tokenizer: Any = None) -> tuple[int, int]:
    """``(prompt tokens, new tokens)`` that every generation call of a run may reach when its first calls have
    prompts of at most ``prompt_tokens`` tokens and ``max_new_tokens`` new tokens: those, or the task's
    ``followup_bound`` when its second call can be longer or wider. The planner's memory and the decode rows are
    sized with this one function, so the rows allocated once hold the second calls too."""
    bound = hook(task, "followup_bound")
    second = None if bound is None else bound(prompt_tokens, max_new_tokens, model_cfg, cfg=cfg, tokenizer=tokenizer)
    if second is None:
        return prompt_tokens, max_new_tokens
    return max(prompt_tokens, int(second[0])), max(max_new_tokens, int(second[1]))


def answer_part(task: Any, completion: str, thinking: bool, cfg: Any = None) -> tuple[str, bool]:
    """``(text the task grades, thinking_closed)``: the task's own ``answer_part`` when it has one (its protocol
    decides what a thinking block means), else :func:`tasks.base.split_thinking`."""
    own = hook(task, "answer_part")
    if own is not None:
        return own(completion, thinking, cfg=cfg)
    return split_thinking(completion, thinking)
