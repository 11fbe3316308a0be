"""``prepare(spec)``: everything fixed before any weights load: the task's items, the run's identity and directory,
the decode rows (on CUDA the planner's, from the items' prompts when the task has no ``plan:`` block) and the code
identities the rows will carry."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from evals.config.gpus import physical_device
from evals.config.kv_storage import check_device
from evals.config.models import load_tokenizer, resolved_device, weights_identity
from evals.config.spec import RunSpec
from evals.execute.backends import backend_class
from evals.execute.cache_place import local_roots, place
from evals.execute.code_identity import generation_id, grading_id, grading_setup, prompt_data
from evals.execute.identity import fingerprint, run_identity
from evals.execute.sample_cache import cache_dir
from evals.plan.job import DEFAULT_MEMORY_GIB, choose_rows, job_from_spec, peak_bytes, rows_without_planner
from evals.plan.measured import plan_block, prompt_lengths
from evals.record.filesystem import MOUNTINFO, read_mountinfo
from snapstream_core.memory import device_usable_bytes
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.sampling import SamplingConfig
from tasks.protocol import hook

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunPlan:
    """Everything checked and resolved before any weights load: what the run will do, on which items, and where."""

    spec: RunSpec
    run_dir: Path
    run_id: str
    items: list
    weights: str
    identity: dict[str, Any]
    fingerprint: str
    decode_rows: int | None  # rows a generating backend holds (evals.plan.job.choose_rows on CUDA); None: replay
    rows: int | str  # gen.rows as reported: the planner's choice on CUDA, else as configured
    generation_id: str | None = None  # evals.execute.code_identity; None: a backend that generates nothing (replay)
    grading_id: str = ""
    grading_setup: dict[str, Any] | None = None  # the task's resolved grading setup (sandbox mode, interpreter)
    cache_root: Path | None = None  # the sample cache's folder, absolute; None: not used
    cache_place: dict[str, Any] | None = None  # where the cache was asked for and why it is elsewhere (cache_place)
    device: str | None = None  # the device that generates, as the machine names it (rows' `device`); None: replay
    planned_bytes: int | None = None  # the planner's peak at those rows (CUDA): quoted by an out-of-memory error

    @property
    def task(self) -> ModuleType:
        """The task module."""
        return self.spec.task_module

    @property
    def method(self) -> CompressionMethod:
        return self.spec.method

    @property
    def sampling(self) -> SamplingConfig:
        return self.spec.sampling

    @property
    def batch_size(self) -> int:
        return self.spec.gen.batch_size

    @property
    def seed(self) -> int:
        return self.spec.gen.seed


def plan(spec: RunSpec, run_dir: Path | None = None, *, mountinfo: Path = MOUNTINFO) -> RunPlan:
    """Read the task's items and fix the run's identity and directory (no weights load).

    ``run_dir`` given (``hydra.run.dir=DIR``): the run lives exactly there. Otherwise it lives under the readable
    ``run_dir`` of the config, in a ``fp-<fingerprint>`` folder, so two runs that differ anywhere never share one.
    ``mountinfo``: the mount table that tells whether the sample cache's folder is on a network filesystem
    (:mod:`evals.execute.cache_place`).
    """
    rows = planned = None
    if spec.backend.loads_weights:
        check_device(spec.method)  # FP8 storage without a float8 dtype: one line, before items or weights load
    items = spec.task_module.load(spec.task)
    if not items:
        raise ValueError("task: no items to evaluate (check task.limit and the filters)")
    container = spec.resolved
    generates = spec.backend.loads_weights
    if not generates:
        weights = spec.backend.name  # no weights run: the backend's input (file hash) is in the identity
    else:
        weights = weights_identity(spec.model)
        container = {**container, "model": {**container["model"], "device": resolved_device(spec.model)}}
        if spec.backend.engine:  # a backend with its own engine (vLLM) sizes its own batch
            rows, planned = planned_rows(spec, container["model"]["device"], lambda: prompt_lengths(spec, items))
    identity = run_identity(container, spec.method.knobs(), weights, items, prompt_data(spec.task_module))
    fp = fingerprint(identity)
    setup = grading_setup(spec.task_module, spec.task)
    run_dir = Path(run_dir) if run_dir is not None else Path(spec.run_dir) / f"fp-{fp}"
    try:
        run_id = str(run_dir.resolve().relative_to(Path(spec.out_root).resolve()))
    except ValueError:
        run_id = str(run_dir)
    asked = cache_dir(spec.out_root) if generates and spec.sample_cache else None
    cache = place(asked, read_mountinfo(mountinfo), local_roots()) if asked is not None else None
    return RunPlan(
        spec=spec,
        run_dir=run_dir,
        run_id=run_id,
        items=items,
        weights=weights,
        identity=identity,
        fingerprint=fp,
        decode_rows=_decode_rows(spec, rows) if generates and spec.backend.engine else None,
        rows=rows if rows is not None else spec.gen.rows,
        generation_id=generation_id(spec.task_module, backend_code(spec)) if generates else None,
        grading_id=grading_id(spec.task_module, setup),
        grading_setup=setup,
        cache_root=cache.used if cache is not None else None,
        cache_place=cache.record() if cache is not None else None,
        device=physical_device(container["model"]["device"]) if generates else None,
        planned_bytes=planned,
    )


def backend_code(spec: RunSpec) -> str:
    """The generating backend's part of the generation identity, as JSON (the class's ``code_identity``: for
    ``backend=vllm`` the worker's vllm and torch versions and the worker file's hash)."""
    import json

    return json.dumps(backend_class(spec.backend.name).code_identity(spec.backend.settings), sort_keys=True)


def _decode_rows(spec: RunSpec, planned: int | None) -> int:
    """The rows of a generating backend: the planner's on CUDA, else :func:`evals.plan.job.rows_without_planner`."""
    return planned if planned is not None else rows_without_planner(spec.gen.rows_request)


