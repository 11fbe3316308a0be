"""Attention functions registered with transformers' ``AttentionInterface`` (never a patch of model classes).

``snapstream_sdpa``, ``snapstream_eager`` and ``snapstream_flash_attention_2`` wrap the stock implementation of the
same name. With a :class:`~snapstream_core.cache.CompressedCache` they (1) build the mask from the layer's slot
validity and positions once slots no longer line up with the logical sequence, (2) re-rotate queries and keys for
``positions=in_cache``, and (3) after the full prefill attention of a layer, hand its post-RoPE queries to the
layer's selection. With any other cache they are exactly the stock function.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, flash_attention_mask, sdpa_mask

from snapstream_core.attention_sums import step_attention
from snapstream_core.cache import ACTIVE_LAYER
from snapstream_core.layer import CompressedLayer
from snapstream_core.rope import rotate

log = logging.getLogger(__name__)

# The engine's decode step (snapstream_core.engine.step) passes its per-layer slot mask under this keyword of the
# model call (transformers passes the model's extra keyword arguments down to the attention interface) ...
SLOT_MASK_KWARG = "snapstream_slot_mask"
# ... and, when a caller plugged one in (DecodeKernels.attention), the decode attention under this one.
SLOT_ATTENTION_KWARG = "snapstream_slot_attention"
# ... and, when the engine bounds the plugged-in attention's reads, each row's filled length (B,) long under this one.
SLOT_FILL_KWARG = "snapstream_slot_fill"
# ... and, for a decode-time method that scores with recent queries, ``(ring (L, B, H, Q, D), index (B,) long)``:
# each layer writes its post-RoPE decode query at ``ring[layer_idx, b, :, index[b]]``.
SLOT_QUERY_KWARG = "snapstream_slot_queries"
# ... and, for a decode-time method that accumulates attention (h2o), its running sum (L, B, H_kv, S) float32: each
# layer adds its decode query's softmax weights over the visible slots, averaged over each KV head's query heads.
SLOT_ATTN_SUM_KWARG = "snapstream_slot_attn_sum"

PREFIX = "snapstream_"
BASES = ("sdpa", "eager", "flash_attention_2")
_MASKS = {"sdpa": sdpa_mask, "eager": eager_mask, "flash_attention_2": flash_attention_mask}


# The model's own eager attention per modeling module, filled by ``attach`` (a plain dict lookup inside a compiled
# decode step, where importing is not traceable).
_EAGER_BY_MODULE: dict[str, Callable] = {}


def _eager_for(module: torch.nn.Module) -> Callable:
    """The model's own eager attention (``eager_attention_forward`` of its modeling file), so outputs match it."""
    name = type(module).__module__
    fn = _EAGER_BY_MODULE.get(name)
    if fn is None:
        fn = getattr(importlib.import_module(name), "eager_attention_forward", None)
        if fn is None:
            from transformers.models.llama.modeling_llama import eager_attention_forward as fn
        _EAGER_BY_MODULE[name] = fn
    return fn


def _flash_forward() -> Callable:
    from transformers.integrations.flash_attention import flash_attention_forward

    return flash_attention_forward


def _key_validity(mask: torch.Tensor | None, B: int, T: int, device: torch.device) -> torch.Tensor:
    """(B, T) bool key validity of a prefill from whatever mask the stock code built (None, 2D, 4D bool/float)."""
    if mask is None:
        return torch.ones(B, T, dtype=torch.bool, device=device)
    if mask.ndim == 2:  # flash attention: the 2D padding mask
        return mask[:, -T:].bool()
    last_row = mask[:, 0, -1, -T:]  # the last query is a real token under left padding: it sees every valid key
    if last_row.dtype == torch.bool:
        return last_row
    return last_row == 0  # additive float mask


