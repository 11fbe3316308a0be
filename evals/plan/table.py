"""``plan.csv`` and the printed table of a plan."""

from __future__ import annotations

import csv
from pathlib import Path

from evals.plan.cost import mean_prompt_tokens, read_slots, step_terms
from evals.plan.device import GIB, H100
from evals.plan.job import method_of, peak_terms
from evals.plan.planner import Planned
from evals.plan.wallclock import WallClock, wall_line

COLUMNS = (
    "model", "task", "compression", "prompt_budget", "recent", "kv_storage", "n_items", "n_samples", "rows", "slots",
    "max_prompt_tokens", "mean_prompt_tokens", "mean_gen_tokens", "peak_gib", "weights_gib", "prefill_gib",
    "rows_gib", "read_slots", "step_ms", "step_bandwidth_ms", "step_compute_ms", "compile_hours", "prefill_hours",
    "decode_hours", "gpu_hours", "shards", "shard_hours", "same_as", "reason", "run_dir",
)
TODAY_COMPILED_GPU_HOURS = 750  # the paper grid's estimate before rows were planned (after its OOM fixes), compiled
TODAY_EAGER_GPU_HOURS = 1940
PAPER_JOBS = 72  # the whole paper grid (conf/experiment/paper.yaml): the only grid those two estimates were made for


def row(p: Planned) -> dict:
    j, c = p.job, p.cost
    knobs = dict(j.knobs)
    rows = max(p.rows, 1)
    mem = peak_terms(j, rows)
    step = step_terms(j, rows)
    return {
        "model": j.model, "task": j.task, "compression": j.compression,
        "prompt_budget": knobs.get("prompt_budget", knobs.get("budget", "")), "recent": knobs.get("recent", ""),
        "kv_storage": method_of(j).kv_format.label,  # auto, fp8_e4m3/one, kivi2/g32/r128
        "n_items": j.n_items, "n_samples": j.n_samples, "rows": p.rows, "slots": j.slots,
        "max_prompt_tokens": j.max_prompt_tokens, "mean_prompt_tokens": round(mean_prompt_tokens(j)),
        "mean_gen_tokens": round(j.gen_fraction * j.max_new_tokens), "peak_gib": round(p.peak_gib, 2),
        "weights_gib": round(mem["weights"] / GIB, 2),
        "prefill_gib": round((mem["prefill"] + mem["first_draw"]) / GIB, 2), "rows_gib": round(mem["rows"] / GIB, 2),
        "read_slots": round(read_slots(j)), "step_ms": round(1000 * sum(step.values()), 2),
        "step_bandwidth_ms": round(1000 * step["bandwidth"], 2), "step_compute_ms": round(1000 * step["compute"], 2),
        "compile_hours": "" if c is None else round(c.compile_s / 3600, 3),
        "prefill_hours": "" if c is None else round(c.prefill_s / 3600, 3),
        "decode_hours": "" if c is None else round(c.decode_steps * c.step_s / 3600, 3),
        "gpu_hours": round(p.gpu_hours, 3), "same_as": p.same_as, "reason": p.reason or p.error,
        "run_dir": j.run_dir,
    }


def write_csv(planned: list[Planned], path: Path, wall: WallClock | None = None) -> Path:
    """``plan.csv``; with ``wall``, each job's shards and its longest shard's GPU-hours (else 1 and its own)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        for k, p in enumerate(planned):
            shards = (wall.shards[k], round(wall.longest[k], 3)) if wall is not None else (
                int(p.gpu_hours > 0), round(p.gpu_hours, 3))
            w.writerow({**row(p), "shards": shards[0], "shard_hours": shards[1]})
    return path


def totals(planned: list[Planned]) -> dict:
    runs = [p for p in planned if not p.same_as]
    all_hours = sum(p.cost.gpu_hours for p in planned if p.cost is not None)
    return {
        "jobs": len(planned),
        "run_dirs": len({p.job.run_dir for p in planned}),
        "same_dir": sum(p.reason.startswith("same run") for p in planned),
        "aliased": sum(bool(p.same_as) and not p.reason.startswith("same run") for p in planned),
        "computed": len(runs),
        "gpu_hours": sum(p.gpu_hours for p in planned),
        "gpu_hours_without_dedup": all_hours,
        "compile_hours": sum(p.cost.compile_s / 3600 for p in planned if p.gpu_hours > 0),
        "max_peak_gib": max((p.peak_gib for p in planned), default=0.0),
        "unfit": sum(bool(p.error) for p in planned),
    }


def render(planned: list[Planned], memory_gib: float, wall: WallClock | None = None, shards: int | str = 1,
           unsharded: float | None = None, paper: bool = False) -> str:
    """The table (one line per job) and the totals, as printed by ``python -m evals.plan``; with ``wall``, the
    wall clock of the grid on ``wall.gpus`` GPUs (:mod:`evals.plan.wallclock`) beside its GPU-hours (and
    ``unsharded``, the same GPUs' wall clock with one piece per job). GPU-hours are hours of the planner's device
    (``evals.plan.device.H100``); ``paper``: the grid is the whole paper grid, compared with its estimate before rows
    were planned (no other grid has one)."""
    head = f"{'model':22} {'task':14} {'method':13} {'kv':16} {'budget':>6} {'n':>3} {'rows':>4} {'slots':>6} " \
           f"{'peak GiB':>8} {'GPU-h':>7}  same as"
    lines = [head, "-" * len(head)]
    for p in planned:
        r = row(p)
        same = "" if not p.same_as else ("(same dir)" if p.reason.startswith("same run") else "= none")
        lines.append(
            f"{r['model'][:22]:22} {r['task'][:14]:14} {r['compression'][:13]:13} {r['kv_storage'][:16]:16} "
            f"{str(r['prompt_budget']):>6} "
            f"{r['n_samples']:>3} {r['rows']:>4} {r['slots']:>6} {r['peak_gib']:>8.1f} {p.gpu_hours:>7.1f}  {same}"
        )
    t = totals(planned)
    lines += [
        "",
        f"jobs {t['jobs']}, run directories {t['run_dirs']} ({t['same_dir']} jobs share one), "
        f"{t['aliased']} identical to the full cache, {t['computed']} computed",
        f"GPU-hours: {t['gpu_hours']:.1f} ({t['gpu_hours_without_dedup']:.1f} without deduplication) of one "
        f"{H100.name}" + (f"; {t['gpu_hours'] / TODAY_COMPILED_GPU_HOURS:.2f}x the estimate of this grid before rows "
                          f"were planned (~{TODAY_COMPILED_GPU_HOURS} compiled, ~{TODAY_EAGER_GPU_HOURS} eager)"
                          if paper and len(planned) == PAPER_JOBS else "")
        + f"; compile {t['compile_hours']:.2f} h of them (per job; an estimate from CPU timings, docs/plan.md)",
        *([wall_line(wall, shards, unsharded)] if wall is not None else []),
        f"largest peak {t['max_peak_gib']:.1f} GiB of plan.memory_gib={memory_gib:g}"
        + (f"; {t['unfit']} job(s) do not fit" if t["unfit"] else "; every job fits"),
    ]
    return "\n".join(lines)
