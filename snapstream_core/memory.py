"""The one memory model of a run: the prefill of one prompt, a decode row, a job, and the device memory they may use.

Pure arithmetic, no torch import: the planner (``evals.plan``, on a laptop), the prefill's documented bound
(:func:`snapstream_core.prefill.prefill_peak_bytes`), the runner's row choice on CUDA and ``make gpu-check`` all read
these functions. ``docs/memory.md`` derives every term; ``tests/test_memory_model.py`` checks the prefill and the
job peak against tensor allocations tracked on CPU (within 15%, never below).

Symbols: ``b`` bytes per element, ``L`` layers, ``H``/``H_kv`` query/KV heads, ``D`` head dim, ``d`` hidden, ``I``
MLP width, ``V`` vocabulary, ``T`` prompt tokens, ``C = min(chunk, T)``, ``S`` the slots a compressed layer holds
after its selection, ``w`` the query rows the selection scores with::

    prefill = T*d*b                                  residual stream
            + 2*T*H_kv*D*b                           one full layer of KV (the staging buffer)
            + (L-1)*S*H_kv*(2*D*b + 9)               layers already compressed (K, V, bool validity, long position)
            + max(C*(2d + 3I)*b,                     one chunk's MLP
                  C*(2d + 2(H + 2H_kv)D)*b             one chunk's attention projections
                    + [C<T]*(C*T*(1+b) + 2*T*H*D*b),   later chunks: sdpa's mask (bool + float), K/V repeated to H
                  3*H*w*T*4 + [b!=4]*2*T*H_kv*D*4)   SnapKV window scores (fp32)
            + 2*C*D*4 + V*4                          RoPE cos/sin of a chunk, the last position's logits
    row     = slots*(2*L*H_kv*D*b + L*H_kv)          K/V and the bool slot mask of one decode row
            + 8*(max_new + 1)                        its token buffer
            + V*(4 + SAMPLING_BYTES_PER_ENTRY)       float32 logits and the sampling temporaries
            + (6d + 3I)*b + 2*H*slots*4              one step's activations and attention scores
    job     = weights + prefill + V*SAMPLING_BYTES_PER_ENTRY + rows*row
              (the next item is prefilled, and its first tokens drawn, while the rows of the last one are held)
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30
FLOAT32 = 4
PREFILL_CHUNK = 4096  # prompt tokens per chunk of the layer-major prefill (snapstream_core.prefill.DEFAULT_CHUNK)
# Hidden-sized and intermediate-sized buffers alive at once in one decode step of a Llama layer (no autograd): the
# residual, the normed input, q / attention output / o-projection (hidden each); gate, up and act(gate)*up.
STEP_HIDDEN = 6
STEP_INTER = 3
# Bytes per vocabulary entry per row that top-p / temperature sampling allocates at its peak beside the float32
# logits (the counter-based noise's int64 passes over the whole vocabulary, the sort of top-p and its outputs, the
# filtered copy): tracked with bench.live_bytes.LiveBytes around snapstream_core.engine.noise.pick_tokens
# (tests/test_memory_model.py).
SAMPLING_TRACKED_BYTES_PER_ENTRY = 30
# The scratch of top-p's full-vocabulary sort, which LiveBytes cannot see (allocated and freed inside one op): on
# CUDA ATen's segmented radix sort keeps a second buffer of the float32 keys and of the int64 values beside the int64
# index it sorts (4 + 8 + 8). An estimate from the algorithm, not a measurement; added in full although the sort ends
# before the noise's peak (an upper bound).
SORT_SCRATCH_BYTES_PER_ENTRY = 20
SAMPLING_BYTES_PER_ENTRY = SAMPLING_TRACKED_BYTES_PER_ENTRY + SORT_SCRATCH_BYTES_PER_ENTRY
# An "80 GB" card reports 81,559 MiB of its 81,920 (79.65 GiB); the CUDA context takes about 0.55 GiB of it, so
# about 79.1 GiB can be allocated (measured on H100 and H200 site stacks, docs/plan.md).
REPORTED_SHARE = 81559 / 81920
CUDA_CONTEXT_GIB = 0.55
# Kept free below what can be allocated: CUDA-graph pools and the caching allocator's fragmentation, which
# torch.cuda.max_memory_allocated does not count. Estimate; make gpu-check records reserved - allocated.
MARGIN_GIB = 2.5
# Slots per block of a bounded decode read: an appending row reads its filled slots rounded up to this many (the
# engine's FlexAttention block mask, FlexAttention's default block; the eager step's rounding). The planner reads it.
READ_BLOCK = 128


@dataclass(frozen=True)
class Arch:
    """What the memory model needs of a Llama-style GQA decoder."""

    n_layers: int
    hidden: int
    intermediate: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab: int
    dtype_bytes: int

    @classmethod
    def of(cls, config, dtype_bytes: int) -> Arch:
        """From a transformers text config (``hidden_size``, ``num_hidden_layers``, ...)."""
        d, H = config.hidden_size, config.num_attention_heads
        return cls(n_layers=config.num_hidden_layers, hidden=d, intermediate=config.intermediate_size, n_heads=H,
                   n_kv_heads=config.num_key_value_heads, head_dim=getattr(config, "head_dim", None) or d // H,
                   vocab=config.vocab_size, dtype_bytes=dtype_bytes)

    @property
    def kv_bytes_per_token(self) -> int:
        """Keys and values of one token in every layer (Llama-3.1-8B in bf16: 128 KiB)."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.dtype_bytes