def _slot_mask(layer: CompressedLayer, query: torch.Tensor) -> torch.Tensor | None:
    """(B, H, q, S) bool mask over the slots the layer returned, or None when every slot is visible."""
    q_len = query.shape[2]
    if q_len == 1 and not layer.has_invalid:
        return None
    if q_len == 1:
        valid = layer.slot_validity()  # (B, H_kv, S); decode steps need no positions
    else:
        valid, pos = layer.slot_view()  # (B, H_kv, S) each
    group = query.shape[1] // valid.shape[1]
    mask = valid[:, :, None, :]
    if q_len > 1:
        q_pos = pos[..., layer.new_slots]  # (B, H_kv, q)
        mask = mask & (pos[:, :, None, :] <= q_pos[..., None])
    return mask.repeat_interleave(group, dim=1)


def _in_cache_rotation(layer: CompressedLayer, query: torch.Tensor, key: torch.Tensor, inv_freq: torch.Tensor):
    """Move keys and queries from their original RoPE positions to their rank among the slots (StreamingLLM)."""
    valid, pos = layer.slot_view()  # (B, H_kv, S)
    S = pos.shape[-1]
    big = torch.iinfo(torch.long).max // 4
    order = torch.argsort(torch.where(valid, pos, big), dim=-1)
    rank = torch.empty_like(pos).scatter_(-1, order, torch.arange(S, device=pos.device).expand_as(pos))
    key = rotate(key, rank - pos, inv_freq)
    q_shift = (rank - pos)[..., layer.new_slots]  # (B, H_kv, q)
    group = query.shape[1] // key.shape[1]
    query = rotate(query, q_shift.repeat_interleave(group, dim=1), inv_freq)
    return query, key


