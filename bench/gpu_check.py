"""``make gpu-check`` (``python -m bench.gpu_check``): the decode engine on an 8B-shaped model at the planner's rows.

Llama-3.1-8B's architecture with random weights in bf16, built on the GPU (no download: time and memory depend on
shapes only). Every stage runs through :class:`snapstream_core.engine.Engine`, the path of a real run:

1. ``snapstream_decode``: SnapStream (1024 kept + a 1024-token ring), R1-on-AIME's rows by the planner;
2. ``full_decode``: the full cache at R1-on-AIME's rows by the planner, each row filled to the job's slots (the
   worst case of its reads);
3. ``prefill_120k``: one LongBench-shaped 120k-token prompt through the layer-major prefill (full cache);
4. ``equal_memory_full`` / ``equal_memory_snapstream``: a 128k-token prompt, the full cache at the rows the planner
   gives it, SnapStream at the rows that fit the same planned memory; ``equal_memory`` compares their tokens/s.

Per stage: compiled or not (and why), the planner's peak for the stage's shapes against
``torch.cuda.max_memory_allocated`` (and reserved - allocated: the allocator's slack), steady ms/step (a second run,
after the warm-up run that compiles and captures) against the bandwidth floor measured in the same run
(:mod:`bench.floor`), tokens/s, and the compiled step's logits against the eager step's under teacher forcing (the
same forced tokens into the same cache; max abs diff). ``<out>/gpu_check.json`` and ``gpu_check.md`` are written
after every stage; a stage whose time budget would pass the check's deadline (8 minutes) is skipped with the reason.

Without CUDA it refuses with one line; ``--tiny`` runs every stage on the CPU with a 2-layer model and short prompts
(a dry run of the code, no measurement). Imports nothing from hydra, omegaconf, datasets or lm_eval (a site GPU
stack may lack them: ``python -m bench.without hydra,omegaconf,datasets,lm_eval -m bench.gpu_check --tiny``).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "results" / "gpu"
TINY_OUT = REPO / "results" / "gpu_check_tiny"
GIB = 2**30
DEADLINE_S = 480
log = logging.getLogger("bench.gpu_check")

TINY_ARCH = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=8192, tie_word_embeddings=False)
LLAMA_8B_ARCH = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
                     rope_theta=500000.0, tie_word_embeddings=False)
R1_SAMPLING = dict(temperature=0.6, top_p=0.95)


@dataclass(frozen=True)
class Stage:
    """One measurement: ``compression`` on a ``prompt``-token prompt, decoding ``steps`` tokens per row, at the rows
    the planner gives the job (``job_prompt`` tokens, ``job_new`` new tokens, ``job_samples`` samples)."""

    name: str
    compression: dict
    prompt: int
    steps: int
    job_prompt: int
    job_new: int
    job_samples: int
    budget_s: float  # the stage is skipped when it would end past the deadline
    decode: bool = True  # False: the prefill alone (one row, one new token after it)
    fill_to_job_slots: bool = False  # prompt = the job's slots - steps (an appending row as full as the job's)
    note: str = ""


@dataclass
class Check:
    args: argparse.Namespace
    model: Any
    device: str
    usable: float | None  # bytes free on the device before the model was built (None on CPU)
    started: float = field(default_factory=time.perf_counter)
    result: dict = field(default_factory=dict)


def stages(tiny: bool) -> list[Stage]:
    if tiny:
        snap = {"method": "snapstream", "prompt_budget": 128, "recent": 32, "window": 16}
        return [
            Stage("snapstream_decode", snap, 256, 8, 64, 512, 60, 30),
            Stage("full_decode", {"method": "none"}, 0, 8, 64, 512, 60, 30, fill_to_job_slots=True),
            Stage("prefill_120k", {"method": "none"}, 2048, 1, 2048, 1, 1, 30, decode=False),
            Stage("equal_memory_full", {"method": "none"}, 1024, 8, 1024, 8, 4, 30),
            Stage("equal_memory_snapstream", snap, 1024, 8, 1024, 8, 4, 30),
        ]
    snap = {"method": "snapstream", "prompt_budget": 1024, "recent": 1024, "window": 32}
    return [
        Stage("snapstream_decode", snap, 2048, 64, 400, 32768, 1920, 100, note="R1 AIME, n=64"),
        Stage("full_decode", {"method": "none"}, 0, 64, 400, 32768, 1920, 100, fill_to_job_slots=True,
              note="R1 AIME, n=64; rows filled to the job's slots"),
        Stage("prefill_120k", {"method": "none"}, 120_000, 1, 120_000, 1, 1, 60, decode=False,
              note="LongBench-v2 shaped"),
        Stage("equal_memory_full", {"method": "none"}, 128_000, 32, 128_000, 32, 64, 110),
        Stage("equal_memory_snapstream", snap, 128_000, 32, 128_000, 32, 1024, 110),
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="CPU dry run with a 2-layer model (no measurement)")
    p.add_argument("--out", type=Path, default=None, help=f"folder of gpu_check.json/.md (default {OUT})")
    p.add_argument("--memory-gib", type=float, default=80.0, help="the card the planner budgets (plan.memory_gib)")
    p.add_argument("--max-rows", type=int, default=None, help="cap on the planner's rows (default: none; --tiny 3)")
    p.add_argument("--deadline-s", type=float, default=DEADLINE_S, help="skip stages that would end after this")
    p.add_argument("--no-compile", action="store_true", help="every stage eager (gen.compile=false)")
    p.add_argument("--only", default=None, help="comma-separated stage names (default: all)")
    a = p.parse_args(argv)
    a.out = a.out or (TINY_OUT if a.tiny else OUT)
    a.max_rows = a.max_rows or (3 if a.tiny else None)
    return a


def build_model(tiny: bool):
    """``(model, device)``: random weights, Llama-3.1-8B's shape in bf16 on CUDA, or TINY_ARCH in fp32 on CPU."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

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
    return {"name": "llama31_8b_shape", "family": "r1", "dtype": dtype, "max_context": c.max_position_embeddings,
            "shape": shape}


