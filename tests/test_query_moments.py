"""ExpectedAttention's running query moments: summed over chunks of post-RoPE queries, they equal the mean and
covariance of the pre-RoPE queries computed at once (kvpress's ``get_query_statistics``), padding and sinks left
out; and the averaged future rotation is the mean of RoPE's rotation matrices."""

from __future__ import annotations

import torch
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from snapstream_core.moments import QueryMoments, future_rotation
from tests.conftest import tiny_config


def test_chunked_moments_equal_the_pre_rope_mean_and_covariance():
    config = tiny_config()
    rotary = LlamaRotaryEmbedding(config)
    B, H, T, D, pad, skip = 2, 4, 70, 16, 9, 4
    gen = torch.Generator().manual_seed(0)
    pre = torch.randn(B, H, T, D, generator=gen) + 0.5
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[1, :pad] = False  # row 1 is left-padded
    positions = (valid.long().cumsum(-1) - 1).clamp(min=0)
    cos, sin = rotary(pre, positions)
    post, _ = apply_rotary_pos_emb(pre, pre, cos, sin)
    moments = QueryMoments(skip, rotary.inv_freq)
    for s in range(0, T, 32):
        moments.add(post[:, :, s : s + 32], positions[:, s : s + 32], valid[:, s : s + 32])
    mean, cov = moments.mean_cov(torch.float64)
    for b, first in ((0, skip), (1, pad + skip)):
        q = pre[b, :, first:].double()  # (H, n, D): the counted rows
        mu = q.mean(dim=1)
        centered = q - mu[:, None]
        torch.testing.assert_close(mean[b], mu, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(cov[b], centered.transpose(1, 2) @ centered / q.shape[1], rtol=1e-5, atol=1e-5)
    assert moments.count.tolist() == [T - skip, T - pad - skip]


def test_future_rotation_is_the_mean_rope_rotation():
    config = tiny_config()
    rotary = LlamaRotaryEmbedding(config)
    x = torch.randn(1, 1, 1, 16, generator=torch.Generator().manual_seed(1))
    start, n = 50, 7
    rotated = [apply_rotary_pos_emb(x, x, *rotary(x, torch.tensor([[p]])))[0] for p in range(start, start + n)]
    R = future_rotation(rotary.inv_freq, torch.tensor([start]), n)  # (1, D, D)
    torch.testing.assert_close(R[0] @ x[0, 0, 0], torch.stack(rotated).mean(0)[0, 0, 0], rtol=1e-5, atol=1e-6)
