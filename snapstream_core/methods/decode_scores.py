"""Scores the decode-time references compute at a compaction, over an engine row's fixed slots.

Both follow the official code step by step, with the held slots of each row masked in instead of sliced out, so one
fixed shape serves every row:

- :func:`window_attention`: ``compute_attention_scores`` (GQA max of the logits over the query group, logits divided
  by ``sqrt(D)``), then the softmax of the last ``Q`` queries over the held slots before the window, averaged over
  the queries and max-pooled over slot order (R-KV ``rkv/utils.py`` and ``rkv/compression/r1_kv.py``
  ``R1KV.update_kv``; TriAttention ``triattention/methods/baselines/snapkv.py`` ``SnapKV.update_kv``).
- :func:`redundancy`: ``cal_similarity`` (R-KV ``rkv/utils.py``): mean cosine similarity of each key with the held
  keys, the last near-duplicate (> ``threshold``, by slot index) of every key zeroed, softmax over the held slots.
  The reference computes it from batch row 0 (``key_states[0]``) for every row; here each row uses its own keys.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from snapstream_core.methods.decode_base import CompactView


def before_window(view: CompactView, window: int) -> torch.Tensor:
    """(R, H_kv, S) bool: held slots before the last ``window`` (the references' ``[:, :, :-window]``)."""
    slot = torch.arange(view.valid.shape[-1], device=view.valid.device)
    return view.valid & (slot < view.held[:, None, None] - window)


def window_attention(view: CompactView, window: int, kernel: int) -> torch.Tensor:
    """(R, H_kv, S) pooled attention of the query ring on the slots before the window (0 elsewhere before pooling).

    ``view.queries`` (R, H, Q, D); ``view.keys`` (R, H_kv, S, D). Cast to the queries' dtype before pooling, as the
    reference does (``.to(query_states.dtype)``)."""
    q, k = view.queries, view.keys
    R, H, Q, D = q.shape
    H_kv = k.shape[1]
    logits = torch.matmul(q.view(R, H_kv, H // H_kv, Q, D), k.unsqueeze(2).transpose(3, 4)) / math.sqrt(D)
    logits = logits.max(dim=2).values  # (R, H_kv, Q, S): GQA max, as compute_attention_scores(pooling="max")
    mask = before_window(view, window)[:, :, None, :]
    probs = torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1, dtype=torch.float32)
    mean = probs.mean(dim=-2).to(q.dtype)  # (R, H_kv, S); 0 on the window and free slots
    # Probabilities are >= 0, so the zeros of the masked slots pool like max_pool1d's -inf padding.
    return F.max_pool1d(mean, kernel_size=kernel, padding=kernel // 2, stride=1)


def redundancy(view: CompactView, threshold: float = 0.5) -> torch.Tensor:
    """(R, H_kv, S) R-KV's redundancy of each held slot (softmax over the held slots; junk past them)."""
    k = view.keys
    S = k.shape[2]
    held = view.valid  # (R, H_kv, S)
    k_norm = k / (k.norm(dim=-1, keepdim=True) + 1e-8)
    sim = torch.matmul(k_norm, k_norm.transpose(-1, -2))  # (R, H_kv, S, S)
    pair = held[..., :, None] & held[..., None, :]
    eye = torch.eye(S, dtype=torch.bool, device=k.device)
    sim = sim.masked_fill(eye, 0.0).masked_fill(~pair, 0.0)
    slot = torch.arange(S, device=k.device)
    last = torch.where(sim > threshold, slot, torch.zeros_like(slot)).max(dim=-1).values  # (R, H_kv, S)
    sim = sim.scatter(-1, last[..., None], 0.0)
    mean = sim.sum(dim=-2) / view.held[:, None, None].to(sim.dtype)  # mean over the held rows
    return torch.softmax(mean.masked_fill(~held, float("-inf")), dim=-1)
