"""``run(cfg)``: one run = one (model, task, compression, generation) configuration -> one run directory.

conf -> checks (before any model loads) -> task items -> backend -> for each pending (item, sample): prompt, generate,
score, one row appended to ``samples.jsonl`` -> ``samples.csv`` + ``summary.csv`` + ``meta.json``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from evals.config import strict
from evals.execute.backends import Backend, Request, Sample, backend_traits, make_backend
from evals.execute.backends.base import check_rows
from evals.execute.backends.cached import CachingBackend
from evals.execute.code_identity import commit, generation_id, grading_id, grading_setup
from evals.execute.identity import fingerprint, run_identity
from evals.execute.prompts import PROMPTS, PromptStore
from evals.execute.regrade import generated_here, refresh_resumed, regrade
from evals.execute.sample_cache import SampleCache, cache_dir, reused_row, sample_key_base
from evals.geometry import row_geometry
from evals.headline import show_headline
from evals.plan.measured import prompt_lengths
from evals.rows import RowWriter, done_keys, read_rows, tidy
from evals.rundir import (
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
from evals.throughput import GenClock, rate_text
from snapstream_core.api import compression_from_config
from snapstream_core.methods import knob_names
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.sampling import SamplingConfig
from tasks import get_task
from tasks.base import Prompt
from tasks.protocol import answer_part, hook, score_all

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checked:
    """A config that passed every check that needs no data and no weights."""

    container: dict[str, Any]
    task: Any  # the task module
    method: CompressionMethod
    sampling: SamplingConfig
    batch_size: int
    seed: int


@dataclass(frozen=True)
class RunPlan:
    """Everything checked and resolved before any weights load: what the run will do, on which items, and where."""

    run_dir: Path
    run_id: str
    task: Any  # the task module
    method: CompressionMethod
    sampling: SamplingConfig
    batch_size: int
    seed: int
    items: list
    weights: str
    identity: dict[str, Any]
    fingerprint: str
    rows: int | str | None = None  # gen.rows for the backend: the planner's choice on CUDA, else as configured
    generation_id: str | None = None  # evals.execute.code_identity; None: a backend that generates nothing (replay)
    grading_id: str = ""
    grading_setup: dict[str, Any] | None = None  # the task's resolved grading setup (sandbox mode, interpreter)
    cache_root: Path | None = None  # the sample cache's folder, absolute; None: not used
    planned_bytes: int | None = None  # the planner's peak at those rows (CUDA): quoted by an out-of-memory error


def check(cfg: DictConfig, *, offline: bool = False) -> Checked:
    """Validate the whole config (raises ``ValueError`` naming the field) without reading data or loading a model.

    Cheap enough to run for every combination of a sweep before its first job starts (:mod:`evals.cli`, with
    ``offline``: the model hub is not asked, each job asks once before it loads anything). Imports no torch.
    """
    try:
        container = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except Exception as exc:  # omegaconf's MissingMandatoryValue / InterpolationResolutionError
        key = getattr(exc, "full_key", None)
        first = str(exc).splitlines()[0]
        raise ValueError(f"{key}: {first}" if key else f"config: {first}") from None
    strict.check(container)  # booleans, integers and appended keys, by type
    task = get_task(cfg.task.get("module") or cfg.task.name)  # `module`: a task module serving many names (lm_eval)
    _check_task_source(container["task"])
    validate = hook(task, "validate")
    if validate is not None:
        validate(cfg.task)
    method = compression_from_config(container["compression"])
    gen = container["gen"]
    sampling = SamplingConfig(
        max_new_tokens=_number(gen, "max_new_tokens", int),
        temperature=_number(gen, "temperature", float),
        top_p=_number(gen, "top_p", float),
        top_k=_number(gen, "top_k", int),
        n=_number(gen, "n_samples", int),
    )
    if gen.get("compile", "auto") not in (None, "auto", True, False):  # snapstream_core.engine.step.resolve_compile
        raise ValueError(f"gen.compile: must be auto, true or false, got {gen['compile']!r}")
    check_rows(gen.get("rows", "auto"))
    batch_size = gen["batch_size"]
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(
            f"gen.batch_size: must be >= 1 (an integer: prompts per left-padded batch), got {batch_size!r}"
        )
    if batch_size > 1 and method.knobs().get("ratio") is not None:
        raise ValueError(
            f"gen.batch_size: compression.ratio keeps a share of each prompt, which needs gen.batch_size=1 "
            f"(a left-padded batch shares one budget), got {batch_size}"
        )
    backend = backend_traits(cfg.backend.name)
    if backend.loads_weights:
        from evals.config.models import check_model_config

        check_model_config(cfg.model, reach=not offline)
        _check_family(container)
        if method.needs_shape:  # e.g. a calibration file made for this model (triattention)
            from dataclasses import asdict

            from evals.config.shape import rope_of, shape_from_model

            method.check_shape({**asdict(shape_from_model(container["model"])), **rope_of(container["model"])})
    if backend.replays and not Path(cfg.backend.path).is_file():
        raise ValueError(f"backend.path: no such file: {cfg.backend.path}")
    return Checked(container, task, method, sampling, batch_size, int(gen["seed"]))


def _number(gen: dict[str, Any], key: str, kind: type) -> int | float:
    """``gen.<key>`` as an int or a float (:func:`evals.numbers.number`); anything else raises ``ValueError``
    naming the knob."""
    from evals.numbers import number

    return number(gen[key], f"gen.{key}", kind)


def _check_task_source(task: dict[str, Any]) -> None:
    """A given ``task.path`` is read with ``task.source=auto`` (the default) or ``path``: any other source would
    silently ignore it."""
    if task.get("path") not in (None, "") and "source" in task and task["source"] not in ("path", "auto"):
        raise ValueError(
            f"task.path: given ({task['path']}) but task.source={task['source']} would ignore it; "
            "pass task.source=path to read it, or drop task.path"
        )


def _check_family(container: dict[str, Any]) -> None:
    """A task with per-family prompt templates must have one for ``model.family``."""
    templates = container["task"].get("templates")
    family = container["model"].get("family")
    if isinstance(templates, dict) and family not in templates:
        raise ValueError(
            f"model.family: {family!r} has no prompt template in task {container['task']['name']} "
            f"(task.templates has: {', '.join(templates)})"
        )


def plan(cfg: DictConfig, run_dir: Path | None = None) -> RunPlan:
    """Check the config, read the task's items and fix the run's identity and directory (no weights load).

    ``run_dir`` given (``hydra.run.dir=DIR``): the run lives exactly there. Otherwise it lives under the readable
    ``run_dir`` of the config, in a ``fp-<fingerprint>`` folder, so two runs that differ anywhere never share one.
    """
    c = check(cfg)
    rows = planned = None
    items = c.task.load(cfg.task)
    if not items:
        raise ValueError("task: no items to evaluate (check task.limit and the filters)")
    container = c.container
    if not backend_traits(cfg.backend.name).loads_weights:
        weights = cfg.backend.name  # no weights run: the backend's input (file hash) is in the identity
    else:
        from evals.config.models import resolved_device, weights_identity

        weights = weights_identity(cfg.model)
        container = {**container, "model": {**container["model"], "device": resolved_device(cfg.model)}}
        rows, planned = _planned_rows(cfg, container["model"]["device"],
                                      lambda: prompt_lengths(cfg, c.task, items))
    identity = run_identity(container, c.method.knobs(), weights, items)
    fp = fingerprint(identity)
    generates = backend_traits(cfg.backend.name).loads_weights
    setup = grading_setup(c.task, cfg.task)
    run_dir = Path(run_dir) if run_dir is not None else Path(c.container["run_dir"]) / f"fp-{fp}"
    try:
        run_id = str(run_dir.resolve().relative_to(Path(c.container["out_root"]).resolve()))
    except ValueError:
        run_id = str(run_dir)
    return RunPlan(
        run_dir=run_dir,
        run_id=run_id,
        task=c.task,
        method=c.method,
        sampling=c.sampling,
        batch_size=c.batch_size,
        seed=c.seed,
        items=items,
        weights=weights,
        identity=identity,
        fingerprint=fp,
        rows=rows,
        generation_id=generation_id(c.task) if generates else None,
        grading_id=grading_id(c.task, setup),
        grading_setup=setup,
        cache_root=cache_dir(c.container["out_root"]) if generates and cfg.get("sample_cache", True) else None,
        planned_bytes=planned,
    )


def _planned_rows(cfg: DictConfig, device: str, measure: Callable[[], tuple[list[int], int]] | None = None
                  ) -> tuple[int | None, int | None]:
    """On CUDA, before any weights load: refuse (one line naming the job and its need) a job whose peak does not fit
    ``plan.memory_gib`` or the memory free on the device (``torch.cuda.mem_get_info``), and resolve ``gen.rows=auto``
    to the most rows that fit (:func:`evals.plan.job.choose_rows`, the model ``python -m evals.plan`` prints). A task
    without a ``plan:`` block is planned from its items' prompts, counted by ``measure`` (the tokenizer alone:
    :mod:`evals.plan.measured`). Returns ``(rows, planned peak bytes at those rows)``; elsewhere ``(None, None)``:
    the backend's own default."""
    if not str(device).startswith("cuda"):
        return None, None
    from evals.plan.job import DEFAULT_MEMORY_GIB, Job, choose_rows, job_from_config, peak_bytes
    from evals.plan.measured import plan_block
    from snapstream_core.memory import device_usable_bytes

    target: Any = cfg
    if not cfg.task.get("plan") and measure is not None:
        lengths, new = measure()
        container = OmegaConf.to_container(cfg, resolve=True)
        container["task"]["plan"] = plan_block(lengths)
        container["gen"]["max_new_tokens"] = max(int(container["gen"]["max_new_tokens"]), new)
        target = job_from_config(container)
        log.info("planner: task %s has no plan block: planned from its %d items' prompts (longest %d tokens)",
                 cfg.task.name, len(lengths), max(lengths))
    import torch

    usable = device_usable_bytes(device) if torch.cuda.is_available() else None
    job = target if isinstance(target, Job) else job_from_config(target)
    rows = choose_rows(job, usable=usable)
    log.info("planner: gen.rows=%s -> %d decode rows within plan.memory_gib=%s%s", cfg.gen.get("rows", "auto"), rows,
             cfg.get("plan", {}).get("memory_gib", DEFAULT_MEMORY_GIB),
             "" if usable is None else f" and {usable / 2**30:.1f} GiB free on {device}")
    return rows, peak_bytes(job, rows)


