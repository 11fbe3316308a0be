"""The GPU check's stages: a registry of small functions, each run in its own process by :mod:`bench.gpu_check`.

    python -m bench.gpu_stages NAME [--tiny] [--no-compile] --result FILE [--context JSON] ...

A stage builds the model (Llama-3.1-8B's shape with random bf16 weights on CUDA; a 2-layer fp32 model on the CPU
with ``--tiny``), plans its rows with the planner (:mod:`evals.plan`, no hydra), runs the engine
(:class:`snapstream_core.engine.Engine`, the path of a real run) and writes one JSON record to ``--result``. A
decode stage runs its item twice in one engine: a warm-up run that compiles and records the graph
(``first_step_s``, ``record_s``), then a timed run whose blocks of steps between host reads give the steady ms/step
(the rows' start-up, i.e. prefill and row loads, falls outside the blocks). It also reports ``recompiles`` (graphs
compiled past the first), ``host_reads_per_step`` (counted in one block of the timed run, :mod:`bench.host_reads`),
the bandwidth floor measured in the same process by two methods (:mod:`bench.floor`), and the compiled step's logits
against the eager step's under teacher forcing, under ``no_grad``, on the graph the engine replays.

``--tiny`` compiles with Inductor and FlexAttention with the per-row block mask, as on CUDA. A stage is one function
registered with :func:`stage`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = 2**30
TINY_ARCH = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=8192, tie_word_embeddings=False)
LLAMA_8B_ARCH = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
                     rope_theta=500000.0, tie_word_embeddings=False)
R1_SAMPLING = dict(temperature=0.6, top_p=0.95)  # top-p on: the sampler must not read the device either
FLOOR_MIB = {"cuda": 4096, "cpu": 64}  # CUDA: a read long enough to dwarf a kernel launch (bench.floor)


@dataclass(frozen=True)
class Shape:
    """``compression`` on a ``prompt``-token prompt, ``steps`` decode steps per row, at the rows the planner gives
    the job (``job_prompt`` tokens, ``job_new`` new tokens, ``job_samples`` samples)."""

    compression: dict
    prompt: int
    steps: int
    job_prompt: int
    job_new: int
    job_samples: int
    fill_to_job_slots: bool = False  # prompt = the job's slots - steps (an appending row as full as the job's)


SNAP_8B = {"method": "snapstream", "prompt_budget": 1024, "recent": 1024, "window": 32}
SNAP_TINY = {"method": "snapstream", "prompt_budget": 128, "recent": 32, "window": 16}
SHAPES: dict[str, tuple[Shape, Shape]] = {  # name: (8B on CUDA, --tiny)
    "snapstream_decode": (Shape(SNAP_8B, 2048, 64, 400, 32768, 1920), Shape(SNAP_TINY, 256, 8, 64, 512, 60)),
    "full_decode": (Shape({"method": "none"}, 0, 64, 400, 32768, 1920, True),
                    Shape({"method": "none"}, 0, 8, 64, 512, 60, True)),
    "block_mask": (Shape({"method": "none"}, 0, 64, 400, 32768, 1920, True),
                   Shape({"method": "none"}, 0, 8, 64, 512, 60, True)),
    "prefill_120k": (Shape({"method": "none"}, 120_000, 1, 120_000, 1, 1),
                     Shape({"method": "none"}, 2048, 1, 2048, 1, 1)),
    "equal_memory_full": (Shape({"method": "none"}, 128_000, 32, 128_000, 32, 64),
                          Shape({"method": "none"}, 1024, 8, 1024, 8, 4)),
    "equal_memory_snapstream": (Shape(SNAP_8B, 128_000, 32, 128_000, 32, 1024), Shape(SNAP_TINY, 1024, 8, 1024, 8, 4)),
    "compaction": (Shape({"method": "rkv", "budget": 512, "interval": 128}, 2048, 384, 400, 32768, 1920),
                   Shape({"method": "rkv", "budget": 32, "interval": 8}, 128, 12, 64, 512, 60)),
}


@dataclass
class Ctx:
    """What a stage function gets: the arguments, the model, its device, the memory usable at the start (CUDA), the
    figures earlier stages passed on (``context``) and the record it fills."""

    args: argparse.Namespace
    model: Any
    device: str
    usable: float | None
    context: dict
    record: dict = field(default_factory=dict)

    @property
    def shape(self) -> Shape:
        return SHAPES[self.record["name"]][1 if self.args.tiny else 0]


@dataclass(frozen=True)
class StageSpec:
    name: str
    fn: Callable[[Ctx], None]
    limit_s: float  # on CUDA; the whole process (imports, model build, compile) stops at it
    tiny_limit_s: float
    note: str = ""


STAGES: dict[str, StageSpec] = {}


def stage(name: str, limit_s: float, tiny_limit_s: float = 240, note: str = "") -> Callable:
    """Register a stage function under ``name``."""
    def register(fn: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
        STAGES[name] = StageSpec(name, fn, limit_s, tiny_limit_s, note)
        return fn
    return register


# ---------------------------------------------------------------------------------------------------- the model
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
    from evals.plan import job_of
    from snapstream_core import compression_from_config

    plan = {"n_items": 1, "prompt_groups": [{"items": 1, "tokens": prompt}], "max_prompt_tokens": prompt,
            "gen_fraction": {"default": 1.0}}
    method = compression_from_config(dict(compression))
    return job_of(model_node(model), {"name": "gpu_check", "plan": plan}, method,
                  tag=str(compression.get("tag", method.method)), max_new_tokens=new_tokens, n_samples=samples,
                  memory_gib=memory_gib)


def plan_rows(ctx: Ctx) -> tuple[int, int]:
    """(rows, prompt) of the stage: the planner's rows for the job, fewer when the stage's own (longer) prompt needs
    it, at most ``--max-rows``; ``equal_memory_snapstream`` takes the rows that fit the full cache's planned peak."""
    from evals.plan import choose_rows, peak_bytes

    s, a, rec = ctx.shape, ctx.args, ctx.record
    job = plan_job(ctx.model, s.compression, s.job_prompt, s.job_new, s.job_samples, a.memory_gib)
    prompt = job.slots - s.steps if s.fill_to_job_slots else s.prompt
    if rec["name"] == "equal_memory_snapstream" and "full_peak_bytes" in ctx.context:
        shapes = plan_job(ctx.model, s.compression, prompt, s.steps + 1, s.job_samples, a.memory_gib)
        planner_rows = 1
        while planner_rows < s.job_samples and peak_bytes(shapes, planner_rows + 1) <= ctx.context["full_peak_bytes"]:
            planner_rows += 1
    else:
        planner_rows = choose_rows(job, memory_gib=a.memory_gib, usable=ctx.usable)
    run_job = plan_job(ctx.model, s.compression, prompt, s.steps + 1, planner_rows, a.memory_gib)
    rows = min(planner_rows, choose_rows(run_job, memory_gib=a.memory_gib, usable=ctx.usable),
               a.max_rows or planner_rows)
    shapes = plan_job(ctx.model, s.compression, prompt, s.steps + 1, rows, a.memory_gib)
    rec.update(planner_rows=planner_rows, rows=rows, prompt=prompt, steps=s.steps,
               peak_planned_gib=peak_bytes(shapes, rows) / GIB)
    rec["planned_bytes"] = peak_bytes(shapes, rows)
    return rows, prompt


