"""The benchmark's CPU decode kernels, plugged into the core's compiled decode step through
:class:`snapstream_core.engine.step.DecodeKernels` (the core itself compiles with stock inductor):

- :mod:`bench.cpu_decode.gemv`: a ``torch.compile`` backend that turns each few-row ``linear`` into a fused
  multiply-reduce loop (the BLAS runs one-row products on one thread);
- :mod:`bench.cpu_decode.cpu_attention`: a split-KV attention kernel in C++ (``csrc/decode_attention.cpp``) for the
  packed GQA decode query, built on first use;
- :mod:`bench.cpu_decode.memory`: weights (:func:`~bench.cpu_decode.memory.pack_parameters`) and slot buffers in
  blocks of anonymous memory on transparent huge pages.

Measured in ``bench/README.md`` ("CPU decode kernels"). Only the benchmark uses them: ``python -m bench.run`` on the
CPU passes :data:`KERNELS` to every compiled case and packs the model's weights (``--no-cpu-kernels``: stock inductor).
"""

from __future__ import annotations

from bench.cpu_decode import cpu_attention, gemv, memory
from snapstream_core.engine.step import DecodeKernels

KERNELS = DecodeKernels(
    name="cpu_decode",
    compile_backend=gemv.cpu_decode_backend,
    attention=cpu_attention.packed_attention,
    zeros=memory.cpu_zeros,
    prepare=cpu_attention.build,
)

__all__ = ["KERNELS", "cpu_attention", "gemv", "memory"]
