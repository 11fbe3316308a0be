"""Compile seconds of a job's graphs (``gen.compile``): the decode step, and a decode-time method's compaction.

Measured on CPU only (``python -m bench.planner_terms --only compile``: torch inductor, a cold cache, random-weight
Llama models of a few layer counts, ``bench/results/planner_terms/compile.csv``), in CPU seconds of one core: a
fixed part and a part per layer (inductor lowers and schedules every layer's ops; identical kernels are generated
once), for the decode step's graph and for the compaction's. :func:`cpu_compile_seconds` is that line.

On a GPU the same graphs go through the same capture and lowering, then Triton code generation and the CUDA-graph
recording instead of C++: not measured here (no GPU). :data:`GPU_COMPILE_FACTOR` scales the CPU figure to the GPU
one and is an assumption (1.0: one host core's CPU seconds, likely an upper end: inductor compiles kernels on
several cores by default) until ``make gpu-check`` records ``first_step_s`` on a card. Each job, and each
shard of a job (its own process), pays it once; a warm inductor cache on the node makes it shorter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evals.plan.job import Job

# CPU seconds of one core (inductor compiling in-process, TORCHINDUCTOR_COMPILE_THREADS=1, its C++ compiler
# included; cold cache), bench/results/planner_terms/compile.csv: the decode step 37.1 s at 2 layers and 56.2 s at 8
# (tiny_llama's widths; 3.2 s per layer), the compaction's graph (R-KV) 30.5 s and 90.4 s more (10 s per layer).
# Rounded up so each line is above both points (by at most 9%). Wall seconds on the loaded 2-core machine were 2-3x
# these (load average 5-15), which is why the figure is in CPU seconds.
CPU_STEP_S = 32.0
CPU_STEP_S_PER_LAYER = 3.4
CPU_COMPACTION_S = 12.0
CPU_COMPACTION_S_PER_LAYER = 10.5
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