def run(cfg: DictConfig, run_dir: Path | None = None) -> Path:
    """Run (or resume) one configuration; returns its run directory.

    The run holds the directory's lock for its whole life: a second job for the same run waits, then resumes."""
    p = plan(cfg, run_dir)
    replay = None
    if backend_traits(cfg.backend.name).replays:  # cheap to build: its input is checked before the run starts
        replay = make_backend(cfg, p.method, p.sampling)
        replay.check_matches([str(i.item_id) for i in p.items], model=cfg.model.name)
    p.run_dir.mkdir(parents=True, exist_ok=True)
    refuse_symlinks(p.run_dir)
    with run_lock(p.run_dir):
        try:
            if cfg.overwrite:
                clear_results(p.run_dir)
            check_resumable(p.run_dir, p.fingerprint, p.identity)
        except Exception:
            remove_if_empty(p.run_dir)
            raise
        if _complete(p):  # nothing left to do: no backend is built, no weights load, the record is left as it is
            log.info("nothing to do: %s is complete (overwrite=true starts afresh)", p.run_dir)
            show_headline(p.run_dir)
            return p.run_dir
        write_hydra_files(p.run_dir, cfg)  # accepted, with work to do: only now is the job's record written
        return _run_locked(cfg, p, replay)


def _complete(p: RunPlan) -> bool:
    """Whether the run directory already holds this identity's finished results (``meta.json`` complete)."""
    meta = read_meta(p.run_dir / META) or {}
    if not (meta.get("status") == "complete" and meta.get("fingerprint") == p.fingerprint
            and meta.get("code") == _code(p)  # other code: resumed under this code (evals.execute.regrade)
            and (p.run_dir / SUMMARY).is_file() and (p.run_dir / SAMPLES).is_file()):
        return False
    with open(p.run_dir / SAMPLES, "rb") as fh:  # rows lost since (a file cut by hand or restored): resume them
        return sum(1 for line in fh if line.strip()) == meta.get("n_rows")


