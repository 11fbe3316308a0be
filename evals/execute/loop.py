"""``run(spec)``: one run = one checked (model, task, compression, generation) configuration -> one run directory.

spec -> plan (items, identity, directory, rows; no weights) -> for each pending (item, sample): prompt, generate,
score, one row appended to ``samples.jsonl`` -> ``samples.csv`` + ``summary.csv`` + ``meta.json``. Rows that need no
generation come first: resumed, copied from the full-cache run (:mod:`evals.execute.alias`), or found by the backend
in the sample cache (:class:`~evals.execute.caching.CachingBackend`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import OmegaConf

from evals.config.gpus import visible_devices
from evals.config.spec import RunSpec
from evals.execute.backends import Backend, make_backend
from evals.execute.generate import generate_and_score as _generate_and_score
from evals.execute.gpu_slot import Slot, pin
from evals.execute.prepare import RunPlan, plan
from evals.execute.runmeta import complete, finish, start_meta
from evals.execute.shards import merge_shards, run_shard
from evals.record.filesystem import MOUNTINFO
from evals.record.rundir import (
    check_resumable,
    clear_results,
    refuse_symlinks,
    remove_if_empty,
    run_lock,
    write_hydra_files,
)
from evals.report.run_headline import show_headline

log = logging.getLogger(__name__)


def run(spec: RunSpec, run_dir: Path | None = None, *, mountinfo: Path = MOUNTINFO) -> Path:
    """Run (or resume) one checked configuration; returns its run directory. With ``gpus``, this process first
    claims one of them and pins ``CUDA_VISIBLE_DEVICES`` to it, before anything here can start CUDA
    (:mod:`evals.execute.gpu_slot`; recorded in ``meta.json``). ``mountinfo``: the mount table the sample cache's
    placement reads (:func:`evals.execute.prepare.plan`).

    The run holds the directory's lock for its whole life: a second job for the same run waits, then resumes."""
    gpu = pin(spec.gpus, visible_devices()) if spec.gpus is not None else None
    p = plan(spec, run_dir, mountinfo=mountinfo)
    replay = None
    if spec.backend.replays:  # cheap to build: its input is checked before the run starts
        replay = make_backend(spec, rows=p.decode_rows, requested=p.rows)
        replay.check_matches([str(i.item_id) for i in p.items], model=spec.model.name)
    p.run_dir.mkdir(parents=True, exist_ok=True)
    refuse_symlinks(p.run_dir)
    if spec.shard is not None:  # one part of the job's items, in its own files (docs/sharding.md)
        return run_shard(p, replay, gpu)
    with run_lock(p.run_dir):
        try:
            if spec.overwrite:
                clear_results(p.run_dir)
            check_resumable(p.run_dir, p.fingerprint, p.identity)
        except Exception:
            remove_if_empty(p.run_dir)
            raise
        merge_shards(p, wait=True)  # shards of this run still writing finish first; their rows are this run's
        if complete(p):  # nothing left to do: no backend is built, no weights load, the record is left as it is
            log.info("nothing to do: %s is complete (overwrite=true starts afresh)", p.run_dir)
            show_headline(p.run_dir)
            return p.run_dir
        # accepted, with work to do: only now is the job's record written
        write_hydra_files(p.run_dir, OmegaConf.to_yaml(spec.config))
        return _run_locked(p, replay, gpu)


def _run_locked(p: RunPlan, replay: Backend | None, gpu: Slot | None = None) -> Path:
    meta = start_meta(p, gpu)
    meta.update(_generate_and_score(p, p.items, replay))
    return finish(p, meta)
