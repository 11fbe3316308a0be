"""Ring: a frozen prefix plus a ring of the latest ``ring`` tokens, allocated whole at prefill (``streaming_llm``,
``snapstream``, the prompt scorers with ``recent``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from snapstream_core.policies.base import StoragePolicy


@dataclass(frozen=True)
class RingPolicy(StoragePolicy):
    """``kept`` prompt entries, the first ``n_frozen`` of them the frozen prefix and the rest the ring's seed;
    ``ring`` slots after the prefix. Held after ``steps`` tokens: ``n_frozen + min(kept - n_frozen + steps, ring)``."""

    name: ClassVar[str] = "ring"
    n_frozen: int = 0
    ring: int = 1

    @property
    def frozen(self) -> int:
        return self.n_frozen

    @property
    def prefill_slots(self) -> int:
        """The prefix and the whole ring (one allocation for the whole generation)."""
        return self.n_frozen + self.ring

    def tokens_held(self, steps: int) -> int:
        return self.n_frozen + min(self.kept - self.n_frozen + steps, self.ring)

    def slots(self, max_new_tokens: int) -> int:
        """The prefix and the ring, whatever ``max_new_tokens``."""
        return self.prefill_slots

    @classmethod
    def layer_class(cls) -> type:
        from snapstream_core.ring_layer import RingLayer

        return RingLayer