def plan_job(model, compression: dict, prompt: int, new_tokens: int, samples: int, memory_gib: float):
    """The planner's job (:mod:`evals.plan`, no hydra) for ``samples`` samples of one ``prompt``-token prompt."""
    from evals.plan import job_from_config

    plan = {"n_items": 1, "prompt_groups": [{"items": 1, "tokens": prompt}], "max_prompt_tokens": prompt,
            "gen_fraction": {"default": 1.0}}
    return job_from_config({
        "model": model_node(model), "task": {"name": "gpu_check", "plan": plan},
        "gen": {"max_new_tokens": new_tokens, "n_samples": samples}, "compression": dict(compression),
        "plan": {"memory_gib": memory_gib}, "run_dir": "", "out_root": "",
    })


def versions() -> dict[str, str | None]:
    import importlib.metadata as md

    import torch

    out: dict[str, str | None] = {"python": platform.python_version(), "torch": torch.__version__,
                                  "cuda": torch.version.cuda}
    for pkg in ("transformers", "huggingface_hub", "triton", "tokenizers", "safetensors"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def _reset(device: str) -> None:
    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peaks(device: str) -> tuple[float | None, float | None]:
    import torch

    if device != "cuda":
        return None, None
    torch.cuda.synchronize()
    allocated = torch.cuda.max_memory_allocated()
    return allocated / GIB, (torch.cuda.max_memory_reserved() - allocated) / GIB


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}".rstrip(": ")


def teacher_forced_diff(engine, steps: int = 4, rows: int = 8) -> float:
    """Max abs difference between the compiled step's logits (all rows, the shape it was compiled for) and the eager
    step's (SDPA, over the first ``rows`` rows only: a small batch keeps the eager path's memory small), the same
    forced tokens written to the same slots of the engine's cache (its last ``steps`` slots), at positions after the
    prompt."""
    import torch

    from snapstream_core.engine.step import decode_step

    cache = engine.cache
    R, S = cache.rows, cache.slots
    hi = min(R, rows)
    dev = engine.device
    gen = torch.Generator().manual_seed(1)
    worst = 0.0
    for k in range(steps):
        tokens = torch.randint(0, engine.model.config.vocab_size, (R, 1), generator=gen).to(dev)
        positions = torch.full((R, 1), S + k, dtype=torch.long, device=dev)
        slots = torch.full((R,), S - steps + k, dtype=torch.long, device=dev)
        eager = decode_step(engine.model, cache.view(hi, S), tokens[:hi], positions[:hi], slots[:hi])
        compiled = engine.step_fn(engine.model, cache, tokens, positions, slots)
        worst = max(worst, (eager.float() - compiled[:hi].float()).abs().max().item())
    return worst