# ---------------------------------------------------------------------------------------------------- measurements
def _reset(device: str) -> None:
    import gc

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


def make_engine(ctx: Ctx, rows: int, steps: int, reads=None):
    import snapstream_core as ss
    from snapstream_core.engine import Engine

    a = ctx.args
    method = ss.compression_from_config(dict(ctx.shape.compression))
    compiled = not a.no_compile
    attention = "flex" if compiled else "sdpa"  # FlexAttention with the block mask, also compiled on the CPU
    return Engine(ctx.model, method, ss.SamplingConfig(max_new_tokens=steps + 1, **R1_SAMPLING), eos=[], rows=rows,
                  compile=compiled, compile_backend="inductor", attention=attention,
                  planned_bytes=ctx.record.get("planned_bytes"),
                  step_context=None if reads is None else reads.context)


def make_item(ctx: Ctx, prompt: int, rows: int, steps: int):
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


def floor(ctx: Ctx, filled: int, rows: int) -> dict[str, float]:
    """The bandwidth floor of a step that reads the weights and ``filled`` K/V entries per row, by two methods."""
    from bench.floor import BandwidthProbe, floor_bytes

    probe = BandwidthProbe(ctx.device, mib=FLOOR_MIB[ctx.device])
    read, copy = probe(), probe.copy()
    nbytes = floor_bytes(ctx.model, filled, rows)
    return {"bandwidth_gb_s": read / 1e9, "copy_gb_s": copy / 1e9, "floor_ms": 1000 * nbytes / read,
            "floor_copy_ms": 1000 * nbytes / copy, "floor_read_mib": FLOOR_MIB[ctx.device]}


