"""SnapKV's observation-window scores and the top-k keep, as pure tensor functions (no model, no cache).

Reference: SnapKV (Li et al. 2024, arXiv 2404.14469), FasterDecoding/SnapKV ``snapkv_utils.py``; the GQA handling
follows kvpress ``snapkv_press.py`` (scores averaged over each KV head's query group, KV kept per KV head, see
https://github.com/FasterDecoding/SnapKV/issues/22).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def window_attention(
    q_window: torch.Tensor, keys: torch.Tensor, scaling: float, key_valid: torch.Tensor | None = None
) -> torch.Tensor:
    """Softmax attention (fp32) of the last ``w`` queries over all ``T`` keys, causal inside the window.

    Args:
        q_window: (B, H, w, D) post-RoPE queries of the last ``w`` prompt positions.
        keys: (B, H_kv, T, D) post-RoPE keys; query head ``h`` reads KV head ``h // (H / H_kv)``.
        scaling: the attention scale.
        key_valid: (B, T) bool, False on padding (never attended); None means all valid.

    Returns:
        (B, H_kv, G, w, T) attention probabilities, G = H / H_kv; rows of padded queries are all zero.
    """
    B, H, w, D = q_window.shape
    H_kv, T = keys.shape[1], keys.shape[2]
    G = H // H_kv
    q = q_window.reshape(B, H_kv, G, w, D).float()
    logits = torch.einsum("bkgwd,bktd->bkgwt", q, keys.float()) * scaling
    q_pos = torch.arange(T - w, T, device=keys.device)
    visible = torch.arange(T, device=keys.device)[None, :] <= q_pos[:, None]  # (w, T) causal inside the window
    visible = visible[None, None, None]  # (1, 1, 1, w, T)
    if key_valid is not None:
        visible = visible & key_valid[:, None, None, None, :]
    logits = logits.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.nan_to_num(probs, nan=0.0)  # a padded window query attends to nothing


def snapkv_scores(
    q_window: torch.Tensor,
    keys: torch.Tensor,
    scaling: float,
    *,
    kernel: int = 7,
    pooling: str = "max",
    gqa_agg: str = "mean",
    key_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """SnapKV importance of every prefix key (the keys before the observation window).

    The window's attention is summed over its ``w`` queries, pooled along positions (kernel ``kernel``, stride 1,
    padding ``kernel // 2``) per query head, then aggregated over each KV head's group (``mean`` or ``max``).

    Args:
        q_window: (B, H, w, D); keys: (B, H_kv, T, D); key_valid: (B, T) bool or None.

    Returns:
        (B, H_kv, T - w) scores; padding positions are ``-inf``.
    """
    w = q_window.shape[2]
    T = keys.shape[2]
    B, H_kv = keys.shape[0], keys.shape[1]
    probs = window_attention(q_window, keys, scaling, key_valid)  # (B, H_kv, G, w, T)
    votes = probs.sum(dim=3)[..., : T - w]  # (B, H_kv, G, T - w)
    G = votes.shape[2]
    flat = votes.reshape(B * H_kv * G, 1, T - w)
    if pooling == "max":
        pooled = F.max_pool1d(flat, kernel_size=kernel, stride=1, padding=kernel // 2)
    elif pooling == "avg":
        pooled = F.avg_pool1d(flat, kernel_size=kernel, stride=1, padding=kernel // 2)
    else:
        raise ValueError(f"compression.pooling: must be 'max' or 'avg', got {pooling!r}")
    pooled = pooled.reshape(B, H_kv, G, T - w)
    if gqa_agg == "mean":  # GQA: mean over the group, as kvpress does
        scores = pooled.mean(dim=2)
    elif gqa_agg == "max":
        scores = pooled.amax(dim=2)
    else:
        raise ValueError(f"compression.gqa_agg: must be 'mean' or 'max', got {gqa_agg!r}")
    if key_valid is not None:
        scores = scores.masked_fill(~key_valid[:, None, : T - w], float("-inf"))
    return scores


def top_set(scores: torch.Tensor, n_keep: int, key_valid: torch.Tensor) -> torch.Tensor:
    """The ``n_keep`` positions of highest score per (row, KV head), in no particular order.

    Each row's valid tokens are ranked with ``torch.topk`` on that row's valid slice alone, as kvpress's
    ``ScorerPress.compress`` ranks (kvpress 0.5.5 ``presses/scorer_press.py``: ``scores.topk(n_kept, dim=-1)``), so an
    exact tie at the cutoff is broken as kvpress breaks it, and a left-padded row keeps what it keeps alone (the
    choice is a function of the row's own scores). A row with fewer valid tokens than ``n_keep`` keeps all of them and
    then its earliest padding.

    Args:
        scores: (B, H_kv, T) priorities; key_valid: (B, T) bool.

    Returns:
        (B, H_kv, n_keep) long positions.
    """
    B, H_kv, T = scores.shape
    if bool(key_valid.all()):  # one prefill row, or a batch of equal lengths: every row is its own valid slice
        return scores.topk(n_keep, dim=-1).indices
    rows = []
    for b in range(B):
        real = key_valid[b].nonzero().squeeze(-1)  # (n_valid,)
        k = min(n_keep, real.numel())
        kept = real[scores[b][:, real].topk(k, dim=-1).indices]  # (H_kv, k)
        pad = (~key_valid[b]).nonzero().squeeze(-1)[: n_keep - k]
        rows.append(torch.cat([kept, pad[None, :].expand(H_kv, -1)], dim=-1))
    return torch.stack(rows)


def keep_indices(scores: torch.Tensor, n_keep: int, n_frozen: int, key_valid: torch.Tensor) -> torch.Tensor:
    """Indices of the ``n_keep`` highest-priority tokens (:func:`top_set`), laid out for the cache.

    Args:
        scores: (B, H_kv, T) priorities; key_valid: (B, T) bool.

    Returns:
        (B, H_kv, n_keep) long indices: the first ``n_frozen`` are the frozen prefix (valid tokens in position order,
        then any padding), the rest seed the ring (padding first, so that it is overwritten first, then valid tokens in
        position order, the newest last).
    """
    B, H_kv, T = scores.shape
    kept = top_set(scores, n_keep, key_valid).sort(dim=-1).values  # (B, H_kv, n_keep) in position order
    # Which kept tokens are frozen and which seed the ring: by score, the earlier token first among equal scores (a
    # stable sort of the position-ordered set), so that the split too depends on the row's own scores only.
    by_score = torch.sort(scores.gather(-1, kept), dim=-1, descending=True, stable=True).indices
    top = kept.gather(-1, by_score)
    frozen, ring = top[..., :n_frozen], top[..., n_frozen:]
    valid = key_valid[:, None, :].expand(B, H_kv, T)
    big = T + 1
    f_valid = valid.gather(-1, frozen)
    frozen = frozen.gather(-1, torch.argsort(frozen + big * (~f_valid), dim=-1))
    r_valid = valid.gather(-1, ring)
    ring = ring.gather(-1, torch.argsort(ring + big * r_valid, dim=-1))
    return torch.cat([frozen, ring], dim=-1)
