"""``run(spec)``: one run = one checked (model, task, compression, generation) configuration -> one run directory.

spec -> plan (items, identity, directory, rows; no weights) -> for each pending (item, sample): prompt, generate,
score, one row appended to ``samples.jsonl`` -> ``samples.csv`` + ``summary.csv`` + ``meta.json``. Rows that need no
generation come first: resumed, copied from the full-cache run (:mod:`evals.execute.alias`), or found by the backend
in the sample cache (:class:`~evals.execute.caching.CachingBackend`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from evals.config.spec import RunSpec
from evals.execute.alias import copy_rows, find_source
from evals.execute.backends import Backend, make_backend
from evals.execute.backends.prompts import PROMPTS, PromptStore
from evals.execute.caching import CachingBackend
from evals.execute.expected import announce
from evals.execute.prepare import RunPlan, plan
from evals.execute.progress import Progress
from evals.execute.regrade import generated_here, refresh_resumed, regrade
from evals.execute.row import build_row
from evals.execute.sample_cache import SampleCache, reused_row, sample_key_base
from evals.execute.work import missing, pending_work, produce, score
from evals.record.rows import RowWriter, done_keys, read_rows, tidy
from evals.record.rundir import (
    META,
    RESULTS,
    SAMPLES,
    SAMPLES_CSV,
    SUMMARY,
    check_resumable,
    clear_results,
    device_info,
    git_commit,
    git_dirty,
    now,
    read_meta,
    refuse_symlinks,
    remove_if_empty,
    run_lock,
    versions,
    write_atomic,
    write_hydra_files,
)
from evals.record.throughput import GenClock
from evals.report.run_headline import show_headline
from tasks.protocol import hook

log = logging.getLogger(__name__)


def run(spec: RunSpec, run_dir: Path | None = None) -> Path:
    """Run (or resume) one checked configuration; returns its run directory.

    The run holds the directory's lock for its whole life: a second job for the same run waits, then resumes."""
    p = plan(spec, run_dir)
    replay = None
    if spec.backend.replays:  # cheap to build: its input is checked before the run starts
        replay = make_backend(spec, rows=p.decode_rows, requested=p.rows)
        replay.check_matches([str(i.item_id) for i in p.items], model=spec.model.name)
    p.run_dir.mkdir(parents=True, exist_ok=True)
    refuse_symlinks(p.run_dir)
    with run_lock(p.run_dir):
        try:
            if spec.overwrite:
                clear_results(p.run_dir)
            check_resumable(p.run_dir, p.fingerprint, p.identity)
        except Exception:
            remove_if_empty(p.run_dir)
            raise
        if _complete(p):  # nothing left to do: no backend is built, no weights load, the record is left as it is
            log.info("nothing to do: %s is complete (overwrite=true starts afresh)", p.run_dir)
            show_headline(p.run_dir)
            return p.run_dir
        # accepted, with work to do: only now is the job's record written
        write_hydra_files(p.run_dir, OmegaConf.to_yaml(spec.config))
        return _run_locked(p, replay)


def _complete(p: RunPlan) -> bool:
    """Whether the run directory already holds this identity's finished results (``meta.json`` complete)."""
    meta = read_meta(p.run_dir / META) or {}
    if not (meta.get("status") == "complete" and meta.get("fingerprint") == p.fingerprint
            and meta.get("code") == _code(p)  # rows of other code: resumed under this code's rule (regrade)
            and (p.run_dir / SUMMARY).is_file() and (p.run_dir / SAMPLES).is_file()):
        return False
    with open(p.run_dir / SAMPLES, "rb") as fh:  # rows lost since (a file cut by hand or restored): resume them
        return sum(1 for line in fh if line.strip()) == meta.get("n_rows")


def _code(p: RunPlan) -> dict[str, Any]:
    """The identities of the code that generates and grades this run's rows (``meta.json``'s ``code``)."""
    return {"generation_id": p.generation_id, "grading_id": p.grading_id, "grading_setup": p.grading_setup}


def _protocol(p: RunPlan) -> str | None:
    """The grading protocol of the run (``task.protocol_name``), for ``meta.json``; None for a task with one way."""
    name = hook(p.task, "protocol_name")
    return name(p.spec.task) if name is not None else None


def _run_locked(p: RunPlan, replay: Backend | None) -> Path:
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
        "code": _code(p),
        "sample_cache": None if p.cache_root is None else str(p.cache_root),
        "started": now(),
        "versions": versions(),
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "device": device_info(torch_info=spec.backend.loads_weights),
        "config": OmegaConf.to_container(spec.config, resolve=True),
    }
    (p.run_dir / RESULTS).unlink(missing_ok=True)  # a headline of earlier rows never stands beside a running run
    write_atomic(p.run_dir / META, json.dumps(meta, indent=2, default=str))
    write_atomic(p.run_dir / "resolved_config.yaml", OmegaConf.to_yaml(spec.config, resolve=True))
    meta.update(_generate_and_score(p, p.items, replay))
    rows = read_rows(p.run_dir / SAMPLES, p.fingerprint)
    df = tidy(rows)
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


