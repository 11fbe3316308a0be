"""Comparing two engines' greedy tokens for one item: pure functions over token lists and top-2 log-probabilities.

A difference is a *tie* when, at the first step where the tokens differ, each engine's own choice is its top-1, the
other engine's choice is its top-2, and each engine's gap between the two is below ``tol`` (nats): two near-equal
logits that float rounding orders differently. Anything else is UNEXPLAINED."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Default tie tolerance in nats of log-probability, by the dtype the engines compute in: float32 rounding moves a
# logit by ~1e-5..1e-4 over 30 layers; bfloat16/float16 by ~1e-2.
TOLERANCE = {"float32": 0.01, "bfloat16": 0.1, "float16": 0.1}

Top = Sequence[tuple[int, float]]  # (token id, log-probability), best first


@dataclass(frozen=True)
class Verdict:
    """One item's comparison: ``identical``, ``tie`` or ``UNEXPLAINED``, with the evidence at the first difference."""

    verdict: str
    step: int | None = None  # the first generated position where the tokens differ
    ours_token: int | None = None
    vllm_token: int | None = None
    ours_top2: tuple = ()
    vllm_top2: tuple = ()
    note: str = ""

    @property
    def gaps(self) -> tuple[float | None, float | None]:
        def gap(top):
            return top[0][1] - top[1][1] if len(top) >= 2 else None
        return gap(self.ours_top2), gap(self.vllm_top2)


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (the shorter's length when one is a prefix of the other); None
    when they are equal."""
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return k
    return None if len(a) == len(b) else min(len(a), len(b))


def verdict(ours: Sequence[int], theirs: Sequence[int], ours_top: Top | None, vllm_top: Top | None,
            tol: float) -> Verdict:
    """Compare ``ours`` and ``theirs`` (vLLM's) tokens; ``ours_top``/``vllm_top``: each engine's top-2 at the first
    differing step (ours from a teacher-forced pass over prompt + the common prefix)."""
    k = first_difference(ours, theirs)
    if k is None:
        return Verdict("identical")
    a = ours[k] if k < len(ours) else None
    b = theirs[k] if k < len(theirs) else None
    o, v = tuple(ours_top or ())[:2], tuple(vllm_top or ())[:2]
    base = dict(step=k, ours_token=a, vllm_token=b, ours_top2=o, vllm_top2=v)
    if a is None or b is None:
        return Verdict("UNEXPLAINED", note="one completion is a prefix of the other (a cut, not a token, differs)",
                       **base)
    if len(o) < 2 or len(v) < 2:
        return Verdict("UNEXPLAINED", note="no top-2 log-probabilities at the differing step", **base)
    ranks_ok = o[0][0] == a and o[1][0] == b and v[0][0] == b and v[1][0] == a
    gap_o, gap_v = o[0][1] - o[1][1], v[0][1] - v[1][1]
    if ranks_ok and gap_o < tol and gap_v < tol:
        return Verdict("tie", note=f"top-2 gaps {gap_o:.2e} (ours) and {gap_v:.2e} (vLLM) < {tol:g}", **base)
    why = "the two engines rank other tokens on top" if not ranks_ok else f"a gap >= {tol:g}"
    return Verdict("UNEXPLAINED", note=why, **base)


def closest_call(top: Sequence[Top] | None, upto: int | None = None) -> tuple[int | None, float | None]:
    """(step, gap) of the smallest top-2 gap among the first ``upto`` steps of one engine's per-step top lists: how
    near a tie the greedy path came where both engines agree."""
    steps = [(k, t[0][1] - t[1][1]) for k, t in enumerate(list(top or ())[:upto]) if len(t) >= 2]
    return min(steps, key=lambda s: s[1]) if steps else (None, None)


def summary(rows: list[dict]) -> list[dict]:
    """One row per task: items, identical, tie-explained, unexplained."""
    out = []
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == task]
        out.append({"task": task, "items": len(mine),
                    "identical": sum(r["verdict"] == "identical" for r in mine),
                    "tie_explained": sum(r["verdict"] == "tie" for r in mine),
                    "unexplained": sum(r["verdict"] == "UNEXPLAINED" for r in mine),
                    "closest_gap": min((r["closest_gap"] for r in mine if r.get("closest_gap") is not None),
                                       default=None)})
    return out
