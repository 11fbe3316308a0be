"""The planner: memory, rows and GPU time of every job of an ``evals.run`` command line, before anything loads.

``python -m evals.plan [-m] key=value ...`` (the same overrides as ``evals.run``) writes ``<out_root>/plan.csv`` and
prints the table and its totals. The runner calls :func:`choose_rows` and :func:`check_fits` on CUDA before it loads
weights, and :func:`alias_of` with its items' longest prompt. Imports no torch: it runs on a laptop. The formulas
are in :mod:`snapstream_core.memory` (the one memory model) and :mod:`evals.plan.cost`, the device constants in
:mod:`evals.plan.device` (docs/plan.md).
"""

from evals.plan.job import (
    Job,
    alias_of,
    check_fits,
    choose_rows,
    job_from_spec,
    job_of,
    peak_bytes,
    with_prompt,
)

__all__ = ["Job", "alias_of", "check_fits", "choose_rows", "job_from_spec", "job_of", "peak_bytes",
           "with_prompt"]
