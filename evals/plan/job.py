"""One job of a sweep as the planner sees it, built from its resolved config (no data, no weights), and the three
functions the runner calls before it loads weights: :func:`choose_rows`, :func:`check_fits`, :func:`alias_of`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from evals.config.shape import ModelShape, shape_from_model
from snapstream_core.memory import (
    GIB,
    PREFILL_CHUNK,
    budget_bytes,
    card_usable_bytes,
    job_terms,
)
from snapstream_core.memory import max_rows as model_max_rows

DEFAULT_MEMORY_GIB = 80.0


@dataclass(frozen=True)
class Job:
    """What one run will hold and do. Token counts are per sequence; prompts are cut as the task cuts them."""

    model: str
    family: str
    task: str
    compression: str  # the method
    knobs: tuple[tuple[str, Any], ...]  # the method's effective knobs (``method.knobs()``)
    compression_tag: str
    n_items: int
    n_samples: int
    max_new_tokens: int
    prompt_groups: tuple[tuple[float, int], ...]  # (share of the items, mean prompt tokens), after the cut
    max_prompt_tokens: int  # the longest prompt, after the cut
    gen_fraction: float  # mean generated tokens / max_new_tokens
    shape: ModelShape
    kept: int  # prompt tokens a compressed layer keeps (of the longest prompt)
    slots: int  # KV slots of one decode row (fixed for the whole job: one compiled graph)
    prefill_slots: int  # KV slots a compressed layer holds after its selection at prefill (the ring included)
    window: int  # query rows the prefill's selection scores with (0: no SnapKV scoring)
    score_buffers: tuple[int, int]  # the scorer's own fp32 buffers at prefill (CompressionMethod.score_buffers)
    moments: bool  # the selection reads running query moments (CompressionMethod.query_moments)
    rows_request: int | None  # gen.rows: None = auto (the most that fit)
    memory_gib: float  # plan.memory_gib
    run_dir: str
    out_root: str
    row_memory: tuple[tuple[str, int], ...] = ()  # method.row_memory(T, slots): a decode-time method's extra state

    @property
    def total_samples(self) -> int:
        return self.n_items * self.n_samples

    @property
    def prompt_budget(self) -> int | None:
        """The method's budget: ``prompt_budget``, or a decode-time method's whole-cache ``budget``."""
        knobs = dict(self.knobs)
        return knobs.get("prompt_budget", knobs.get("budget"))

    @property
    def label(self) -> str:
        return f"{self.model} {self.task} {self.compression_tag} n={self.n_samples}"


def _container(cfg: Any) -> dict[str, Any]:
    if isinstance(cfg, Mapping) and not hasattr(cfg, "_metadata"):
        return dict(cfg)
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)


def _method(compression: Mapping[str, Any]):
    from snapstream_core.api import compression_from_config  # the dataclasses; no torch at plan time

    return compression_from_config(dict(compression))


def _geometry(method, T: int, G: int) -> dict[str, int]:
    """kept, slots, prefill_slots, window, score_buffers, moments and row_memory of the longest prompt ``T`` with
    ``G`` new tokens, as the method gives them (a method owns its geometry)."""
    slots = method.slots(T, G)
    return {"kept": method.kept(T), "slots": slots, "prefill_slots": method.prefill_slots(T),
            "window": method.query_rows(T), "score_buffers": method.score_buffers(T),
            "moments": method.query_moments(T) is not None,
            "row_memory": tuple(method.row_memory(T, slots).items())}


def job_from_config(cfg: Any, max_prompt_tokens: int | None = None) -> Job:
    """The job of one resolved run config (a composed ``DictConfig`` or its container). ``max_prompt_tokens``: the
    longest prompt when known (the runner, from its items); else the task's ``plan`` block gives it."""
    c = _container(cfg)
    model, task, gen = c["model"], c["task"], c["gen"]
    plan = task.get("plan")
    if not plan:
        raise ValueError(f"task.plan: task {task.get('name')} has no plan block (n_items, prompt_groups, "
                         "max_prompt_tokens, gen_fraction) for the planner")
    shape = shape_from_model(model)
    G = int(gen["max_new_tokens"])
    cut = task.get("max_len") or model.get("max_context") or shape.max_positions - G
    extra = int(plan.get("prompt_overhead", 0))
    groups = [(int(g["items"]), min(int(g["tokens"]) + extra, cut)) for g in plan["prompt_groups"]]
    n_group = sum(n for n, _ in groups)
    T = min(int(plan["max_prompt_tokens"]) + extra, cut) if max_prompt_tokens is None else int(max_prompt_tokens)
    n_items = int(plan["n_items"])
    if task.get("limit") is not None:
        n_items = min(n_items, int(task["limit"]))
    fractions = plan.get("gen_fraction") or {}
    fraction = float(fractions.get(model.get("family"), fractions.get("default", 1.0)))
    method = _method(c["compression"])
    rows = gen.get("rows", "auto")
    if rows not in (None, "auto") and (not isinstance(rows, int) or isinstance(rows, bool) or rows < 1):
        raise ValueError(f"gen.rows: must be auto or an integer >= 1, got {rows!r}")
    return Job(
        model=str(model["name"]),
        family=str(model.get("family")),
        task=str(task["name"]),
        compression=method.method,
        knobs=tuple(method.knobs().items()),
        compression_tag=str(c["compression"].get("tag", method.method)),
        n_items=n_items,
        n_samples=int(gen["n_samples"]),
        max_new_tokens=G,
        prompt_groups=tuple((n / n_group, t) for n, t in groups),
        max_prompt_tokens=T,
        gen_fraction=fraction,
        shape=shape,
        **_geometry(method, T, G),
        rows_request=None if rows in (None, "auto") else rows,
        memory_gib=float((c.get("plan") or {}).get("memory_gib", DEFAULT_MEMORY_GIB)),
        run_dir=str(c.get("run_dir", "")),
        out_root=str(c.get("out_root", "")),
    )


