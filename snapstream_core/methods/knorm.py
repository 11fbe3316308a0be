"""Knorm: keep the prompt tokens whose keys have the smallest L2 norm.

Devoto et al. 2024, "A Simple and Effective L2 Norm-Based Strategy for KV Cache Compression" (arXiv 2406.11430).
Scores as kvpress 0.5.5 ``presses/knorm_press.py``, ``KnormPress.score``: minus the norm of each post-RoPE key
(RoPE is a rotation, so the pre-RoPE norm), accumulated in at least float32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

from snapstream_core.methods.base import PrefillView
from snapstream_core.methods.scorer import PromptScorer


@dataclass(frozen=True)
class Knorm(PromptScorer):
    """:class:`PromptScorer`'s knobs (``prompt_budget`` or ``ratio``, ``sinks``, ``recent``); no query is read."""

    method: ClassVar[str] = "knorm"

    def score_buffers(self, prompt_len: int) -> tuple[int, int]:
        """The norms and their negation, (H_kv, T) each: counted as one (H, T)."""
        return (0, 1) if self.needs_selection(prompt_len) else (0, 0)

    def token_scores(self, view: PrefillView) -> torch.Tensor:
        """(B, H_kv, T): ``-||k||``, in the promotion of the keys' dtype and float32."""
        import torch

        keys = view.keys  # (B, H_kv, T, D)
        return -torch.linalg.vector_norm(keys, dim=-1, dtype=torch.promote_types(keys.dtype, torch.float32))