def decode_measure(ctx: Ctx, engine, item, reads: BlockReads) -> dict[str, Any]:
    """Warm-up run (compile, graph recording), then a timed run of ``item``: steady ms/step, host reads per step."""
    out: dict[str, Any] = {}
    _reset(ctx.device)
    start = time.perf_counter()
    for _ in engine.run([item]):
        pass
    out.update(warmup_s=time.perf_counter() - start, first_step_s=engine.stats.first_step_s,
               record_s=engine.stats.record_s, compiled=engine.stats.compiled)
    _reset(ctx.device)
    before = len(engine.stats.blocks)
    reads.at, reads.seen = 2, 0  # the second block of the timed run (the first may start rows)
    finished = [f for batch in engine.run([item]) for f in batch]
    out["peak_measured_gib"], out["reserved_minus_allocated_gib"] = _peaks(ctx.device)
    blocks = engine.stats.blocks[before:]
    counted = blocks[1][0] if len(blocks) > 1 else 0
    out["ms_per_step"] = steady_ms(blocks, {1})
    out["host_reads_per_step"] = reads.counter.count / counted if counted else None
    if reads.counter.cuda:
        out["cuda_syncs_per_step"] = reads.counter.cuda_syncs / counted if counted else None
    out["decode_s_median"] = statistics.median(f.decode_s for f in finished)
    return out


def teacher_forced_diff(engine, steps: int = 4, rows: int = 8) -> float:
    """Max abs difference between the compiled step's logits (all rows, the graph the engine replays, under
    ``no_grad`` and with ``filled`` as the engine passes it) and the eager step's (SDPA, over the first ``rows`` rows:
    a small batch keeps the eager path's memory small), the same forced tokens written to the same slots of the
    engine's cache (its last ``steps`` slots), at positions after the prompt."""
    import torch

    from snapstream_core.engine.step import decode_step

    cache = engine.cache
    R, S = cache.rows, cache.slots
    hi, dev = min(R, rows), engine.device
    gen = torch.Generator().manual_seed(1)
    filled = torch.full((R,), S, dtype=torch.long, device=dev) if engine.bounded else None
    worst = 0.0
    with torch.no_grad():
        for k in range(steps):
            tokens = torch.randint(0, engine.model.config.vocab_size, (R, 1), generator=gen).to(dev)
            positions = torch.full((R, 1), S + k, dtype=torch.long, device=dev)
            slots = torch.full((R,), S - steps + k, dtype=torch.long, device=dev)
            compiled = engine.step_fn(engine.model, cache, tokens, positions, slots, filled)[:hi].clone()
            eager = decode_step(engine.model, cache.view(hi, S), tokens[:hi], positions[:hi], slots[:hi])
            worst = max(worst, (eager.float() - compiled.float()).abs().max().item())
    return worst