def with_prompt(job: Job, max_prompt_tokens: int) -> Job:
    """The same job for prompts of at most ``max_prompt_tokens`` tokens (measured by the runner on its items)."""
    geometry = _geometry(_method(dict(job.knobs)), max_prompt_tokens, job.max_new_tokens)
    return replace(job, max_prompt_tokens=max_prompt_tokens, **geometry)


def _as_job(cfg_or_job: Any, max_prompt_tokens: int | None) -> Job:
    if isinstance(cfg_or_job, Job):
        return cfg_or_job if max_prompt_tokens is None else with_prompt(cfg_or_job, max_prompt_tokens)
    return job_from_config(cfg_or_job, max_prompt_tokens)


def job_budget(job: Job, memory_gib: float | None = None, usable: float | None = None) -> float:
    """Bytes the job's peak may reach: what a card of ``plan.memory_gib`` GB can allocate after its CUDA context
    (80 -> ~79.1 GiB), at most ``usable`` (the free memory read from the device, on CUDA), less the margin for graph
    pools and fragmentation (:mod:`snapstream_core.memory`)."""
    card = card_usable_bytes(job.memory_gib if memory_gib is None else memory_gib)
    return budget_bytes(card if usable is None else min(card, usable))


def peak_terms(job: Job, rows: int) -> dict[str, int]:
    """The job's peak with ``rows`` decode rows, by term (weights, prefill, rows)."""
    return job_terms(job.shape.arch, job.shape.weight_bytes, rows, **_model_args(job))


def peak_bytes(job: Job, rows: int) -> int:
    """The job's peak with ``rows`` decode rows (what ``torch.cuda.max_memory_allocated`` should read)."""
    return sum(peak_terms(job, rows).values())


