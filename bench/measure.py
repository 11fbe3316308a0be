"""Measure a group of cases side by side: prefill time, decode time per token, KV bytes held, peak memory.

Protocol:

1. Prefill, one case after the other: one forward over the prompt (1, T) with ``logits_to_keep=1`` and the greedy
   first token, timed with ``perf_counter`` (after ``cuda.synchronize`` on a GPU). For batch ``b > 1`` the prefilled
   cache is then expanded to ``b`` sequences (``batch_repeat_interleave``, what the core does for ``n`` samples from
   one prefill; decode cost does not depend on whether the rows are equal).
2. Decode, **interleaved step by step**: every case of the group keeps its cache, and each step runs one decode
   forward (explicit positions T, T+1, ..., greedy, no EOS) of every case in turn, the order rotating from step to
   step. Each forward is timed on its own, so a slow phase of the machine hits every case alike. ms/token is the mean
   over the ``steps`` steps that follow ``WARM_STEPS`` untimed ones (the median is kept too). Switching the attention
   implementation between cases happens outside the timed region. A compiled case (``<method>+compiled``), and the
   eager case of a decode-time method (it compacts while decoding, which only the engine does), decode through the
   engine itself (:mod:`bench.engine_rows`): its rows, prefilled by the engine, one ``Engine.step`` per timed step
   (the slot schedule, the step, the compaction of the rows it makes due, the draw, as in a run). The memory's
   bandwidth is read right before the first timed round (one step of every case) and right after each one; a
   round's floor uses the faster of its two readings, and a case's ``floor_ms`` is the mean over its rounds
   (:mod:`bench.floor`), with the KV entries held at the middle timed step by the method's geometry
   (``tokens_held``).
3. KV bytes are counted from the caches' own tensors (K and V storage; the core's per-slot validity and position
   tensors separately as ``index_bytes``), per sequence, after prefill and at the end (an engine case: its rows'
   slots, visibility mask and slot positions, and the entries its rows hold); the core's ``cache.stats`` gives the
   peak during prefill.
4. Memory of the prefill: the peak above what was held when it started: on CPU the resident set (Linux ``VmHWM``,
   reset through ``/proc/self/clear_refs`` after ``malloc_trim``), on CUDA ``max_memory_allocated``.
"""

from __future__ import annotations

import ctypes
import logging
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

import snapstream_core as ss
from bench.cases import PLAIN, Case, build_method, is_compiled
from bench.config import WARM_STEPS, BenchConfig
from bench.cpu_decode import KERNELS
from bench.engine_rows import EngineRows
from bench.floor import BandwidthProbe, floor_bytes, measure_matmul
from bench.run_files import with_run_files
from snapstream_core.engine.attention import resolve_attention
from snapstream_core.engine.step import DecodeKernels, Step
from snapstream_core.methods.decode_base import DecodeMethod

MIB = 2**20
log = logging.getLogger(__name__)


