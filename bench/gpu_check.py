"""``make gpu-check`` (``python -m bench.gpu_check``): the decode engine on an 8B-shaped model at the planner's rows.

Llama-3.1-8B's architecture with random weights in bf16, built on the GPU (no download: time and memory depend on
shapes only). Every stage runs through :class:`snapstream_core.engine.Engine`, the path of a real run, in its own
process (:mod:`bench.gpu_stages`, the registry of stages) with a hard time limit, so a failure, a capture error or a
hang cannot poison the next stage:

1. ``snapstream_decode``: SnapStream (1024 kept + a 1024-token ring), R1-on-AIME's rows by the planner;
2. ``full_decode``: the full cache at R1-on-AIME's rows by the planner, each row filled to the job's slots (the
   worst case of its reads);
3. ``block_mask``: the same full-cache rows at a long and at a short prompt in one graph: the per-row block mask
   should make the short rows' step faster;
4. ``compaction``: R-KV (budget 512, interval 128) with its compaction graph: graphs compiled (decode +
   compaction), the compaction's share of the decode time, and compiled greedy tokens against eager for ``rkv``
   (and ``triattention`` when registered);
5. ``prefill_120k``: one LongBench-shaped 120k-token prompt through the layer-major prefill (full cache);
6. ``equal_memory_full`` / ``equal_memory_snapstream``: a 128k-token prompt, the full cache at the rows the planner
   gives it, SnapStream at the rows that fit the same planned memory; ``equal_memory`` compares their tokens/s.

Per stage (``gpu_check.json``): ``wall_s`` (the process: imports, model build, compile, measurement),
``first_step_s`` and ``record_s`` (compile, graph recording), ``recompiles``, ``host_reads_per_step`` (top-p on),
the planner's peak against ``torch.cuda.max_memory_allocated``, steady ms/step against the bandwidth floor by two
methods (a 4 GiB reduction and a copy), tokens/s, and the compiled step's logits against the eager step's under
teacher forcing. The whole check, imports included, ends by its deadline (8 minutes): each stage gets the smaller of
its limit and the time left, and is killed at it (recorded as ``stopped``); ``gpu_check.json`` and ``gpu_check.md``
are written after every stage. Stages of one shape share Inductor's on-disk cache across processes.

Without CUDA it refuses with one line; ``--tiny`` runs every stage on the CPU with a 2-layer model and short prompts,
compiled with Inductor and FlexAttention's block mask as on CUDA (a dry run of the code, no measurement). Imports
nothing from hydra, omegaconf, datasets or lm_eval (a site GPU stack may lack them:
``python -m bench.without hydra,omegaconf,datasets,lm_eval -m bench.gpu_check --tiny``; the stages inherit the block).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "results" / "gpu"
TINY_OUT = REPO / "results" / "gpu_check_tiny"
DEADLINE_S = 480
TINY_DEADLINE_S = 1200
MIN_STAGE_S = 1.0  # a stage with less time left than this is skipped
ORDER = ("snapstream_decode", "full_decode", "block_mask", "compaction", "prefill_120k", "equal_memory_full",
         "equal_memory_snapstream")
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
    a = p.parse_args(argv)
    a.out = a.out or (TINY_OUT if a.tiny else OUT)
    a.max_rows = a.max_rows or (3 if a.tiny else None)
    a.deadline_s = a.deadline_s or (TINY_DEADLINE_S if a.tiny else DEADLINE_S)
    if a.only:
        unknown = sorted(set(a.only.split(",")) - set(ORDER))
        if unknown:
            p.error(f"--only: unknown stage {', '.join(unknown)} (known: {', '.join(ORDER)})")
    return a


def stage_command(a: argparse.Namespace, name: str, result: Path, context: dict) -> list[str]:
    """The child's command line (under ``bench.without`` when this process runs under it)."""
    cmd = [sys.executable]
    blocked = os.environ.get("BENCH_WITHOUT")
    if blocked:
        cmd += ["-m", "bench.without", blocked]
    cmd += ["-m", "bench.gpu_stages", name, "--result", str(result), "--memory-gib", str(a.memory_gib),
            "--context", json.dumps(context)]
    cmd += ["--tiny"] * a.tiny + ["--no-compile"] * a.no_compile
    if a.max_rows:
        cmd += ["--max-rows", str(a.max_rows)]
    return cmd


def run_stage(a: argparse.Namespace, name: str, limit: float, context: dict) -> dict[str, Any]:
    """One stage in its own process, killed (with its children) at ``limit`` seconds: its record."""
    rec: dict[str, Any] = {"name": name, "path": "engine", "limit_s": round(limit, 1)}
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "stage.json"
        start = time.perf_counter()
        proc = subprocess.Popen(stage_command(a, name, result, context), cwd=REPO, start_new_session=True)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
        rec["wall_s"] = time.perf_counter() - start
        if result.exists():
            rec.update(json.loads(result.read_text()))
        if code is None:
            rec["stopped"] = f"stopped at its limit of {limit:.0f} s"
        elif code != 0 and "error" not in rec:
            rec["error"] = f"the stage's process exited with {code}"
    return rec


