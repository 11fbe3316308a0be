"""``make gpu-check`` (``python -m bench.gpu_check``): the GPU check on an 8B-shaped model.

Llama-3.1-8B's architecture with random weights in bf16, built on the GPU (no download: timing and memory depend on
shapes only). It writes ``bench/results/gpu/check/check.json`` and ``check.md`` with:

1. ``tokens``: compiled decode's greedy tokens equal eager decode's (full cache and SnapStream);
2. ``peak``: the planner's peak (:func:`evals.plan.peak_bytes`) against ``torch.cuda.max_memory_allocated`` for a
   prefill plus decode of the planner's rows;
3. ``decode``: decode ms/token against the bandwidth floor (weights + KV read per step ÷ the bandwidth measured in
   the same run) at 8k, 32k and 128k, at batch 1 and at the planner's rows;
4. ``equal_memory``: tokens/s of the full cache and of SnapStream at 128k in the same GPU memory (the full cache's
   planned peak);
5. ``wasted``: the share of decode steps spent on finished rows for an AIME-like spread of lengths, for a batch that
   runs until its longest sample ends and for row retirement (a simulation of the schedule, not a timing);
6. ``planner``: the paper grid's GPU-hours by the planner (goal: at most 250).

Without CUDA it refuses with one line; ``--tiny`` runs the same steps on the CPU with a 2-layer model and short
contexts (a dry run of the code, no measurement; tests/test_gpu_check.py). Each step records its own error instead
of stopping the check.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "results" / "gpu" / "check"
TINY_OUT = REPO / "results" / "gpu_check_tiny"
GIB = 2**30
log = logging.getLogger("bench.gpu_check")

TINY_ARCH = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=False)
SNAPSTREAM = {"method": "snapstream", "prompt_budget": 1024, "recent": 1024}
TINY_SNAPSTREAM = {"method": "snapstream", "prompt_budget": 128, "recent": 32, "window": 16}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="CPU dry run with a 2-layer model (no measurement)")
    p.add_argument("--out", type=Path, default=None, help=f"folder of check.json/check.md (default {OUT})")
    p.add_argument("--contexts", default=None, help="comma-separated prompt lengths (default 8192,32768,131072)")
    p.add_argument("--steps", type=int, default=None, help="decode steps timed per measurement (default 64)")
    p.add_argument("--memory-gib", type=float, default=80.0, help="the planner's budget (plan.memory_gib)")
    p.add_argument("--max-rows", type=int, default=256, help="cap on the planner's rows per measurement")
    p.add_argument("--no-planner", action="store_true", help="skip planning the paper grid")
    a = p.parse_args(argv)
    a.contexts = [int(x) for x in (a.contexts or ("256,512" if a.tiny else "8192,32768,131072")).split(",")]
    a.steps = a.steps or (8 if a.tiny else 64)
    a.out = a.out or (TINY_OUT if a.tiny else OUT)
    return a


def build_model(tiny: bool):
    """``(model, device)``: random weights, Llama-3.1-8B's shape in bf16 on CUDA, or TINY_ARCH in fp32 on CPU."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from bench.models import LLAMA_8B_ARCH

    device, dtype = ("cpu", torch.float32) if tiny else ("cuda", torch.bfloat16)
    config = LlamaConfig(**(TINY_ARCH if tiny else LLAMA_8B_ARCH))
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM._from_config(config, dtype=dtype)
    return model.eval(), device


def model_node(model) -> dict[str, Any]:
    """The planner's ``model`` node of this model (its shape counted from the model itself)."""
    c = model.config
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    shape = dict(n_params=sum(p.numel() for p in model.parameters()), n_layers=c.num_hidden_layers,
                 hidden=c.hidden_size, intermediate=c.intermediate_size, n_heads=c.num_attention_heads,
                 n_kv_heads=c.num_key_value_heads, head_dim=c.hidden_size // c.num_attention_heads,
                 vocab=c.vocab_size, max_positions=c.max_position_embeddings, dtype=dtype)
    return {"name": "llama31_8b_shape", "family": "llama3", "dtype": dtype, "max_context": c.max_position_embeddings,
            "shape": shape}


def job(model, compression: dict, context: int, new_tokens: int, samples: int, memory_gib: float):
    """The planner's job for ``samples`` samples of one ``context``-token prompt under ``compression``."""
    from evals.plan import job_from_config

    plan = {"n_items": 1, "prompt_groups": [{"items": 1, "tokens": context}], "max_prompt_tokens": context,
            "gen_fraction": {"default": 1.0}}
    return job_from_config({
        "model": model_node(model), "task": {"name": "gpu_check", "plan": plan},
        "gen": {"max_new_tokens": new_tokens, "n_samples": samples}, "compression": dict(compression),
        "plan": {"memory_gib": memory_gib}, "run_dir": "", "out_root": "",
    })


