"""Compile seconds of a job's graphs (``gen.compile``): the decode step, and a decode-time method's compaction.

Measured on CPU only (``python -m bench.planner_terms --only compile``: torch inductor, a cold cache, random-weight
Llama models of a few layer counts, ``bench/results/planner_terms/compile.csv``): a fixed part per graph and a part
per layer (inductor lowers and schedules every layer's ops; identical kernels are generated once), for the decode
step's graph and for the compaction's. :func:`cpu_compile_seconds` is that line.

On a GPU the same graphs go through the same capture and lowering, then Triton code generation and the CUDA-graph
recording instead of C++: not measured here (no GPU). :data:`GPU_COMPILE_FACTOR` scales the CPU figure to the GPU
one and is an assumption (1.0: as long as on the loaded CPU, likely an upper end: a GPU node's host has idle cores
for inductor's parallel compile) until ``make gpu-check`` records ``first_step_s`` on a card. Each job, and each
shard of a job (its own process), pays it once; a warm inductor cache on the node makes it shorter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evals.plan.job import Job

# Wall seconds on the 2-core development machine while other work loaded it (load average 10-15), cold inductor
# cache (bench/results/planner_terms/compile.csv): the decode step 189, 149, 437 s at 2, 4, 16 layers (tiny_llama's
# widths; 180 s at SmolLM2-135M's at 2 layers); the compaction graph (R-KV's) 94-147 s at 2-4 layers more. The
# noise (+-25% between runs) hides the per-layer part below 4 layers; the line through the measurements, raised to
# be above each of them: an upper end.
CPU_STEP_S = 155.0
CPU_STEP_S_PER_LAYER = 18.0
CPU_COMPACTION_S = 90.0
CPU_COMPACTION_S_PER_LAYER = 15.0
GPU_COMPILE_FACTOR = 1.0  # assumed: GPU compile seconds / CPU compile seconds of the same graphs


def compacts(job: Job) -> bool:
    """Whether a compiled run of the job builds the compaction's graph too (a decode-time method)."""
    return bool(dict(job.row_memory).get("compacts"))


def cpu_compile_seconds(layers: int, compaction: bool) -> float:
    """Compile seconds on CPU of the decode step of a ``layers``-layer model and, with ``compaction``, of the
    compaction's graph (the line through the measurements)."""
    step = CPU_STEP_S + CPU_STEP_S_PER_LAYER * layers
    return step + (CPU_COMPACTION_S + CPU_COMPACTION_S_PER_LAYER * layers if compaction else 0.0)


def compile_seconds(job: Job) -> float:
    """The planner's compile seconds for one process of the job on a GPU (:data:`GPU_COMPILE_FACTOR` times the CPU
    figure)."""
    return GPU_COMPILE_FACTOR * cpu_compile_seconds(job.shape.n_layers, compacts(job))
