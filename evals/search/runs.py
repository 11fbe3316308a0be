"""What the search composes for each budget: the overrides of a job, whether a job can be searched at all, and the
budget knob it sets (the jobs then run as ordinary runs through ``evals.execute.loop.run``; each is measured against the
full cache by :mod:`evals.report.search_measure`)."""

from __future__ import annotations

from snapstream_core.methods import METHODS
from tasks import get_task
from tasks.protocol import hook

STORAGE_KNOBS = ("kv_dtype", "kv_scale")  # CompressionMethod's shared storage knobs


def with_compression(overrides: list[str], name: str) -> list[str]:
    """``overrides`` with the compression group set to ``name`` (replacing the given one)."""
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != "compression"] + [f"compression={name}"]


def in_model_dtype(overrides: list[str]) -> list[str]:
    """``overrides`` with K/V stored in the model's dtype: the storage knobs given dropped and set last to their
    defaults (``kv_dtype=auto``, ``kv_scale=null``), which also undoes an experiment that sets them."""
    keep = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in {f"compression.{k}" for k in STORAGE_KNOBS}]
    return [*keep, "compression.kv_dtype=auto", "compression.kv_scale=null"]


def full_cache_overrides(overrides: list[str]) -> list[str]:
    """The reference of a ``search.reference=full_cache`` search: ``compression=none`` in the model's dtype (never
    the full cache stored in FP8, whatever the job's storage)."""
    return in_model_dtype(with_compression(overrides, "none"))


def check_storage_search(method, reference: str) -> None:
    """One line (``ValueError``) for ``search.reference=storage`` on a job it cannot pair: a job in the model's
    dtype, or a method whose quantized format is its own (KIVI: its run in the model's dtype is another method)."""
    fmt = method.kv_format
    if reference != "storage":
        return
    if not fmt.quantized:
        raise ValueError("search.reference: storage compares a run stored quantized with the same run in the model's "
                         "dtype; give compression.kv_dtype=fp8_e4m3 (or search.reference=full_cache)")
    if method.kv_dtype == "auto":
        raise ValueError(f"search.reference: storage pairs compression.kv_dtype with the model's dtype; "
                         f"{method.method} stores K/V as {fmt.label} itself (no run of it in the model's dtype): "
                         "use search.reference=full_cache")


def check_searchable(method: str, task_module: str, task_name: str, storage: bool = False) -> None:
    """One line (``ValueError``) for a job the search cannot run: no compression method (``storage``: the full
    cache stored quantized against the full cache in the model's dtype is one test, no budget), a method without a
    budget, a task without a paired headline."""
    if method == "none" and not storage:
        raise ValueError("compression: the search needs a compression method (compression=snapkv, snapstream, "
                         "streaming_llm, ...), got none (the full cache is the reference)")
    cls = METHODS.get(method)
    if method != "none" and (cls is None or cls.budget_knob not in cls.field_names()):
        raise ValueError(f"compression={method}: has no budget to search over")
    if hook(get_task(task_module), "PRIMARY_METRIC") is None:
        named = f"task={task_module}" + (f" ({task_name})" if task_module != task_name else "")
        raise ValueError(f"{named}: no paired headline (its headline is not a mean of per-item scores "
                         "declared by PRIMARY_METRIC), so a budget cannot be tested against the full cache")


def budget_knob(method: str) -> str:
    """``compression.<knob>`` the search sets for a job of ``method``: the method's ``budget_knob`` (``prompt_budget``,
    or ``budget`` for a whole-cache method)."""
    cls = METHODS.get(method)
    return f"compression.{cls.budget_knob if cls is not None else 'prompt_budget'}"
