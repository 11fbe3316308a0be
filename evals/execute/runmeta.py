"""A run's record besides its rows: ``meta.json`` when it starts, and, when every sample is in, ``samples.csv``,
``summary.csv``, ``meta.json`` marked complete and the headline. The caller holds the run's lock."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from evals.execute.gpu_slot import Slot
from evals.execute.prepare import RunPlan
from evals.record.rows import read_rows, tidy
from evals.record.rundir import (
    META,
    RESULTS,
    SAMPLES,
    SAMPLES_CSV,
    SUMMARY,
    device_info,
    git_commit,
    git_dirty,
    now,
    read_meta,
    versions,
    write_atomic,
)
from evals.report.run_headline import show_headline
from tasks.protocol import hook

log = logging.getLogger("evals.execute.loop")


def complete(p: RunPlan) -> bool:
    """Whether the run directory already holds this identity's finished results (``meta.json`` complete)."""
    meta = read_meta(p.run_dir / META) or {}
    if not (meta.get("status") == "complete" and meta.get("fingerprint") == p.fingerprint
            and meta.get("code") == code(p)  # rows of other code: resumed under this code's rule (regrade)
            and (p.run_dir / SUMMARY).is_file() and (p.run_dir / SAMPLES).is_file()):
        return False
    with open(p.run_dir / SAMPLES, "rb") as fh:  # rows lost since (a file cut by hand or restored): resume them
        return sum(1 for line in fh if line.strip()) == meta.get("n_rows")


def code(p: RunPlan) -> dict[str, Any]:
    """The identities of the code that generates and grades this run's rows (``meta.json``'s ``code``)."""
    return {"generation_id": p.generation_id, "grading_id": p.grading_id, "grading_setup": p.grading_setup}


def _protocol(p: RunPlan) -> str | None:
    """The grading protocol of the run (``task.protocol_name``), for ``meta.json``; None for a task with one way."""
    name = hook(p.task, "protocol_name")
    return name(p.spec.task) if name is not None else None


def start_meta(p: RunPlan, gpu: Slot | None = None) -> dict[str, Any]:
    """``meta.json`` of a run that starts (status ``running``), written with ``resolved_config.yaml``; the caller
    holds the run's lock. What shards of this run recorded (``shards``) is kept."""
    spec = p.spec
    meta = {
        "status": "running",
        "fingerprint": p.fingerprint,
        "identity": p.identity,
        "run_id": p.run_id,
        "weights": p.weights,
        "data_sha256": p.identity["task"]["data_sha256"],
        "data_revision": spec.task.get("revision"),
        "protocol": _protocol(p),
        "code": code(p),
        "sample_cache": None if p.cache_root is None else str(p.cache_root),
        "sample_cache_place": p.cache_place,
        "gpu": None if gpu is None else gpu.record(),
        "started": now(),
        "versions": versions(),
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "device": device_info(torch_info=spec.backend.loads_weights),
        "config": OmegaConf.to_container(spec.config, resolve=True),
    }
    old = read_meta(p.run_dir / META) or {}
    if old.get("fingerprint") == p.fingerprint and isinstance(old.get("shards"), dict):
        meta["shards"] = old["shards"]  # what the shards of this run recorded
    (p.run_dir / RESULTS).unlink(missing_ok=True)  # a headline of earlier rows never stands beside a running run
    write_atomic(p.run_dir / META, json.dumps(meta, indent=2, default=str))
    write_atomic(p.run_dir / "resolved_config.yaml", OmegaConf.to_yaml(spec.config, resolve=True))
    return meta


def finish(p: RunPlan, meta: dict[str, Any]) -> Path:
    """``samples.csv``, ``summary.csv``, ``meta.json`` marked complete and the headline, from every row of the run's
    ``samples.jsonl`` taken in the task's item order and sample index (a resumed or sharded run's file holds them
    in the order they were written); the caller holds the run's lock."""
    spec = p.spec
    rows = read_rows(p.run_dir / SAMPLES, p.fingerprint)
    order = {str(item.item_id): k for k, item in enumerate(p.items)}
    rows.sort(key=lambda r: (order.get(str(r["item_id"]), len(order)), r["sample_idx"]))
    df = tidy(rows)  # in the task's order: the tables (and their bootstrap) do not depend on who wrote which row first
    write_atomic(p.run_dir / SAMPLES_CSV, df.to_csv(index=False))
    from evals.analysis.summary import SummaryContext, summarize  # lazy: numpy and pandas, once a run has rows

    ctx = SummaryContext(spec.task, bool(spec.model.get("thinking", False)), str(spec.model.name), str(spec.task.name))
    summary = summarize(p.task, df, ctx, p.method)
    write_atomic(p.run_dir / SUMMARY, summary.to_csv(index=False))
    meta.update(status="complete", finished=now(), n_rows=len(rows), n_items=len(p.items))
    write_atomic(p.run_dir / META, json.dumps(meta, indent=2, default=str))
    log.info("run complete: %s (%d rows)", p.run_dir, len(rows))
    show_headline(p.run_dir)
    return p.run_dir
