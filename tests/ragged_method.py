"""A test-only method with ragged budgets, for the ``ragged`` storage policy: SnapKV's scores, but head ``h`` of layer
``l`` keeps ``prompt_budget + spread * s(h, H_kv) + shift * s(l, L)`` prompt tokens, ``s(i, n) = 2i - (n - 1)``
over ``n - 1`` (so -1 and +1 on two heads or layers: the counts average to ``prompt_budget`` on ``tiny_llama``, 2
layers of 2 KV heads). Not registered: the registry-driven tests add it beside the registered methods."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from snapstream_core.methods.base import PrefillView, Selection
from snapstream_core.methods.snapkv import SnapKV
from snapstream_core.selection import top_set


def _side(i: int, n: int) -> int:
    return 0 if n < 2 else (2 * i - (n - 1)) // (n - 1)


@dataclass(frozen=True)
class HeadCounts(SnapKV):
    method: ClassVar[str] = "head_counts"
    policy: ClassVar[str] = "ragged"
    spread: int = 8
    shift: int = 4

    def widest(self) -> int:
        return self.prompt_budget + self.spread + self.shift

    def needs_selection(self, prompt_len: int) -> bool:
        return prompt_len > self.widest()

    def kept(self, prompt_len: int) -> int:
        return self.prompt_budget if self.needs_selection(prompt_len) else prompt_len

    def kept_cap(self, prompt_len: int) -> int:
        return self.widest() if self.needs_selection(prompt_len) else prompt_len

    def select(self, view: PrefillView) -> Selection:
        """(B, H_kv) counts; each head's best ``count`` tokens in position order, padded with its first."""
        assert view.layer_idx >= 0 and view.n_layers > 0, "the layer passes its index and the layer count"
        scores = self.priorities(view)  # (B, H_kv, T)
        B, H_kv, T = scores.shape
        layer = self.shift * _side(view.layer_idx, view.n_layers)
        counts = torch.tensor([self.prompt_budget + self.spread * _side(h, H_kv) + layer for h in range(H_kv)])
        counts = counts.expand(B, H_kv).contiguous()
        n_keep = int(counts.max())
        # best first, the earlier token first among equal scores (max pooling ties: a row's choice must not depend
        # on its left padding)
        best = top_set(scores, n_keep, view.key_valid).sort(dim=-1).values
        top = best.gather(-1, torch.sort(scores.gather(-1, best), dim=-1, descending=True, stable=True).indices)
        kept = torch.arange(n_keep) < counts[..., None]
        idx = torch.where(kept, top, T).sort(dim=-1).values  # the kept in position order, padding (T) last
        idx = torch.where(idx < T, idx, idx[..., :1])
        return Selection(scores, n_keep=n_keep, n_frozen=n_keep, indices=idx, counts=counts)
