"""Per-sample randomness: counter-based noise keyed on (seed, item, sample, step), and Gumbel-max token choice.

Sample ``i`` of item ``x`` draws its token at step ``t`` from ``uniform(key(seed, x, i), t, v)`` for every vocabulary
entry ``v``: a SplitMix64 hash of the counters, computed with int64 torch ops (wrapping multiplication, logical
shifts by masking), so it is vectorised, needs no host synchronisation, and gives the same numbers on every device
and in every batch. ``argmax(logits / temperature + Gumbel(u))`` over the entries the top-k/top-p filters keep is an
exact draw from the filtered softmax (the Gumbel-max trick). Nothing here reads or advances torch's global RNG.

Each row has its own temperature, top-k and top-p (:class:`RowSampling`: one request's settings per row), and a step
of any settings reads nothing back to the host: the shapes depend only on what the host already knows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from snapstream_core.counter_hash import (  # noqa: F401  (the engine's noise, re-exported)
    _GOLDEN,
    _M1,
    _M2,
    _MASK64,
    _mix,
    _mix_int,
    _shr,
    _signed,
    item_key,
    sample_key,
    uniforms,
    uniforms_at,
)
from snapstream_core.sampling import SamplingConfig


@dataclass(frozen=True)
class RowSampling:
    """Each row's sampling settings as device tensors, and what the host knows of them (no device read needed).

    temperature (R,) float64 (0: greedy), top_k (R,) long (0: off), low_p (R,) float32 ``1 - top_p`` (the bound
    ``TopPLogitsWarper`` compares the cumulative probabilities with), use_p (R,) bool (top_p < 1). The host-side
    ``temperatures`` (the distinct positive ones) and the ``any_*`` flags only decide which ops run."""

    temperature: torch.Tensor
    top_k: torch.Tensor
    low_p: torch.Tensor
    use_p: torch.Tensor
    temperatures: tuple[float, ...]
    any_greedy: bool
    any_top_k: bool
    any_top_p: bool
    k_max: int

    @classmethod
    def of(cls, settings: Sequence[SamplingConfig], device: torch.device | str = "cpu") -> RowSampling:
        """The rows' tensors from one :class:`SamplingConfig` per row (only its temperature, top_k, top_p)."""
        def t(values, dtype):
            return torch.tensor(values, dtype=dtype, device=device)

        return cls(
            temperature=t([s.temperature for s in settings], torch.float64),
            top_k=t([s.top_k for s in settings], torch.long),
            low_p=t([1 - s.top_p for s in settings], torch.float32),
            use_p=t([s.top_p < 1.0 for s in settings], torch.bool),
            temperatures=tuple(sorted({s.temperature for s in settings if s.do_sample})),
            any_greedy=any(not s.do_sample for s in settings),
            any_top_k=any(s.do_sample and s.top_k > 0 for s in settings),
            any_top_p=any(s.do_sample and s.top_p < 1.0 for s in settings),
            k_max=max((s.top_k for s in settings), default=0),
        )

    def rows(self, lo: int, hi: int) -> RowSampling:
        """Rows ``[lo, hi)`` (the host flags stay those of all rows: they only add ops that leave other rows be)."""
        return replace(self, temperature=self.temperature[lo:hi], top_k=self.top_k[lo:hi], low_p=self.low_p[lo:hi],
                       use_p=self.use_p[lo:hi])


def filter_rows(logits: torch.Tensor, rows: RowSampling) -> torch.Tensor:
    """logits (R, V) float32 -> (R, V) float32: each row through its own temperature, top-k and top-p, as
    transformers' ``TemperatureLogitsWarper``, ``TopKLogitsWarper`` and ``TopPLogitsWarper``
    (``generation/logits_process.py``, their ``__call__``) would give it alone: the same ops on the same values, so
    the same bits (the temperature divides by the same Python float; the k-th largest value is read from one
    ``topk`` at the rows' largest k). Greedy rows come out divided by 1 (untouched)."""
    R, V = logits.shape
    scaled = logits
    for temp in rows.temperatures:
        if temp != 1.0:
            scaled = torch.where((rows.temperature == temp)[:, None], logits / temp, scaled)
    if rows.any_top_k:
        k = rows.top_k.clamp(min=1, max=V)  # TopKLogitsWarper: max(top_k, min_tokens_to_keep=1), min(top_k, V)
        kth = scaled.topk(min(V, rows.k_max), dim=-1).values.gather(-1, k[:, None] - 1)
        kth = torch.where(rows.top_k[:, None] > 0, kth, float("-inf"))
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if rows.any_top_p:
        sorted_logits, sorted_idx = torch.sort(scaled, descending=False)
        remove = sorted_logits.softmax(dim=-1).cumsum(dim=-1) <= rows.low_p[:, None]
        remove[..., -1:] = False  # min_tokens_to_keep = 1
        remove &= rows.use_p[:, None]
        scaled = scaled.masked_fill(remove.scatter(1, sorted_idx, remove), float("-inf"))
    return scaled


def pick_rows(logits: torch.Tensor, rows: RowSampling, keys: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Next tokens (R,) long from logits (R, V) float32, each row with its own settings (``rows``): argmax for a
    greedy row, else Gumbel-max over its filtered logits (:func:`filter_rows`) with its noise at its own step.

    No host read and fixed shapes whatever the settings: the noise covers the whole vocabulary (entries a filter
    removed are -inf and never win), so the winner is ``argmax`` over the vocabulary, the lowest index among ties."""
    if not rows.temperatures:
        return logits.argmax(-1)
    filtered = filter_rows(logits, rows)
    sampled = (filtered - torch.log(-torch.log(uniforms(keys, steps, logits.shape[-1])))).argmax(-1)
    if not rows.any_greedy:
        return sampled
    return torch.where(rows.temperature > 0, sampled, logits.argmax(-1))


def pick_tokens(
    logits: torch.Tensor, sampling: SamplingConfig, keys: torch.Tensor, steps: torch.Tensor
) -> torch.Tensor:
    """:func:`pick_rows` with the same ``sampling`` for every row of ``logits`` (R, V)."""
    return pick_rows(logits, RowSampling.of([sampling] * logits.shape[0], logits.device), keys, steps)
