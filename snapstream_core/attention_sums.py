"""Attention summed per key, H2O's scores (``methods/h2o.py``): the prompt's at prefill and one decode query's at a
step. Torch only, below the cache layers, the prefill and the registered attention that call it and the methods that
read it (no import of either)."""

from __future__ import annotations

import torch

PROMPT_SCRATCH = 1 << 21  # query rows x keys of fp32 logits per head the prompt's attention sums hold at once


def prompt_block(prompt_len: int) -> int:
    """Query rows per block of the prompt's attention sums over ``prompt_len`` keys: ``PROMPT_SCRATCH / T``, between
    1 and 64."""
    return max(1, min(64, PROMPT_SCRATCH // max(prompt_len, 1)))


def step_attention(query: torch.Tensor, key: torch.Tensor, visible: torch.Tensor, scaling: float) -> torch.Tensor:
    """(B, H_kv, S) float32: the softmax weights one decode query per head, ``query`` (B, H, 1, D), gives the slots
    ``key`` (B, H_kv, S, D) where ``visible`` (B, H_kv, S) bool, averaged over the query heads of each KV head (0 on
    hidden slots): what H2O adds to its running sum at a step (``methods/h2o.py``)."""
    B, H, _, D = query.shape
    H_kv = key.shape[1]
    logits = torch.matmul(query.reshape(B, H_kv, H // H_kv, D).float(), key.float().transpose(-1, -2)) * scaling
    probs = torch.softmax(logits.masked_fill(~visible[:, :, None, :], float("-inf")), dim=-1)
    return probs.mean(dim=2)


def prompt_attention(query: torch.Tensor, keys: torch.Tensor, scaling: float) -> torch.Tensor:
    """(B, H_kv, n) float32: the causal softmax weights of the prompt queries at positions ``n - q .. n - 1``,
    ``query`` (B, H, q, D), on the prompt keys at positions ``0 .. n - 1``, ``keys`` (B, H_kv, n, D), summed over the
    queries and averaged over the query heads of each KV head: H2O's first ``_update_hh_score``, added chunk by chunk
    by the layer-major prefill. Computed :func:`prompt_block` query rows at a time."""
    B, H, q, D = query.shape
    H_kv, n = keys.shape[1], keys.shape[2]
    first = n - q
    k = keys.float().transpose(-1, -2)[:, :, None]  # (B, H_kv, 1, D, n)
    queries = query.view(B, H_kv, H // H_kv, q, D)
    total = torch.zeros(B, H_kv, n, dtype=torch.float32, device=keys.device)
    key_pos = torch.arange(n, device=keys.device)
    block = prompt_block(n)
    for s in range(0, q, block):
        e = min(s + block, q)
        logits = torch.matmul(queries[:, :, :, s:e].float(), k)  # (B, H_kv, G, e - s, n)
        future = key_pos[None, :] > first + torch.arange(s, e, device=keys.device)[:, None]  # (e - s, n)
        probs = torch.softmax(logits.mul_(scaling).masked_fill_(future, float("-inf")), dim=-1)
        total += probs.sum(dim=3).mean(dim=2)
        del logits, probs
    return total
