"""ExpectedAttention: keep the prompt tokens that future queries are expected to attend to most.

Devoto et al. 2025, "Expected Attention: KV Cache Compression by Estimating Attention from Future Queries
Distribution" (arXiv 2510.00636). Scores as kvpress 0.5.5 ``presses/expected_attention_press.py``,
``ExpectedAttentionPress.score`` with its defaults (covariance and value norms on, epsilon 0):

1. the mean ``mu`` (B, H, D) and covariance ``S`` (B, H, D, D) of the prompt's pre-RoPE queries, the first ``sinks``
   tokens left out (``get_query_statistics``); here from running sums over the prefill's chunks
   (:class:`snapstream_core.moments.QueryMoments`), so the chunked prefill stays bounded;
2. both moved by the RoPE rotation ``R`` averaged over the next ``n_future`` positions (``apply_avg_rope``):
   ``mu <- R mu``, ``S <- R S R^T``;
3. the logit a future query is expected to give key ``k``: ``mu.k / sqrt(D) + k^T S k / (2 D)``, softmax over the
   non-sink tokens, averaged over each KV head's query group, times ``||v||``;
4. the sinks are always kept (kvpress pads them with the maximum + 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

from snapstream_core.methods.base import PrefillView, check_positive
from snapstream_core.methods.scorer import PromptScorer


@dataclass(frozen=True)
class ExpectedAttention(PromptScorer):
    """:class:`PromptScorer`'s knobs (``prompt_budget`` or ``ratio``, ``recent``), ``sinks`` (default 4, kvpress's
    ``n_sink``: kept, and left out of the query moments and of the softmax) and ``n_future`` (kvpress's
    ``n_future_positions``) future positions the RoPE rotation is averaged over."""

    method: ClassVar[str] = "expected_attention"
    reads_rope: ClassVar[bool] = True
    tag_order: ClassVar[tuple[str, ...]] = ("prompt_budget", "recent", "sinks", "n_future", "positions", "ratio")
    sinks: int = 4
    n_future: int = 512

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("n_future", self.n_future)

    def score_buffers(self, prompt_len: int) -> tuple[int, int]:
        """One group member's ``S k`` and its product with the keys, (H_kv, T, D) each; the logits, their masked
        copy, the softmax and its cleaned copy, (H, T) each."""
        return (2, 4) if self.needs_selection(prompt_len) else (0, 0)

    def query_moments(self, prompt_len: int) -> int | None:
        """The sinks are left out of the moments (none are read when the prompt fits the budget)."""
        return self.sinks if self.needs_selection(prompt_len) else None

    def token_scores(self, view: PrefillView) -> torch.Tensor:
        """(B, H_kv, T): expected attention times ``||v||`` (fp32); the sinks are set to ``+inf`` by ``select``."""
        import torch

        from snapstream_core.moments import future_rotation

        keys, values, valid = view.keys.float(), view.values.float(), view.key_valid  # (B, H_kv, T, D), (B, T)
        B, H_kv, T, D = keys.shape
        mean, cov = view.moments.mean_cov()  # (B, H, D), (B, H, D, D)
        H = mean.shape[1]
        G = H // H_kv
        R = future_rotation(view.inv_freq, valid.sum(-1), self.n_future).to(keys.device)  # (B, D, D)
        mean = torch.einsum("bij,bhj->bhi", R, mean).reshape(B, H_kv, G, D)
        cov = (R[:, None] @ cov @ R[:, None].transpose(-1, -2)).reshape(B, H_kv, G, D, D)
        logits = torch.einsum("bkgd,bktd->bkgt", mean, keys) / math.sqrt(D)  # (B, H_kv, G, T)
        for g in range(G):  # k^T S k, one query head of each group at a time: (B, H_kv, T, D) temporaries
            spread = keys @ cov[:, :, g]  # (B, H_kv, T, D): (S k)^T, S symmetric
            logits[:, :, g] += (spread * keys).sum(-1) / D / 2
        rank = valid.long().cumsum(-1) - 1
        scored = (valid & (rank >= self.sinks))[:, None, None, :]  # the softmax runs over the non-sink tokens
        probs = torch.softmax(logits.masked_fill(~scored, float("-inf")), dim=-1)
        probs = torch.nan_to_num(probs, nan=0.0).mean(dim=2)  # (B, H_kv, T): mean over the query group
        return probs * torch.linalg.vector_norm(values, dim=-1)
