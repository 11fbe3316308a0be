"""``make gpu-check`` (``python -m bench.gpu_check``): the decode engine on an 8B-shaped model at the planner's rows,
every stage's findings returned within the deadline (8 minutes).

Llama-3.1-8B's architecture with random weights in bf16, built on the GPU (no download: time and memory depend on
shapes only). Every stage runs the engine through its public API (:class:`snapstream_core.engine.Engine`, the path
of a real run) in its own process (``python -m bench.gpu_stages``), so a failure, a capture error or a hang cannot
poison the next stage. The stages (:mod:`bench.gpu.table`, most informative first): ``snapstream_decode``,
``full_decode`` (with the engine's greedy tokens against plain transformers), ``compaction`` (R-KV's compaction
graph, compiled tokens against eager), ``equal_memory_full`` / ``equal_memory_snapstream`` (128k, the same planned
memory), ``prefill_120k`` and ``block_mask``.

The deadline counts from the check's start, imports included. Before each stage the check plans the stages left
in the time left (:mod:`bench.gpu.schedule`): limits that sum to no more than it, the most informative first, and
the stages that cannot fit skipped with their reason. A stage writes its record as it goes (phase, compile time,
first step, steady step, ...), so one stopped at its limit still says how far it got. The stages die with the
check: each in its own process group, killed on every exit path, and each asks Linux to kill it if the check
dies (:mod:`bench.gpu.process`). ``gpu_check.json`` and ``gpu_check.md`` are written after every stage; the plan
made at the start is in them. Greedy tokens are judged teacher-forced, by argmax agreement within a stated
tolerance (bf16) or exactly (fp32, ``--tiny``): :mod:`bench.gpu.agreement`.

Without CUDA it refuses with one line; ``--tiny`` runs every stage on the CPU with a 2-layer model and short
prompts, compiled with Inductor and FlexAttention's block mask as on CUDA (a dry run of the code, no measurement);
``--strict`` exits 1 when a stage is skipped, stopped or failed or a token agreement fails (``make test-compat``).
Imports nothing from hydra, omegaconf, datasets or lm_eval (``python -m bench.without hydra,omegaconf,datasets,
lm_eval -m bench.gpu_check --tiny``; the stages inherit the block).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.gpu.process import run_process, stage_groups_die_with_us
from bench.gpu.record import read_record
from bench.gpu.render import equal_memory, failures, render, save
from bench.gpu.schedule import plan
from bench.gpu.table import ORDER, TABLE

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "results" / "gpu"
TINY_OUT = REPO / "results" / "gpu_check_tiny"
DEADLINE_S = 480
TINY_DEADLINE_S = 2700
log = logging.getLogger("bench.gpu_check")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="CPU dry run with a 2-layer model (no measurement)")
    p.add_argument("--out", type=Path, default=None, help=f"folder of gpu_check.json/.md (default {OUT})")
    p.add_argument("--memory-gib", type=float, default=80.0, help="the card the planner budgets (plan.memory_gib)")
    p.add_argument("--max-rows", type=int, default=None, help="cap on the planner's rows (default: none; --tiny 3)")
    p.add_argument("--deadline-s", type=float, default=None,
                   help=f"the whole check ends by then, imports included (default {DEADLINE_S}; --tiny "
                        f"{TINY_DEADLINE_S})")
    p.add_argument("--stage-limit-s", type=float, default=None, help="every stage's limit (default: its own)")
    p.add_argument("--no-compile", action="store_true", help="every stage eager (gen.compile=false)")
    p.add_argument("--only", default=None, help="comma-separated stage names (default: all)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when a stage is skipped, stopped or failed, or a token agreement fails")
    a = p.parse_args(argv)
    a.out = a.out or (TINY_OUT if a.tiny else OUT)
    a.max_rows = a.max_rows or (3 if a.tiny else None)
    a.deadline_s = a.deadline_s or (TINY_DEADLINE_S if a.tiny else DEADLINE_S)
    if a.deadline_s <= 0:
        p.error(f"--deadline-s: must be > 0, got {a.deadline_s}")
    if a.stage_limit_s is not None and a.stage_limit_s <= 0:
        p.error(f"--stage-limit-s: must be > 0, got {a.stage_limit_s}")
    if a.only:
        unknown = sorted(set(a.only.split(",")) - set(ORDER))
        if unknown:
            p.error(f"--only: unknown stage {', '.join(unknown)} (known: {', '.join(ORDER)})")
    return a


def stage_command(a: argparse.Namespace, name: str, result: Path, context: dict) -> list[str]:
    """The child's command line (under ``bench.without`` when this process runs under it)."""
    import json

    cmd = [sys.executable]
    blocked = os.environ.get("BENCH_WITHOUT")
    if blocked:
        cmd += ["-m", "bench.without", blocked]
    cmd += ["-m", "bench.gpu_stages", name, "--result", str(result), "--memory-gib", str(a.memory_gib),
            "--context", json.dumps(context), "--parent-pid", str(os.getpid())]
    cmd += ["--tiny"] * a.tiny + ["--no-compile"] * a.no_compile
    if a.max_rows:
        cmd += ["--max-rows", str(a.max_rows)]
    return cmd


