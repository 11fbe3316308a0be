"""TOVA: keep the prompt tokens the last prompt token attends to most, averaged over every query head.

Oren et al. 2024, "Transformers are Multi-State RNNs" (arXiv 2401.06104). Scores as kvpress 0.5.5
``presses/tova_press.py``, ``TOVAPress.score``: the softmax attention of the last query over the prompt, averaged
over all query heads (not per KV group), so every KV head keeps the same positions; the last token itself is always
kept (kvpress pads its score with the maximum + 1; TOVA's ``tova_cache.py`` never enforces it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

from snapstream_core.methods.base import PrefillView
from snapstream_core.methods.scorer import PromptScorer


@dataclass(frozen=True)
class TOVA(PromptScorer):
    """:class:`PromptScorer`'s knobs (``prompt_budget`` or ``ratio``, ``sinks``, ``recent``); reads the post-RoPE
    query of the last prompt token."""

    method: ClassVar[str] = "tova"
    tail: ClassVar[int] = 1  # the last token, whose query scores the others

    def score_buffers(self, prompt_len: int) -> tuple[int, int]:
        """The mean over heads and its expansion, beside the window scores of one query."""
        return (0, 1) if self.needs_selection(prompt_len) else (0, 0)

    def query_rows(self, prompt_len: int) -> int:
        """The last query (none when the prompt fits the budget)."""
        return 1 if self.needs_selection(prompt_len) else 0

    def token_scores(self, view: PrefillView) -> torch.Tensor:
        """(B, H_kv, T): the last query's attention (fp32) averaged over the H query heads, ``+inf`` on the last
        token."""

        from snapstream_core.selection import window_attention

        probs = window_attention(view.query[:, :, -1:], view.keys, view.scaling, view.key_valid)  # (B, H_kv, G, 1, T)
        B, H_kv = probs.shape[:2]
        scores = probs.reshape(B, -1, probs.shape[-1]).mean(dim=1)  # (B, T): mean over all H query heads
        scores[:, -1] = float("inf")
        return scores[:, None, :].expand(B, H_kv, -1)
