"""The plan of the GPU check's stages: which run, and with which limit, within the time left to the deadline.

Stages are taken in the table's order (most informative first, :mod:`bench.gpu.table`): a stage whose limit fits
the time left gets it; one whose limit does not fit but whose estimate does gets the time left as its limit; the
others are skipped, each with its reason. The limits planned never sum to more than the time left less
``RESERVE_S`` (the parent's own work: starting and killing processes, writing the files). The check plans again
before every stage with the time then left, so a stage that ends early leaves its time to the later ones."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.gpu.table import StageCost

RESERVE_S = 2.0
MIN_STAGE_S = 1.0  # a stage given less than this is skipped


@dataclass(frozen=True)
class Planned:
    """A stage in the plan: its limit (None: skipped) and the reason it is skipped or cut."""

    name: str
    limit_s: float | None
    est_s: float
    reason: str = ""

    def as_dict(self) -> dict:
        return {"name": self.name, "limit_s": None if self.limit_s is None else round(self.limit_s, 1),
                "est_s": self.est_s, **({"reason": self.reason} if self.reason else {})}


def plan(stages: Sequence[StageCost], left_s: float, tiny: bool, limit_override: float | None = None,
         unavailable: dict[str, str] | None = None) -> list[Planned]:
    """The plan of ``stages`` (in their order) in ``left_s`` seconds; ``unavailable``: stages that ran without
    passing on what others need, with why (a stage that needs one of them, or a stage skipped here, is skipped)."""
    budget = left_s - RESERVE_S
    missing = dict(unavailable or {})
    out: list[Planned] = []
    for st in stages:
        est, limit = st.cost(tiny, limit_override)
        if st.needs and st.needs in missing:
            out.append(Planned(st.name, None, est, f"needs {st.needs}'s planned peak: {st.needs} {missing[st.needs]}"))
        elif limit <= budget:
            out.append(Planned(st.name, limit, est))
            budget -= limit
            continue
        elif est <= budget and budget >= MIN_STAGE_S:
            out.append(Planned(st.name, budget, est, f"limit cut from {limit:.0f} s to the {budget:.1f} s left "
                                                    f"(its estimate, {est:.0f} s, fits)"))
            budget = 0.0
            continue
        else:
            out.append(Planned(st.name, None, est, f"does not fit the deadline: {max(budget, 0):.1f} s left after "
                                                   f"the stages before it, its estimate {est:.1f} s"))
        missing.setdefault(st.name, "is skipped")
    return out