def run_stage(check: Check, stage: Stage, rows: int, prompt: int) -> dict[str, Any]:
    """Two engine runs of ``rows`` samples of one prompt (warm-up, then timed), or one prefill: the stage's figures."""
    import torch

    import snapstream_core as ss
    from bench.floor import BandwidthProbe, floor_bytes
    from snapstream_core.engine import Engine, EngineItem

    a, model, device = check.args, check.model, check.device
    method = ss.compression_from_config(dict(stage.compression))
    compile_ = stage.decode and not a.no_compile
    sampling = ss.SamplingConfig(max_new_tokens=stage.steps + 1, **R1_SAMPLING)
    engine = Engine(model, method, sampling, eos=[], rows=rows, compile=compile_,
                    compile_backend="eager" if a.tiny else "inductor")
    ids = torch.randint(0, model.config.vocab_size, (prompt,), generator=torch.Generator().manual_seed(prompt))
    item = EngineItem(ids.tolist(), 0, tuple(range(rows)), stage.steps + 1)
    out: dict[str, Any] = {"compiled": False}
    if not stage.decode:
        _reset(device)
        finished = [f for batch in engine.run([item]) for f in batch]
        out["peak_measured_gib"], out["reserved_minus_allocated_gib"] = _peaks(device)
        out["prefill_s"] = finished[0].prefill_s
        out["tokens_per_s"] = prompt / finished[0].prefill_s
        out["why"] = "a prefill: eager layer-major chunks (not compiled)"
        return out
    _reset(device)
    start = time.perf_counter()
    for _ in engine.run([item]):  # warm-up: compile, graph capture, the row buffers
        pass
    out["warmup_s"] = time.perf_counter() - start
    out["compiled"] = engine.stats.compiled
    out["why"] = ("compiled" if engine.stats.compiled else "eager on this device (gen.compile=auto)") if compile_ \
        else "--no-compile"
    _reset(device)
    finished = [f for batch in engine.run([item]) for f in batch]
    out["peak_measured_gib"], out["reserved_minus_allocated_gib"] = _peaks(device)
    ms = 1000 * statistics.median(f.decode_s for f in finished) / stage.steps
    bandwidth = BandwidthProbe(device)()
    filled = engine.cache.slots if method.ring is not None else prompt + stage.steps // 2
    out.update(ms_per_step=ms, tokens_per_s=1000 * rows / ms, bandwidth_gb_s=bandwidth / 1e9,
               floor_ms=1000 * floor_bytes(model, filled, rows) / bandwidth)
    out["x_floor"] = out["ms_per_step"] / out["floor_ms"]
    if out["compiled"]:
        try:
            out["logits_max_abs_diff"] = teacher_forced_diff(engine)
        except Exception as exc:  # noqa: BLE001 - recorded beside the timings already measured
            out["logits_error"] = _one_line(exc)
    return out


