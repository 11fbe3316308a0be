"""Deterministic tracking of the tensor memory a piece of code allocates (CPU or any device), for memory checks.

``LiveBytes`` is a ``TorchDispatchMode``: every tensor an ATen op creates (not views, not in-place results) has its
storage counted once, while it lives (a weak reference to the storage subtracts it when freed). ``peak`` is the
most bytes live at once, counting only storages created inside the ``with`` block, so weights and inputs made before
are not counted. What it does not see: scratch buffers that a kernel allocates and frees inside one op (e.g. SDPA's
per-thread blocks) and allocator slack; unlike the resident set it does not depend on the allocator, other threads
or the machine.

    with LiveBytes() as mem:
        prefill_prompt(model, ids, method)
    mem.peak   # bytes
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    """Live and peak bytes of the tensor storages allocated by ATen ops inside the context."""

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._ids: set[int] = set()  # ids of the storages counted and still alive

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if any(r.alias_info is not None for r in func._schema.returns):
            return out  # a view or an in-place op: its storage is an input's (counted already, or made before)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self._count(t.untyped_storage())
        return out

    def _count(self, storage: torch.UntypedStorage) -> None:
        key = id(storage)
        if key in self._ids:
            return
        nbytes = storage.nbytes()
        self._ids.add(key)
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key, nbytes)

    def _free(self, key: int, nbytes: int) -> None:
        self._ids.discard(key)
        self.live -= nbytes

    def reset_peak(self) -> None:
        self.peak = self.live