def _row_slots(base, stock, module, query, key, value, visible, kernel=None, filled=None, **kwargs):
    """A decode query (B, H, 1, D) over the S slots of the engine's rows, ``visible`` (B, H_kv, S) bool; ``kernel``:
    the plugged-in decode attention (``engine.step.DecodeKernels.attention``), None for SDPA; ``filled``: (B,) long
    read bounds for the kernel, or None."""
    if base != "eager":  # sdpa, and flash_attention_2 (free and padding slots are scattered, not a prefix)
        return packed_sdpa(query, key, value, visible, kwargs.get("scaling", module.scaling), kernel, filled)
    mask = visible[:, :, None, :].repeat_interleave(query.shape[1] // visible.shape[1], dim=1)  # (B, H, 1, S)
    mask = torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill(
        ~mask, torch.finfo(query.dtype).min
    )
    return stock(module, query, key, value, mask, **kwargs)


def packed_sdpa(query, key, value, visible, scaling: float, kernel: Callable | None = None,
                filled: torch.Tensor | None = None):
    """SDPA of one decode query per head, (B, H, 1, D), over (B, H_kv, S, D) keys/values -> (B, 1, H, D).

    The H / H_kv query heads that share a KV head become that head's query rows, (B, H_kv, H / H_kv, D), so K/V are
    read as they are stored instead of copied H / H_kv times (``repeat_kv``); the (B, H_kv, 1, S) mask covers the rows.
    Transformers does the same in eager decode (``pack_gqa``) but not under ``torch.compile``. A plugged-in
    ``kernel`` (``engine.step.DecodeKernels.attention``) gets the packed rows first; where it returns None, SDPA.
    ``filled`` (B,) long, each row's highest written slot + 1, goes to the kernel as ``filled=`` when given (the
    engine gives it to its FlexAttention only); SDPA reads every slot (the mask alone hides the unfilled ones).
    """
    B, H, _, D = query.shape
    H_kv = key.shape[1]
    packed = query.reshape(B, H_kv, H // H_kv, D)
    out = None
    if kernel is not None:
        bound = {} if filled is None else {"filled": filled}
        out = kernel(packed, key, value, visible, scaling, **bound)
    if out is None:
        out = torch.nn.functional.scaled_dot_product_attention(
            packed, key, value, attn_mask=visible[:, :, None, :], scale=scaling
        )
    return out.reshape(B, H, 1, D).transpose(1, 2).contiguous(), None


def _make(base: str) -> Callable:
    def attention(module, query, key, value, attention_mask, **kwargs):
        """(B, H, q, D) queries over (B, H_kv, S, D) keys/values -> (B, q, H, D) output, as the stock function."""
        if base == "sdpa":
            stock = sdpa_attention_forward
        elif base == "eager":
            stock = _eager_for(module)
        else:
            stock = _flash_forward()
        slot_mask = kwargs.pop(SLOT_MASK_KWARG, None)
        kernel = kwargs.pop(SLOT_ATTENTION_KWARG, None)
        filled = kwargs.pop(SLOT_FILL_KWARG, None)
        ring = kwargs.pop(SLOT_QUERY_KWARG, None)
        attn_sum = kwargs.pop(SLOT_ATTN_SUM_KWARG, None)
        if ring is not None:
            queries, at = ring
            B, H, _, D = query.shape
            queries[module.layer_idx].scatter_(2, at[:, None, None, None].expand(B, H, 1, D), query)
        if slot_mask is not None:  # the engine's decode step: the rows' slots, masked per layer
            mask = slot_mask[module.layer_idx]
            if attn_sum is not None:
                attn_sum[module.layer_idx] += step_attention(query, key, mask, kwargs.get("scaling", module.scaling))
            return _row_slots(base, stock, module, query, key, value, mask, kernel, filled, **kwargs)
        layer = ACTIVE_LAYER.get()
        if layer is None or layer.layer_idx != getattr(module, "layer_idx", None):
            return stock(module, query, key, value, attention_mask, **kwargs)
        ACTIVE_LAYER.set(None)

        if layer.pending:  # full prefill attention, then selection
            out = stock(module, query, key, value, attention_mask, **kwargs)
            B, _, T, _ = query.shape
            valid = _key_validity(attention_mask, B, T, query.device)
            positions = kwargs.get("position_ids")
            if positions is None or positions.shape[-1] != T:
                positions = (valid.long().cumsum(-1) - 1).clamp(min=0)
            positions = positions.expand(B, T)
            layer.finish_prefill(query, valid, positions, module.scaling)
            return out

        if layer.aligned:  # slots == logical tokens: the stock mask is right
            return stock(module, query, key, value, attention_mask, **kwargs)

        if layer.method.positions == "in_cache":
            query, key = _in_cache_rotation(layer, query, key, layer.inv_freq)
        mask = _slot_mask(layer, query)
        if base == "eager" and mask is not None:
            mask = torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill(
                ~mask, torch.finfo(query.dtype).min
            )
        if base == "flash_attention_2" and mask is not None:
            # Scattered invalid slots (left-padded batches) are not a prefix: use SDPA with an explicit mask.
            return sdpa_attention_forward(module, query, key, value, mask, **kwargs)
        return stock(module, query, key, value, mask, **kwargs)

    attention.__name__ = f"{PREFIX}{base}"
    return attention


def register() -> None:
    """Register ``snapstream_<base>`` attention and mask functions (idempotent)."""
    for base in BASES:
        name = PREFIX + base
        if name not in AttentionInterface._global_mapping:
            AttentionInterface.register(name, _make(base))
            AttentionMaskInterface.register(name, _MASKS[base])


def attach(model) -> str:
    """Switch ``model`` to the SnapStream wrapper of its current attention implementation; returns its name.

    Harmless for uncompressed generation: with a plain cache the wrapper calls the stock function unchanged.
    """
    register()
    for module in model.modules():
        if hasattr(module, "layer_idx"):
            _eager_for(module)
    current = model.config._attn_implementation or "sdpa"
    base = current.removeprefix(PREFIX)
    if base not in BASES:
        raise ValueError(f"model.attn_implementation: {current!r} is not supported; use one of {BASES}")
    name = PREFIX + base
    if current != name:
        model.set_attn_implementation(name)
    return name