def stage_record(check: Check, stage: Stage, context: dict) -> dict[str, Any]:
    """Plan the stage (rows, planned peak of its shapes), run it, and return its record (errors included)."""
    from evals.plan import choose_rows, peak_bytes

    a = check.args
    rec: dict[str, Any] = {"name": stage.name, "path": "engine", "compression": stage.compression,
                           "note": stage.note, "compiled": False, "peak_planned_gib": None, "peak_measured_gib": None,
                           "ms_per_step": None, "floor_ms": None, "tokens_per_s": None, "logits_max_abs_diff": None}
    elapsed = time.perf_counter() - check.started
    if elapsed + stage.budget_s > a.deadline_s:
        rec["skipped"] = f"time budget: {elapsed:.0f} s spent + {stage.budget_s:.0f} s > {a.deadline_s:.0f} s"
        return rec
    try:
        job = plan_job(check.model, stage.compression, stage.job_prompt, stage.job_new, stage.job_samples,
                       a.memory_gib)
        prompt = job.slots - stage.steps if stage.fill_to_job_slots else stage.prompt
        if stage.name == "equal_memory_snapstream" and "full_peak_bytes" in context:  # the full cache's memory
            shapes = plan_job(check.model, stage.compression, prompt, stage.steps + 1, stage.job_samples, a.memory_gib)
            planner_rows, limit = 1, context["full_peak_bytes"]
            while planner_rows < stage.job_samples and peak_bytes(shapes, planner_rows + 1) <= limit:
                planner_rows += 1
        else:
            planner_rows = choose_rows(job, memory_gib=a.memory_gib, usable=check.usable)
        # the stage's own shapes (a longer prompt than the job's fills the rows) may need fewer rows than the job
        run_job = plan_job(check.model, stage.compression, prompt, stage.steps + 1, planner_rows, a.memory_gib)
        fit = choose_rows(run_job, memory_gib=a.memory_gib, usable=check.usable)
        rows = min(planner_rows, fit, a.max_rows or planner_rows)
        shapes = plan_job(check.model, stage.compression, prompt, stage.steps + 1, rows, a.memory_gib)
        rec.update(planner_rows=planner_rows, rows=rows, prompt=prompt, steps=stage.steps,
                   peak_planned_gib=peak_bytes(shapes, rows) / GIB)
        if stage.name == "equal_memory_full":
            context["full_peak_bytes"] = peak_bytes(shapes, rows)
        if check.device == "cuda":
            import torch

            torch.compiler.reset()  # the last stage's graphs and their memory pools go
        start = time.perf_counter()
        rec.update(run_stage(check, stage, rows, prompt))
        rec["seconds"] = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - an OOM or a compile failure is this stage's finding; the next runs
        rec["error"] = _one_line(exc)
        log.warning("%s: %s", stage.name, rec["error"])
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


def render(result: dict) -> str:
    def f(x, fmt="{:.2f}"):
        return "" if x is None else fmt.format(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)

    lines = [f"# GPU check ({result['device']}, {result['when']})", "", result["status"], "",
             "Versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()), "",
             "| stage | path | compiled | rows (planner) | prompt | planned GiB | measured GiB | slack GiB | ms/step | "
             "floor ms | x floor | tokens/s | logits max abs diff | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["stages"]:
        note = r.get("error") or r.get("skipped") or r.get("why", "")
        lines.append(
            f"| {r['name']} | {r['path']} | {r['compiled']} "
            f"| {f(r.get('rows'), '{}')} ({f(r.get('planner_rows'), '{}')}) "
            f"| {f(r.get('prompt'), '{}')} | {f(r['peak_planned_gib'])} | {f(r['peak_measured_gib'])} "
            f"| {f(r.get('reserved_minus_allocated_gib'))} | {f(r['ms_per_step'])} | {f(r['floor_ms'])} "
            f"| {f(r.get('x_floor'))} | {f(r['tokens_per_s'], '{:.0f}')} | {f(r['logits_max_abs_diff'], '{:.3g}')} "
            f"| {note} {r.get('note', '')} |")
    lines += ["", "Equal memory: " + json.dumps(result.get("equal_memory", {}))]
    return "\n".join(lines) + "\n"


def save(out: Path, result: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (out / "gpu_check.md").write_text(render(result))


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s")
    import torch

    if not a.tiny and not torch.cuda.is_available():
        print("error: bench.gpu_check needs a CUDA device (torch sees none); --tiny runs a CPU dry run of the code",
              file=sys.stderr)
        return 2
    from snapstream_core.memory import device_usable_bytes

    usable = None if a.tiny else device_usable_bytes("cuda")
    model, device = build_model(a.tiny)
    check = Check(a, model, device, usable)
    result = check.result
    result.update({
        "device": "cpu (dry run, tiny model)" if a.tiny else torch.cuda.get_device_name(0),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "status": "DRY RUN on CPU with a 2-layer model: no figure here is a GPU measurement" if a.tiny
        else "measured on the GPU above with an 8B-shaped model (random weights, bf16)",
        "versions": versions(), "memory_gib": a.memory_gib,
        "usable_gib_at_start": None if usable is None else usable / GIB, "stages": [],
    })
    wanted = set(a.only.split(",")) if a.only else None
    context: dict[str, Any] = {}
    for stage in stages(a.tiny):
        if wanted is not None and stage.name not in wanted:
            continue
        log.info("stage %s", stage.name)
        result["stages"].append(stage_record(check, stage, context))
        result["equal_memory"] = equal_memory(result["stages"])
        result["seconds"] = time.perf_counter() - check.started
        save(a.out, result)
    print(render(result))
    print(f"wrote {a.out / 'gpu_check.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
