"""``shard=K/N``: one job's items over N processes writing into the one run directory (docs/sharding.md).

A shard runs in three steps:

1. under the run's lock: refuse a directory of another configuration, stop when the run is complete, write
   ``meta.json`` (status ``running``) when the run has none yet, read which samples the run's ``samples.jsonl``
   already holds, and take the shard's own lock (:mod:`evals.record.shard_files`);
2. under its own lock only: generate its items' missing samples (:func:`evals.config.shard.Shard.select`: item
   ``i`` of the task's order is shard ``i % N``'s) into ``samples.shard-K-of-N.jsonl`` and
   ``prompts.shard-K-of-N.jsonl.gz``, resuming its own file as a plain run resumes ``samples.jsonl``;
3. under the run's lock again: merge every shard file no process is writing (:func:`merge_shards`) into the run's
   files, record what this shard did in ``meta.json``'s ``shards``, and, when every sample of the job is in,
   write ``samples.csv``, ``summary.csv``, ``meta.json`` complete and the headline, as a plain run ends.

A plain run of the same job merges the shard files first, waiting for shards still writing, then resumes exactly
what is missing.
"""

from __future__ import annotations

import json
import logging
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from evals.execute.backends import Backend
from evals.execute.backends.prompts import PROMPTS, PromptStore, read_prompts
from evals.execute.generate import generate_and_score
from evals.execute.gpu_slot import Slot
from evals.execute.prepare import RunPlan
from evals.execute.regrade import generated_here, refresh_resumed
from evals.execute.runmeta import complete, finish, start_meta
from evals.execute.work import missing
from evals.record.rows import RowWriter, done_keys, read_rows, row_line
from evals.record.rundir import (
    META,
    SAMPLES,
    check_resumable,
    now,
    read_meta,
    refuse_symlinks,
    remove_if_empty,
    run_lock,
    write_atomic,
    write_atomic_bytes,
    write_hydra_files,
)
from evals.record.shard_files import ShardFiles, shard_lock, shards_present
from evals.report.run_headline import show_headline

log = logging.getLogger("evals.execute.loop")


def run_shard(p: RunPlan, replay: Backend | None, gpu: Slot | None = None) -> Path:
    """Run (or resume) shard ``p.spec.shard`` of the run ``p``; returns the run directory (see the module
    docstring)."""
    shard = p.spec.shard
    files = ShardFiles(p.run_dir, shard.suffix)
    refuse_symlinks(p.run_dir, files.names)
    items = shard.select(p.items)
    with ExitStack() as own:
        with run_lock(p.run_dir):
            try:
                check_resumable(p.run_dir, p.fingerprint, p.identity)
            except Exception:
                remove_if_empty(p.run_dir)
                raise
            merge_shards(p, wait=False)
            if complete(p):
                log.info("nothing to do: %s is complete (overwrite=true starts afresh)", p.run_dir)
                show_headline(p.run_dir)
                return p.run_dir
            write_hydra_files(p.run_dir, OmegaConf.to_yaml(p.spec.config))
            old = read_meta(p.run_dir / META) or {}
            if old.get("fingerprint") != p.fingerprint or old.get("status") == "complete":
                # the first shard to start (or a run of other code): it vouches for every shard's rows
                start_meta(p, gpu)
            in_run = _run_rows(p)
            own.enter_context(shard_lock(files, wait=True))  # lock order: the run's, then the shard's
        log.info("shard %s of %s: %d of %d items", shard.label, p.run_id, len(items), len(p.items))
        started = now()
        info = generate_and_score(p, items, replay, samples=files.samples, prompts=files.prompts, also_done=in_run)
    with run_lock(p.run_dir):  # the shard's lock is released: its file can be merged, by this process or another
        merge_shards(p, wait=False)
        meta = read_meta(p.run_dir / META) or start_meta(p, gpu)
        if not isinstance(meta.get("shards"), dict):
            meta["shards"] = {}
        meta["shards"][shard.label] = {"items": len(items), "started": started, "finished": now(), **info}
        if complete(p):  # a plain run finished the job meanwhile
            write_atomic(p.run_dir / META, json.dumps(meta, indent=2, default=str))
            return p.run_dir
        wanted = (lambda item_id: replay.samples_for(item_id, p.sampling.n)) if replay is not None else (
            lambda item_id: range(p.sampling.n))
        left = sum(len(w.sample_idx) for w in missing(p.items, wanted, set(_run_rows(p, refresh=True))))
        running = [f.label for f in shards_present(p.run_dir)]
        if not left and not running:
            return finish(p, combined(meta))
        write_atomic(p.run_dir / META, json.dumps(meta, indent=2, default=str))
        log.info("shard %s done; %d samples of the run still missing%s: the run is complete when every shard "
                 "has ended (the plain command, without shard=, resumes what is missing)", shard.label, left,
                 f" (shards {', '.join(running)} still writing)" if running else "")
        return p.run_dir


