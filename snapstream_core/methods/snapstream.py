"""SnapStream: SnapKV selection of the prompt at prefill, frozen, plus a StreamingLLM ring of the latest decoded
tokens, in a fixed-size cache of ``prompt_budget + recent`` entries per layer and KV head (with ``ratio``: the
prompt's own budget, :meth:`SnapKV.budget`, ``+ recent``).

The SnapStream recipe (arXiv 2511.03092). ``sinks`` first prompt tokens are always kept by the selection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from snapstream_core.methods.base import PrefillView, Selection, check_positive
from snapstream_core.methods.snapkv import SnapKV


@dataclass(frozen=True)
class SnapStream(SnapKV):
    """SnapKV's knobs (``prompt_budget`` or ``ratio``, ``window, kernel, pooling, gqa_agg``), ``sinks`` (default 4)
    and ``recent`` ring slots for decoded tokens."""

    method: ClassVar[str] = "snapstream"
    policy: ClassVar[str] = "ring"
    tag_order: ClassVar[tuple[str, ...]] = (
        "prompt_budget", "recent", "window", "kernel", "pooling", "gqa_agg", "sinks", "positions", "ratio"
    )
    sinks: int = 4
    recent: int = 256  # as conf/compression/snapstream.yaml and the README

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("recent", self.recent)

    @classmethod
    def from_bench(cls, knobs: Mapping[str, Any]) -> SnapStream:
        """SnapKV's, with the bench's ``sinks`` (always kept by the selection)."""
        method = super().from_bench(knobs)
        return replace(method, sinks=knobs["sinks"]) if "sinks" in knobs else method

    @property
    def ring(self) -> int:
        return self.recent

    def select(self, view: PrefillView) -> Selection:
        return SnapKV.select(self, view)
