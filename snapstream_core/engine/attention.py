"""Decode attention over the engine's fixed slots with FlexAttention (CUDA, compiled), instead of SDPA with a
boolean mask (which leaves SDPA only its memory-efficient kernel).

Plugged in through the decode step's attention hook (``attention.SLOT_ATTENTION_KWARG``): the G query heads
that share a KV head, the (B, H_kv, S, D) slots and their (B, H_kv, S) visibility. Invisible slots get a score of
-inf through a ``score_mod``, so the fused flex-decoding kernel runs over the fixed slots with no mask tensor of
its own. Outside ``torch.compile`` FlexAttention runs an unfused reference (the CPU tests use it to check the
numbers against SDPA), which is why the engine selects it only for a compiled step on CUDA.

Given ``filled`` (B,) long, each row's read bound (its highest written slot + 1), the call also takes a
:class:`~torch.nn.attention.flex_attention.BlockMask` built on the device from it (:func:`fill_block_mask`): row b
reads its first ``ceil(filled[b] / READ_BLOCK)`` blocks of ``READ_BLOCK`` slots and the fused kernel skips the rest,
so an appending row reads its filled slots, not all S. The ``score_mod`` still hides the invisible slots inside the
read blocks. The unfused reference ignores the block structure (it applies the masks only), so the CPU tests check
the numbers there and the blocks separately (every visible slot lies in a read block).
"""

from __future__ import annotations

import torch

from snapstream_core.memory import READ_BLOCK


def fill_blocks(filled: torch.Tensor, slots: int, block: int = READ_BLOCK) -> torch.Tensor:
    """(B,) long read bounds -> (B,) int32 blocks each row reads: ``ceil(min(filled, slots) / block)``, at least 1
    (a row always reads its current slot's block; a bound of 0 reads the first block)."""
    n = filled.clamp(min=1, max=slots)
    return ((n + block - 1) // block).to(torch.int32)


def fill_block_mask(filled: torch.Tensor, slots: int, block: int = READ_BLOCK):
    """A BlockMask for one decode query per row over ``slots`` slots: row b reads blocks ``[0, fill_blocks[b])``,
    the same for every head (head dim 1, broadcast). Built from device tensors only: no host synchronisation."""
    from torch.nn.attention.flex_attention import BlockMask

    B = filled.shape[0]
    n_blocks = -(-slots // block)
    kv_num_blocks = fill_blocks(filled, slots, block).view(B, 1, 1)
    kv_indices = torch.arange(n_blocks, dtype=torch.int32, device=filled.device).expand(B, 1, 1, n_blocks)
    return BlockMask.from_kv_blocks(kv_num_blocks, kv_indices.contiguous(), BLOCK_SIZE=(block, block),
                                    seq_lengths=(1, slots), compute_q_blocks=False)  # q blocks: backward only


def flex_decode_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, visible: torch.Tensor, scale: float,
    filled: torch.Tensor | None = None,
) -> torch.Tensor:
    """query (B, H_kv, G, D), key/value (B, H_kv, S, D), visible (B, H_kv, S) bool, filled (B,) long or None (read
    all S) -> (B, H_kv, G, D). Every visible slot of row b must lie below ``filled[b]``."""
    from torch.nn.attention.flex_attention import flex_attention

    B, H_kv, G, D = query.shape

    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.where(visible[b, h // G, kv_idx], score, -float("inf"))

    block_mask = None if filled is None else fill_block_mask(filled, key.shape[-2])
    out = flex_attention(query.reshape(B, H_kv * G, 1, D), key, value, score_mod=score_mod, block_mask=block_mask,
                         enable_gqa=True, scale=scale)
    return out.reshape(B, H_kv, G, D)


def resolve_attention(value: str, device_type: str, compiled: bool):
    """``attention``: ``auto`` (flex for a compiled step on CUDA, else SDPA), ``flex`` or ``sdpa`` -> the hook
    function, or None for SDPA."""
    if value not in ("auto", "flex", "sdpa"):
        raise ValueError(f"Engine.attention: must be auto, flex or sdpa, got {value!r}")
    if value == "flex" or (value == "auto" and device_type == "cuda" and compiled):
        return flex_decode_attention
    return None