def _run_rows(p: RunPlan, refresh: bool = False) -> set[tuple[str, int]]:
    """``(item_id, sample_idx)`` of the run's ``samples.jsonl`` this code may keep (the caller holds the run's lock);
    ``refresh``: rows of other code dropped and rows graded by other code re-graded in the file
    (:func:`evals.execute.regrade.refresh_resumed`), as a plain run does before it ends."""
    path = p.run_dir / SAMPLES
    rows = read_rows(path, p.fingerprint)
    if refresh:
        return done_keys(refresh_resumed(p, path, rows))
    return done_keys(r for r in rows if generated_here(r, p.generation_id))


def merge_shards(p: RunPlan, wait: bool) -> int:
    """Fold the rows and prompts of every shard file of the run into ``samples.jsonl`` and ``prompts.jsonl.gz``,
    then remove the shard's files; ``wait``: wait for shards still writing (a plain run), else leave their files for
    later. A sample already in ``samples.jsonl`` is not added again (a row of other code there is replaced by the
    shard's). The caller holds the run's lock. Returns the rows added."""
    added = 0
    for files in shards_present(p.run_dir):
        with shard_lock(files, wait=wait) as held:
            if held:
                added += _merge_one(p, files)
    return added


def _merge_one(p: RunPlan, files: ShardFiles) -> int:
    if files.prompts.is_file():
        PromptStore(p.run_dir / PROMPTS).add(list(read_prompts(files.prompts).values()))
    path = p.run_dir / SAMPLES
    rows = read_rows(path, p.fingerprint)
    at = {(str(r["item_id"]), r["sample_idx"]): k for k, r in enumerate(rows)}
    new, replaced = [], 0
    for row in read_rows(files.samples, p.fingerprint):
        key = (str(row["item_id"]), row["sample_idx"])
        if key not in at:
            at[key] = len(rows) + len(new)
            new.append(row)
        elif at[key] < len(rows) and not generated_here(rows[at[key]], p.generation_id) and generated_here(
                row, p.generation_id):
            rows[at[key]] = row
            replaced += 1
    if replaced:  # rare: the run's file held rows of other code; rewritten whole, atomically
        write_atomic_bytes(path, b"".join(row_line(r) for r in rows + new))
    elif new:
        with RowWriter(path) as writer:
            for row in new:
                writer.write(row)
    files.samples.unlink(missing_ok=True)
    files.prompts.unlink(missing_ok=True)
    if new or replaced:
        log.info("%s: merged %d rows of shard %s", p.run_id, len(new) + replaced, files.label)
    return len(new) + replaced


def combined(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta.json`` of a run its shards completed: what every shard's backend reported alike at the top level, the
    generation counted over all shards (``tokens_per_s``: their tokens over the sum of their generation times, the
    throughput of one device), the rows reused from the sample cache summed, and ``same_as`` when every shard copied
    its rows from the one full-cache run. Each shard's own report stays under ``shards``."""
    reports = [{k: v for k, v in s.items() if k not in ("items", "started", "finished")}
               for s in meta.get("shards", {}).values()]
    reports = [r for r in reports if r]
    out = dict(meta)
    if not reports:
        return out
    first = reports[0]
    for key, value in first.items():
        if key not in ("generation", "cached_rows") and all(r.get(key) == value for r in reports):
            out[key] = value
    gens = [r["generation"] for r in reports if isinstance(r.get("generation"), dict)]
    if gens:
        wall = sum(g.get("wall_s") or 0 for g in gens)
        tokens = sum(g.get("gen_tokens") or 0 for g in gens)
        measured = all(g.get("measured") for g in gens)
        out["generation"] = {"wall_s": round(wall, 6), "gen_tokens": tokens,
                             "samples": sum(g.get("samples") or 0 for g in gens), "rows": gens[0].get("rows"),
                             "measured": measured, "tokens_per_s": tokens / wall if measured and wall > 0 else None,
                             "shards": len(gens)}
    cached = sum(r.get("cached_rows") or 0 for r in reports)
    if cached:
        out["cached_rows"] = cached
    return out
