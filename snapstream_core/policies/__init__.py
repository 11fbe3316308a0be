"""Storage policies: where a method's KV entries live (docs/architecture.md, "Adding a method").

A method chooses one by name (``CompressionMethod.policy``) and only scores; the policy owns the geometry (slots,
tokens held, the memory terms of a row), its eager cache layer (:mod:`snapstream_core.layer`, one class per policy)
and the engine's per-row slot schedule (the layer's ``schedule``). Policies are built from plain numbers
(:meth:`CompressionMethod.storage`), never from the method object.
"""

from snapstream_core.policies.append import AppendPolicy
from snapstream_core.policies.base import StoragePolicy
from snapstream_core.policies.compacting import CompactingPolicy
from snapstream_core.policies.ragged import RaggedPolicy
from snapstream_core.policies.ring import RingPolicy

POLICIES: dict[str, type[StoragePolicy]] = {
    "append": AppendPolicy,
    "ring": RingPolicy,
    "compacting": CompactingPolicy,
    "ragged": RaggedPolicy,
}

__all__ = ["POLICIES", "AppendPolicy", "CompactingPolicy", "RaggedPolicy", "RingPolicy", "StoragePolicy"]
