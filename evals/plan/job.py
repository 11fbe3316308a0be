"""One job of a sweep as the planner sees it, built from its checked :class:`~evals.config.spec.RunSpec` (no data,
no weights; the spec's method, built once), and the three functions the runner calls before it loads weights:
:func:`choose_rows` (the one rule for the decode rows on every device), :func:`check_fits`, :func:`alias_of`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from evals.config.defaults import DEFAULT_MEMORY_GIB
from evals.config.shape import ModelShape, shape_from_model
from snapstream_core.api import compression_from_config  # the dataclasses; no torch at plan time
from snapstream_core.memory import (
    GIB,
    PREFILL_CHUNK,
    SAMPLING_BYTES_PER_ENTRY,
    SAMPLING_TRAFFIC_MAX,
    budget_bytes,
    card_usable_bytes,
    job_terms,
    sampling_peak_per_entry,
    sampling_traffic_per_entry,
)
from snapstream_core.memory import max_rows as model_max_rows
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.methods.decode_base import DecodeMethod
from tasks.protocol import call_extent

if TYPE_CHECKING:  # the spec module reads OmegaConf; the planner imports without it
    from evals.config.spec import RunSpec
    from snapstream_core.sampling import SamplingConfig

__all__ = ["DEFAULT_MEMORY_GIB", "Job", "alias_of", "check_fits", "choose_rows", "job_of", "job_from_spec",
           "max_rows", "method_of", "peak_bytes", "peak_terms", "rows_without_planner", "with_prompt"]


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
    max_new_tokens: int  # of the widest call (a second call's included)
    prompt_groups: tuple[tuple[float, int], ...]  # (share of the items, mean prompt tokens), after the cut
    max_prompt_tokens: int  # the longest prompt, after the cut (a second call's bound included: call_extent)
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
    compact_scratch: int = 0  # method.compaction_scratch(arch, slots): a compaction's scoring, bytes per row
    sampling_peak: int = SAMPLING_BYTES_PER_ENTRY  # bytes per vocabulary entry a row's sampling allocates
    sampling_traffic: int = SAMPLING_TRAFFIC_MAX  # bytes per vocabulary entry a row's sampling reads and writes
    method: CompressionMethod | None = field(default=None, compare=False, repr=False)  # the run's, built once

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


def method_of(job: Job) -> CompressionMethod:
    """The job's method: the one it was built with, else (a job made by hand) one built from its knobs."""
    return job.method if job.method is not None else compression_from_config(dict(job.knobs))


def _geometry(method, T: int, G: int, shape: ModelShape) -> dict[str, int]:
    """kept, slots, prefill_slots, window, score_buffers, moments, row_memory and compact_scratch of the longest
    prompt ``T`` with ``G`` new tokens on a model of ``shape``, as the method gives them (a method owns its
    geometry)."""
    slots = method.slots(T, G)
    scratch = method.compaction_scratch(shape.arch, slots) if isinstance(method, DecodeMethod) else 0
    return {"kept": method.kept(T), "slots": slots, "prefill_slots": method.prefill_slots(T),
            "window": method.query_rows(T), "score_buffers": method.score_buffers(T),
            "moments": method.query_moments(T) is not None,
            "row_memory": tuple(method.row_memory(T, slots).items()), "compact_scratch": scratch}


def job_from_spec(spec: RunSpec, max_prompt_tokens: int | None = None, *, plan_block: Mapping[str, Any] | None = None,
                  max_new_tokens: int | None = None, tokenizer: Any = None) -> Job:
    """The job of one checked run, with the spec's method. ``max_prompt_tokens``: the longest prompt when known
    (the runner, from its items); else the task's ``plan`` block gives it. ``plan_block`` (with ``max_new_tokens``):
    a block measured from the items, for a task without one. A task with a second call (LongBench-v2 CoT) is
    planned at its bound on that call (:func:`tasks.protocol.call_extent`, the bound the runner sizes the decode
    rows with; ``tokenizer`` counts the task's template, None: a bound without it)."""
    task = spec.resolved["task"] if plan_block is None else {**spec.resolved["task"], "plan": dict(plan_block)}
    job = job_of(spec.resolved["model"], task, spec.method, tag=spec.compression_tag,
                 max_new_tokens=spec.gen.max_new_tokens if max_new_tokens is None else max_new_tokens,
                 n_samples=spec.gen.n_samples, rows_request=spec.gen.rows_request, memory_gib=spec.memory_gib,
                 run_dir=spec.run_dir, out_root=spec.out_root, max_prompt_tokens=max_prompt_tokens,
                 sampling=spec.sampling)
    T, G = call_extent(spec.task_module, job.max_prompt_tokens, job.max_new_tokens, spec.resolved["model"], task,
                       tokenizer)
    if (T, G) == (job.max_prompt_tokens, job.max_new_tokens):
        return job
    return with_prompt(replace(job, max_new_tokens=G), T)