def equal_memory(records: list[dict]) -> dict[str, Any]:
    by = {r["name"]: r for r in records}
    full, snap = by.get("equal_memory_full", {}), by.get("equal_memory_snapstream", {})
    if not full.get("tokens_per_s") or not snap.get("tokens_per_s"):
        return {"error": "a measurement is missing"}
    return {"context": full.get("prompt"), "memory_gib": full.get("peak_planned_gib"), "full_rows": full["rows"],
            "full_tokens_per_s": full["tokens_per_s"], "snapstream_rows": snap["rows"],
            "snapstream_tokens_per_s": snap["tokens_per_s"],
            "ratio": snap["tokens_per_s"] / full["tokens_per_s"]}


COLUMNS = ("stage", "compiled", "rows (planner)", "prompt", "wall s", "first step s", "record s", "recompiles",
           "host reads/step", "planned GiB", "measured GiB", "ms/step", "floor ms", "floor ms (copy)", "x floor",
           "tokens/s", "logits max abs diff", "note")


def render(result: dict) -> str:
    def f(x, fmt="{:.2f}"):
        return "" if x is None else fmt.format(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)

    lines = [f"# GPU check ({result['device']}, {result['when']})", "", result["status"], "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in result.get("versions", {}).items()), "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in result["stages"]:
        note = r.get("error") or r.get("stopped") or r.get("skipped") or r.get("note", "")
        cells = [r["name"], f(r.get("compiled")), f"{f(r.get('rows'), '{}')} ({f(r.get('planner_rows'), '{}')})",
                 f(r.get("prompt"), "{}"), f(r.get("wall_s"), "{:.1f}"), f(r.get("first_step_s")),
                 f(r.get("record_s")), f(r.get("recompiles"), "{}"), f(r.get("host_reads_per_step")),
                 f(r.get("peak_planned_gib")), f(r.get("peak_measured_gib")), f(r.get("ms_per_step")),
                 f(r.get("floor_ms")), f(r.get("floor_copy_ms")), f(r.get("x_floor")),
                 f(r.get("tokens_per_s"), "{:.0f}"), f(r.get("logits_max_abs_diff"), "{:.3g}"), note]
        lines.append("| " + " | ".join(cells) + " |")
    block = next((r for r in result["stages"] if r["name"] == "block_mask" and r.get("long_over_short")), None)
    if block:
        lines += ["", f"Block mask: {block['prompt']}-token rows {block['ms_per_step']:.2f} ms/step, "
                      f"{block['short_prompt']}-token rows {block['short_ms_per_step']:.2f} ms/step "
                      f"(x{block['long_over_short']:.2f}) in one graph."]
    comp = next((r for r in result["stages"] if r["name"] == "compaction" and "graphs" in r), None)
    if comp:
        lines += ["", f"Compaction: {comp['graphs']} graphs (decode step + compaction), {comp['compaction_calls']} "
                      f"calls, {100 * comp['compaction_share']:.1f}% of the decode time; compiled greedy tokens equal "
                      f"eager: {comp.get('rkv_tokens_equal_eager')} (rkv)."]
    lines += ["", "Equal memory: " + json.dumps(result.get("equal_memory", {}))]
    return "\n".join(lines) + "\n"


def save(out: Path, result: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (out / "gpu_check.md").write_text(render(result))


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()  # the deadline counts from here: imports and every stage's process included
    a = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")
    import torch

    if not a.tiny and not torch.cuda.is_available():
        print("error: bench.gpu_check needs a CUDA device (torch sees none); --tiny runs a CPU dry run of the code",
              file=sys.stderr)
        return 2
    result: dict[str, Any] = {
        "device": "cpu (dry run, tiny model)" if a.tiny else torch.cuda.get_device_name(0),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "status": "DRY RUN on CPU with a 2-layer model: no figure here is a GPU measurement" if a.tiny
        else "measured on the GPU above with an 8B-shaped model (random weights, bf16)",
        "memory_gib": a.memory_gib, "deadline_s": a.deadline_s, "stages": [],
    }
    wanted = set(a.only.split(",")) if a.only else set(ORDER)
    context: dict[str, Any] = {}
    from bench.gpu_stages import STAGES

    for name in [n for n in ORDER if n in wanted]:
        spec = STAGES[name]
        left = a.deadline_s - (time.perf_counter() - started)
        own = a.stage_limit_s or (spec.tiny_limit_s if a.tiny else spec.limit_s)
        if left < MIN_STAGE_S:
            rec = {"name": name, "path": "engine", "skipped": f"deadline: {left:.1f} s left of {a.deadline_s:.0f} s"}
        else:
            log.info("stage %s (limit %.0f s)", name, min(own, left))
            rec = run_stage(a, name, min(own, left), context)
        context.update(rec.pop("pass_on", {}))
        if "versions" in rec:
            result["versions"] = rec.pop("versions")
        result["stages"].append(rec)
        result["equal_memory"] = equal_memory(result["stages"])
        result["seconds"] = time.perf_counter() - started
        save(a.out, result)
    print(render(result))
    print(f"wrote {a.out / 'gpu_check.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
