"""What a decode stage measures, through the engine's public API (:class:`Engine` and its ``run``,
``step_context``, ``on_progress`` and ``stats``): a warm-up run that compiles and records the graph
(``first_step_s``, ``record_s``), then a timed run whose blocks of steps between host reads give the steady
ms/step (the rows' start-up, prefill and row loads, falls outside the blocks), host reads per step in one block
(:mod:`bench.host_reads`), the peak memory, and the bandwidth floor measured in the same process (:mod:`bench.floor`).
Each figure goes into the stage's record as soon as it is known."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.gpu.shapes import GIB, R1_SAMPLING

FLOOR_MIB = {"cuda": 4096, "cpu": 64}  # CUDA: a read long enough to dwarf a kernel launch (bench.floor)


def reset(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peaks(device: str) -> tuple[float | None, float | None]:
    """(max allocated, max reserved - max allocated) in GiB since the last reset (CUDA; None on the CPU)."""
    import torch

    if device != "cuda":
        return None, None
    torch.cuda.synchronize()
    allocated = torch.cuda.max_memory_allocated()
    return allocated / GIB, (torch.cuda.max_memory_reserved() - allocated) / GIB


def method_of(ctx, compression: dict | None = None):
    """The stage's compression method (``compression``: other knobs)."""
    import snapstream_core as ss

    return ss.compression_from_config(dict(compression or ctx.shape.compression))


def make_engine(ctx, rows: int, steps: int, reads=None, compression: dict | None = None, compiled: bool | None = None):
    """The stage's engine: ``compression`` (default the stage's), compiled unless ``--no-compile`` (FlexAttention
    with the block mask, also compiled on the CPU), R1's sampling (top-p on), ``steps + 1`` new tokens."""
    import snapstream_core as ss
    from snapstream_core.engine import Engine

    compiled = (not ctx.args.no_compile) if compiled is None else compiled
    sampling = ss.SamplingConfig(max_new_tokens=steps + 1, **R1_SAMPLING)
    return Engine(ctx.model, method_of(ctx, compression), sampling, eos=[], rows=rows,
                  compile=compiled, compile_backend="inductor", attention="flex" if compiled else "sdpa",
                  planned_bytes=ctx.record.get("planned_bytes"),
                  step_context=None if reads is None else reads.context)


def make_item(ctx, prompt: int, rows: int, steps: int):
    import torch

    from snapstream_core.engine import EngineItem

    ids = torch.randint(0, ctx.model.config.vocab_size, (prompt,), generator=torch.Generator().manual_seed(prompt))
    return EngineItem(ids.tolist(), 0, tuple(range(rows)), steps + 1)


class BlockReads:
    """A ``step_context`` for the engine: counts host reads in block number ``at`` of the blocks it is asked for."""

    def __init__(self, at: int = 0):
        from bench.host_reads import HostReads

        self.at, self.seen = at, 0  # at=0: count in no block
        self.counter = HostReads()

    def context(self):
        from contextlib import nullcontext

        self.seen += 1
        return self.counter if self.seen == self.at else nullcontext()


def steady_ms(blocks: list[tuple[int, float]], skip: set[int]) -> float | None:
    """Median ms/step over the blocks (steps, seconds) not in ``skip`` (their indices)."""
    per = [1000 * s / n for i, (n, s) in enumerate(blocks) if i not in skip and n]
    return statistics.median(per) if per else None


def floor(ctx, filled: int, rows: int) -> dict[str, float]:
    """The bandwidth floor of a step that reads the weights and ``filled`` K/V entries per row, by two methods."""
    from bench.floor import BandwidthProbe, floor_bytes

    probe = BandwidthProbe(ctx.device, mib=FLOOR_MIB[ctx.device])
    read, copy = probe(), probe.copy()
    nbytes = floor_bytes(ctx.model, filled, rows)
    return {"bandwidth_gb_s": read / 1e9, "copy_gb_s": copy / 1e9, "floor_ms": 1000 * nbytes / read,
            "floor_copy_ms": 1000 * nbytes / copy, "floor_read_mib": FLOOR_MIB[ctx.device]}


