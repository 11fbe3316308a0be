"""The decode step: one model call over the engine's fixed slot rows, and the one wrapper that compiles it.

``decode_step`` writes each row's new token K/V at that row's slot, marks the slot visible in the per-layer
(L, R, H_kv, S) mask, and attends over the slots with that mask: no host synchronisation, no data-dependent Python.
The mask travels to the registered attention function as :data:`~snapstream_core.attention.SLOT_MASK_KWARG`, a
plugged-in decode attention as :data:`~snapstream_core.attention.SLOT_ATTENTION_KWARG` and, when the engine bounds
its reads, each row's filled length as :data:`~snapstream_core.attention.SLOT_FILL_KWARG`.

:class:`DecodeKernels` is the hook through which a caller plugs device-specific pieces into the step (the compile
backend, the decode attention, the rows' memory); the benchmark's CPU kernels (``bench/cpu_decode``) are its user.
:class:`Step` compiles the step when asked (``reduce-overhead``, i.e. CUDA graphs, on CUDA) and never falls back: a
compile or capture error stops the run with one line naming the stage and ``gen.compile=false`` as the way out, and
an out-of-memory error says what the engine holds against what the device has.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from snapstream_core.attention import (
    SLOT_ATTENTION_KWARG,
    SLOT_ATTN_SUM_KWARG,
    SLOT_FILL_KWARG,
    SLOT_MASK_KWARG,
    SLOT_QUERY_KWARG,
)

log = logging.getLogger(__name__)
GIB = 2**30


@dataclass(frozen=True)
class DecodeKernels:
    """Device-specific pieces plugged into the decode step; every field left None keeps the stock path.

    ``compile_backend``: a ``torch.compile`` backend used instead of ``"inductor"``.
    ``attention(query (R, H_kv, G, D), key, value (R, H_kv, S, D), visible (R, H_kv, S) bool, scale)
    -> (R, H_kv, G, D)``, or None to leave those tensors to SDPA (decided while tracing, from shapes and dtypes):
    the decode attention of the G query heads that share each KV head.
    ``zeros(shapes, dtype) -> list of zeroed tensors``: the memory of the rows' K/V on the CPU.
    ``prepare()``: called once before the step is first traced (e.g. to build an extension).
    """

    name: str
    compile_backend: Callable[..., Any] | None = None
    attention: Callable[..., torch.Tensor | None] | None = None
    zeros: Callable[[list[tuple[int, ...]], torch.dtype], list[torch.Tensor]] | None = None
    prepare: Callable[[], Any] | None = None


def resolve_compile(value: bool | str | None, device: torch.device | str) -> bool:
    """``gen.compile``: ``auto`` (or None) compiles on CUDA only, where CUDA graphs remove the host overhead that
    dominates decode; on CPU the inductor compile does not pay back at the sizes we run (bench/README.md)."""
    if value is None or value == "auto":
        return torch.device(device).type == "cuda"
    if isinstance(value, bool):
        return value
    raise ValueError(f"gen.compile: must be auto, true or false, got {value!r}")


def decode_step(model, cache, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                attention: Callable | None = None, filled: torch.Tensor | None = None) -> torch.Tensor:
    """One decode step of fixed shapes: tokens (R, 1) long at positions (R, 1), row r written at slot ``slots[r]``
    of ``cache`` (a :class:`~snapstream_core.engine.rows.RowCache` or a view of its rows) -> next-token logits
    (R, V) float32. ``attention``: the decode attention hook (None: SDPA); ``filled`` (R,) long: row r's highest
    written slot + 1 after this step's write, handed to ``attention`` to bound its reads (None: it reads all S)."""
    cache.write_slot = slots
    cache.mark_written()
    extra = {SLOT_MASK_KWARG: cache.visible}
    if cache.queries is not None:  # a decode-time method's query ring: row r writes at position % Q
        extra[SLOT_QUERY_KWARG] = (cache.queries, positions[:, 0] % cache.queries.shape[3])
    if cache.attn_sum is not None:  # H2O's running sum: each layer adds its step's attention weights
        extra[SLOT_ATTN_SUM_KWARG] = cache.attn_sum
    if attention is not None:
        extra[SLOT_ATTENTION_KWARG] = attention
        if filled is not None:
            extra[SLOT_FILL_KWARG] = filled
    out = model(
        input_ids=tokens,
        position_ids=positions,
        past_key_values=cache,
        attention_mask=cache.visible[0, :, :1, None, :],  # 4D: transformers builds no mask; ours is per layer
        use_cache=True,
        **extra,
    )
    return out.logits[:, -1, :].float()


