"""The decode stages (``snapstream_decode``, ``full_decode``, ``equal_memory_*``), ``block_mask`` and
``prefill_120k``: each runs the engine at its planner's rows (:mod:`bench.gpu.measure`)."""

from __future__ import annotations

from bench.gpu.agreement import against_transformers, engine_greedy
from bench.gpu.measure import BlockReads, decode_measure, finish_decode, make_engine, make_item, method_of, peaks, reset
from bench.gpu.rows import plan_rows
from bench.gpu.shapes import AGREEMENT


def decode_stage(ctx) -> None:
    """Warm-up and timed runs at the planner's rows, the floor; ``full_decode`` adds the greedy token agreement of
    the engine (the measured engine and an eager one) with plain transformers, teacher-forced."""
    ctx.phase("plan")
    rows, prompt = plan_rows(ctx)
    steps = ctx.shape.steps
    reads = BlockReads()
    ctx.phase("engine")
    engine = make_engine(ctx, rows, steps, reads)
    decode_measure(ctx, engine, make_item(ctx, prompt, rows, steps), reads)
    method = method_of(ctx)  # a ring's rows read every slot; an appending row its filled ones (half the steps in)
    finish_decode(ctx, rows, method.slots(prompt, steps + 1) if method.ring is not None else prompt + steps // 2)
    if ctx.name == "equal_memory_full":
        ctx.put(pass_on={"full_peak_bytes": ctx.record["planned_bytes"]})
    if ctx.name == "full_decode":
        agreement(ctx, engine)


def agreement(ctx, engine) -> None:
    """The measured engine (compiled unless ``--no-compile``) and an eager one-row engine against plain
    transformers' greedy tokens, teacher-forced (:mod:`bench.gpu.agreement`)."""
    ctx.phase("token agreement")
    shape = AGREEMENT[1 if ctx.args.tiny else 0]
    engine.on_progress = None
    prompt = make_item(ctx, shape.prompt, 1, 0).ids
    paths = {"engine_compiled" if engine.stats.compiled else "engine_eager": engine_greedy(engine)}
    if engine.stats.compiled:
        paths["engine_eager"] = engine_greedy(make_engine(ctx, 1, shape.new, compiled=False))
    ctx.put(agreement=against_transformers(ctx.model, paths, list(prompt), shape.new),
            compiles_after_agreement=engine.stats.compiles)  # the greedy requests reuse the measured graph


def block_mask(ctx) -> None:
    """The same rows and slots at the job's longest prompt and at 1/8 of it: with the per-row block mask the short
    rows read their filled blocks only, so their step should be faster by about the K/V share it skips."""
    from bench.gpu.measure import floor

    ctx.phase("plan")
    rows, prompt = plan_rows(ctx)
    steps = ctx.shape.steps
    reads = BlockReads()
    engine = make_engine(ctx, rows, steps, reads)
    decode_measure(ctx, engine, make_item(ctx, prompt, rows, steps), reads)
    long_ms = ctx.record.get("ms_per_step")
    short = max(1, prompt // 8)
    reads = BlockReads()
    engine.step_context = reads.context
    short_out = decode_measure(ctx, engine, make_item(ctx, short, rows, steps), reads, prefix="short_")
    ctx.put(short_prompt=short)
    if long_ms and short_out["ms_per_step"]:
        ctx.put(long_over_short=long_ms / short_out["ms_per_step"],
                short_floor_ms=floor(ctx, short + steps // 2, rows)["floor_ms"])
    finish_decode(ctx, rows, prompt + steps // 2)


def prefill(ctx) -> None:
    """One long prompt through the engine's layer-major prefill (eager, nothing compiled): its time and peak."""
    ctx.phase("plan")
    rows, prompt = plan_rows(ctx)
    engine = make_engine(ctx, 1, 0)  # one new token: no decode step, nothing compiled
    ctx.phase("prefill")
    reset(ctx.device)
    finished = [f for batch in engine.run([make_item(ctx, prompt, 1, 0)]) for f in batch]
    measured, slack = peaks(ctx.device)
    ctx.put(peak_measured_gib=measured, reserved_minus_allocated_gib=slack, prefill_s=finished[0].prefill_s,
            tokens_per_s=prompt / finished[0].prefill_s, compiled=False, recompiles=0, compiles=0)
