"""GPU time of one job: prefill from FLOPs, decode from the bandwidth floor (constants in :mod:`evals.plan.device`).

- Prefill, once per item (its n samples share it): ``2*n_params*T + 2*n_layers*T^2*hidden`` FLOPs (the matmuls,
  then causal attention's QK^T and PV), at ``bf16_flops * prefill_mfu``; averaged over the task's length groups.
- Decode: every sample generates ``gen_fraction * max_new_tokens`` tokens on average; ``rows`` rows advance one
  token per step and a finished row is refilled at once (row retirement), so the job takes
  ``samples * mean_tokens / rows`` steps plus, at its end, up to ``max_new_tokens`` steps of the last straggler.
  A step reads the weights and ``rows * slots`` KV entries (the filled ones only with
  ``Device.reads_all_slots=False``) at ``hbm_bytes_per_s * bandwidth_efficiency``; it is also at least its
  matmul FLOPs at the prefill's utilisation; plus ``step_overhead_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evals.plan.device import H100, Device
from evals.plan.job import Job


@dataclass(frozen=True)
class Cost:
    prefill_s: float
    decode_steps: int
    step_s: float
    decode_tokens: int

    @property
    def seconds(self) -> float:
        return self.prefill_s + self.decode_steps * self.step_s

    @property
    def gpu_hours(self) -> float:
        return self.seconds / 3600


def prefill_flops(job: Job) -> float:
    """Mean FLOPs of one item's prefill over the task's length groups."""
    s = job.shape
    return sum(share * (2 * s.n_params * t + 2 * s.n_layers * t * t * s.hidden) for share, t in job.prompt_groups)


def mean_prompt_tokens(job: Job) -> float:
    return sum(share * t for share, t in job.prompt_groups)


def step_seconds(job: Job, rows: int, device: Device = H100) -> float:
    """One decode step of ``rows`` rows: the larger of its bandwidth time and its compute time, plus overhead."""
    s = job.shape
    mean_new = job.gen_fraction * job.max_new_tokens
    if device.reads_all_slots or job.slots < job.kept + job.max_new_tokens:  # a ring is always full soon
        read = job.slots
    else:  # appending: the filled slots, on average the mean prompt plus half the mean generation
        read = min(job.slots, mean_prompt_tokens(job) + mean_new / 2)
    bytes_read = s.weight_bytes + rows * read * s.kv_bytes_per_token
    bandwidth = bytes_read / (device.hbm_bytes_per_s * device.bandwidth_efficiency)
    compute = 2 * s.n_params * rows / (device.bf16_flops * device.prefill_mfu)
    return max(bandwidth, compute) + device.step_overhead_s


def job_cost(job: Job, rows: int, device: Device = H100) -> Cost:
    """GPU time of ``job`` decoding in ``rows`` rows (``rows >= 1``)."""
    prefill = job.n_items * prefill_flops(job) / (device.bf16_flops * device.prefill_mfu)
    tokens = round(job.total_samples * job.gen_fraction * job.max_new_tokens)
    steps = math.ceil(tokens / rows) + (job.max_new_tokens if rows > 1 else 0)
    return Cost(prefill_s=prefill, decode_steps=steps, step_s=step_seconds(job, rows, device), decode_tokens=tokens)