def _code(p: RunPlan) -> dict[str, Any]:
    """The identities of the code that generates and grades this run's rows (``meta.json``'s ``code``)."""
    return {"generation_id": p.generation_id, "grading_id": p.grading_id, "grading_setup": p.grading_setup}


def _protocol(task, task_cfg) -> str | None:
    """The grading protocol of the run (``task.protocol_name``), for ``meta.json``; None for a task with one way."""
    name = hook(task, "protocol_name")
    return name(task_cfg) if name is not None else None


def _run_locked(cfg: DictConfig, p: RunPlan, replay) -> Path:
    meta = {
        "status": "running",
        "fingerprint": p.fingerprint,
        "identity": p.identity,
        "run_id": p.run_id,
        "weights": p.weights,
        "data_sha256": p.identity["task"]["data_sha256"],
        "data_revision": cfg.task.get("revision"),
        "protocol": _protocol(p.task, cfg.task),
        "code": _code(p),
        "sample_cache": None if p.cache_root is None else str(p.cache_root),
        "started": now(),
        "versions": versions(),
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "device": device_info(torch_info=backend_traits(cfg.backend.name).loads_weights),
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    (p.run_dir / RESULTS).unlink(missing_ok=True)  # a headline of earlier rows never stands beside a running run
    write_atomic(p.run_dir / META, json.dumps(meta, indent=2, default=str))
    write_atomic(p.run_dir / "resolved_config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    meta.update(_generate_and_score(cfg, p, p.items, replay))
    from evals.summary import summarize  # numpy + pandas: not needed to check a config

    rows = read_rows(p.run_dir / SAMPLES, p.fingerprint)
    df = tidy(rows)
    write_atomic(p.run_dir / SAMPLES_CSV, df.to_csv(index=False))
    summary = summarize(p.task, df, cfg, p.method)
    write_atomic(p.run_dir / SUMMARY, summary.to_csv(index=False))
    meta.update(status="complete", finished=now(), n_rows=len(rows), n_items=len(p.items))
    write_atomic(p.run_dir / META, json.dumps(meta, indent=2, default=str))
    log.info("run complete: %s (%d rows)", p.run_dir, len(rows))
    show_headline(p.run_dir)
    return p.run_dir


def _generate_and_score(cfg: DictConfig, p: RunPlan, items: list, replay=None) -> dict[str, Any]:
    """Generate and score what is missing, writing each sample's row as soon as it is scored; returns what the
    backend reports for ``meta.json``."""
    samples_path = p.run_dir / SAMPLES
    resumed = read_rows(samples_path, p.fingerprint)  # every resumed row is this configuration's
    done = done_keys(refresh_resumed(cfg, p, samples_path, resumed))  # under this code (evals/execute/regrade.py)
    generates = backend_traits(cfg.backend.name).loads_weights
    if generates and (copied := _copy_if_same(cfg, p, items, done)) is not None:
        return copied
    backend = _backend(cfg, p, replay)
    reused = _reuse_cached(cfg, p, backend, items, done) if not cfg.overwrite else 0
    if reused and not _missing(items, lambda item_id: range(p.sampling.n), done):
        return {"cached_rows": reused}  # every sample was in the cache: the wrapped backend is never built
    work = _pending_work(backend, p, items, done)
    if done:
        log.info("resuming %s: %d rows already there, %d items to go", p.run_dir, len(done), len(work))
    prompts = PromptStore(p.run_dir / PROMPTS)
    total = sum(len(w.sample_idx) for w in work)
    if generates and total:
        from evals.execute.expected import announce

        announce(backend, total, int(cfg.gen.max_new_tokens), p.rows if p.rows is not None else cfg.gen.get("rows"))
    clock = GenClock(rows=p.rows if p.rows is not None else cfg.gen.get("rows"), measured=generates)
    with RowWriter(samples_path) as writer, _Progress(cfg, p, total) as progress:
        for ended in clock.timed(_produce(cfg, p, backend, work, prompts)):
            for outcome in _score(cfg, p, ended):
                row = _row(cfg, p, outcome)
                writer.write(row)
                backend.keep(outcome.request.item, row, prompts.known.get(row["prompt_hash"]))
            progress.update(ended)
    info = backend.meta()
    info = {**info, **clock.meta(info)}
    return {**info, "cached_rows": reused} if reused else info


def _backend(cfg: DictConfig, p: RunPlan, replay: Backend | None) -> Backend:
    """The run's backend: ``replay`` (built to check its input before the run), else the configured one; in front of
    the sample cache when the run uses one (:class:`~evals.execute.backends.cached.CachingBackend`, which builds it at
    first use)."""
    if replay is not None:
        return replay

    def build() -> Backend:
        return make_backend(cfg, p.method, p.sampling, rows=p.rows, planned_bytes=p.planned_bytes)

    if p.cache_root is not None:
        cache = SampleCache.open(p.cache_root, sample_key_base(p.identity, p.generation_id, p.grading_setup))
        if cache is not None:
            return CachingBackend(build, cache)
    return build()


def _reuse_cached(cfg: DictConfig, p: RunPlan, backend: Backend, items: list, done: set[tuple[str, int]]) -> int:
    """Write the rows of the missing samples the backend already holds (:mod:`evals.execute.sample_cache`),
    adding their keys to ``done``; returns how many."""
    pending = _missing(items, lambda item_id: range(p.sampling.n), done)
    found = [f for f in backend.cached((w.item, w.sample_idx) for w in pending)
             if generated_here(f[1], p.generation_id)]
    if not found:
        return 0
    PromptStore(p.run_dir / PROMPTS).add([prompt for _, row, prompt in found if row.get("prompt_hash") is not None])
    rows = regrade(cfg, p, [(item, row) for item, row, _ in found])
    with RowWriter(p.run_dir / SAMPLES) as writer:
        for (item, stored, _), row in zip(found, rows):
            writer.write(reused_row(row, p.run_id, p.fingerprint))
            done.add((str(row["item_id"]), row["sample_idx"]))
            if row is not stored:  # re-graded: later runs find the new verdict
                backend.keep(item, row, None)
    log.info("%s: %d of %d missing samples reused from the sample cache %s (sample_cache=false: generate them)",
             p.run_id, len(found), sum(len(w.sample_idx) for w in pending), p.cache_root)
    return len(found)


def _copy_if_same(cfg: DictConfig, p: RunPlan, items: list, done: set[tuple[str, int]]) -> dict[str, Any] | None:
    """When the method keeps every token of every pending item and the full-cache run is complete, write its rows as
    this run's (:mod:`evals.execute.alias`) and return ``meta.json``'s ``same_as``; else None (generate as usual)."""
    from evals.execute.alias import copy_rows, find_source

    pending = _missing(items, lambda item_id: range(p.sampling.n), done)  # a generating backend: samples 0..n-1
    source = find_source(cfg, p, [(w.item, w.sample_idx) for w in pending])
    if source is None:
        return None
    PromptStore(p.run_dir / PROMPTS).add(source.prompts)
    by_id = {str(item.item_id): item for item in items}
    rows = regrade(cfg, p, [(by_id[str(row["item_id"])], row) for row in copy_rows(p, source)])
    with RowWriter(p.run_dir / SAMPLES) as writer:
        for row in rows:
            writer.write(row)
    return {"same_as": str(source.run_dir)}


@dataclass(frozen=True)
class Work:
    """Samples ``sample_idx`` of ``item`` still missing from ``samples.jsonl``."""

    item: Any
    sample_idx: tuple[int, ...]


@dataclass(frozen=True)
class Outcome:
    """One finished, scored sample: what the row of ``samples.jsonl`` is made of."""

    request: Request
    sample: Sample
    thinking_closed: bool
    scored: dict[str, Any]


def _pending_work(backend, p: RunPlan, items: list, done: set[tuple[str, int]]) -> list[Work]:
    """The (item, samples) pairs a resume still has to produce, in item order."""
    work = _missing(items, lambda item_id: backend.samples_for(item_id, p.sampling.n), done)
    backend.report_missing(len(items))
    return work


def _missing(items: list, wanted: Callable[[str], Iterable[int]], done: set[tuple[str, int]]) -> list[Work]:
    """For each item, the sample indices of ``wanted(item_id)`` not in ``done``; items with none left out."""
    work = []
    for item in items:
        key = str(item.item_id)
        missing = tuple(i for i in wanted(key) if (key, i) not in done)
        if missing:
            work.append(Work(item, missing))
    return work


def _produce(cfg: DictConfig, p: RunPlan, backend, work: list[Work], prompts: PromptStore
             ) -> Iterator[list[tuple[Request, Sample]]]:
    """Finished samples as ``(request, sample)`` lists: streamed as they end from a backend that can (requests are
    built lazily, so the prompts of items not reached yet are not rendered), else one ``generate`` per chunk of
    ``gen.batch_size`` requests. Tasks with a second call (``followup``) run it on each chunk's samples."""
    followup = hook(p.task, "followup") is not None and backend.supports_followup

    def requests(chunk: Iterable[Work]) -> Iterator[Request]:
        return (_request(cfg, p, backend, prompts, w) for w in chunk)

    if backend.streams and not followup:
        yield from backend.stream(requests(work))
        return
    for chunk in _batches(work, backend.batch_size or p.batch_size):
        reqs = list(requests(chunk))
        outputs = backend.generate(reqs)
        if followup:
            _followups(cfg, p, backend, reqs, outputs)
        yield [(req, s) for req, samples in zip(reqs, outputs) for s in samples]


def _score(cfg: DictConfig, p: RunPlan, ended: list[tuple[Request, Sample]]) -> list[Outcome]:
    """Split each completion at the thinking block and grade the answers (one ``score_all`` call for the list)."""
    thinking = bool(cfg.model.thinking)
    parts = [answer_part(p.task, s.completion, thinking, cfg.task) for _, s in ended]
    scores = score_all(p.task, [(req.item, text) for (req, _), (text, _) in zip(ended, parts)], cfg.task)
    return [Outcome(req, s, closed, scored) for (req, s), (_, closed), scored in zip(ended, parts, scores)]


class _Progress:
    """The progress bar (samples) and the ``log_every`` log line (items whose last missing sample was written)."""

    def __init__(self, cfg: DictConfig, p: RunPlan, total: int):
        self.bar = tqdm(total=total, desc=f"{cfg.task.name}/{cfg.compression.tag}", unit="sample",
                        dynamic_ncols=True)
        self.every = int(cfg.get("log_every") or 0)
        self.run_id, self.tokens, self.items, self.start = p.run_id, 0, 0, time.perf_counter()
        self.left: dict[int, int] = {}

    def update(self, ended: list[tuple[Request, Sample]]) -> None:
        for req, s in ended:
            self.tokens += s.gen_tokens or 0
            left = self.left.setdefault(id(req), len(req.sample_idx)) - 1
            self.left[id(req)] = left
            if left == 0:
                del self.left[id(req)]
                self.items += 1
                if self.every and self.items % self.every == 0:
                    log.info("%s: %d items done, %s gen tok/s", self.run_id, self.items, rate_text(self.rate()))
        self.bar.update(len(ended))
        self.bar.set_postfix(tok_s=f"{self.rate():.1f}")

    def rate(self) -> float:
        return self.tokens / max(time.perf_counter() - self.start, 1e-9)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()


def _followups(cfg: DictConfig, p: RunPlan, backend, requests: list[Request], outputs: list[list]) -> None:
    """Second calls of multi-call protocols (LongBench-v2 CoT): each sample's answer call replaces its completion;
    the stages are kept under ``completions``, ``gen_tokens`` counts both calls, ``prompt_tokens`` is the first's."""
    for req, samples in zip(requests, outputs):
        for s in samples:
            nxt = p.task.followup(req.item, s.completion, cfg.model, cfg=cfg.task, tokenizer=backend.tokenizer)
            if nxt is None:
                continue
            prompt, max_new = nxt
            prompt = prompt if isinstance(prompt, Prompt) else Prompt(prompt)
            (second,) = backend.generate([Request(req.item, prompt, (s.sample_idx,), max_new_tokens=max_new)])[0]
            s.stages = [s.completion, second.completion]
            s.completion = second.completion
            s.gen_tokens = (s.gen_tokens or 0) + (second.gen_tokens or 0)
            s.finish_reason = second.finish_reason
            s.latency_s = (s.latency_s or 0) + (second.latency_s or 0)


def _batches(work: list[Work], size: int) -> Iterator[list[Work]]:
    """Consecutive chunks whose requests ask for the same number of samples."""
    batch: list[Work] = []
    for entry in work:
        if batch and (len(batch) == size or len(entry.sample_idx) != len(batch[0].sample_idx)):
            yield batch
            batch = []
        batch.append(entry)
    if batch:
        yield batch


def _request(cfg: DictConfig, p: RunPlan, backend, prompts: PromptStore, w: Work) -> Request:
    """The task's prompt for ``w`` (none for a backend that needs none), stored in ``prompts.jsonl.gz`` exactly as
    the backend will send it."""
    if not backend.needs_prompts:
        return Request(item=w.item, prompt=None, sample_idx=w.sample_idx)
    prompt = p.task.prompt(w.item, cfg.model, cfg=cfg.task, tokenizer=backend.tokenizer)
    if not isinstance(prompt, Prompt):
        prompt = Prompt(prompt)
    record = backend.prompt_record(prompt)
    (phash,) = prompts.add([record])
    return Request(item=w.item, prompt=prompt, sample_idx=w.sample_idx, prompt_hash=phash)


def _row(cfg: DictConfig, p: RunPlan, o: Outcome) -> dict[str, Any]:
    """The ``samples.jsonl`` row of one outcome (docs/architecture.md, "Result rows")."""
    req, s = o.request, o.sample
    knobs = p.method.knobs()
    row: dict[str, Any] = {
        "run_id": p.run_id,
        "fingerprint": p.fingerprint,
        "model": cfg.model.name,
        "weights": p.weights,
        "task": cfg.task.name,
        "item_id": str(req.item.item_id),
        "sample_idx": s.sample_idx,
        "method": p.method.method,
        **{k: knobs.get(k) for k in knob_names()},
        "seed": p.seed,
        "prompt_tokens": s.prompt_tokens,
        "truncated": bool(req.prompt.truncated) if req.prompt is not None else None,
        "gen_tokens": s.gen_tokens,
        "finish_reason": s.finish_reason,
        "thinking_closed": o.thinking_closed,
        "kv_tokens_peak": s.kv.get("kv_tokens_peak"),
        "kv_bytes_peak": s.kv.get("kv_bytes_peak"),
        "latency_s": s.latency_s,
        "prompt_hash": req.prompt_hash,
        "generation_id": p.generation_id,
        "generation_commit": commit() if p.generation_id is not None else None,
        "grading_id": p.grading_id,
        **row_geometry(p.method, s.prompt_tokens, s.gen_tokens),  # compressed, kv_tokens_mean
    }
    row.update({k: v for k, v in {**s.kv, **s.measured}.items() if k not in row})
    row.update({"prediction": None, "answer": None, "correct": None})
    row.update(o.scored)
    row.update({k: v for k, v in req.item.breakdown.items() if k not in row})
    row["completion"] = s.completion
    if s.stages:
        row["completions"] = s.stages
    return row