def watch(ctx, engine, prefix: str = "") -> None:
    """Write the engine's compile and step figures into the record while a run goes (its ``on_progress`` hook): the
    compile time once the first step ran, the tokens decoded so far, the last block's ms/step."""
    rec = ctx.record

    def progress(prefilled: int, decoded: int) -> None:
        s = engine.stats
        figures = {f"{prefix}decoded": decoded, f"{prefix}prefilled": prefilled}
        if s.compiled and s.first_step_s and f"{prefix}first_step_s" not in rec:
            figures[f"{prefix}first_step_s"] = s.first_step_s
            rec.update(figures)
            rec.write()  # the compile time, at once
            return
        if s.blocks:
            n, sec = s.blocks[-1]
            figures[f"{prefix}last_block_ms_per_step"] = 1000 * sec / n if n else None
        rec.update(figures)
        rec.write(every_s=1.0)

    engine.on_progress = progress


def decode_measure(ctx, engine, item, reads: BlockReads, prefix: str = "") -> dict[str, Any]:
    """Warm-up run (compile, graph recording), then a timed run of ``item``: steady ms/step, host reads per step,
    peak memory. Each figure is put in the record (keys with ``prefix``) as it is known; returns them too."""
    out: dict[str, Any] = {}
    watch(ctx, engine, prefix)
    ctx.phase(f"{prefix}warm-up run (compile, graph recording)")
    reset(ctx.device)
    start = time.perf_counter()
    for _ in engine.run([item]):
        pass
    out.update(warmup_s=time.perf_counter() - start, first_step_s=engine.stats.first_step_s,
               record_s=engine.stats.record_s, compiled=engine.stats.compiled)
    ctx.put(**{prefix + k: v for k, v in out.items()})
    ctx.phase(f"{prefix}timed run")
    reset(ctx.device)
    s = engine.stats
    before, calls, compaction_s = len(s.blocks), s.compactions, s.compaction_s
    reads.at, reads.seen = 2, 0  # the second block of the timed run (the first may start rows)
    finished = [f for batch in engine.run([item]) for f in batch]
    timed: dict[str, Any] = {}
    timed["peak_measured_gib"], timed["reserved_minus_allocated_gib"] = peaks(ctx.device)
    blocks = engine.stats.blocks[before:]
    counted = blocks[1][0] if len(blocks) > 1 else 0
    timed["ms_per_step"] = steady_ms(blocks, {1})
    timed["host_reads_per_step"] = reads.counter.count / counted if counted else None
    if reads.counter.cuda:
        timed["cuda_syncs_per_step"] = reads.counter.cuda_syncs / counted if counted else None
    timed["decode_s_median"] = statistics.median(f.decode_s for f in finished)
    timed["compiles"] = engine.stats.compiles
    timed["recompiles"] = max(0, engine.stats.compiles - 1) if engine.stats.compiled else 0
    if s.compactions > calls:  # the engine's own count and device time of its compaction calls in the timed run
        decode_s = sum(sec for _, sec in blocks)
        timed.update(compaction_calls=s.compactions - calls, compaction_s=s.compaction_s - compaction_s,
                     compaction_share=(s.compaction_s - compaction_s) / decode_s if decode_s else None)
    ctx.put(**{prefix + k: v for k, v in timed.items()})
    return {**out, **timed}


def finish_decode(ctx, rows: int, filled: int) -> None:
    """The floor of the measured step (``filled`` K/V entries per row) and the figures against it."""
    rec = ctx.record
    if rec.get("ms_per_step"):
        ctx.phase("bandwidth floor")
        fl = floor(ctx, filled, rows)
        ctx.put(**fl, tokens_per_s=1000 * rows / rec["ms_per_step"], x_floor=rec["ms_per_step"] / fl["floor_ms"])