def _second_call_tokenizer(spec: RunSpec) -> Any:
    """The run's tokenizer when the task makes a second call in this configuration (LongBench-v2 CoT: the planner
    sizes the job at the task's bound on that call, which counts the task's template with it), else None (nothing
    loaded)."""
    bound = hook(spec.task_module, "followup_bound")
    if bound is None or bound(1, 1, spec.model, cfg=spec.task) is None:
        return None
    return load_tokenizer(spec.model)


def planned_rows(spec: RunSpec, device: str, measure: Callable[[], tuple[list[int], int]] | None = None
                 ) -> tuple[int | None, int | None]:
    """On CUDA, before any weights load: refuse (one line naming the job and its need) a job whose peak does not fit
    ``plan.memory_gib`` or the memory free on the device (``torch.cuda.mem_get_info``), and resolve ``gen.rows=auto``
    to the most rows that fit (:func:`evals.plan.job.choose_rows`, the model ``python -m evals.plan`` prints). A task
    without a ``plan:`` block is planned from its items' prompts, counted by ``measure`` (the tokenizer alone:
    :mod:`evals.plan.measured`). Returns ``(rows, planned peak bytes at those rows)``; elsewhere ``(None, None)``:
    :func:`evals.plan.job.rows_without_planner`."""
    if not str(device).startswith("cuda"):
        return None, None
    tokenizer = _second_call_tokenizer(spec)
    if not spec.task.get("plan") and measure is not None:
        lengths, new = measure()
        job = job_from_spec(spec, plan_block=plan_block(lengths), max_new_tokens=max(spec.gen.max_new_tokens, new),
                            tokenizer=tokenizer)
        log.info("planner: task %s has no plan block: planned from its %d items' prompts (longest %d tokens)",
                 spec.task.name, len(lengths), max(lengths))
    else:
        job = job_from_spec(spec, tokenizer=tokenizer)
    import torch  # lazy: the runner on CUDA has torch loaded; planning a run elsewhere needs none

    usable = device_usable_bytes(device) if torch.cuda.is_available() else None
    rows = choose_rows(job, usable=usable)
    log.info("planner: gen.rows=%s -> %d decode rows within plan.memory_gib=%s%s", spec.gen.rows, rows,
             spec.resolved.get("plan", {}).get("memory_gib", DEFAULT_MEMORY_GIB),
             "" if usable is None else f" and {usable / 2**30:.1f} GiB free on {device}")
    return rows, peak_bytes(job, rows)
