"""What a method's geometry says about one sample: did compression drop anything, how many KV tokens did the
cache hold on average while decoding, and how many slots did its storage allocate. Pure arithmetic on
:meth:`CompressionMethod.footprint` (entries per layer and KV head after ``k`` new tokens of a ``T``-token prompt,
the storage policy's), so it holds for every run, the engine's or a replay's that recorded its prompt lengths.

- ``compressed``: some token of the ``T + G`` was dropped, ``footprint(T, G) < T + G``, or the K/V are stored
  quantized (``method.kv_format.quantized``: FP8, KIVI), which acts on every token (always False for the full cache
  in the model's dtype). A run none of whose samples was compressed **keeps every token (= full cache)**: its outputs
  are the full cache's by construction, whatever its budget says.
- ``kv_tokens_mean``: the mean of ``footprint(T, k)`` over the decoding steps ``k = 1..G``, beside the measured peak:
  a ring holds its full size for most of a long generation, a growing cache only at its end. Every method's
  footprint grows by one entry per step until it stops growing (a ring full) and then stays, so the sum is exact
  from the last step ``k*`` at which it still grew (found by bisection): ``f(0) + k`` up to ``k*``, ``f(k*)`` after.
- ``kv_slots_peak``: the slots per layer and KV head the storage policy allocates for the sample's generation
  (``slots(T, G)``), beside the entries it held (``kv_tokens_peak``): a ring's free slots and a ragged policy's
  padded heads (per-layer or per-head budgets, ``snapstream_core.policies.RaggedPolicy``) are allocated, not held.
  The bytes allocated are ``kv_bytes_peak``; the bytes held after the prefill, measured, ``kv_held_bytes_after_prefill``
  (``snapstream_core.stats.KVStats``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from snapstream_core.methods.base import CompressionMethod

COLUMNS = ("compressed", "kv_tokens_mean", "kv_slots_peak")


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) and number >= 0 else None


def dropped(method: CompressionMethod, prompt_tokens: int, gen_tokens: int) -> bool:
    """Whether ``method`` held fewer than the ``prompt_tokens + gen_tokens`` tokens it saw."""
    return method.footprint(prompt_tokens, gen_tokens) < prompt_tokens + gen_tokens


def mean_held(method: CompressionMethod, prompt_tokens: int, gen_tokens: int) -> float:
    """Mean KV entries held per layer and KV head over decoding steps ``1..gen_tokens`` (the prefill's,
    ``tokens_held(T, 0)``, when nothing was generated): the method's :meth:`~CompressionMethod.mean_tokens_held`."""
    return method.mean_tokens_held(prompt_tokens, gen_tokens)


def row_geometry(method: CompressionMethod, prompt_tokens: Any, gen_tokens: Any) -> dict[str, Any]:
    """The row's ``compressed``, ``kv_tokens_mean`` and ``kv_slots_peak``; all None when a length was not measured."""
    T, G = _count(prompt_tokens), _count(gen_tokens)
    if T is None or G is None:
        return dict.fromkeys(COLUMNS)
    return {"compressed": dropped(method, T, G) or method.kv_format.quantized,
            "kv_tokens_mean": round(mean_held(method, T, G), 3), "kv_slots_peak": method.slots(T, G)}


def keeps_every_token(knobs: Mapping[str, Any], lengths: list[tuple[Any, Any]]) -> bool | None:
    """Whether the method of ``knobs`` (``meta.json``'s ``identity.compression``) kept every token of every sample
    of ``lengths`` (``(prompt_tokens, gen_tokens)`` per row) in the model's dtype: True for a compressing method
    that dropped nothing, False when it dropped something or stores K/V quantized (its outputs are not the full
    cache's), None for the full cache itself, an unknown method or unmeasured lengths."""
    from snapstream_core.api import compression_from_config

    try:
        method = compression_from_config(dict(knobs))
    except (ValueError, TypeError):
        return None
    if method.kv_format.quantized:
        return False
    if not method.compresses or not lengths:
        return None
    counted = [(_count(t), _count(g)) for t, g in lengths]
    if any(t is None or g is None for t, g in counted):
        return None
    return not any(dropped(method, t, g) for t, g in counted)
