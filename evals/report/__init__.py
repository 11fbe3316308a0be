"""``python -m evals.report [DIR]``: every ``summary.csv`` under DIR -> ``summary_all.csv``, ``report.md``,
``report.html`` (self-contained: figures embedded as base64 PNG) and ``plots/``.

One run directory is one line of a plot and one row or cell of a table: runs are never merged, whatever knob tells
them apart (:func:`evals.report.tables.assign_labels`). Parts: :mod:`.load` (reading runs), :mod:`.likeness`
(which code made and graded a run: never a Δ across two), :mod:`.paired` (Δ vs the full cache), :mod:`.engines` (two
backends' full cache side by side), :mod:`.tables`, :mod:`.plots`, :mod:`.render` (markdown and HTML).
"""

from __future__ import annotations

from evals.report.load import collect
from evals.report.render import main, write_report
from evals.report.tables import breakdown_tables, headline, pivots

__all__ = ["collect", "headline", "pivots", "breakdown_tables", "write_report", "main"]
