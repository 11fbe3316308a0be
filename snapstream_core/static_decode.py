"""Static-shape decode: after the (eager, any-length) prefill, the compressed cache is copied into fixed-size slot
buffers, and one decode step is one graph of fixed shapes that ``torch.compile`` captures once per (batch, slots) and
replays (inductor on CPU; CUDA graphs through ``mode="reduce-overhead"`` on GPU).

A decode step writes the new token's K/V at a slot given as a (1,) tensor (``index_copy_``, as transformers'
``StaticCache`` does with ``cache_position``), marks that slot visible in a (L, B, H_kv, S) bool mask, and attends
over all S slots with that mask: no host synchronisation, no data-dependent Python. The slot of step t is known
before decoding starts: ``n_frozen + (filled + t) % ring`` for the ring methods (``snapstream``, ``streaming_llm``),
``n_kept + t`` for the appending ones (``none``, ``snapkv``, on a buffer of prompt + new-token slots).

Shapes: ring methods use ``prompt_budget + recent`` (``sinks + recent``) slots whatever the prompt length, so
prompts of different lengths replay the same graph; appending methods use ``n_kept + steps`` slots, a dimension
marked dynamic so that one graph serves every prompt length.

The core compiles the step with stock ``torch.compile``. A caller may plug device-specific pieces in through
:class:`DecodeKernels` (the compile backend, the decode attention, the slot buffers' memory); the benchmark's CPU
kernels (``bench/cpu_decode``) are the one user.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from snapstream_core.cache import CompressedCache

log = logging.getLogger(__name__)

# The attention functions read the per-layer slot mask from this keyword of the model call (transformers passes the
# model's extra keyword arguments down to the attention interface).
SLOT_MASK_KWARG = "snapstream_slot_mask"
# ... and, when a caller plugged one in (DecodeKernels.attention), the decode attention from this one.
SLOT_ATTENTION_KWARG = "snapstream_slot_attention"


@dataclass(frozen=True)
class DecodeKernels:
    """Device-specific pieces plugged into the compiled decode step; every field left None keeps the stock path.

    ``compile_backend``: a ``torch.compile`` backend used instead of ``"inductor"``.
    ``attention(query (B, H_kv, G, D), key, value (B, H_kv, S, D), visible (B, H_kv, S) bool, scale)
    -> (B, H_kv, G, D)``, or None to leave those tensors to SDPA (decided while tracing, from shapes and dtypes):
    the decode attention of the G query heads that share each KV head.
    ``zeros(shapes, dtype) -> list of zeroed tensors``: the memory of the slot buffers on the CPU.
    ``prepare()``: called once before the step is first traced (e.g. to build an extension).
    """

    name: str
    compile_backend: Callable[..., Any] | None = None
    attention: Callable[..., torch.Tensor | None] | None = None
    zeros: Callable[[list[tuple[int, ...]], torch.dtype], list[torch.Tensor]] | None = None
    prepare: Callable[[], Any] | None = None


def resolve_compile(value: bool | str | None, device: torch.device) -> bool:
    """``gen.compile``: ``auto`` (or None) compiles on CUDA only, where CUDA graphs remove the host overhead that
    dominates decode; on CPU the inductor compile does not pay back at the sizes we run (bench/README.md)."""
    if value is None or value == "auto":
        return torch.device(device).type == "cuda"
    if isinstance(value, bool):
        return value
    raise ValueError(f"gen.compile: must be auto, true or false, got {value!r}")


class _SlotLayer(CacheLayerMixin):
    """Fixed K/V storage (B, H_kv, S, D) of one layer; written only by :meth:`StaticSlotCache.update`."""

    is_compileable = True
    is_sliding = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.keys, self.values = keys, values
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:  # storage is given at construction
        pass

    def update(self, key_states, value_states, *args, **kwargs):
        raise RuntimeError("snapstream_core: _SlotLayer is written through StaticSlotCache.update")

    def get_seq_length(self) -> int:
        return self.keys.shape[-2]

    def get_max_length(self) -> int:
        return self.keys.shape[-2]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.keys.shape[-2], 0


class StaticSlotCache(Cache):
    """The decode-time cache of the compiled path: per layer (B, H_kv, S, D) K/V, a shared ``visible`` (L, B, H_kv, S)
    bool slot mask, and ``write_slot`` (1,) long, the slot the current step writes (set by :func:`decode_step`)."""

    is_compileable = True

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], visible: torch.Tensor):
        super().__init__(layers=[_SlotLayer(k, v) for k, v in zip(keys, values)])
        self.visible = visible
        self.write_slot: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        """Write (B, H_kv, 1, D) at ``write_slot``; return the whole (B, H_kv, S, D) storage."""
        layer = self.layers[layer_idx]
        layer.keys.index_copy_(2, self.write_slot, key_states)
        layer.values.index_copy_(2, self.write_slot, value_states)
        return layer.keys, layer.values

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for layer in self.layers for t in (layer.keys, layer.values))


def decode_step(
    model,
    cache: StaticSlotCache,
    tokens: torch.Tensor,
    positions: torch.Tensor,
    slot: torch.Tensor,
    attention: Callable | None = None,
):
    """One decode step of fixed shapes: tokens (B, 1) long at positions (B, 1) long, written at ``slot`` (1,) long
    -> next-token logits (B, V) float32. ``attention``: :attr:`DecodeKernels.attention` (None: SDPA)."""
    cache.write_slot = slot
    cache.visible.index_fill_(-1, slot, True)
    return slot_forward(model, cache, tokens, positions, attention)


def slot_forward(model, cache, tokens: torch.Tensor, positions: torch.Tensor, attention: Callable | None = None
                 ) -> torch.Tensor:
    """The model call of one decode step over fixed slots whose write position and visibility the caller has set:
    tokens (B, 1) at positions (B, 1) -> next-token logits (B, V) float32. The per-layer slot mask ``cache.visible``
    (L, B, H_kv, S) travels as :data:`SLOT_MASK_KWARG`, ``attention`` (None: SDPA) as :data:`SLOT_ATTENTION_KWARG`."""
    extra = {SLOT_MASK_KWARG: cache.visible}
    if attention is not None:
        extra[SLOT_ATTENTION_KWARG] = attention
    out = model(
        input_ids=tokens,
        position_ids=positions,
        past_key_values=cache,
        attention_mask=cache.visible[0, :, :1, None, :],  # 4D: transformers builds no mask; ours is per layer
        use_cache=True,
        **extra,
    )
    return out.logits[:, -1, :].float()


_COMPILED: dict[tuple[str, str, DecodeKernels | None], Callable] = {}


def compiled_step(device_type: str, backend: str = "inductor", *, kernels: DecodeKernels | None = None) -> Callable:
    """``decode_step`` under ``torch.compile`` (made once per device type, backend and kernels): ``reduce-overhead``
    (CUDA graphs) on CUDA, inductor elsewhere; ``backend="eager"`` traces without code generation (tests).
    ``kernels`` replaces the inductor backend and the decode attention where it sets them."""
    key = (device_type, backend, kernels)
    if key not in _COMPILED:
        mode = "reduce-overhead" if device_type == "cuda" and backend == "inductor" else None
        step = decode_step
        if kernels is not None:
            if kernels.prepare is not None:
                kernels.prepare()  # before tracing: the trace decides which attention the graph calls
            if kernels.compile_backend is not None and backend == "inductor":
                backend, mode = kernels.compile_backend, None
            if kernels.attention is not None:
                step = _with_attention(kernels.attention)
        compiled = torch.compile(step, backend=backend, mode=mode, fullgraph=True)
        # Guards on the model's modules checked by their dict tags, recursively (a Dynamo setting, off by default,
        # that falls back to the full check when a module's attributes change): SmolLM2's ~4,000 guards per step
        # take 0.6 ms instead of 1.2 ms.
        _COMPILED[key] = torch._dynamo.config.patch(use_recursive_dict_tags_for_guards=True)(compiled)
    return _COMPILED[key]


def _with_attention(attention: Callable) -> Callable:
    def step(model, cache, tokens, positions, slot):
        return decode_step(model, cache, tokens, positions, slot, attention)

    return step


@dataclass
class DecodePlan:
    """What the loop needs besides the cache: ``slots`` (steps,) long, the slot written at each step, and
    ``positions`` (B,) long, the position of the first decoded token of each row."""

    cache: StaticSlotCache
    slots: torch.Tensor
    positions: torch.Tensor
    held_before: int  # filled slots per layer and KV head before the first step
    held_cap: int | None  # the most a ring holds (None: appending, one more per step)

    def tokens_held(self, steps_done: int) -> int:
        held = self.held_before + steps_done
        return held if self.held_cap is None else min(held, self.held_cap)


def to_static(
    cache: CompressedCache, key_valid: torch.Tensor, steps: int, *, kernels: DecodeKernels | None = None
) -> DecodePlan:
    """Copy a compressed cache right after prefill (and batch expansion) into fixed-size slot buffers.

    Args:
        cache: the cache the eager prefill filled and compressed, with B rows.
        key_valid: (B, T) bool, False on left padding of the prompt.
        steps: decode steps to come (tokens whose K/V will be written).
        kernels: where it sets ``zeros``, the CPU slot buffers come from it.
    """
    method = cache.method
    if method.positions == "in_cache":
        raise ValueError("gen.compile: not supported with compression.positions=in_cache (keys are re-rotated)")
    plans, schedule = [], None
    for layer in cache.layers:
        if layer.pending or layer.keys is None:
            raise RuntimeError("snapstream_core: to_static needs a prefilled, compressed cache")
        layer.flush_positions()
        if layer.ring is None:
            n = layer.keys.shape[-2]
            S = n + steps
            slots = torch.arange(n, n + steps, device=layer.keys.device)
            held = (n, None)
        else:
            n = layer._slots_now()
            # Every prompt length gets the same number of slots: the method's largest footprint.
            S = max(layer.n_frozen + layer.ring, method.footprint(2**40, 2**40))
            slots = layer.n_frozen + (layer.filled + torch.arange(steps, device=layer.keys.device)) % layer.ring
            held = (n, layer.n_frozen + layer.ring)
        if schedule is None:
            schedule = (slots, held)
        elif not torch.equal(schedule[0], slots):
            raise RuntimeError("snapstream_core: layers disagree on the slot schedule")
        plans.append((layer, n, S))
    storage = _slot_storage(
        [(*layer.keys.shape[:2], S, layer.keys.shape[-1]) for layer, _, S in plans],
        cache.layers[0].keys,
        kernels.zeros if kernels is not None else None,
    )
    keys, values, visible = storage[0::2], storage[1::2], []
    for (layer, n, S), k, v in zip(plans, keys, values):
        k[:, :, :n] = layer.keys[:, :, :n]
        v[:, :, :n] = layer.values[:, :, :n]
        vis = torch.zeros(*k.shape[:2], S, dtype=torch.bool, device=k.device)
        vis[..., :n] = layer.valid[..., :n] if layer.valid is not None else key_valid[:, None, :n]
        visible.append(vis)
    static = StaticSlotCache(keys, values, torch.stack(visible))
    for t in (*keys, *values, static.visible):
        torch._dynamo.mark_static_address(t)  # mutated in place by the graph: CUDA graphs keep their address
    if method.ring is None:  # one graph for every prompt length (the slot count is symbolic)
        for t in (*keys, *values):
            torch._dynamo.mark_dynamic(t, 2)
        torch._dynamo.mark_dynamic(static.visible, 3)
    positions = key_valid.long().sum(-1)  # the first decoded token follows the row's valid prompt tokens
    return DecodePlan(static, schedule[0], positions, *schedule[1])


def _slot_storage(
    shapes: list[tuple[int, ...]], like: torch.Tensor, zeros: Callable | None = None
) -> list[torch.Tensor]:
    """Zeroed K and V buffers, (B, H_kv, S, D) per layer in ``shapes``, as [K_0, V_0, K_1, V_1, ...] of ``like``'s
    dtype and device; on the CPU from ``zeros(shapes, dtype)`` when given (:attr:`DecodeKernels.zeros`)."""
    doubled = [shape for shape in shapes for _ in range(2)]
    if zeros is not None and like.device.type == "cpu":
        return zeros(doubled, like.dtype)
    return [like.new_zeros(shape) for shape in doubled]


def run_decode(
    model,
    plan: DecodePlan,
    first: torch.Tensor,
    steps: int,
    pick: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    finished: Callable[[torch.Tensor], bool],
    step_fn: Callable,
    check_every: int = 32,
) -> tuple[torch.Tensor, float]:
    """Decode ``steps`` tokens after ``first`` (B, 1); returns the (B, 1 + steps') ids and the first step's seconds.

    ``pick(ids_so_far, logits) -> (B, 1)`` chooses the next token (greedy or sampled); ``finished(ids)`` is asked
    every ``check_every`` steps (the only host synchronisation) and ends the loop early when every row is done.
    """
    B = first.shape[0]
    out = first.new_empty(B, steps + 1)
    out[:, :1] = first
    positions = plan.positions[None, :] + torch.arange(steps, device=first.device)[:, None]  # (steps, B)
    tok, first_s, t = first, 0.0, 0
    for t in range(steps):
        start = time.perf_counter()
        logits = step_fn(model, plan.cache, tok, positions[t][:, None], plan.slots[t : t + 1])
        tok = pick(out[:, : t + 1], logits)
        out[:, t + 1 : t + 2] = tok
        if t == 0:
            if first.is_cuda:
                torch.cuda.synchronize()
            first_s = time.perf_counter() - start
        if (t + 1) % check_every == 0 and t + 1 < steps and finished(out[:, : t + 2]):
            return out[:, : t + 2], first_s
    return out, first_s
