"""KeyDiff: keep the prompt tokens whose keys point away from the layer's average key direction.

Park et al. 2025, "KeyDiff: Key Similarity-Based KV Cache Eviction for Long-Context LLM Inference in
Resource-Constrained Environments" (arXiv 2504.15364). Scores as kvpress 0.5.5 ``presses/keydiff_press.py``,
``KeyDiffPress.score`` (the whole prompt at once; the paper's block-wise eviction is kvpress's ``BlockPress``): the
anchor is the mean of the unit-normalised keys of each KV head, and a token scores minus its key's cosine similarity
to it. Padding is left out of the anchor, so a row scores the same alone or in a left-padded batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

from snapstream_core.methods.base import PrefillView
from snapstream_core.methods.scorer import PromptScorer


@dataclass(frozen=True)
class KeyDiff(PromptScorer):
    """:class:`PromptScorer`'s knobs (``prompt_budget`` or ``ratio``, ``sinks``, ``recent``); no query is read."""

    method: ClassVar[str] = "keydiff"

    def score_buffers(self, prompt_len: int) -> tuple[int, int]:
        """The unit keys, their masked copy, and cosine similarity's two (H_kv, T, D) temporaries."""
        return (4, 0) if self.needs_selection(prompt_len) else (0, 0)

    def token_scores(self, view: PrefillView) -> torch.Tensor:
        """(B, H_kv, T): ``-cos(k, anchor)``, anchor (B, H_kv, 1, D) the mean of ``k / ||k||`` over the row's real
        tokens."""
        import torch.nn.functional as F

        keys = view.keys  # (B, H_kv, T, D)
        valid = view.key_valid[:, None, :, None]  # (B, 1, T, 1)
        unit = F.normalize(keys, p=2, dim=-1).masked_fill(~valid, 0.0)
        count = view.key_valid.sum(-1).clamp(min=1)[:, None, None, None].to(unit.dtype)
        anchor = unit.sum(dim=2, keepdim=True) / count
        return -F.cosine_similarity(keys, anchor, dim=-1)
