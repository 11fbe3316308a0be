"""Scores the decode-time references compute at a compaction, over an engine row's fixed slots.

Both follow the official code step by step, with the scored slots of each row masked in instead of sliced out, so
one fixed shape serves every row:

- :func:`window_attention`: ``compute_attention_scores`` (GQA max of the logits over the query group, logits divided
  by ``sqrt(D)``), then the softmax of the last ``Q`` queries over the scored slots, averaged over the queries and
  max-pooled over slot order (R-KV ``rkv/utils.py`` and ``rkv/compression/r1_kv.py`` ``R1KV.update_kv``;
  TriAttention ``triattention/methods/baselines/snapkv.py`` ``SnapKV.update_kv``).
- :func:`redundancy`: ``cal_similarity`` (R-KV ``rkv/utils.py``): mean cosine similarity of each key with the keys of
  its set, the last near-duplicate (> ``threshold``, by slot index; the set's first slot when there is none) of every
  key zeroed, softmax over the set. The reference computes it from batch row 0 (``key_states[0]``) for every row;
  here each row uses its own keys.

Which slots a score runs over (:func:`scored_slots`): without ``protect_prompt``, the attention's softmax runs over
the held slots before the window and the redundancy over every held slot (``R1KV.update_kv``: ``softmax(attn[...,
:-window])``, ``cal_similarity(key_states)[:, :-window]``). With ``protect_prompt`` both run over the decode segment
only, the held slots that are neither prompt nor window: TriAttention's ``protect_prefill``
(WeianMao/triattention c3744ee6, ``triattention/methods/baselines/r1_kv.py`` ``R1KV._update_kv_protect_prefill``:
``compute_attention_scores(query_states, k_decode)``, ``cal_similarity(k_decode)`` with ``k_decode =
key_states[:, :, prefill_len:-window]``). The decode segment is contiguous in slot order (the prompt slots stay first,
the window last), so pooling with zeros outside it equals the reference's pooling of the segment alone.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from snapstream_core.attention_sums import prompt_attention, step_attention  # noqa: F401  (H2O's, re-exported)
from snapstream_core.methods.decode_base import CompactView, DecodeMethod


def before_window(view: CompactView, window: int) -> torch.Tensor:
    """(R, H_kv, S) bool: held slots before the last ``window`` (the references' ``[:, :, :-window]``)."""
    slot = torch.arange(view.valid.shape[-1], device=view.valid.device)
    return view.valid & (slot < view.held[:, None, None] - window)


def scored_slots(method: DecodeMethod, view: CompactView) -> tuple[torch.Tensor, torch.Tensor]:
    """(attention set, redundancy set), (R, H_kv, S) bool each: the slots :func:`window_attention` normalises over
    and the keys :func:`redundancy` compares (module docstring)."""
    from snapstream_core.methods.decode_base import slot_roles

    candidate, _, _ = slot_roles(method, view)
    if method.protect_prompt:
        return candidate, candidate
    return candidate, view.valid


def window_attention(view: CompactView, members: torch.Tensor, kernel: int) -> torch.Tensor:
    """(R, H_kv, S) pooled attention of the query ring on the slots ``members`` (R, H_kv, S) bool (0 elsewhere
    before pooling).

    ``view.queries`` (R, H, Q, D); ``view.keys`` (R, H_kv, S, D). Cast to the queries' dtype before pooling, as the
    reference does (``.to(query_states.dtype)``)."""
    q, k = view.queries, view.keys
    R, H, Q, D = q.shape
    H_kv = k.shape[1]
    logits = torch.matmul(q.view(R, H_kv, H // H_kv, Q, D), k.unsqueeze(2).transpose(3, 4)) / math.sqrt(D)
    logits = logits.max(dim=2).values  # (R, H_kv, Q, S): GQA max, as compute_attention_scores(pooling="max")
    mask = members[:, :, None, :]
    probs = torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1, dtype=torch.float32)
    mean = probs.mean(dim=-2).to(q.dtype)  # (R, H_kv, S); 0 outside the members
    # Probabilities are >= 0, so the zeros of the masked slots pool like max_pool1d's -inf padding.
    return F.max_pool1d(mean, kernel_size=kernel, padding=kernel // 2, stride=1)


def redundancy(view: CompactView, members: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """(R, H_kv, S) R-KV's redundancy of each slot of ``members`` (R, H_kv, S) bool, a contiguous run of held slots
    (softmax over them; junk elsewhere)."""
    k = view.keys
    S = k.shape[2]
    k_norm = k / (k.norm(dim=-1, keepdim=True) + 1e-8)
    sim = torch.matmul(k_norm, k_norm.transpose(-1, -2))  # (R, H_kv, S, S)
    pair = members[..., :, None] & members[..., None, :]
    eye = torch.eye(S, dtype=torch.bool, device=k.device)
    sim = sim.masked_fill(eye, 0.0).masked_fill(~pair, 0.0)
    slot = torch.arange(S, device=k.device)
    first = members.long().argmax(dim=-1, keepdim=True)  # (R, H_kv, 1): the set's index 0
    last = torch.where(sim > threshold, slot, first[..., None]).max(dim=-1).values  # (R, H_kv, S)
    sim = sim.scatter(-1, last[..., None], 0.0)
    count = members.sum(dim=-1, keepdim=True).clamp(min=1).to(sim.dtype)  # (R, H_kv, 1)
    mean = sim.sum(dim=-2) / count  # mean over the set's rows
    return torch.softmax(mean.masked_fill(~members, float("-inf")), dim=-1)
