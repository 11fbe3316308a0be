"""Decode attention over the engine's fixed slots with FlexAttention (CUDA, compiled), instead of SDPA with a
boolean mask (which leaves SDPA only its memory-efficient kernel).

Plugged in through the decode step's attention hook (``attention.SLOT_ATTENTION_KWARG``): the G query heads
that share a KV head, the (B, H_kv, S, D) slots and their (B, H_kv, S) visibility. Invisible slots get a score of
-inf through a ``score_mod``, so the fused flex-decoding kernel runs over the fixed slots with no mask tensor of
its own. Outside ``torch.compile`` FlexAttention runs an unfused reference (the CPU tests use it to check the
numbers against SDPA), which is why the engine selects it only for a compiled step on CUDA.
"""

from __future__ import annotations

import torch


def flex_decode_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, visible: torch.Tensor, scale: float
) -> torch.Tensor:
    """query (B, H_kv, G, D), key/value (B, H_kv, S, D), visible (B, H_kv, S) bool -> (B, H_kv, G, D)."""
    from torch.nn.attention.flex_attention import flex_attention

    B, H_kv, G, D = query.shape

    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.where(visible[b, h // G, kv_idx], score, -float("inf"))

    out = flex_attention(query.reshape(B, H_kv * G, 1, D), key, value, score_mod=score_mod, enable_gqa=True,
                         scale=scale)
    return out.reshape(B, H_kv, G, D)


def resolve_attention(value: str, device_type: str, compiled: bool):
    """``attention``: ``auto`` (flex for a compiled step on CUDA, else SDPA), ``flex`` or ``sdpa`` -> the hook
    function, or None for SDPA."""
    if value not in ("auto", "flex", "sdpa"):
        raise ValueError(f"Engine.attention: must be auto, flex or sdpa, got {value!r}")
    if value == "flex" or (value == "auto" and device_type == "cuda" and compiled):
        return flex_decode_attention
    return None