def job_of(model: Mapping[str, Any], task: Mapping[str, Any], method: CompressionMethod, *, tag: str,
           max_new_tokens: int, n_samples: int, rows_request: int | None = None,
           memory_gib: float = DEFAULT_MEMORY_GIB, run_dir: str = "", out_root: str = "",
           max_prompt_tokens: int | None = None, sampling: SamplingConfig | None = None) -> Job:
    """The job of ``method`` on a model node (``shape`` or a known architecture) and a task node with a ``plan``
    block (:func:`job_from_spec` for a checked run; bench scripts give plain data). ``sampling``: the run's
    temperature, top-k and top-p (None: the most any settings need)."""
    plan = task.get("plan")
    if not plan:
        raise ValueError(f"task.plan: task {task.get('name')} has no plan block (n_items, prompt_groups, "
                         "max_prompt_tokens, gen_fraction) for the planner")
    shape = shape_from_model(model)
    G = int(max_new_tokens)
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
    return Job(
        model=str(model["name"]),
        family=str(model.get("family")),
        task=str(task["name"]),
        compression=method.method,
        knobs=tuple(method.knobs().items()),
        compression_tag=tag,
        n_items=n_items,
        n_samples=int(n_samples),
        max_new_tokens=G,
        prompt_groups=tuple((n / n_group, t) for n, t in groups),
        max_prompt_tokens=T,
        gen_fraction=fraction,
        shape=shape,
        **_geometry(method, T, G, shape),
        rows_request=rows_request,
        memory_gib=float(memory_gib),
        run_dir=str(run_dir),
        out_root=str(out_root),
        **_sampling_terms(sampling),
        method=method,
    )


def _sampling_terms(sampling: SamplingConfig | None) -> dict[str, int]:
    """The sampling's bytes per vocabulary entry (peak, traffic) for the run's settings (None: the most)."""
    if sampling is None:
        return {"sampling_peak": SAMPLING_BYTES_PER_ENTRY, "sampling_traffic": SAMPLING_TRAFFIC_MAX}
    knobs = (sampling.temperature, sampling.top_k, sampling.top_p)
    return {"sampling_peak": sampling_peak_per_entry(*knobs), "sampling_traffic": sampling_traffic_per_entry(*knobs)}


def with_prompt(job: Job, max_prompt_tokens: int) -> Job:
    """The same job for prompts of at most ``max_prompt_tokens`` tokens (measured by the runner on its items)."""
    geometry = _geometry(method_of(job), max_prompt_tokens, job.max_new_tokens, job.shape)
    return replace(job, max_prompt_tokens=max_prompt_tokens, **geometry)


def _at(job: Job, max_prompt_tokens: int | None) -> Job:
    return job if max_prompt_tokens is None else with_prompt(job, max_prompt_tokens)


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
            "score_buffers": job.score_buffers, "moments": job.moments, "compact_scratch": job.compact_scratch,
            "sampling": job.sampling_peak, "fmt": method_of(job).kv_format, **dict(job.row_memory)}


def max_rows(job: Job, memory_gib: float | None = None, usable: float | None = None) -> int:
    """The most decode rows that fit the budget, at most the job's samples (0: not even one fits)."""
    fit = model_max_rows(job.shape.arch, job.shape.weight_bytes, job_budget(job, memory_gib, usable),
                         **_model_args(job))
    return min(fit, job.total_samples)


def check_fits(job: Job, *, max_prompt_tokens: int | None = None, memory_gib: float | None = None,
               usable: float | None = None) -> None:
    """Raise one-line ``ValueError`` naming the job and its need when it cannot run in the budget (at one row,
    or at the requested ``gen.rows``). ``usable``: bytes free on the device (on CUDA), else the card's."""
    job = _at(job, max_prompt_tokens)
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


def choose_rows(job: Job, *, max_prompt_tokens: int | None = None, memory_gib: float | None = None,
                usable: float | None = None) -> int:
    """``gen.rows`` for a job on CUDA: the requested integer, or (``auto``) the most rows that fit the budget,
    capped at the job's samples. Raises like :func:`check_fits` when it cannot run."""
    job = _at(job, max_prompt_tokens)
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
    method = method_of(job)
    if not method.keeps_all(max_prompt_tokens, job.max_new_tokens):  # the full cache or in_cache: None too
        return None
    parts = job.run_dir.split("/")
    run_dir = "/".join("none" if p == job.compression_tag else p for p in parts) if job.run_dir else ""
    base = replace(job, compression="none", knobs=(("method", "none"),), compression_tag="none", run_dir=run_dir,
                   method=compression_from_config({"method": "none"}))
    return with_prompt(base, max_prompt_tokens)


def rows_without_planner(requested: int | None) -> int:
    """Decode rows where the planner does not size the run (not CUDA): the requested integer, else the engine's CPU
    floor ``MIN_CPU_ROWS`` (its forwards hold at least that many rows there anyway)."""
    from snapstream_core.engine.loop import MIN_CPU_ROWS  # lazy: the engine imports torch; planning does not

    return requested if requested is not None else MIN_CPU_ROWS
