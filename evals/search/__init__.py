"""``python -m evals.search``: the smallest KV budget whose loss against the full cache is shown below a margin.

It takes ``evals.run``'s overrides (one model, one task, one compression method with a ``prompt_budget``; ``-m``
sweeps run one search per combination) plus ``search.max_loss`` (the margin, in the task's headline points),
``search.alpha`` (default 0.05), ``search.budgets`` (ascending; default the powers of two from 64 up to the
longest prompt of the full-cache run) and ``search.estimand`` (``these_items``, the default: the loss on the
benchmark's own items, only the samples random; or ``population``: :mod:`evals.analysis.estimands`).

**Procedure.** The full-cache run is run (or reused) first. Then budgets are tested from the largest down, each an
ordinary run directory under ``out_root`` (``evals.execute.loop.run``: resumed, reused when complete, copied from the
full cache when the budget keeps every token). At each budget the null hypothesis "loss >= max_loss" is tested one-sided
at level ``alpha`` on the paired differences with the full cache (same items, samples and seeds;
:func:`evals.analysis.estimands.compare`: for ``these_items`` a test by betting in rounds over the per-sample
differences; for ``population`` exact on discordant items for 0/1 items, a test by betting on per-item means otherwise),
and so is its other side (``loss <= max_loss``: ``shown_to_lose``). The first budget not shown safe ends the search: it
and every smaller budget are not claimed, and the smaller ones are not run. This is the fixed-sequence procedure
(:func:`evals.analysis.noninferiority.fixed_sequence`): each test uses the whole ``alpha`` and the family-wise error of
the search, the probability of calling any budget safe whose loss is in fact at least ``max_loss``, is at most ``alpha``
whatever the true losses are.

**Assumption: the loss does not shrink when the budget shrinks** (monotone in the budget). The error guarantee above
does not need it; what needs it is reading the answer: the search stops at the first failure, so a smaller budget
that would pass after a larger one failed is never tested (the order is fixed in advance so that the error stays at
``alpha``), and "safe at 1024" says nothing about untested budgets between those in the list unless the loss is
monotone. Details: ``docs/search.md``.
"""

from evals.analysis.sequential import Step, run_sequence
from evals.search.options import SearchOptions, split_args

__all__ = ["SearchOptions", "Step", "run_sequence", "split_args"]