def one_line(exc: BaseException) -> str:
    """``Type: first line`` of an exception and of the error inside it (dynamo wraps a backend's error)."""
    parts = []
    while exc is not None and len(parts) < 3:
        text = str(exc).strip().splitlines()
        parts.append(f"{type(exc).__name__}: {text[0][:200] if text else ''}".rstrip(": "))
        exc = getattr(exc, "inner_exception", None) or exc.__cause__
    return " <- ".join(parts)


def memory_line(device: torch.device, held_bytes: int, planned_bytes: int | None) -> str:
    """What the engine holds (its rows), what was planned, and what the device has: for an out-of-memory message."""
    parts = [f"decode rows hold {held_bytes / GIB:.2f} GiB"]
    if planned_bytes is not None:
        parts.append(f"planned peak {planned_bytes / GIB:.2f} GiB")
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        parts.append(f"allocated {torch.cuda.memory_allocated(device) / GIB:.2f} GiB, "
                     f"free {free / GIB:.2f} of {total / GIB:.2f} GiB")
    return "; ".join(parts)


def is_oom(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or wraps, an out-of-memory error (the engine reports those with its memory line)."""
    for _ in range(4):
        if exc is None:
            return False
        if isinstance(exc, torch.OutOfMemoryError):
            return True
        exc = getattr(exc, "inner_exception", None) or exc.__cause__
    return False


class EngineError(RuntimeError):
    """A run stopped by the engine: one line naming the stage and the way out."""


class Step:
    """The decode step, compiled when asked (the one compile wrapper of the core).

    Calls to a compiled step are numbered: the first traces and compiles (stage ``compile``), the next two record
    the CUDA graph under ``reduce-overhead`` (stage ``capture``), later ones replay it (stage ``replay``).
    ``compiles`` counts the graphs Dynamo built during this step's calls (1 for a run whose shapes hold; a
    recompile, e.g. on a new shape, adds one)."""

    def __init__(self, compiled: bool, device_type: str, backend: str = "inductor", attention: Callable | None = None,
                 kernels: DecodeKernels | None = None):
        self.compiled = compiled
        self.attention = attention
        self.calls = 0
        self.compiles = 0
        if kernels is not None and kernels.attention is not None:
            self.attention = kernels.attention
        fn: Callable = decode_step
        if compiled:
            mode = "reduce-overhead" if device_type == "cuda" and backend == "inductor" else None
            if kernels is not None:
                if kernels.prepare is not None:
                    kernels.prepare()  # before tracing: the trace decides which attention the graph calls
                if kernels.compile_backend is not None and backend == "inductor":
                    backend, mode = kernels.compile_backend, None
            # dynamic=False: rows of another shape (a later run that does not fit) compile a graph of their own
            # shapes instead of turning on dynamic shapes, which would lose the fused flex-decoding kernel
            compiled_fn = torch.compile(decode_step, backend=backend, mode=mode, fullgraph=True, dynamic=False)
            # Guards on the model's modules checked by their dict tags, recursively (a Dynamo setting, off by
            # default, that falls back to the full check when a module's attributes change): fewer guard checks per
            # step on a model with thousands of them.
            fn = torch._dynamo.config.patch(use_recursive_dict_tags_for_guards=True)(compiled_fn)
        self.fn = fn

    def stage(self) -> str:
        if not self.compiled:
            return "decode step (eager)"
        return {1: "decode step (compile)", 2: "decode step (capture)", 3: "decode step (capture)"}.get(
            self.calls, "decode step (replay)")

    def __call__(self, model, cache, tokens, positions, slots, filled=None) -> torch.Tensor:
        self.calls += 1
        graphs = _graphs()
        try:
            return self.fn(model, cache, tokens, positions, slots, self.attention, filled)
        except Exception as exc:
            if not self.compiled or is_oom(exc):
                raise
            raise EngineError(f"gen.compile: {self.stage()} failed ({one_line(exc)}); "
                              "run with gen.compile=false to decode eager") from exc
        finally:
            if self.compiled:
                self.compiles += _graphs() - graphs


def _graphs() -> int:
    """Graphs Dynamo has compiled in this process (its ``unique_graphs`` counter)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]
