"""Progress of a ``-m`` sweep: one line per finished job ("job k of N", its score, the overall ETA) and, at the end,
a compact table of every job (a Hydra callback, ``hydra.callbacks.sweep_progress`` in ``conf/config.yaml``).

N is the number of combinations :mod:`evals.cli` checked before the first job (Hydra's basic launcher then runs them
in this process, one after the other). With a launcher that runs jobs elsewhere the lines come from each worker and
N is not known there: they say "job k".
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

log = logging.getLogger("evals.sweep")


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


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
        parts.append(f"throughput {res['gen_tokens_per_s']:.1f} tok/s (rows {rows if rows is not None else '?'})")
    if res.get("latency_s_mean") is not None:
        parts.append(f"latency {res['latency_s_mean']:.3g} s/sample")
    if res.get("keeps_every_token"):
        parts.append("keeps every token (= full cache)")
    return "".join(f" · {p}" for p in parts)


class SweepProgress(Callback):
    """``on_job_end``: "job k of N done in 1:02 (task=…, compression=…): accuracy 83.3% [43.6, 97.0] (n=6) · ETA
    4:10"; ``on_multirun_end``: the table of every job's score."""

    def __init__(self) -> None:
        self.start = 0.0
        self.done = 0
        self.jobs: list[tuple[str, dict[str, Any] | None, str]] = []
        self.job_start = 0.0
        self.swept: set[str] = set()

    def on_multirun_start(self, config, **kwargs: Any) -> None:
        self.start = time.perf_counter()
        given = list(config.hydra.overrides.task) + [f"{k}={v}" for k, v in
                                                     (config.hydra.sweeper.get("params") or {}).items()]
        self.swept = {o.split("=", 1)[0].lstrip("+~") for o in given
                      if any(mark in o.split("=", 1)[-1] for mark in (",", "range(", "glob(", "choice("))}

    def on_job_start(self, config, **kwargs: Any) -> None:
        self.job_start = time.perf_counter()

    def on_job_end(self, config, job_return, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        from evals.cli import planned_jobs

        try:
            if HydraConfig.get().mode.name != "MULTIRUN":
                return
        except ValueError:
            return
        self.done += 1
        total = planned_jobs()
        overrides = getattr(job_return, "overrides", None) or []
        swept = " ".join(o for o in overrides if o.split("=", 1)[0].lstrip("+~") in self.swept) or " ".join(overrides)
        res, status = None, "failed"
        try:
            value = job_return.return_value
            status = "done"
        except Exception:  # noqa: BLE001 - the job's own error is reported by Hydra; we only count it
            value = None
        if isinstance(value, (str, Path)) and (Path(value) / "results.json").is_file():
            import json

            res = json.loads((Path(value) / "results.json").read_text())
        self.jobs.append((swept, res, status))
        took = time.perf_counter() - self.job_start
        elapsed = time.perf_counter() - self.start
        of = f" of {total}" if total else ""
        eta = f" · ETA {_clock(elapsed / self.done * (total - self.done))}" if total and total > self.done else ""
        log.info("job %d%s %s in %s (%s): %s%s", self.done, of, status, _clock(took), swept, _score(res), eta)

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        if not self.jobs:
            return
        width = max(len(s) for s, _, _ in self.jobs)
        lines = [f"sweep: {len(self.jobs)} jobs in {_clock(time.perf_counter() - self.start)}"]
        for swept, res, status in self.jobs:
            lines.append(f"  {swept.ljust(width)}  {_score(res) if status == 'done' else 'FAILED'}")
        log.info("\n".join(lines))
