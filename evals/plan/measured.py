"""A task's ``plan:`` block from its loaded items, for a task without one (``task=lm_eval``, a user's own task).

The runner has the items before any weights load; their prompts are counted with the tokenizer alone (as
:mod:`evals.execute.alias` counts them), and the planner then sizes the job from the real lengths. The generated length
is unknown before the run: ``gen_fraction`` 1 (every sample runs to its ``max_new_tokens``) is the upper bound of the
time estimate; the memory does not depend on it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from evals.config.encode import encode_prompt
from evals.config.models import load_tokenizer
from tasks.base import Prompt

if TYPE_CHECKING:  # the spec module reads OmegaConf; the planner imports without it
    from evals.config.spec import RunSpec


def plan_block(lengths: Sequence[int], groups: int = 4) -> dict[str, Any]:
    """A ``plan:`` block for prompts of ``lengths`` tokens: up to ``groups`` equal-count length groups (sorted), the
    longest prompt, ``gen_fraction`` 1."""
    if not lengths:
        raise ValueError("task: no items to plan")
    ordered = sorted(int(n) for n in lengths)
    k = min(groups, len(ordered))
    bounds = [round(i * len(ordered) / k) for i in range(k + 1)]
    parts = [ordered[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
    return {
        "n_items": len(ordered),
        "prompt_groups": [{"items": len(p), "tokens": round(statistics.fmean(p))} for p in parts],
        "max_prompt_tokens": ordered[-1],
        "gen_fraction": {"default": 1.0},
    }


def prompt_lengths(spec: RunSpec, items: Sequence[Any]) -> tuple[list[int], int]:
    """Token counts of every item's prompt (the tokenizer alone, no weights) and the largest ``max_new_tokens`` a
    prompt asks for (a task's protocol may fix it per request; 0 when none does)."""
    tokenizer = load_tokenizer(spec.model)
    lengths, new = [], 0
    for item in items:
        prompt = spec.task_module.prompt(item, spec.model, cfg=spec.task, tokenizer=tokenizer)
        prompt = prompt if isinstance(prompt, Prompt) else Prompt(prompt)
        lengths.append(len(encode_prompt(tokenizer, spec.model, prompt)))
        new = max(new, int((prompt.gen or {}).get("max_new_tokens") or 0))
    return lengths, new
