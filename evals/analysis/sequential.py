"""The fixed sequence of a budget search, apart from any run: largest budget first, stop at the first failure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SAFE, LOSE, NOT_SHOWN, NOT_TESTED = "safe", "shown_to_lose", "not_shown", "not_tested"
ABOUT = {"these_items": "on these items", "population": "on the population of items"}


@dataclass(frozen=True)
class Step:
    """One budget of the search: its verdict (``safe``, ``shown_to_lose``, ``not_shown`` or ``not_tested``) and,
    when tested, what was measured (``measured.test.safe``, ``.lose``, ``.delta``, ``.p_value``, ``.p_lose``; see
    :class:`evals.report.search_measure.Measured`)."""

    budget: int
    verdict: str
    measured: Any = None


def run_sequence(budgets: list[int], measure: Callable[[int], Any], alpha: float,
                 say: Callable[[str], None]) -> list[Step]:
    """Test ``budgets`` (ascending) from the largest down with ``measure(budget)``, each at the full ``alpha``;
    stop at the first budget not shown safe (``shown_to_lose`` when its other one-sided test shows the loss beyond
    the margin, else ``not_shown``). Returns one :class:`Step` per budget, ascending. ``say`` gets one progress line
    per step (what is tested, why, and which estimand the verdict is about)."""
    steps: dict[int, Step] = {}
    why = "the largest budget: first in the fixed sequence"
    for k, budget in enumerate(reversed(budgets)):
        say(f"search: testing budget {budget} ({why})")
        m = measure(budget)
        t = m.test
        about = ABOUT.get(getattr(t, "estimand", ""), "")
        shown = f"Δ {t.delta:+.3g}, one-sided p {t.p_value:.3g} ({t.test}, {t.n} items{', ' + about if about else ''})"
        if not t.safe:
            lose = bool(getattr(t, "lose", False))
            steps[budget] = Step(budget, LOSE if lose else NOT_SHOWN, m)
            left = budgets[: len(budgets) - k - 1]
            verdict = (f"shown to lose more than the margin: {shown}; p {t.p_lose:.3g} <= alpha {alpha:g} for a loss "
                       "beyond it" if lose else f"not shown safe: {shown} > alpha {alpha:g}")
            say(f"search: budget {budget} {verdict}; stopping"
                + (f" (budgets {', '.join(map(str, left))} not tested: the sequence ends at its first failure)"
                   if left else ""))
            for b in left:
                steps[b] = Step(b, NOT_TESTED)
            break
        steps[budget] = Step(budget, SAFE, m)
        say(f"search: budget {budget} shown safe: {shown} <= alpha {alpha:g}")
        why = f"{budget} was shown safe; the next smaller budget"
    return [steps[b] for b in budgets]


def answer(steps: list[Step]) -> Step | None:
    """The smallest budget shown safe (every larger one was too), or None."""
    safe = [s for s in steps if s.verdict == SAFE]
    return safe[0] if safe else None