def finish_decode(ctx: Ctx, engine, rows: int, filled: int) -> None:
    rec = ctx.record
    if rec.get("ms_per_step"):
        rec.update(floor(ctx, filled, rows))
        rec["tokens_per_s"] = 1000 * rows / rec["ms_per_step"]
        rec["x_floor"] = rec["ms_per_step"] / rec["floor_ms"]
    if rec.get("compiled"):
        rec["logits_max_abs_diff"] = teacher_forced_diff(engine)
    rec["compiles"] = engine.stats.compiles
    rec["recompiles"] = max(0, engine.stats.compiles - 1) if engine.stats.compiled else 0


# ---------------------------------------------------------------------------------------------------- the stages
def _decode_stage(ctx: Ctx) -> None:
    rows, prompt = plan_rows(ctx)
    steps = ctx.shape.steps
    reads = BlockReads()
    engine = make_engine(ctx, rows, steps, reads)
    ctx.record.update(decode_measure(ctx, engine, make_item(ctx, prompt, rows, steps), reads))
    method = engine.method
    finish_decode(ctx, engine, rows, engine.cache.slots if method.ring is not None else prompt + steps // 2)
    if ctx.record["name"] == "equal_memory_full":
        ctx.record["pass_on"] = {"full_peak_bytes": ctx.record["planned_bytes"]}


for _name, _limit in (("snapstream_decode", 110), ("full_decode", 100), ("equal_memory_full", 110),
                      ("equal_memory_snapstream", 110)):
    stage(_name, _limit)(_decode_stage)


@stage("block_mask", 110, note="the full cache's rows at a long and a short prompt, one graph")
def block_mask(ctx: Ctx) -> None:
    """The same rows and slots at the job's longest prompt and at 1/8 of it: with the per-row block mask the short
    rows read their filled blocks only, so their step should be faster by about the K/V share it skips."""
    rows, prompt = plan_rows(ctx)
    steps = ctx.shape.steps
    reads = BlockReads()
    engine = make_engine(ctx, rows, steps, reads)
    long_item = make_item(ctx, prompt, rows, steps)
    ctx.record.update(decode_measure(ctx, engine, long_item, reads))
    long_ms = ctx.record["ms_per_step"]
    short = max(1, prompt // 8)
    reads = BlockReads()
    engine.step_context = reads.context
    short_out = decode_measure(ctx, engine, make_item(ctx, short, rows, steps), reads)
    ctx.record.update(short_prompt=short, short_ms_per_step=short_out["ms_per_step"],
                      short_host_reads_per_step=short_out["host_reads_per_step"])
    if long_ms and short_out["ms_per_step"]:
        ctx.record["long_over_short"] = long_ms / short_out["ms_per_step"]
        fl = floor(ctx, short + steps // 2, rows)
        ctx.record["short_floor_ms"] = fl["floor_ms"]
    finish_decode(ctx, engine, rows, prompt + steps // 2)


@stage("prefill_120k", 60, note="LongBench-v2 shaped; eager layer-major chunks (not compiled)")
def prefill(ctx: Ctx) -> None:
    rows, prompt = plan_rows(ctx)
    engine = make_engine(ctx, 1, 0)  # one new token: no decode step, nothing compiled
    _reset(ctx.device)
    finished = [f for batch in engine.run([make_item(ctx, prompt, 1, 0)]) for f in batch]
    ctx.record["peak_measured_gib"], ctx.record["reserved_minus_allocated_gib"] = _peaks(ctx.device)
    ctx.record.update(prefill_s=finished[0].prefill_s, tokens_per_s=prompt / finished[0].prefill_s, compiled=False,
                      recompiles=0, compiles=0)


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


class TimedCompaction:
    """Wraps an engine's compaction call (its ``Compactor.fn``) to time it, the device synchronised around it."""

    def __init__(self, fn, cuda: bool):
        self.fn, self.cuda, self.seconds, self.calls = fn, cuda, 0.0, 0

    def __call__(self, *args, **kwargs):
        import torch

        if self.cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = self.fn(*args, **kwargs)
        if self.cuda:
            torch.cuda.synchronize()
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return out


@stage("compaction", 140, note="decode-time compaction (rkv; triattention when registered)")
def compaction(ctx: Ctx) -> None:
    """The decode-time methods' compaction graph: for each of ``rkv`` and ``triattention`` (when
    registered), the compiled engine's greedy tokens against the eager engine's on the stage's model and prompt
    (``tokens_equal_eager``), the graphs compiled by its run (decode step + compaction: 2), and for ``rkv`` at budget
    512 / interval 128 (32 / 8 with ``--tiny``) the compaction's share of the decode time."""
    import snapstream_core as ss
    from snapstream_core.engine import Engine, EngineItem
    from snapstream_core.methods import METHODS

    rows, prompt = plan_rows(ctx)
    steps, rec = ctx.shape.steps, ctx.record
    reads = BlockReads()
    before = _graphs()
    engine = make_engine(ctx, rows, steps, reads)
    item = make_item(ctx, prompt, rows, steps)
    engine_run = decode_measure(ctx, engine, item, reads)  # the warm-up run creates the compactor
    rec.update(engine_run)
    rec["graphs"] = _graphs() - before
    timed = TimedCompaction(engine.compactor.fn, ctx.device == "cuda")
    engine.compactor.fn = timed
    start = time.perf_counter()
    for _ in engine.run([item]):
        pass
    rec.update(compaction_calls=timed.calls, compaction_share=timed.seconds / (time.perf_counter() - start))
    finish_decode(ctx, engine, rows, engine.cache.slots)
    greedy = ss.SamplingConfig(max_new_tokens=steps + 1)
    for name in [n for n in ("rkv", "triattention") if n in METHODS]:
        knobs = {**ctx.shape.compression, "method": name}
        if name == "triattention":  # its query statistics, calibrated on the stage's own model and prompt
            knobs["calibration"] = str(calibrate_here(ctx.model, item.ids))
        method = ss.compression_from_config(knobs)
        got = {}
        for compiled in (True, False):
            eng = Engine(ctx.model, method, greedy, eos=[], rows=rows, compile=compiled and not ctx.args.no_compile,
                         attention="flex" if compiled else "sdpa")
            runs = [f.tokens for b in eng.run([EngineItem(item.ids, 0, tuple(range(rows)), steps + 1)]) for f in b]
            got[compiled] = runs
        rec[f"{name}_tokens_equal_eager"] = got[True] == got[False]


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


# ---------------------------------------------------------------------------------------------------- the process
def versions() -> dict[str, str | None]:
    import importlib.metadata as md
    import platform

    import torch

    out: dict[str, str | None] = {"python": platform.python_version(), "torch": torch.__version__,
                                  "cuda": torch.version.cuda}
    for pkg in ("transformers", "huggingface_hub", "triton", "tokenizers", "safetensors"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_stages")
    p.add_argument("name", choices=sorted(STAGES))
    p.add_argument("--result", type=Path, required=True)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--memory-gib", type=float, default=80.0)
    p.add_argument("--max-rows", type=int, default=None)
    p.add_argument("--context", default="{}", help="JSON: figures earlier stages passed on")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run one stage and write its record (errors included) to ``--result``."""
    a = parse_args(argv)
    rec: dict[str, Any] = {"name": a.name, "path": "engine", "note": STAGES[a.name].note}
    started = time.perf_counter()
    try:
        from snapstream_core.memory import device_usable_bytes

        usable = None if a.tiny else device_usable_bytes("cuda")
        model, device = build_model(a.tiny)
        rec["model_build_s"] = time.perf_counter() - started
        rec["versions"] = versions()
        ctx = Ctx(a, model, device, usable, json.loads(a.context), rec)
        STAGES[a.name].fn(ctx)
    except Exception as exc:  # noqa: BLE001 - the stage's finding; the parent runs the next stage in a new process
        text = str(exc).strip().splitlines()
        rec["error"] = f"{type(exc).__name__}: {text[0][:300] if text else ''}".rstrip(": ")
    rec["stage_s"] = time.perf_counter() - started
    a.result.write_text(json.dumps(rec, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