def run_stage(a: argparse.Namespace, name: str, limit: float, context: dict) -> dict[str, Any]:
    """One stage in its own process group, killed at ``limit`` seconds: the last record it wrote, and how it
    ended."""
    interrupted = None
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "stage.json"
        try:
            code, wall = run_process(stage_command(a, name, result, context), limit, REPO)
        except (KeyboardInterrupt, SystemExit) as exc:  # Ctrl-C, SIGTERM, SIGHUP: the stage's group is killed
            code, wall, interrupted = None, time.perf_counter() - start, exc
        rec: dict[str, Any] = {"name": name, "path": "engine", **read_record(result)}
    rec.update(limit_s=round(limit, 1), wall_s=wall)
    if code is None:
        phase = rec.get("phase", "start (it wrote no record)")
        at = rec.get("phases", {}).get(phase)
        why = (f"stopped when the check was interrupted ({type(interrupted).__name__})" if interrupted
               else f"stopped at its limit of {limit:.0f} s")
        rec["stopped"] = f"{why} in phase '{phase}'" + (f" (entered at {at:.1f} s)" if at is not None else "")
        if interrupted:
            rec["interrupted"] = True
    elif code != 0 and "error" not in rec:
        rec["error"] = f"the stage's process exited with {code}"
    return rec


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()  # the deadline counts from here: imports and every stage's process included
    a = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")
    if not a.tiny:  # the check itself creates no CUDA context (the stages report the device's name)
        import torch

        if not torch.cuda.is_available():
            print("error: bench.gpu_check needs a CUDA device (torch sees none); --tiny runs a CPU dry run of the "
                  "code", file=sys.stderr)
            return 2
    wanted = [c for c in TABLE if not a.only or c.name in a.only.split(",")]
    left = a.deadline_s - (time.perf_counter() - started)
    result: dict[str, Any] = {
        "device": "cpu (dry run, tiny model)" if a.tiny else "cuda",
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "status": "DRY RUN on CPU with a 2-layer model: no figure here is a GPU measurement" if a.tiny
        else "measured on the GPU above with an 8B-shaped model (random weights, bf16)",
        "memory_gib": a.memory_gib, "deadline_s": a.deadline_s,
        "plan": [p.as_dict() for p in plan(wanted, left, a.tiny, a.stage_limit_s)], "stages": [],
    }
    context: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    with stage_groups_die_with_us():
        for i, cost in enumerate(wanted):
            left = a.deadline_s - (time.perf_counter() - started)
            step = plan(wanted[i:], left, a.tiny, a.stage_limit_s, unavailable)[0]
            if step.limit_s is None:
                rec: dict[str, Any] = {"name": cost.name, "path": "engine", "skipped": step.reason}
            else:
                log.info("stage %s (limit %.0f s)", cost.name, step.limit_s)
                rec = run_stage(a, cost.name, step.limit_s, context)
                if step.reason:
                    rec["limit_note"] = step.reason
            pass_on = rec.pop("pass_on", None)
            context.update(pass_on or {})
            if not pass_on:
                unavailable[cost.name] = ("is skipped" if "skipped" in rec else "was stopped at its limit"
                                          if "stopped" in rec else "failed" if "error" in rec else "passed nothing on")
            if "versions" in rec:
                result["versions"] = rec.pop("versions")
                if not a.tiny and result["versions"].get("device"):
                    result["device"] = result["versions"]["device"]
            result["stages"].append(rec)
            result["equal_memory"] = equal_memory(result["stages"])
            result["seconds"] = time.perf_counter() - started
            if rec.pop("interrupted", False):
                result["stages"] += [{"name": c.name, "path": "engine", "skipped": "the check was interrupted"}
                                     for c in wanted[i + 1:]]
                save(a.out, result)
                print(f"interrupted: wrote what the stages had found to {a.out / 'gpu_check.json'}", file=sys.stderr)
                return 130
            save(a.out, result)
    print(render(result))
    print(f"wrote {a.out / 'gpu_check.json'}")
    bad = failures(result)
    if a.strict and bad:
        print("error: --strict: " + "; ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
