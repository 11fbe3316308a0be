"""GPU time of one job: prefill from FLOPs, decode from the bytes and FLOPs of a step (constants in
:mod:`evals.plan.device`).

- Prefill, once per item (its n samples share it): ``2*n_params*T + 2*n_layers*T^2*hidden`` FLOPs (the matmuls,
  then causal attention's QK^T and PV), at ``bf16_flops * prefill_mfu``; averaged over the task's length groups.
- Decode: every sample generates ``gen_fraction * max_new_tokens`` tokens on average; ``rows`` rows advance one
  token per step and a finished row is refilled at once (row retirement), so the job takes
  ``samples * mean_tokens / rows`` steps plus, at its end, up to ``max_new_tokens`` steps of the last straggler.
  A step (:func:`step_terms`) reads the weights, each row's KV (a ring: all its slots; an appending method: its
  filled slots, on average over the job's time, rounded up to the read block, in the method's ``KVFormat``: a
  quantized format's codes and scales, plus per layer its dequantized copy, ``KVFormat.read_bytes``, written and read
  by the unfused path), writes the logits and moves what
  the sampling's ops read and write (``job.sampling_traffic`` bytes per vocabulary entry: counted per op on CPU,
  ``memory.sampling_traffic_per_entry``; 424 with temperature, top-k and top-p, 4 greedy), at
  ``hbm_bytes_per_s * bandwidth_efficiency``; **plus** its FLOPs (every row times the
  weights, and attention over the filled KV) at the prefill's utilisation; plus ``step_overhead_s``. At 250-500
  rows both terms count, so they add rather than overlap.
- Compile: each run (each shard: its own process) compiles its graphs once, :func:`evals.plan.compile_time.
  compile_seconds` (measured on CPU; the GPU figure is derived from it by an assumed factor).
- The average fill of an appending row over time is ``kept prompt + E[L^2] / (2 E[L])`` for generation lengths
  ``L``: a long sample spends more steps, at larger fills. With lengths spread as reasoning traces are (lognormal,
  sigma ~0.6: ``E[L^2] = E[L]^2 * (1 + GEN_LENGTH_CV2)``) that is ``kept + mean_new * (1 + GEN_LENGTH_CV2) / 2``,
  at most ``kept + max_new_tokens``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evals.plan.compile_time import compile_seconds
from evals.plan.device import H100, Device
from evals.plan.job import Job, method_of
from snapstream_core.memory import FLOAT32

# Squared coefficient of variation of the generated lengths: exp(0.6^2) - 1 for a lognormal with sigma 0.6 (an
# assumed spread of reasoning-trace lengths). Estimate until a run's gen_tokens columns replace it.
GEN_LENGTH_CV2 = 0.43


@dataclass(frozen=True)
class Cost:
    prefill_s: float
    decode_steps: int
    step_s: float
    decode_tokens: int
    compile_s: float = 0.0  # the run's graphs compiled once (evals.plan.compile_time)

    @property
    def seconds(self) -> float:
        return self.compile_s + self.prefill_s + self.decode_steps * self.step_s

    @property
    def gpu_hours(self) -> float:
        return self.seconds / 3600


def prefill_flops(job: Job) -> float:
    """Mean FLOPs of one item's prefill over the task's length groups."""
    s = job.shape
    return sum(share * (2 * s.n_params * t + 2 * s.n_layers * t * t * s.hidden) for share, t in job.prompt_groups)


def mean_prompt_tokens(job: Job) -> float:
    return sum(share * t for share, t in job.prompt_groups)


def read_slots(job: Job, device: Device = H100) -> float:
    """KV slots one row reads per step, on average over the job's time."""
    method = method_of(job)
    if device.reads_all_slots or method.ring is not None:  # a ring is always full soon
        return job.slots
    kept = sum(share * method.footprint(t, 0) for share, t in job.prompt_groups)
    mean_new = job.gen_fraction * job.max_new_tokens
    fill = kept + min(job.max_new_tokens, mean_new * (1 + GEN_LENGTH_CV2) / 2)
    block = device.read_block
    return min(job.slots, math.ceil(fill / block) * block)


def step_terms(job: Job, rows: int, device: Device = H100) -> dict[str, float]:
    """Seconds of one decode step of ``rows`` rows, by term: bytes moved, FLOPs, overhead."""
    s = job.shape
    read = read_slots(job, device)
    sampling = rows * s.vocab * (FLOAT32 + job.sampling_traffic)  # logits written; the sampling's ops' reads, writes
    fmt = method_of(job).kv_format  # a quantized format reads its codes and writes and reads one layer's copy
    kv = fmt.row_bytes(read, s.n_layers, s.n_kv_heads, s.head_dim, s.dtype_bytes) + s.n_layers * fmt.read_bytes(
        read, s.n_kv_heads, s.head_dim, s.dtype_bytes)
    bytes_moved = s.weight_bytes + rows * kv + sampling
    flops = 2 * s.n_params * rows + 4 * rows * read * s.n_layers * s.n_heads * s.head_dim
    return {
        "bandwidth": bytes_moved / (device.hbm_bytes_per_s * device.bandwidth_efficiency),
        "compute": flops / (device.bf16_flops * device.prefill_mfu),
        "overhead": device.step_overhead_s,
    }


def step_seconds(job: Job, rows: int, device: Device = H100) -> float:
    """One decode step of ``rows`` rows: bandwidth time + compute time + overhead (:func:`step_terms`)."""
    return sum(step_terms(job, rows, device).values())


def job_cost(job: Job, rows: int, device: Device = H100) -> Cost:
    """GPU time of ``job`` decoding in ``rows`` rows (``rows >= 1``)."""
    prefill = job.n_items * prefill_flops(job) / (device.bf16_flops * device.prefill_mfu)
    tokens = round(job.total_samples * job.gen_fraction * job.max_new_tokens)
    steps = math.ceil(tokens / rows) + (job.max_new_tokens if rows > 1 else 0)
    return Cost(prefill_s=prefill, decode_steps=steps, step_s=step_seconds(job, rows, device), decode_tokens=tokens,
                compile_s=compile_seconds(job))
