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
    rank = candidate_rank(method, scores.masked_fill(~candidate, float("-inf")), view.held)
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


def topk_lengths(method: DecodeMethod, S: int) -> list[int]:
    """Lengths of the slot prefix the references run ``topk`` over, known before decoding: ``S - window`` for a
    full row (every compaction after a row's first), and for a prompt shorter than the budget the first compaction's
    ``held - window`` (that compaction is at the first position ``p = k * interval >= budget - 1``, with the
    ``p + 1`` tokens so far held)."""
    first = -(-(method.budget - 1) // method.interval) * method.interval + 1
    return sorted({S - method.window, min(first, S) - method.window})


def candidate_rank(method: DecodeMethod, scores: torch.Tensor, held: torch.Tensor) -> torch.Tensor:
    """(R, H_kv, S) long: each slot's place in the references' ``topk(budget - window)`` of ``scores`` (candidates
    only, the rest ``-inf``), ``S`` for slots outside it. ``topk`` breaks ties by its own algorithm, which depends on
    the input's length, so each row runs it over the slot prefix of the length the reference sees
    (:func:`topk_lengths`; a row whose length is not among them, the first compaction after a prompt cut, uses the
    full ``S - window``)."""
    S = scores.shape[-1]
    *shorter, full = topk_lengths(method, S)

    def ranks(n: int) -> torch.Tensor:
        k = min(method.budget - method.window, n)
        top = torch.topk(scores[..., :n], k, dim=-1).indices
        return torch.full_like(scores, S, dtype=torch.long).scatter(
            -1, top, torch.arange(k, device=top.device).expand_as(top))

    rank = ranks(full)
    for n in shorter:
        rank = torch.where((held == n + method.window)[:, None, None], ranks(n), rank)
    return rank


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
