"""Progress of a ``-m`` sweep: one line per finished job ("job k of N", its score, the overall ETA) and, at the end,
a compact table of every job (a Hydra callback, ``hydra.callbacks.sweep_progress`` in ``conf/config.yaml``).

N is the number of combinations :mod:`evals.cli` checked before the first job, handed to the callback by the entry
point (``hydra.callbacks.sweep_progress.planned``, with each job's planned work in ``...work``); Hydra's basic
launcher then runs them in this process, one after the other. With a launcher that runs jobs elsewhere the lines
come from each worker and N is not known there: they say "job k".

The ETA is the time per unit of work so far times the work left, a job's work being its planned samples x
``gen.max_new_tokens`` (:func:`job_work`): a 6-item job counts for less than a 500-item one, and jobs that
compute nothing (complete already, copied from the full cache, every sample from the sample cache) add neither work
nor a rate, so the ETA does not drop after them and jump at the next real job.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

from evals.config.spec import RunSpec
from evals.plan.job import job_from_spec
from evals.record.throughput import rate_text
from snapstream_core.api import compression_from_config

log = logging.getLogger("evals.sweep")


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


def job_work(specs: list[RunSpec]) -> list[float]:
    """Each job's planned work (samples x ``gen.max_new_tokens``, as the planner reads the spec), so that the ETA
    weighs a 30-item job of 32k tokens above a 6-item job of 16; all 1.0 (count jobs) when any is unknown."""
    try:
        work = [float(j.total_samples * j.max_new_tokens) for j in map(job_from_spec, specs)]
    except (ValueError, KeyError, TypeError):
        return [1.0] * len(specs)
    return work if all(w > 0 for w in work) else [1.0] * len(specs)


def callback_overrides(jobs: int | None, specs: list[RunSpec]) -> list[str]:
    """The overrides that hand a checked sweep's job count and planned work to :class:`SweepProgress`."""
    if not jobs:
        return []
    work = ",".join(repr(w) for w in job_work(specs)) if len(specs) == jobs else ""
    return [f"hydra.callbacks.sweep_progress.planned={jobs}", f"hydra.callbacks.sweep_progress.work=[{work}]"]


def eta_seconds(elapsed: float, work: list[float], done: int, idle: float) -> float | None:
    """Seconds left: ``elapsed`` over the work of the ``done`` jobs that computed something (their planned work minus
    ``idle``, the work of those whose rows came from elsewhere: complete already, copied, cached), times the planned
    work of the jobs left. None before any job computed (no rate yet)."""
    worked = sum(work[:done]) - idle
    if worked <= 0 or done >= len(work):
        return None
    return elapsed / worked * sum(work[done:])


def computed_nothing(run_dir: Path, since: float) -> bool:
    """Whether a finished job took its rows from elsewhere: complete before it started, the full cache's copy, or
    every sample from the sample cache (``meta.json``)."""
    try:
        meta = json.loads((run_dir / "meta.json").read_text())
        finished = datetime.fromisoformat(meta["finished"]).timestamp()
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return bool(meta.get("same_as")) or meta.get("cached_rows") == meta.get("n_rows") or finished < since - 1


def _score(res: dict[str, Any] | None) -> str:
    if not res or not res.get("metrics"):
        return "no score"
    name, m = next(iter(res["metrics"].items()))
    value = "—" if m["value"] is None else (f"{m['value']:.1f}" if m["unit"] == "%" else f"{m['value']:.4g}")
    ci = "" if m["ci_lo"] is None else (f" [{m['ci_lo']:.1f}, {m['ci_hi']:.1f}]" if m["unit"] == "%" else
                                        f" [{m['ci_lo']:.4g}, {m['ci_hi']:.4g}]")
    return f"{name} {value}{'%' if m['unit'] == '%' else ''}{ci} (n={m['n']}){_cost(res)}"


def _cost(res: dict[str, Any]) -> str:
    """`` · throughput 123.4 tok/s (rows 8) · latency 1.2 s/sample`` from ``results.json`` (what it has)."""
    parts = []
    if res.get("gen_tokens_per_s") is not None:
        rows = (res.get("throughput") or {}).get("rows")
        rate = rate_text(res["gen_tokens_per_s"])
        parts.append(f"throughput {rate} tok/s (rows {rows if rows is not None else '?'})")
    if res.get("latency_s_mean") is not None:
        parts.append(f"latency {res['latency_s_mean']:.3g} s/sample")
    if res.get("keeps_every_token"):
        parts.append("keeps every token (= full cache)")
    return "".join(f" · {p}" for p in parts)


def _compression(config: Any) -> dict[str, Any] | None:
    """The job's resolved ``compression`` node (None when it cannot be read here)."""
    try:
        return OmegaConf.to_container(config.compression, resolve=True)
    except Exception:  # noqa: BLE001 - a label only: the job itself reported any config error
        return None


