"""Compaction of the engine's rows for the decode-time methods (``methods.decode_base.DecodeMethod``).

:func:`compact_order` is the keep rule, a pure function of one layer's :class:`CompactView`: per (row, KV head) the
protected prompt slots (slot order), the best ``kept - window - protected`` candidates by the method's
``compact_scores`` (score order; ties: the lower slot first), then the last ``window`` held slots (slot order) -- the
layout the references store (R-KV ``R1KV.update_kv``: ``cat([gather(topk), window])``). The rest follows, so the
result is a permutation of the S slots and the first ``kept`` of it are what the row holds after the compaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from snapstream_core.methods.decode_base import CompactView

if TYPE_CHECKING:
    from snapstream_core.methods.base import PrefillView
    from snapstream_core.methods.decode_base import DecodeMethod


def slot_roles(method: DecodeMethod, view: CompactView) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(candidate, protected, window) (R, H_kv, S) bool each: the held slots that compete, the held prompt slots
    that never leave (``protect_prompt``), and the last ``window`` held slots."""
    S = view.valid.shape[-1]
    slot = torch.arange(S, device=view.valid.device)
    held = view.held[:, None, None]
    window = view.valid & (slot >= held - method.window)
    if method.protect_prompt:
        protected = view.valid & ~window & (view.positions < view.prompt_len[:, None, None])
    else:
        protected = torch.zeros_like(view.valid)
    return view.valid & ~window & ~protected, protected, window


def compact_orders(method: DecodeMethod, views: list[CompactView]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`compact_order` of every layer, the scores from :meth:`DecodeMethod.compact_scores_layers` (a method
    may choose across layers)."""
    return [compact_order(method, view, scores) for view, scores in zip(views, method.compact_scores_layers(views))]


def compact_order(method: DecodeMethod, view: CompactView,
                  scores: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """-> ``order`` (R, H_kv, S) long, a permutation of the slots, and ``kept`` (R,) long: after the compaction
    row r's slot j holds what slot ``order[r, h, j]`` held, and its first ``kept[r]`` slots are held.

    ``kept = min(held, cap)`` with ``cap = max(budget, protected + window)`` (:meth:`DecodeMethod.cap`).
    ``scores`` (R, H_kv, S): the layer's priorities when already computed (:func:`compact_orders`)."""
    candidate, protected, window = slot_roles(method, view)
    S = candidate.shape[-1]
    scores = (method.compact_scores(view) if scores is None else scores).float()
    ranked = torch.sort(scores.masked_fill(~candidate, float("-inf")), dim=-1, descending=True, stable=True).indices
    is_cand = candidate.gather(-1, ranked)
    rank_sorted = is_cand.long().cumsum(-1) - 1  # rank among candidates, at each sorted place
    rank = torch.empty_like(ranked).scatter_(-1, ranked, rank_sorted)  # (R, H_kv, S): each slot's candidate rank
    n_protected = protected.long().sum(-1)  # (R, H_kv)
    cap = torch.clamp(n_protected + method.window, min=method.budget)
    kept = torch.minimum(view.held[:, None], cap)  # (R, H_kv)
    n_top = (kept - method.window - n_protected)[..., None]
    slot = torch.arange(S, device=scores.device).expand_as(rank)
    key = torch.full_like(rank, 3 * S) + slot  # dropped and free slots last
    key = torch.where(window, 2 * S + slot, key)
    key = torch.where(candidate & (rank < n_top), S + rank, key)
    key = torch.where(protected, slot, key)
    order = torch.argsort(key, dim=-1)
    return order, kept[:, 0]


def prefill_priorities(method: DecodeMethod, view: PrefillView) -> torch.Tensor:
    """(B, H_kv, T) priorities of the prompt cut at prefill (``T >= budget``): the method's compaction scores on
    the candidates, ``+inf`` on the last ``window`` tokens, ``-inf`` on padding. The query ring is the prompt's
    last ``query_window`` post-RoPE queries (R-KV seeds its ``query_cache`` with them)."""
    B, H_kv, T, _ = view.keys.shape
    Q = method.query_window
    positions = torch.arange(T, device=view.keys.device).expand(B, H_kv, T)
    valid = view.key_valid[:, None, :].expand(B, H_kv, T)
    held = view.key_valid.long().sum(-1)
    cv = CompactView(
        keys=view.keys, values=None, positions=positions, valid=valid, held=held,
        prompt_len=torch.full_like(held, T), queries=view.query[:, :, -Q:] if Q else None,
        scaling=view.scaling, inv_freq=None, layer_idx=-1,
    )
    candidate, _, window = slot_roles(method, cv)
    scores = method.compact_scores(cv).float().masked_fill(~candidate, float("-inf"))
    return scores.masked_fill(window, float("inf"))
