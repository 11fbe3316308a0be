"""Generate and score what a run (or one shard of it) is missing, writing each sample's row as soon as it is scored.

Rows that need no generation come first: resumed, copied from the full-cache run (:mod:`evals.execute.alias`), or
found by the backend in the sample cache (:class:`~evals.execute.caching.CachingBackend`). The caller holds the lock
of the file it writes (the run's, or a shard's: :mod:`evals.execute.shards`).
"""

from __future__ import annotations

import logging
from collections.abc import Set
from pathlib import Path
from typing import Any

from evals.execute.alias import copy_rows, find_source
from evals.execute.backends import Backend, make_backend
from evals.execute.backends.prompts import PROMPTS, PromptStore
from evals.execute.caching import CachingBackend
from evals.execute.expected import announce
from evals.execute.prepare import RunPlan
from evals.execute.progress import Progress
from evals.execute.regrade import generated_here, refresh_resumed, regrade
from evals.execute.row import build_row
from evals.execute.sample_cache import SampleCache, reused_row, sample_key_base
from evals.execute.work import expected_work, missing, pending_work, produce, score
from evals.record.rows import RowWriter, done_keys, read_rows
from evals.record.rundir import SAMPLES
from evals.record.throughput import GenClock

log = logging.getLogger("evals.execute.loop")


def generate_and_score(p: RunPlan, items: list, replay: Backend | None = None, *, samples: Path | None = None,
                       prompts: Path | None = None, also_done: Set[tuple[str, int]] = frozenset()
                       ) -> dict[str, Any]:
    """Generate and score what is missing of ``items``, writing each sample's row as soon as it is scored; returns
    what the backend reports for ``meta.json``. ``samples``/``prompts``: the files written and resumed (default:
    the run's ``samples.jsonl`` and ``prompts.jsonl.gz``; a shard's own files); ``also_done``: ``(item_id,
    sample_idx)`` already in the run's ``samples.jsonl`` when a shard writes its own file."""
    samples_path = p.run_dir / SAMPLES if samples is None else samples
    prompts_path = p.run_dir / PROMPTS if prompts is None else prompts
    resumed = read_rows(samples_path, p.fingerprint)  # every resumed row is this configuration's
    done = done_keys(refresh_resumed(p, samples_path, resumed)) | set(also_done)  # under this code (regrade.py)
    if not missing(items, lambda item_id: range(p.sampling.n), done):
        return {}  # every sample is there: no backend is built, no weights load
    generates = p.spec.backend.loads_weights
    if generates and (copied := _copy_if_same(p, items, done, samples_path, prompts_path)) is not None:
        return copied
    backend = _backend(p, replay)
    try:
        return _generate_with(p, backend, items, done, samples_path, prompts_path)
    finally:
        backend.close()  # a worker process (backend=vllm) ends with its run, not with the sweep


def _generate_with(p: RunPlan, backend: Backend, items: list, done: set[tuple[str, int]], samples_path: Path,
                   prompts_path: Path) -> dict[str, Any]:
    generates = p.spec.backend.loads_weights
    reused = _reuse_cached(p, backend, items, done, samples_path, prompts_path) if not p.spec.overwrite else 0
    if reused and not missing(items, lambda item_id: range(p.sampling.n), done):
        return {"cached_rows": reused}  # every sample was in the cache: the wrapped backend is never built
    work = pending_work(backend, p, items, done)
    if done:
        log.info("resuming %s: %d rows already there, %d items to go", p.run_dir, len(done), len(work))
    store = PromptStore(prompts_path)
    total = sum(len(w.sample_idx) for w in work)
    expected = expected_work(p, backend, work) if generates and total else None
    if expected is not None:
        announce(backend, expected, p.rows)
    clock = GenClock(rows=p.rows, measured=generates)
    with RowWriter(samples_path) as writer, Progress(p, total, expected) as progress:
        backend.watch(progress.on_tokens)
        for ended in clock.timed(produce(p, backend, work, store)):
            for outcome in score(p, ended):
                row = build_row(p, outcome)
                writer.write(row)
                backend.keep(outcome.request.item, row, store.known.get(row["prompt_hash"]))
            progress.update(ended)
        backend.watch(None)
    info = backend.meta()
    info = {**info, **clock.meta(info)}
    return {**info, "cached_rows": reused} if reused else info


def _backend(p: RunPlan, replay: Backend | None) -> Backend:
    """The run's backend: ``replay`` (built to check its input before the run), else the configured one; in front of
    the sample cache when the run uses one (:class:`~evals.execute.caching.CachingBackend`, which builds it
    at first use)."""
    if replay is not None:
        return replay

    def build() -> Backend:
        return make_backend(p.spec, rows=p.decode_rows, requested=p.rows, planned_bytes=p.planned_bytes)

    if p.cache_root is not None:
        cache = SampleCache.open(p.cache_root, sample_key_base(p.identity, p.generation_id, p.grading_setup))
        if cache is not None:
            return CachingBackend(build, cache)
    return build()


def _reuse_cached(p: RunPlan, backend: Backend, items: list, done: set[tuple[str, int]], samples: Path,
                  prompts: Path) -> int:
    """Write the rows of the missing samples the backend already holds (:mod:`evals.execute.sample_cache`), adding
    their keys to ``done``; returns how many."""
    pending = missing(items, lambda item_id: range(p.sampling.n), done)
    found = [f for f in backend.cached((w.item, w.sample_idx) for w in pending)
             if generated_here(f[1], p.generation_id)]
    if not found:
        return 0
    PromptStore(prompts).add([prompt for _, row, prompt in found if row.get("prompt_hash") is not None])
    rows = regrade(p, [(item, row) for item, row, _ in found])
    with RowWriter(samples) as writer:
        for (item, stored, _), row in zip(found, rows):
            writer.write(reused_row(row, p.run_id, p.fingerprint))
            done.add((str(row["item_id"]), row["sample_idx"]))
            if row is not stored:  # re-graded: later runs find the new verdict
                backend.keep(item, row, None)
    log.info("%s: %d of %d missing samples reused from the sample cache %s (sample_cache=false: generate them)",
             p.run_id, len(found), sum(len(w.sample_idx) for w in pending), p.cache_root)
    return len(found)


def _copy_if_same(p: RunPlan, items: list, done: set[tuple[str, int]], samples: Path, prompts: Path
                  ) -> dict[str, Any] | None:
    """When the method keeps every token of every pending item and the full-cache run is complete, write its rows as
    this run's (:mod:`evals.execute.alias`) and return ``meta.json``'s ``same_as``; else None (generate as usual)."""
    pending = missing(items, lambda item_id: range(p.sampling.n), done)  # a generating backend: samples 0..n-1
    source = find_source(p, [(w.item, w.sample_idx) for w in pending])
    if source is None:
        return None
    PromptStore(prompts).add(source.prompts)
    by_id = {str(item.item_id): item for item in items}
    rows = regrade(p, [(by_id[str(row["item_id"])], row) for row in copy_rows(p, source)])
    with RowWriter(samples) as writer:
        for row in rows:
            writer.write(row)
    return {"same_as": str(source.run_dir)}