def prefill_terms(a: Arch, T: int, slots: int, *, chunk: int, window: int = 0) -> dict[str, int]:
    """The bytes :func:`snapstream_core.prefill.prefill_prompt` holds at its peak above the weights, by term.

    ``slots``: KV entries per KV head a compressed layer holds after its selection (``T`` for ``none``, the ring
    included for the ring methods); ``window``: the query rows the selection scores with (0: no SnapKV scoring)."""
    b, L, H, H_kv, D, d = a.dtype_bytes, a.n_layers, a.n_heads, a.n_kv_heads, a.head_dim, a.hidden
    C = min(chunk, T)
    attention = C * (2 * d + 2 * (H + 2 * H_kv) * D) * b
    if C < T:  # chunks after the first: explicit mask (bool + float) and K/V repeated to the H query heads
        attention += C * T * (1 + b) + 2 * T * H * D * b
    scoring = 3 * H * window * T * FLOAT32 + (2 * T * H_kv * D * FLOAT32 if b != FLOAT32 else 0)
    return {
        "residual": T * d * b,
        "full_layer": 2 * T * H_kv * D * b,
        "compressed_layers": (L - 1) * slots * H_kv * (2 * D * b + 9),
        "chunk_peak": max(C * (2 * d + 3 * a.intermediate) * b, attention, scoring),
        "rope": 2 * C * D * FLOAT32,
        "logits": a.vocab * FLOAT32,
    }


def row_terms(a: Arch, slots: int, max_new: int) -> dict[str, int]:
    """The bytes one decode row adds: its slots, token buffer, logits and sampling, one step's temporaries."""
    b, L, H_kv = a.dtype_bytes, a.n_layers, a.n_kv_heads
    return {
        "kv": slots * a.kv_bytes_per_token,
        "slot_mask": slots * L * H_kv,
        "tokens": 8 * (max_new + 1),
        "logits": a.vocab * FLOAT32,
        "sampling": a.vocab * SAMPLING_BYTES_PER_ENTRY,
        "activations": (STEP_HIDDEN * a.hidden + STEP_INTER * a.intermediate) * b + 2 * a.n_heads * slots * FLOAT32,
    }


def job_terms(a: Arch, weight_bytes: int, rows: int, *, slots: int, max_new: int, T: int, prefill_slots: int,
              window: int, chunk: int) -> dict[str, int]:
    """The peak of a job that holds ``rows`` decode rows of ``slots`` slots while it prefills a ``T``-token prompt
    and draws a sample's first token from the prefill's logits."""
    prefill = sum(prefill_terms(a, T, prefill_slots, chunk=chunk, window=window).values())
    return {"weights": weight_bytes, "prefill": prefill, "first_draw": a.vocab * SAMPLING_BYTES_PER_ENTRY,
            "rows": rows * sum(row_terms(a, slots, max_new).values())}


def max_rows(a: Arch, weight_bytes: int, budget_bytes: float, **job) -> int:
    """The most rows whose :func:`job_terms` peak fits ``budget_bytes`` (0: not even one). ``job``: as job_terms."""
    fixed = sum(job_terms(a, weight_bytes, 0, **job).values())
    per_row = sum(row_terms(a, job["slots"], job["max_new"]).values())
    return max(0, int((budget_bytes - fixed) // per_row))


def card_usable_bytes(memory_gib: float) -> float:
    """What can be allocated on a card sold as ``memory_gib`` GB after the CUDA context (80 -> ~79.1 GiB)."""
    return memory_gib * REPORTED_SHARE * GIB - CUDA_CONTEXT_GIB * GIB


def budget_bytes(usable: float, margin_gib: float = MARGIN_GIB) -> float:
    """The bytes a job's peak may reach: ``usable`` (allocatable) less the margin for graph pools and fragmentation."""
    return usable - margin_gib * GIB


def device_usable_bytes(device) -> int:
    """Bytes free on a CUDA ``device`` now (``torch.cuda.mem_get_info``): what this process can still allocate."""
    import torch

    free, _total = torch.cuda.mem_get_info(torch.device(device))
    return int(free)


# ---------------------------------------------------------------------------------------------- a method's geometry
