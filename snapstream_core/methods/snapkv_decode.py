"""Decode-time SnapKV: SnapKV's pooled window attention, applied to the whole cache every ``interval`` tokens.

The baseline both R-KV and TriAttention call "SnapKV" (WeianMao/triattention c3744ee6,
``triattention/methods/baselines/snapkv.py`` ``SnapKV.update_kv``; R-KV's ``rkv/compression/snapkv.py``): the last
``window`` (8) queries' softmax over the held slots before the window, averaged, max-pooled (kernel 7); the best
``budget - window`` slots and the window are kept, so the budget covers the decoded tokens too. The prompt-only
method is ``snapkv``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from snapstream_core.methods.base import check_positive
from snapstream_core.methods.decode_base import CompactView, DecodeMethod

if TYPE_CHECKING:
    import torch

    from snapstream_core.memory import Arch


@dataclass(frozen=True)
class SnapKVDecode(DecodeMethod):
    """Knobs: ``budget``, ``interval``, ``window``, ``protect_prompt`` (:class:`DecodeMethod`); ``kernel``
    max-pooling width (odd)."""

    method: ClassVar[str] = "snapkv_decode"
    tag_order: ClassVar[tuple[str, ...]] = ("budget", "interval", "window", "kernel", "protect_prompt", "positions")
    kernel: int = 7

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("kernel", self.kernel)
        if self.kernel % 2 == 0:
            raise ValueError(f"compression.kernel: must be odd (pooling keeps the length), got {self.kernel}")

    @property
    def query_window(self) -> int:
        return self.window

    def compact_scores(self, view: CompactView) -> torch.Tensor:
        from snapstream_core.methods.decode_scores import scored_slots, window_attention

        return window_attention(view, scored_slots(self, view)[0], self.kernel)

    def compaction_scratch(self, arch: Arch, slots: int) -> int:
        """The other layers' scores (in the keys' dtype) beside one layer's window attention."""
        from snapstream_core.memory import window_attention_bytes

        held = (arch.n_layers - 1) * arch.n_kv_heads * slots * arch.dtype_bytes
        return held + window_attention_bytes(arch, slots, self.query_window)