def job_label(overrides: list[str], swept: set[str], compression: Mapping[str, Any] | None) -> str:
    """A job's line in the sweep table: its swept overrides (all of them when none is swept), less the
    ``compression.*`` keys its method does not read (the full cache reads none, so ``compression=none
    compression.prompt_budget=128`` is shown as ``compression=none``), plus the budget it ran at when that was not
    swept (``compression=rkv compression.budget=512``) and its storage when not the model's dtype
    (``compression.kv_dtype=fp8_e4m3 compression.kv_scale=one``): each line states the job's real budget and storage."""
    shown = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in swept] or list(overrides)
    if not compression:
        return " ".join(shown)
    try:
        method = compression_from_config(compression)
    except ValueError:
        return " ".join(shown)
    knobs = method.knobs()
    keys = {o.split("=", 1)[0].lstrip("+~") for o in shown}
    kept = [o for o in shown if not o.lstrip("+~").startswith("compression.")
            or o.split("=", 1)[0].lstrip("+~").removeprefix("compression.") in knobs]
    if method.compresses:
        budget = method.budget_knob if knobs.get(method.budget_knob) is not None else "ratio"
        if f"compression.{budget}" not in keys and knobs.get(budget) is not None:
            kept.append(f"compression.{budget}={knobs[budget]}")
    for name, value in method.kv_knobs().items():  # a storage other than the model's dtype: always on the line
        if f"compression.{name}" not in keys:
            kept.append(f"compression.{name}={value}")
    return " ".join(kept)


class SweepProgress(Callback):
    """``on_job_end``: "job k of N done in 1:02 (task=…, compression=…): accuracy 83.3% [43.6, 97.0] (n=6) · ETA
    4:10"; ``on_multirun_end``: the table of every job's score."""

    def __init__(self, planned: int | None = None, work: list[float] | None = None) -> None:
        self.planned = planned  # jobs of the checked command line (None: not known here)
        self.planned_work = list(work or [])
        self.start = 0.0
        self.done = 0
        self.jobs: list[tuple[str, dict[str, Any] | None, str]] = []
        self.job_start = 0.0
        self.swept: set[str] = set()
        self.work: list[float] = []
        self.idle = 0.0  # planned work of the jobs done that computed nothing
        self.job_wall = 0.0

    def on_multirun_start(self, config, **kwargs: Any) -> None:
        self.start = time.perf_counter()
        self.work = self.planned_work
        given = list(config.hydra.overrides.task) + [f"{k}={v}" for k, v in
                                                     (config.hydra.sweeper.get("params") or {}).items()]
        self.swept = {o.split("=", 1)[0].lstrip("+~") for o in given
                      if any(mark in o.split("=", 1)[-1] for mark in (",", "range(", "glob(", "choice("))}

    def on_job_start(self, config, **kwargs: Any) -> None:
        self.job_start = time.perf_counter()
        self.job_wall = time.time()

    def on_job_end(self, config, job_return, **kwargs: Any) -> None:
        try:
            if HydraConfig.get().mode.name != "MULTIRUN":
                return
        except ValueError:
            return
        self.done += 1
        total = self.planned
        overrides = getattr(job_return, "overrides", None) or []
        swept = job_label(overrides, self.swept, _compression(config))
        res, status = None, "failed"
        try:
            value = job_return.return_value
            status = "done"
        except Exception:  # noqa: BLE001 - the job's own error is reported by Hydra; we only count it
            value = None
        if isinstance(value, (str, Path)) and (Path(value) / "results.json").is_file():
            res = json.loads((Path(value) / "results.json").read_text())
        self.jobs.append((swept, res, status))
        took = time.perf_counter() - self.job_start
        elapsed = time.perf_counter() - self.start
        of = f" of {total}" if total else ""
        work = self.work if total and len(self.work) == total else [1.0] * (total or 0)
        if work and isinstance(value, (str, Path)) and computed_nothing(Path(value), self.job_wall):
            self.idle += work[self.done - 1]
        left = eta_seconds(elapsed, work, self.done, self.idle) if work else None
        eta = f" · ETA {_clock(left)}" if left is not None else ""
        log.info("job %d%s %s in %s (%s): %s%s", self.done, of, status, _clock(took), swept, _score(res), eta)

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        if not self.jobs:
            return
        width = max(len(s) for s, _, _ in self.jobs)
        lines = [f"sweep: {len(self.jobs)} jobs in {_clock(time.perf_counter() - self.start)}"]
        for swept, res, status in self.jobs:
            lines.append(f"  {swept.ljust(width)}  {_score(res) if status == 'done' else 'FAILED'}")
        log.info("\n".join(lines))
