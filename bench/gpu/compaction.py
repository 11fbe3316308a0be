"""The ``compaction`` stage: the decode-time methods' compaction graph, through the engine's public API.

R-KV at budget 512 / interval 128 (32 / 8 with ``--tiny``): warm-up and timed runs as a decode stage; the graphs
the run compiled (decode step + compaction: 2); the compaction's share of the timed run's decode time from the
engine's own figures (``EngineStats.compactions`` and ``compaction_s``, device time). Then for ``rkv`` and
``triattention`` (when registered) the compiled engine's greedy tokens against the eager engine's, teacher-forced
(:mod:`bench.gpu.agreement`; the reference is the eager engine, whose logits the engine does not return, so
disagreements are counted against the tolerance but not excused as near-ties)."""

from __future__ import annotations

from pathlib import Path

from bench.gpu.agreement import engine_greedy, forced_tokens, judge, tolerance_for
from bench.gpu.measure import BlockReads, decode_measure, finish_decode, make_engine, make_item, method_of
from bench.gpu.rows import plan_rows


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def compaction(ctx) -> None:
    from snapstream_core.methods import METHODS

    ctx.phase("plan")
    rows, prompt = plan_rows(ctx)
    steps = ctx.shape.steps
    reads = BlockReads()
    before = _graphs()
    engine = make_engine(ctx, rows, steps, reads)
    item = make_item(ctx, prompt, rows, steps)
    decode_measure(ctx, engine, item, reads)  # with the compactions' count, time and share of the timed run
    ctx.put(graphs=_graphs() - before)
    method = method_of(ctx)
    finish_decode(ctx, rows, method.slots(prompt, steps + 1))
    tol = tolerance_for(next(ctx.model.parameters()).dtype)
    n = min(steps, method.interval + max(8, method.interval // 8))  # a compaction and the tokens after it
    for name in [m for m in ("rkv", "triattention") if m in METHODS]:
        ctx.phase(f"token agreement: {name}")
        knobs = {**ctx.shape.compression, "method": name}
        if name == "triattention":  # its query statistics, calibrated on the stage's own model and prompt
            knobs["calibration"] = str(calibrate_here(ctx.model, item.ids))
        compiled = engine if name == "rkv" else make_engine(ctx, rows, steps, compression=knobs)
        eager = make_engine(ctx, 1, n, compression=knobs, compiled=False)
        ref, got, runs = forced_tokens(engine_greedy(eager), engine_greedy(compiled), item.ids, n)
        ctx.put(**{f"{name}_agreement": {**judge(ref, got, None, tol), "starts": runs, "asked": n,
                                         "reference_compactions": eager.stats.compactions,
                                         "path": "compiled" if compiled.stats.compiled else "eager",
                                         "reference": "the eager engine"}})
    ctx.put(compiles_after_agreement=engine.stats.compiles)  # rkv's greedy requests reuse the measured graphs


def calibrate_here(model, ids) -> Path:
    """A TriAttention calibration file of ``model`` from the prompt ``ids`` (``snapstream_core.calibration``, as
    ``python -m evals.calibrate`` writes one), in a temporary folder that lives as long as the stage's process."""
    import tempfile

    import torch

    from snapstream_core.calibration import query_statistics, save_stats

    device = next(model.parameters()).device
    q_mean, q_abs_mean = query_statistics(model, torch.tensor([list(ids)], device=device))
    rope = model.config.rope_parameters
    folder = Path(tempfile.mkdtemp(prefix="gpu_check_calibration_"))
    return save_stats(folder / "stage.safetensors", q_mean, q_abs_mean, n_kv_heads=model.config.num_key_value_heads,
                      rope_theta=float(rope["rope_theta"]), rope_type=str(rope.get("rope_type", "default")))