def _model_args(job: Job) -> dict[str, Any]:
    return {"slots": job.slots, "max_new": job.max_new_tokens, "T": job.max_prompt_tokens,
            "prefill_slots": job.prefill_slots, "window": job.window, "chunk": PREFILL_CHUNK,
            "score_buffers": job.score_buffers, "moments": job.moments, **dict(job.row_memory)}


def max_rows(job: Job, memory_gib: float | None = None, usable: float | None = None) -> int:
    """The most decode rows that fit the budget, at most the job's samples (0: not even one fits)."""
    fit = model_max_rows(job.shape.arch, job.shape.weight_bytes, job_budget(job, memory_gib, usable),
                         **_model_args(job))
    return min(fit, job.total_samples)


def check_fits(cfg_or_job: Any, *, max_prompt_tokens: int | None = None, memory_gib: float | None = None,
               usable: float | None = None) -> None:
    """Raise one-line ``ValueError`` naming the job and its need when it cannot run in the budget (at one row,
    or at the requested ``gen.rows``). ``usable``: bytes free on the device (on CUDA), else the card's."""
    job = _as_job(cfg_or_job, max_prompt_tokens)
    budget = job.memory_gib if memory_gib is None else memory_gib
    allowed = job_budget(job, memory_gib, usable)
    rows = job.rows_request or 1
    need = peak_bytes(job, rows)
    if need > allowed:
        key = "gen.rows" if job.rows_request else "plan.memory_gib"
        where = f"plan.memory_gib={budget:g}"
        if usable is not None:
            where += f", {usable / GIB:.1f} GiB free on the device"
        raise ValueError(
            f"{key}: {job.label} needs {need / GIB:.1f} GiB at {rows} row(s) of {job.slots} slots "
            f"(prompt {job.max_prompt_tokens} tokens, weights {job.shape.weight_bytes / GIB:.1f} GiB) > "
            f"{allowed / GIB:.1f} GiB allowed of {where}"
        )


def choose_rows(cfg_or_job: Any, *, max_prompt_tokens: int | None = None, memory_gib: float | None = None,
                usable: float | None = None) -> int:
    """``gen.rows`` for a job: the requested integer, or (``auto``) the most rows that fit the budget, capped at
    the job's samples. Raises like :func:`check_fits` when it cannot run."""
    job = _as_job(cfg_or_job, max_prompt_tokens)
    check_fits(job, memory_gib=memory_gib, usable=usable)
    if job.rows_request is not None:
        return min(job.rows_request, job.total_samples)
    return max(1, max_rows(job, memory_gib, usable))


def alias_of(job: Job, max_prompt_tokens: int) -> Job | None:
    """The full-cache job whose rows this job's rows equal by construction, or None.

    A method whose budget (and ring) holds every prompt of at most ``max_prompt_tokens`` tokens and every new
    token keeps everything, and is then token-identical to the full cache (docs/architecture.md, contract 1):
    SnapKV with ``prompt_budget`` >= the longest prompt, SnapStream with that and ``recent`` >= max_new_tokens,
    StreamingLLM with ``sinks + recent`` >= prompt + new tokens; with ``positions=original`` only
    (:meth:`~snapstream_core.methods.base.CompressionMethod.keeps_all`, the rule the runner copies rows by,
    evals/execute/alias.py). The alias's ``run_dir`` is the job's with the
    compression's directory name replaced by ``none``'s (the planner matches it against the sweep's own jobs).
    """
    method = _method(dict(job.knobs))
    if not method.keeps_all(max_prompt_tokens, job.max_new_tokens):  # the full cache or in_cache: None too
        return None
    parts = job.run_dir.split("/")
    run_dir = "/".join("none" if p == job.compression_tag else p for p in parts) if job.run_dir else ""
    base = replace(job, compression="none", knobs=(("method", "none"),), compression_tag="none", run_dir=run_dir)
    return with_prompt(base, max_prompt_tokens)
