"""A deterministic tracker of the tensor memory allocated under it (CPU or any device): live and peak bytes.

Every tensor an operator returns under :class:`AllocTracker` is counted once per storage (views share theirs) and
released when the last tensor of that storage dies (CPython frees it at once: deterministic, unlike RSS). Tensors
made before the tracker (the weights) are not counted; scratch buffers a kernel allocates and frees inside one
operator are not seen.
"""

from __future__ import annotations

import weakref

from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class AllocTracker(TorchDispatchMode):
    def __init__(self, *existing) -> None:
        """``existing``: modules or tensors made before, whose storages (and views of them) are never counted."""
        super().__init__()
        self.live = 0
        self.peak = 0
        self._storages: dict[int, list] = {}  # storage data_ptr -> [bytes, tensors alive]
        self._existing: set[int] = set()
        for obj in existing:
            tensors = [*obj.parameters(), *obj.buffers()] if hasattr(obj, "parameters") else [obj]
            self._existing.update(t.untyped_storage().data_ptr() for t in tensors)

    def _release(self, key: int) -> None:
        entry = self._storages.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.live -= entry[0]
            del self._storages[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if not hasattr(t, "untyped_storage"):
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key == 0 or key in self._existing:
                continue
            entry = self._storages.get(key)
            if entry is None:
                entry = self._storages[key] = [storage.nbytes(), 0]
                self.live += entry[0]
                self.peak = max(self.peak, self.live)
            entry[1] += 1
            weakref.finalize(t, self._release, key)
        return out
