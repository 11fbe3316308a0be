"""The stage functions by name (each ``fn(ctx)``, :class:`bench.gpu.context.Ctx`); their order and costs are in
:mod:`bench.gpu.table`."""

from __future__ import annotations

from bench.gpu.compaction import compaction
from bench.gpu.decode import block_mask, decode_stage, prefill

FUNCTIONS = {"snapstream_decode": decode_stage, "full_decode": decode_stage, "compaction": compaction,
             "equal_memory_full": decode_stage, "equal_memory_snapstream": decode_stage, "prefill_120k": prefill,
             "block_mask": block_mask}
