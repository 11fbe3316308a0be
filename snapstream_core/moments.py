"""Running first and second moments of a prefill's pre-RoPE queries, summed chunk by chunk (ExpectedAttention).

ExpectedAttention scores keys by the attention a future query is expected to pay them, from the mean and covariance
of the prompt's queries before RoPE (kvpress ``expected_attention_press.py``, ``get_query_statistics``). A chunked
prefill never holds every query of a layer, so the moments are kept as running sums over the chunks: the count, the
sum and the sum of outer products, in float64 (B, H, D) and (B, H, D, D), whatever the prompt length. The attention
function sees post-RoPE queries; each chunk is rotated back by minus its positions (:func:`snapstream_core.rope.rotate`,
exact for the RoPE types whose angle is linear in the position, :data:`snapstream_core.rope.LINEAR_ROPE_TYPES`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from snapstream_core.rope import rotate


@dataclass
class QueryMoments:
    """Running sums over the counted query rows of a prefill.

    ``skip``: the leading tokens of each row never counted (the attention sinks; padding is never counted either).
    After :meth:`add`: ``count`` (B,) float64 rows counted, ``first`` (B, H, D) float64 sum of the pre-RoPE queries,
    ``second`` (B, H, D, D) float64 sum of their outer products.
    """

    skip: int
    inv_freq: torch.Tensor
    count: torch.Tensor | None = None
    first: torch.Tensor | None = None
    second: torch.Tensor | None = None

    def add(self, query: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor) -> None:
        """Count the rows of one chunk.

        Args:
            query: (B, H, q, D) post-RoPE queries of the chunk.
            positions: (B, q) long RoPE positions of its tokens (a left-padded row's first real token is 0).
            valid: (B, q) bool, False on padding.
        """
        B, H, q, D = query.shape
        weight = (valid & (positions >= self.skip)).to(torch.float64)  # (B, q)
        pre = rotate(query.to(torch.float64), -positions[:, None, :], self.inv_freq)  # (B, H, q, D)
        pre = pre * weight[:, None, :, None]
        first = pre.sum(dim=2)
        second = torch.einsum("bhqd,bhqe->bhde", pre, pre)
        count = weight.sum(dim=1)
        if self.count is None:
            self.count, self.first, self.second = count, first, second
        else:
            self.count, self.first, self.second = self.count + count, self.first + first, self.second + second

    def mean_cov(self, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean (B, H, D) and the covariance (B, H, D, D) of the counted rows (divided by their count, as
        kvpress's ``get_query_statistics``), in ``dtype``."""
        n = self.count.clamp(min=1)[:, None, None]
        mean = self.first / n
        cov = self.second / n[..., None] - mean[..., :, None] * mean[..., None, :]
        return mean.to(dtype), cov.to(dtype)

    @classmethod
    def of(cls, query: torch.Tensor, positions: torch.Tensor, valid: torch.Tensor, skip: int,
           inv_freq: torch.Tensor) -> QueryMoments:
        """The moments of a whole prefill in one pass (the one-pass prefill's attention sees every query)."""
        moments = cls(skip, inv_freq)
        moments.add(query, positions, valid)
        return moments


def future_rotation(inv_freq: torch.Tensor, start: torch.Tensor, n_future: int) -> torch.Tensor:
    """The RoPE rotation averaged over the next ``n_future`` positions of each row, (B, D, D) float32.

    RoPE at position p is ``R(p) = diag(cos) + diag(sin) P`` with ``P x = rotate_half(x)``; its mean over positions
    ``start .. start + n_future - 1`` (kvpress ``ExpectedAttentionPress.apply_avg_rope``). ``start`` (B,) long: each
    row's next position (its count of real tokens).
    """
    D = 2 * inv_freq.shape[0]
    device = start.device
    offsets = torch.arange(n_future, device=device)
    pos = (start[:, None] + offsets).to(torch.float32)  # (B, n)
    angles = pos[..., None] * inv_freq.to(device, torch.float32)  # (B, n, D/2)
    emb = torch.cat((angles, angles), dim=-1)  # (B, n, D)
    cos, sin = emb.cos().mean(dim=1), emb.sin().mean(dim=1)  # (B, D): the entries of the mean rotation
    half = D // 2
    P = torch.zeros(D, D, device=device)
    P[half:, :half] = torch.eye(half, device=device)
    P[:half, half:] = -torch.eye(half, device=device)
    return torch.diag_embed(cos) + sin[..., :, None] * P