class MemoryProbe:
    """Peak memory above a base: resident set of this process (CPU) or allocated GPU memory (CUDA), in MiB."""

    STATUS = Path("/proc/self/status")
    CLEAR_REFS = Path("/proc/self/clear_refs")

    def __init__(self, device: str):
        self.cuda = device == "cuda"
        self.base = float("nan")

    def _status(self, key: str) -> float:
        match = re.search(rf"^{key}:\s+(\d+) kB", self.STATUS.read_text(), re.M)
        return int(match.group(1)) / 1024 if match else float("nan")

    def reset(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated() / MIB
            return
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed heap back, so that the base is what is in use
            self.CLEAR_REFS.write_text("5")  # resets VmHWM to the current resident set
            self.base = self._status("VmRSS")
        except OSError:
            self.base = float("nan")  # no way to reset the peak here: report nothing rather than a wrong figure

    def peak(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() / MIB
        return self._status("VmHWM")


def kv_bytes(cache) -> tuple[int, int, int]:
    """``(kv_bytes, index_bytes, tokens)`` held by ``cache`` for its whole batch; ``tokens`` is the largest number of
    filled entries of a layer (per KV head and sequence)."""
    kv = index = tokens = 0
    for layer in cache.layers:
        keys = getattr(layer, "keys", None)
        if keys is None or keys.numel() == 0:
            continue
        kv += keys.nbytes + layer.values.nbytes
        for name in ("valid", "pos", "next_pos"):
            t = getattr(layer, name, None)
            if t is not None:
                index += t.nbytes
        held = layer.tokens_held() if hasattr(layer, "tokens_held") else keys.shape[-2]
        tokens = max(tokens, held)
    return kv, index, tokens


def _now(cuda: bool) -> float:
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter()


def attention_name(case: Case) -> str:
    """The model's attention implementation for ``case``: stock for ``plain``, the core's wrapper otherwise."""
    return case.attn if case.method == PLAIN else ss.attention.PREFIX + case.attn


def _use(model, name: str) -> None:
    if model.config._attn_implementation != name:
        model.set_attn_implementation(name)


@dataclass
class Running:
    """A case between its prefill and the end of its decode."""

    case: Case
    cache: Any
    token: torch.Tensor  # (b, 1) the next input
    position: int  # position of that token
    row: dict
    step_s: list[float] = field(default_factory=list)
    tokens: list[int] | None = None  # greedy tokens of the first sequence, when asked for (tests)
    static: EngineRows | None = None  # an engine case: decoded by the engine's own rows and step


@torch.no_grad()
def prefill(model, prompts, case: Case, cfg: BenchConfig) -> Running:
    cuda = cfg.device == "cuda"
    ids = prompts(case.context).to(model.device)
    T = ids.shape[-1]
    ss.register()
    _use(model, attention_name(case))
    method = None if case.method == PLAIN else build_method(case.method, cfg)
    if method is None:
        cache = DynamicCache(config=model.config)
    else:
        cache = ss.make_cache(model, method)
    probe = MemoryProbe(cfg.device)
    probe.reset()
    t0 = _now(cuda)
    logits = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
    token = logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
    prefill_s = _now(cuda) - t0
    peak = probe.peak()
    kv, _, tokens = kv_bytes(cache)
    static = None
    if on_engine(case, method):  # the engine's rows, one per sequence, prefilled by the engine (untimed here)
        method = with_run_files(method, model, ids)  # e.g. TriAttention's calibration, read when its rows compact
        compiled = is_compiled(case.method)
        kern = kernels(cfg) if compiled else None
        step = compiled_step(model.device.type, cfg.compile_backend, kern) if compiled else None
        static = EngineRows.start(model, method, ids[0].tolist(), case.batch, max_steps(cfg) + 1, compile=compiled,
                                  step=step, kernels=kern, compile_backend=cfg.compile_backend)
    if case.batch > 1:
        cache.batch_repeat_interleave(case.batch)
        token = token.repeat_interleave(case.batch, dim=0)
    row = {
        **case.as_dict(),
        "prompt_tokens": T,
        "n_layers": len(cache.layers),
        "prefill_s": prefill_s,
        "kv_tokens_after_prefill": tokens,
        "kv_bytes_after_prefill": kv,  # the prefill ran at batch 1
        "mem_base_mib": probe.base,
        "mem_prefill_peak_mib": peak,
        "mem_prefill_delta_mib": peak - probe.base,
        "mem_kind": "cuda_allocated" if cuda else "rss",
    }
    return Running(case, cache, token, T, row, static=static)


def on_engine(case: Case, method) -> bool:
    """Whether ``case`` decodes through the engine: compiled, or a decode-time method (it compacts while decoding,
    which only the engine does)."""
    return is_compiled(case.method) or isinstance(method, DecodeMethod)


_STEPS: dict[tuple[str, str, DecodeKernels | None], Step] = {}


def compiled_step(device_type: str, backend: str, kernels: DecodeKernels | None) -> Step:
    """The engine's compiled decode step (the attention it picks when compiled on this device), made once per
    (device, backend, kernels) and shared by the engines of the compiled cases: it compiles on its first call for a
    shape."""
    key = (device_type, backend, kernels)
    if key not in _STEPS:
        attention = resolve_attention("auto", device_type, True)
        _STEPS[key] = Step(True, device_type, backend, attention, kernels=kernels)
    return _STEPS[key]


def kernels(cfg: BenchConfig) -> DecodeKernels | None:
    """The kernels plugged into the compiled step: :data:`bench.cpu_decode.KERNELS` on the CPU unless
    ``cpu_kernels`` is off, else none (stock ``torch.compile``)."""
    return KERNELS if cfg.device == "cpu" and cfg.cpu_kernels else None


def max_steps(cfg: BenchConfig) -> int:
    return WARM_STEPS + cfg.steps


@torch.no_grad()
def decode_step(model, run: Running, cfg: BenchConfig) -> None:
    """One greedy decode forward of ``run``, timed."""
    _use(model, attention_name(run.case))
    cuda = cfg.device == "cuda"
    t0 = _now(cuda)
    if run.static is not None:  # the engine's step (compiled: compiles on its first call for this shape)
        run.token = run.static(model)
    else:
        pos = torch.full_like(run.token, run.position)
        logits = model(input_ids=run.token, past_key_values=run.cache, position_ids=pos, use_cache=True).logits
        run.token = logits[:, -1].argmax(-1, keepdim=True)
    run.step_s.append(_now(cuda) - t0)
    run.row.setdefault("first_step_s", run.step_s[-1])  # with compiled steps: the compile time
    run.position += 1
    if run.tokens is not None:
        run.tokens.append(int(run.token[0, 0]))


def finish(run: Running) -> dict:
    b = run.case.batch
    decode_ms = 1000 * statistics.mean(run.step_s)
    kv, index, tokens = kv_bytes(run.cache)
    if run.static is not None:  # the decode ran on the engine's rows: what they hold
        tokens = run.static.tokens_held()
        kv, index = run.static.kv_bytes()
    stats = run.cache.stats.as_row() if isinstance(run.cache, ss.CompressedCache) else {}
    extra = {"tokens": run.tokens} if run.tokens is not None else {}
    return {
        **run.row,
        **extra,
        "steps": len(run.step_s),
        "decode_ms_per_token": decode_ms,
        "decode_ms_step_median": 1000 * statistics.median(run.step_s),
        "tokens_per_s": 1000 * b / decode_ms,
        "kv_tokens_final": tokens,
        "kv_bytes_final": kv // b,
        "index_bytes_final": index // b,
        "kv_prefill_bytes_peak": stats.get("kv_prefill_bytes_peak", run.row["kv_bytes_after_prefill"]),
        "compiled": is_compiled(run.case.method),
        "floor_bytes": run.row["floor_bytes"],
    }


def measure_group(
    model, prompts, cases: list[Case], cfg: BenchConfig, steps: int | None = None, keep_tokens: bool = False
) -> list[dict]:
    """Prefill every case, decode them interleaved, return one row per case (``status`` ok, or why not).
    ``keep_tokens`` adds the greedy tokens of each case's first sequence to its row."""
    cuda = cfg.device == "cuda"
    steps = steps or cfg.steps
    running, rows = [], []
    for case in cases:
        try:
            running.append(prefill(model, prompts, case, cfg))
            if keep_tokens:
                running[-1].tokens = [int(running[-1].token[0, 0])]
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory: the other cases of the group go on
            rows.append({**case.as_dict(), "status": _failure(exc)})
            _free(cuda)
    _free(cuda)  # hand the prefills' activation blocks back, so that decode allocations start from a clean pool
    probe = BandwidthProbe(cfg.device)  # read before and after every timed round of the decode it is compared with
    matmul_ms = {b: 1000 * measure_matmul(model, b) for b in sorted({run.case.batch for run in running})}
    for run in running:
        middle = held_at(run.case, run.row["prompt_tokens"], WARM_STEPS + steps // 2, cfg)  # the middle timed step
        run.row["floor_bytes"] = floor_bytes(model, middle, run.case.batch)
        run.row["matmul_ms"] = matmul_ms[run.case.batch]  # the weights' products alone, as the kernels run them
    readings = []  # bytes/s: right before the first timed round, then right after each timed round
    for step in range(WARM_STEPS + steps):
        if step == WARM_STEPS:  # untimed steps first: allocator growth of the growing caches, first-call costs
            for run in running:
                run.step_s.clear()
            readings.append(probe())
        k = step % max(len(running), 1)
        for run in running[k:] + running[:k]:
            decode_step(model, run, cfg)
        if step >= WARM_STEPS:
            readings.append(probe())
    del probe
    # Each timed round (one step of every case) gets the floor of the faster of the readings right before and right
    # after it: the memory's speed drifts over seconds on a shared machine, so a round is paired with its own
    # readings, and the faster one gives the lower floor, so x floor never flatters the decode. A case's floor is the
    # mean of its rounds' floors, as its decode ms is the mean of its rounds' steps.
    rounds = [max(before, after) for before, after in zip(readings, readings[1:])]
    for run in running:
        floor_s = statistics.mean(run.row["floor_bytes"] / bandwidth for bandwidth in rounds)
        run.row["floor_ms"] = 1000 * floor_s
        run.row["bandwidth_gbs"] = run.row["floor_bytes"] / floor_s / 1e9  # the bandwidth that gives that floor
    rows += [{**finish(run), "status": "ok"} for run in running]
    for row in rows:
        if row.get("status") == "ok":
            row["decode_vs_floor"] = row["decode_ms_per_token"] / row["floor_ms"]  # both per step of the batch
            row["decode_vs_matmul"] = row["decode_ms_per_token"] / row["matmul_ms"]
    del running
    _free(cuda)
    return rows


def held_at(case: Case, prompt_tokens: int, steps: int, cfg: BenchConfig) -> int:
    """KV entries per layer and KV head ``case`` holds after ``steps`` decode steps: the method's geometry
    (``tokens_held``), or for ``plain`` the whole prompt and every step."""
    if case.method == PLAIN:
        return prompt_tokens + steps
    return build_method(case.method, cfg).tokens_held(prompt_tokens, steps)


def _failure(exc: Exception) -> str:
    if type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower():
        return "oom"
    return f"error: {type(exc).__name__}: {exc}"[:300]


def _free(cuda: bool) -> None:
    import gc

    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def warm_up(model, prompts, cases: list[Case], cfg: BenchConfig, context: int) -> dict[str, float]:
    """One short group of every kind in ``cases`` (first-call costs: kernel selection, allocator growth, compiling
    the decode step); returns the first decode step's seconds of each compiled kind (its compile time)."""
    kinds = {(c.attn, c.method, c.batch) for c in cases}
    compiling = sorted(f"{a}/{m}/b{b}" for a, m, b in kinds if is_compiled(m))
    if compiling:  # minutes on a CPU: say so before the wait, not after
        log.info("compiling the decode step of %s (torch.compile, first call; minutes on a CPU)", ", ".join(compiling))
    rows = measure_group(model, prompts, [Case(a, m, context, b) for a, m, b in sorted(kinds)], cfg, steps=2)
    compile_s = {
        f"{r['attn']}/{r['method']}/b{r['batch']}": round(r["first_step_s"], 3)
        for r in rows
        if r.get("status") == "ok" and r.get("compiled")
    }
    for kind, seconds in compile_s.items():
        log.info("compiled decode step %s: first call (compile) %.1f s", kind, seconds)
    return compile_s