def _generate_and_score(p: RunPlan, items: list, replay: Backend | None = None) -> dict[str, Any]:
    """Generate and score what is missing, writing each sample's row as soon as it is scored; returns what the
    backend reports for ``meta.json``."""
    samples_path = p.run_dir / SAMPLES
    resumed = read_rows(samples_path, p.fingerprint)  # every resumed row is this configuration's
    done = done_keys(refresh_resumed(p, samples_path, resumed))  # under this code (evals/execute/regrade.py)
    generates = p.spec.backend.loads_weights
    if generates and (copied := _copy_if_same(p, items, done)) is not None:
        return copied
    backend = _backend(p, replay)
    try:
        return _generate_with(p, backend, items, done)
    finally:
        backend.close()  # a worker process (backend=vllm) ends with its run, not with the sweep


def _generate_with(p: RunPlan, backend: Backend, items: list, done: set[tuple[str, int]]) -> dict[str, Any]:
    samples_path = p.run_dir / SAMPLES
    generates = p.spec.backend.loads_weights
    reused = _reuse_cached(p, backend, items, done) if not p.spec.overwrite else 0
    if reused and not missing(items, lambda item_id: range(p.sampling.n), done):
        return {"cached_rows": reused}  # every sample was in the cache: the wrapped backend is never built
    work = pending_work(backend, p, items, done)
    if done:
        log.info("resuming %s: %d rows already there, %d items to go", p.run_dir, len(done), len(work))
    prompts = PromptStore(p.run_dir / PROMPTS)
    total = sum(len(w.sample_idx) for w in work)
    if generates and total:
        announce(backend, total, p.spec.gen.max_new_tokens, p.rows)
    clock = GenClock(rows=p.rows, measured=generates)
    with RowWriter(samples_path) as writer, Progress(p, total) as progress:
        for ended in clock.timed(produce(p, backend, work, prompts)):
            for outcome in score(p, ended):
                row = build_row(p, outcome)
                writer.write(row)
                backend.keep(outcome.request.item, row, prompts.known.get(row["prompt_hash"]))
            progress.update(ended)
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


def _reuse_cached(p: RunPlan, backend: Backend, items: list, done: set[tuple[str, int]]) -> int:
    """Write the rows of the missing samples the backend already holds (:mod:`evals.execute.sample_cache`), adding
    their keys to ``done``; returns how many."""
    pending = missing(items, lambda item_id: range(p.sampling.n), done)
    found = [f for f in backend.cached((w.item, w.sample_idx) for w in pending)
             if generated_here(f[1], p.generation_id)]
    if not found:
        return 0
    PromptStore(p.run_dir / PROMPTS).add([prompt for _, row, prompt in found if row.get("prompt_hash") is not None])
    rows = regrade(p, [(item, row) for item, row, _ in found])
    with RowWriter(p.run_dir / SAMPLES) as writer:
        for (item, stored, _), row in zip(found, rows):
            writer.write(reused_row(row, p.run_id, p.fingerprint))
            done.add((str(row["item_id"]), row["sample_idx"]))
            if row is not stored:  # re-graded: later runs find the new verdict
                backend.keep(item, row, None)
    log.info("%s: %d of %d missing samples reused from the sample cache %s (sample_cache=false: generate them)",
             p.run_id, len(found), sum(len(w.sample_idx) for w in pending), p.cache_root)
    return len(found)


def _copy_if_same(p: RunPlan, items: list, done: set[tuple[str, int]]) -> dict[str, Any] | None:
    """When the method keeps every token of every pending item and the full-cache run is complete, write its rows as
    this run's (:mod:`evals.execute.alias`) and return ``meta.json``'s ``same_as``; else None (generate as usual)."""
    pending = missing(items, lambda item_id: range(p.sampling.n), done)  # a generating backend: samples 0..n-1
    source = find_source(p, [(w.item, w.sample_idx) for w in pending])
    if source is None:
        return None
    PromptStore(p.run_dir / PROMPTS).add(source.prompts)
    by_id = {str(item.item_id): item for item in items}
    rows = regrade(p, [(by_id[str(row["item_id"])], row) for row in copy_rows(p, source)])
    with RowWriter(p.run_dir / SAMPLES) as writer:
        for row in rows:
            writer.write(row)
    return {"same_as": str(source.run_dir)}
