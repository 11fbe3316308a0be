"""``CompressedCache``: a transformers ``Cache`` whose layers apply a compression method, usable with ``generate``."""

from __future__ import annotations

from contextvars import ContextVar

import torch
from transformers.cache_utils import Cache

from snapstream_core.layer import CompressedLayer, layer_for
from snapstream_core.methods.base import CompressionMethod
from snapstream_core.stats import KVStats

# The layer whose ``update`` ran last in this context: the registered attention function, called right after
# ``update`` in the same attention module, picks it up to build masks and run the prefill selection.
# Why this is safe: transformers calls ``cache.update`` and then the attention function of the same module, with no
# other layer in between (each attention module does both in one ``forward``); the attention function checks the
# layer index against ``module.layer_idx`` and clears the variable, so a stale value is never used, and a
# ``ContextVar`` is per thread and per asyncio task, so concurrent generations in one process cannot see each other's
# layer. The engine's decode step does not use it.
ACTIVE_LAYER: ContextVar[CompressedLayer | None] = ContextVar("snapstream_active_layer", default=None)


class CompressedCache(Cache):
    """One :class:`CompressedLayer` per decoder layer (the class of the method's storage policy, :func:`layer_for`),
    sharing one :class:`KVStats`.

    Create it with :func:`snapstream_core.make_cache` (which checks the model), pass it to
    ``model.generate(past_key_values=cache)``, and read ``cache.stats`` afterwards. One cache serves one ``generate``
    call.
    """

    def __init__(self, method: CompressionMethod, n_layers: int, inv_freq: torch.Tensor | None = None):
        self.method = method
        self.inv_freq = inv_freq
        self.stats = KVStats(n_layers=n_layers)
        super().__init__(layers=[layer_for(method, i, self.stats, inv_freq) for i in range(n_layers)])

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        layer = self.layers[layer_idx]
        ACTIVE_LAYER.set(layer)
        return layer.update(key_states, value_states, *args, **kwargs)

    def __repr__(self) -> str:
        return f"CompressedCache({self.method!r}, layers={len(self.layers)})"
