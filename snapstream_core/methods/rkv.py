"""R-KV: redundancy-aware KV compression for reasoning models, over the whole cache while decoding.

Cai et al. 2025, "R-KV: Redundancy-aware KV Cache Compression for Reasoning Models" (arXiv 2505.24133); we follow
Zefan-Cai/R-KV at d15c976, ``rkv/compression/r1_kv.py`` ``R1KV.update_kv`` and ``rkv/utils.py``
(``compute_attention_scores``, ``cal_similarity``), on the schedule of ``rkv/modeling.py`` (``divide_length``
128): every compaction keeps the ``budget - window`` best slots by ``mix_lambda * attention - (1 - mix_lambda) *
redundancy``, then the last ``window``. ``mix_lambda`` is 0.1 as TriAttention ran it (WeianMao/triattention
c3744ee6, ``scripts/worker.py`` and ``triattention/methods/baselines/r1_kv.py``); R-KV's own default is 0.07.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from snapstream_core.methods.base import TAG, check_positive
from snapstream_core.methods.decode_base import CompactView, DecodeMethod

if TYPE_CHECKING:
    import torch

    from snapstream_core.memory import Arch


@dataclass(frozen=True)
class RKV(DecodeMethod):
    """Knobs: ``budget``, ``interval``, ``window`` (α: queries scored with and recent slots kept), ``protect_prompt``
    (:class:`DecodeMethod`); ``kernel`` max-pooling width (odd); ``mix_lambda`` weight of attention against
    redundancy, in [0, 1]; ``threshold`` cosine similarity above which a key is a near-duplicate."""

    method: ClassVar[str] = "rkv"
    tag_order: ClassVar[tuple[str, ...]] = (
        "budget", "interval", "window", "kernel", "mix_lambda", "threshold", "protect_prompt", "positions"
    )
    kernel: int = 7
    mix_lambda: float = field(default=0.1, metadata={TAG: "lam"})
    threshold: float = field(default=0.5, metadata={TAG: "th"})

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("kernel", self.kernel)
        if self.kernel % 2 == 0:
            raise ValueError(f"compression.kernel: must be odd (pooling keeps the length), got {self.kernel}")
        for name in ("mix_lambda", "threshold"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ValueError(f"compression.{name}: must be a number in [0, 1], got {value!r}")

    @property
    def query_window(self) -> int:
        return self.window

    def key_pairs(self, n: int) -> int:
        """The cosine similarity of every pair of held keys (``cal_similarity``)."""
        return n * n

    def compact_scores(self, view: CompactView) -> torch.Tensor:
        from snapstream_core.methods.decode_scores import redundancy, scored_slots, window_attention

        attended, compared = scored_slots(self, view)
        attention = window_attention(view, attended, self.kernel)
        return attention * self.mix_lambda - redundancy(view, compared, self.threshold) * (1 - self.mix_lambda)

    def compaction_scratch(self, arch: Arch, slots: int) -> int:
        """The other layers' scores (in the keys' dtype) beside one layer's window attention, or beside its
        weighted attention (two arrays) and the pairwise redundancy of its keys (``key_pairs``: slots^2)."""
        from snapstream_core.memory import redundancy_bytes, window_attention_bytes

        per_layer = arch.n_kv_heads * slots * arch.dtype_bytes
        return (arch.n_layers - 1) * per_layer + max(window_attention_bytes(arch, slots, self.query_window),
                                                     2 * per_layer + redundancy_bytes(arch, slots))
