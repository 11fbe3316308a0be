"""Bytes the ATen ops of a piece of code read and write (CPU or any device): the memory traffic a step-time model
charges for it.

``OpTraffic`` is a ``TorchDispatchMode``: each op adds the bytes of the tensor elements it reads (its tensor
arguments, as viewed: ``numel * element_size``) and writes (its tensor results); ``ops`` counts the ops. A view or
metadata op (its schema returns an alias that is not written: ``view``, ``expand``, ``select``) moves nothing and is
not counted. An upper bound of what a GPU moves (a fused kernel reads an input once for several ops; a cache may
serve a re-read), a lower bound of nothing: a kernel's own scratch traffic is not seen.

    with OpTraffic() as t:
        pick_rows(logits, rows, keys, steps)
    t.bytes   # read + written
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _bytes(tree) -> int:
    return sum(t.numel() * t.element_size() for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor))


class OpTraffic(TorchDispatchMode):
    """Bytes read and written by the ATen ops run inside the context (views excluded)."""

    def __init__(self):
        super().__init__()
        self.read = 0
        self.written = 0
        self.ops = 0

    @property
    def bytes(self) -> int:
        return self.read + self.written

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        returns = func._schema.returns
        if returns and all(r.alias_info is not None and not r.alias_info.is_write for r in returns):
            return out  # a view: no element moves
        self.ops += 1
        self.read += _bytes((args, kwargs or {}))
        self.written += _bytes(out)
        return out
