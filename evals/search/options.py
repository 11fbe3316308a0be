"""The ``search.*`` knobs of ``python -m evals.search``, taken out of the command line before Hydra sees the rest."""

from __future__ import annotations

from dataclasses import dataclass

from evals.analysis.estimands import THESE_ITEMS, check_estimand
from evals.record.numbers import number, read_value

ALPHA = 0.05
KEYS = ("budgets", "max_loss", "alpha", "estimand", "reference")
FULL_CACHE, STORAGE = "full_cache", "storage"  # search.reference: what each budget is compared with
REFERENCES = (FULL_CACHE, STORAGE)
FIRST_BUDGET = 64  # the default list: powers of two from here up to the longest prompt


@dataclass(frozen=True)
class SearchOptions:
    """``max_loss``: the margin in headline points (> 0, finite); ``alpha``: the family-wise error of the search;
    ``budgets``: ascending prompt budgets, or None (powers of two from 64 up to the longest prompt); ``estimand``:
    ``these_items`` (the loss on the benchmark's own items, only samples random) or ``population`` (items drawn from
    a population; :mod:`evals.analysis.estimands`); ``reference``: ``full_cache`` (each budget against the full cache
    in the model's dtype) or ``storage`` (each budget of a run stored quantized, ``compression.kv_dtype=fp8_e4m3``,
    against the same run in the model's dtype: same method, budget and everything else)."""

    max_loss: float
    alpha: float = ALPHA
    budgets: tuple[int, ...] | None = None
    estimand: str = THESE_ITEMS
    reference: str = FULL_CACHE

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_loss", number(self.max_loss, "search.max_loss", float, low=0, above=True))
        object.__setattr__(self, "alpha", number(self.alpha, "search.alpha", float, low=0, above=True))
        if not self.alpha < 0.5:
            raise ValueError(f"search.alpha: must be a number in (0, 0.5), got {self.alpha!r}")
        object.__setattr__(self, "estimand", check_estimand(str(self.estimand), "search.estimand"))
        if self.reference not in REFERENCES:
            raise ValueError(f"search.reference: {' or '.join(REFERENCES)} (full_cache: against the full cache in the "
                             f"model's dtype; storage: a quantized storage against the same run in the model's dtype), "
                             f"got {self.reference!r}")
        if self.budgets is not None:
            b = self.budgets
            if not b:
                raise ValueError("search.budgets: must be a non-empty list of integers >= 1, got []")
            b = tuple(number(x, "search.budgets", int, low=1) for x in b)
            object.__setattr__(self, "budgets", b)
            if any(x >= y for x, y in zip(b, b[1:])):
                raise ValueError(f"search.budgets: must be strictly ascending, got {list(b)}")

    def check_context(self, max_context: int, model: str) -> None:
        """A given budget beyond the model's context (``model.max_context`` prompt tokens) is refused in one line:
        no prompt can be that long, and the budget would keep every token of every prompt."""
        big = [x for x in self.budgets or () if x > max_context]
        if big:
            raise ValueError(f"search.budgets: {big[0]} is beyond the context of model {model} (model.max_context "
                             f"{max_context} prompt tokens); the largest useful budget is {max_context}")

    def budget_list(self, longest: int) -> list[int]:
        """The budgets to test: as given, else the powers of two from 64 up to ``longest`` (64 alone when it is
        shorter): the longest prompt for a prompt budget, the longest prompt and generation for a whole-cache one."""
        if self.budgets is not None:
            return list(self.budgets)
        out, b = [], FIRST_BUDGET
        while b <= longest:
            out.append(b)
            b *= 2
        return out or [FIRST_BUDGET]


def split_args(argv: list[str]) -> tuple[SearchOptions, list[str]]:
    """``(options, the other arguments)``; ``search.<key>=<value>`` values are read with Hydra's override grammar,
    as ``evals.run`` reads its own (``[256,512]``, ``2.5``, ``5e-1``; :mod:`evals.record.numbers`).
    Raises ``ValueError`` naming the knob: unknown ``search.*`` keys, a missing ``search.max_loss``, bad values, and
    the budget knobs the search sets itself."""
    found: dict[str, object] = {}
    rest = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        bare = key.lstrip("+~")
        if bare.startswith("search."):
            name = bare[len("search."):]
            if name not in KEYS or not eq:
                raise ValueError(f"{bare}: no such search knob (search.max_loss, search.alpha, search.budgets, "
                                 "search.estimand, search.reference)")
            found[name] = read_value(bare, value)
            continue
        if bare.startswith(("hydra/", "hydra.")):
            raise ValueError(f"{bare}: evals.search runs the jobs of its searches one after another in this process "
                             "(no Hydra launcher); start the search itself where the jobs should run")
        if bare in ("compression.prompt_budget", "compression.budget", "compression.ratio"):
            raise ValueError(f"{bare}: set by the search for each budget; give search.budgets instead")
        rest.append(arg)
    if "max_loss" not in found:
        raise ValueError("search.max_loss: required (the largest loss, in the task's headline points, a budget may "
                         "have), e.g. search.max_loss=2")
    budgets = found.get("budgets")
    if budgets is not None and not isinstance(budgets, list):
        budgets = [budgets]
    return SearchOptions(max_loss=found["max_loss"], alpha=found.get("alpha", ALPHA),
                         budgets=None if budgets is None else tuple(budgets),
                         estimand=found.get("estimand", THESE_ITEMS),
                         reference=str(found.get("reference", FULL_CACHE))), rest
