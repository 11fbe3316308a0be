"""The device the planner plans for: every constant of the time and memory estimates, with its source.

Datasheet figures are exact; the efficiencies are estimates until ``make gpu-check`` (bench/gpu_check.py) measures
them on a GPU, and are kept here, in one place, so that a measurement replaces one number.
"""

from __future__ import annotations

from dataclasses import dataclass

from snapstream_core.memory import READ_BLOCK

GIB = 2**30


@dataclass(frozen=True)
class Device:
    """One accelerator, and how well a decode step and a prefill use it.

    A decode step reads the weights and the filled KV of every row once, and multiplies every row by the weights:
    its time is ``bytes / (hbm_bytes_per_s * bandwidth_efficiency)`` plus ``FLOPs / (bf16_flops * prefill_mfu)``
    plus ``step_overhead_s`` (both terms count at 250-500 rows). Prefill is compute-bound:
    ``FLOPs / (bf16_flops * prefill_mfu)``. Memory is :mod:`snapstream_core.memory`'s (card size, context, margin).
    """

    name: str = "NVIDIA H100 SXM5 80GB"
    # NVIDIA H100 datasheet (SXM5): 3.35 TB/s HBM3.
    hbm_bytes_per_s: float = 3.35e12
    # Share of the peak HBM bandwidth a decode step reaches. Estimate: tuned decode kernels (CUDA graphs, split-KV
    # attention) reach 60-80% of peak in published decode roofline measurements; measured by make gpu-check.
    bandwidth_efficiency: float = 0.7
    # NVIDIA H100 datasheet (SXM5): 989 TFLOPS dense BF16 tensor core (1,979 is with 2:4 sparsity).
    bf16_flops: float = 989e12
    # Model FLOPs utilisation of a chunked prefill (HF Llama + SDPA/flash). Estimate, below the ~50% of tuned
    # training stacks; measured by make gpu-check.
    prefill_mfu: float = 0.4
    # Per decode step besides its bytes and FLOPs: the CUDA graph replay, kernel launches of sampling, the host's
    # periodic done check. Estimate.
    step_overhead_s: float = 1.0e-3
    # True: a step reads all the slots of a row (a fixed-shape kernel over the allocated buffer). False: only the
    # filled ones, in blocks (the engine's decode attention bounds its reads to each row's filled length).
    reads_all_slots: bool = False
    # Tokens per block of a bounded read: a row reads its filled slots rounded up (the engine's block).
    read_block: int = READ_BLOCK


H100 = Device()