def run_generate(model, device: str, context: int, compression: dict, rows: int, steps: int, compile_: bool,
                 tiny: bool) -> dict[str, Any]:
    """One prompt, ``rows`` greedy samples of ``steps`` tokens (no EOS): tokens, decode ms/step, peak bytes."""
    import torch

    import snapstream_core as ss
    from snapstream_core.generate import SamplingConfig, generate

    method = ss.compression_from_config(compression)
    gen = torch.Generator().manual_seed(context)
    prompt = torch.randint(0, model.config.vocab_size, (context,), generator=gen).tolist()
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    out = generate(model, [prompt], method, SamplingConfig(max_new_tokens=steps, n=rows),
                   eos_token_ids=[], pad_token_id=0, compile=compile_,
                   compile_backend="eager" if tiny else "inductor")
    peak = torch.cuda.max_memory_allocated() if cuda else None
    n_steps = max(1, len(out.tokens[0][0]) - 1)
    return {"tokens": out.tokens[0], "ms_per_step": 1000 * out.decode_s / n_steps, "peak_bytes": peak,
            "compiled": out.compiled, "first_step_s": out.first_step_s}


def guarded(name: str, fn, *args, **kwargs) -> Any:
    """``fn``'s result, or ``{"error": one line}`` (an OOM or a compile failure is a finding, not a crash)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every failure is recorded and the check goes on
        line = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        log.warning("%s: %s: %s", name, type(exc).__name__, line)
        return {"error": f"{type(exc).__name__}: {line}"}


def check_tokens(model, device: str, a: argparse.Namespace) -> list[dict]:
    out = []
    for compression in ({"method": "none"}, TINY_SNAPSTREAM if a.tiny else SNAPSTREAM):
        ctx = a.contexts[0]
        eager = guarded("eager", run_generate, model, device, ctx, compression, 1, a.steps, False, a.tiny)
        compiled = guarded("compiled", run_generate, model, device, ctx, compression, 1, a.steps, True, a.tiny)
        ok = "error" not in eager and "error" not in compiled
        out.append({"method": compression["method"], "context": ctx, "steps": a.steps,
                    "equal": ok and eager["tokens"] == compiled["tokens"],
                    "compiled_ran": ok and compiled["compiled"],
                    "error": eager.get("error") or compiled.get("error")})
    return out


def check_decode(model, device: str, a: argparse.Namespace) -> list[dict]:
    """Peak and ms/step against the floor, batch 1 and the planner's rows, per context and method."""
    from bench.floor import BandwidthProbe, floor_bytes
    from evals.plan import choose_rows, peak_bytes

    probe = BandwidthProbe(device)
    rows_out = []
    for ctx in a.contexts:
        for compression in ({"method": "none"}, TINY_SNAPSTREAM if a.tiny else SNAPSTREAM):
            j = job(model, compression, ctx, a.steps, a.max_rows, a.memory_gib)
            planned_rows = guarded("rows", choose_rows, j)
            for rows in sorted({1, planned_rows if isinstance(planned_rows, int) else 1}):
                r = guarded("decode", run_generate, model, device, ctx, compression, rows, a.steps, not a.tiny,
                            a.tiny)
                bandwidth = probe()
                kv_tokens = j.slots if compression["method"] == "snapstream" else ctx + a.steps // 2
                floor_ms = 1000 * floor_bytes(model, kv_tokens, rows) / bandwidth
                row = {"method": compression["method"], "context": ctx, "rows": rows, "planner_rows": planned_rows,
                       "planned_peak_gib": peak_bytes(j, rows) / GIB, "bandwidth_gb_s": bandwidth / 1e9,
                       "floor_ms": floor_ms}
                if "error" in r:
                    row["error"] = r["error"]
                else:
                    row.update(ms_per_step=r["ms_per_step"], x_floor=r["ms_per_step"] / floor_ms,
                               tokens_per_s=1000 * rows / r["ms_per_step"],
                               measured_peak_gib=None if r["peak_bytes"] is None else r["peak_bytes"] / GIB)
                rows_out.append(row)
    return rows_out


def equal_memory(decode: list[dict]) -> dict:
    """At the longest context: SnapStream's tokens/s at the rows that fit the full cache's planned peak."""
    ctx = max(r["context"] for r in decode)
    full = [r for r in decode if r["context"] == ctx and r["method"] == "none" and "tokens_per_s" in r]
    snap = [r for r in decode if r["context"] == ctx and r["method"] == "snapstream" and "tokens_per_s" in r]
    if not full or not snap:
        return {"context": ctx, "error": "a measurement is missing"}
    f = max(full, key=lambda r: r["rows"])
    budget = f["planned_peak_gib"]
    fit = [r for r in snap if r["planned_peak_gib"] <= budget] or [min(snap, key=lambda r: r["rows"])]
    s = max(fit, key=lambda r: r["rows"])
    return {"context": ctx, "memory_gib": budget, "full_rows": f["rows"], "full_tokens_per_s": f["tokens_per_s"],
            "snapstream_rows": s["rows"], "snapstream_tokens_per_s": s["tokens_per_s"],
            "ratio": s["tokens_per_s"] / f["tokens_per_s"]}


