"""Prefill one prompt into a :class:`CompressedCache` (first version: one forward, last-position logits only)."""

from __future__ import annotations

import torch

from snapstream_core.api import make_cache
from snapstream_core.attention import attach
from snapstream_core.cache import CompressedCache
from snapstream_core.methods.base import CompressionMethod


@torch.no_grad()
def prefill_prompt(
    model, ids: torch.Tensor, method: CompressionMethod, *, chunk_size: int | None = None
) -> tuple[CompressedCache, torch.Tensor]:
    """ids (1, T) long -> (the compressed cache of batch 1, last-position logits (1, V) float32)."""
    if ids.ndim != 2 or ids.shape[0] != 1:
        raise ValueError(f"prefill_prompt: ids must be (1, T), got {tuple(ids.shape)}")
    attach(model)
    cache = make_cache(model, method)
    T = ids.shape[1]
    positions = torch.arange(T, device=ids.device)[None]
    mask = torch.ones_like(ids)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, logits_to_keep=1)
    return cache, out.logits[:, -1, :].float()
