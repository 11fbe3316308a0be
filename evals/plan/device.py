"""The device the planner plans for: every constant of the time and memory estimates, with its source.

Datasheet figures are exact; the efficiencies are estimates until ``make gpu-check`` (bench/gpu_check.py) measures
them on a GPU, and are kept here, in one place, so that a measurement replaces one number.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class Device:
    """One accelerator, and how well a decode step and a prefill use it.

    Decode is memory-bound: a step reads the weights and every KV slot of every row once, so its time is
    ``bytes / (hbm_bytes_per_s * bandwidth_efficiency)`` (the bandwidth floor divided by the efficiency) plus
    ``step_overhead_s``. Prefill is compute-bound: ``FLOPs / (bf16_flops * prefill_mfu)``.
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
    # Per decode step besides the bandwidth: sampling, the stop check, a CUDA graph replay. Estimate.
    step_overhead_s: float = 1.0e-3
    # Device memory the allocations never get: the CUDA context and the caching allocator's fragmentation, which
    # torch.cuda.max_memory_allocated does not count. Estimate (the context alone is ~0.5 GiB on an H100).
    reserved_gib: float = 2.0
    # True: a step reads all the slots of a row (a fixed-shape kernel over the allocated buffer: the conservative
    # time). False: only the filled ones (a block-sparse kernel skipping empty blocks).
    reads_all_slots: bool = True


H100 = Device()