def wasted_steps(samples: int = 1920, rows: tuple[int, ...] = (16, 64, 256), max_new: int = 32768,
                 seed: int = 0) -> list[dict]:
    """Row-steps spent on finished rows for an AIME-like spread (R1 on AIME24 with n=64: 1920 samples, lognormal
    lengths, median ~11k tokens, cut at ``max_new``): a batch of ``r`` rows that runs until its longest sample ends,
    against row retirement (a finished row takes the next pending sample at once; only the job's end idles)."""
    rng = random.Random(seed)
    lengths = [min(max_new, max(1, int(rng.lognormvariate(math.log(11000), 0.6)))) for _ in range(samples)]
    total = sum(lengths)
    out = []
    for r in rows:
        batched = sum(r * max(lengths[i:i + r]) for i in range(0, samples, r))
        ends = [0] * r
        for n in lengths:
            k = ends.index(min(ends))
            ends[k] += n
        out.append({"samples": samples, "rows": r, "mean_tokens": total / samples,
                    "batch_wasted_share": 1 - total / batched, "retirement_wasted_share": 1 - total / (r * max(ends)),
                    "note": "a simulated schedule of the lengths, not a timing; the engine's own count replaces it"})
    return out


def planner_total() -> dict:
    """The paper grid's GPU-hours by the planner (goal: <= 250)."""
    import contextlib
    import io
    import tempfile

    from evals.plan.__main__ import main

    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()) as buf:
        code = main(["-m", "+experiment=paper", f"out_root={tmp}"])
    text = buf.getvalue()
    hours = float(text.split("GPU-hours: ", 1)[1].split()[0]) if "GPU-hours: " in text else None
    return {"exit": code, "gpu_hours": hours, "goal": 250, "meets_goal": hours is not None and hours <= 250}


def render(result: dict) -> str:
    lines = [f"# GPU check ({result['device']}, {result['when']})", "", result["status"], "",
             "| method | context | rows | planner rows | planned peak GiB | measured peak GiB | ms/step | floor ms | "
             "x floor | tokens/s |", "|---|---|---|---|---|---|---|---|---|---|"]

    def f(x, fmt="{:.2f}"):
        return "" if x is None else fmt.format(x) if isinstance(x, (int, float)) else str(x)

    for r in result["decode"]:
        lines.append(f"| {r['method']} | {r['context']} | {r['rows']} | {r['planner_rows']} | "
                     f"{f(r['planned_peak_gib'])} | {f(r.get('measured_peak_gib'))} | {f(r.get('ms_per_step'))} | "
                     f"{f(r['floor_ms'])} | {f(r.get('x_floor'))} | {f(r.get('tokens_per_s'), '{:.0f}')} "
                     f"{r.get('error', '')}|")
    lines += ["", "Compiled vs eager tokens: " + "; ".join(
        f"{t['method']} {'equal' if t['equal'] else 'DIFFER'}{' (' + t['error'] + ')' if t['error'] else ''}"
        for t in result["tokens"]),
        "Equal memory: " + json.dumps(result["equal_memory"]),
        "Wasted steps (simulated schedule): " + "; ".join(
            f"{w['rows']} rows: batch {w['batch_wasted_share']:.1%}, retirement {w['retirement_wasted_share']:.1%}"
            for w in result["wasted"]),
        "Planner: " + json.dumps(result["planner"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")
    import torch

    if not a.tiny and not torch.cuda.is_available():
        print("error: bench.gpu_check needs a CUDA device (torch sees none); --tiny runs a CPU dry run of the code",
              file=sys.stderr)
        return 2
    model, device = build_model(a.tiny)
    result = {
        "device": "cpu (dry run, tiny model)" if a.tiny else torch.cuda.get_device_name(0),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "status": "DRY RUN on CPU with a 2-layer model: no figure here is a GPU measurement" if a.tiny
        else "measured on the GPU above with an 8B-shaped model (random weights, bf16)",
        "torch": torch.__version__, "contexts": a.contexts, "steps": a.steps, "memory_gib": a.memory_gib,
    }
    result["tokens"] = check_tokens(model, device, a)
    result["decode"] = check_decode(model, device, a)
    result["equal_memory"] = equal_memory(result["decode"])
    result["wasted"] = wasted_steps()
    result["planner"] = {"skipped": True} if a.no_planner else guarded("planner", planner_total)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "check.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (a.out / "check.md").write_text(render(result))
    print(render(result))
    print(f"wrote {a.out / 'check.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
